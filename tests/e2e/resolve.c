/* getaddrinfo(3) client for the e2e suite, built with musl-gcc -static:
 * prints one address per line for argv[1] (AF_UNSPEC, as applications ask). */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int main(int argc, char **argv)
{
	struct addrinfo hints, *res, *p;
	char buf[INET6_ADDRSTRLEN];
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s NAME\n", argv[0]);
		return 2;
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(argv[1], NULL, &hints, &res);
	if (rc != 0) {
		fprintf(stderr, "getaddrinfo(%s): %s\n", argv[1], gai_strerror(rc));
		return 1;
	}
	for (p = res; p; p = p->ai_next) {
		const void *a = p->ai_family == AF_INET6
			? (const void *)&((struct sockaddr_in6 *)p->ai_addr)->sin6_addr
			: (const void *)&((struct sockaddr_in *)p->ai_addr)->sin_addr;
		if (inet_ntop(p->ai_family, a, buf, sizeof buf))
			printf("%s\n", buf);
	}
	freeaddrinfo(res);
	return 0;
}

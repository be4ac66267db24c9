/*
 * floor: the benchmark's lower bound. A UDP reflector that turns each DNS query into an empty
 * reply with no DNS work: QR set, RCODE untouched (NOERROR), the question echoed, every other
 * section dropped. No parsing beyond finding the end of the first question, no cache, no
 * allocation. It is what any server could at best do on this machine, with this kernel and this
 * load generator.
 *
 *   gcc -O2 -o floor floor.c && ./floor 127.0.20.5 53
 *
 * Batches with recvmmsg/sendmmsg (up to 64 datagrams a system call), like the fastest real
 * servers do. Runs until killed.
 *
 * Relay mode, the floor for cache misses: a forwarder with no DNS work, no cache and no checks.
 * Each query goes to the upstream as it came (same ID), each reply back to whoever sent that ID
 * last. What any forwarder must at least add on this machine.
 *
 *   ./floor 127.0.20.7 53 127.0.20.1:53
 *
 * Fresh-socket relay mode: the same, but each query leaves from a socket of its own (a random
 * source port, as RFC 5452 asks of a resolver and meshdns does for every attempt), closed when
 * its reply is passed back: socket, connect, send, poll, recv, close per query. What a
 * forwarder that randomises its source port must at least add.
 *
 *   ./floor 127.0.20.29 53 127.0.20.1:53 fresh
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 64
#define BUFSZ 4096

/* Length of header + first question, or 0 when the datagram is not a query we can echo. */
static size_t question_end(const unsigned char *p, size_t n)
{
	size_t i = 12;
	if (n < 12 || (p[2] & 0x80)) /* too short, or already a response: never answer those */
		return 0;
	if (p[4] != 0 || p[5] != 1) /* QDCOUNT must be 1 */
		return 0;
	while (i < n) {
		unsigned char len = p[i];
		if (len == 0) {
			i += 1;
			break;
		}
		if (len & 0xc0) /* no compression in a question we echo */
			return 0;
		i += 1 + len;
	}
	if (i + 4 > n)
		return 0;
	return i + 4;
}

static int relay_fresh(int cfd, const struct sockaddr_in *ua);

static int relay(int cfd, const char *upstream, int fresh)
{
	char host[64];
	snprintf(host, sizeof host, "%s", upstream);
	char *colon = strrchr(host, ':');
	if (!colon)
		return 2;
	*colon = 0;
	struct sockaddr_in ua = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(colon + 1))};
	if (inet_pton(AF_INET, host, &ua.sin_addr) != 1 || (ntohl(ua.sin_addr.s_addr) >> 24) != 127) {
		fprintf(stderr, "upstream %s: not a loopback IPv4 address\n", upstream);
		return 2;
	}
	if (fresh)
		return relay_fresh(cfd, &ua);
	int ufd = socket(AF_INET, SOCK_DGRAM, 0);
	if (ufd < 0 || connect(ufd, (struct sockaddr *)&ua, sizeof ua) < 0) {
		perror("upstream socket");
		return 1;
	}
	static struct sockaddr_in who[65536];
	static unsigned char have[65536];
	static unsigned char buf[BUFSZ];
	struct pollfd pf[2] = {{.fd = cfd, .events = POLLIN}, {.fd = ufd, .events = POLLIN}};
	for (;;) {
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			perror("poll");
			return 1;
		}
		if (pf[0].revents & POLLIN) {
			struct sockaddr_in peer;
			socklen_t pl = sizeof peer;
			ssize_t n = recvfrom(cfd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&peer, &pl);
			if (n >= 12 && !(buf[2] & 0x80)) {
				unsigned id = (unsigned)buf[0] << 8 | buf[1];
				who[id] = peer;
				have[id] = 1;
				send(ufd, buf, (size_t)n, MSG_DONTWAIT);
			}
		}
		if (pf[1].revents & POLLIN) {
			ssize_t n = recv(ufd, buf, sizeof buf, MSG_DONTWAIT);
			if (n >= 12) {
				unsigned id = (unsigned)buf[0] << 8 | buf[1];
				if (have[id]) {
					have[id] = 0;
					sendto(cfd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&who[id], sizeof who[id]);
				}
			}
		}
	}
}

#define FRESH_SLOTS 256

/* Relay mode with a socket per query (see the top of this file). Up to FRESH_SLOTS queries in
 * flight; a query that finds every slot taken is dropped, as a full forwarder would. */
static int relay_fresh(int cfd, const struct sockaddr_in *ua)
{
	static struct pollfd pf[1 + FRESH_SLOTS];
	static struct sockaddr_in who[FRESH_SLOTS];
	static unsigned char buf[BUFSZ];
	pf[0].fd = cfd;
	pf[0].events = POLLIN;
	for (int i = 1; i <= FRESH_SLOTS; i++)
		pf[i].fd = -1;
	for (;;) {
		if (poll(pf, 1 + FRESH_SLOTS, -1) < 0) {
			if (errno == EINTR)
				continue;
			perror("poll");
			return 1;
		}
		for (int i = 1; i <= FRESH_SLOTS; i++) {
			if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLERR)))
				continue;
			ssize_t n = recv(pf[i].fd, buf, sizeof buf, MSG_DONTWAIT);
			if (n >= 12)
				sendto(cfd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&who[i - 1], sizeof who[i - 1]);
			close(pf[i].fd);
			pf[i].fd = -1;
		}
		if (!(pf[0].revents & POLLIN))
			continue;
		struct sockaddr_in peer;
		socklen_t pl = sizeof peer;
		ssize_t n = recvfrom(cfd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&peer, &pl);
		if (n < 12 || (buf[2] & 0x80))
			continue;
		int slot = 1;
		while (slot <= FRESH_SLOTS && pf[slot].fd >= 0)
			slot++;
		if (slot > FRESH_SLOTS)
			continue;
		int ufd = socket(AF_INET, SOCK_DGRAM, 0);
		if (ufd < 0)
			continue;
		if (connect(ufd, (const struct sockaddr *)ua, sizeof *ua) < 0 || send(ufd, buf, (size_t)n, 0) < 0) {
			close(ufd);
			continue;
		}
		who[slot - 1] = peer;
		pf[slot].fd = ufd;
		pf[slot].events = POLLIN;
	}
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 5 || (argc == 5 && strcmp(argv[4], "fresh") != 0)) {
		fprintf(stderr, "usage: %s ADDR PORT [UPSTREAM_IP:PORT [fresh]]\n", argv[0]);
		return 2;
	}
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	int one = 1, buf = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
	if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", argv[1]);
		return 2;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		perror("bind");
		return 1;
	}

	if (argc >= 4)
		return relay(fd, argv[3], argc == 5);

	static unsigned char bufs[BATCH][BUFSZ];
	static struct sockaddr_in peers[BATCH];
	static struct iovec iov[BATCH], oiov[BATCH];
	static struct mmsghdr in[BATCH], out[BATCH];
	for (int k = 0; k < BATCH; k++) {
		iov[k].iov_base = bufs[k];
		iov[k].iov_len = BUFSZ;
		in[k].msg_hdr.msg_iov = &iov[k];
		in[k].msg_hdr.msg_iovlen = 1;
		in[k].msg_hdr.msg_name = &peers[k];
	}
	for (;;) {
		for (int k = 0; k < BATCH; k++)
			in[k].msg_hdr.msg_namelen = sizeof peers[k];
		/* Block for the first datagram, then take whatever else is already queued. */
		int got = recvmmsg(fd, in, BATCH, MSG_WAITFORONE, NULL);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			perror("recvmmsg");
			return 1;
		}
		int m = 0;
		for (int k = 0; k < got; k++) {
			unsigned char *p = bufs[k];
			size_t len = question_end(p, in[k].msg_len);
			if (!len)
				continue;
			p[2] |= 0x80;                            /* QR */
			p[3] &= 0xf0;                            /* RCODE 0, keep RA/Z/AD/CD as asked */
			memset(p + 6, 0, 6);                     /* AN, NS, AR counts: 0 */
			oiov[m].iov_base = p;
			oiov[m].iov_len = len;
			out[m].msg_hdr = (struct msghdr){
			    .msg_name = &peers[k],
			    .msg_namelen = in[k].msg_hdr.msg_namelen,
			    .msg_iov = &oiov[m],
			    .msg_iovlen = 1,
			};
			m++;
		}
		int sent = 0;
		while (sent < m) {
			int r = sendmmsg(fd, out + sent, (unsigned)(m - sent), 0);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				break; /* a full buffer drops the rest, as a real server would */
			}
			sent += r;
		}
	}
}

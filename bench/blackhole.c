/*
 * blackhole: an upstream that can stop answering — the outage and flood rows' stand-in for a
 * kube-dns that went silent (issue 13). UDP on ADDR:PORT; loopback only.
 *
 *   blackhole ADDR PORT LOG [UPSTREAM_IP:PORT]
 *
 * Without UPSTREAM it drops everything from the start. With one it first relays like
 * floor.c's relay (each query to the upstream as it came, each reply back to whoever sent that
 * ID last); SIGUSR1 makes it drop everything from then on, SIGUSR2 relay again. A dropped
 * datagram is read and never answered (no ICMP either: the socket is there), which is what a
 * black-holed path looks like to the sender: silence until its timeout.
 *
 * Every query received while dropping is written to LOG as "MILLISECONDS QNAME QTYPE"
 * (CLOCK_REALTIME, the axis of the benchmark's own timestamps; the name lowercased, "? 0" when
 * none can be read), so the benchmark counts the upstream queries per name during an outage.
 * The log is flushed after 100 ms of quiet, on every signal and at exit. Runs until killed.
 *
 *   gcc -O2 -o blackhole blackhole.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t dropping, stop;

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		dropping = 1;
	else if (sig == SIGUSR2)
		dropping = 0;
	else
		stop = 1;
}

static int loopback(const char *host, unsigned short port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_port = htons(port);
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1 || (ntohl(sa->sin_addr.s_addr) >> 24) != 127) {
		fprintf(stderr, "blackhole: %s is not a loopback IPv4 address\n", host);
		return -1;
	}
	return 0;
}

/* The first question's name and type, lowercased; "?" when it cannot be read. */
static void question(const unsigned char *p, size_t n, char *name, size_t cap, unsigned *qtype)
{
	size_t i = 12, o = 0;
	*qtype = 0;
	snprintf(name, cap, "?");
	if (n < 12 || p[4] != 0 || p[5] == 0)
		return;
	while (i < n && p[i] != 0) {
		unsigned len = p[i];
		if (len > 63 || i + 1 + len > n || o + len + 2 > cap)
			return;
		for (unsigned k = 0; k < len; k++)
			name[o++] = (char)tolower(p[i + 1 + k]);
		name[o++] = '.';
		i += 1 + len;
	}
	if (i + 5 > n)
		return;
	name[o ? o - 1 : o] = 0;
	if (!o)
		snprintf(name, cap, ".");
	*qtype = (unsigned)p[i + 1] << 8 | p[i + 2];
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: %s ADDR PORT LOG [UPSTREAM_IP:PORT]\n", argv[0]);
		return 2;
	}
	struct sockaddr_in sa, ua;
	if (loopback(argv[1], (unsigned short)atoi(argv[2]), &sa) < 0)
		return 2;
	FILE *log = fopen(argv[3], "w");
	if (!log) {
		perror(argv[3]);
		return 2;
	}
	int fd = socket(AF_INET, SOCK_DGRAM, 0), ufd = -1, buf = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		perror("blackhole: bind");
		return 1;
	}
	dropping = 1;
	if (argc == 5) {
		char host[64];
		snprintf(host, sizeof host, "%s", argv[4]);
		char *colon = strrchr(host, ':');
		if (!colon)
			return 2;
		*colon = 0;
		if (loopback(host, (unsigned short)atoi(colon + 1), &ua) < 0)
			return 2;
		ufd = socket(AF_INET, SOCK_DGRAM, 0);
		if (ufd < 0 || connect(ufd, (struct sockaddr *)&ua, sizeof ua) < 0) {
			perror("blackhole: upstream");
			return 1;
		}
		dropping = 0;
	}
	struct sigaction act = {.sa_handler = on_signal};
	sigaction(SIGUSR1, &act, NULL);
	sigaction(SIGUSR2, &act, NULL);
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	static struct sockaddr_in who[65536];
	static unsigned char have[65536];
	static unsigned char b[65536];
	struct pollfd pf[2] = {{.fd = fd, .events = POLLIN}, {.fd = ufd, .events = POLLIN}};
	while (!stop) {
		int r = poll(pf, ufd >= 0 ? 2 : 1, 100);
		if (r < 0 && errno != EINTR) {
			perror("blackhole: poll");
			return 1;
		}
		if (r <= 0) {
			fflush(log);
			continue;
		}
		if (pf[0].revents & POLLIN) {
			struct sockaddr_in peer;
			socklen_t pl = sizeof peer;
			ssize_t n = recvfrom(fd, b, sizeof b, MSG_DONTWAIT, (struct sockaddr *)&peer, &pl);
			if (n >= 12 && !(b[2] & 0x80)) {
				if (dropping) {
					char name[300];
					unsigned qtype;
					question(b, (size_t)n, name, sizeof name, &qtype);
					fprintf(log, "%llu %s %u\n", (unsigned long long)now_ms(), name, qtype);
				} else {
					unsigned id = (unsigned)b[0] << 8 | b[1];
					who[id] = peer;
					have[id] = 1;
					send(ufd, b, (size_t)n, MSG_DONTWAIT);
				}
			}
		}
		if (ufd >= 0 && (pf[1].revents & POLLIN)) {
			ssize_t n = recv(ufd, b, sizeof b, MSG_DONTWAIT);
			if (n >= 12 && !dropping) {
				unsigned id = (unsigned)b[0] << 8 | b[1];
				if (have[id]) {
					have[id] = 0;
					sendto(fd, b, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&who[id], sizeof who[id]);
				}
			}
		}
	}
	fclose(log);
	return 0;
}

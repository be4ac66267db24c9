/*
 * probe: sequential latency probe. One query in flight at a time, over UDP with EDNS (1232),
 * alternating between targets so each sees the same machine noise: for step i, every target in
 * turn gets its query i. Prints one line per query:
 *
 *     LABEL LATENCY_US RCODE ANCOUNT          (LATENCY_US -1 after a 1 s timeout)
 *
 *   probe SECONDS MAXSTEPS NAMEFILE TARGET...
 *   TARGET = LABEL=IP:PORT               asks NAMEFILE's line i ("name type", type A/AAAA/SRV/TXT)
 *          | LABEL=IP:PORT+SUFFIX        the same with ".SUFFIX" added to the name
 *          | LABEL=IP:PORT/QNAME/QTYPE   asks that question every time
 *          | LABEL=IP:PORT/QNAME/QTYPE/tcp   the same over TCP only (a fresh connection each time)
 *
 * The probe busy-polls for each reply (it is meant to have a core of its own), so its own sleep and
 * wake-up are not part of the latency. Stops after SECONDS, after MAXSTEPS steps, or at the end of NAMEFILE. Loopback servers only
 * (127.0.0.0/8): the benchmark never sends anything elsewhere.
 *
 * A truncated reply (TC) is followed up over TCP to the same address, as a stub resolver does;
 * the latency is then that of both, and RCODE/ANCOUNT are the TCP reply's. PROBE_GAP_US=N in the
 * environment sleeps N µs after each step (a paced client instead of a back-to-back one).
 *
 *   gcc -O2 -o probe probe.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXT 16

struct target {
	char label[512];
	int fd;
	struct sockaddr_in sa;
	char qname[256];
	char suffix[128]; /* added to the name file's names */
	int qtype; /* 0: from the name file */
	int tcp;   /* ask over TCP only */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t rnd_state;
static uint16_t rnd16(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 17;
	rnd_state ^= rnd_state << 5;
	return (uint16_t)rnd_state;
}

static int qtype_of(const char *s)
{
	if (!strcasecmp(s, "A"))
		return 1;
	if (!strcasecmp(s, "AAAA"))
		return 28;
	if (!strcasecmp(s, "SRV"))
		return 33;
	if (!strcasecmp(s, "TXT"))
		return 16;
	return 0;
}

/* The query Q (N bytes) over a fresh TCP connection to SA; the reply into R (CAP bytes).
 * Returns the reply's length, or -1. */
static ssize_t over_tcp(const struct sockaddr_in *sa, const unsigned char *q, size_t n, unsigned char *r, size_t cap)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = {.tv_sec = 1, .tv_usec = 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	unsigned char out[520];
	out[0] = (unsigned char)(n >> 8);
	out[1] = (unsigned char)n;
	memcpy(out + 2, q, n);
	ssize_t len = -1;
	if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0 && send(fd, out, n + 2, MSG_NOSIGNAL) == (ssize_t)(n + 2)) {
		unsigned char hdr[2];
		if (recv(fd, hdr, 2, MSG_WAITALL) == 2) {
			size_t want = (size_t)hdr[0] << 8 | hdr[1];
			if (want <= cap && recv(fd, r, want, MSG_WAITALL) == (ssize_t)want)
				len = (ssize_t)want;
		}
	}
	close(fd);
	return len;
}

/* Builds a query; returns its length or 0. */
static size_t build(unsigned char *b, uint16_t id, const char *name, int qtype)
{
	size_t n = 12;
	memset(b, 0, 12);
	b[0] = (unsigned char)(id >> 8);
	b[1] = (unsigned char)id;
	b[2] = 0x01; /* RD */
	b[5] = 1;    /* QDCOUNT */
	b[11] = 1;   /* ARCOUNT: OPT */
	const char *p = name;
	while (*p) {
		const char *dot = strchr(p, '.');
		size_t len = dot ? (size_t)(dot - p) : strlen(p);
		if (len == 0 || len > 63 || n + len + 1 > 300)
			return 0;
		b[n++] = (unsigned char)len;
		memcpy(b + n, p, len);
		n += len;
		if (!dot)
			break;
		p = dot + 1;
	}
	b[n++] = 0;
	b[n++] = (unsigned char)(qtype >> 8);
	b[n++] = (unsigned char)qtype;
	b[n++] = 0;
	b[n++] = 1; /* IN */
	/* OPT: root, type 41, class = 1232, ttl 0, rdlen 0 */
	unsigned char opt[11] = {0, 0, 41, 1232 >> 8, 1232 & 0xff, 0, 0, 0, 0, 0, 0};
	memcpy(b + n, opt, sizeof opt);
	return n + sizeof opt;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s SECONDS MAXSTEPS NAMEFILE LABEL=IP:PORT[/QNAME/QTYPE]...\n", argv[0]);
		return 2;
	}
	double seconds = atof(argv[1]);
	long maxsteps = atol(argv[2]);
	FILE *names = fopen(argv[3], "r");
	if (!names) {
		perror(argv[3]);
		return 2;
	}
	struct target t[MAXT];
	int nt = 0;
	for (int a = 4; a < argc && nt < MAXT; a++, nt++) {
		char spec[512], *eq, *slash, *colon;
		snprintf(spec, sizeof spec, "%s", argv[a]);
		eq = strchr(spec, '=');
		if (!eq) {
			fprintf(stderr, "bad target %s\n", argv[a]);
			return 2;
		}
		*eq = 0;
		snprintf(t[nt].label, sizeof t[nt].label, "%s", spec);
		char *addr = eq + 1;
		t[nt].qtype = 0;
		t[nt].tcp = 0;
		t[nt].suffix[0] = 0;
		char *plus = strchr(addr, '+');
		if (plus) {
			*plus = 0;
			snprintf(t[nt].suffix, sizeof t[nt].suffix, "%s", plus + 1);
		}
		slash = strchr(addr, '/');
		if (slash) {
			*slash = 0;
			char *q = slash + 1, *s2 = strchr(q, '/');
			char *s3 = s2 ? strchr(s2 + 1, '/') : NULL;
			t[nt].tcp = 0;
			if (s3) {
				*s3 = 0;
				if (strcmp(s3 + 1, "tcp")) {
					fprintf(stderr, "bad transport in %s\n", argv[a]);
					return 2;
				}
				t[nt].tcp = 1;
			}
			if (!s2 || !(t[nt].qtype = qtype_of(s2 + 1))) {
				fprintf(stderr, "bad question in %s\n", argv[a]);
				return 2;
			}
			*s2 = 0;
			snprintf(t[nt].qname, sizeof t[nt].qname, "%s", q);
		}
		colon = strrchr(addr, ':');
		if (!colon) {
			fprintf(stderr, "bad address in %s\n", argv[a]);
			return 2;
		}
		*colon = 0;
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(colon + 1))};
		if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1 || (ntohl(sa.sin_addr.s_addr) >> 24) != 127) {
			fprintf(stderr, "%s: not a loopback IPv4 address\n", addr);
			return 2;
		}
		t[nt].sa = sa;
		t[nt].fd = socket(AF_INET, SOCK_DGRAM, 0);
		struct timeval tv = {.tv_sec = 0, .tv_usec = 500000}; /* bounds the blocking recv */
		if (t[nt].fd < 0 || setsockopt(t[nt].fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
		    connect(t[nt].fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
			perror("socket/connect");
			return 1;
		}
	}
	rnd_state = (uint32_t)now_ns() | 1;
	const char *gap_env = getenv("PROBE_GAP_US");
	long gap_us = gap_env ? atol(gap_env) : 0;
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
	char line[512];
	unsigned char q[512], r[65536];
	for (long step = 0; step < maxsteps && now_ns() < end; step++) {
		char fname[300] = "", ftype[16] = "A";
		int have_line = fgets(line, sizeof line, names) != NULL;
		if (have_line && sscanf(line, "%299s %15s", fname, ftype) < 1)
			fname[0] = 0;
		for (int k = 0; k < nt; k++) {
			char suffixed[420];
			const char *name = t[k].qtype ? t[k].qname : fname;
			if (!t[k].qtype && t[k].suffix[0]) {
				snprintf(suffixed, sizeof suffixed, "%s.%s", fname, t[k].suffix);
				name = suffixed;
			}
			int qtype = t[k].qtype ? t[k].qtype : qtype_of(ftype);
			if (!t[k].qtype && !have_line)
				goto done;
			uint16_t id = rnd16();
			size_t n = build(q, id, name, qtype ? qtype : 1);
			if (!n)
				continue;
			uint64_t t0 = now_ns();
			if (t[k].tcp) {
				ssize_t got = over_tcp(&t[k].sa, q, n, r, sizeof r);
				if (got < 12 || r[0] != (unsigned char)(id >> 8) || r[1] != (unsigned char)id)
					printf("%s -1 -1 0\n", t[k].label);
				else
					printf("%s %.1f %d %d\n", t[k].label, (double)(now_ns() - t0) / 1000.0, r[3] & 0x0f, (r[6] << 8) | r[7]);
				continue;
			}
			if (send(t[k].fd, q, n, 0) < 0) {
				printf("%s -1 -1 0\n", t[k].label);
				continue;
			}
			for (;;) {
				/* Busy-poll for the reply (the probe has a core of its own), so the client's
				 * own sleep and wake-up add nothing to the latency; after 200 ms, block. */
				uint64_t waited = now_ns() - t0;
				if (waited > 1000000000u) {
					printf("%s -1 -1 0\n", t[k].label);
					break;
				}
				ssize_t got = recv(t[k].fd, r, sizeof r, waited < 200000000u ? MSG_DONTWAIT : 0);
				if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
					continue;
				if (got < 0) { /* e.g. ECONNREFUSED: nothing listens there */
					printf("%s -1 -1 0\n", t[k].label);
					break;
				}
				if (got < 12 || r[0] != (unsigned char)(id >> 8) || r[1] != (unsigned char)id)
					continue; /* a late reply to an earlier query: not ours */
				if (r[2] & 0x02) { /* TC: ask again over TCP */
					got = over_tcp(&t[k].sa, q, n, r, sizeof r);
					if (got < 12 || r[0] != (unsigned char)(id >> 8) || r[1] != (unsigned char)id) {
						printf("%s -1 -1 0\n", t[k].label);
						break;
					}
				}
				uint64_t dt = now_ns() - t0;
				printf("%s %.1f %d %d\n", t[k].label, (double)dt / 1000.0, r[3] & 0x0f, (r[6] << 8) | r[7]);
				break;
			}
		}
		if (gap_us > 0)
			usleep((useconds_t)gap_us);
	}
done:
	fflush(stdout);
	return 0;
}

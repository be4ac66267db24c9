/*
 * flood: the load of the benchmark's overload rows (issue 13). Loopback targets only
 * (127.0.0.0/8): the benchmark never sends anything elsewhere. Every mode is bounded in count
 * and time and stops by itself.
 *
 *   flood mangled IP:PORT COUNT RATE SEED
 *       COUNT datagrams at RATE a second that are not proper queries, in turn: random bytes
 *       (1-600 of them), a query cut short at a random point, a query with wrong section
 *       counts (QDCOUNT 0, 2 or 65535; ANCOUNT/NSCOUNT/ARCOUNT claiming records that are not
 *       there), a label running past the end, a compression pointer loop, a response (QR set)
 *       and a query with a random name under a random TLD (it may well be forwarded: part of a
 *       flood that got through the parser). Replies are read and thrown away.
 *
 *   flood names IP:PORT COUNT RATE PREFIX ZONE
 *       COUNT queries for distinct names PREFIX<i>.ZONE (type A, EDNS 1232) at RATE a second:
 *       every one a cache miss. Replies are read and counted.
 *
 *   flood tcpstall IP:PORT CONNS QUERIES HOLD NAMEFILE
 *       Opens CONNS TCP connections (receive buffer as small as the kernel allows) and on each
 *       sends up to QUERIES pipelined queries (names from NAMEFILE, "name type" lines, in turn)
 *       as fast as the connection takes them, never reading a reply; after HOLD seconds
 *       closes them all.
 *
 * Prints one summary line: "sent N replies R" (mangled, names) or "connected C refused F
 * queries Q reset X" (tcpstall).
 *
 *   gcc -O2 -o flood flood.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NSOCK 16

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (uint32_t)(rs >> 16);
}

static int target(const char *spec, struct sockaddr_in *sa)
{
	char host[64];
	snprintf(host, sizeof host, "%s", spec);
	char *colon = strrchr(host, ':');
	if (!colon)
		return -1;
	*colon = 0;
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_port = htons((unsigned short)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1 || (ntohl(sa->sin_addr.s_addr) >> 24) != 127) {
		fprintf(stderr, "flood: %s is not a loopback IPv4 address\n", spec);
		return -1;
	}
	return 0;
}

static int qtype_of(const char *s)
{
	if (!strcasecmp(s, "AAAA"))
		return 28;
	if (!strcasecmp(s, "SRV"))
		return 33;
	if (!strcasecmp(s, "TXT"))
		return 16;
	return 1;
}

/* A query for NAME/QTYPE with EDNS 1232; returns its length or 0. */
static size_t query(unsigned char *b, size_t cap, uint16_t id, const char *name, int qtype)
{
	size_t n = 12;
	if (cap < 300)
		return 0;
	memset(b, 0, 12);
	b[0] = (unsigned char)(id >> 8);
	b[1] = (unsigned char)id;
	b[2] = 0x01;
	b[5] = 1;
	b[11] = 1;
	const char *p = name;
	while (*p) {
		const char *dot = strchr(p, '.');
		size_t len = dot ? (size_t)(dot - p) : strlen(p);
		if (len == 0 || len > 63 || n + len + 1 > 270)
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
	b[n++] = 1;
	unsigned char opt[11] = {0, 0, 41, 1232 >> 8, 1232 & 0xff, 0, 0, 0, 0, 0, 0};
	memcpy(b + n, opt, sizeof opt);
	return n + sizeof opt;
}

static void random_name(char *out, size_t cap)
{
	static const char tld[][8] = {"com", "net", "org", "local", "test", "svc", "io", "xyz"};
	snprintf(out, cap, "r%08x%04x.%s", rnd(), rnd() & 0xffff, tld[rnd() % 8]);
}

/* One mangled datagram of kind K into b; returns its length. */
static size_t mangled(unsigned char *b, int k)
{
	char name[64];
	size_t n;
	random_name(name, sizeof name);
	n = query(b, 600, (uint16_t)rnd(), name, 1);
	switch (k) {
	case 0: /* random bytes */
		n = 1 + rnd() % 600;
		for (size_t i = 0; i < n; i++)
			b[i] = (unsigned char)rnd();
		return n;
	case 1: /* cut short, header included sometimes */
		return 1 + rnd() % (n - 1);
	case 2: /* wrong question count */
	{
		static const uint16_t qd[] = {0, 2, 65535};
		uint16_t c = qd[rnd() % 3];
		b[4] = (unsigned char)(c >> 8);
		b[5] = (unsigned char)c;
		return n;
	}
	case 3: /* records claimed that are not there */
		b[6 + 2 * (rnd() % 3)] = (unsigned char)(1 + rnd() % 255);
		b[7] = (unsigned char)rnd();
		return n;
	case 4: /* a label running past the end */
		b[12] = 63;
		return 12 + 1 + rnd() % 20;
	case 5: /* a compression pointer to itself */
		b[12] = 0xc0;
		b[13] = 12;
		memset(b + 14, 0, 4);
		b[15] = 1;
		b[17] = 1;
		return 18;
	case 6: /* a response, not a query */
		b[2] |= 0x80;
		return n;
	default: /* a query for a random name: forwarded, a miss */
		return n;
	}
}

static int udp_sockets(int *fd, const struct sockaddr_in *sa)
{
	for (int k = 0; k < NSOCK; k++) {
		fd[k] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
		int buf = 1 << 20;
		setsockopt(fd[k], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
		if (fd[k] < 0 || connect(fd[k], (const struct sockaddr *)sa, sizeof *sa) < 0) {
			perror("flood: socket");
			return -1;
		}
	}
	return 0;
}

static long drain(int *fd)
{
	unsigned char r[4096];
	long got = 0;
	for (int k = 0; k < NSOCK; k++)
		while (recv(fd[k], r, sizeof r, MSG_DONTWAIT) > 0)
			got++;
	return got;
}

static void sleep_until(uint64_t t)
{
	uint64_t now = now_ns();
	if (t > now) {
		struct timespec ts = {.tv_sec = (time_t)((t - now) / 1000000000u), .tv_nsec = (long)((t - now) % 1000000000u)};
		nanosleep(&ts, NULL);
	}
}

/* Sends COUNT datagrams made by MAKE at RATE a second, in steps of one millisecond. */
static int paced(const char *spec, long count, double rate, size_t (*make)(unsigned char *, long, void *), void *arg)
{
	struct sockaddr_in sa;
	int fd[NSOCK];
	if (target(spec, &sa) < 0 || udp_sockets(fd, &sa) < 0)
		return 2;
	unsigned char b[1024];
	long sent = 0, replies = 0;
	uint64_t t0 = now_ns(), limit = t0 + (uint64_t)((double)count / rate * 3e9) + 5000000000u;
	while (sent < count && now_ns() < limit) {
		long due = (long)((double)(now_ns() - t0) / 1e9 * rate) + 1;
		if (due > count)
			due = count;
		while (sent < due) {
			size_t n = make(b, sent, arg);
			if (send(fd[sent % NSOCK], b, n, 0) < 0 && errno != EAGAIN && errno != ECONNREFUSED)
				perror("flood: send");
			sent++;
		}
		replies += drain(fd);
		sleep_until(t0 + (uint64_t)((double)(sent + 1) / rate * 1e9));
	}
	uint64_t end = now_ns() + 500000000u; /* late replies */
	while (now_ns() < end) {
		replies += drain(fd);
		usleep(10000);
	}
	printf("sent %ld replies %ld seconds %.2f\n", sent, replies, (double)(now_ns() - t0) / 1e9 - 0.5);
	return 0;
}

static size_t make_mangled(unsigned char *b, long i, void *arg)
{
	(void)arg;
	return mangled(b, (int)(i % 8));
}

struct names {
	const char *prefix, *zone;
};

static size_t make_name(unsigned char *b, long i, void *arg)
{
	struct names *nm = arg;
	char name[300];
	snprintf(name, sizeof name, "%s%ld.%s", nm->prefix, i, nm->zone);
	return query(b, 1024, (uint16_t)rnd(), name, 1);
}

static int tcpstall(const char *spec, int conns, long queries, double hold, const char *file)
{
	struct sockaddr_in sa;
	if (target(spec, &sa) < 0)
		return 2;
	FILE *f = fopen(file, "r");
	if (!f) {
		perror(file);
		return 2;
	}
	/* The names, as length-prefixed queries, one after the other. */
	static unsigned char frames[1 << 20];
	size_t flen = 0, nframes = 0;
	char line[512];
	while (fgets(line, sizeof line, f) && flen + 600 < sizeof frames) {
		char name[300], type[16] = "A";
		if (sscanf(line, "%299s %15s", name, type) < 1)
			continue;
		size_t n = query(frames + flen + 2, 600, (uint16_t)rnd(), name, qtype_of(type));
		if (!n)
			continue;
		frames[flen] = (unsigned char)(n >> 8);
		frames[flen + 1] = (unsigned char)n;
		flen += n + 2;
		nframes++;
	}
	fclose(f);
	if (!nframes) {
		fprintf(stderr, "flood: no names in %s\n", file);
		return 2;
	}
	int *fd = calloc((size_t)conns, sizeof *fd);
	size_t *off = calloc((size_t)conns, sizeof *off); /* bytes of the stream sent */
	/* The stream one connection sends: QUERIES frames, taken from the file in turn and
	 * wrapping; total is its length in bytes. */
	size_t total = (size_t)(queries / (long)nframes) * flen;
	for (size_t k = 0, pos = 0; k < (size_t)(queries % (long)nframes); k++) {
		size_t n = ((size_t)frames[pos] << 8 | frames[pos + 1]) + 2;
		total += n;
		pos += n;
	}
	int connected = 0, refused = 0, reset = 0;
	for (int c = 0; c < conns; c++) {
		fd[c] = socket(AF_INET, SOCK_STREAM, 0);
		int small = 1;
		setsockopt(fd[c], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
		if (fd[c] < 0 || connect(fd[c], (struct sockaddr *)&sa, sizeof sa) < 0) {
			refused++;
			if (fd[c] >= 0)
				close(fd[c]);
			fd[c] = -1;
			continue;
		}
		fcntl(fd[c], F_SETFL, O_NONBLOCK);
		connected++;
	}
	uint64_t end = now_ns() + (uint64_t)(hold * 1e9);
	long sent_q = 0;
	while (now_ns() < end) {
		int progress = 0;
		for (int c = 0; c < conns; c++) {
			if (fd[c] < 0 || off[c] >= total)
				continue;
			/* Send from the frame stream at this connection's offset, wrapping. */
			size_t pos = off[c] % flen, n = flen - pos;
			if (n > total - off[c])
				n = total - off[c];
			ssize_t w = send(fd[c], frames + pos, n, MSG_NOSIGNAL);
			if (w > 0) {
				off[c] += (size_t)w;
				progress = 1;
			} else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
				reset++;
				close(fd[c]);
				fd[c] = -1;
			}
		}
		if (!progress)
			usleep(20000);
	}
	for (int c = 0; c < conns; c++) {
		/* Whole frames sent on this connection. */
		for (size_t pos = 0, done = 0; done < off[c]; sent_q++) {
			size_t n = ((size_t)frames[pos] << 8 | frames[pos + 1]) + 2;
			if (done + n > off[c])
				break;
			done += n;
			pos = (pos + n) % flen;
		}
		if (fd[c] >= 0)
			close(fd[c]);
	}
	printf("connected %d refused %d queries %ld reset %d\n", connected, refused, sent_q, reset);
	return 0;
}

int main(int argc, char **argv)
{
	rs ^= now_ns();
	if (argc == 6 && !strcmp(argv[1], "mangled")) {
		rs = 88172645463325252ull ^ ((uint64_t)atol(argv[5]) * 2654435761u); /* the same flood for a seed */
		return paced(argv[2], atol(argv[3]), atof(argv[4]), make_mangled, NULL);
	}
	if (argc == 7 && !strcmp(argv[1], "names")) {
		struct names nm = {argv[5], argv[6]};
		return paced(argv[2], atol(argv[3]), atof(argv[4]), make_name, &nm);
	}
	if (argc == 7 && !strcmp(argv[1], "tcpstall"))
		return tcpstall(argv[2], atoi(argv[3]), atol(argv[4]), atof(argv[5]), argv[6]);
	fprintf(stderr, "usage: flood mangled IP:PORT COUNT RATE SEED\n"
			"       flood names IP:PORT COUNT RATE PREFIX ZONE\n"
			"       flood tcpstall IP:PORT CONNS QUERIES HOLD NAMEFILE\n");
	return 2;
}

/* tcpstore-storm: an init storm against a store that speaks PyTorch's
 * TCPStore protocol. One process opens one connection per simulated rank and
 * each rank runs what a PyTorch worker sends when it starts:
 *
 *   modern (torch 2.x; the bytes of torch 2.15's client, observed):
 *     VALIDATE magic, PING nonce          -> nonce      the TCPStore handshake
 *   both dialects (legacy: the bytes of torch 1.13's client, observed):
 *     ADD "init/" 1                       -> count      TCPStore's constructor
 *     SET "/<tag>/rank/<r>" address                     its own key
 *     ADD "/<tag>/num_members" 1          -> idx        the barrier
 *     SET "/<tag>/last_member" (idx == N only)
 *     WAIT ["/<tag>/last_member"]         -> STOP_WAITING
 *
 * The barrier is torch.distributed.elastic.utils.store.barrier; the user keys
 * carry the "/" that TCPStore's client puts before every key. A rank is
 * released when its WAIT is answered. Frames are host byte order, strings a
 * u64 length and the bytes, as the real clients send them.
 *
 *   tcpstore-storm [--host ADDR] --port PORT [--ranks N] [--dialect D]
 *                  [--sources S] [--concurrency C] [--timeout SECONDS]
 *                  [--tag TAG]
 *
 * Prints one summary line of key=value pairs: connections (established,
 * retries included), released, failures, retries (connects tried again
 * after ECONNREFUSED, EADDRNOTAVAIL or ETIMEDOUT, at most 5 tries each),
 * total_s (first connect to last rank released), p50_ms, p99_ms and max_ms
 * (per rank, from its first connect to its release). --sources S binds rank
 * r to 127.0.0.(1 + r % S) before connecting; --concurrency C bounds the
 * ranks between connect() and the answer to their ADD "init/" (their
 * TCPStore constructor); --timeout ends a run that stalls.
 *
 * Exit status: 0 every rank released with the right answers, 1 a rank
 * failed or the run timed out, 2 usage error or the ranks do not fit the
 * descriptors or ports, 3 the store accepted connections but never answered
 * a first request right (it does not speak this dialect). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define VALIDATION_MAGIC 0x3C85F7CEu
#define OUT_MAX 256
#define KEY_MAX 96
#define SPARE_FDS 64
#define CONNECT_TRIES 5

/* ---- the protocol: pure encoding and the rank's steps ---- */

struct dialect {
	const char *name;
	bool validate; /* VALIDATE + PING before anything else */
	uint8_t op_validate, op_ping, op_set, op_add, op_wait;
};

static const struct dialect dialects[] = {
	/* torch 2.x: VALIDATE is 0, so every opcode moved up by one; PING
	 * is appended after CANCEL_WAIT (13 in torch 2.15's client). */
	{"modern", true, 0, 13, 1, 4, 6},
	/* torch 1.13: no handshake, SET is 0. */
	{"legacy", false, 0, 0, 0, 3, 5},
};

enum step {
	STEP_QUEUED,	 /* not yet connecting */
	STEP_CONNECTING, /* connect() issued */
	STEP_PING,	 /* handshake sent, the nonce is awaited */
	STEP_INIT_ADD,	 /* ADD "init/" sent, the count is awaited */
	STEP_BARRIER,	 /* own SET and the barrier ADD sent, idx awaited */
	STEP_WAIT,	 /* WAIT sent, STOP_WAITING awaited */
	STEP_RELEASED,
	STEP_FAILED,
};

struct frame {
	uint8_t b[OUT_MAX];
	size_t n;
};

static void put(struct frame *f, const void *p, size_t n)
{
	if (f->n + n > sizeof(f->b))
		abort(); /* OUT_MAX holds the largest batch a rank sends */
	memcpy(f->b + f->n, p, n);
	f->n += n;
}

static void put_u8(struct frame *f, uint8_t v)
{
	put(f, &v, 1);
}

static void put_str(struct frame *f, const char *s)
{
	uint64_t n = strlen(s);

	put(f, &n, sizeof(n));
	put(f, s, (size_t)n);
}

static void put_set(struct frame *f, const struct dialect *d, const char *key, const char *value)
{
	put_u8(f, d->op_set);
	put_str(f, key);
	put_str(f, value);
}

static void put_add(struct frame *f, const struct dialect *d, const char *key, int64_t by)
{
	put_u8(f, d->op_add);
	put_str(f, key);
	put(f, &by, sizeof(by));
}

static void put_wait(struct frame *f, const struct dialect *d, const char *key)
{
	uint64_t one = 1;

	put_u8(f, d->op_wait);
	put(f, &one, sizeof(one));
	put_str(f, key);
}

/* How many reply bytes a rank in this step awaits. */
static size_t reply_size(enum step s)
{
	switch (s) {
	case STEP_PING:
		return 4;
	case STEP_INIT_ADD:
	case STEP_BARRIER:
		return 8;
	case STEP_WAIT:
		return 1;
	default:
		return 0;
	}
}

/* ---- the edge: sockets, epoll, clocks ---- */

struct rank {
	int fd;
	enum step step;
	uint8_t tries;
	uint8_t in_len;
	uint8_t in[8];
	uint16_t out_off;
	struct frame out;
	int64_t t_start, t_end;
	int64_t retry_at;
};

struct storm {
	const struct dialect *d;
	struct sockaddr_in dst;
	unsigned ranks, sources, concurrency;
	const char *tag;
	char num_key[KEY_MAX], last_key[KEY_MAX];
	struct rank *r;
	uint8_t *idx_seen; /* barrier indices answered, 1..ranks */
	int ep;
	unsigned next;	   /* next rank never started */
	unsigned *retry_q; /* ranks to connect again, FIFO */
	unsigned rq_head, rq_len;
	unsigned in_flight; /* from connect() to the answer of ADD "init/" */
	unsigned connections, released, failed, retries;
	bool connected_any;
	bool understood; /* a rank's first request was answered right */
	bool broken;	 /* a rank failed before its barrier ADD: nobody is released */
	int64_t t_first;
	const char *first_error;
};

static int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void fail_rank(struct storm *s, struct rank *k, const char *why)
{
	if (k->fd >= 0) {
		close(k->fd);
		k->fd = -1;
	}
	/* Without its barrier index, the barrier may never fill. */
	if (k->step < STEP_WAIT)
		s->broken = true;
	if (!s->first_error)
		s->first_error = why;
	if (k->step <= STEP_INIT_ADD && k->step >= STEP_CONNECTING)
		s->in_flight--;
	k->step = STEP_FAILED;
	s->failed++;
}

static int watch(struct storm *s, struct rank *k, uint32_t events, int op)
{
	struct epoll_event ev = {.events = events, .data.u32 = (uint32_t)(k - s->r)};

	return epoll_ctl(s->ep, op, k->fd, &ev) < 0 ? -errno : 0;
}

/* Writes what is pending; EPOLLOUT is watched only while something is. */
static void flush(struct storm *s, struct rank *k)
{
	while (k->out_off < k->out.n) {
		ssize_t n = send(k->fd, k->out.b + k->out_off, k->out.n - k->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			if (watch(s, k, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD) < 0)
				fail_rank(s, k, "epoll_ctl failed");
			return;
		}
		if (n < 0) {
			fail_rank(s, k, "send failed");
			return;
		}
		k->out_off += (uint16_t)n;
	}
	k->out.n = 0;
	k->out_off = 0;
	if (watch(s, k, EPOLLIN, EPOLL_CTL_MOD) < 0)
		fail_rank(s, k, "epoll_ctl failed");
}

static void queue_retry(struct storm *s, struct rank *k, int64_t now)
{
	close(k->fd);
	k->fd = -1;
	k->tries++;
	k->step = STEP_QUEUED;
	k->retry_at = now + (50000000LL << k->tries);
	s->in_flight--;
	s->retries++;
	s->retry_q[(s->rq_head + s->rq_len) % s->ranks] = (unsigned)(k - s->r);
	s->rq_len++;
}

static void start_connect(struct storm *s, unsigned i, int64_t now)
{
	struct rank *k = &s->r[i];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;

	if (!k->t_start)
		k->t_start = now;
	if (!s->t_first)
		s->t_first = now;
	s->in_flight++;
	k->step = STEP_CONNECTING;
	k->fd = fd;
	if (fd < 0) {
		fail_rank(s, k, "socket failed (descriptors)");
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (s->sources) {
		struct sockaddr_in src = {.sin_family = AF_INET};

		src.sin_addr.s_addr = htonl(0x7f000001u + i % s->sources);
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0) {
			fail_rank(s, k, "bind to the source address failed");
			return;
		}
	}
	if (connect(fd, (struct sockaddr *)&s->dst, sizeof(s->dst)) < 0 && errno != EINPROGRESS) {
		if ((errno == ECONNREFUSED || errno == EADDRNOTAVAIL || errno == EAGAIN) &&
		    k->tries + 1 < CONNECT_TRIES) {
			queue_retry(s, k, now);
			return;
		}
		fail_rank(s, k,
			  errno == EADDRNOTAVAIL ? "connect failed: no free port"
						 : "connect failed");
		return;
	}
	if (watch(s, k, EPOLLOUT, EPOLL_CTL_ADD) < 0)
		fail_rank(s, k, "epoll_ctl failed");
}

static void connected(struct storm *s, struct rank *k, int64_t now)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		if ((err == ECONNREFUSED || err == ETIMEDOUT) && k->tries + 1 < CONNECT_TRIES) {
			epoll_ctl(s->ep, EPOLL_CTL_DEL, k->fd, NULL);
			queue_retry(s, k, now);
			return;
		}
		fail_rank(s, k, "connect failed");
		return;
	}
	s->connected_any = true;
	s->connections++;
	if (s->d->validate) {
		uint32_t magic = VALIDATION_MAGIC, nonce = (uint32_t)(k - s->r) ^ 0x5a5a0000u;

		put_u8(&k->out, s->d->op_validate);
		put(&k->out, &magic, sizeof(magic));
		put_u8(&k->out, s->d->op_ping);
		put(&k->out, &nonce, sizeof(nonce));
		k->step = STEP_PING;
	} else {
		put_add(&k->out, s->d, "init/", 1);
		k->step = STEP_INIT_ADD;
	}
	flush(s, k);
}

/* One complete reply for k's step: checks it and sends what comes next. */
static void answered(struct storm *s, struct rank *k, int64_t now)
{
	unsigned i = (unsigned)(k - s->r);
	char key[KEY_MAX], value[64];
	int64_t v;

	switch (k->step) {
	case STEP_PING: {
		uint32_t nonce;

		memcpy(&nonce, k->in, 4);
		if (nonce != (i ^ 0x5a5a0000u)) {
			fail_rank(s, k, "PING answered with another nonce");
			return;
		}
		s->understood = true;
		put_add(&k->out, s->d, "init/", 1);
		k->step = STEP_INIT_ADD;
		break;
	}
	case STEP_INIT_ADD:
		memcpy(&v, k->in, 8);
		if (v < 1 || v > (int64_t)s->ranks * CONNECT_TRIES) {
			fail_rank(s, k, "ADD init/ answered a count out of range");
			return;
		}
		s->understood = true;
		s->in_flight--;
		snprintf(key, sizeof(key), "/%s/rank/%u", s->tag, i);
		snprintf(value, sizeof(value), "127.0.0.1:%u", 20000 + i % 40000);
		put_set(&k->out, s->d, key, value);
		put_add(&k->out, s->d, s->num_key, 1);
		k->step = STEP_BARRIER;
		break;
	case STEP_BARRIER:
		memcpy(&v, k->in, 8);
		if (v < 1 || v > (int64_t)s->ranks || s->idx_seen[v - 1]) {
			fail_rank(s, k, "barrier ADD answered an index out of range or twice");
			return;
		}
		s->idx_seen[v - 1] = 1;
		if (v == (int64_t)s->ranks)
			put_set(&k->out, s->d, s->last_key, "<val_ignored>");
		put_wait(&k->out, s->d, s->last_key);
		k->step = STEP_WAIT;
		break;
	case STEP_WAIT:
		if (k->in[0] != 0) {
			fail_rank(s, k, "WAIT answered something other than STOP_WAITING");
			return;
		}
		k->step = STEP_RELEASED;
		k->t_end = now;
		s->released++;
		return;
	default:
		fail_rank(s, k, "a reply nobody asked for");
		return;
	}
	k->in_len = 0;
	flush(s, k);
}

static void readable(struct storm *s, struct rank *k, int64_t now)
{
	for (int rounds = 0; rounds < 8 && k->step != STEP_FAILED && k->step != STEP_RELEASED;
	     rounds++) {
		size_t want = reply_size(k->step);
		ssize_t n;

		if (!want) {
			fail_rank(s, k, "bytes from the store while no reply is due");
			return;
		}
		n = recv(k->fd, k->in + k->in_len, want - k->in_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			fail_rank(s, k,
				  n == 0 ? "the store closed the connection"
					 : "the store reset the connection");
			return;
		}
		k->in_len += (uint8_t)n;
		if (k->in_len == want)
			answered(s, k, now);
	}
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static void start_more(struct storm *s, int64_t now)
{
	while (s->in_flight < s->concurrency) {
		if (s->rq_len && s->r[s->retry_q[s->rq_head]].retry_at <= now) {
			unsigned i = s->retry_q[s->rq_head];

			s->rq_head = (s->rq_head + 1) % s->ranks;
			s->rq_len--;
			start_connect(s, i, now);
		} else if (s->next < s->ranks) {
			start_connect(s, s->next++, now);
		} else {
			return;
		}
	}
}

static int run(struct storm *s, double timeout_s)
{
	struct epoll_event evs[1024];
	int64_t deadline = now_ns() + (int64_t)(timeout_s * 1e9);

	s->ep = epoll_create1(EPOLL_CLOEXEC);
	if (s->ep < 0) {
		fprintf(stderr, "tcpstore-storm: epoll_create1 failed: %s\n", strerror(errno));
		return -errno;
	}
	while (s->released + s->failed < s->ranks && !s->broken) {
		int64_t now = now_ns();
		int n, wait_ms;

		if (now >= deadline)
			return -ETIMEDOUT;
		start_more(s, now);
		wait_ms = (int)((deadline - now) / 1000000) + 1;
		if (s->rq_len && wait_ms > 10)
			wait_ms = 10;
		n = epoll_wait(s->ep, evs, 1024, wait_ms);
		if (n < 0 && errno != EINTR)
			return -errno;
		now = now_ns();
		for (int e = 0; e < n; e++) {
			struct rank *k = &s->r[evs[e].data.u32];

			if (k->step == STEP_FAILED || k->step == STEP_RELEASED || k->fd < 0)
				continue;
			if (k->step == STEP_CONNECTING) {
				connected(s, k, now);
				continue;
			}
			if (evs[e].events & EPOLLOUT)
				flush(s, k);
			if (k->step != STEP_FAILED &&
			    (evs[e].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
				readable(s, k, now);
		}
	}
	return 0;
}

static int fit_descriptors(unsigned ranks)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)ranks + SPARE_FDS;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	rl.rlim_cur = rl.rlim_max;
	if (rl.rlim_max < need) {
		/* A privileged caller may raise the hard limit too. */
		struct rlimit more = {need, need};

		if (setrlimit(RLIMIT_NOFILE, &more) == 0)
			return 0;
	}
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	if (rl.rlim_cur < need) {
		fprintf(stderr,
			"tcpstore-storm: %u ranks need %llu descriptors, the hard limit of open "
			"files is %llu\n",
			ranks, (unsigned long long)need, (unsigned long long)rl.rlim_max);
		return -EMFILE;
	}
	return 0;
}

static int fit_ports(unsigned ranks, unsigned sources)
{
	unsigned lo = 32768, hi = 60999, per = ranks / (sources ? sources : 1);
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	if (f) {
		if (fscanf(f, "%u %u", &lo, &hi) != 2) {
			lo = 32768;
			hi = 60999;
		}
		fclose(f);
	}
	if (ranks % (sources ? sources : 1))
		per++;
	if (per > hi - lo + 1) {
		fprintf(stderr,
			"tcpstore-storm: %u ranks over %u source address(es) need %u ports per "
			"address, the ephemeral range has %u: raise --sources\n",
			ranks, sources ? sources : 1, per, hi - lo + 1);
		return -EADDRNOTAVAIL;
	}
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: tcpstore-storm [--host ADDR] --port PORT [--ranks N] "
		     "[--dialect modern|legacy]\n"
		     "                      [--sources S] [--concurrency C] [--timeout SECONDS] "
		     "[--tag TAG]\n");
}

static bool parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = (unsigned)v;
	return true;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"host", required_argument, NULL, 'H'},
		{"port", required_argument, NULL, 'p'},
		{"ranks", required_argument, NULL, 'n'},
		{"dialect", required_argument, NULL, 'd'},
		{"sources", required_argument, NULL, 's'},
		{"concurrency", required_argument, NULL, 'c'},
		{"timeout", required_argument, NULL, 't'},
		{"tag", required_argument, NULL, 'T'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct storm s = {.d = &dialects[0], .ranks = 1024, .concurrency = 1024};
	const char *host = "127.0.0.1";
	unsigned port = 0;
	double timeout_s = 120;
	char tag[48], *end;
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
	int opt, li = 0, rc, status;
	int64_t *lat, t_last = 0;
	unsigned nlat = 0;

	snprintf(tag, sizeof(tag), "storm-%d-%lld", (int)getpid(), (long long)now_ns());
	s.tag = tag;
	while ((opt = getopt_long(argc, argv, "h", opts, &li)) != -1) {
		switch (opt) {
		case 'H':
			host = optarg;
			break;
		case 'p':
			if (!parse_uint(optarg, 1, 65535, &port))
				goto bad;
			break;
		case 'n':
			if (!parse_uint(optarg, 1, 1u << 22, &s.ranks))
				goto bad;
			break;
		case 'd':
			if (!strcmp(optarg, "modern"))
				s.d = &dialects[0];
			else if (!strcmp(optarg, "legacy"))
				s.d = &dialects[1];
			else
				goto bad;
			break;
		case 's':
			if (!parse_uint(optarg, 0, 1u << 16, &s.sources))
				goto bad;
			break;
		case 'c':
			if (!parse_uint(optarg, 1, 1u << 22, &s.concurrency))
				goto bad;
			break;
		case 't':
			timeout_s = strtod(optarg, &end);
			if (end == optarg || *end || !(timeout_s > 0 && timeout_s < 1e6))
				goto bad;
			break;
		case 'T':
			if (!*optarg || strlen(optarg) > 40)
				goto bad;
			s.tag = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !port) {
		usage(stderr);
		return 2;
	}
	if (getaddrinfo(host, NULL, &hints, &ai) != 0) {
		fprintf(stderr, "tcpstore-storm: cannot resolve '%s'\n", host);
		return 2;
	}
	memcpy(&s.dst, ai->ai_addr, sizeof(s.dst));
	s.dst.sin_port = htons((uint16_t)port);
	freeaddrinfo(ai);
	if (fit_descriptors(s.ranks) < 0 || fit_ports(s.ranks, s.sources) < 0)
		return 2;
	snprintf(s.num_key, sizeof(s.num_key), "/%s/num_members", s.tag);
	snprintf(s.last_key, sizeof(s.last_key), "/%s/last_member", s.tag);
	s.r = calloc(s.ranks, sizeof(*s.r));
	s.idx_seen = calloc(s.ranks, 1);
	s.retry_q = calloc(s.ranks, sizeof(*s.retry_q));
	lat = calloc(s.ranks, sizeof(*lat));
	if (!s.r || !s.idx_seen || !s.retry_q || !lat) {
		fprintf(stderr, "tcpstore-storm: out of memory for %u ranks\n", s.ranks);
		return 2;
	}
	for (unsigned i = 0; i < s.ranks; i++)
		s.r[i].fd = -1;

	rc = run(&s, timeout_s);

	for (unsigned i = 0; i < s.ranks; i++) {
		struct rank *k = &s.r[i];

		if (k->step == STEP_RELEASED) {
			lat[nlat++] = k->t_end - k->t_start;
			if (k->t_end > t_last)
				t_last = k->t_end;
		}
		if (k->fd >= 0) {
			/* A reset, not a FIN: no TIME_WAIT left to the next run. */
			struct linger lg = {1, 0};

			setsockopt(k->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			close(k->fd);
		}
	}
	qsort(lat, nlat, sizeof(*lat), cmp_i64);
	status = 0;
	if (s.released != s.ranks)
		status = s.connected_any && !s.understood ? 3 : 1;
	printf("tcpstore-storm: ranks=%u dialect=%s sources=%u concurrency=%u connections=%u "
	       "released=%u "
	       "failures=%u retries=%u total_s=%.3f p50_ms=%.1f p99_ms=%.1f max_ms=%.1f "
	       "status=%s\n",
	       s.ranks, s.d->name, s.sources, s.concurrency, s.connections, s.released, s.failed,
	       s.retries, nlat == s.ranks ? (double)(t_last - s.t_first) / 1e9 : -1.0,
	       nlat ? (double)lat[(nlat - 1) / 2] / 1e6 : -1.0,
	       nlat ? (double)lat[(size_t)((nlat - 1) * 0.99)] / 1e6 : -1.0,
	       nlat ? (double)lat[nlat - 1] / 1e6 : -1.0,
	       status == 0	  ? "ok"
	       : rc == -ETIMEDOUT ? "timeout"
	       : status == 3	  ? "refused"
				  : "failed");
	if (rc == -ETIMEDOUT)
		fprintf(stderr, "tcpstore-storm: timed out after %gs: %u of %u ranks released\n",
			timeout_s, s.released, s.ranks);
	if (s.failed)
		fprintf(stderr, "tcpstore-storm: %u rank(s) failed, the first: %s\n", s.failed,
			s.first_error);
	if (status == 3)
		fprintf(stderr, "tcpstore-storm: the store accepted connections but never "
				"answered a first request right: it does not speak this TCPStore "
				"dialect\n");
	if (rc == -ETIMEDOUT && !status)
		status = 1;
	if (rc < 0 && status == 0)
		status = 1;
	free(lat);
	free(s.retry_q);
	free(s.idx_seen);
	free(s.r);
	return status;
bad:
	fprintf(stderr, "tcpstore-storm: invalid value '%s' for --%s\n", optarg, opts[li].name);
	return 2;
}

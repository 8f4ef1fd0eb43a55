/* store_bench: load generator for the crun store, driven by
 * scripts/bench/store.
 *
 *   store_bench --endpoint HOST:PORT --clients N --seconds S
 *               --op set|get|add|mixed [--value-size B] [--run ID]
 *               [--token-file FILE]
 *   store_bench --endpoint HOST:PORT --idle N [--seconds S]
 *   store_bench --op echo --clients N --seconds S
 *
 * Load mode: N threads, each with its own crun_store handle (a handle is
 * not thread-safe), run one operation at a time in a closed loop for S
 * seconds and time every call with the monotonic clock into a per-thread
 * log-linear histogram (about 3 % resolution). At the end one line goes to
 * stdout:
 *   clients=16 op=set value_size=32 seconds=3.00 ops=... ops_per_s=...
 *   p50_us=... p99_us=... p999_us=... max_us=... errors=0
 * GET reads keys the thread set before the clock started; ADD increments
 * one counter shared by every thread, and the counter is checked against
 * the number of successful adds afterwards, so a lost or doubled update is
 * an error, not a fast number.
 *
 * Echo mode is the yardstick for the others: no store at all, a bare epoll
 * echo server thread on a loopback port and N client threads doing the
 * same send, poll, recv round trip with a message the size of a small SET
 * request. Its ops/s is what this machine allows for one request at a time
 * per connection; --endpoint is ignored.
 *
 * Idle mode: opens N connections (handshake done), prints
 * "ready connections=N" and holds them for S seconds (default 60), or until
 * SIGTERM/SIGINT, so the caller can read the server's memory.
 *
 * Exit status: 0 success, 1 a call failed or the add check did not hold,
 * 2 usage error, 3 could not connect. */
#include <crun/store.h>
#include <errno.h>
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

#define PROG "store_bench"
#define KEYS_PER_CLIENT 256
#define MAX_CLIENTS 4096
#define CALL_TIMEOUT_MS 10000

/* Histogram of latencies in ns: values below 64 have a bucket each; above,
 * each power of two is split into 32 buckets. */
#define HIST_LINEAR 64
#define HIST_SUB 32
#define HIST_BUCKETS (HIST_LINEAR + 58 * HIST_SUB)

struct hist {
	uint64_t count[HIST_BUCKETS];
	uint64_t total;
	uint64_t max;
};

enum bench_op {
	OP_SET,
	OP_GET,
	OP_ADD,
	OP_MIXED,
	OP_ECHO,
};

static const char *const op_names[] = {"set", "get", "add", "mixed", "echo"};

/* Echo mode's message: about a SET of a 12-byte key and a 32-byte value. */
#define ECHO_MSG 80

struct bench {
	struct crun_store_opts opts;
	enum bench_op op;
	size_t value_size;
	int clients;
	double seconds;
	uint8_t *value;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	int connected; /* threads that finished setup */
	int failed;    /* threads whose setup failed */
	int go;	       /* 1: start; -1: abort */
	uint64_t start_ns;
	uint64_t stop_ns;
	int echo_port;
};

struct client {
	struct bench *b;
	int index;
	pthread_t thread;
	struct crun_store *store;
	int fd; /* echo mode */
	struct hist hist;
	uint64_t ops;
	uint64_t adds;
	uint64_t errors;
	uint64_t end_ns;
	int setup_rc;
};

static volatile sig_atomic_t stop_idle;

static void on_signal(int sig)
{
	(void)sig;
	stop_idle = 1;
}

static unsigned hist_index(uint64_t v)
{
	if (v < HIST_LINEAR)
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 6 */
	unsigned shift = e - 5;
	unsigned sub = (unsigned)(v >> shift) - HIST_SUB;
	return HIST_LINEAR + (e - 6) * HIST_SUB + sub;
}

/* Middle of bucket i, in ns. */
static double hist_value(unsigned i)
{
	if (i < HIST_LINEAR)
		return i;
	unsigned e = (i - HIST_LINEAR) / HIST_SUB + 6;
	unsigned sub = (i - HIST_LINEAR) % HIST_SUB;
	double width = (double)(1ull << (e - 5));
	return (double)(HIST_SUB + sub) * width + width / 2;
}

static void hist_add(struct hist *h, uint64_t v)
{
	h->count[hist_index(v)]++;
	h->total++;
	if (v > h->max)
		h->max = v;
}

static void hist_merge(struct hist *dst, const struct hist *src)
{
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		dst->count[i] += src->count[i];
	dst->total += src->total;
	if (src->max > dst->max)
		dst->max = src->max;
}

/* Value (ns) below which a fraction q of the samples lie. */
static double hist_quantile(const struct hist *h, double q)
{
	if (h->total == 0)
		return 0;
	uint64_t rank = (uint64_t)(q * (double)h->total);
	if (rank >= h->total)
		rank = h->total - 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->count[i];
		if (seen > rank) {
			double v = hist_value(i);
			return v > (double)h->max ? (double)h->max : v;
		}
	}
	return (double)h->max;
}

static void client_key(char *buf, size_t len, int client, uint64_t i)
{
	snprintf(buf, len, "bench/%d/%" PRIu64, client, i % KEYS_PER_CLIENT);
}

/* Echo mode: a plain TCP connection to the echo thread. */
static int echo_connect(struct client *c)
{
	struct sockaddr_in sa = {
		.sin_family = AF_INET,
		.sin_port = htons((uint16_t)c->b->echo_port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	};
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int rc = -errno;
		fprintf(stderr, PROG ": cannot connect to the echo thread: %s\n", strerror(errno));
		return rc;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

/* What libcrun does per call: one send, poll for the reply, recv it. */
static int echo_round_trip(struct client *c)
{
	uint8_t msg[ECHO_MSG] = {0};
	size_t got = 0;

	if (send(c->fd, msg, sizeof(msg), MSG_NOSIGNAL) != (ssize_t)sizeof(msg))
		return -EPIPE;
	while (got < sizeof(msg)) {
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		if (poll(&p, 1, CALL_TIMEOUT_MS) <= 0)
			return -ETIMEDOUT;
		ssize_t n = recv(c->fd, msg + got, sizeof(msg) - got, 0);
		if (n <= 0)
			return -ECONNRESET;
		got += (size_t)n;
	}
	return 0;
}

static atomic_int echo_stop;

/* The echo thread: one epoll loop writing back whatever it reads, until
 * echo_stop is set. */
static void *echo_main(void *arg)
{
	int lfd = *(int *)arg;
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
	struct epoll_event evs[64];
	uint8_t buf[4096];
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		goto out_close;
	while (!atomic_load(&echo_stop)) {
		int n = epoll_wait(ep, evs, 64, 100);
		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == lfd) {
				int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
				if (cfd < 0)
					continue;
				int one = 1;
				setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				struct epoll_event cev = {.events = EPOLLIN, .data.fd = cfd};
				epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &cev);
				continue;
			}
			ssize_t r = read(fd, buf, sizeof(buf));
			if (r <= 0 || crun__write_all(fd, buf, (size_t)r) < 0)
				close(fd);
		}
	}
out_close:
	if (ep >= 0)
		close(ep);
	return NULL;
}

/* Starts the echo thread on a free loopback port: the listening socket in
 * *lfd, the port in b->echo_port. 0 or a negative errno. */
static int echo_start(struct bench *b, int *lfd, pthread_t *thread)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int rc;

	*lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*lfd < 0)
		return -errno;
	if (bind(*lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(*lfd, 1024) < 0 ||
	    getsockname(*lfd, (struct sockaddr *)&sa, &len) < 0) {
		rc = -errno;
		goto out_close;
	}
	b->echo_port = ntohs(sa.sin_port);
	rc = -pthread_create(thread, NULL, echo_main, lfd);
	if (rc == 0)
		return 0;
out_close:
	close(*lfd);
	*lfd = -1;
	return rc;
}

/* Connects and prepares the keys GET reads. 0 or a negative errno. */
static int client_setup(struct client *c)
{
	struct bench *b = c->b;
	char key[64];
	int rc;

	if (b->op == OP_ECHO)
		return echo_connect(c);
	c->store = crun_store_create(&b->opts);
	if (!c->store)
		return -ENOMEM;
	rc = crun_store_connect(c->store);
	if (rc < 0) {
		fprintf(stderr, PROG ": cannot connect client %d: %s\n", c->index,
			crun_store_errmsg(c->store));
		return rc;
	}
	if (b->op != OP_GET && b->op != OP_MIXED)
		return 0;
	for (uint64_t i = 0; i < KEYS_PER_CLIENT; i++) {
		client_key(key, sizeof(key), c->index, i);
		rc = crun_store_set(c->store, key, b->value, b->value_size, CALL_TIMEOUT_MS);
		if (rc < 0) {
			fprintf(stderr, PROG ": set '%s' failed: %s\n", key,
				crun_store_errmsg(c->store));
			return rc;
		}
	}
	return 0;
}

static int client_do(struct client *c, enum bench_op op, uint64_t i)
{
	struct bench *b = c->b;
	char key[64];
	int rc;

	switch (op) {
	case OP_SET:
		client_key(key, sizeof(key), c->index, i);
		return crun_store_set(c->store, key, b->value, b->value_size, CALL_TIMEOUT_MS);
	case OP_GET: {
		struct crun_store_buf buf = {0};
		client_key(key, sizeof(key), c->index, i);
		rc = crun_store_get(c->store, key, &buf, 0);
		if (rc == 0 && buf.len != b->value_size)
			rc = -EPROTO;
		crun_store_buf_finish(&buf);
		return rc;
	}
	case OP_ADD:
		rc = crun_store_add(c->store, "bench/counter", 1, NULL, CALL_TIMEOUT_MS);
		if (rc == 0)
			c->adds++;
		return rc;
	case OP_MIXED:
		return client_do(c, (enum bench_op)(i % 3), i / 3);
	case OP_ECHO:
		return echo_round_trip(c);
	}
	return -EINVAL;
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	struct bench *b = c->b;

	c->setup_rc = client_setup(c);
	pthread_mutex_lock(&b->lock);
	if (c->setup_rc < 0)
		b->failed++;
	else
		b->connected++;
	pthread_cond_broadcast(&b->cond);
	while (b->go == 0)
		pthread_cond_wait(&b->cond, &b->lock);
	int go = b->go;
	uint64_t stop_ns = b->stop_ns;
	pthread_mutex_unlock(&b->lock);
	if (go < 0 || c->setup_rc < 0)
		return NULL;

	uint64_t t0 = crun__now_ns();
	for (uint64_t i = 0; t0 < stop_ns; i++) {
		int rc = client_do(c, b->op, i);
		uint64_t t1 = crun__now_ns();
		if (rc < 0) {
			if (c->errors++ == 0)
				fprintf(stderr, PROG ": client %d: %s failed: %s\n", c->index,
					op_names[b->op],
					c->store ? crun_store_errmsg(c->store) : strerror(-rc));
		} else {
			hist_add(&c->hist, t1 - t0);
			c->ops++;
		}
		t0 = t1;
	}
	c->end_ns = t0;
	return NULL;
}

/* Reads the shared counter into *out (missing: 0). ADD runs read it
 * before and after: the difference must equal the adds that succeeded. */
static int read_counter(struct bench *b, uint64_t *out)
{
	struct crun_store *s = crun_store_create(&b->opts);
	struct crun_store_buf buf = {0};
	int rc;

	if (!s)
		return -ENOMEM;
	rc = crun_store_connect(s);
	if (rc < 0) {
		fprintf(stderr, PROG ": cannot connect: %s\n", crun_store_errmsg(s));
		goto out_destroy;
	}
	rc = crun_store_get(s, "bench/counter", &buf, 0);
	if (rc < 0 && rc != -ENOENT) {
		fprintf(stderr, PROG ": cannot read 'bench/counter': %s\n", crun_store_errmsg(s));
		goto out_destroy;
	}
	*out = rc == -ENOENT ? 0 : strtoull((const char *)buf.data, NULL, 10);
	rc = 0;
	crun_store_buf_finish(&buf);
out_destroy:
	crun_store_destroy(s);
	return rc;
}

static int run_load(struct bench *b)
{
	struct client *clients;
	struct hist *all;
	uint64_t counter0 = 0;
	pthread_t echo_thread;
	int echo_fd = -1;
	int started = 0;
	int status = 0;

	clients = calloc((size_t)b->clients, sizeof(*clients));
	all = calloc(1, sizeof(*all));
	b->value = malloc(b->value_size ? b->value_size : 1);
	if (!clients || !all || !b->value) {
		fprintf(stderr, PROG ": out of memory\n");
		status = 1;
		goto out_free;
	}
	memset(b->value, 'v', b->value_size);
	if (b->op == OP_ECHO && echo_start(b, &echo_fd, &echo_thread) < 0) {
		fprintf(stderr, PROG ": cannot start the echo thread\n");
		status = 1;
		goto out_free;
	}
	if ((b->op == OP_ADD || b->op == OP_MIXED) && read_counter(b, &counter0) < 0) {
		status = 3;
		goto out_free;
	}

	for (int i = 0; i < b->clients; i++) {
		clients[i].b = b;
		clients[i].index = i;
		clients[i].fd = -1;
		if (pthread_create(&clients[i].thread, NULL, client_main, &clients[i]) != 0) {
			fprintf(stderr, PROG ": cannot start thread %d\n", i);
			break;
		}
		started++;
	}

	pthread_mutex_lock(&b->lock);
	while (b->connected + b->failed < started)
		pthread_cond_wait(&b->cond, &b->lock);
	b->go = (b->failed || started < b->clients) ? -1 : 1;
	b->start_ns = crun__now_ns();
	b->stop_ns = b->start_ns + (uint64_t)(b->seconds * 1e9);
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);

	uint64_t ops = 0, adds = 0, errors = 0, end_ns = b->start_ns;
	for (int i = 0; i < started; i++) {
		pthread_join(clients[i].thread, NULL);
		hist_merge(all, &clients[i].hist);
		ops += clients[i].ops;
		adds += clients[i].adds;
		errors += clients[i].errors;
		if (clients[i].end_ns > end_ns)
			end_ns = clients[i].end_ns;
	}
	if (b->go < 0) {
		status = 3;
		goto out_destroy;
	}
	if (b->op == OP_ADD || b->op == OP_MIXED) {
		uint64_t after = 0;
		if (read_counter(b, &after) < 0) {
			errors++;
		} else if (after - counter0 != adds) {
			fprintf(stderr,
				PROG ": add check failed 'bench/counter': went from %" PRIu64
				     " to %" PRIu64 " after %" PRIu64 " adds\n",
				counter0, after, adds);
			errors++;
		}
	}

	double elapsed = (double)(end_ns - b->start_ns) / 1e9;
	printf("clients=%d op=%s value_size=%zu seconds=%.2f ops=%" PRIu64
	       " ops_per_s=%.0f p50_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f"
	       " errors=%" PRIu64 "\n",
	       b->clients, op_names[b->op], b->value_size, elapsed, ops,
	       elapsed > 0 ? (double)ops / elapsed : 0.0, hist_quantile(all, 0.50) / 1e3,
	       hist_quantile(all, 0.99) / 1e3, hist_quantile(all, 0.999) / 1e3,
	       (double)all->max / 1e3, errors);
	fflush(stdout);
	if (errors)
		status = 1;
out_destroy:
	for (int i = 0; i < started; i++) {
		crun_store_destroy(clients[i].store);
		if (clients[i].fd >= 0)
			close(clients[i].fd);
	}
	if (echo_fd >= 0) {
		atomic_store(&echo_stop, 1);
		pthread_join(echo_thread, NULL);
		close(echo_fd);
	}
out_free:
	free(b->value);
	free(all);
	free(clients);
	return status;
}

static int run_idle(struct bench *b, int n)
{
	struct crun_store **stores = calloc((size_t)n, sizeof(*stores));
	int opened = 0;
	int status = 0;

	if (!stores) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	for (; opened < n && !stop_idle; opened++) {
		stores[opened] = crun_store_create(&b->opts);
		if (!stores[opened]) {
			fprintf(stderr, PROG ": out of memory\n");
			status = 1;
			goto out_close;
		}
		int rc = crun_store_connect(stores[opened]);
		if (rc < 0) {
			fprintf(stderr, PROG ": cannot open connection %d: %s\n", opened + 1,
				crun_store_errmsg(stores[opened]));
			opened++;
			status = 3;
			goto out_close;
		}
	}
	/* One round trip on each, so every connection is fully served. */
	for (int i = 0; i < opened; i++) {
		int64_t rtt = crun_store_ping(stores[i], CALL_TIMEOUT_MS);
		if (rtt < 0) {
			fprintf(stderr, PROG ": ping on connection %d failed: %s\n", i + 1,
				crun_store_errmsg(stores[i]));
			status = 1;
			goto out_close;
		}
	}
	printf("ready connections=%d\n", opened);
	fflush(stdout);
	uint64_t until = crun__now_ms() + (uint64_t)(b->seconds * 1e3);
	while (!stop_idle && crun__now_ms() < until) {
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
out_close:
	for (int i = 0; i < opened; i++)
		crun_store_destroy(stores[i]);
	free(stores);
	return status;
}

static const char *opt_name(const struct option *opts, int val)
{
	for (; opts->name; opts++)
		if (opts->val == val)
			return opts->name;
	return "?";
}

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " --endpoint HOST:PORT --clients N --seconds S\n"
		   "                   --op set|get|add|mixed [--value-size B] [--run ID]\n"
		   "                   [--token-file FILE]\n"
		   "       " PROG " --endpoint HOST:PORT --idle N [--seconds S]\n"
		   "       " PROG " --op echo --clients N --seconds S\n");
}

/* Lets idle mode hold more connections than the default soft limit. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"endpoint", required_argument, NULL, 'e'},
		{"clients", required_argument, NULL, 'c'},
		{"seconds", required_argument, NULL, 's'},
		{"op", required_argument, NULL, 'o'},
		{"value-size", required_argument, NULL, 'v'},
		{"idle", required_argument, NULL, 'i'},
		{"run", required_argument, NULL, 'r'},
		{"token-file", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct bench b = {
		.op = OP_SET,
		.value_size = 32,
		.clients = 1,
		.seconds = -1,
		.lock = PTHREAD_MUTEX_INITIALIZER,
		.cond = PTHREAD_COND_INITIALIZER,
	};
	char host[256] = "127.0.0.1";
	char run_id[64];
	char err[128];
	int port = 29400;
	int64_t num;
	char *token = NULL;
	size_t token_len = 0;
	int idle = 0;
	int opt;

	snprintf(run_id, sizeof(run_id), "bench-%ld-%" PRIu64, (long)getpid(), crun__now_ns());
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'e':
			if (crun__parse_endpoint(optarg, 29400, host, sizeof(host), &port, err,
						 sizeof(err)) < 0)
				goto bad_value;
			break;
		case 'c':
			if (crun__parse_int64(optarg, 1, MAX_CLIENTS, &num, err, sizeof(err)) < 0)
				goto bad_value;
			b.clients = (int)num;
			break;
		case 's': {
			char *end;
			errno = 0;
			b.seconds = strtod(optarg, &end);
			if (errno || end == optarg || *end ||
			    !(b.seconds > 0 && b.seconds <= 3600)) {
				snprintf(err, sizeof(err), "expected seconds in (0, 3600]");
				goto bad_value;
			}
			break;
		}
		case 'o': {
			size_t i;
			for (i = 0; i < CRUN_ARRAY_SIZE(op_names); i++)
				if (strcmp(optarg, op_names[i]) == 0)
					break;
			if (i == CRUN_ARRAY_SIZE(op_names)) {
				snprintf(err, sizeof(err), "expected set, get, add, mixed or echo");
				goto bad_value;
			}
			b.op = (enum bench_op)i;
			break;
		}
		case 'v':
			if (crun__parse_int64(optarg, 0, 1 << 20, &num, err, sizeof(err)) < 0)
				goto bad_value;
			b.value_size = (size_t)num;
			break;
		case 'i':
			if (crun__parse_int64(optarg, 1, 100000, &num, err, sizeof(err)) < 0)
				goto bad_value;
			idle = (int)num;
			break;
		case 'r':
			snprintf(run_id, sizeof(run_id), "%s", optarg);
			break;
		case 't':
			free(token);
			if (crun__read_secret_file(optarg, 4096, &token, &token_len, err,
						   sizeof(err)) < 0)
				goto bad_value;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (b.seconds < 0)
		b.seconds = idle ? 60 : 3;

	b.opts.host = host;
	b.opts.port = port;
	b.opts.run_id = run_id;
	b.opts.token = token;
	b.opts.token_len = token_len;
	b.opts.connect_timeout_ms = 5000;
	b.opts.timeout_ms = CALL_TIMEOUT_MS;

	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	if (idle) {
		struct sigaction sa = {.sa_handler = on_signal};
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGINT, &sa, NULL);
		return run_idle(&b, idle);
	}
	return run_load(&b);

bad_value:
	fprintf(stderr, PROG ": invalid value for --%s '%s': %s\n", opt_name(longopts, opt), optarg,
		err);
	return 2;
}

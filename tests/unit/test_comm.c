/* crun-train's comm interface and its cpu backend: groups of 2, 3 and 4
 * forked processes meet through a store server (forked too), run every
 * collective and compare with exact expected values; results are bitwise
 * reproducible; a dead, stalled or mismatched peer makes the others fail
 * within the timeout with a message; a stranger at the listening port is
 * refused. Every child is reaped, none outlives the test (parent-death
 * signal, and a kill when it overruns its bound). */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "common/log.h"
#include "common/util.h"
#include "rendezvous/server.h"
#include "trainer/comm.h"
#include "trainer/comm_shm.h"
#include <crun/store.h>

#define MAX_PROCS 6
#define TIMEOUT_MS 2000
#define GROUP_BOUND_MS 40000

static pid_t server_pid = -1;
static int no_shm_rank = -2; /* this rank (-1: all) uses TCP only */
static bool send_thread;     /* every rank uses a send thread */
static int server_port;
static unsigned run_counter;

/* ------------------------------------------------------------------ */
/* Store server in a child process                                     */

static int start_server(void **state)
{
	int fds[2];
	struct pollfd p;
	ssize_t n;

	(void)state;
	if (pipe(fds) < 0)
		return -1;
	server_pid = fork();
	if (server_pid < 0)
		return -1;
	if (server_pid == 0) {
		uv_loop_t loop;
		struct crun__server_opts so = {0};
		struct crun__server *srv;
		char err[256];
		int port;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(fds[0]);
		crun__log_init("test_comm-server", CRUN_LOG_ERROR);
		uv_loop_init(&loop);
		crun__server_limits_default(&so.limits);
		srv = crun__server_create(&loop, &so);
		if (!srv || crun__server_listen(srv, "127.0.0.1", 0, err, sizeof(err)) < 0)
			_exit(1);
		port = crun__server_port(srv);
		if (write(fds[1], &port, sizeof(port)) != sizeof(port))
			_exit(1);
		close(fds[1]);
		uv_run(&loop, UV_RUN_DEFAULT);
		_exit(0);
	}
	close(fds[1]);
	p = (struct pollfd){.fd = fds[0], .events = POLLIN};
	if (poll(&p, 1, 10000) != 1)
		return -1;
	n = read(fds[0], &server_port, sizeof(server_port));
	close(fds[0]);
	if (n != sizeof(server_port) || server_port <= 0)
		return -1;
	return 0;
}

static int stop_server(void **state)
{
	(void)state;
	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
		server_pid = -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Groups of forked ranks                                              */

struct result {
	int rc;		  /* what the child function returned */
	uint64_t hash;	  /* of the data it produced */
	uint64_t call_ms; /* duration of the call that failed, if one did */
	char msg[400];
};

struct proc_status {
	int status; /* from waitpid */
	bool got;   /* a result record came back */
	struct result res;
};

/* Runs in each child. comm is NULL for ranks >= world (helpers that do
 * not join the group). Returns 0 when every check passed; fills res. */
typedef int (*child_fn)(struct crun__comm *comm, int rank, int world, void *arg,
			struct result *res);

static void resf(struct result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void resf(struct result *res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(res->msg, sizeof(res->msg), fmt, ap);
	va_end(ap);
}

static void child_main(int rank, int world, int64_t timeout_ms, child_fn fn, void *arg, int fd)
{
	struct crun__comm_opts o = {0};
	struct crun__comm *comm = NULL;
	struct result res = {0};
	char err[512];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGALRM, SIG_DFL);
	if (rank == 0 && getenv("TEST_COMM_DELAY_RANK0"))
		usleep(500000);
	if (rank < world) {
		o.rank = rank;
		o.world_size = world;
		o.timeout_ms = timeout_ms;
		o.no_shm = no_shm_rank == -1 || no_shm_rank == rank;
		o.send_thread = send_thread;
		comm = crun__comm_create(&o, err, sizeof(err));
		if (!comm) {
			res.rc = -1;
			resf(&res, "rank %d: create: %s", rank, err);
			goto out;
		}
		if (crun__comm_rank(comm) != rank || crun__comm_size(comm) != world) {
			res.rc = -1;
			resf(&res, "rank %d: wrong rank or size", rank);
			goto out;
		}
	}
	res.rc = fn(comm, rank, world, arg, &res);
out:
	crun__comm_destroy(comm);
	if (write(fd, &res, sizeof(res)) != sizeof(res))
		_exit(3);
	_exit(res.rc == 0 ? 0 : 1);
}

/* Forks nproc processes (ranks 0..world-1 join a group, the others are
 * helpers), each under a fresh run id, and waits for all of them for at
 * most GROUP_BOUND_MS; stragglers are killed and the test fails. */
static void run_group(int nproc, int world, int64_t timeout_ms, child_fn fn, void *arg,
		      struct proc_status *st)
{
	pid_t pids[MAX_PROCS];
	int fds[MAX_PROCS];
	char run_id[64];
	uint64_t deadline;
	int left = nproc;

	assert_true(nproc <= MAX_PROCS);
	snprintf(run_id, sizeof(run_id), "test-comm-%d-%u", (int)getpid(), run_counter++);
	setenv("CRUN_RUN_ID", run_id, 1);
	memset(st, 0, sizeof(*st) * (size_t)nproc);
	for (int i = 0; i < nproc; i++) {
		int p[2];

		assert_int_equal(pipe(p), 0);
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			close(p[0]);
			child_main(i, world, timeout_ms, fn, arg, p[1]);
		}
		close(p[1]);
		fds[i] = p[0];
	}
	deadline = crun__now_ms() + GROUP_BOUND_MS;
	while (left > 0 && crun__now_ms() < deadline) {
		for (int i = 0; i < nproc; i++) {
			if (pids[i] > 0 && waitpid(pids[i], &st[i].status, WNOHANG) == pids[i]) {
				pids[i] = -1;
				left--;
			}
		}
		if (left > 0)
			usleep(5000);
	}
	for (int i = 0; i < nproc; i++) {
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], &st[i].status, 0);
		}
		st[i].got = read(fds[i], &st[i].res, sizeof(st[i].res)) == sizeof(st[i].res);
		close(fds[i]);
	}
	if (left > 0)
		fail_msg("%d of %d processes overran %d ms", left, nproc, GROUP_BOUND_MS);
}

static void expect_all_ok(int nproc, const struct proc_status *st)
{
	for (int i = 0; i < nproc; i++) {
		if (!st[i].got || st[i].res.rc != 0 || !WIFEXITED(st[i].status) ||
		    WEXITSTATUS(st[i].status) != 0)
			fail_msg("process %d: %s (status 0x%x)", i,
				 st[i].got ? st[i].res.msg : "no result", st[i].status);
	}
}

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* Small integers: sums over 4 ranks are exact in float. */
static float val(int rank, size_t i)
{
	return (float)((int)((i * 7 + (size_t)rank * 13) % 1024) - 512);
}

/* ------------------------------------------------------------------ */
/* Exact results of every collective                                   */

static const size_t sizes[] = {1, 7, 1000, 1 << 20};

static int check_all(struct crun__comm *comm, int r, int n, void *arg, struct result *res)
{
	(void)arg;
	for (size_t k = 0; k < CRUN_ARRAY_SIZE(sizes); k++) {
		size_t count = sizes[k];
		float *a = malloc(count * sizeof(float) * (size_t)n);
		float *b = malloc(count * sizeof(float) * (size_t)n);
		int root = (int)(k % (size_t)n), rc;

		if (!a || !b) {
			resf(res, "out of memory");
			return -1;
		}
		/* all-reduce, in place; also at a count not divisible by n */
		for (size_t cnt = count; cnt + 2 >= count && cnt > 0; cnt--) {
			for (size_t i = 0; i < cnt; i++)
				a[i] = val(r, i);
			if ((rc = crun__comm_allreduce_f32(comm, a, cnt)) < 0) {
				resf(res, "rank %d: all-reduce %zu: %s", r, cnt,
				     crun__comm_errmsg(comm));
				return -1;
			}
			for (size_t i = 0; i < cnt; i++) {
				float want = 0;

				for (int q = 0; q < n; q++)
					want += val(q, i);
				if (a[i] != want) {
					resf(res, "rank %d: all-reduce %zu: [%zu] = %g, want %g", r,
					     cnt, i, a[i], want);
					return -1;
				}
			}
		}
		/* reduce-scatter */
		for (size_t i = 0; i < count * (size_t)n; i++)
			a[i] = val(r, i);
		if (crun__comm_reduce_scatter_f32(comm, a, b, count) < 0) {
			resf(res, "rank %d: reduce-scatter %zu: %s", r, count,
			     crun__comm_errmsg(comm));
			return -1;
		}
		for (size_t i = 0; i < count; i++) {
			float want = 0;

			for (int q = 0; q < n; q++)
				want += val(q, (size_t)r * count + i);
			if (b[i] != want) {
				resf(res, "rank %d: reduce-scatter %zu: [%zu] = %g, want %g", r,
				     count, i, b[i], want);
				return -1;
			}
		}
		/* all-gather, from a separate buffer and in place */
		for (int inplace = 0; inplace < 2; inplace++) {
			float *in = inplace ? b + (size_t)r * count : a;

			for (size_t i = 0; i < count; i++)
				in[i] = val(r, i) + 0.5f;
			if (crun__comm_allgather_f32(comm, in, b, count) < 0) {
				resf(res, "rank %d: all-gather %zu: %s", r, count,
				     crun__comm_errmsg(comm));
				return -1;
			}
			for (int q = 0; q < n; q++)
				for (size_t i = 0; i < count; i++)
					if (b[(size_t)q * count + i] != val(q, i) + 0.5f) {
						resf(res,
						     "rank %d: all-gather %zu: wrong [%d][%zu]", r,
						     count, q, i);
						return -1;
					}
		}
		/* broadcast from a root that changes with the size */
		for (size_t i = 0; i < count; i++)
			a[i] = r == root ? val(root, i) : -1.0f;
		if (crun__comm_broadcast(comm, a, count * sizeof(float), root) < 0) {
			resf(res, "rank %d: broadcast %zu: %s", r, count, crun__comm_errmsg(comm));
			return -1;
		}
		for (size_t i = 0; i < count; i++)
			if (a[i] != val(root, i)) {
				resf(res, "rank %d: broadcast %zu from %d: wrong [%zu]", r, count,
				     root, i);
				return -1;
			}
		free(a);
		free(b);
		if (crun__comm_barrier(comm) < 0) {
			resf(res, "rank %d: barrier: %s", r, crun__comm_errmsg(comm));
			return -1;
		}
	}
	{
		double d[2] = {r + 0.25, (double)r * 1e10};
		double w0 = 0, w1 = 0;

		for (int q = 0; q < n; q++) {
			w0 += q + 0.25;
			w1 += (double)q * 1e10;
		}
		if (crun__comm_allreduce_f64(comm, d, 2) < 0 || d[0] != w0 || d[1] != w1) {
			resf(res, "rank %d: all-reduce f64: %g %g, want %g %g (%s)", r, d[0], d[1],
			     w0, w1, crun__comm_errmsg(comm));
			return -1;
		}
	}
	/* empty collectives are legal and keep the group in step */
	if (crun__comm_allreduce_f32(comm, NULL, 0) < 0 ||
	    crun__comm_allgather_f32(comm, NULL, NULL, 0) < 0 ||
	    crun__comm_broadcast(comm, NULL, 0, n - 1) < 0 || crun__comm_barrier(comm) < 0) {
		resf(res, "rank %d: empty collective: %s", r, crun__comm_errmsg(comm));
		return -1;
	}
	/* odd byte counts leave the streams unaligned for the next call */
	{
		char text[13];
		float f[5] = {1, 2, 3, 4, 5};

		snprintf(text, sizeof(text), "%s", r == 1 ? "from rank 1!" : "");
		if (crun__comm_broadcast(comm, text, sizeof(text), 1) < 0 ||
		    strcmp(text, "from rank 1!") || crun__comm_allreduce_f32(comm, f, 5) < 0 ||
		    f[4] != 5.0f * (float)n) {
			resf(res, "rank %d: odd broadcast: '%s' %g (%s)", r, text, f[4],
			     crun__comm_errmsg(comm));
			return -1;
		}
	}
	return 0;
}

static void test_collectives_2(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	run_group(2, 2, TIMEOUT_MS, check_all, NULL, st);
	expect_all_ok(2, st);
}

static void test_collectives_3(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	run_group(3, 3, TIMEOUT_MS, check_all, NULL, st);
	expect_all_ok(3, st);
}

static void test_collectives_4(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	run_group(4, 4, TIMEOUT_MS, check_all, NULL, st);
	expect_all_ok(4, st);
}

/* Every link over TCP, and a mix: rank 2 refuses shared memory, so its
 * two links use TCP while the others use rings. */
static void test_collectives_tcp(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	no_shm_rank = -1;
	run_group(3, 3, TIMEOUT_MS, check_all, NULL, st);
	no_shm_rank = -2;
	expect_all_ok(3, st);
}

static void test_collectives_mixed(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	no_shm_rank = 2;
	run_group(4, 4, TIMEOUT_MS, check_all, NULL, st);
	no_shm_rank = -2;
	expect_all_ok(4, st);
}

/* ------------------------------------------------------------------ */
/* Shared-memory rings without names                                   */

/* Counts this process's mappings of rings, and of anything in /dev/shm. */
static int count_rings(struct crun__comm *comm, int r, int n, void *arg, struct result *res)
{
	FILE *f = fopen("/proc/self/maps", "r");
	int rings = 0, named = 0;
	char line[512];

	(void)comm;
	(void)n;
	(void)arg;
	if (!f) {
		resf(res, "rank %d: cannot read /proc/self/maps", r);
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		rings += strstr(line, "/memfd:crun-comm") != NULL;
		named += strstr(line, "/dev/shm/") != NULL;
	}
	fclose(f);
	/* its own incoming ring and its right neighbour's */
	if (rings != 2 || named != 0) {
		resf(res, "rank %d: %d ring mappings (want 2), %d of /dev/shm (want 0)", r, rings,
		     named);
		return -1;
	}
	return 0;
}

/* Ranks of one host share rings that exist only as mappings. */
static void test_rings_have_no_name(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	run_group(3, 3, TIMEOUT_MS, count_rings, NULL, st);
	expect_all_ok(3, st);
}

static const struct crun__shm_offer an_offer = {
	.present = true,
	.place = {.boot_id = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		  .pid_ns = 4026531836u},
	.pid = 4242,
	.fd = 17,
	.nonce = 0x0123456789abcdefull,
	.cap = 2u << 20,
};

static void test_shm_offer(void **state)
{
	uint8_t buf[CRUN__SHM_OFFER_LEN], bad[CRUN__SHM_OFFER_LEN];
	struct crun__shm_offer o, none = {0};

	(void)state;
	crun__shm_offer_encode(buf, &an_offer);
	assert_int_equal(crun__shm_offer_decode(buf, &o), 0);
	assert_true(o.present);
	assert_memory_equal(o.place.boot_id, an_offer.place.boot_id, 16);
	assert_true(o.place.pid_ns == an_offer.place.pid_ns);
	assert_int_equal(o.pid, 4242);
	assert_int_equal(o.fd, 17);
	assert_true(o.nonce == an_offer.nonce);
	assert_true(o.cap == an_offer.cap);
	/* little-endian on the wire */
	assert_int_equal(buf[32], 4242 & 0xff);
	assert_int_equal(buf[33], 4242 >> 8);

	crun__shm_offer_encode(buf, &none);
	assert_int_equal(crun__shm_offer_decode(buf, &o), 0);
	assert_false(o.present);
	assert_int_equal(o.pid, 0);

	/* magic, flag, pid, fd, cap: each wrong one refused */
	static const struct {
		size_t off;
		uint8_t val;
	} wrong[] = {
		{0, 'X'},   /* magic */
		{4, 2},	    /* present */
		{35, 0x80}, /* pid < 0 */
		{39, 0x80}, /* fd < 0 */
		{48, 1},    /* cap not a multiple of 64 */
		{51, 0x40}, /* cap > 1 GiB */
	};
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(wrong); i++) {
		crun__shm_offer_encode(bad, &an_offer);
		bad[wrong[i].off] = wrong[i].val;
		assert_int_equal(crun__shm_offer_decode(bad, &o), -EPROTO);
		assert_false(o.present);
	}
	struct crun__shm_offer small = an_offer, nopid = an_offer;
	small.cap = 2048;
	nopid.pid = 0;
	crun__shm_offer_encode(bad, &small);
	assert_int_equal(crun__shm_offer_decode(bad, &o), -EPROTO);
	crun__shm_offer_encode(bad, &nopid);
	assert_int_equal(crun__shm_offer_decode(bad, &o), -EPROTO);
}

static void test_shm_reachable(void **state)
{
	struct crun__shm_place here = an_offer.place, there = an_offer.place, zero = {0};

	(void)state;
	assert_true(crun__shm_reachable(&here, &there));
	there.boot_id[15] ^= 1; /* another host */
	assert_false(crun__shm_reachable(&here, &there));
	there = here;
	there.pid_ns++; /* another container */
	assert_false(crun__shm_reachable(&here, &there));
	/* unknown places reach nothing, not even each other */
	assert_false(crun__shm_reachable(&zero, &zero));
	assert_false(crun__shm_reachable(&here, &zero));
	assert_false(crun__shm_reachable(&zero, &here));
	there = here;
	memset(there.boot_id, 0, 16);
	assert_false(crun__shm_reachable(&there, &there));
}

static void test_shm_boot_id(void **state)
{
	static const uint8_t want[16] = {0x8c, 0x1f, 0x0e, 0x3a, 0x52, 0x7b, 0x4d, 0x9e,
					 0xa1, 0x0b, 0xc2, 0xd3, 0xe4, 0xf5, 0x06, 0x17};
	static const char *const bad[] = {
		"",
		"8c1f0e3a-527b-4d9e-a10b-c2d3e4f50617x",
		"8c1f0e3a-527b-4d9e-a10b-c2d3e4f5061",
		"8c1f0e3a527b-4d9e-a10b-c2d3e4f506177",
		"8c1f0e3a-527b-4d9e-a10b-c2d3e4f5061g",
		"8c1f0e3a-527b-4d9e-a10b-c2d3e4f50617\n\n",
	};
	uint8_t out[16];

	(void)state;
	assert_int_equal(crun__shm_parse_boot_id("8c1f0e3a-527b-4d9e-a10b-c2d3e4f50617\n", out), 0);
	assert_memory_equal(out, want, 16);
	assert_int_equal(crun__shm_parse_boot_id("8C1F0E3A-527B-4D9E-A10B-C2D3E4F50617", out), 0);
	assert_memory_equal(out, want, 16);
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(bad); i++)
		assert_int_equal(crun__shm_parse_boot_id(bad[i], out), -EINVAL);
}

static void test_shm_proc_path(void **state)
{
	char buf[64], tiny[12];

	(void)state;
	assert_int_equal(crun__shm_proc_path(buf, sizeof(buf), 4242, 17), 0);
	assert_string_equal(buf, "/proc/4242/fd/17");
	assert_int_equal(crun__shm_proc_path(buf, sizeof(buf), 0, 17), -EINVAL);
	assert_int_equal(crun__shm_proc_path(buf, sizeof(buf), 4242, -1), -EINVAL);
	assert_int_equal(crun__shm_proc_path(tiny, sizeof(tiny), 4242, 17), -ENAMETOOLONG);
}

/* The same with a send thread per rank, over rings and over TCP. */
static void test_collectives_thread(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	send_thread = true;
	run_group(3, 3, TIMEOUT_MS, check_all, NULL, st);
	expect_all_ok(3, st);
	no_shm_rank = -1;
	run_group(4, 4, TIMEOUT_MS, check_all, NULL, st);
	no_shm_rank = -2;
	send_thread = false;
	expect_all_ok(4, st);
}

/* ------------------------------------------------------------------ */
/* Bitwise reproducibility                                             */

#define DET_COUNT 1000003 /* prime: segments of unequal length */

static float noise(int rank, size_t i)
{
	uint64_t x = (uint64_t)rank * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 1;

	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 29;
	return (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 1000.0f;
}

static int determinism(struct crun__comm *comm, int r, int n, void *arg, struct result *res)
{
	float *a = malloc(DET_COUNT * sizeof(float));
	uint64_t h[2];

	(void)arg;
	if (!a)
		return -1;
	for (int run = 0; run < 2; run++) {
		for (size_t i = 0; i < DET_COUNT; i++)
			a[i] = noise(r, i);
		if (crun__comm_allreduce_f32(comm, a, DET_COUNT) < 0) {
			resf(res, "rank %d: %s", r, crun__comm_errmsg(comm));
			free(a);
			return -1;
		}
		h[run] = fnv(a, DET_COUNT * sizeof(float), 14695981039346656037ull);
	}
	for (size_t i = 0; i < DET_COUNT; i += 997) {
		double want = 0;

		for (int q = 0; q < n; q++)
			want += noise(q, i);
		if (fabs(a[i] - want) > 1e-2) {
			resf(res, "rank %d: [%zu] = %.9g, want %.9g", r, i, a[i], want);
			free(a);
			return -1;
		}
	}
	free(a);
	if (h[0] != h[1]) {
		resf(res, "rank %d: two all-reduces of the same data differ", r);
		return -1;
	}
	res->hash = h[0];
	return 0;
}

static void test_determinism(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	for (int n = 3; n <= 4; n++) {
		uint64_t first = 0;

		for (int run = 0; run < 2; run++) {
			run_group(n, n, TIMEOUT_MS, determinism, NULL, st);
			expect_all_ok(n, st);
			for (int i = 0; i < n; i++)
				assert_true(st[i].res.hash == st[0].res.hash);
			if (run == 0)
				first = st[0].res.hash;
			else
				assert_true(st[0].res.hash == first);
		}
	}
}

/* ------------------------------------------------------------------ */
/* Failures: dead peer, stalled peer, mismatched calls, strangers       */

#define BIG (1u << 22)

/* Rank 1 is killed by SIGALRM while it runs all-reduces; the others must
 * fail in their current call, within the timeout, naming a peer. */
static int peer_dies(struct crun__comm *comm, int r, int n, void *arg, struct result *res)
{
	float *a = calloc(BIG, sizeof(float));
	int rc = 0;

	(void)n;
	(void)arg;
	if (!a)
		return -1;
	if (r == 1) {
		struct itimerval it = {.it_value = {.tv_usec = 30000}};

		setitimer(ITIMER_REAL, &it, NULL);
	}
	for (int i = 0; i < 100000; i++) {
		uint64_t t0 = crun__now_ms();

		rc = crun__comm_allreduce_f32(comm, a, BIG);
		if (rc < 0) {
			res->call_ms = crun__now_ms() - t0;
			break;
		}
	}
	free(a);
	if (rc == 0) {
		resf(res, "rank %d: no collective failed", r);
		return -1;
	}
	resf(res, "%s", crun__comm_errmsg(comm));
	/* A failed communicator refuses further calls at once. */
	if (crun__comm_barrier(comm) != -ENOTCONN) {
		resf(res, "rank %d: barrier after failure did not return -ENOTCONN", r);
		return -1;
	}
	return 1;
}

static void peer_dies_check(bool threaded, int tcp)
{
	struct proc_status st[MAX_PROCS];

	send_thread = threaded;
	no_shm_rank = tcp ? -1 : -2;
	run_group(3, 3, TIMEOUT_MS, peer_dies, NULL, st);
	send_thread = false;
	no_shm_rank = -2;
	assert_true(WIFSIGNALED(st[1].status) && WTERMSIG(st[1].status) == SIGALRM);
	for (int i = 0; i < 3; i += 2) {
		assert_true(st[i].got);
		assert_int_equal(st[i].res.rc, 1);
		if (getenv("TEST_COMM_VERBOSE"))
			print_message("rank %d after %llu ms: %s\n", i,
				      (unsigned long long)st[i].res.call_ms, st[i].res.msg);
		if (!strstr(st[i].res.msg, "during all-reduce") || !strstr(st[i].res.msg, "rank "))
			fail_msg("rank %d: unexpected message '%s'", i, st[i].res.msg);
		if (st[i].res.call_ms > TIMEOUT_MS + 1000)
			fail_msg("rank %d took %llu ms to fail", i,
				 (unsigned long long)st[i].res.call_ms);
	}
}

static void test_peer_dies(void **state)
{
	(void)state;
	for (int mode = 0; mode < 4; mode++)
		peer_dies_check(mode & 1, mode & 2);
}

/* Rank 1 never calls; rank 0's all-reduce must time out. */
static int peer_stalls(struct crun__comm *comm, int r, int n, void *arg, struct result *res)
{
	float a[100] = {0};
	uint64_t t0;
	int rc;

	(void)n;
	(void)arg;
	if (r == 1) {
		usleep((TIMEOUT_MS + 700) * 1000);
		return 0;
	}
	t0 = crun__now_ms();
	rc = crun__comm_allreduce_f32(comm, a, 100);
	res->call_ms = crun__now_ms() - t0;
	resf(res, "%s", crun__comm_errmsg(comm));
	return rc == -ETIMEDOUT ? 1 : -1;
}

static void test_peer_stalls(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	run_group(2, 2, TIMEOUT_MS, peer_stalls, NULL, st);
	assert_true(st[0].got);
	if (getenv("TEST_COMM_VERBOSE"))
		print_message("rank 0 after %llu ms: %s\n", (unsigned long long)st[0].res.call_ms,
			      st[0].res.msg);
	if (st[0].res.rc != 1 || !strstr(st[0].res.msg, "rank 1") ||
	    !strstr(st[0].res.msg, "during all-reduce"))
		fail_msg("rank 0: rc %d, message '%s'", st[0].res.rc, st[0].res.msg);
	assert_true(st[0].res.call_ms >= TIMEOUT_MS - 50);
	assert_true(st[0].res.call_ms <= TIMEOUT_MS + 1000);
}

/* Rank 0 all-gathers while rank 1 all-reduces: both must say so. */
static int mismatch(struct crun__comm *comm, int r, int n, void *arg, struct result *res)
{
	float a[64] = {0};
	int rc;

	(void)n;
	(void)arg;
	rc = r == 0 ? crun__comm_allgather_f32(comm, a, a, 32)
		    : crun__comm_allreduce_f32(comm, a, 64);
	resf(res, "%s", crun__comm_errmsg(comm));
	return rc == -EPROTO ? 1 : -1;
}

static void test_mismatch(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	run_group(2, 2, TIMEOUT_MS, mismatch, NULL, st);
	for (int i = 0; i < 2; i++) {
		assert_true(st[i].got);
		if (getenv("TEST_COMM_VERBOSE"))
			print_message("rank %d: %s\n", i, st[i].res.msg);
		if (st[i].res.rc != 1 || !strstr(st[i].res.msg, "while this rank called"))
			fail_msg("rank %d: rc %d, message '%s'", i, st[i].res.rc, st[i].res.msg);
	}
}

/* Process 2 finds rank 1's published address before rank 0 connects
 * (rank 0 starts late), connects and says hello as a peer of another
 * round. Rank 1 must refuse it and still form the group with rank 0. */
static int stranger(struct crun__comm *comm, int r, int n, void *arg, struct result *res)
{
	float a[10];

	(void)arg;
	if (r == 2) {
		struct crun_store_opts so;
		struct crun_store *s;
		char **keys = NULL, host[64];
		size_t nkeys = 0;
		struct crun_store_buf v = {0};
		const char *key = NULL;
		int port, fd, rc = -1;
		uint64_t deadline = crun__now_ms() + 3000;
		uint8_t hello[32] = "CRUNCOMM";

		if (crun_store_opts_from_env(&so) < 0 || !(s = crun_store_create(&so)) ||
		    crun_store_connect(s) < 0) {
			resf(res, "stranger: no store");
			return -1;
		}
		while (!key && crun__now_ms() < deadline) {
			crun_store_list_free(keys, nkeys);
			keys = NULL;
			if (crun_store_list(s, &keys, &nkeys, 1000) < 0)
				break;
			for (size_t i = 0; i < nkeys; i++)
				if (strstr(keys[i], "/addr/1"))
					key = keys[i];
			if (!key)
				usleep(10000);
		}
		if (key && crun_store_get(s, key, &v, 0) == 0 &&
		    crun__parse_endpoint((char *)v.data, 0, host, sizeof(host), &port, NULL, 0) ==
			    0) {
			struct sockaddr_in sin = {.sin_family = AF_INET,
						  .sin_port = htons((uint16_t)port)};

			inet_pton(AF_INET, host, &sin.sin_addr);
			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0) {
				hello[8] = 1;		/* version 1 */
				hello[12] = 0;		/* rank 0 */
				hello[16] = (uint8_t)n; /* world */
				hello[24] = 99;		/* round 99 */
				rc = write(fd, hello, sizeof(hello)) == sizeof(hello) ? 0 : -1;
				usleep(300000);
			}
			close(fd);
		}
		if (rc < 0)
			resf(res, "stranger: could not reach rank 1");
		crun_store_buf_finish(&v);
		crun_store_list_free(keys, nkeys);
		crun_store_destroy(s);
		return rc;
	}
	for (int i = 0; i < 10; i++)
		a[i] = (float)r;
	if (crun__comm_allreduce_f32(comm, a, 10) < 0 || a[9] != 1.0f) {
		resf(res, "rank %d: %s", r, crun__comm_errmsg(comm));
		return -1;
	}
	return 0;
}

static void test_stranger_refused(void **state)
{
	struct proc_status st[MAX_PROCS];

	(void)state;
	/* Rank 0 must connect after the stranger: delay it by setting a
	 * late start through the environment of the child. */
	setenv("TEST_COMM_DELAY_RANK0", "1", 1);
	run_group(3, 2, 4000, stranger, NULL, st);
	unsetenv("TEST_COMM_DELAY_RANK0");
	expect_all_ok(3, st);
}

/* ------------------------------------------------------------------ */
/* In-process: world size 1, options, bad arguments                    */

static void test_world_one(void **state)
{
	struct crun__comm_opts o = {.rank = 0, .world_size = 1};
	struct crun__comm *comm;
	float a[4] = {1, 2, 3, 4}, b[4] = {0};
	double d = 2.5;
	char err[256];

	(void)state;
	/* No store: a world of one must not need one. */
	setenv("CRUN_STORE", "127.0.0.1:1", 1);
	comm = crun__comm_create(&o, err, sizeof(err));
	assert_non_null(comm);
	assert_string_equal(crun__comm_backend(comm), "cpu");
	assert_int_equal(crun__comm_allreduce_f32(comm, a, 4), 0);
	assert_true(a[3] == 4);
	assert_int_equal(crun__comm_reduce_scatter_f32(comm, a, b, 4), 0);
	assert_true(b[2] == 3);
	memset(b, 0, sizeof(b));
	assert_int_equal(crun__comm_allgather_f32(comm, a, b, 4), 0);
	assert_true(b[1] == 2);
	assert_int_equal(crun__comm_broadcast(comm, a, sizeof(a), 0), 0);
	assert_int_equal(crun__comm_barrier(comm), 0);
	assert_int_equal(crun__comm_allreduce_f64(comm, &d, 1), 0);
	assert_true(d == 2.5);
	/* Bad arguments are refused without poisoning the communicator. */
	assert_int_equal(crun__comm_broadcast(comm, a, sizeof(a), 1), -EINVAL);
	assert_non_null(strstr(crun__comm_errmsg(comm), "broadcast"));
	assert_int_equal(crun__comm_allreduce_f32(comm, NULL, 3), -EINVAL);
	assert_int_equal(crun__comm_barrier(comm), 0);
	crun__comm_destroy(comm);
	crun__comm_destroy(NULL);

	o.backend = "mpi";
	assert_null(crun__comm_create(&o, err, sizeof(err)));
	assert_non_null(strstr(err, "unknown comm backend 'mpi'"));
	o.backend = NULL;
	o.rank = 2;
	o.world_size = 2;
	assert_null(crun__comm_create(&o, err, sizeof(err)));
	assert_non_null(strstr(err, "invalid rank"));
	setenv("CRUN_STORE", "127.0.0.1:0", 1);
}

static void test_no_store(void **state)
{
	struct crun__comm_opts o = {.rank = 0, .world_size = 2, .timeout_ms = 500};
	char err[512], store[64];
	uint64_t t0 = crun__now_ms();
	int fd;
	struct sockaddr_in sin = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sin);

	(void)state;
	/* A port that was free a moment ago: nobody listens there. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
	snprintf(store, sizeof(store), "127.0.0.1:%d", ntohs(sin.sin_port));
	close(fd);
	setenv("CRUN_STORE", store, 1);
	setenv("CRUN_CONNECT_TIMEOUT", "300ms", 1);
	assert_null(crun__comm_create(&o, err, sizeof(err)));
	assert_non_null(strstr(err, "cannot reach the store"));
	assert_true(crun__now_ms() - t0 < 5000);
	unsetenv("CRUN_CONNECT_TIMEOUT");
}

/* Rank 0 alone in a group of two: it must give up waiting for rank 1
 * within the timeout. */
static void test_missing_peer(void **state)
{
	struct crun__comm_opts o = {.rank = 0, .world_size = 2, .timeout_ms = 500};
	char err[512], store[64];
	uint64_t t0;

	(void)state;
	snprintf(store, sizeof(store), "127.0.0.1:%d", server_port);
	setenv("CRUN_STORE", store, 1);
	setenv("CRUN_RUN_ID", "test-comm-missing", 1);
	t0 = crun__now_ms();
	assert_null(crun__comm_create(&o, err, sizeof(err)));
	assert_true(crun__now_ms() - t0 < 3000);
	if (!strstr(err, "rank 1"))
		fail_msg("unexpected message '%s'", err);
}

static void test_opts_from_env(void **state)
{
	struct crun__comm_opts o;
	char err[256];
	static const char *vars[] = {"RANK",	       "WORLD_SIZE",	    "LOCAL_RANK",
				     "CRUN_ROUND",     "CRUN_COMM_TIMEOUT", "CRUN_COMM_CHUNK",
				     "CRUN_COMM_ADDR", "CRUN_COMM_BACKEND", "CRUN_COMM_SOCKBUF"};

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(vars); i++)
		unsetenv(vars[i]);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), 0);
	assert_int_equal(o.rank, 0);
	assert_int_equal(o.world_size, 1);
	assert_true(o.timeout_ms == 300000);
	assert_string_equal(o.backend, "cpu");
	assert_null(o.addr);

	setenv("RANK", "3", 1);
	setenv("WORLD_SIZE", "4", 1);
	setenv("LOCAL_RANK", "1", 1);
	setenv("CRUN_ROUND", "7", 1);
	setenv("CRUN_COMM_TIMEOUT", "2s", 1);
	setenv("CRUN_COMM_CHUNK", "64K", 1);
	setenv("CRUN_COMM_ADDR", "10.1.2.3", 1);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), 0);
	assert_int_equal(o.rank, 3);
	assert_int_equal(o.world_size, 4);
	assert_int_equal(o.local_rank, 1);
	assert_true(o.round == 7);
	assert_true(o.timeout_ms == 2000);
	assert_true(o.chunk_bytes == 65536);
	assert_string_equal(o.addr, "10.1.2.3");

	setenv("RANK", "4", 1);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "RANK"));
	setenv("RANK", "x", 1);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "invalid RANK 'x'"));
	unsetenv("RANK");
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "RANK"));
	setenv("RANK", "0", 1);
	setenv("CRUN_COMM_TIMEOUT", "soon", 1);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "CRUN_COMM_TIMEOUT"));
	setenv("CRUN_COMM_TIMEOUT", "0", 1);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), -EINVAL);
	unsetenv("CRUN_COMM_TIMEOUT");
	setenv("CRUN_COMM_CHUNK", "0", 1);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "CRUN_COMM_CHUNK"));
	unsetenv("CRUN_COMM_CHUNK");
	/* An interface name instead of an address, as gloo takes it. */
	unsetenv("CRUN_COMM_ADDR");
	setenv("GLOO_SOCKET_IFNAME", "no-such-if0,lo", 1);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), 0);
	assert_non_null(o.addr);
	assert_string_equal(o.addr, "127.0.0.1");
	setenv("CRUN_COMM_IFNAME", "no-such-if0", 1);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "CRUN_COMM_IFNAME"));
	setenv("CRUN_COMM_ADDR", "127.0.0.1", 1);
	assert_int_equal(crun__comm_opts_from_env(&o, err, sizeof(err)), 0);
	unsetenv("CRUN_COMM_ADDR");
	unsetenv("CRUN_COMM_IFNAME");
	unsetenv("GLOO_SOCKET_IFNAME");
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(vars); i++)
		unsetenv(vars[i]);
}

static int group_setup(void **state)
{
	char store[64];

	signal(SIGPIPE, SIG_DFL); /* the backend must not need SIG_IGN */
	if (start_server(state) < 0)
		return -1;
	snprintf(store, sizeof(store), "127.0.0.1:%d", server_port);
	setenv("CRUN_STORE", store, 1);
	unsetenv("CRUN_TOKEN");
	unsetenv("CRUN_TOKEN_FILE");
	return 0;
}

static int reset_store_env(void **state)
{
	char store[64];

	(void)state;
	snprintf(store, sizeof(store), "127.0.0.1:%d", server_port);
	setenv("CRUN_STORE", store, 1);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_opts_from_env),
		cmocka_unit_test_teardown(test_world_one, reset_store_env),
		cmocka_unit_test_teardown(test_no_store, reset_store_env),
		cmocka_unit_test(test_missing_peer),
		cmocka_unit_test(test_collectives_2),
		cmocka_unit_test(test_collectives_3),
		cmocka_unit_test(test_collectives_4),
		cmocka_unit_test(test_collectives_tcp),
		cmocka_unit_test(test_collectives_mixed),
		cmocka_unit_test(test_collectives_thread),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_peer_dies),
		cmocka_unit_test(test_peer_stalls),
		cmocka_unit_test(test_mismatch),
		cmocka_unit_test(test_stranger_refused),
		cmocka_unit_test(test_rings_have_no_name),
		cmocka_unit_test(test_shm_offer),
		cmocka_unit_test(test_shm_reachable),
		cmocka_unit_test(test_shm_boot_id),
		cmocka_unit_test(test_shm_proc_path),
	};

	crun__log_init("test_comm", CRUN_LOG_ERROR);
	return cmocka_run_group_tests(tests, group_setup, stop_server);
}

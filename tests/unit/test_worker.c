/* libcrun's worker API (crun/worker.h) against the real server: a store
 * runs in this process (store_harness.h) and each rank is a forked child
 * with the environment crun would give it, set by hand. Broadcast,
 * all-gather, barrier, many repeated calls, the store kept small, round
 * scoping, timeouts, size and root mismatches, re-created handles, the
 * environment and tokens.
 *
 * A child checks its own results, says what went wrong on stderr and
 * exits non-zero; the parent asserts that every child exited 0. Every
 * child is reaped: the parent waits at most CHILD_LIMIT_MS for all of
 * them, then kills and reaps what is left, and each child also has an
 * alarm(). */
#include <crun/store.h>
#include <crun/worker.h>

#include "common/log.h"
#include "store_harness.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define MAX_RANKS 8
#define CHILD_LIMIT_MS 30000
#define CHILD_ALARM_S 40
#define ID_LEN 128

/* How the ranks of one test run. */
struct ranks {
	int port;
	const char *run_id;
	int64_t round;
	int world_size;
	int first_rank, nranks; /* fork ranks first_rank .. first_rank+nranks-1 */
	const char *token;	/* CRUN_TOKEN, or NULL */
	/* Runs in each child with its handle (NULL with no_create: the
	 * function makes its own). Returns the child's exit status. */
	int (*fn)(struct crun_worker *w, int rank, void *arg);
	void *arg;
	bool no_create;
};

/* Child side: a failed check prints why and gives the status. */
#define CHECK(cond, ...)                                                             \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "rank check failed at line %d: ", __LINE__); \
			fprintf(stderr, __VA_ARGS__);                                \
			fputc('\n', stderr);                                         \
			return 1;                                                    \
		}                                                                    \
	} while (0)

static void set_env(const struct ranks *r, int rank)
{
	char v[64];

	snprintf(v, sizeof(v), "127.0.0.1:%d", r->port);
	setenv("CRUN_STORE", v, 1);
	setenv("CRUN_RUN_ID", r->run_id, 1);
	snprintf(v, sizeof(v), "%lld", (long long)r->round);
	setenv("CRUN_ROUND", v, 1);
	snprintf(v, sizeof(v), "%d", rank);
	setenv("RANK", v, 1);
	setenv("LOCAL_RANK", v, 1);
	snprintf(v, sizeof(v), "%d", r->world_size);
	setenv("WORLD_SIZE", v, 1);
	setenv("LOCAL_WORLD_SIZE", v, 1);
	setenv("GROUP_RANK", "0", 1);
	setenv("CRUN_CONNECT_TIMEOUT", "5s", 1);
	setenv("CRUN_TIMEOUT", "10s", 1);
	unsetenv("CRUN_TOKEN_FILE");
	if (r->token)
		setenv("CRUN_TOKEN", r->token, 1);
	else
		unsetenv("CRUN_TOKEN");
}

static void child_main(const struct ranks *r, int rank)
{
	struct crun_worker *w = NULL;
	char err[256];
	int status;

	alarm(CHILD_ALARM_S);
	set_env(r, rank);
	if (!r->no_create) {
		w = crun_worker_create(0, err, sizeof(err));
		if (!w) {
			fprintf(stderr, "rank %d: crun_worker_create: %s\n", rank, err);
			_exit(100);
		}
	}
	status = r->fn(w, rank, r->arg);
	crun_worker_destroy(w);
	_exit(status);
}

/* Forks the ranks, waits for all of them (bounded), and asserts that
 * each exited with status 0. */
static void run_ranks(const struct ranks *r)
{
	pid_t pids[MAX_RANKS];
	int status[MAX_RANKS];
	int left = r->nranks;
	uint64_t t0 = crun__now_ms();

	assert_true(r->nranks > 0 && r->nranks <= MAX_RANKS);
	fflush(NULL);
	for (int i = 0; i < r->nranks; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0)
			child_main(r, r->first_rank + i);
		status[i] = -1;
	}
	while (left > 0 && elapsed_ms(t0) < CHILD_LIMIT_MS) {
		for (int i = 0; i < r->nranks; i++) {
			int st;

			if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
				status[i] = st;
				pids[i] = 0;
				left--;
			}
		}
		if (left > 0)
			usleep(2000);
	}
	for (int i = 0; i < r->nranks; i++) {
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], &status[i], 0);
			fprintf(stderr, "rank %d still running after %d ms: killed\n",
				r->first_rank + i, CHILD_LIMIT_MS);
			status[i] = -1;
		}
	}
	for (int i = 0; i < r->nranks; i++) {
		if (status[i] == -1 || !WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
			fprintf(stderr, "rank %d: %s %d\n", r->first_rank + i,
				status[i] != -1 && WIFSIGNALED(status[i]) ? "signal" : "status",
				status[i] == -1		 ? -1
				: WIFSIGNALED(status[i]) ? WTERMSIG(status[i])
							 : WEXITSTATUS(status[i]));
	}
	for (int i = 0; i < r->nranks; i++) {
		assert_true(status[i] != -1 && WIFEXITED(status[i]));
		assert_int_equal(WEXITSTATUS(status[i]), 0);
	}
}

static struct crun_store *raw_store(int port, const char *run)
{
	struct crun_store_opts o = {
		.host = "127.0.0.1",
		.port = port,
		.run_id = run,
		.connect_timeout_ms = 5000,
		.timeout_ms = 5000,
	};
	struct crun_store *s = crun_store_create(&o);

	assert_non_null(s);
	return s;
}

/* The run's keys, one per line, for messages and checks. */
static size_t list_keys(int port, const char *run, char *out, size_t outlen)
{
	struct crun_store *s = raw_store(port, run);
	char **keys;
	size_t n, off = 0;

	assert_int_equal(crun_store_list(s, &keys, &n, 5000), 0);
	out[0] = '\0';
	for (size_t i = 0; i < n && off < outlen; i++)
		off += (size_t)snprintf(out + off, outlen - off, "%s\n", keys[i]);
	crun_store_list_free(keys, n);
	crun_store_destroy(s);
	return n;
}

/* Deterministic bytes for (seed, i). */
static uint8_t pattern(int seed, size_t i)
{
	return (uint8_t)(seed * 131 + i * 7 + (i >> 3));
}

static void fill(uint8_t *b, size_t len, int seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = pattern(seed, i);
}

static bool is_pattern(const uint8_t *b, size_t len, int seed)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pattern(seed, i))
			return false;
	return true;
}

/* ---- broadcast, allgather, barrier ------------------------------------ */

static int bcast_fn(struct crun_worker *w, int rank, void *arg)
{
	uint8_t id[ID_LEN];
	int rc;

	(void)arg;
	CHECK(crun_worker_rank(w) == rank, "rank %d", crun_worker_rank(w));
	CHECK(crun_worker_world_size(w) == 4, "world %d", crun_worker_world_size(w));
	CHECK(crun_worker_local_rank(w) == rank, "local rank");
	CHECK(crun_worker_local_world_size(w) == 4, "local world");
	CHECK(crun_worker_group_rank(w) == 0, "group rank");
	CHECK(crun_worker_round(w) == 0, "round");
	CHECK(crun_worker_store(w) != NULL, "store");
	CHECK(strcmp(crun_worker_errmsg(w), "") == 0, "errmsg '%s'", crun_worker_errmsg(w));

	/* The ncclUniqueId case: 128 bytes from rank 0, then from rank 2. */
	for (int root = 0; root < 4; root += 2) {
		memset(id, 0, sizeof(id));
		if (rank == root)
			fill(id, sizeof(id), 10 + root);
		rc = crun_worker_broadcast(w, id, sizeof(id), root, 5000);
		CHECK(rc == 0, "broadcast from %d: %d %s", root, rc, crun_worker_errmsg(w));
		CHECK(is_pattern(id, sizeof(id), 10 + root), "wrong bytes from root %d", root);
	}
	/* Zero bytes: only the root's arrival. */
	rc = crun_worker_broadcast(w, NULL, 0, 3, 5000);
	CHECK(rc == 0, "empty broadcast: %d %s", rc, crun_worker_errmsg(w));
	rc = crun_worker_barrier(w, 5000);
	CHECK(rc == 0, "barrier: %d %s", rc, crun_worker_errmsg(w));
	return 0;
}

static void test_broadcast(void **state)
{
	struct harness h;
	struct ranks r = {.run_id = "bcast", .world_size = 4, .nranks = 4, .fn = bcast_fn};
	char keys[2048];
	size_t n;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	r.port = h.port;
	run_ranks(&r);
	/* Every broadcast's keys are gone; what stays is the handles and the
	 * last barrier. */
	n = list_keys(h.port, r.run_id, keys, sizeof(keys));
	assert_string_equal(keys, "round/0/barrier/1.4/arrived\n"
				  "round/0/barrier/1.4/done\n"
				  "round/0/handles/0\n"
				  "round/0/handles/1\n"
				  "round/0/handles/2\n"
				  "round/0/handles/3\n");
	assert_int_equal(n, 6);
	harness_stop(&h);
}

static int allgather_fn(struct crun_worker *w, int rank, void *arg)
{
	uint8_t in[16], out[4 * 16];
	int rc;

	(void)arg;
	fill(in, sizeof(in), rank);
	memset(out, 0xee, sizeof(out));
	rc = crun_worker_allgather(w, in, sizeof(in), out, 5000);
	CHECK(rc == 0, "allgather: %d %s", rc, crun_worker_errmsg(w));
	for (int r = 0; r < 4; r++)
		CHECK(is_pattern(out + r * 16, 16, r), "slot %d wrong", r);

	/* In place: in is this rank's own slot of out. */
	memset(out, 0, sizeof(out));
	fill(out + rank * 16, 16, 20 + rank);
	rc = crun_worker_allgather(w, out + rank * 16, 16, out, 5000);
	CHECK(rc == 0, "in-place allgather: %d %s", rc, crun_worker_errmsg(w));
	for (int r = 0; r < 4; r++)
		CHECK(is_pattern(out + r * 16, 16, 20 + r), "in-place slot %d wrong", r);

	/* Host-name-sized strings, as the example does. */
	{
		char name[64] = {0}, names[4 * 64];

		snprintf(name, sizeof(name), "host-%d", rank * 11);
		rc = crun_worker_allgather(w, name, sizeof(name), names, 5000);
		CHECK(rc == 0, "name allgather: %d %s", rc, crun_worker_errmsg(w));
		for (int r = 0; r < 4; r++) {
			char want[64];

			snprintf(want, sizeof(want), "host-%d", r * 11);
			CHECK(!strcmp(names + r * 64, want), "name %d '%s'", r, names + r * 64);
		}
	}
	rc = crun_worker_allgather(w, NULL, 0, NULL, 5000);
	CHECK(rc == 0, "empty allgather: %d %s", rc, crun_worker_errmsg(w));
	rc = crun_worker_barrier(w, 5000);
	CHECK(rc == 0, "barrier: %d %s", rc, crun_worker_errmsg(w));
	return 0;
}

static void test_allgather(void **state)
{
	struct harness h;
	struct ranks r = {.run_id = "gather", .world_size = 4, .nranks = 4, .fn = allgather_fn};
	char keys[2048];

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	r.port = h.port;
	run_ranks(&r);
	assert_int_equal(list_keys(h.port, r.run_id, keys, sizeof(keys)), 6);
	assert_non_null(strstr(keys, "round/0/barrier/1.5/done\n"));
	harness_stop(&h);
}

/* 1,000 barriers, then many broadcasts and all-gathers; the store must
 * stay small throughout (checked by rank 0 between phases). */
static int repeat_fn(struct crun_worker *w, int rank, void *arg)
{
	struct crun_store *s = crun_worker_store(w);
	uint64_t t0 = crun__now_ms();
	int64_t count = 0;
	int rc;

	(void)arg;
	for (int i = 0; i < 1000; i++) {
		rc = crun_worker_barrier(w, 5000);
		CHECK(rc == 0, "barrier %d: %d %s", i, rc, crun_worker_errmsg(w));
	}
	if (rank == 0)
		fprintf(stderr, "1000 barriers of 4 ranks: %llu ms\n",
			(unsigned long long)elapsed_ms(t0));
	CHECK(elapsed_ms(t0) < 20000, "1000 barriers took %llu ms",
	      (unsigned long long)elapsed_ms(t0));
	/* 4 handles + the last barrier's 2 keys (all left the one before). */
	if (rank == 0) {
		CHECK(crun_store_count(s, &count, 5000) == 0, "count");
		CHECK(count <= 4 + 2 + 2, "%lld keys after 1000 barriers", (long long)count);
	}
	for (int i = 0; i < 200; i++) {
		uint8_t b[32], all[4 * 8];
		uint64_t mine = (uint64_t)rank * 1000 + (uint64_t)i;

		if (rank == i % 4)
			fill(b, sizeof(b), i);
		rc = crun_worker_broadcast(w, b, sizeof(b), i % 4, 5000);
		CHECK(rc == 0, "broadcast %d: %d %s", i, rc, crun_worker_errmsg(w));
		CHECK(is_pattern(b, sizeof(b), i), "broadcast %d: wrong bytes", i);
		rc = crun_worker_allgather(w, &mine, sizeof(mine), all, 5000);
		CHECK(rc == 0, "allgather %d: %d %s", i, rc, crun_worker_errmsg(w));
		for (int r = 0; r < 4; r++) {
			uint64_t v;

			memcpy(&v, all + r * 8, 8);
			CHECK(v == (uint64_t)r * 1000 + (uint64_t)i, "allgather %d rank %d", i, r);
		}
	}
	rc = crun_worker_barrier(w, 5000);
	CHECK(rc == 0, "final barrier: %d %s", rc, crun_worker_errmsg(w));
	/* The previous barrier's keys may still be on their way out. */
	if (rank == 0) {
		CHECK(crun_store_count(s, &count, 5000) == 0, "count");
		CHECK(count <= 4 + 2 + 2, "%lld keys after 400 calls and a barrier",
		      (long long)count);
	}
	return 0;
}

static void test_repeated_calls(void **state)
{
	struct harness h;
	struct ranks r = {.run_id = "repeat", .world_size = 4, .nranks = 4, .fn = repeat_fn};

	char keys[2048];

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	r.port = h.port;
	run_ranks(&r);
	/* Exactly the handles and the last barrier's keys are left. */
	assert_int_equal(list_keys(h.port, r.run_id, keys, sizeof(keys)), 6);
	assert_non_null(strstr(keys, "round/0/barrier/1.1401/done\n"));
	harness_stop(&h);
}

/* ---- rounds and handles ----------------------------------------------- */

static int round_root_fn(struct crun_worker *w, int rank, void *arg)
{
	uint8_t id[ID_LEN];
	int seed = *(int *)arg, rc;

	fill(id, sizeof(id), seed);
	rc = crun_worker_broadcast(w, id, sizeof(id), 0, 5000);
	CHECK(rc == 0, "round %lld root: %d %s", (long long)crun_worker_round(w), rc,
	      crun_worker_errmsg(w));
	(void)rank;
	return 0;
}

static int round_alone_fn(struct crun_worker *w, int rank, void *arg)
{
	uint8_t id[ID_LEN];
	uint64_t t0 = crun__now_ms();
	int rc;

	(void)rank;
	(void)arg;
	rc = crun_worker_broadcast(w, id, sizeof(id), 0, 300);
	CHECK(rc == -ETIMEDOUT, "round 1 read round 0's bytes: %d %s", rc, crun_worker_errmsg(w));
	CHECK(elapsed_ms(t0) >= 250 && elapsed_ms(t0) < 3000, "timed out after %llu ms",
	      (unsigned long long)elapsed_ms(t0));
	CHECK(strstr(crun_worker_errmsg(w), "waiting for rank 0"), "errmsg '%s'",
	      crun_worker_errmsg(w));
	return 0;
}

static int round_both_fn(struct crun_worker *w, int rank, void *arg)
{
	uint8_t id[ID_LEN];
	int rc;

	(void)arg;
	if (rank == 0)
		fill(id, sizeof(id), 2);
	rc = crun_worker_broadcast(w, id, sizeof(id), 0, 5000);
	CHECK(rc == 0, "round 2: %d %s", rc, crun_worker_errmsg(w));
	CHECK(is_pattern(id, sizeof(id), 2), "round 2 got another round's bytes");
	return 0;
}

static void test_round_scoping(void **state)
{
	struct harness h;
	int seed0 = 7;
	struct ranks r = {.run_id = "rounds", .world_size = 2};
	char keys[2048];

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	r.port = h.port;
	/* Round 0: the root stores its bytes; the other rank never reads. */
	r.round = 0;
	r.first_rank = 0;
	r.nranks = 1;
	r.fn = round_root_fn;
	r.arg = &seed0;
	run_ranks(&r);
	list_keys(h.port, r.run_id, keys, sizeof(keys));
	assert_non_null(strstr(keys, "round/0/broadcast/1.1\n"));
	/* Round 1: the same call does not see round 0's bytes. */
	r.round = 1;
	r.first_rank = 1;
	r.fn = round_alone_fn;
	run_ranks(&r);
	/* Round 2: both ranks; rank 1 gets this round's bytes. */
	r.round = 2;
	r.first_rank = 0;
	r.nranks = 2;
	r.fn = round_both_fn;
	run_ranks(&r);
	list_keys(h.port, r.run_id, keys, sizeof(keys));
	assert_non_null(strstr(keys, "round/0/broadcast/1.1\n"));
	assert_null(strstr(keys, "round/2/broadcast/"));
	harness_stop(&h);
}

/* A destroyed handle's successor in the same process keeps its keys
 * apart (the previous handle left a barrier's keys behind). */
static int recreate_fn(struct crun_worker *w, int rank, void *arg)
{
	char err[256];
	int rc;

	(void)arg;
	for (int i = 0; i < 3; i++) {
		int v = rank + i, all[3];

		w = crun_worker_create(2000, err, sizeof(err));
		CHECK(w, "create %d: %s", i, err);
		rc = crun_worker_barrier(w, 5000);
		CHECK(rc == 0, "barrier %d: %d %s", i, rc, crun_worker_errmsg(w));
		rc = crun_worker_allgather(w, &v, sizeof(v), all, 5000);
		CHECK(rc == 0, "allgather %d: %d %s", i, rc, crun_worker_errmsg(w));
		for (int r = 0; r < 3; r++)
			CHECK(all[r] == r + i, "handle %d rank %d: %d", i, r, all[r]);
		rc = crun_worker_barrier(w, 5000);
		CHECK(rc == 0, "barrier %d: %d %s", i, rc, crun_worker_errmsg(w));
		crun_worker_destroy(w);
	}
	return 0;
}

static void test_recreated_handles(void **state)
{
	struct harness h;
	struct ranks r = {.run_id = "recreate",
			  .world_size = 3,
			  .nranks = 3,
			  .fn = recreate_fn,
			  .no_create = true};

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	r.port = h.port;
	run_ranks(&r);
	harness_stop(&h);
}

/* ---- failures --------------------------------------------------------- */

/* Rank 3 never calls: the others time out within bounds, and the handle
 * refuses later calls. */
static int timeout_fn(struct crun_worker *w, int rank, void *arg)
{
	uint64_t t0;
	struct crun_worker *x;
	int rc, v = rank, all[4];
	uint8_t id[ID_LEN];

	(void)arg;
	if (rank == 3) {
		usleep(1500 * 1000);
		return 0;
	}
	t0 = crun__now_ms();
	rc = crun_worker_barrier(w, 300);
	CHECK(rc == -ETIMEDOUT, "barrier: %d %s", rc, crun_worker_errmsg(w));
	CHECK(elapsed_ms(t0) >= 250 && elapsed_ms(t0) < 3000, "barrier timed out after %llu ms",
	      (unsigned long long)elapsed_ms(t0));
	CHECK(strstr(crun_worker_errmsg(w), "barrier 1.1: timed out after 300 ms waiting for "
					    "the others ("),
	      "errmsg '%s'", crun_worker_errmsg(w));
	rc = crun_worker_barrier(w, 300);
	CHECK(rc == -ECANCELED, "after a failure: %d", rc);
	CHECK(strstr(crun_worker_errmsg(w), "an earlier call failed: barrier 1.1: timed out"),
	      "errmsg '%s'", crun_worker_errmsg(w));

	/* Fresh handles: an all-gather and a broadcast whose root never
	 * comes. */
	{
		char err[256];

		x = crun_worker_create(2000, err, sizeof(err));
		CHECK(x, "create: %s", err);
	}
	t0 = crun__now_ms();
	rc = crun_worker_allgather(x, &v, sizeof(v), all, 300);
	CHECK(rc == -ETIMEDOUT, "allgather: %d %s", rc, crun_worker_errmsg(x));
	CHECK(elapsed_ms(t0) >= 250 && elapsed_ms(t0) < 3000, "allgather timed out after %llu ms",
	      (unsigned long long)elapsed_ms(t0));
	crun_worker_destroy(x);
	x = crun_worker_create(2000, (char[256]){0}, 256);
	CHECK(x, "create");
	t0 = crun__now_ms();
	rc = crun_worker_broadcast(x, id, sizeof(id), 3, 300);
	CHECK(rc == -ETIMEDOUT, "broadcast: %d %s", rc, crun_worker_errmsg(x));
	CHECK(elapsed_ms(t0) >= 250 && elapsed_ms(t0) < 3000, "broadcast timed out after %llu ms",
	      (unsigned long long)elapsed_ms(t0));
	CHECK(strstr(crun_worker_errmsg(x), "broadcast 3.1 from rank 3: timed out after 300 ms "
					    "waiting for rank 3"),
	      "errmsg '%s'", crun_worker_errmsg(x));
	crun_worker_destroy(x);
	return 0;
}

static void test_timeout(void **state)
{
	struct harness h;
	struct ranks r = {.run_id = "timeout",
			  .world_size = 4,
			  .nranks = 4,
			  .fn = timeout_fn,
			  .no_create = false};

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	r.port = h.port;
	run_ranks(&r);
	harness_stop(&h);
}

/* Broadcast: rank 1 expects 64 bytes, the root sends 128. */
static int mismatch_fn(struct crun_worker *w, int rank, void *arg)
{
	uint8_t id[ID_LEN];
	size_t len = rank == 1 ? 64 : sizeof(id);
	const char *m;
	int rc;

	(void)arg;
	memset(id, 0x5a, sizeof(id));
	if (rank == 0)
		fill(id, sizeof(id), 3);
	rc = crun_worker_broadcast(w, id, len, 0, 5000);
	if (rank == 1) {
		CHECK(rc == -EMSGSIZE, "broadcast: %d %s", rc, crun_worker_errmsg(w));
		m = crun_worker_errmsg(w);
		CHECK(!strcmp(m, "broadcast 1.1 from rank 0: rank 0 sent 128 bytes, rank 1 expects "
				 "64"),
		      "errmsg '%s'", m);
		CHECK(id[0] == 0x5a, "buffer written after a mismatch");
		return 0;
	}
	CHECK(rc == 0, "broadcast: %d %s", rc, crun_worker_errmsg(w));
	CHECK(is_pattern(id, sizeof(id), 3), "wrong bytes");
	return 0;
}

/* All-gather: rank 2 contributes 8 bytes, the others 16. Then a
 * broadcast where rank 1 names another root than the rest. */
static int gather_mismatch_fn(struct crun_worker *w, int rank, void *arg)
{
	uint8_t out[4 * 16], in[16] = {0};
	size_t len = rank == 2 ? 8 : 16;
	const char *m;
	uint8_t id[8] = {0};
	struct crun_worker *x;
	int rc;

	(void)arg;
	rc = crun_worker_allgather(w, in, len, out, 5000);
	CHECK(rc == -EMSGSIZE, "allgather: %d %s", rc, crun_worker_errmsg(w));
	m = crun_worker_errmsg(w);
	if (rank == 2)
		CHECK(strstr(m, "allgather 1.1: rank 0 contributed 16 bytes, rank 2 expects 8"),
		      "errmsg '%s'", m);
	else
		CHECK(strstr(m, "contributed 8 bytes, rank") && strstr(m, "rank 2 contributed"),
		      "errmsg '%s'", m);
	rc = crun_worker_barrier(w, 300);
	CHECK(rc == -ECANCELED, "after a mismatch: %d", rc);

	/* Ranks that disagree on the root: rank 1 names rank 3. */
	x = crun_worker_create(2000, (char[256]){0}, 256);
	CHECK(x, "create");
	rc = crun_worker_broadcast(x, id, sizeof(id), rank == 1 ? 3 : 0, 5000);
	if (rank == 1)
		CHECK(rc == -EPROTO && strstr(crun_worker_errmsg(x), "rank 0 sent the bytes as "
								     "root, rank 1 expects root 3"),
		      "root mismatch: %d %s", rc, crun_worker_errmsg(x));
	else
		CHECK(rc == 0, "broadcast: %d %s", rc, crun_worker_errmsg(x));
	crun_worker_destroy(x);
	return 0;
}

static void test_size_mismatch(void **state)
{
	struct harness h;
	struct ranks r = {.run_id = "mismatch", .world_size = 4, .nranks = 4, .fn = mismatch_fn};
	char keys[2048];

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	r.port = h.port;
	run_ranks(&r);
	/* The mismatched reader still counted: the broadcast's keys went. */
	list_keys(h.port, r.run_id, keys, sizeof(keys));
	assert_null(strstr(keys, "broadcast"));
	r.run_id = "mismatch2";
	r.fn = gather_mismatch_fn;
	run_ranks(&r);
	harness_stop(&h);
}

/* Bad arguments fail before anything is sent and leave the handle
 * usable. */
static int args_fn(struct crun_worker *w, int rank, void *arg)
{
	uint8_t b[4] = {0};

	(void)rank;
	(void)arg;
	CHECK(crun_worker_broadcast(w, b, sizeof(b), 2, 1000) == -EINVAL, "root 2 of 2");
	CHECK(strstr(crun_worker_errmsg(w), "root 2 is not a rank"), "'%s'", crun_worker_errmsg(w));
	CHECK(crun_worker_broadcast(w, b, sizeof(b), -1, 1000) == -EINVAL, "root -1");
	CHECK(crun_worker_broadcast(w, NULL, 4, 0, 1000) == -EINVAL, "NULL buffer");
	CHECK(crun_worker_allgather(w, NULL, 4, b, 1000) == -EINVAL, "NULL in");
	CHECK(crun_worker_allgather(w, b, SIZE_MAX / 2 + 1, b, 1000) == -EOVERFLOW, "overflow");
	CHECK(crun_worker_barrier(w, 5000) == 0, "barrier after bad arguments: %s",
	      crun_worker_errmsg(w));
	CHECK(crun_worker_broadcast(NULL, b, 1, 0, 10) == -EINVAL, "NULL handle");
	CHECK(crun_worker_store(NULL) == NULL, "store of NULL");
	return 0;
}

static void test_bad_arguments(void **state)
{
	struct harness h;
	struct ranks r = {.run_id = "args", .world_size = 2, .nranks = 2, .fn = args_fn};

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	r.port = h.port;
	run_ranks(&r);
	crun_worker_destroy(NULL);
	harness_stop(&h);
}

/* ---- environment and connection --------------------------------------- */

static int expect_create_error(const char *want, int timeout_ms)
{
	char err[256] = "unset";
	struct crun_worker *w = crun_worker_create(timeout_ms, err, sizeof(err));

	CHECK(!w, "created a handle where '%s' was expected", want);
	CHECK(strstr(err, want), "error '%s', expected '%s'", err, want);
	return 0;
}

static int env_fn(struct crun_worker *w, int rank, void *arg)
{
	int *unused_port = arg;
	char v[64];
	uint64_t t0;

	(void)w;
	(void)rank;
	unsetenv("RANK");
	if (expect_create_error("RANK is not set (is this program running under crun?)", 0))
		return 1;
	setenv("RANK", "4", 1);
	if (expect_create_error("bad RANK '4': ", 0))
		return 1;
	setenv("RANK", "x", 1);
	if (expect_create_error("bad RANK 'x': ", 0))
		return 1;
	setenv("RANK", "1", 1);
	unsetenv("WORLD_SIZE");
	if (expect_create_error("WORLD_SIZE is not set", 0))
		return 1;
	setenv("WORLD_SIZE", "0", 1);
	if (expect_create_error("bad WORLD_SIZE '0'", 0))
		return 1;
	setenv("WORLD_SIZE", "4", 1);
	setenv("CRUN_ROUND", "-1", 1);
	if (expect_create_error("bad CRUN_ROUND '-1'", 0))
		return 1;
	setenv("CRUN_ROUND", "3", 1);
	setenv("LOCAL_WORLD_SIZE", "2", 1);
	setenv("LOCAL_RANK", "2", 1);
	if (expect_create_error("bad LOCAL_RANK '2'", 0))
		return 1;
	setenv("LOCAL_RANK", "1", 1);
	setenv("CRUN_STORE", "127.0.0.1:99999", 1);
	if (expect_create_error("bad CRUN_STORE", 0))
		return 1;

	/* Nobody listens: a bounded failure naming the store. */
	snprintf(v, sizeof(v), "127.0.0.1:%d", *unused_port);
	setenv("CRUN_STORE", v, 1);
	t0 = crun__now_ms();
	if (expect_create_error("cannot reach the store: ", 300))
		return 1;
	CHECK(elapsed_ms(t0) < 3000, "refused store took %llu ms",
	      (unsigned long long)elapsed_ms(t0));
	return 0;
}

static int env_ok_fn(struct crun_worker *w, int rank, void *arg)
{
	char err[256];

	(void)rank;
	(void)arg;
	/* Defaults: LOCAL_* from RANK/WORLD_SIZE, GROUP_RANK 0, round 0. */
	unsetenv("LOCAL_RANK");
	unsetenv("LOCAL_WORLD_SIZE");
	unsetenv("GROUP_RANK");
	unsetenv("CRUN_ROUND");
	setenv("RANK", "1", 1);
	setenv("WORLD_SIZE", "3", 1);
	w = crun_worker_create(0, err, sizeof(err));
	CHECK(w, "create: %s", err);
	CHECK(crun_worker_rank(w) == 1 && crun_worker_world_size(w) == 3, "rank/world");
	CHECK(crun_worker_local_rank(w) == 1 && crun_worker_local_world_size(w) == 3, "local");
	CHECK(crun_worker_group_rank(w) == 0 && crun_worker_round(w) == 0, "group/round");
	crun_worker_destroy(w);
	/* Explicit values. */
	setenv("LOCAL_RANK", "0", 1);
	setenv("LOCAL_WORLD_SIZE", "2", 1);
	setenv("GROUP_RANK", "5", 1);
	setenv("CRUN_ROUND", "12", 1);
	w = crun_worker_create(0, err, sizeof(err));
	CHECK(w, "create: %s", err);
	CHECK(crun_worker_local_rank(w) == 0 && crun_worker_local_world_size(w) == 2, "local");
	CHECK(crun_worker_group_rank(w) == 5 && crun_worker_round(w) == 12, "group/round");
	crun_worker_destroy(w);
	return 0;
}

static void test_environment(void **state)
{
	struct harness h;
	int fd, unused = reserve_port(&fd);
	struct ranks r = {.run_id = "env",
			  .world_size = 4,
			  .nranks = 1,
			  .fn = env_fn,
			  .arg = &unused,
			  .no_create = true};

	(void)state;
	assert_true(unused > 0);
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	r.port = h.port;
	run_ranks(&r);
	r.fn = env_ok_fn;
	run_ranks(&r);
	close(fd);
	harness_stop(&h);
}

static int token_fn(struct crun_worker *w, int rank, void *arg)
{
	(void)arg;
	CHECK(crun_worker_barrier(w, 5000) == 0, "barrier with a token: %s", crun_worker_errmsg(w));
	(void)rank;
	return 0;
}

static int bad_token_fn(struct crun_worker *w, int rank, void *arg)
{
	(void)w;
	(void)rank;
	(void)arg;
	setenv("CRUN_TOKEN", "not-the-token", 1);
	return expect_create_error("cannot reach the store: ", 2000) ||
	       expect_create_error("authentication failed", 2000);
}

static void test_token(void **state)
{
	struct crun__server_opts o = {.token = "s3cret", .token_len = 6};
	struct harness h;
	struct ranks r = {
		.run_id = "token", .world_size = 2, .nranks = 2, .fn = token_fn, .token = "s3cret"};

	(void)state;
	crun__server_limits_default(&o.limits);
	assert_int_equal(harness_start(&h, 0, &o), 0);
	r.port = h.port;
	run_ranks(&r);
	r.fn = bad_token_fn;
	r.nranks = 1;
	r.no_create = true;
	run_ranks(&r);
	harness_stop(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_broadcast),	  cmocka_unit_test(test_allgather),
		cmocka_unit_test(test_repeated_calls),	  cmocka_unit_test(test_round_scoping),
		cmocka_unit_test(test_recreated_handles), cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_size_mismatch),	  cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_environment),	  cmocka_unit_test(test_token),
	};

	signal(SIGPIPE, SIG_IGN);
	crun__log_init("test_worker", CRUN_LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

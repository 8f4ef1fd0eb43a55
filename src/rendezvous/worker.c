/* libcrun's worker API: broadcast, all-gather and barrier over the store.
 *
 * Each collective is a handful of store round trips, and every wait is a
 * waiting GET, MGET or WAIT answered by the server when the key arrives,
 * so no rank polls:
 *
 *   broadcast  root: SET "bcast/<seq>" = u32 root (big-endian) | bytes.
 *              others: GET with wait; then ADD "bcast/<seq>/read"; the
 *              rank whose ADD makes world_size - 1 deletes both keys.
 *   allgather  each: SET "allgather/<seq>/<rank>"; MGET the others with
 *              wait; ADD "allgather/<seq>/read"; the rank whose ADD makes
 *              world_size deletes the world_size + 1 keys.
 *   barrier    each: ADD "barrier/<seq>/arrived"; the rank that makes it
 *              world_size SETs "barrier/<seq>/done", the others WAIT for
 *              that key. The last arriver also deletes the previous
 *              barrier's two keys: every rank has left that barrier, since
 *              every rank has arrived at this one.
 *
 * The root's rank travels with a broadcast so that a rank that disagrees
 * on the root fails at once instead of using another root's bytes.
 *
 * State: READY until a collective fails after it has started talking to
 * the store, then FAILED for good (the ranks' call sequences may have
 * diverged; see worker.h). Argument errors are found before a call takes
 * its sequence number and leave the state alone. */
#include <crun/worker.h>

#include "common/util.h"
#include "rendezvous/wire.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEY_LEN 160
#define BASE_LEN 128
#define MSG_LEN 512
#define ROOT_HDR 4

enum worker_state {
	WORKER_READY,
	WORKER_FAILED,
};

struct crun_worker {
	struct crun_store *store;
	int rank, world_size;
	int local_rank, local_world_size;
	int group_rank;
	int64_t round;
	int default_timeout_ms;

	/* Keys are "round/<round>/<op>/<handle>.<call>..." */
	char prefix[48];
	int64_t handle;
	uint64_t calls;
	uint64_t prev_barrier; /* call number of the last barrier; 0: none */

	enum worker_state state;
	int fail_code;
	char fail_msg[MSG_LEN];
	char errmsg[MSG_LEN];
};

static void seterr(struct crun_worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void seterr(struct crun_worker *w, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(w->errmsg, sizeof(w->errmsg), fmt, ap);
	va_end(ap);
}

/* ---- environment ------------------------------------------------------ */

/* An integer variable in [min, max]; def when unset (required: def < min).
 * 0, -ENOENT when a required one is missing, -EINVAL when malformed. */
static int env_int(const char *name, int64_t min, int64_t max, int64_t def, int64_t *out, char *err,
		   size_t errlen)
{
	const char *v = getenv(name);
	char why[128];

	if (!v || !*v) {
		if (def < min) {
			crun__seterr(err, errlen,
				     "%s is not set (is this program running under crun?)", name);
			return -ENOENT;
		}
		*out = def;
		return 0;
	}
	if (crun__parse_int64(v, min, max, out, why, sizeof(why)) < 0) {
		crun__seterr(err, errlen, "bad %s '%s': %s", name, v, why);
		return -EINVAL;
	}
	return 0;
}

struct worker_env {
	int64_t rank, world_size, local_rank, local_world_size, group_rank, round;
};

static int read_env(struct worker_env *e, char *err, size_t errlen)
{
	int rc;

	rc = env_int("WORLD_SIZE", 1, INT_MAX, -1, &e->world_size, err, errlen);
	if (rc == 0)
		rc = env_int("RANK", 0, e->world_size - 1, -1, &e->rank, err, errlen);
	if (rc == 0)
		rc = env_int("LOCAL_WORLD_SIZE", 1, INT_MAX, e->world_size, &e->local_world_size,
			     err, errlen);
	if (rc == 0)
		rc = env_int("LOCAL_RANK", 0, e->local_world_size - 1, e->rank, &e->local_rank, err,
			     errlen);
	if (rc == 0)
		rc = env_int("GROUP_RANK", 0, INT_MAX, 0, &e->group_rank, err, errlen);
	if (rc == 0)
		rc = env_int("CRUN_ROUND", 0, INT64_MAX, 0, &e->round, err, errlen);
	return rc;
}

/* ---- lifecycle -------------------------------------------------------- */

struct crun_worker *crun_worker_create(int timeout_ms, char *err, size_t errlen)
{
	struct crun_store_opts opts;
	struct crun_worker *w;
	struct worker_env e;
	char why[256], key[KEY_LEN];
	int rc;

	if (read_env(&e, err, errlen) < 0)
		return NULL;
	if (crun_store_opts_from_env_err(&opts, why, sizeof(why)) < 0) {
		crun__seterr(err, errlen, "%s", why);
		return NULL;
	}
	if (timeout_ms > 0)
		opts.connect_timeout_ms = timeout_ms;
	w = calloc(1, sizeof(*w));
	if (!w) {
		crun__seterr(err, errlen, "out of memory");
		return NULL;
	}
	w->rank = (int)e.rank;
	w->world_size = (int)e.world_size;
	w->local_rank = (int)e.local_rank;
	w->local_world_size = (int)e.local_world_size;
	w->group_rank = (int)e.group_rank;
	w->round = e.round;
	w->default_timeout_ms = opts.timeout_ms ? opts.timeout_ms : CRUN_WIRE_DEFAULT_TIMEOUT_MS;
	w->state = WORKER_READY;
	snprintf(w->prefix, sizeof(w->prefix), "round/%lld/", (long long)w->round);

	w->store = crun_store_create(&opts);
	if (!w->store) {
		crun__seterr(err, errlen, "cannot create a store handle for '%s:%d': out of memory",
			     opts.host, opts.port);
		goto out_free_worker;
	}
	rc = crun_store_connect(w->store);
	if (rc < 0) {
		crun__seterr(err, errlen, "cannot reach the store: %s",
			     crun_store_errmsg(w->store));
		goto out_destroy_store;
	}
	/* This rank's handle number in this round: keeps a later handle's
	 * keys apart from an earlier one's. */
	snprintf(key, sizeof(key), "%shandles/%d", w->prefix, w->rank);
	rc = crun_store_add(w->store, key, 1, &w->handle, w->default_timeout_ms);
	if (rc < 0) {
		crun__seterr(err, errlen, "cannot register rank %d in the store: %s", w->rank,
			     crun_store_errmsg(w->store));
		goto out_destroy_store;
	}
	crun__seterr(err, errlen, "%s", "");
	return w;

out_destroy_store:
	crun_store_destroy(w->store);
out_free_worker:
	free(w);
	return NULL;
}

void crun_worker_destroy(struct crun_worker *w)
{
	if (!w)
		return;
	crun_store_destroy(w->store);
	free(w);
}

int crun_worker_rank(const struct crun_worker *w)
{
	return w->rank;
}

int crun_worker_world_size(const struct crun_worker *w)
{
	return w->world_size;
}

int crun_worker_local_rank(const struct crun_worker *w)
{
	return w->local_rank;
}

int crun_worker_local_world_size(const struct crun_worker *w)
{
	return w->local_world_size;
}

int crun_worker_group_rank(const struct crun_worker *w)
{
	return w->group_rank;
}

int64_t crun_worker_round(const struct crun_worker *w)
{
	return w->round;
}

struct crun_store *crun_worker_store(struct crun_worker *w)
{
	return w ? w->store : NULL;
}

const char *crun_worker_errmsg(const struct crun_worker *w)
{
	return w ? w->errmsg : "no worker handle";
}

/* ---- one collective call ---------------------------------------------- */

struct call {
	const char *op;
	uint64_t num;
	char name[64];	     /* "broadcast 1.3 from rank 0", for messages */
	char base[BASE_LEN]; /* "round/R/<op>/<handle>.<num>" */
	int timeout_ms;
	uint64_t deadline;
};

/* Starts a call: refuses on a failed handle, else takes the next number. */
static int call_begin(struct crun_worker *w, struct call *c, const char *op, int timeout_ms)
{
	if (w->state == WORKER_FAILED) {
		seterr(w, "%s refused: an earlier call failed: %s", op, w->fail_msg);
		return -ECANCELED;
	}
	c->op = op;
	c->num = ++w->calls;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : w->default_timeout_ms;
	c->deadline = crun__now_ms() + (uint64_t)c->timeout_ms;
	snprintf(c->name, sizeof(c->name), "%s %lld.%llu", op, (long long)w->handle,
		 (unsigned long long)c->num);
	snprintf(c->base, sizeof(c->base), "%s%s/%lld.%llu", w->prefix, op, (long long)w->handle,
		 (unsigned long long)c->num);
	return 0;
}

/* Milliseconds left (>= 1), or 0 when the deadline has passed. */
static int left_ms(const struct call *c)
{
	uint64_t now = crun__now_ms();

	if (now >= c->deadline)
		return 0;
	return (int)(c->deadline - now);
}

/* Ends a call: rc < 0 fails the handle for good; errmsg must be set. */
static int call_end(struct crun_worker *w, int rc)
{
	if (rc < 0 && w->state == WORKER_READY) {
		w->state = WORKER_FAILED;
		w->fail_code = rc;
		snprintf(w->fail_msg, sizeof(w->fail_msg), "%s", w->errmsg);
	}
	return rc;
}

/* A store call failed: rc and a message naming the call and the step. */
static int store_failed(struct crun_worker *w, const struct call *c, const char *step, int rc)
{
	if (rc == -ETIMEDOUT)
		seterr(w, "%s: timed out after %d ms %s", c->name, c->timeout_ms, step);
	else
		seterr(w, "%s: %s: %s", c->name, step, crun_store_errmsg(w->store));
	return rc;
}

static int out_of_time(struct crun_worker *w, const struct call *c, const char *step)
{
	return store_failed(w, c, step, -ETIMEDOUT);
}

/* ADD 1 to "<base>/read"; the rank whose ADD makes it `readers` deletes
 * keys[0..n) and the counter. */
static int release(struct crun_worker *w, const struct call *c, int64_t readers,
		   const char *const *keys, size_t n)
{
	char counter[KEY_LEN];
	int64_t v = 0;
	int ms, rc;

	snprintf(counter, sizeof(counter), "%s/read", c->base);
	if (!(ms = left_ms(c)))
		return out_of_time(w, c, "before counting this rank's read");
	rc = crun_store_add(w->store, counter, 1, &v, ms);
	if (rc < 0)
		return store_failed(w, c, "counting this rank's read", rc);
	if (v != readers)
		return 0;
	for (size_t i = 0; i <= n; i++) {
		const char *key = i < n ? keys[i] : counter;

		if (!(ms = left_ms(c)))
			return out_of_time(w, c, "deleting its keys");
		rc = crun_store_delete(w->store, key, ms);
		if (rc < 0)
			return store_failed(w, c, "deleting its keys", rc);
	}
	return 0;
}

/* ---- broadcast -------------------------------------------------------- */

static int bcast_send(struct crun_worker *w, const struct call *c, const void *buf, size_t len,
		      int root)
{
	uint8_t *val;
	int ms, rc;

	if (len > SIZE_MAX - ROOT_HDR) {
		seterr(w, "%s: %zu bytes are too many", c->name, len);
		return -E2BIG;
	}
	val = malloc(ROOT_HDR + len);
	if (!val) {
		seterr(w, "%s: out of memory for %zu bytes", c->name, len);
		return -ENOMEM;
	}
	val[0] = (uint8_t)((uint32_t)root >> 24);
	val[1] = (uint8_t)((uint32_t)root >> 16);
	val[2] = (uint8_t)((uint32_t)root >> 8);
	val[3] = (uint8_t)root;
	if (len)
		memcpy(val + ROOT_HDR, buf, len);
	rc = (ms = left_ms(c)) ? crun_store_set(w->store, c->base, val, ROOT_HDR + len, ms)
			       : -ETIMEDOUT;
	free(val);
	if (rc < 0)
		return store_failed(w, c, "storing the bytes", rc);
	return 0;
}

static int bcast_recv(struct crun_worker *w, const struct call *c, void *buf, size_t len, int root)
{
	struct crun_store_buf val = {0};
	const char *key = c->base;
	char step[64];
	uint32_t sender;
	int ms, rc, rel;

	snprintf(step, sizeof(step), "waiting for rank %d", root);
	if (!(ms = left_ms(c)))
		return out_of_time(w, c, step);
	rc = crun_store_get(w->store, c->base, &val, ms);
	if (rc < 0)
		return store_failed(w, c, step, rc);
	if (val.len < ROOT_HDR) {
		seterr(w, "%s: key '%s' holds %zu bytes that this API did not write", c->name,
		       c->base, val.len);
		rc = -EPROTO;
		goto out_release;
	}
	sender = (uint32_t)val.data[0] << 24 | (uint32_t)val.data[1] << 16 |
		 (uint32_t)val.data[2] << 8 | val.data[3];
	if (sender != (uint32_t)root) {
		seterr(w, "%s: rank %u sent the bytes as root, rank %d expects root %d", c->name,
		       sender, w->rank, root);
		rc = -EPROTO;
	} else if (val.len - ROOT_HDR != len) {
		seterr(w, "%s: rank %d sent %zu bytes, rank %d expects %zu", c->name, root,
		       val.len - ROOT_HDR, w->rank, len);
		rc = -EMSGSIZE;
	} else if (len) {
		memcpy(buf, val.data + ROOT_HDR, len);
	}
out_release:
	crun_store_buf_finish(&val);
	/* Counted as read even after a mismatch, so the keys still go. */
	{
		char keep[MSG_LEN];

		memcpy(keep, w->errmsg, sizeof(keep));
		rel = release(w, c, w->world_size - 1, &key, 1);
		if (rc < 0)
			memcpy(w->errmsg, keep, sizeof(keep));
	}
	return rc < 0 ? rc : rel;
}

int crun_worker_broadcast(struct crun_worker *w, void *buf, size_t len, int root, int timeout_ms)
{
	struct call c;
	int rc;

	if (!w)
		return -EINVAL;
	if (root < 0 || root >= w->world_size) {
		seterr(w, "broadcast: root %d is not a rank of a world of %d", root, w->world_size);
		return -EINVAL;
	}
	if (len && !buf) {
		seterr(w, "broadcast: buffer is NULL");
		return -EINVAL;
	}
	rc = call_begin(w, &c, "broadcast", timeout_ms);
	if (rc < 0)
		return rc;
	snprintf(c.name, sizeof(c.name), "broadcast %lld.%llu from rank %d", (long long)w->handle,
		 (unsigned long long)c.num, root);
	if (w->world_size == 1)
		return 0;
	if (w->rank == root)
		rc = bcast_send(w, &c, buf, len, root);
	else
		rc = bcast_recv(w, &c, buf, len, root);
	return call_end(w, rc);
}

/* ---- allgather -------------------------------------------------------- */

int crun_worker_allgather(struct crun_worker *w, const void *in, size_t len, void *out,
			  int timeout_ms)
{
	size_t n, nothers;
	struct crun_store_buf *vals = NULL;
	const char **keys = NULL;
	char *keybuf = NULL;
	struct call c;
	int ms, rc;

	if (!w)
		return -EINVAL;
	n = (size_t)w->world_size;
	if (len && (!in || !out)) {
		seterr(w, "allgather: buffer is NULL");
		return -EINVAL;
	}
	if (len > SIZE_MAX / n) {
		seterr(w, "allgather: %d x %zu bytes do not fit in memory", w->world_size, len);
		return -EOVERFLOW;
	}
	rc = call_begin(w, &c, "allgather", timeout_ms);
	if (rc < 0)
		return rc;
	if (n == 1) {
		if (len)
			memmove(out, in, len);
		return 0;
	}

	/* keys[0..n): every rank's key; this rank's is keys[rank]. */
	keys = calloc(n, sizeof(*keys));
	keybuf = malloc(n * KEY_LEN);
	vals = calloc(n, sizeof(*vals));
	if (!keys || !keybuf || !vals) {
		seterr(w, "%s: out of memory for %zu ranks", c.name, n);
		rc = -ENOMEM;
		goto out_free;
	}
	for (size_t r = 0; r < n; r++) {
		keys[r] = keybuf + r * KEY_LEN;
		snprintf(keybuf + r * KEY_LEN, KEY_LEN, "%s/%zu", c.base, r);
	}
	if (!(ms = left_ms(&c))) {
		rc = out_of_time(w, &c, "before storing this rank's bytes");
		goto out_free;
	}
	rc = crun_store_set(w->store, keys[w->rank], in, len, ms);
	if (rc < 0) {
		rc = store_failed(w, &c, "storing this rank's bytes", rc);
		goto out_free;
	}

	/* The others' keys: keys without this rank's, in rank order. */
	{
		const char *tmp = keys[w->rank];

		memmove(&keys[w->rank], &keys[w->rank + 1],
			(n - 1 - (size_t)w->rank) * sizeof(*keys));
		keys[n - 1] = tmp;
	}
	nothers = n - 1;
	if (!(ms = left_ms(&c))) {
		rc = out_of_time(w, &c, "waiting for the other ranks");
		goto out_free;
	}
	rc = crun_store_mget(w->store, keys, nothers, vals, ms);
	if (rc < 0) {
		rc = store_failed(w, &c, "waiting for the other ranks", rc);
		goto out_free;
	}
	for (size_t i = 0; i < nothers && rc == 0; i++) {
		size_t r = i < (size_t)w->rank ? i : i + 1;

		if (vals[i].len != len) {
			seterr(w, "%s: rank %zu contributed %zu bytes, rank %d expects %zu", c.name,
			       r, vals[i].len, w->rank, len);
			rc = -EMSGSIZE;
		}
	}
	if (rc == 0 && len) {
		memmove((uint8_t *)out + (size_t)w->rank * len, in, len);
		for (size_t i = 0; i < nothers; i++) {
			size_t r = i < (size_t)w->rank ? i : i + 1;

			memcpy((uint8_t *)out + r * len, vals[i].data, len);
		}
	}
	for (size_t i = 0; i < nothers; i++)
		crun_store_buf_finish(&vals[i]);
	/* Counted as read even after a mismatch, so the keys still go. */
	{
		char keep[MSG_LEN];
		int rel;

		memcpy(keep, w->errmsg, sizeof(keep));
		rel = release(w, &c, (int64_t)n, keys, n);
		if (rc < 0)
			memcpy(w->errmsg, keep, sizeof(keep));
		else
			rc = rel;
	}
out_free:
	free(vals);
	free(keybuf);
	free(keys);
	return call_end(w, rc);
}

/* ---- barrier ---------------------------------------------------------- */

int crun_worker_barrier(struct crun_worker *w, int timeout_ms)
{
	char arrived[KEY_LEN], done[KEY_LEN];
	const char *key = done;
	struct call c;
	int64_t v = 0;
	char step[96];
	int ms, rc;

	if (!w)
		return -EINVAL;
	rc = call_begin(w, &c, "barrier", timeout_ms);
	if (rc < 0)
		return rc;
	if (w->world_size == 1)
		return 0;
	snprintf(arrived, sizeof(arrived), "%s/arrived", c.base);
	snprintf(done, sizeof(done), "%s/done", c.base);

	if (!(ms = left_ms(&c))) {
		rc = out_of_time(w, &c, "before arriving");
		goto out;
	}
	rc = crun_store_add(w->store, arrived, 1, &v, ms);
	if (rc < 0) {
		rc = store_failed(w, &c, "arriving", rc);
		goto out;
	}
	if (v > w->world_size) {
		seterr(w,
		       "%s: %lld ranks arrived in a world of %d (two handles for one rank "
		       "in one process?)",
		       c.name, (long long)v, w->world_size);
		rc = -EPROTO;
		goto out;
	}
	if (v < w->world_size) {
		snprintf(step, sizeof(step),
			 "waiting for the others (%lld of %d ranks had arrived "
			 "with rank %d)",
			 (long long)v, w->world_size, w->rank);
		if (!(ms = left_ms(&c))) {
			rc = out_of_time(w, &c, step);
			goto out;
		}
		rc = crun_store_wait(w->store, &key, 1, ms);
		if (rc < 0)
			rc = store_failed(w, &c, step, rc);
		goto out;
	}

	/* The last to arrive: wake the others, then drop the previous
	 * barrier's keys, which every rank has left by now. */
	if (!(ms = left_ms(&c))) {
		rc = out_of_time(w, &c, "before waking the others");
		goto out;
	}
	rc = crun_store_set(w->store, done, "1", 1, ms);
	if (rc < 0) {
		rc = store_failed(w, &c, "waking the others", rc);
		goto out;
	}
	if (w->prev_barrier) {
		char old[KEY_LEN];

		for (int i = 0; i < 2 && rc == 0; i++) {
			snprintf(old, sizeof(old), "%sbarrier/%lld.%llu/%s", w->prefix,
				 (long long)w->handle, (unsigned long long)w->prev_barrier,
				 i ? "done" : "arrived");
			if (!(ms = left_ms(&c))) {
				rc = out_of_time(w, &c, "deleting the previous barrier's keys");
				break;
			}
			rc = crun_store_delete(w->store, old, ms);
			if (rc < 0)
				rc = store_failed(w, &c, "deleting the previous barrier's keys",
						  rc);
			else
				rc = 0;
		}
	}
out:
	if (rc == 0)
		w->prev_barrier = c.num;
	return call_end(w, rc);
}

/* ---- heartbeats ---- */

/* CRUN_HEARTBEAT_FD: -2 not read yet, -1 unset, -3 set but not a channel. */
static _Atomic int beat_fd = -2;

/* Whether fd is open and a socket or a pipe, as crun's channel is. A
 * descendant that inherited the variable but not the descriptor may have
 * that number reused for a regular file, which must not get beats. */
static bool beat_channel(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && (S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode));
}

static int heartbeat_fd(void)
{
	int fd = atomic_load(&beat_fd);
	const char *v;
	int64_t n;

	if (fd != -2)
		return fd;
	v = getenv("CRUN_HEARTBEAT_FD");
	if (!v || !*v)
		fd = -1;
	else if (crun__parse_int64(v, 0, INT_MAX, &n, NULL, 0) < 0 || !beat_channel((int)n))
		fd = -3;
	else
		fd = (int)n;
	atomic_store(&beat_fd, fd);
	return fd;
}

/* A pipe (not crun's channel, which is a socket): non-blocking from now on
 * (only this process and its children write to this end), and a reader
 * that is gone gives EPIPE, not a SIGPIPE that ends the worker. */
static ssize_t pipe_write(int fd, const char *line, size_t len)
{
	sigset_t pipe_set, old;
	struct timespec zero = {0, 0};
	bool pending;
	int fl = fcntl(fd, F_GETFL), err;
	ssize_t n;

	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	sigpending(&old);
	pending = sigismember(&old, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	n = write(fd, line, len);
	err = errno;
	if (n < 0 && err == EPIPE && !pending)
		sigtimedwait(&pipe_set, NULL, &zero);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = err;
	return n;
}

static int send_line(const char *line, size_t len)
{
	int fd = heartbeat_fd();
	ssize_t n;

	if (fd == -1)
		return 0;
	if (fd < 0)
		return -EBADF;
	n = send(fd, line, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0 && errno == ENOTSOCK)
		n = pipe_write(fd, line, len);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return (size_t)n == len ? 0 : -EAGAIN;
}

int crun_worker_heartbeat(int64_t step)
{
	char line[32];
	int n;

	if (step < 0)
		return send_line("beat\n", 5);
	n = snprintf(line, sizeof(line), "step %lld\n", (long long)step);
	return send_line(line, (size_t)n);
}

int crun_worker_heartbeat_work(int64_t step, double work_seconds)
{
	char line[64];
	int n;

	if (step < 0 || !isfinite(work_seconds) || work_seconds < 0)
		return -EINVAL;
	n = snprintf(line, sizeof(line), "step %lld %.6f\n", (long long)step, work_seconds);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -EINVAL; /* a work time of more than 10^30 s */
	return send_line(line, (size_t)n);
}

int crun_worker_heartbeat_section(const char *name, int begin)
{
	char line[96];
	size_t len = name ? strlen(name) : 0;
	int n;

	if (!len || len > 63)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)name[i]) && !strchr("._-", name[i]))
			return -EINVAL;
	n = snprintf(line, sizeof(line), "section %s %s\n", begin ? "begin" : "end", name);
	return send_line(line, (size_t)n);
}

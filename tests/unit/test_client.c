/* libcrun's store client against the real server over loopback: every
 * call, waits answered by another handle, timeouts that leave the handle
 * usable, connect retry, a server restart under a connected client, event
 * queueing, run isolation and the mapping of the server's refusals. */
#include <crun/store.h>

#include "common/log.h"
#include "rendezvous/wire.h"
#include "store_harness.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static struct crun_store *client(int port, const char *run, int connect_ms, int timeout_ms)
{
	struct crun_store_opts o = {
		.host = "127.0.0.1",
		.port = port,
		.run_id = run,
		.connect_timeout_ms = connect_ms ? connect_ms : 5000,
		.timeout_ms = timeout_ms ? timeout_ms : 5000,
	};
	struct crun_store *s = crun_store_create(&o);

	assert_non_null(s);
	return s;
}

static void set_str(struct crun_store *s, const char *k, const char *v)
{
	assert_int_equal(crun_store_set(s, k, v, strlen(v), -1), 0);
}

static void assert_get(struct crun_store *s, const char *k, const char *v)
{
	struct crun_store_buf b;

	assert_int_equal(crun_store_get(s, k, &b, 0), 0);
	assert_int_equal(b.len, strlen(v));
	assert_string_equal((char *)b.data, v);
	crun_store_buf_finish(&b);
}

static void assert_event(struct crun_store *s, enum crun_store_event_type type, const char *k,
			 const char *v, int timeout_ms)
{
	struct crun_store_event ev;

	assert_int_equal(crun_store_next_event(s, &ev, timeout_ms), 0);
	assert_int_equal(ev.type, type);
	assert_string_equal(ev.key, k);
	if (v)
		assert_string_equal((char *)ev.value.data, v);
	else
		assert_int_equal(ev.value.len, 0);
	crun_store_event_finish(&ev);
}

static void test_every_call(void **state)
{
	struct harness h;
	struct crun_store *s, *o;
	struct crun_store_buf b, vals[3];
	const char *keys[] = {"a", "b", "c"};
	const void *mvals[] = {"1", "22", ""};
	size_t lens[] = {1, 2, 0};
	char **list;
	size_t n;
	int64_t v;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	s = client(h.port, "r", 0, 0);
	assert_int_equal(crun_store_fd(s), -1);
	assert_int_equal(crun_store_connect(s), 0);
	assert_true(crun_store_fd(s) >= 0);
	assert_int_equal(crun_store_connect(s), 0); /* already: no-op */

	/* set / get, binary values with NUL bytes */
	assert_int_equal(crun_store_set(s, "bin", "x\0y", 3, -1), 0);
	assert_int_equal(crun_store_get(s, "bin", &b, 0), 0);
	assert_int_equal(b.len, 3);
	assert_memory_equal(b.data, "x\0y", 3);
	assert_int_equal(b.data[3], 0);
	crun_store_buf_finish(&b);
	assert_null(b.data);
	assert_int_equal(crun_store_set(s, "empty", "", 0, -1), 0);
	assert_get(s, "empty", "");
	assert_int_equal(crun_store_get(s, "missing", &b, 0), -ENOENT);
	assert_null(b.data);

	/* check */
	assert_int_equal(crun_store_check(s, (const char *const[]){"bin", "empty"}, 2, -1), 1);
	assert_int_equal(crun_store_check(s, (const char *const[]){"bin", "nope"}, 2, -1), 0);
	assert_int_equal(crun_store_check(s, NULL, 0, -1), 1);

	/* add */
	assert_int_equal(crun_store_add(s, "n", 5, &v, -1), 0);
	assert_int_equal(v, 5);
	assert_int_equal(crun_store_add(s, "n", -7, &v, -1), 0);
	assert_int_equal(v, -2);
	assert_int_equal(crun_store_add(s, "n", 0, NULL, -1), 0);
	assert_get(s, "n", "-2");

	/* cas */
	assert_int_equal(crun_store_cas(s, "c", NULL, 0, "v1", 2, CRUN_STORE_EXPECT_ABSENT, &b, -1),
			 1);
	assert_string_equal((char *)b.data, "v1");
	crun_store_buf_finish(&b);
	assert_int_equal(crun_store_cas(s, "c", NULL, 0, "v2", 2, CRUN_STORE_EXPECT_ABSENT, &b, -1),
			 0);
	assert_string_equal((char *)b.data, "v1"); /* present: no swap */
	crun_store_buf_finish(&b);
	assert_int_equal(crun_store_cas(s, "c", "v1", 2, "v3", 2, 0, &b, -1), 1);
	assert_string_equal((char *)b.data, "v3");
	crun_store_buf_finish(&b);
	assert_int_equal(crun_store_cas(s, "c", "zz", 2, "v4", 2, 0, NULL, -1), 0);
	assert_get(s, "c", "v3");
	/* A missing key with a non-empty expected: nothing stored, no swap,
	 * even when the reply (expected) equals desired. */
	assert_int_equal(crun_store_cas(s, "nokey", "x", 1, "x", 1, 0, &b, -1), 0);
	crun_store_buf_finish(&b);
	assert_int_equal(crun_store_get(s, "nokey", &b, 0), -ENOENT);

	/* append */
	assert_int_equal(crun_store_append(s, "log", "ab", 2, -1), 0);
	assert_int_equal(crun_store_append(s, "log", "cd", 2, -1), 0);
	assert_get(s, "log", "abcd");

	/* delete */
	assert_int_equal(crun_store_delete(s, "log", -1), 1);
	assert_int_equal(crun_store_delete(s, "log", -1), 0);

	/* mset / mget */
	assert_int_equal(crun_store_mset(s, keys, mvals, lens, 3, -1), 0);
	assert_int_equal(crun_store_mget(s, keys, 3, vals, 0), 0);
	assert_string_equal((char *)vals[0].data, "1");
	assert_string_equal((char *)vals[1].data, "22");
	assert_int_equal(vals[2].len, 0);
	for (int i = 0; i < 3; i++)
		crun_store_buf_finish(&vals[i]);
	assert_int_equal(crun_store_mget(s, (const char *const[]){"a", "zz"}, 2, vals, 0), -ENOENT);
	assert_null(vals[0].data);
	assert_null(vals[1].data);

	/* count / list: bin empty n c, then mset's a b (and c again) */
	assert_int_equal(crun_store_count(s, &v, -1), 0);
	assert_int_equal(v, 6);
	assert_int_equal(crun_store_list(s, &list, &n, -1), 0);
	assert_int_equal(n, 6);
	const char *want[] = {"a", "b", "bin", "c", "empty", "n"};
	for (size_t i = 0; i < n; i++)
		assert_string_equal(list[i], want[i]);
	crun_store_list_free(list, n);

	/* ping */
	assert_true(crun_store_ping(s, -1) >= 0);

	/* watch / unwatch, events from another handle */
	o = client(h.port, "r", 0, 0);
	assert_int_equal(crun_store_watch(s, "w", -1), 0);
	assert_int_equal(crun_store_watch(s, "w", -1), 0); /* twice is once */
	set_str(o, "w", "1");
	assert_int_equal(crun_store_delete(o, "w", -1), 1);
	assert_event(s, CRUN_STORE_EV_SET, "w", "1", 2000);
	assert_event(s, CRUN_STORE_EV_DELETE, "w", NULL, 2000);
	{
		struct crun_store_event ev;

		assert_int_equal(crun_store_next_event(s, &ev, 0), -ETIMEDOUT);
		assert_int_equal(crun_store_unwatch(s, "w", -1), 0);
		set_str(o, "w", "2");
		assert_int_equal(crun_store_next_event(s, &ev, 200), -ETIMEDOUT);
		assert_null(ev.key);
	}

	/* ephemeral keys vanish with their connection */
	assert_int_equal(crun_store_watch(o, "alive", -1), 0);
	assert_int_equal(crun_store_set_flags(s, "alive", "1", 1, CRUN_STORE_EPHEMERAL, -1), 0);
	assert_event(o, CRUN_STORE_EV_SET, "alive", "1", 2000);
	crun_store_destroy(s);
	assert_event(o, CRUN_STORE_EV_DELETE, "alive", NULL, 2000);

	crun_store_destroy(o);
	crun_store_destroy(NULL);
	harness_stop(&h);
}

struct setter {
	int port;
	const char *run;
	int delay_ms;
	const char *keys[4];
	const char *vals[4];
};

static void setter_main(void *arg)
{
	struct setter *st = arg;
	struct crun_store *s = client(st->port, st->run, 0, 0);

	assert_int_equal(crun_store_connect(s), 0);
	usleep((useconds_t)st->delay_ms * 1000);
	for (int i = 0; i < 4 && st->keys[i]; i++) {
		if (st->vals[i])
			set_str(s, st->keys[i], st->vals[i]);
		else
			assert_int_equal(crun_store_delete(s, st->keys[i], -1), 1);
	}
	crun_store_destroy(s);
}

static void test_get_wait_answered(void **state)
{
	struct harness h;
	struct setter st = {.run = "r", .delay_ms = 150, .keys = {"late"}, .vals = {"here"}};
	struct crun_store_buf b, vals[2];
	struct crun_store *s;
	uv_thread_t t;
	uint64_t t0;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	st.port = h.port;
	s = client(h.port, "r", 0, 0);
	assert_int_equal(crun_store_connect(s), 0);

	uv_thread_create(&t, setter_main, &st);
	t0 = crun__now_ms();
	assert_int_equal(crun_store_get(s, "late", &b, 5000), 0);
	assert_true(elapsed_ms(t0) >= 100);
	assert_true(elapsed_ms(t0) < 4000);
	assert_string_equal((char *)b.data, "here");
	crun_store_buf_finish(&b);
	uv_thread_join(&t);

	/* wait and mget with wait, answered the same way */
	st.keys[0] = "w1";
	st.vals[0] = "1";
	st.keys[1] = "w2";
	st.vals[1] = "2";
	uv_thread_create(&t, setter_main, &st);
	assert_int_equal(crun_store_wait(s, (const char *const[]){"w1", "w2"}, 2, 5000), 0);
	assert_int_equal(crun_store_mget(s, (const char *const[]){"w2", "w1"}, 2, vals, 5000), 0);
	assert_string_equal((char *)vals[0].data, "2");
	assert_string_equal((char *)vals[1].data, "1");
	crun_store_buf_finish(&vals[0]);
	crun_store_buf_finish(&vals[1]);
	uv_thread_join(&t);

	crun_store_destroy(s);
	harness_stop(&h);
}

static void test_wait_timeouts(void **state)
{
	struct harness h;
	struct crun_store *s;
	struct crun_store_buf b, vals[1];
	const char *keys[] = {"never"};
	uint64_t t0, dt;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	s = client(h.port, "r", 0, 0);

	t0 = crun__now_ms();
	assert_int_equal(crun_store_wait(s, keys, 1, 200), -ETIMEDOUT);
	dt = elapsed_ms(t0);
	assert_true(dt >= 190);
	assert_true(dt < 1500);

	t0 = crun__now_ms();
	assert_int_equal(crun_store_get(s, "never", &b, 200), -ETIMEDOUT);
	dt = elapsed_ms(t0);
	assert_true(dt >= 190 && dt < 1500);
	assert_null(b.data);

	t0 = crun__now_ms();
	assert_int_equal(crun_store_mget(s, keys, 1, vals, 200), -ETIMEDOUT);
	dt = elapsed_ms(t0);
	assert_true(dt >= 190 && dt < 1500);

	/* timeout 0: one check, no wait */
	t0 = crun__now_ms();
	assert_int_equal(crun_store_wait(s, keys, 1, 0), -ETIMEDOUT);
	assert_true(elapsed_ms(t0) < 150);
	set_str(s, "never", "now");
	assert_int_equal(crun_store_wait(s, keys, 1, 0), 0);

	/* nothing to wait for */
	struct crun_store_event ev;

	t0 = crun__now_ms();
	assert_int_equal(crun_store_next_event(s, &ev, 150), -ETIMEDOUT);
	dt = elapsed_ms(t0);
	assert_true(dt >= 140 && dt < 1500);

	crun_store_destroy(s);
	harness_stop(&h);
}

static void test_call_timeout_leaves_handle_usable(void **state)
{
	struct harness h;
	struct crun_store *s;
	uint64_t t0, dt;
	int64_t v;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	s = client(h.port, "r", 0, 0);
	assert_int_equal(crun_store_add(s, "n", 1, &v, -1), 0);

	harness_freeze(&h, 600);
	t0 = crun__now_ms();
	assert_int_equal(crun_store_count(s, &v, 100), -ETIMEDOUT);
	dt = elapsed_ms(t0);
	assert_true(dt >= 90 && dt < 500);
	assert_true(strlen(crun_store_errmsg(s)) > 0);
	assert_true(crun_store_fd(s) >= 0); /* still connected */
	t0 = crun__now_ms();
	assert_int_equal(crun_store_ping(s, 100), -ETIMEDOUT);
	assert_true(elapsed_ms(t0) < 500);

	/* After the freeze: the late replies (count, get) are dropped by id
	 * and the next calls get their own answers. */
	assert_int_equal(crun_store_add(s, "n", 10, &v, 3000), 0);
	assert_int_equal(v, 11);
	assert_int_equal(crun_store_count(s, &v, 3000), 0);
	assert_int_equal(v, 1);
	assert_get(s, "n", "11");

	crun_store_destroy(s);
	harness_stop(&h);
}

struct late_start {
	struct harness *h;
	int port;
	int delay_ms;
	int rc;
};

static void late_start_main(void *arg)
{
	struct late_start *ls = arg;

	usleep((useconds_t)ls->delay_ms * 1000);
	ls->rc = harness_start(ls->h, ls->port, NULL);
}

static void test_connect_retry(void **state)
{
	struct harness h;
	struct late_start ls = {.h = &h, .delay_ms = 200};
	struct crun_store *s;
	uv_thread_t t;
	uint64_t t0;
	int fd;

	(void)state;
	ls.port = reserve_port(&fd);
	assert_true(ls.port > 0);
	s = client(ls.port, "r", 5000, 0);
	uv_thread_create(&t, late_start_main, &ls);
	t0 = crun__now_ms();
	assert_int_equal(crun_store_connect(s), 0);
	assert_true(elapsed_ms(t0) >= 150);
	assert_true(elapsed_ms(t0) < 4000);
	uv_thread_join(&t);
	assert_int_equal(ls.rc, 0);
	close(fd);
	set_str(s, "k", "v");
	assert_get(s, "k", "v");
	crun_store_destroy(s);
	harness_stop(&h);
}

static void test_connect_refused(void **state)
{
	struct crun_store *s;
	uint64_t t0, dt;
	int fd, port;

	(void)state;
	port = reserve_port(&fd);
	assert_true(port > 0);
	s = client(port, "r", 300, 0);
	t0 = crun__now_ms();
	assert_int_equal(crun_store_connect(s), -ECONNREFUSED);
	dt = elapsed_ms(t0);
	assert_true(dt >= 290);
	assert_true(dt < 2000);
	assert_non_null(strstr(crun_store_errmsg(s), "connection refused"));
	assert_int_equal(crun_store_fd(s), -1);
	/* A call connects lazily and fails the same way. */
	assert_int_equal(crun_store_set(s, "k", "v", 1, 1000), -ECONNREFUSED);
	crun_store_destroy(s);
	close(fd);
}

static void test_server_restart(void **state)
{
	struct harness h, h2;
	struct late_start ls = {.h = &h2, .delay_ms = 300};
	struct crun_store *s, *o;
	uv_thread_t t;
	int64_t v;
	int port;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	port = h.port;
	s = client(port, "r", 5000, 0);
	assert_int_equal(crun_store_watch(s, "w", -1), 0);
	set_str(s, "a", "1");

	/* Restarted at once: the next call notices the closed connection,
	 * reconnects and is answered by the new server (empty store). */
	harness_stop(&h);
	assert_int_equal(harness_start(&h, port, NULL), 0);
	assert_int_equal(crun_store_get(s, "a", &(struct crun_store_buf){0}, 0), -ENOENT);
	/* add is not repeatable, but a close seen before sending is safe */
	harness_stop(&h);
	assert_int_equal(harness_start(&h, port, NULL), 0);
	assert_int_equal(crun_store_add(s, "n", 3, &v, -1), 0);
	assert_int_equal(v, 3);

	/* The watch came back with the connection. */
	o = client(port, "r", 0, 0);
	set_str(o, "w", "again");
	assert_event(s, CRUN_STORE_EV_SET, "w", "again", 2000);
	crun_store_destroy(o);

	/* Restarted 300 ms later: the call retries connecting meanwhile. */
	harness_stop(&h);
	ls.port = port;
	uv_thread_create(&t, late_start_main, &ls);
	set_str(s, "b", "2");
	uv_thread_join(&t);
	assert_int_equal(ls.rc, 0);
	assert_get(s, "b", "2");
	o = client(port, "r", 0, 0);
	set_str(o, "w", "third");
	assert_event(s, CRUN_STORE_EV_SET, "w", "third", 2000);
	crun_store_destroy(o);

	/* A server gone for good: the call fails within its connect time. */
	harness_stop(&h2);
	crun_store_destroy(s);
	s = client(port, "r", 200, 0);
	assert_int_equal(crun_store_count(s, &v, -1), -ECONNREFUSED);
	crun_store_destroy(s);
}

static void test_events_queued_during_get(void **state)
{
	struct harness h;
	struct setter st = {.run = "r",
			    .delay_ms = 100,
			    .keys = {"k", "k", "k", "g"},
			    .vals = {"1", "2", NULL, "x"}};
	struct crun_store_event ev;
	struct crun_store *s;
	uv_thread_t t;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	st.port = h.port;
	s = client(h.port, "r", 0, 0);
	assert_int_equal(crun_store_watch(s, "k", -1), 0);
	uv_thread_create(&t, setter_main, &st);
	/* The three changes of k arrive while this get waits for g. */
	{
		struct crun_store_buf b;

		assert_int_equal(crun_store_get(s, "g", &b, 5000), 0);
		assert_string_equal((char *)b.data, "x");
		crun_store_buf_finish(&b);
	}
	uv_thread_join(&t);
	assert_event(s, CRUN_STORE_EV_SET, "k", "1", 0);
	assert_event(s, CRUN_STORE_EV_SET, "k", "2", 0);
	assert_event(s, CRUN_STORE_EV_DELETE, "k", NULL, 0);
	assert_int_equal(crun_store_next_event(s, &ev, 0), -ETIMEDOUT);

	/* Events survive other calls too, and the fd says when to look. */
	set_str(s, "k", "3");
	set_str(s, "other", "y");
	assert_event(s, CRUN_STORE_EV_SET, "k", "3", 0);
	crun_store_destroy(s);
	harness_stop(&h);
}

/* A reader that falls behind loses events, not memory: past
 * max_event_bytes one OVERFLOW stands for what was dropped, and after it
 * has been read events queue again. */
static void test_event_queue_bounded(void **state)
{
	struct crun_store_opts o = {.host = "127.0.0.1",
				    .run_id = "r",
				    .connect_timeout_ms = 5000,
				    .timeout_ms = 5000,
				    .max_event_bytes = 4096};
	char val[600];
	struct crun_store_event ev;
	struct crun_store *s, *w;
	struct harness h;
	int sets = 0, overflows = 0;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	o.port = h.port;
	s = client(h.port, "r", 0, 0);
	w = crun_store_create(&o);
	assert_non_null(w);
	assert_int_equal(crun_store_watch(w, "q", -1), 0);
	memset(val, 'v', sizeof(val) - 1);
	val[sizeof(val) - 1] = '\0';
	for (int i = 0; i < 40; i++)
		set_str(s, "q", val); /* 40 x 600 bytes: far over 4096 */
	set_str(s, "done", "1");
	/* every change reached w before the reply to this get */
	{
		struct crun_store_buf b;

		assert_int_equal(crun_store_get(w, "done", &b, 5000), 0);
		crun_store_buf_finish(&b);
	}
	while (crun_store_next_event(w, &ev, 0) == 0) {
		if (ev.type == CRUN_STORE_EV_OVERFLOW) {
			assert_string_equal(ev.key, "");
			assert_int_equal(ev.value.len, 0);
			assert_non_null(ev.value.data);
			assert_int_equal(ev.value.data[0], '\0');
			overflows++;
		} else {
			assert_int_equal(ev.type, CRUN_STORE_EV_SET);
			assert_int_equal(overflows, 0); /* nothing after the overflow */
			sets++;
		}
		crun_store_event_finish(&ev);
	}
	assert_int_equal(overflows, 1);
	assert_true(sets >= 1 && sets < 8);
	/* read: the queue takes events again */
	set_str(s, "q", "again");
	assert_event(w, CRUN_STORE_EV_SET, "q", "again", 2000);
	crun_store_destroy(w);
	crun_store_destroy(s);
	harness_stop(&h);
}

static void test_runs_isolated(void **state)
{
	struct harness h;
	struct crun_store *a, *b;
	struct crun_store_event ev;
	char **list;
	size_t n;
	int64_t v;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	a = client(h.port, "run-a", 0, 0);
	b = client(h.port, "run-b", 0, 0);
	assert_int_equal(crun_store_watch(b, "k", -1), 0);
	set_str(a, "k", "from a");
	assert_int_equal(crun_store_get(b, "k", &(struct crun_store_buf){0}, 0), -ENOENT);
	assert_int_equal(crun_store_count(b, &v, -1), 0);
	assert_int_equal(v, 0);
	assert_int_equal(crun_store_list(b, &list, &n, -1), 0);
	assert_int_equal(n, 0);
	crun_store_list_free(list, n);
	assert_int_equal(crun_store_next_event(b, &ev, 200), -ETIMEDOUT);
	set_str(b, "k", "from b");
	assert_get(a, "k", "from a");
	assert_get(b, "k", "from b");
	crun_store_destroy(a);
	crun_store_destroy(b);
	harness_stop(&h);
}

static void test_errors_map(void **state)
{
	struct crun__server_opts so = {0};
	struct harness h;
	struct crun_store *s, *s2;
	char big[100];
	uint64_t t0;
	int64_t v;

	(void)state;
	crun__server_limits_default(&so.limits);
	so.limits.max_key_size = 16;
	so.limits.max_value_size = 64;
	so.limits.max_keys_per_run = 3;
	so.limits.max_connections = 1;
	assert_int_equal(harness_start(&h, 0, &so), 0);
	s = client(h.port, "r", 0, 0);
	memset(big, 'x', sizeof(big));

	assert_int_equal(crun_store_set(s, "a-key-of-more-than-16-bytes", "v", 1, -1), -E2BIG);
	assert_non_null(strstr(crun_store_errmsg(s), "exceeds"));
	assert_int_equal(crun_store_set(s, "k", big, sizeof(big), -1), -E2BIG);
	set_str(s, "k1", "abc");
	set_str(s, "k2", "2");
	set_str(s, "k3", "3");
	assert_int_equal(crun_store_set(s, "k4", "4", 1, -1), -ENOSPC);
	assert_true(strlen(crun_store_errmsg(s)) > 0);
	assert_int_equal(crun_store_add(s, "k1", 1, &v, -1), -EINVAL);
	assert_int_equal(crun_store_get(s, "nope", &(struct crun_store_buf){0}, 0), -ENOENT);
	/* refused locally */
	assert_int_equal(crun_store_set(s, "", "v", 1, -1), -EINVAL);
	assert_int_equal(crun_store_set(s, NULL, "v", 1, -1), -EINVAL);
	assert_int_equal(crun_store_set_flags(s, "k", "v", 1, 0x40, -1), -EINVAL);
	assert_int_equal(crun_store_cas(s, "k", "a", 1, "b", 1, 0x40, NULL, -1), -EINVAL);
	/* the handle still works after all that */
	assert_get(s, "k2", "2");

	/* the connection limit: refused at once, not retried */
	s2 = client(h.port, "r", 5000, 0);
	t0 = crun__now_ms();
	assert_int_equal(crun_store_connect(s2), -EMFILE);
	assert_true(elapsed_ms(t0) < 1000);
	assert_non_null(strstr(crun_store_errmsg(s2), "too many connections"));
	crun_store_destroy(s2);

	/* strerror covers the codes */
	assert_string_equal(crun_store_strerror(-ENOENT), "key not found");
	assert_string_equal(crun_store_strerror(-EACCES), "authentication failed");
	assert_string_equal(crun_store_strerror(-ECONNREFUSED), "connection refused");
	assert_string_equal(crun_store_strerror(-ETIMEDOUT), "timed out");
	assert_string_equal(crun_store_strerror(-E2BIG), "key or value too large");
	assert_string_equal(crun_store_strerror(-ENOSPC), "too many keys in the run");
	assert_string_equal(crun_store_strerror(0), "success");
	assert_true(strlen(crun_store_strerror(-EXDEV)) > 0);
	assert_string_equal(crun_store_errmsg(NULL), "");

	crun_store_destroy(s);
	harness_stop(&h);
}

static void test_bad_options(void **state)
{
	struct crun_store_opts o = {0};

	(void)state;
	o.port = 70000;
	assert_null(crun_store_create(&o));
	o.port = 0;
	o.timeout_ms = -1;
	assert_null(crun_store_create(&o));
	o.timeout_ms = 0;
	o.run_id = "";
	assert_null(crun_store_create(&o));
	o.run_id = NULL;
	o.token = "x";
	o.token_len = 0;
	assert_null(crun_store_create(&o));
	assert_null(crun_store_create(NULL));
	o.token = NULL;
	struct crun_store *s = crun_store_create(&o);
	assert_non_null(s);
	crun_store_destroy(s);
	assert_int_equal(crun_store_connect(NULL), -EINVAL);
	assert_int_equal(crun_store_fd(NULL), -1);
}

static void test_large_value(void **state)
{
	struct harness h;
	struct crun_store *s;
	struct crun_store_buf b;
	size_t len = 3 * 1024 * 1024 + 7;
	uint8_t *v = malloc(len);

	(void)state;
	assert_non_null(v);
	for (size_t i = 0; i < len; i++)
		v[i] = (uint8_t)(i * 31 + 7);
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	s = client(h.port, "r", 0, 0);
	assert_int_equal(crun_store_set(s, "big", v, len, -1), 0);
	assert_int_equal(crun_store_get(s, "big", &b, 0), 0);
	assert_int_equal(b.len, len);
	assert_memory_equal(b.data, v, len);
	crun_store_buf_finish(&b);
	/* small calls after the large one */
	set_str(s, "small", "1");
	assert_get(s, "small", "1");
	free(v);
	crun_store_destroy(s);
	harness_stop(&h);
}

/* A fake store that completes the handshake (no token), reads one
 * request and closes the connection without answering: the reply is lost
 * every time. */
struct dropper {
	int lfd;
	int port;
	int requests[256]; /* by frame type */
	volatile bool stop;
	bool busy; /* answer HELLO with ERROR EAGAIN (id 0), then close */
	volatile int accepted;
};

static int read_full(int fd, uint8_t *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = read(fd, buf + off, len - off);

		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	return 0;
}

/* Reads one frame; returns its type and id, or -1. */
static int read_frame(int fd, uint32_t *id)
{
	uint8_t hdr[CRUN_WIRE_HEADER_LEN], payload[4096];
	uint32_t plen;

	if (read_full(fd, hdr, sizeof(hdr)) < 0)
		return -1;
	plen = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (plen > sizeof(payload) || read_full(fd, payload, plen) < 0)
		return -1;
	*id = (uint32_t)hdr[8] << 24 | (uint32_t)hdr[9] << 16 | (uint32_t)hdr[10] << 8 | hdr[11];
	return hdr[4];
}

static void dropper_main(void *arg)
{
	struct dropper *d = arg;

	while (!d->stop) {
		struct pollfd p = {.fd = d->lfd, .events = POLLIN};
		uint8_t pre[CRUN_WIRE_SERVER_PREAMBLE], out[64];
		struct crun__wire_msg ok = {.type = CRUN_WIRE_OK};
		uint32_t id;
		int fd, type;

		if (poll(&p, 1, 50) <= 0)
			continue;
		fd = accept(d->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		d->accepted++;
		crun__wire_server_preamble(pre, 0, NULL);
		if (d->busy) {
			struct crun__wire_item why = {(const uint8_t *)"busy; try again", 15};
			struct crun__wire_msg err = {
				.type = CRUN_WIRE_ERROR, .num = EAGAIN, .count = 1, .items = &why};

			if (read_full(fd, out, CRUN_WIRE_CLIENT_PREAMBLE) == 0 &&
			    crun__write_all(fd, pre, sizeof(pre)) == 0 &&
			    read_frame(fd, &id) == CRUN_WIRE_HELLO)
				crun__write_all(fd, out, crun__wire_encode(&err, out));
			close(fd);
			continue;
		}
		if (read_full(fd, out, CRUN_WIRE_CLIENT_PREAMBLE) == 0 &&
		    crun__write_all(fd, pre, sizeof(pre)) == 0 &&
		    read_frame(fd, &id) == CRUN_WIRE_HELLO) {
			ok.id = id;
			crun__write_all(fd, out, crun__wire_encode(&ok, out));
			type = read_frame(fd, &id);
			if (type > 0)
				d->requests[type]++;
		}
		close(fd);
	}
}

/* Starts d's thread on a listener of its own on loopback. */
static void dropper_start(struct dropper *d, uv_thread_t *t)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);

	d->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(d->lfd >= 0);
	assert_int_equal(bind(d->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(d->lfd, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(listen(d->lfd, 16), 0);
	d->port = ntohs(a.sin_port);
	uv_thread_create(t, dropper_main, d);
}

static void dropper_stop(struct dropper *d, uv_thread_t *t)
{
	d->stop = true;
	uv_thread_join(t);
	close(d->lfd);
}

static void test_lost_replies(void **state)
{
	struct dropper d = {0};
	struct crun_store *s;
	uv_thread_t t;
	int64_t v;
	int rc;

	(void)state;
	dropper_start(&d, &t);

	s = client(d.port, "r", 2000, 2000);
	/* set is safe to repeat: resent on new connections, then fails */
	rc = crun_store_set(s, "k", "v", 1, -1);
	assert_true(rc == -ECONNRESET || rc == -EPIPE);
	assert_true(d.requests[CRUN_WIRE_SET] > 1);
	/* add may have been applied: sent once, then -ECONNRESET */
	assert_int_equal(crun_store_add(s, "n", 1, &v, -1), -ECONNRESET);
	assert_int_equal(d.requests[CRUN_WIRE_ADD], 1);
	assert_non_null(strstr(crun_store_errmsg(s), "may have been applied"));
	assert_int_equal(crun_store_append(s, "n", "x", 1, -1), -ECONNRESET);
	assert_int_equal(d.requests[CRUN_WIRE_APPEND], 1);
	assert_int_equal(crun_store_cas(s, "n", "a", 1, "b", 1, 0, NULL, -1), -ECONNRESET);
	assert_int_equal(d.requests[CRUN_WIRE_CAS], 1);
	crun_store_destroy(s);

	dropper_stop(&d, &t);
}

/* A connection the store closed as idle is reconnected by the next call,
 * whatever that call is: a GET, or an ADD (not repeated once sent). */
static void test_idle_closed(void **state)
{
	struct crun__server_opts so;
	struct harness h;
	struct crun_store *s;
	struct crun_store_buf b;
	int64_t v;

	(void)state;
	harness_opts(&so, NULL);
	so.limits.idle_timeout_ms = 1000;
	assert_int_equal(harness_start(&h, 0, &so), 0);
	s = client(h.port, "r", 0, 0);
	set_str(s, "k", "v");
	poll(NULL, 0, 2600);
	assert_int_equal(crun_store_get(s, "k", &b, 0), 0);
	crun_store_buf_finish(&b);
	poll(NULL, 0, 2600);
	assert_int_equal(crun_store_add(s, "n", 1, &v, -1), 0);
	assert_int_equal(v, 1);
	set_str(s, "k", "w");
	crun_store_destroy(s);
	assert_int_equal(harness_stop(&h), 0);
}

/* A store that says EAGAIN as its last word before closing: the client
 * takes it as that connection's end and connects again with its backoff,
 * rather than waiting on the closed one for the whole connect timeout. */
static void test_last_word_eagain(void **state)
{
	struct dropper d = {.busy = true};
	struct crun_store *s;
	uv_thread_t t;

	(void)state;
	dropper_start(&d, &t);

	s = client(d.port, "r", 600, 600);
	assert_int_not_equal(crun_store_connect(s), 0);
	assert_true(d.accepted >= 3);
	crun_store_destroy(s);

	dropper_stop(&d, &t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_call),
		cmocka_unit_test(test_get_wait_answered),
		cmocka_unit_test(test_wait_timeouts),
		cmocka_unit_test(test_call_timeout_leaves_handle_usable),
		cmocka_unit_test(test_connect_retry),
		cmocka_unit_test(test_connect_refused),
		cmocka_unit_test(test_server_restart),
		cmocka_unit_test(test_events_queued_during_get),
		cmocka_unit_test(test_event_queue_bounded),
		cmocka_unit_test(test_runs_isolated),
		cmocka_unit_test(test_errors_map),
		cmocka_unit_test(test_bad_options),
		cmocka_unit_test(test_large_value),
		cmocka_unit_test(test_lost_replies),
		cmocka_unit_test(test_last_word_eagain),
		cmocka_unit_test(test_idle_closed),
	};

	crun__log_init("test_client", CRUN_LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

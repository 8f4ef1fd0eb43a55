/* The store server through real sockets: a server runs on its own libuv
 * loop in a thread (store_harness.h; 127.0.0.1, port 0) and the test
 * talks to it with blocking sockets and frames encoded by hand with
 * crun__wire_encode, so nothing here depends on libcrun. Every socket has a
 * 5 s receive timeout, so no test can hang; every server is destroyed and
 * its loop must close with no handle left. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "common/log.h"
#include "common/util.h"
#include "rendezvous/server.h"
#include "rendezvous/tcpstore.h"
#include "rendezvous/wire.h"
#include "store_harness.h"
#include "wire_peer.h"

/* ---- a blocking client -------------------------------------------------- */

static void tsend(int fd, const void *p, size_t n)
{
	assert_int_equal(crun__write_all(fd, p, n), 0);
}

static struct crun__wire_item it(const void *data, size_t len)
{
	struct crun__wire_item i = {data, (uint32_t)len};

	return i;
}

/* Encodes a frame and appends it to buf at *off (buf must be big enough
 * or NULL to only count). */
static size_t put_frame(uint8_t *buf, size_t off, uint8_t type, uint8_t flags, uint32_t id,
			int64_t num, const struct crun__wire_item *items, uint32_t count)
{
	struct crun__wire_msg m = {type, flags, id, num, count, (struct crun__wire_item *)items};
	size_t n = crun__wire_encoded_size(&m);

	if (buf)
		assert_int_equal(crun__wire_encode(&m, buf + off), n);
	return off + n;
}

static void send_frame(int fd, uint8_t type, uint8_t flags, uint32_t id, int64_t num,
		       const struct crun__wire_item *items, uint32_t count)
{
	size_t n = put_frame(NULL, 0, type, flags, id, num, items, count);
	uint8_t *buf = malloc(n);

	assert_non_null(buf);
	put_frame(buf, 0, type, flags, id, num, items, count);
	tsend(fd, buf, n);
	free(buf);
}

/* Expects an ERROR frame with this errno and then the end of the
 * connection; when msg is not NULL the message must contain it. */
static void expect_error_and_close(int fd, int errnum, const char *msg)
{
	struct rmsg r;

	assert_int_equal(trecv(fd, &r), 0);
	assert_int_equal(r.m.type, CRUN_WIRE_ERROR);
	assert_int_equal(r.m.num, errnum);
	if (msg) {
		char text[300];

		snprintf(text, sizeof(text), "%.*s", (int)r.m.items[0].len,
			 (const char *)r.m.items[0].data);
		if (!strstr(text, msg))
			fail_msg("error '%s' does not say '%s'", text, msg);
	}
	rmsg_finish(&r);
	assert_true(closed_by_server(fd));
	close(fd);
}

static void read_server_preamble(int fd, uint16_t *flags, uint8_t *nonce)
{
	uint8_t pre[CRUN_WIRE_SERVER_PREAMBLE];
	uint16_t version;

	assert_int_equal(recv_all(fd, pre, sizeof(pre)), 0);
	assert_int_equal(crun__wire_parse_server_preamble(pre, &version, flags, nonce), 0);
}

/* Preambles and HELLO. token NULL: send an empty mac; bad_token: use it
 * instead of the right one. Returns the reply (OK or ERROR) in *r. */
static void handshake(int fd, const char *run, const char *token, struct rmsg *r)
{
	uint8_t pre[CRUN_WIRE_CLIENT_PREAMBLE], snonce[32], cnonce[32], mac[32];
	uint16_t flags;
	struct crun__wire_item items[3];

	crun__wire_client_preamble(pre);
	tsend(fd, pre, sizeof(pre));
	read_server_preamble(fd, &flags, snonce);
	assert_int_equal(crun__wire_random(cnonce, sizeof(cnonce)), 0);
	items[0] = its(run);
	items[1] = it(cnonce, 32);
	items[2] = it(NULL, 0);
	if (token) {
		assert_int_equal(crun__wire_mac_run(token, strlen(token), "client", snonce, cnonce,
						    run, (uint32_t)strlen(run), mac),
				 0);
		items[2] = it(mac, 32);
	}
	send_frame(fd, CRUN_WIRE_HELLO, 0, 1, 0, items, 3);
	assert_int_equal(trecv(fd, r), 0);
	assert_int_equal(r->m.id, 1);
	if (r->m.type == CRUN_WIRE_OK && token) {
		uint8_t want[32];

		assert_int_equal(r->m.count, 1);
		assert_int_equal(r->m.items[0].len, 32);
		assert_int_equal(crun__wire_mac_run(token, strlen(token), "server", cnonce, snonce,
						    run, (uint32_t)strlen(run), want),
				 0);
		assert_memory_equal(want, r->m.items[0].data, 32);
	}
}

/* A connected, authenticated client in run. */
static int client_tok(int port, const char *run, const char *token)
{
	int fd = tconnect(port);
	struct rmsg r;

	handshake(fd, run, token, &r);
	assert_int_equal(r.m.type, CRUN_WIRE_OK);
	rmsg_finish(&r);
	return fd;
}

static int client(int port, const char *run)
{
	return client_tok(port, run, NULL);
}

static uint32_t next_id = 100;

/* One request, one reply (which must carry the request's id). */
static void rpc(int fd, uint8_t type, uint8_t flags, int64_t num,
		const struct crun__wire_item *items, uint32_t count, struct rmsg *r)
{
	uint32_t id = next_id++;

	send_frame(fd, type, flags, id, num, items, count);
	assert_int_equal(trecv(fd, r), 0);
	assert_int_equal(r->m.id, id);
}

static void want_ok(int fd, uint8_t type, uint8_t flags, int64_t num,
		    const struct crun__wire_item *items, uint32_t count)
{
	struct rmsg r;

	rpc(fd, type, flags, num, items, count, &r);
	if (r.m.type != CRUN_WIRE_OK)
		fail_msg("%s: expected OK, got %s (%lld)", crun__wire_type_name(type),
			 crun__wire_type_name(r.m.type), (long long)r.m.num);
	rmsg_finish(&r);
}

static void want_err(int fd, uint8_t type, uint8_t flags, int64_t num,
		     const struct crun__wire_item *items, uint32_t count, int errnum)
{
	struct rmsg r;

	rpc(fd, type, flags, num, items, count, &r);
	assert_int_equal(r.m.type, CRUN_WIRE_ERROR);
	assert_int_equal(r.m.num, errnum);
	assert_int_equal(r.m.count, 1);
	assert_true(r.m.items[0].len > 0);
	rmsg_finish(&r);
}

static int64_t want_int(int fd, uint8_t type, int64_t num, const struct crun__wire_item *items,
			uint32_t count)
{
	struct rmsg r;
	int64_t v;

	rpc(fd, type, 0, num, items, count, &r);
	assert_int_equal(r.m.type, CRUN_WIRE_INT);
	v = r.m.num;
	rmsg_finish(&r);
	return v;
}

static void want_value(int fd, uint8_t type, uint8_t flags, int64_t num,
		       const struct crun__wire_item *items, uint32_t count, const void *want,
		       size_t wantlen)
{
	struct rmsg r;

	rpc(fd, type, flags, num, items, count, &r);
	if (r.m.type != CRUN_WIRE_VALUE)
		fail_msg("%s: expected VALUE, got %s (%lld)", crun__wire_type_name(type),
			 crun__wire_type_name(r.m.type), (long long)r.m.num);
	assert_int_equal(r.m.count, 1);
	assert_int_equal(r.m.items[0].len, wantlen);
	if (wantlen)
		assert_memory_equal(r.m.items[0].data, want, wantlen);
	rmsg_finish(&r);
}

static void set(int fd, const char *k, const char *v)
{
	struct crun__wire_item kv[2] = {its(k), its(v)};

	want_ok(fd, CRUN_WIRE_SET, 0, 0, kv, 2);
}

static void get(int fd, const char *k, const char *v)
{
	struct crun__wire_item key = its(k);

	want_value(fd, CRUN_WIRE_GET, 0, 0, &key, 1, v, strlen(v));
}

static void get_missing(int fd, const char *k)
{
	struct crun__wire_item key = its(k);

	want_err(fd, CRUN_WIRE_GET, 0, 0, &key, 1, ENOENT);
}

/* A fresh client in a fresh run can still set and read a key. */
static void fresh_client_works(int port)
{
	int fd = client(port, "fresh");

	set(fd, "alive", "yes");
	get(fd, "alive", "yes");
	close(fd);
}

static uint64_t now_ms(void)
{
	return crun__now_ms();
}

/* ---- tests ------------------------------------------------------------- */

static void test_operations(void **state)
{
	struct harness h;
	int fd;
	static const uint8_t bin[] = {0, 1, 2, 0xff, '\n', 0};
	struct crun__wire_item k = its("k"), n = its("n");
	struct crun__wire_item bk[2] = {its("bin"), it(bin, sizeof(bin))};
	struct crun__wire_item keys3[3] = {its("a"), its("b"), its("c")};
	struct crun__wire_item mset[6] = {its("b"), its("2"), its("a"),
					  its("1"), its("c"), its("")};
	struct rmsg r;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	fd = client(h.port, "ops");
	/* SET / GET / overwrite / binary / empty values */
	get_missing(fd, "k");
	set(fd, "k", "v1");
	get(fd, "k", "v1");
	set(fd, "k", "a longer second value");
	get(fd, "k", "a longer second value");
	want_ok(fd, CRUN_WIRE_SET, 0, 0, bk, 2);
	want_value(fd, CRUN_WIRE_GET, 0, 0, bk, 1, bin, sizeof(bin));
	set(fd, "empty", "");
	get(fd, "empty", "");

	/* CHECK and WAIT on keys that exist */
	assert_int_equal(want_int(fd, CRUN_WIRE_CHECK, 0, &k, 1), 1);
	assert_int_equal(want_int(fd, CRUN_WIRE_CHECK, 0, keys3, 3), 0);
	want_ok(fd, CRUN_WIRE_WAIT, 0, 1000, &k, 1);

	/* ADD */
	assert_int_equal(want_int(fd, CRUN_WIRE_ADD, 5, &n, 1), 5);
	assert_int_equal(want_int(fd, CRUN_WIRE_ADD, -7, &n, 1), -2);
	get(fd, "n", "-2");
	want_err(fd, CRUN_WIRE_ADD, 0, 1, &k, 1, EINVAL); /* "a longer ..." */
	set(fd, "big", "9223372036854775807");
	{
		struct crun__wire_item big = its("big");

		want_err(fd, CRUN_WIRE_ADD, 0, 1, &big, 1, ERANGE);
		assert_int_equal(want_int(fd, CRUN_WIRE_ADD, 0, &big, 1), INT64_MAX);
	}
	set(fd, "huge", "99999999999999999999");
	{
		struct crun__wire_item huge = its("huge");

		want_err(fd, CRUN_WIRE_ADD, 0, 1, &huge, 1, ERANGE);
	}

	/* CAS, torch's compareSet semantics */
	{
		struct crun__wire_item c1[3] = {its("cas"), its("x"), its("y")};
		struct crun__wire_item c2[3] = {its("cas"), its(""), its("first")};
		struct crun__wire_item c3[3] = {its("cas"), its("wrong"), its("z")};
		struct crun__wire_item c4[3] = {its("cas"), its("first"), its("second")};
		struct crun__wire_item c5[3] = {its("cas"), its(""), its("third")};
		struct crun__wire_item c6[3] = {its("cas2"), its("ignored"), its("new")};

		/* missing key, non-empty expected: nothing stored, expected returned */
		want_value(fd, CRUN_WIRE_CAS, 0, 0, c1, 3, "x", 1);
		get_missing(fd, "cas");
		/* missing key, empty expected: created */
		want_value(fd, CRUN_WIRE_CAS, 0, 0, c2, 3, "first", 5);
		/* mismatch: current value returned, nothing changed */
		want_value(fd, CRUN_WIRE_CAS, 0, 0, c3, 3, "first", 5);
		/* match: swapped */
		want_value(fd, CRUN_WIRE_CAS, 0, 0, c4, 3, "second", 6);
		/* EXPECT_ABSENT on a present key: no swap */
		want_value(fd, CRUN_WIRE_CAS, CRUN_WIRE_FL_EXPECT_ABSENT, 0, c5, 3, "second", 6);
		/* EXPECT_ABSENT on a missing key: created, expected ignored */
		want_value(fd, CRUN_WIRE_CAS, CRUN_WIRE_FL_EXPECT_ABSENT, 0, c6, 3, "new", 3);
		get(fd, "cas2", "new");
	}

	/* DELETE */
	assert_int_equal(want_int(fd, CRUN_WIRE_DELETE, 0, &k, 1), 1);
	assert_int_equal(want_int(fd, CRUN_WIRE_DELETE, 0, &k, 1), 0);
	get_missing(fd, "k");

	/* APPEND creates, then appends */
	{
		struct crun__wire_item a1[2] = {its("log"), its("ab")};
		struct crun__wire_item a2[2] = {its("log"), its("cd")};

		want_ok(fd, CRUN_WIRE_APPEND, 0, 0, a1, 2);
		for (int i = 0; i < 100; i++)
			want_ok(fd, CRUN_WIRE_APPEND, 0, 0, a2, 2);
		rpc(fd, CRUN_WIRE_GET, 0, 0, a1, 1, &r);
		assert_int_equal(r.m.type, CRUN_WIRE_VALUE);
		assert_int_equal(r.m.items[0].len, 202);
		assert_memory_equal(r.m.items[0].data, "abcdcd", 6);
		rmsg_finish(&r);
	}

	/* MSET, MGET, COUNT, LIST */
	want_ok(fd, CRUN_WIRE_MSET, 0, 0, mset, 6);
	rpc(fd, CRUN_WIRE_MGET, 0, 0, keys3, 3, &r);
	assert_int_equal(r.m.type, CRUN_WIRE_VALUES);
	assert_int_equal(r.m.count, 3);
	assert_memory_equal(r.m.items[0].data, "1", 1);
	assert_memory_equal(r.m.items[1].data, "2", 1);
	assert_int_equal(r.m.items[2].len, 0);
	rmsg_finish(&r);
	{
		struct crun__wire_item mk[2] = {its("a"), its("nope")};

		want_err(fd, CRUN_WIRE_MGET, 0, 0, mk, 2, ENOENT);
	}
	/* keys: bin empty n big huge cas cas2 log a b c */
	assert_int_equal(want_int(fd, CRUN_WIRE_COUNT, 0, NULL, 0), 11);
	rpc(fd, CRUN_WIRE_LIST, 0, 0, NULL, 0, &r);
	assert_int_equal(r.m.type, CRUN_WIRE_VALUES);
	assert_int_equal(r.m.count, 11);
	{
		static const char *sorted[] = {"a",    "b",	"big",	"bin", "c", "cas",
					       "cas2", "empty", "huge", "log", "n"};

		for (uint32_t i = 0; i < 11; i++) {
			assert_int_equal(r.m.items[i].len, strlen(sorted[i]));
			assert_memory_equal(r.m.items[i].data, sorted[i], strlen(sorted[i]));
		}
	}
	rmsg_finish(&r);

	/* PING echoes */
	want_value(fd, CRUN_WIRE_PING, 0, 0, NULL, 0, "", 0);
	want_value(fd, CRUN_WIRE_PING, 0, 0, bk + 1, 1, bin, sizeof(bin));

	close(fd);
	assert_int_equal(harness_stop(&h), 0);
}

static void test_waiting_reads(void **state)
{
	struct harness h;
	int a, b;
	struct crun__wire_item k = its("late"), two[2] = {its("m1"), its("m2")};
	struct rmsg r;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	a = client(h.port, "w");
	b = client(h.port, "w");
	/* a waits; a later request on the same connection is not held up */
	send_frame(a, CRUN_WIRE_GET, 0, 7, 5000, &k, 1);
	send_frame(a, CRUN_WIRE_MGET, 0, 8, 5000, two, 2);
	send_frame(a, CRUN_WIRE_WAIT, 0, 9, 5000, two, 2);
	want_value(a, CRUN_WIRE_PING, 0, 0, NULL, 0, "", 0);
	sleep_ms(50);
	set(b, "late", "here");
	assert_int_equal(trecv(a, &r), 0);
	assert_int_equal(r.m.id, 7);
	assert_int_equal(r.m.type, CRUN_WIRE_VALUE);
	assert_memory_equal(r.m.items[0].data, "here", 4);
	rmsg_finish(&r);

	/* MGET and WAIT need both keys */
	set(b, "m1", "one");
	want_value(a, CRUN_WIRE_PING, 0, 0, NULL, 0, "", 0); /* nothing answered yet */
	set(b, "m2", "two");
	for (int i = 0; i < 2; i++) {
		assert_int_equal(trecv(a, &r), 0);
		if (r.m.id == 8) {
			assert_int_equal(r.m.type, CRUN_WIRE_VALUES);
			assert_int_equal(r.m.count, 2);
			assert_memory_equal(r.m.items[0].data, "one", 3);
			assert_memory_equal(r.m.items[1].data, "two", 3);
		} else {
			assert_int_equal(r.m.id, 9);
			assert_int_equal(r.m.type, CRUN_WIRE_OK);
		}
		rmsg_finish(&r);
	}
	/* ADD, APPEND and CAS also wake waiters */
	{
		struct crun__wire_item c = its("ctr"), ap[2] = {its("ap"), its("x")};

		send_frame(a, CRUN_WIRE_GET, 0, 10, 5000, &c, 1);
		send_frame(a, CRUN_WIRE_GET, 0, 11, 5000, ap, 1);
		want_value(a, CRUN_WIRE_PING, 0, 0, NULL, 0, "", 0);
		assert_int_equal(want_int(b, CRUN_WIRE_ADD, 3, &c, 1), 3);
		want_ok(b, CRUN_WIRE_APPEND, 0, 0, ap, 2);
		for (int i = 0; i < 2; i++) {
			assert_int_equal(trecv(a, &r), 0);
			assert_int_equal(r.m.type, CRUN_WIRE_VALUE);
			assert_true(r.m.id == 10 || r.m.id == 11);
			rmsg_finish(&r);
		}
	}
	/* a waiter whose connection closes is simply dropped */
	struct crun__wire_item k_never = its("never");

	send_frame(b, CRUN_WIRE_GET, 0, 12, 5000, &k_never, 1);
	close(b);
	sleep_ms(50);
	set(a, "never", "now");
	get(a, "never", "now");
	close(a);
	assert_int_equal(harness_stop(&h), 0);
}

static void test_wait_timeout(void **state)
{
	struct harness h;
	int fd;
	struct crun__wire_item keys[2] = {its("x"), its("y")};
	uint64_t t0;
	struct rmsg r;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	fd = client(h.port, "to");
	set(fd, "x", "1");
	t0 = now_ms();
	rpc(fd, CRUN_WIRE_WAIT, 0, 150, keys, 2, &r);
	assert_int_equal(r.m.type, CRUN_WIRE_ERROR);
	assert_int_equal(r.m.num, ETIMEDOUT);
	assert_non_null(memmem(r.m.items[0].data, r.m.items[0].len, "'y'", 3));
	rmsg_finish(&r);
	assert_true(now_ms() - t0 >= 140);
	assert_true(now_ms() - t0 < 3000);
	t0 = now_ms();
	want_err(fd, CRUN_WIRE_GET, 0, 100, keys + 1, 1, ETIMEDOUT);
	want_err(fd, CRUN_WIRE_MGET, 0, 100, keys, 2, ETIMEDOUT);
	assert_true(now_ms() - t0 >= 190);
	/* a waiter that timed out does not answer again */
	set(fd, "y", "2");
	want_value(fd, CRUN_WIRE_PING, 0, 0, NULL, 0, "", 0);
	close(fd);
	assert_int_equal(harness_stop(&h), 0);
}

/* Waits with different deadlines share one timer in the server: each
 * still times out on its own, in deadline order, also after the earliest
 * one was answered. */
static void test_wait_deadlines(void **state)
{
	struct harness h;
	int fd;
	struct crun__wire_item k1 = its("d1"), k2 = its("d2"), k3 = its("d3"), k4 = its("d4");
	uint64_t t0;
	struct rmsg r;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	fd = client(h.port, "deadlines");
	t0 = now_ms();
	send_frame(fd, CRUN_WIRE_GET, 0, 1, 300, &k1, 1);
	send_frame(fd, CRUN_WIRE_GET, 0, 2, 100, &k2, 1);
	send_frame(fd, CRUN_WIRE_GET, 0, 3, 200, &k3, 1);
	send_frame(fd, CRUN_WIRE_GET, 0, 4, 50, &k4, 1);
	set(fd, "d4", "here"); /* answers the earliest before it expires */
	assert_int_equal(trecv(fd, &r), 0);
	assert_int_equal(r.m.id, 4);
	assert_int_equal(r.m.type, CRUN_WIRE_VALUE);
	rmsg_finish(&r);
	for (uint32_t want = 2; want <= 3; want++) {
		assert_int_equal(trecv(fd, &r), 0);
		assert_int_equal(r.m.id, want);
		assert_int_equal(r.m.type, CRUN_WIRE_ERROR);
		assert_int_equal(r.m.num, ETIMEDOUT);
		rmsg_finish(&r);
		assert_true(now_ms() - t0 >= 100 * (want - 1) - 10);
	}
	assert_int_equal(trecv(fd, &r), 0);
	assert_int_equal(r.m.id, 1);
	assert_int_equal(r.m.num, ETIMEDOUT);
	rmsg_finish(&r);
	assert_true(now_ms() - t0 >= 290);
	assert_true(now_ms() - t0 < 3000);
	close(fd);
	assert_int_equal(harness_stop(&h), 0);
}

static void expect_notify(int fd, uint32_t id, int64_t ev, const char *key, const char *val)
{
	struct rmsg r;

	assert_int_equal(trecv(fd, &r), 0);
	assert_int_equal(r.m.type, CRUN_WIRE_NOTIFY);
	assert_int_equal(r.m.id, id);
	assert_int_equal(r.m.num, ev);
	assert_int_equal(r.m.items[0].len, strlen(key));
	assert_memory_equal(r.m.items[0].data, key, strlen(key));
	assert_int_equal(r.m.items[1].len, strlen(val));
	if (*val)
		assert_memory_equal(r.m.items[1].data, val, strlen(val));
	rmsg_finish(&r);
}

static void test_watch(void **state)
{
	struct harness h;
	int a, b;
	struct crun__wire_item w = its("w"), eph = its("eph");
	struct crun__wire_item ev[2] = {its("eph"), its("alive")};
	struct rmsg r;
	char run[64];

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	a = client(h.port, "watch");
	b = client(h.port, "watch");
	send_frame(a, CRUN_WIRE_WATCH, 0, 50, 0, &w, 1);
	assert_int_equal(trecv(a, &r), 0);
	assert_int_equal(r.m.type, CRUN_WIRE_OK);
	assert_int_equal(r.m.id, 50);
	rmsg_finish(&r);
	send_frame(a, CRUN_WIRE_WATCH, 0, 51, 0, &eph, 1);
	assert_int_equal(trecv(a, &r), 0);
	assert_int_equal(r.m.type, CRUN_WIRE_OK);
	rmsg_finish(&r);

	set(b, "w", "v1");
	expect_notify(a, 50, CRUN_WIRE_EV_SET, "w", "v1");
	set(b, "other", "x");				 /* not watched: no notice */
	want_err(b, CRUN_WIRE_ADD, 0, 2, &w, 1, EINVAL); /* "v1" is no number */
	assert_int_equal(want_int(b, CRUN_WIRE_DELETE, 0, &w, 1), 1);
	expect_notify(a, 50, CRUN_WIRE_EV_DELETE, "w", "");
	assert_int_equal(want_int(b, CRUN_WIRE_ADD, 2, &w, 1), 2);
	expect_notify(a, 50, CRUN_WIRE_EV_SET, "w", "2");

	/* an ephemeral key goes with its owner, and watchers hear of it */
	want_ok(b, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 0, ev, 2);
	expect_notify(a, 51, CRUN_WIRE_EV_SET, "eph", "alive");
	get(a, "eph", "alive");
	close(b);
	expect_notify(a, 51, CRUN_WIRE_EV_DELETE, "eph", "");
	get_missing(a, "eph");
	for (int i = 0; i < 100 && harness_disconnects(&h, NULL, 0) < 1; i++)
		sleep_ms(10);
	assert_int_equal(harness_disconnects(&h, run, sizeof(run)), 1);
	assert_string_equal(run, "watch");

	/* a plain SET takes the key over: the owner's exit no longer deletes it */
	b = client(h.port, "watch");
	want_ok(b, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 0, ev, 2);
	expect_notify(a, 51, CRUN_WIRE_EV_SET, "eph", "alive");
	set(a, "eph", "kept");
	expect_notify(a, 51, CRUN_WIRE_EV_SET, "eph", "kept");
	close(b);
	sleep_ms(50);
	get(a, "eph", "kept"); /* the reply, not a notice, comes next */

	/* UNWATCH: no more notices */
	want_ok(a, CRUN_WIRE_UNWATCH, 0, 0, &w, 1);
	want_ok(a, CRUN_WIRE_UNWATCH, 0, 0, &eph, 1);
	set(a, "w", "quiet");
	set(a, "eph", "quiet");
	want_value(a, CRUN_WIRE_PING, 0, 0, NULL, 0, "", 0);
	close(a);
	assert_int_equal(harness_stop(&h), 0);
}

static void test_runs_isolated(void **state)
{
	struct harness h;
	int a, b;
	struct rmsg r;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	a = client(h.port, "run-a");
	b = client(h.port, "run-b");
	set(a, "shared-name", "from a");
	get_missing(b, "shared-name");
	assert_int_equal(want_int(b, CRUN_WIRE_COUNT, 0, NULL, 0), 0);
	rpc(b, CRUN_WIRE_LIST, 0, 0, NULL, 0, &r);
	assert_int_equal(r.m.type, CRUN_WIRE_VALUES);
	assert_int_equal(r.m.count, 0);
	rmsg_finish(&r);
	set(b, "shared-name", "from b");
	get(a, "shared-name", "from a");
	get(b, "shared-name", "from b");
	close(b);
	/* a run outlives its connections while it holds keys */
	b = client(h.port, "run-b");
	get(b, "shared-name", "from b");
	close(a);
	close(b);
	assert_int_equal(harness_stop(&h), 0);
}

static void test_limits(void **state)
{
	struct crun__server_opts so;
	struct harness h;
	int fd, extra[3];
	char key17[18], val65[66];

	(void)state;
	harness_opts(&so, NULL);
	so.limits.max_key_size = 16;
	so.limits.max_value_size = 64;
	so.limits.max_keys_per_run = 3;
	so.limits.max_connections = 4;
	assert_int_equal(harness_start(&h, 0, &so), 0);
	memset(key17, 'k', 17);
	key17[17] = '\0';
	memset(val65, 'v', 65);
	val65[65] = '\0';

	fd = client(h.port, "lim");
	{
		struct crun__wire_item kv[2] = {its(key17), its("v")};
		struct crun__wire_item big[2] = {its("k"), its(val65)};
		struct crun__wire_item ms[4] = {its("m1"), its("ok"), its("m2"), its(val65)};
		struct crun__wire_item ap[2] = {its("ap"), it(val65, 40)};
		struct crun__wire_item cas[3] = {its("k"), its(""), its(val65)};

		want_err(fd, CRUN_WIRE_SET, 0, 0, kv, 2, E2BIG);
		want_err(fd, CRUN_WIRE_GET, 0, 0, kv, 1, E2BIG);
		want_err(fd, CRUN_WIRE_SET, 0, 0, big, 2, E2BIG);
		want_err(fd, CRUN_WIRE_CAS, 0, 0, cas, 3, E2BIG);
		want_err(fd, CRUN_WIRE_MSET, 0, 0, ms, 4, E2BIG);
		get_missing(fd, "m1"); /* all or nothing */
		want_ok(fd, CRUN_WIRE_APPEND, 0, 0, ap, 2);
		want_err(fd, CRUN_WIRE_APPEND, 0, 0, ap, 2, E2BIG); /* 80 > 64 */
	}
	set(fd, "k2", "v");
	set(fd, "k3", "v");
	{
		struct crun__wire_item k4[2] = {its("k4"), its("v")};
		struct crun__wire_item ms[4] = {its("k2"), its("x"), its("k5"), its("y")};
		struct crun__wire_item add = its("k6");

		want_err(fd, CRUN_WIRE_SET, 0, 0, k4, 2, ENOSPC);
		want_err(fd, CRUN_WIRE_MSET, 0, 0, ms, 4, ENOSPC);
		want_err(fd, CRUN_WIRE_ADD, 0, 1, &add, 1, ENOSPC);
		get(fd, "k2", "v");
	}
	set(fd, "k2", "overwrite is fine"); /* 17 bytes, under 64 */
	get(fd, "k2", "overwrite is fine");

	/* connections: fd plus three more reach the limit of 4 */
	for (int i = 0; i < 3; i++)
		extra[i] = client(h.port, "other");
	{
		int over = tconnect(h.port);
		uint16_t flags;
		uint8_t nonce[32];

		read_server_preamble(over, &flags, nonce);
		expect_error_and_close(over, EMFILE, "too many connections");
	}
	get(fd, "k2", "overwrite is fine");
	want_value(extra[2], CRUN_WIRE_PING, 0, 0, NULL, 0, "", 0);
	close(extra[0]);
	sleep_ms(100);
	fresh_client_works(h.port);
	for (int i = 1; i < 3; i++)
		close(extra[i]);
	close(fd);
	assert_int_equal(harness_stop(&h), 0);
}

static void test_auth(void **state)
{
	struct crun__server_opts so;
	struct harness h;
	struct rmsg r;
	int fd;

	(void)state;
	harness_opts(&so, "s3cret token");
	assert_int_equal(harness_start(&h, 0, &so), 0);
	/* right token: OK with a server mac that handshake() checks */
	fd = client_tok(h.port, "secure", "s3cret token");
	set(fd, "k", "v");

	/* wrong token */
	{
		int bad = tconnect(h.port);

		handshake(bad, "secure", "wrong token", &r);
		assert_int_equal(r.m.type, CRUN_WIRE_ERROR);
		assert_int_equal(r.m.num, EACCES);
		assert_int_equal(r.m.items[0].len, strlen("authentication failed"));
		assert_memory_equal(r.m.items[0].data, "authentication failed", 21);
		rmsg_finish(&r);
		assert_true(closed_by_server(bad));
		close(bad);
	}
	/* no mac at all */
	{
		int bad = tconnect(h.port);
		uint8_t pre[8], cnonce[32] = {0}, snonce[32];
		uint16_t flags;
		struct crun__wire_item items[3] = {its("secure"), it(cnonce, 32), it(NULL, 0)};

		crun__wire_client_preamble(pre);
		tsend(bad, pre, sizeof(pre));
		read_server_preamble(bad, &flags, snonce);
		assert_true(flags & CRUN_WIRE_F_AUTH);
		assert_true(flags & CRUN_WIRE_F_AUTH_RUN);
		send_frame(bad, CRUN_WIRE_HELLO, 0, 1, 0, items, 3);
		expect_error_and_close(bad, EACCES, "authentication failed");
	}
	/* a request before HELLO is refused too */
	{
		int bad = tconnect(h.port);
		uint8_t pre[8], snonce[32];
		uint16_t flags;
		struct crun__wire_item kv[2] = {its("k"), its("stolen")};

		crun__wire_client_preamble(pre);
		tsend(bad, pre, sizeof(pre));
		read_server_preamble(bad, &flags, snonce);
		send_frame(bad, CRUN_WIRE_SET, 0, 2, 0, kv, 2);
		expect_error_and_close(bad, EPROTO, "expected HELLO");
	}
	get(fd, "k", "v");
	close(fd);
	assert_int_equal(harness_stop(&h), 0);
}

static void test_garbage(void **state)
{
	struct harness h;
	uint8_t pre[CRUN_WIRE_CLIENT_PREAMBLE], nonce[32];
	uint16_t flags;
	int fd;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	/* not a crun client at all (nor TCPStore's, not served here): closed
	 * without a word, since it reads neither protocol */
	fd = tconnect(h.port);
	tsend(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
	assert_true(closed_by_server(fd));
	close(fd);
	fresh_client_works(h.port);

	/* crun's magic, then not */
	fd = tconnect(h.port);
	tsend(fd, "CRAP\0\1\0\0", 8);
	read_server_preamble(fd, &flags, nonce);
	expect_error_and_close(fd, EPROTO, "bad magic");

	/* another version */
	fd = tconnect(h.port);
	crun__wire_client_preamble(pre);
	pre[5] = 9;
	tsend(fd, pre, sizeof(pre));
	read_server_preamble(fd, &flags, nonce);
	expect_error_and_close(fd, EPROTONOSUPPORT, "version 9");

	/* garbage after the handshake: an unknown frame type */
	fd = client(h.port, "g");
	tsend(fd, "\x00\x00\x00\x0c\x77\x00\x00\x00\x00\x00\x00\x01", 12);
	expect_error_and_close(fd, EPROTO, "unknown frame type");

	/* random bytes after the handshake */
	fd = client(h.port, "g");
	{
		uint8_t junk[512];

		assert_int_equal(crun__wire_random(junk, sizeof(junk)), 0);
		junk[4] = 0x42; /* make sure the type is unknown */
		tsend(fd, junk, sizeof(junk));
		assert_true(closed_by_server(fd));
		close(fd);
	}

	/* a reply type from a client, HELLO twice, a bad per-type rule */
	fd = client(h.port, "g");
	send_frame(fd, CRUN_WIRE_OK, 0, 5, 0, NULL, 0);
	expect_error_and_close(fd, EPROTO, "unexpected OK");
	fd = client(h.port, "g");
	{
		uint8_t cn[32] = {0};
		struct crun__wire_item hello[3] = {its("g"), it(cn, 32), it(NULL, 0)};

		send_frame(fd, CRUN_WIRE_HELLO, 0, 5, 0, hello, 3);
		expect_error_and_close(fd, EPROTO, "HELLO after");
	}
	fd = client(h.port, "g");
	{
		struct crun__wire_item k = its("k");

		send_frame(fd, CRUN_WIRE_GET, 0, 5, INT64_MIN, &k, 1); /* negative timeout */
		expect_error_and_close(fd, EPROTO, "negative");
	}

	/* a truncated frame, then the client goes away */
	fd = client(h.port, "g");
	{
		uint8_t buf[64];
		struct crun__wire_item kv[2] = {its("key"), its("value")};
		size_t n = put_frame(buf, 0, CRUN_WIRE_SET, 0, 9, 0, kv, 2);

		tsend(fd, buf, n - 3);
		sleep_ms(20);
		close(fd);
	}
	/* a truncated frame with the write side shut: the server closes */
	fd = client(h.port, "g");
	{
		uint8_t buf[64];
		struct crun__wire_item kv[2] = {its("key"), its("value")};
		size_t n = put_frame(buf, 0, CRUN_WIRE_SET, 0, 9, 0, kv, 2);

		tsend(fd, buf, n - 3);
		shutdown(fd, SHUT_WR);
		assert_true(closed_by_server(fd));
		close(fd);
	}
	fresh_client_works(h.port);
	assert_int_equal(harness_stop(&h), 0);
}

/* A header announcing an enormous payload is refused as soon as the 12
 * header bytes are in, without waiting for (or allocating) the payload. */
static void test_huge_lengths(void **state)
{
	struct harness h;
	static const uint8_t max_u32[12] = {0xff, 0xff, 0xff, 0xff, CRUN_WIRE_SET, 0, 0, 0,
					    0,	  0,	0,    1};
	static const uint8_t two_31[12] = {0x80, 0, 0, 0, CRUN_WIRE_GET, 0, 0, 0, 0, 0, 0, 2};
	uint8_t pre[CRUN_WIRE_CLIENT_PREAMBLE], nonce[32];
	uint16_t flags;
	int fd;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	fd = client(h.port, "h");
	tsend(fd, max_u32, sizeof(max_u32));
	expect_error_and_close(fd, EPROTO, "exceeds");
	fd = client(h.port, "h");
	tsend(fd, two_31, sizeof(two_31));
	expect_error_and_close(fd, EPROTO, "exceeds");

	/* before HELLO the cap is a few KiB */
	fd = tconnect(h.port);
	crun__wire_client_preamble(pre);
	tsend(fd, pre, sizeof(pre));
	read_server_preamble(fd, &flags, nonce);
	{
		uint8_t hdr[12] = {0, 1, 0, 0, CRUN_WIRE_HELLO, 0, 0, 0, 0, 0, 0, 1}; /* 64 KiB */

		tsend(fd, hdr, sizeof(hdr));
	}
	expect_error_and_close(fd, EPROTO, "exceeds");

	/* an item whose length runs past the frame; the payload says
	 * num = 2^63 - 1, count 1, item length 2^32 - 1 */
	fd = client(h.port, "h");
	{
		static const uint8_t f[] = {
			0, 0, 0,    16,	  CRUN_WIRE_PING, 0,	0,    0,    0,	  0,
			0, 3, 0x7f, 0xff, 0xff,		  0xff, 0xff, 0xff, 0xff, 0xff,
			0, 0, 0,    1,	  0xff,		  0xff, 0xff, 0xff};

		tsend(fd, f, sizeof(f));
	}
	expect_error_and_close(fd, EPROTO, NULL);

	/* an item count far beyond what the frame holds */
	fd = client(h.port, "h");
	{
		static const uint8_t f[] = {
			0, 0, 0, 12, CRUN_WIRE_LIST, 0,	   0,	 0,   0, 0, 0, 4, 0, 0, 0, 0,
			0, 0, 0, 0,  0xff,	     0xff, 0xff, 0xff};

		tsend(fd, f, sizeof(f));
	}
	expect_error_and_close(fd, EPROTO, "count");
	fresh_client_works(h.port);
	assert_int_equal(harness_stop(&h), 0);
}

static void test_tiny_frames(void **state)
{
	enum { N = 10000 };
	struct harness h;
	int fd;
	struct crun__wire_item ctr = its("c");
	size_t per = put_frame(NULL, 0, CRUN_WIRE_ADD, 0, 0, 1, &ctr, 1), off = 0;
	uint8_t *buf = malloc(per * N);
	struct rmsg r;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	fd = client(h.port, "tiny");
	assert_non_null(buf);
	for (uint32_t i = 0; i < N; i++)
		off = put_frame(buf, off, CRUN_WIRE_ADD, 0, 1000 + i, 1, &ctr, 1);
	tsend(fd, buf, off);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(trecv(fd, &r), 0);
		assert_int_equal(r.m.type, CRUN_WIRE_INT);
		assert_int_equal(r.m.id, 1000 + i);
		assert_int_equal(r.m.num, i + 1);
		rmsg_finish(&r);
	}
	free(buf);

	/* the same with PINGs split at awkward places */
	per = put_frame(NULL, 0, CRUN_WIRE_PING, 0, 0, 0, NULL, 0);
	buf = malloc(per * N);
	assert_non_null(buf);
	off = 0;
	for (uint32_t i = 0; i < N; i++)
		off = put_frame(buf, off, CRUN_WIRE_PING, 0, i, 0, NULL, 0);
	for (size_t sent = 0, step = 1; sent < off; step = step * 7 % 9973 + 1) {
		size_t n = off - sent < step ? off - sent : step;

		tsend(fd, buf + sent, n);
		sent += n;
	}
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(trecv(fd, &r), 0);
		assert_int_equal(r.m.type, CRUN_WIRE_VALUE);
		assert_int_equal(r.m.id, i);
		rmsg_finish(&r);
	}
	free(buf);
	get(fd, "c", "10000");
	close(fd);
	assert_int_equal(harness_stop(&h), 0);
}

static void test_handshake_timeout(void **state)
{
	struct crun__server_opts so;
	struct harness h;
	uint8_t pre[CRUN_WIRE_CLIENT_PREAMBLE], nonce[32];
	uint16_t flags;
	uint64_t t0;
	int fd, ok;

	(void)state;
	harness_opts(&so, NULL);
	so.limits.handshake_timeout_ms = 200;
	assert_int_equal(harness_start(&h, 0, &so), 0);
	ok = client(h.port, "patient"); /* done with HELLO: no timeout */

	t0 = now_ms();
	fd = tconnect(h.port); /* says nothing at all */
	read_server_preamble(fd, &flags, nonce);
	expect_error_and_close(fd, ETIMEDOUT, "handshake");
	assert_true(now_ms() - t0 >= 180);
	assert_true(now_ms() - t0 < 3000);

	fd = tconnect(h.port); /* sends its preamble, then nothing */
	crun__wire_client_preamble(pre);
	tsend(fd, pre, sizeof(pre));
	read_server_preamble(fd, &flags, nonce);
	expect_error_and_close(fd, ETIMEDOUT, "handshake");

	sleep_ms(100);
	set(ok, "still", "here");
	get(ok, "still", "here");
	fresh_client_works(h.port);
	close(ok);
	assert_int_equal(harness_stop(&h), 0);
}

/* The pre-authentication quota of a source closes its oldest
 * unauthenticated connection (ECONNABORTED) to admit a new one, never an
 * authenticated one; a frame that does not arrive in time is refused
 * (ETIMEDOUT "slow request"); an idle connection is closed unless it owns
 * an ephemeral key. */
static void test_preauth_and_timeouts(void **state)
{
	struct crun__wire_item ev[2] = {its("mine"), its("v")};
	struct crun__server_opts so;
	struct harness h;
	uint8_t nonce[32], hdr[5] = {0, 0, 0, 40, CRUN_WIRE_SET}, pre[CRUN_WIRE_CLIENT_PREAMBLE];
	uint16_t flags;
	struct rmsg r;
	int idle, owner, a, b, c, slow;

	(void)state;
	harness_opts(&so, NULL);
	so.limits.max_preauth = 4;
	so.limits.max_preauth_per_source = 2;
	so.limits.request_timeout_ms = 300;
	so.limits.idle_timeout_ms = 1500;
	assert_int_equal(harness_start(&h, 0, &so), 0);
	idle = client(h.port, "q");
	owner = client(h.port, "q");
	want_ok(owner, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 0, ev, 2);

	/* The server answers a client's preamble: then it has accepted it. */
	crun__wire_client_preamble(pre);
	a = tconnect(h.port);
	tsend(a, pre, sizeof(pre));
	read_server_preamble(a, &flags, nonce);
	b = tconnect(h.port);
	tsend(b, pre, sizeof(pre));
	read_server_preamble(b, &flags, nonce);
	c = tconnect(h.port); /* a third from 127.0.0.1: the oldest goes */
	expect_error_and_close(a, ECONNABORTED, "too many unauthenticated connections");
	close(b);
	handshake(c, "q", NULL, &r); /* the newest is served */
	assert_int_equal(r.m.type, CRUN_WIRE_OK);
	rmsg_finish(&r);
	close(c);

	slow = client(h.port, "q");
	tsend(slow, hdr, sizeof(hdr)); /* 5 bytes of a frame, then nothing */
	expect_error_and_close(slow, ETIMEDOUT, "slow request");

	/* idle has sent nothing since its handshake; owner's key keeps it */
	expect_error_and_close(idle, ECONNABORTED, "idle for");
	get(owner, "mine", "v");
	close(owner);
	assert_int_equal(harness_stop(&h), 0);
}

/* A client that sends requests but never reads the replies is dropped
 * once its backlog passes max_conn_buffer; the server stays fine. */
static void test_slow_reader(void **state)
{
	enum { VAL = 100 * 1024, N = 400 };
	struct crun__server_opts so;
	struct harness h;
	int fd, got = 0;
	char *val = malloc(VAL + 1);
	struct crun__wire_item k = its("big");
	size_t per, off = 0;
	uint8_t *buf;
	struct rmsg r;

	(void)state;
	harness_opts(&so, NULL);
	so.limits.max_conn_buffer = 256 * 1024;
	assert_int_equal(harness_start(&h, 0, &so), 0);
	fd = client(h.port, "slow");
	assert_non_null(val);
	memset(val, 'x', VAL);
	val[VAL] = '\0';
	set(fd, "big", val);
	per = put_frame(NULL, 0, CRUN_WIRE_GET, 0, 0, 0, &k, 1);
	buf = malloc(per * N);
	assert_non_null(buf);
	for (uint32_t i = 0; i < N; i++)
		off = put_frame(buf, off, CRUN_WIRE_GET, 0, i, 0, &k, 1);
	tsend(fd, buf, off); /* 40 MB of replies asked for, none read yet */
	sleep_ms(300);
	while (trecv(fd, &r) == 0) {
		got++;
		rmsg_finish(&r);
	}
	assert_true(got < N);
	close(fd);
	fresh_client_works(h.port);
	free(buf);
	free(val);
	assert_int_equal(harness_stop(&h), 0);
}

/* The keys that a connection's waits and watches hold are capped at
 * max_conn_buffer: past it a wait is refused (ENOBUFS), and the room comes
 * back when the waits end. */
static void test_wait_bytes_capped(void **state)
{
	enum { KEY = 3000 };
	struct crun__server_opts so;
	struct harness h;
	char key[KEY + 8];
	struct crun__wire_item k;
	int fd, refused = 0;
	struct rmsg r;

	(void)state;
	harness_opts(&so, NULL);
	so.limits.max_conn_buffer = 16 * 1024;
	assert_int_equal(harness_start(&h, 0, &so), 0);
	fd = client(h.port, "cap");
	/* Ten waits of 3000-byte keys: the sixth no longer fits 16 KiB. */
	for (uint32_t i = 0; i < 10; i++) {
		memset(key, 'a' + (int)i, KEY);
		key[KEY] = '\0';
		k = its(key);
		send_frame(fd, CRUN_WIRE_GET, 0, 100 + i, 60000, &k, 1);
	}
	send_frame(fd, CRUN_WIRE_PING, 0, 7, 0, NULL, 0);
	for (;;) {
		assert_int_equal(trecv(fd, &r), 0);
		if (r.m.type == CRUN_WIRE_VALUE) {
			assert_int_equal(r.m.id, 7);
			rmsg_finish(&r);
			break;
		}
		assert_int_equal(r.m.type, CRUN_WIRE_ERROR);
		assert_int_equal(r.m.num, ENOBUFS);
		refused++;
		rmsg_finish(&r);
	}
	assert_int_equal(refused, 5);
	close(fd);
	fresh_client_works(h.port);
	assert_int_equal(harness_stop(&h), 0);
}

/* Destroying the server with connections, waiters, watches, ephemeral
 * keys and half-received frames still open closes every handle. */
static void test_destroy_busy(void **state)
{
	struct harness h;
	int a, b, c;
	struct crun__wire_item k = its("never"), ev[2] = {its("e"), its("v")};
	uint8_t half[6] = {0, 0, 0, 40, CRUN_WIRE_SET, 0};

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	a = client(h.port, "busy");
	b = client(h.port, "busy");
	c = tconnect(h.port);
	send_frame(a, CRUN_WIRE_GET, 0, 1, 60000, &k, 1);
	send_frame(a, CRUN_WIRE_WATCH, 0, 2, 0, &k, 1);
	want_ok(b, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 0, ev, 2);
	tsend(b, half, sizeof(half));
	sleep_ms(50);
	assert_int_equal(harness_stop(&h), 0);
	assert_true(closed_by_server(a));
	assert_true(closed_by_server(b));
	assert_true(closed_by_server(c));
	close(a);
	close(b);
	close(c);
}

static void done_flag(void *arg)
{
	*(bool *)arg = true;
}

/* listen(): names, IPv6, a port in use, destroy before and after. */
static void test_listen(void **state)
{
	uv_loop_t loop;
	struct crun__server *s1, *s2;
	char err[256];
	bool d1 = false, d2 = false;
	int rc;

	(void)state;
	assert_int_equal(uv_loop_init(&loop), 0);
	s1 = crun__server_create(&loop, NULL);
	s2 = crun__server_create(&loop, NULL);
	assert_non_null(s1);
	assert_non_null(s2);
	assert_int_equal(crun__server_port(s1), 0);
	assert_int_equal(crun__server_listen(s1, "127.0.0.1", 0, err, sizeof(err)), 0);
	assert_true(crun__server_port(s1) > 0);
	rc = crun__server_listen(s2, "127.0.0.1", crun__server_port(s1), err, sizeof(err));
	assert_int_equal(rc, -EADDRINUSE);
	assert_non_null(strstr(err, "cannot listen on '127.0.0.1:"));
	assert_non_null(strstr(err, "address already in use"));
	rc = crun__server_listen(s2, "127.0.0.1", 0, err, sizeof(err));
	assert_int_equal(rc, -EALREADY);
	assert_int_equal(crun__server_connections(s1), 0);
	crun__server_destroy(s1, done_flag, &d1);
	crun__server_destroy(s2, done_flag, &d2);
	crun__server_destroy(NULL, NULL, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_true(d1 && d2);

	s1 = crun__server_create(&loop, NULL);
	assert_int_equal(crun__server_listen(s1, "localhost", 0, err, sizeof(err)), 0);
	assert_true(crun__server_port(s1) > 0);
	d1 = false;
	crun__server_destroy(s1, done_flag, &d1);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_true(d1);

	s1 = crun__server_create(&loop, NULL);
	rc = crun__server_listen(s1, "::1", 0, err, sizeof(err));
	if (rc == 0) {
		assert_true(crun__server_port(s1) > 0);
	} else {
		assert_int_equal(rc, -EADDRNOTAVAIL); /* no IPv6 here */
	}
	d1 = false;
	crun__server_destroy(s1, done_flag, &d1);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_true(d1);

	s1 = crun__server_create(&loop, NULL);
	rc = crun__server_listen(s1, "no-such-host.invalid", 0, err, sizeof(err));
	assert_true(rc < 0);
	assert_non_null(strstr(err, "no-such-host.invalid"));
	d1 = false;
	crun__server_destroy(s1, done_flag, &d1);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_true(d1);
	assert_int_equal(uv_loop_close(&loop), 0);
}

/* The server's first read decides: nothing of crun's reaches a TCPStore
 * client, which is closed without a word on every refusal. */
static bool closed_silently(int fd)
{
	uint8_t b[64];
	ssize_t r;

	do
		r = recv(fd, b, sizeof(b), 0);
	while (r < 0 && errno == EINTR);
	if (r > 0)
		fail_msg("%zd bytes where a silent close was due (first 0x%02x)", r, b[0]);
	return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* VALIDATE and PING of a modern TCPStore client; true when the nonce came
 * back. */
static bool torch_greet(int fd, uint32_t nonce)
{
	uint8_t req[10] = {0};
	uint32_t magic = CRUN__TCPSTORE_MAGIC, back = 0;

	memcpy(req + 1, &magic, 4);
	req[5] = 13;
	memcpy(req + 6, &nonce, 4);
	tsend(fd, req, sizeof(req));
	return recv_all(fd, &back, sizeof(back)) == 0 && back == nonce;
}

/* TCPStore connections: unauthenticated until their first valid request
 * (the handshake timeout and the preauth quota apply, silently), then
 * ordinary connections; with tcpstore off, closed at their first byte. */
static void test_tcpstore_edge(void **state)
{
	struct crun__server_opts so;
	struct harness h;
	uint8_t pre[CRUN_WIRE_CLIENT_PREAMBLE], nonce[32];
	uint16_t flags;
	uint64_t t0;
	int a, b, c, t, crun_fd;

	(void)state;
	harness_opts(&so, NULL);
	so.tcpstore = true;
	so.limits.handshake_timeout_ms = 300;
	so.limits.max_preauth = 4;
	so.limits.max_preauth_per_source = 2;
	assert_int_equal(harness_start(&h, 0, &so), 0);

	/* half a VALIDATE, then nothing: closed at the handshake timeout */
	t0 = now_ms();
	a = tconnect(h.port);
	tsend(a, "\0\xce", 2);
	assert_true(closed_silently(a));
	assert_true(now_ms() - t0 >= 250);
	close(a);

	/* silent past the timeout: kept, as PyTorch 1.13's callback
	 * connection must be, and served when it speaks */
	t = tconnect(h.port);
	usleep(600 * 1000);
	assert_true(torch_greet(t, 0x99aabbcc));
	close(t);

	/* a greeted TCPStore client no longer counts as unauthenticated:
	 * two strangers more do not evict it, a third stranger evicts the
	 * oldest stranger, silently since it said nothing crun */
	t = tconnect(h.port);
	assert_true(torch_greet(t, 0x11223344));
	a = tconnect(h.port);
	tsend(a, "\0", 1);
	b = tconnect(h.port);
	crun__wire_client_preamble(pre);
	tsend(b, pre, sizeof(pre));
	read_server_preamble(b, &flags, nonce); /* b is in: a was before it */
	c = tconnect(h.port);
	tsend(c, pre, sizeof(pre));
	read_server_preamble(c, &flags, nonce);
	assert_true(closed_silently(a));
	assert_true(torch_greet(t, 0x55667788));
	close(a);
	close(b);
	close(c);
	close(t);

	/* a silent connection kept past the timeout is still an
	 * unauthenticated one: strangers from its address evict it */
	t = tconnect(h.port);
	usleep(600 * 1000);
	a = tconnect(h.port);
	tsend(a, pre, sizeof(pre));
	read_server_preamble(a, &flags, nonce);
	b = tconnect(h.port);
	tsend(b, pre, sizeof(pre));
	read_server_preamble(b, &flags, nonce);
	assert_true(closed_silently(t));
	close(a);
	close(b);
	close(t);
	assert_int_equal(harness_stop(&h), 0);

	/* TCPStore connections have a limit of their own: one more is
	 * closed at its first request, and crun's clients still get in */
	harness_opts(&so, NULL);
	so.tcpstore = true;
	so.limits.max_tcpstore = 1;
	assert_int_equal(harness_start(&h, 0, &so), 0);
	t = tconnect(h.port);
	assert_true(torch_greet(t, 0x01020304));
	a = tconnect(h.port);
	tsend(a, "\0\xce\xf7\x85\x3c", 5);
	assert_true(closed_silently(a));
	close(a);
	crun_fd = client(h.port, "still");
	close(crun_fd);
	assert_true(torch_greet(t, 0x05060708));
	close(t);
	/* the slot is free again, once the server has seen t go */
	for (int i = 0;; i++) {
		bool ok;

		a = tconnect(h.port);
		ok = torch_greet(a, 0x090a0b0c);
		close(a);
		if (ok)
			break;
		assert_true(i < 100);
		usleep(20 * 1000);
	}
	assert_int_equal(harness_stop(&h), 0);

	/* tcpstore off: a TCPStore client is closed, crun's are served */
	harness_opts(&so, NULL);
	assert_int_equal(harness_start(&h, 0, &so), 0);
	t = tconnect(h.port);
	tsend(t, "\0\xce\xf7\x85\x3c", 5);
	assert_true(closed_silently(t));
	close(t);
	crun_fd = client(h.port, "still");
	close(crun_fd);
	assert_int_equal(harness_stop(&h), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_operations),    cmocka_unit_test(test_waiting_reads),
		cmocka_unit_test(test_wait_timeout),  cmocka_unit_test(test_wait_deadlines),
		cmocka_unit_test(test_watch),	      cmocka_unit_test(test_runs_isolated),
		cmocka_unit_test(test_limits),	      cmocka_unit_test(test_auth),
		cmocka_unit_test(test_garbage),	      cmocka_unit_test(test_huge_lengths),
		cmocka_unit_test(test_tiny_frames),   cmocka_unit_test(test_handshake_timeout),
		cmocka_unit_test(test_tcpstore_edge), cmocka_unit_test(test_preauth_and_timeouts),
		cmocka_unit_test(test_slow_reader),   cmocka_unit_test(test_wait_bytes_capped),
		cmocka_unit_test(test_destroy_busy),  cmocka_unit_test(test_listen),
	};

	signal(SIGPIPE, SIG_IGN);
	crun__log_init("test_server", getenv("TEST_VERBOSE") ? CRUN_LOG_DEBUG : CRUN_LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

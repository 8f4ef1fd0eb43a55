/* The TCPStore core (tcpstore.h): parsing in both dialects, cut at every
 * byte, malformed and oversized input, and each request carried through a
 * real store (store.h) back to TCPStore's reply bytes. No I/O. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/log.h"
#include "rendezvous/store.h"
#include "rendezvous/tcpstore.h"

static const struct crun__tcpstore_limits lim = {
	.max_key_size = 64,
	.max_value_size = 256,
	.max_request = 4096,
};

/* A request being built. */
struct frame {
	uint8_t b[8192];
	size_t n;
};

static void f_u8(struct frame *f, uint8_t v)
{
	f->b[f->n++] = v;
}

static void f_raw(struct frame *f, const void *p, size_t n)
{
	memcpy(f->b + f->n, p, n);
	f->n += n;
}

static void f_u32(struct frame *f, uint32_t v)
{
	f_raw(f, &v, 4);
}

static void f_u64(struct frame *f, uint64_t v)
{
	f_raw(f, &v, 8);
}

static void f_str(struct frame *f, const char *s)
{
	f_u64(f, strlen(s));
	f_raw(f, s, strlen(s));
}

/* Opcode of op in dialect d. */
static uint8_t opc(enum crun__tcpstore_dialect d, enum crun__tcpstore_op op)
{
	static const int legacy[CRUN__TS_OPS] = {-1, 0, 1,  2,	3,  4,	5,  6,	7,
						 8,  9, 10, 11, 12, -1, -1, -1, -1};
	static const int modern[CRUN__TS_OPS] = {0, 1, 2,  3,  4,  5,  6,  7,  -1,
						 8, 9, 10, 11, 12, 13, 14, 15, 16};
	int v = d == CRUN__TCPSTORE_MODERN ? modern[op] : legacy[op];

	assert_true(v >= 0);
	return (uint8_t)v;
}

/* ---- the store, recording what it answers ---------------------------------- */

struct sent {
	uint8_t type;
	uint32_t id;
	int64_t num;
	uint32_t count;
	uint8_t data[4][64];
	uint32_t len[4];
};

static struct sent sent[16];
static int nsent;

static int rec_send(void *ctx, struct crun__store_client *to, uint8_t type, uint32_t id,
		    int64_t num, const struct crun__wire_item *items, uint32_t count)
{
	struct sent *s = &sent[nsent++];

	(void)ctx;
	(void)to;
	assert_true(nsent <= 16);
	s->type = type;
	s->id = id;
	s->num = num;
	s->count = count;
	for (uint32_t i = 0; i < count && i < 4; i++) {
		assert_true(items[i].len <= 64);
		memcpy(s->data[i], items[i].data, items[i].len);
		s->len[i] = items[i].len;
	}
	return 0;
}

static void rec_drop(void *ctx, struct crun__store_client *c, const char *reason)
{
	(void)ctx;
	(void)c;
	fail_msg("dropped: %s", reason);
}

static const struct crun__store_ops ops = {.send = rec_send, .drop = rec_drop};

struct fx {
	struct crun__store *st;
	struct crun__store_client c;
	struct crun__tcpstore_conn ts;
	struct crun__wire_item *items;
	uint32_t items_cap;
	uint8_t out[1024];
	size_t out_len;
};

static void fx_init(struct fx *x, enum crun__tcpstore_dialect d)
{
	struct crun__store_limits sl = {64, 256, 1000, 1 << 20};

	memset(x, 0, sizeof(*x));
	x->st = crun__store_create(&sl, 1, &ops, NULL);
	assert_non_null(x->st);
	crun__store_client_init(&x->c, "t");
	assert_int_equal(crun__store_join(x->st, &x->c, (const uint8_t *)CRUN__TCPSTORE_RUN,
					  CRUN__TCPSTORE_RUN_LEN),
			 0);
	x->ts.dialect = d;
}

static void fx_finish(struct fx *x)
{
	crun__store_leave(x->st, &x->c);
	crun__store_destroy(x->st);
	free(x->items);
}

/* Encodes every frame the store sent since *from into x->out. */
static void collect(struct fx *x, int from)
{
	char err[200];

	for (int i = from; i < nsent; i++) {
		struct crun__wire_item it[4];
		long n;

		for (uint32_t k = 0; k < sent[i].count && k < 4; k++)
			it[k] = (struct crun__wire_item){sent[i].data[k], sent[i].len[k]};
		n = crun__tcpstore_reply(&x->ts, sent[i].type, sent[i].id, sent[i].num, it,
					 sent[i].count, x->out + x->out_len,
					 sizeof(x->out) - x->out_len, err, sizeof(err));
		if (n < 0)
			fail_msg("reply: %ld %s", n, err);
		x->out_len += (size_t)n;
	}
}

/* Feeds the request in f (whole) through parse, begin, the store and the
 * reply; x->out gets the bytes a client reads. */
static void run(struct fx *x, const struct frame *f)
{
	struct crun__tcpstore_req req;
	struct crun__wire_msg m;
	uint8_t reply[16];
	size_t rlen;
	char err[200];
	long n;
	int from, rc;

	nsent = 0;
	from = nsent;
	x->out_len = 0;
	n = crun__tcpstore_parse(&x->ts, f->b, f->n, &lim, &req, &x->items, &x->items_cap, err,
				 sizeof(err));
	if (n < 0)
		fail_msg("parse: %s", err);
	assert_int_equal(n, (long)f->n);
	rc = crun__tcpstore_begin(&x->ts, &req, &m, reply, &rlen);
	assert_true(rc >= 0);
	if (rc == CRUN__TS_APPLY) {
		assert_int_equal(crun__wire_validate(&m, err, sizeof(err)), 0);
		assert_int_equal(crun__store_apply(x->st, &x->c, &m, 0), 0);
	} else if (rc == CRUN__TS_CANCEL) {
		crun__store_detach(x->st, &x->c);
		crun__tcpstore_cancel_waits(&x->ts);
	}
	collect(x, from);
	memcpy(x->out + x->out_len, reply, rlen);
	x->out_len += rlen;
}

static void want(const struct fx *x, const void *p, size_t n)
{
	assert_int_equal(x->out_len, n);
	if (n)
		assert_memory_equal(x->out, p, n);
}

static void want_u64(const struct fx *x, int64_t v)
{
	want(x, &v, 8);
}

static void want_bytes(const struct fx *x, const char *s)
{
	struct frame f = {.n = 0};

	f_str(&f, s);
	want(x, f.b, f.n);
}

static void want_u8(const struct fx *x, uint8_t v)
{
	want(x, &v, 1);
}

/* ---- every request, both dialects -------------------------------------------- */

static void key_req(struct frame *f, uint8_t op, const char *key)
{
	f->n = 0;
	f_u8(f, op);
	f_str(f, key);
}

static void one_dialect(enum crun__tcpstore_dialect d)
{
	struct fx x;
	struct frame f;

	fx_init(&x, d);
	if (d == CRUN__TCPSTORE_MODERN) {
		f.n = 0;
		f_u8(&f, 0);
		f_u32(&f, CRUN__TCPSTORE_MAGIC);
		run(&x, &f);
		want(&x, NULL, 0);
		f.n = 0;
		f_u8(&f, opc(d, CRUN__TS_PING));
		f_u32(&f, 0xabcd1234);
		run(&x, &f);
		want(&x, "\x34\x12\xcd\xab", 4);
	}
	/* SET: no reply; GET: the value */
	key_req(&f, opc(d, CRUN__TS_SET), "/k");
	f_str(&f, "v1");
	run(&x, &f);
	want(&x, NULL, 0);
	key_req(&f, opc(d, CRUN__TS_GET), "/k");
	run(&x, &f);
	want_bytes(&x, "v1");
	/* ADD: decimal text, missing counts as 0 */
	key_req(&f, opc(d, CRUN__TS_ADD), "/n");
	f_u64(&f, 5);
	run(&x, &f);
	want_u64(&x, 5);
	key_req(&f, opc(d, CRUN__TS_ADD), "/n");
	f_u64(&f, (uint64_t)-7);
	run(&x, &f);
	want_u64(&x, -2);
	key_req(&f, opc(d, CRUN__TS_GET), "/n");
	run(&x, &f);
	want_bytes(&x, "-2");
	/* COMPARE_SET: missing + expected -> expected; missing + empty ->
	 * desired, set; match -> desired; mismatch -> current */
	key_req(&f, opc(d, CRUN__TS_COMPARE_SET), "/c");
	f_str(&f, "x");
	f_str(&f, "y");
	run(&x, &f);
	want_bytes(&x, "x");
	key_req(&f, opc(d, CRUN__TS_COMPARE_SET), "/c");
	f_str(&f, "");
	f_str(&f, "y");
	run(&x, &f);
	want_bytes(&x, "y");
	key_req(&f, opc(d, CRUN__TS_COMPARE_SET), "/c");
	f_str(&f, "y");
	f_str(&f, "z");
	run(&x, &f);
	want_bytes(&x, "z");
	key_req(&f, opc(d, CRUN__TS_COMPARE_SET), "/c");
	f_str(&f, "nope");
	f_str(&f, "w");
	run(&x, &f);
	want_bytes(&x, "z");
	/* CHECK */
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_CHECK));
	f_u64(&f, 2);
	f_str(&f, "/k");
	f_str(&f, "/n");
	run(&x, &f);
	want_u8(&x, 0);
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_CHECK));
	f_u64(&f, 2);
	f_str(&f, "/k");
	f_str(&f, "/absent");
	run(&x, &f);
	want_u8(&x, 1);
	/* GET of a missing key: an empty value (modern), a closed
	 * connection (legacy) */
	if (d == CRUN__TCPSTORE_MODERN) {
		key_req(&f, opc(d, CRUN__TS_GET), "/missing");
		run(&x, &f);
		want_bytes(&x, "");
	}
	/* GETNUMKEYS: /k /n /c */
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_GETNUMKEYS));
	run(&x, &f);
	want_u64(&x, 3);
	/* WAIT on present keys: STOP_WAITING at once */
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_WAIT));
	f_u64(&f, 1);
	f_str(&f, "/k");
	run(&x, &f);
	want_u8(&x, 0);
	/* WAIT on a missing key: nothing; a SET of it answers */
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_WAIT));
	f_u64(&f, 2);
	f_str(&f, "/k");
	f_str(&f, "/later");
	run(&x, &f);
	want(&x, NULL, 0);
	key_req(&f, opc(d, CRUN__TS_SET), "/later");
	f_str(&f, "1");
	run(&x, &f);
	want_u8(&x, 0);
	/* WAIT, CANCEL_WAIT: WAIT_CANCELED and the wait is gone */
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_WAIT));
	f_u64(&f, 1);
	f_str(&f, "/never");
	run(&x, &f);
	want(&x, NULL, 0);
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_CANCEL_WAIT));
	run(&x, &f);
	want_u8(&x, 1);
	assert_int_equal(x.c.nsubs, 0);
	assert_int_equal(x.ts.npending, 0);
	key_req(&f, opc(d, CRUN__TS_SET), "/never");
	f_str(&f, "1");
	run(&x, &f);
	want(&x, NULL, 0); /* no late STOP_WAITING */
	/* CANCEL_WAIT crossing STOP_WAITING: the client reads 0 then 1 */
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_WAIT));
	f_u64(&f, 1);
	f_str(&f, "/race");
	run(&x, &f);
	key_req(&f, opc(d, CRUN__TS_SET), "/race");
	f_str(&f, "1");
	run(&x, &f);
	want_u8(&x, 0);
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_CANCEL_WAIT));
	run(&x, &f);
	want_u8(&x, 1);
	/* DELETE_KEY */
	key_req(&f, opc(d, CRUN__TS_DELETE_KEY), "/k");
	run(&x, &f);
	want_u64(&x, 1);
	key_req(&f, opc(d, CRUN__TS_DELETE_KEY), "/k");
	run(&x, &f);
	want_u64(&x, 0);
	/* APPEND, MULTI_SET, MULTI_GET */
	key_req(&f, opc(d, CRUN__TS_APPEND), "/a");
	f_str(&f, "x");
	run(&x, &f);
	want(&x, NULL, 0);
	key_req(&f, opc(d, CRUN__TS_APPEND), "/a");
	f_str(&f, "y");
	run(&x, &f);
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_MULTI_SET));
	f_u64(&f, 2);
	f_str(&f, "/p");
	f_str(&f, "1");
	f_str(&f, "/q");
	f_str(&f, "22");
	run(&x, &f);
	want(&x, NULL, 0);
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_MULTI_GET));
	f_u64(&f, 3);
	f_str(&f, "/p");
	f_str(&f, "/q");
	f_str(&f, "/a");
	run(&x, &f);
	{
		struct frame w = {.n = 0};

		f_str(&w, "1");
		f_str(&w, "22");
		f_str(&w, "xy");
		want(&x, w.b, w.n);
	}
	/* No keys: CHECK READY, WAIT STOP_WAITING, MULTI_GET and MULTI_SET
	 * nothing, as torch's servers answer */
	{
		static const enum crun__tcpstore_op none[] = {
			CRUN__TS_CHECK, CRUN__TS_WAIT, CRUN__TS_MULTI_GET, CRUN__TS_MULTI_SET};

		for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
			f.n = 0;
			f_u8(&f, opc(d, none[i]));
			f_u64(&f, 0);
			run(&x, &f);
			if (none[i] == CRUN__TS_CHECK || none[i] == CRUN__TS_WAIT)
				want_u8(&x, 0);
			else
				want(&x, NULL, 0);
		}
	}
	fx_finish(&x);
}

/* The queues of the modern dialect: a map apart from the keys, FIFO, and
 * a blocking pop (WAIT, then QUEUE_POP) woken by a push. */
static void test_queues(void **state)
{
	const enum crun__tcpstore_dialect d = CRUN__TCPSTORE_MODERN;
	struct fx x;
	struct frame f;

	(void)state;
	fx_init(&x, d);
	/* QUEUE_LEN and QUEUE_POP of no queue: 0 */
	key_req(&f, 16, "/q");
	run(&x, &f);
	want_u64(&x, 0);
	key_req(&f, 15, "/q");
	run(&x, &f);
	want_u64(&x, 0);
	/* a blocking pop begins: WAIT on the queue's key waits */
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_WAIT));
	f_u64(&f, 1);
	f_str(&f, "/q");
	run(&x, &f);
	want(&x, NULL, 0);
	/* QUEUE_PUSH: no reply of its own; the waiting WAIT is answered */
	key_req(&f, 14, "/q");
	f_str(&f, "one");
	run(&x, &f);
	want_u8(&x, 0);
	key_req(&f, 14, "/q");
	f_str(&f, "");
	run(&x, &f);
	want(&x, NULL, 0);
	key_req(&f, 14, "/q");
	f_str(&f, "three");
	run(&x, &f);
	want(&x, NULL, 0);
	key_req(&f, 16, "/q");
	run(&x, &f);
	want_u64(&x, 3);
	/* CHECK sees the queue; GET, GETNUMKEYS and DELETE_KEY do not */
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_CHECK));
	f_u64(&f, 1);
	f_str(&f, "/q");
	run(&x, &f);
	want_u8(&x, 0);
	key_req(&f, opc(d, CRUN__TS_GET), "/q");
	run(&x, &f);
	want_bytes(&x, "");
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_GETNUMKEYS));
	run(&x, &f);
	want_u64(&x, 0);
	key_req(&f, opc(d, CRUN__TS_DELETE_KEY), "/q");
	run(&x, &f);
	want_u64(&x, 0);
	/* QUEUE_POP: the length before the pop, then the value, in order */
	{
		static const char *const vals[] = {"one", "", "three"};

		for (int i = 0; i < 3; i++) {
			struct frame w = {.n = 0};

			key_req(&f, 15, "/q");
			run(&x, &f);
			f_u64(&w, (uint64_t)(3 - i));
			f_str(&w, vals[i]);
			want(&x, w.b, w.n);
		}
	}
	key_req(&f, 15, "/q");
	run(&x, &f);
	want_u64(&x, 0);
	/* an empty queue is no present key */
	f.n = 0;
	f_u8(&f, opc(d, CRUN__TS_CHECK));
	f_u64(&f, 1);
	f_str(&f, "/q");
	run(&x, &f);
	want_u8(&x, 1);
	/* a key and a queue of one name are apart */
	key_req(&f, opc(d, CRUN__TS_SET), "/q");
	f_str(&f, "key");
	run(&x, &f);
	key_req(&f, 14, "/q");
	f_str(&f, "queued");
	run(&x, &f);
	key_req(&f, opc(d, CRUN__TS_GET), "/q");
	run(&x, &f);
	want_bytes(&x, "key");
	key_req(&f, 15, "/q");
	run(&x, &f);
	{
		struct frame w = {.n = 0};

		f_u64(&w, 1);
		f_str(&w, "queued");
		want(&x, w.b, w.n);
	}
	fx_finish(&x);
}

static void test_legacy(void **state)
{
	(void)state;
	one_dialect(CRUN__TCPSTORE_LEGACY);
}

static void test_modern(void **state)
{
	(void)state;
	one_dialect(CRUN__TCPSTORE_MODERN);
}

/* ---- parsing: dialect detection, every cut, errors ---------------------------- */

static long parse(struct crun__tcpstore_conn *ts, const struct frame *f, size_t n,
		  struct crun__tcpstore_req *req, char *err)
{
	static struct crun__wire_item *items;
	static uint32_t cap;

	return crun__tcpstore_parse(ts, f->b, n, &lim, req, &items, &cap, err, 200);
}

static void test_detect(void **state)
{
	struct crun__tcpstore_conn ts;
	struct crun__tcpstore_req req;
	struct frame f = {.n = 0};
	char err[200];

	(void)state;
	/* VALIDATE + magic: modern, decided at the fifth byte */
	f_u8(&f, 0);
	f_u32(&f, CRUN__TCPSTORE_MAGIC);
	for (size_t k = 0; k < f.n; k++) {
		memset(&ts, 0, sizeof(ts));
		assert_int_equal(parse(&ts, &f, k, &req, err), 0);
		assert_int_equal(ts.dialect, CRUN__TCPSTORE_UNKNOWN);
	}
	memset(&ts, 0, sizeof(ts));
	assert_int_equal(parse(&ts, &f, f.n, &req, err), 5);
	assert_int_equal(ts.dialect, CRUN__TCPSTORE_MODERN);
	assert_int_equal(req.op, CRUN__TS_VALIDATE);
	/* 1.13's first request, ADD on init/: legacy */
	memset(&ts, 0, sizeof(ts));
	key_req(&f, 3, "init/");
	f_u64(&f, 1);
	assert_int_equal(parse(&ts, &f, f.n, &req, err), (long)f.n);
	assert_int_equal(ts.dialect, CRUN__TCPSTORE_LEGACY);
	assert_int_equal(req.op, CRUN__TS_ADD);
	assert_int_equal(req.num, 1);
	/* a legacy SET (0) whose key length is not the magic: legacy */
	memset(&ts, 0, sizeof(ts));
	key_req(&f, 0, "/k");
	f_str(&f, "v");
	assert_int_equal(parse(&ts, &f, f.n, &req, err), (long)f.n);
	assert_int_equal(ts.dialect, CRUN__TCPSTORE_LEGACY);
	assert_int_equal(req.op, CRUN__TS_SET);
	/* a modern connection with a bad magic later */
	f.n = 0;
	f_u8(&f, 0);
	f_u32(&f, 0x12345678);
	ts.dialect = CRUN__TCPSTORE_MODERN;
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EPROTO);
	assert_non_null(strstr(err, "magic"));
}

/* Every request of a dialect, cut at every byte: 0 until whole, then the
 * whole size; never an error. */
static void cuts(enum crun__tcpstore_dialect d)
{
	static const enum crun__tcpstore_op all[] = {
		CRUN__TS_SET,	    CRUN__TS_COMPARE_SET, CRUN__TS_GET,	       CRUN__TS_ADD,
		CRUN__TS_CHECK,	    CRUN__TS_WAIT,	  CRUN__TS_GETNUMKEYS, CRUN__TS_DELETE_KEY,
		CRUN__TS_APPEND,    CRUN__TS_MULTI_GET,	  CRUN__TS_MULTI_SET,  CRUN__TS_CANCEL_WAIT,
		CRUN__TS_VALIDATE,  CRUN__TS_PING,	  CRUN__TS_QUEUE_PUSH, CRUN__TS_QUEUE_POP,
		CRUN__TS_QUEUE_LEN,
	};
	struct crun__tcpstore_req req;
	char err[200];

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		enum crun__tcpstore_op op = all[i];
		struct frame f = {.n = 0};

		if (d == CRUN__TCPSTORE_LEGACY &&
		    (op == CRUN__TS_VALIDATE || op == CRUN__TS_PING || op >= CRUN__TS_QUEUE_PUSH))
			continue;
		f_u8(&f, opc(d, op));
		switch (op) {
		case CRUN__TS_VALIDATE:
			f_u32(&f, CRUN__TCPSTORE_MAGIC);
			break;
		case CRUN__TS_PING:
			f_u32(&f, 7);
			break;
		case CRUN__TS_SET:
		case CRUN__TS_APPEND:
		case CRUN__TS_QUEUE_PUSH:
			f_str(&f, "/key");
			f_str(&f, "value");
			break;
		case CRUN__TS_COMPARE_SET:
			f_str(&f, "/key");
			f_str(&f, "");
			f_str(&f, "new");
			break;
		case CRUN__TS_GET:
		case CRUN__TS_DELETE_KEY:
		case CRUN__TS_QUEUE_POP:
		case CRUN__TS_QUEUE_LEN:
			f_str(&f, "/key");
			break;
		case CRUN__TS_ADD:
			f_str(&f, "/key");
			f_u64(&f, 3);
			break;
		case CRUN__TS_CHECK:
		case CRUN__TS_WAIT:
		case CRUN__TS_MULTI_GET:
			f_u64(&f, 3);
			f_str(&f, "/a");
			f_str(&f, "/bb");
			f_str(&f, "/ccc");
			break;
		case CRUN__TS_MULTI_SET:
			f_u64(&f, 2);
			f_str(&f, "/a");
			f_str(&f, "1");
			f_str(&f, "/b");
			f_str(&f, "");
			break;
		default:
			break;
		}
		for (size_t k = 0; k < f.n; k++) {
			struct crun__tcpstore_conn ts = {.dialect = d};

			if (parse(&ts, &f, k, &req, err) != 0)
				fail_msg("%s cut at %zu of %zu: %s", crun__tcpstore_op_name(op), k,
					 f.n, err);
		}
		/* whole, and whole with the start of the next request behind */
		for (int extra = 0; extra < 2; extra++) {
			struct crun__tcpstore_conn ts = {.dialect = d};

			f.b[f.n] = 1;
			assert_int_equal(parse(&ts, &f, f.n + (size_t)extra, &req, err), (long)f.n);
			assert_int_equal(req.op, op);
		}
	}
}

static void test_cuts(void **state)
{
	(void)state;
	cuts(CRUN__TCPSTORE_LEGACY);
	cuts(CRUN__TCPSTORE_MODERN);
}

static void test_malformed(void **state)
{
	struct crun__tcpstore_conn ts = {.dialect = CRUN__TCPSTORE_LEGACY};
	struct crun__tcpstore_req req;
	struct frame f;
	char err[200];

	(void)state;
	/* a key length of 2^63: refused from its 9 bytes, before its data */
	key_req(&f, 2, "");
	f.n = 1;
	f_u64(&f, (uint64_t)1 << 63);
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EMSGSIZE);
	assert_non_null(strstr(err, "key"));
	/* a value past max_value_size */
	key_req(&f, 0, "/k");
	f_u64(&f, lim.max_value_size + 1);
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EMSGSIZE);
	assert_non_null(strstr(err, "value"));
	/* a list of 2^40 keys: refused before any allocation */
	f.n = 0;
	f_u8(&f, 5);
	f_u64(&f, (uint64_t)1 << 40);
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EMSGSIZE);
	/* a list that max_request cannot hold: 1000 keys need 8000 bytes */
	f.n = 0;
	f_u8(&f, 10);
	f_u64(&f, 1000);
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EMSGSIZE);
	/* an empty list is whole (answered without the store), an empty
	 * key is not a key */
	f.n = 0;
	f_u8(&f, 5);
	f_u64(&f, 0);
	assert_int_equal(parse(&ts, &f, f.n, &req, err), (long)f.n);
	assert_int_equal(req.count, 0);
	key_req(&f, 2, "");
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EPROTO);
	/* a request that keeps growing past max_request without ending */
	f.n = 0;
	f_u8(&f, 10);
	f_u64(&f, 200);
	for (int i = 0; i < 200 && f.n < 5000; i++)
		f_str(&f, "/0123456789012345678901234567890123456789");
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EMSGSIZE);
	/* unknown opcodes: name the opcode and dialect */
	f.n = 0;
	f_u8(&f, 13);
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EOPNOTSUPP);
	assert_non_null(strstr(err, "opcode 13"));
	assert_non_null(strstr(err, "legacy"));
	ts.dialect = CRUN__TCPSTORE_MODERN;
	f.b[0] = 17;
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EOPNOTSUPP);
	assert_non_null(strstr(err, "newer PyTorch"));
	/* a queue value over the limit, said once its length is in */
	key_req(&f, 14, "/q");
	f_u64(&f, lim.max_value_size + 1);
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EMSGSIZE);
	assert_non_null(strstr(err, "value"));
	/* the queue opcodes do not exist in the legacy dialect (14 is past
	 * its table), and crun does not serve its WATCH_KEY */
	ts.dialect = CRUN__TCPSTORE_LEGACY;
	key_req(&f, 14, "/q");
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EOPNOTSUPP);
	assert_non_null(strstr(err, "opcode 14"));
	key_req(&f, 7, "/w");
	assert_int_equal(parse(&ts, &f, f.n, &req, err), -EOPNOTSUPP);
	assert_non_null(strstr(err, "WATCH_KEY"));
}

/* Replies owed are bounded; a store error closes the connection. */
static void test_pending_and_errors(void **state)
{
	struct fx x;
	struct frame f;
	struct crun__tcpstore_req req;
	struct crun__wire_msg m;
	uint8_t reply[16], out[128];
	size_t rlen;
	char err[200];
	int from;

	(void)state;
	fx_init(&x, CRUN__TCPSTORE_MODERN);
	f.n = 0;
	f_u8(&f, 6);
	f_u64(&f, 1);
	f_str(&f, "/w");
	for (int i = 0; i < CRUN__TCPSTORE_PENDING; i++) {
		assert_int_equal(parse(&x.ts, &f, f.n, &req, err), (long)f.n);
		assert_int_equal(crun__tcpstore_begin(&x.ts, &req, &m, reply, &rlen),
				 CRUN__TS_APPLY);
	}
	assert_int_equal(crun__tcpstore_begin(&x.ts, &req, &m, reply, &rlen), -ENOSPC);
	crun__tcpstore_cancel_waits(&x.ts);
	assert_int_equal(x.ts.npending, 0);
	/* a frame about no request */
	assert_int_equal(crun__tcpstore_reply(&x.ts, CRUN_WIRE_OK, 99, 0, NULL, 0, out, sizeof(out),
					      err, sizeof(err)),
			 -ENOENT);
	/* ADD on a value that is not a number: the store's error closes */
	key_req(&f, 1, "/s");
	f_str(&f, "abc");
	run(&x, &f);
	key_req(&f, 4, "/s");
	f_u64(&f, 1);
	assert_int_equal(parse(&x.ts, &f, f.n, &req, err), (long)f.n);
	assert_int_equal(crun__tcpstore_begin(&x.ts, &req, &m, reply, &rlen), CRUN__TS_APPLY);
	nsent = from = 0;
	assert_int_equal(crun__store_apply(x.st, &x.c, &m, 0), 0);
	assert_int_equal(nsent, from + 1);
	assert_int_equal(sent[from].type, CRUN_WIRE_ERROR);
	{
		struct crun__wire_item it = {sent[from].data[0], sent[from].len[0]};

		assert_int_equal(crun__tcpstore_reply(&x.ts, sent[from].type, sent[from].id,
						      sent[from].num, &it, 1, out, sizeof(out), err,
						      sizeof(err)),
				 -EPROTO);
		assert_non_null(strstr(err, "ADD failed"));
	}
	/* a reply larger than out: its size, then the bytes on a second call */
	key_req(&f, 1, "/big");
	f_str(&f, "0123456789012345678901234567890123456789012345678901234567890123");
	run(&x, &f);
	key_req(&f, 3, "/big");
	assert_int_equal(parse(&x.ts, &f, f.n, &req, err), (long)f.n);
	assert_int_equal(crun__tcpstore_begin(&x.ts, &req, &m, reply, &rlen), CRUN__TS_APPLY);
	nsent = from = 0;
	assert_int_equal(crun__store_apply(x.st, &x.c, &m, 0), 0);
	{
		struct crun__wire_item it = {sent[from].data[0], sent[from].len[0]};

		assert_int_equal(crun__tcpstore_reply(&x.ts, sent[from].type, sent[from].id, 0, &it,
						      1, out, 16, err, sizeof(err)),
				 72);
		assert_int_equal(x.ts.npending, 2); /* the failed ADD's, and this one */
		assert_int_equal(crun__tcpstore_reply(&x.ts, sent[from].type, sent[from].id, 0, &it,
						      1, out, 72, err, sizeof(err)),
				 72);
		assert_int_equal(x.ts.npending, 1);
		assert_memory_equal(out,
				    "\x40\0\0\0\0\0\0\0"
				    "0123",
				    12);
	}
	fx_finish(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_legacy),	  cmocka_unit_test(test_modern),
		cmocka_unit_test(test_detect),	  cmocka_unit_test(test_cuts),
		cmocka_unit_test(test_malformed), cmocka_unit_test(test_pending_and_errors),
		cmocka_unit_test(test_queues),
	};

	crun__log_init("test_tcpstore", CRUN_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

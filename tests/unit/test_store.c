/* The store's semantics, called directly: no sockets, no loop, no clock.
 * Clients are plain structs; the store's ops record every frame and notice
 * it produces, and each test reads them back in order. The edge (framing,
 * buffers, timers) is test_server.c's. */
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
#include "common/util.h"
#include "rendezvous/store.h"
#include "rendezvous/wire.h"

/* ---- a recording edge ------------------------------------------------------ */

#define MAX_FRAMES 256
#define MAX_ITEMS 16

struct sent {
	struct crun__store_client *to;
	uint8_t type;
	uint32_t id;
	int64_t num;
	uint32_t count;
	char *items[MAX_ITEMS]; /* NUL-terminated copies */
	uint32_t lens[MAX_ITEMS];
};

struct rec {
	struct sent f[MAX_FRAMES];
	size_t n, next; /* recorded, read back */
	struct crun__store_client *dropped[8];
	size_t ndropped;
	void *freed[8];
	size_t nfreed;
	size_t max_frame; /* a frame but ERROR with more item bytes: -ENOBUFS;
			   * 0: no cap */
};

static int rec_send(void *ctx, struct crun__store_client *to, uint8_t type, uint32_t id,
		    int64_t num, const struct crun__wire_item *items, uint32_t count)
{
	struct rec *r = ctx;
	struct sent *s;
	size_t bytes = 0;

	for (uint32_t i = 0; i < count; i++)
		bytes += items[i].len;
	if (r->max_frame && bytes > r->max_frame && type != CRUN_WIRE_ERROR)
		return -ENOBUFS;
	assert_true(r->n < MAX_FRAMES);
	s = &r->f[r->n++];
	s->to = to;
	s->type = type;
	s->id = id;
	s->num = num;
	s->count = count;
	for (uint32_t i = 0; i < count && i < MAX_ITEMS; i++) {
		s->items[i] = malloc(items[i].len + 1);
		assert_non_null(s->items[i]);
		if (items[i].len)
			memcpy(s->items[i], items[i].data, items[i].len);
		s->items[i][items[i].len] = '\0';
		s->lens[i] = items[i].len;
	}
	return 0;
}

static void rec_drop(void *ctx, struct crun__store_client *c, const char *reason)
{
	struct rec *r = ctx;

	assert_non_null(reason);
	assert_true(r->ndropped < CRUN_ARRAY_SIZE(r->dropped));
	r->dropped[r->ndropped++] = c;
}

static void rec_run_freed(void *ctx, void *data)
{
	struct rec *r = ctx;

	assert_true(r->nfreed < CRUN_ARRAY_SIZE(r->freed));
	r->freed[r->nfreed++] = data;
}

static const struct crun__store_ops rec_ops = {
	.send = rec_send,
	.drop = rec_drop,
	.run_freed = rec_run_freed,
};

static void rec_clear(struct rec *r)
{
	for (size_t i = 0; i < r->n; i++)
		for (uint32_t j = 0; j < r->f[i].count && j < MAX_ITEMS; j++)
			free(r->f[i].items[j]);
	r->n = r->next = 0;
}

/* The next recorded frame; fails when there is none. */
static struct sent *next_frame(struct rec *r)
{
	assert_true(r->next < r->n);
	return &r->f[r->next++];
}

static void no_more_frames(struct rec *r)
{
	assert_int_equal(r->next, r->n);
}

struct fixture {
	struct rec rec;
	struct crun__store *st;
	struct crun__store_limits limits;
	struct crun__store_client a, b;
};

static void default_limits(struct crun__store_limits *l)
{
	l->max_key_size = 4096;
	l->max_value_size = 16u << 20;
	l->max_keys_per_run = 1000000;
	l->max_sub_bytes = 64u << 20;
}

/* A store with these limits (NULL: the server's defaults) and clients a and
 * b in the run "run". */
static void fixture_start(struct fixture *fx, const struct crun__store_limits *limits)
{
	memset(fx, 0, sizeof(*fx));
	if (limits)
		fx->limits = *limits;
	else
		default_limits(&fx->limits);
	fx->st = crun__store_create(&fx->limits, 0x1234, &rec_ops, &fx->rec);
	assert_non_null(fx->st);
	crun__store_client_init(&fx->a, "a");
	crun__store_client_init(&fx->b, "b");
	assert_int_equal(crun__store_join(fx->st, &fx->a, (const uint8_t *)"run", 3), 0);
	assert_int_equal(crun__store_join(fx->st, &fx->b, (const uint8_t *)"run", 3), 0);
}

static void fixture_stop(struct fixture *fx)
{
	crun__store_leave(fx->st, &fx->a);
	crun__store_leave(fx->st, &fx->b);
	crun__store_destroy(fx->st);
	rec_clear(&fx->rec);
}

/* Applies a request with items given as strings (NULL-terminated list). */
static void req(struct fixture *fx, struct crun__store_client *c, uint8_t type, uint8_t flags,
		uint32_t id, int64_t num, uint64_t now, ...)
{
	struct crun__wire_item items[MAX_ITEMS];
	struct crun__wire_msg m = {type, flags, id, num, 0, items};
	char err[160];
	const char *s;
	va_list ap;

	va_start(ap, now);
	while ((s = va_arg(ap, const char *))) {
		assert_true(m.count < MAX_ITEMS);
		items[m.count].data = (const uint8_t *)s;
		items[m.count++].len = (uint32_t)strlen(s);
	}
	va_end(ap);
	assert_int_equal(crun__wire_validate(&m, err, sizeof(err)), 0);
	assert_int_equal(crun__store_apply(fx->st, c, &m, now), 0);
}

static void want(struct rec *r, struct crun__store_client *to, uint8_t type, uint32_t id,
		 int64_t num)
{
	struct sent *s = next_frame(r);

	assert_ptr_equal(s->to, to);
	assert_int_equal(s->type, type);
	assert_int_equal(s->id, id);
	assert_int_equal(s->num, num);
}

static void want_value(struct rec *r, struct crun__store_client *to, uint32_t id, int64_t num,
		       const char *value)
{
	struct sent *s = next_frame(r);

	assert_ptr_equal(s->to, to);
	assert_int_equal(s->type, CRUN_WIRE_VALUE);
	assert_int_equal(s->id, id);
	assert_int_equal(s->num, num);
	assert_int_equal(s->count, 1);
	assert_string_equal(s->items[0], value);
}

/* An ERROR with this errno whose message contains msg (NULL: any). */
static void want_error(struct rec *r, struct crun__store_client *to, uint32_t id, int errnum,
		       const char *msg)
{
	struct sent *s = next_frame(r);

	assert_ptr_equal(s->to, to);
	assert_int_equal(s->type, CRUN_WIRE_ERROR);
	assert_int_equal(s->id, id);
	assert_int_equal(s->num, errnum);
	if (msg)
		assert_non_null(strstr(s->items[0], msg));
}

static void want_notify(struct rec *r, struct crun__store_client *to, uint32_t id, int64_t ev,
			const char *key, const char *val)
{
	struct sent *s = next_frame(r);

	assert_ptr_equal(s->to, to);
	assert_int_equal(s->type, CRUN_WIRE_NOTIFY);
	assert_int_equal(s->id, id);
	assert_int_equal(s->num, ev);
	assert_int_equal(s->count, 2);
	assert_string_equal(s->items[0], key);
	assert_string_equal(s->items[1], val);
}

/* ---- one client, one request, one reply: a table ---------------------------- */

#define K(...)                    \
	{                         \
		__VA_ARGS__, NULL \
	}
#define NONE 0xff /* no item expected */

struct step {
	uint8_t type, flags;
	int64_t num;
	const char *items[16];
	uint8_t want_type;
	int64_t want_num;
	const char *want[16]; /* items of the reply; for ERROR, part of the message */
};

static const struct step steps[] = {
	/* SET, GET, overwrite, empty value, missing key */
	{CRUN_WIRE_GET, 0, 0, K("k"), CRUN_WIRE_ERROR, ENOENT, K("key 'k' not found")},
	{CRUN_WIRE_SET, 0, 0, K("k", "v1"), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_GET, 0, 0, K("k"), CRUN_WIRE_VALUE, 0, K("v1")},
	{CRUN_WIRE_SET, 0, 0, K("k", "a longer second value"), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_GET, 0, 0, K("k"), CRUN_WIRE_VALUE, 0, K("a longer second value")},
	{CRUN_WIRE_SET, 0, 0, K("empty", ""), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_GET, 0, 0, K("empty"), CRUN_WIRE_VALUE, 0, K("")},
	/* CHECK, and WAIT on keys that exist */
	{CRUN_WIRE_CHECK, 0, 0, K("k", "empty"), CRUN_WIRE_INT, 1, K(NULL)},
	{CRUN_WIRE_CHECK, 0, 0, K("k", "nope"), CRUN_WIRE_INT, 0, K(NULL)},
	{CRUN_WIRE_WAIT, 0, 1000, K("k"), CRUN_WIRE_OK, 0, K(NULL)},
	/* ADD: decimal ASCII, a missing key counts as 0, errors */
	{CRUN_WIRE_ADD, 0, 5, K("n"), CRUN_WIRE_INT, 5, K(NULL)},
	{CRUN_WIRE_ADD, 0, -7, K("n"), CRUN_WIRE_INT, -2, K(NULL)},
	{CRUN_WIRE_GET, 0, 0, K("n"), CRUN_WIRE_VALUE, 0, K("-2")},
	{CRUN_WIRE_ADD, 0, 1, K("k"), CRUN_WIRE_ERROR, EINVAL, K("not a decimal integer")},
	{CRUN_WIRE_SET, 0, 0, K("big", "9223372036854775807"), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_ADD, 0, 1, K("big"), CRUN_WIRE_ERROR, ERANGE, K("overflows int64")},
	{CRUN_WIRE_ADD, 0, 0, K("big"), CRUN_WIRE_INT, INT64_MAX, K(NULL)},
	{CRUN_WIRE_SET, 0, 0, K("huge", "99999999999999999999"), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_ADD, 0, 1, K("huge"), CRUN_WIRE_ERROR, ERANGE, K("out of the int64 range")},
	{CRUN_WIRE_SET, 0, 0, K("plus", "+4"), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_ADD, 0, 1, K("plus"), CRUN_WIRE_INT, 5, K(NULL)},
	{CRUN_WIRE_SET, 0, 0, K("sign", "-"), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_ADD, 0, 1, K("sign"), CRUN_WIRE_ERROR, EINVAL, K(NULL)},
	/* CAS, torch's compareSet semantics */
	{CRUN_WIRE_CAS, 0, 0, K("cas", "x", "y"), CRUN_WIRE_VALUE, 0, K("x")},
	{CRUN_WIRE_GET, 0, 0, K("cas"), CRUN_WIRE_ERROR, ENOENT, K(NULL)},
	{CRUN_WIRE_CAS, 0, 0, K("cas", "", "first"), CRUN_WIRE_VALUE, 1, K("first")},
	{CRUN_WIRE_CAS, 0, 0, K("cas", "wrong", "z"), CRUN_WIRE_VALUE, 0, K("first")},
	{CRUN_WIRE_CAS, 0, 0, K("cas", "first", "second"), CRUN_WIRE_VALUE, 1, K("second")},
	{CRUN_WIRE_CAS, CRUN_WIRE_FL_EXPECT_ABSENT, 0, K("cas", "", "third"), CRUN_WIRE_VALUE, 0,
	 K("second")},
	{CRUN_WIRE_CAS, CRUN_WIRE_FL_EXPECT_ABSENT, 0, K("cas2", "ignored", "new"), CRUN_WIRE_VALUE,
	 1, K("new")},
	{CRUN_WIRE_GET, 0, 0, K("cas2"), CRUN_WIRE_VALUE, 0, K("new")},
	/* DELETE */
	{CRUN_WIRE_DELETE, 0, 0, K("k"), CRUN_WIRE_INT, 1, K(NULL)},
	{CRUN_WIRE_DELETE, 0, 0, K("k"), CRUN_WIRE_INT, 0, K(NULL)},
	{CRUN_WIRE_GET, 0, 0, K("k"), CRUN_WIRE_ERROR, ENOENT, K(NULL)},
	/* APPEND creates, then appends */
	{CRUN_WIRE_APPEND, 0, 0, K("log", "ab"), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_APPEND, 0, 0, K("log", "cd"), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_APPEND, 0, 0, K("log", ""), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_GET, 0, 0, K("log"), CRUN_WIRE_VALUE, 0, K("abcd")},
	/* MSET, MGET, COUNT, LIST */
	{CRUN_WIRE_MSET, 0, 0, K("b", "2", "a", "1", "c", ""), CRUN_WIRE_OK, 0, K(NULL)},
	{CRUN_WIRE_MGET, 0, 0, K("a", "b", "c"), CRUN_WIRE_VALUES, 0, K("1", "2", "")},
	{CRUN_WIRE_MGET, 0, 0, K("a", "nope"), CRUN_WIRE_ERROR, ENOENT, K("'nope'")},
	/* keys: empty n big huge plus sign cas cas2 log a b c */
	{CRUN_WIRE_COUNT, 0, 0, K(NULL), CRUN_WIRE_INT, 12, K(NULL)},
	{CRUN_WIRE_LIST, 0, 0, K(NULL), CRUN_WIRE_VALUES, 0,
	 K("a", "b", "big", "c", "cas", "cas2", "empty", "huge", "log", "n", "plus", "sign")},
	/* PING echoes */
	{CRUN_WIRE_PING, 0, 0, K(NULL), CRUN_WIRE_VALUE, 0, K("")},
	{CRUN_WIRE_PING, 0, 0, K("hi"), CRUN_WIRE_VALUE, 0, K("hi")},
	/* UNWATCH of nothing is fine */
	{CRUN_WIRE_UNWATCH, 0, 0, K("k"), CRUN_WIRE_OK, 0, K(NULL)},
};

static uint32_t nitems(const char *const *v)
{
	uint32_t n = 0;

	while (n < 16 && v[n])
		n++;
	return n;
}

static void test_operations(void **state)
{
	struct fixture fx;

	(void)state;
	fixture_start(&fx, NULL);
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(steps); i++) {
		const struct step *s = &steps[i];
		struct crun__wire_item items[16];
		struct crun__wire_msg m = {s->type, s->flags,	      (uint32_t)i,
					   s->num,  nitems(s->items), items};
		struct sent *r;
		uint32_t nwant = nitems(s->want);

		for (uint32_t j = 0; j < m.count; j++) {
			items[j].data = (const uint8_t *)s->items[j];
			items[j].len = (uint32_t)strlen(s->items[j]);
		}
		assert_int_equal(crun__store_apply(fx.st, &fx.a, &m, 0), 0);
		r = next_frame(&fx.rec);
		no_more_frames(&fx.rec);
		if (r->type != s->want_type || r->num != s->want_num)
			fail_msg("step %zu (%s): got %s num %lld", i, crun__wire_type_name(s->type),
				 crun__wire_type_name(r->type), (long long)r->num);
		assert_ptr_equal(r->to, &fx.a);
		assert_int_equal(r->id, i);
		if (s->want_type == CRUN_WIRE_ERROR) {
			if (nwant)
				assert_non_null(strstr(r->items[0], s->want[0]));
			continue;
		}
		assert_int_equal(r->count, nwant);
		for (uint32_t j = 0; j < nwant; j++)
			assert_string_equal(r->items[j], s->want[j]);
	}
	assert_int_equal(crun__store_run_keys(&fx.a), 12);
	fixture_stop(&fx);
}

/* Binary keys and values go through untouched. */
static void test_binary(void **state)
{
	static const uint8_t bin[] = {0, 1, 2, 0xff, '\n', 0};
	struct crun__wire_item kv[2] = {{bin, 3}, {bin, sizeof(bin)}};
	struct crun__wire_msg set = {CRUN_WIRE_SET, 0, 1, 0, 2, kv};
	struct crun__wire_msg get = {CRUN_WIRE_GET, 0, 2, 0, 1, kv};
	struct fixture fx;
	struct sent *s;

	(void)state;
	fixture_start(&fx, NULL);
	assert_int_equal(crun__store_apply(fx.st, &fx.a, &set, 0), 0);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 1, 0);
	assert_int_equal(crun__store_apply(fx.st, &fx.a, &get, 0), 0);
	s = next_frame(&fx.rec);
	assert_int_equal(s->type, CRUN_WIRE_VALUE);
	assert_int_equal(s->lens[0], sizeof(bin));
	assert_memory_equal(s->items[0], bin, sizeof(bin));
	fixture_stop(&fx);
}

/* Requests that are not key-value requests are not the store's. */
static void test_not_store_requests(void **state)
{
	static const uint8_t types[] = {CRUN_WIRE_HELLO,     CRUN_WIRE_RDZV_JOIN,
					CRUN_WIRE_RDZV_FAIL, CRUN_WIRE_RDZV_DONE,
					CRUN_WIRE_OK,	     CRUN_WIRE_NOTIFY};
	struct fixture fx;

	(void)state;
	fixture_start(&fx, NULL);
	for (size_t i = 0; i < sizeof(types); i++) {
		struct crun__wire_msg m = {types[i], 0, 1, 0, 0, NULL};

		assert_int_equal(crun__store_apply(fx.st, &fx.a, &m, 0), -EINVAL);
	}
	no_more_frames(&fx.rec);
	fixture_stop(&fx);
}

/* ---- waiting ------------------------------------------------------------------ */

static void test_waiters_woken(void **state)
{
	struct fixture fx;

	(void)state;
	fixture_start(&fx, NULL);
	/* a waits; later requests of a are not held up */
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 7, 5000, 100, "late", NULL);
	req(&fx, &fx.a, CRUN_WIRE_MGET, 0, 8, 5000, 100, "m1", "m2", NULL);
	req(&fx, &fx.a, CRUN_WIRE_WAIT, 0, 9, 5000, 100, "m1", "m2", NULL);
	req(&fx, &fx.a, CRUN_WIRE_PING, 0, 10, 0, 100, NULL);
	want_value(&fx.rec, &fx.a, 10, 0, "");
	no_more_frames(&fx.rec);
	assert_int_equal(crun__store_next_deadline(fx.st), 5100);
	assert_int_equal(fx.a.nsubs, 3);

	/* b's SET answers b first, then wakes a */
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 1, 0, 200, "late", "here", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 1, 0);
	want_value(&fx.rec, &fx.a, 7, 0, "here");
	no_more_frames(&fx.rec);

	/* MGET and WAIT need both keys, and are answered in the order they came */
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 2, 0, 200, "m1", "one", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 2, 0);
	no_more_frames(&fx.rec);
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 3, 0, 200, "m2", "two", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 3, 0);
	{
		struct sent *s = next_frame(&fx.rec);

		assert_int_equal(s->type, CRUN_WIRE_VALUES);
		assert_int_equal(s->id, 8);
		assert_int_equal(s->count, 2);
		assert_string_equal(s->items[0], "one");
		assert_string_equal(s->items[1], "two");
	}
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 9, 0);
	no_more_frames(&fx.rec);
	assert_int_equal(fx.a.nsubs, 0);
	assert_int_equal(fx.a.sub_bytes, 0);
	assert_int_equal(crun__store_next_deadline(fx.st), UINT64_MAX);

	/* ADD, APPEND, CAS and MSET wake waiters too; DELETE does not */
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 11, 5000, 0, "ctr", NULL);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 12, 5000, 0, "ap", NULL);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 13, 5000, 0, "cas", NULL);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 14, 5000, 0, "ms", NULL);
	req(&fx, &fx.b, CRUN_WIRE_DELETE, 0, 4, 0, 0, "ctr", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_INT, 4, 0);
	req(&fx, &fx.b, CRUN_WIRE_ADD, 0, 5, 3, 0, "ctr", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_INT, 5, 3);
	want_value(&fx.rec, &fx.a, 11, 0, "3");
	req(&fx, &fx.b, CRUN_WIRE_APPEND, 0, 6, 0, 0, "ap", "x", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 6, 0);
	want_value(&fx.rec, &fx.a, 12, 0, "x");
	req(&fx, &fx.b, CRUN_WIRE_CAS, 0, 7, 0, 0, "cas", "", "c", NULL);
	want_value(&fx.rec, &fx.b, 7, 1, "c");
	want_value(&fx.rec, &fx.a, 13, 0, "c");
	req(&fx, &fx.b, CRUN_WIRE_MSET, 0, 8, 0, 0, "ms", "m", NULL);
	want_value(&fx.rec, &fx.a, 14, 0, "m"); /* MSET wakes before its OK */
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 8, 0);
	no_more_frames(&fx.rec);
	fixture_stop(&fx);
}

static void test_waiter_timeouts(void **state)
{
	struct fixture fx;

	(void)state;
	fixture_start(&fx, NULL);
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 1, 0, 0, "x", "1", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 1, 0);
	/* deadlines 1150, 1100, 1100 (b's after a's), 1300 */
	req(&fx, &fx.a, CRUN_WIRE_WAIT, 0, 2, 150, 1000, "x", "y", NULL);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 3, 100, 1000, "y", NULL);
	req(&fx, &fx.b, CRUN_WIRE_MGET, 0, 4, 50, 1050, "x", "z", NULL);
	req(&fx, &fx.b, CRUN_WIRE_GET, 0, 5, 300, 1000, "w", NULL);
	no_more_frames(&fx.rec);
	assert_int_equal(crun__store_next_deadline(fx.st), 1100);

	crun__store_expire(fx.st, 1099); /* nothing yet */
	no_more_frames(&fx.rec);
	crun__store_expire(fx.st, 1150);
	want_error(&fx.rec, &fx.a, 3, ETIMEDOUT, "timed out waiting for key 'y'");
	want_error(&fx.rec, &fx.b, 4, ETIMEDOUT, "'z'");
	want_error(&fx.rec, &fx.a, 2, ETIMEDOUT, "'y'"); /* the first missing key */
	no_more_frames(&fx.rec);
	assert_int_equal(crun__store_next_deadline(fx.st), 1300);
	assert_int_equal(fx.a.nsubs, 0);
	assert_int_equal(fx.b.nsubs, 1);

	/* a waiter that timed out does not answer again */
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 6, 0, 1200, "y", "2", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 6, 0);
	no_more_frames(&fx.rec);

	/* a huge timeout saturates rather than wrapping */
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 7, INT64_MAX, UINT64_MAX - 10, "never", NULL);
	assert_int_equal(crun__store_next_deadline(fx.st), 1300);
	crun__store_expire(fx.st, 1300);
	want_error(&fx.rec, &fx.b, 5, ETIMEDOUT, "'w'");
	assert_int_equal(crun__store_next_deadline(fx.st), UINT64_MAX - 1);
	no_more_frames(&fx.rec);
	fixture_stop(&fx);
}

/* Many waits with mixed deadlines expire in deadline order: the heap. */
static void test_waiter_heap(void **state)
{
	enum { N = 200 };
	struct fixture fx;
	uint64_t last = 0;

	(void)state;
	fixture_start(&fx, NULL);
	for (uint32_t i = 0; i < N; i++) {
		char key[16];
		int64_t timeout = 1 + (int64_t)((i * 7919u) % 1000);

		snprintf(key, sizeof(key), "k%u", i);
		req(&fx, i % 2 ? &fx.a : &fx.b, CRUN_WIRE_GET, 0, i, timeout, 0, key, NULL);
	}
	/* cancel every third by setting its key, and b's by leaving */
	for (uint32_t i = 0; i < N; i += 3) {
		char key[16];

		snprintf(key, sizeof(key), "k%u", i);
		req(&fx, &fx.a, CRUN_WIRE_SET, 0, 1000 + i, 0, 0, key, "v", NULL);
	}
	crun__store_leave(fx.st, &fx.b);
	rec_clear(&fx.rec);
	crun__store_expire(fx.st, UINT64_MAX - 2);
	for (size_t i = 0; i < fx.rec.n; i++) {
		struct sent *s = &fx.rec.f[i];
		uint64_t deadline = 1 + (s->id * 7919u) % 1000;

		assert_ptr_equal(s->to, &fx.a);
		assert_int_equal(s->type, CRUN_WIRE_ERROR);
		assert_true(s->id % 2 == 1 && s->id % 3 != 0);
		assert_true(deadline >= last);
		last = deadline;
	}
	assert_int_equal(fx.rec.n, N / 2 - N / 6);
	assert_int_equal(crun__store_next_deadline(fx.st), UINT64_MAX);
	fixture_stop(&fx);
}

/* An MGET of more keys than fit the stack, waiting for the last of them. */
static void test_mget_many(void **state)
{
	enum { N = 40 };
	struct crun__wire_item keys[N];
	struct crun__wire_msg m = {CRUN_WIRE_MGET, 0, 99, 1000, N, keys};
	char names[N][8];
	struct fixture fx;
	struct sent *s;

	(void)state;
	fixture_start(&fx, NULL);
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "k%02u", (unsigned)i % 100);
		keys[i].data = (const uint8_t *)names[i];
		keys[i].len = (uint32_t)strlen(names[i]);
		if (i < N - 1)
			req(&fx, &fx.b, CRUN_WIRE_SET, 0, (uint32_t)i, 0, 0, names[i], names[i],
			    NULL);
	}
	assert_int_equal(crun__store_apply(fx.st, &fx.a, &m, 0), 0);
	rec_clear(&fx.rec);
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 100, 0, 0, names[N - 1], names[N - 1], NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 100, 0);
	s = next_frame(&fx.rec);
	assert_int_equal(s->type, CRUN_WIRE_VALUES);
	assert_int_equal(s->id, 99);
	assert_int_equal(s->count, N);
	for (int i = 0; i < N && i < MAX_ITEMS; i++)
		assert_string_equal(s->items[i], names[i]);
	no_more_frames(&fx.rec);
	fixture_stop(&fx);
}

/* ---- paged LIST ---------------------------------------------------------------- */

/* The run of fx holds k00 .. k(n-1). */
static void set_keys(struct fixture *fx, int n)
{
	char name[16];

	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "k%02d", i);
		req(fx, &fx->b, CRUN_WIRE_SET, 0, 1, 0, 0, name, "v", NULL);
	}
	rec_clear(&fx->rec);
}

/* A LIST reply to a: count keys, first and last of them, more. */
static void want_page(struct rec *r, struct crun__store_client *to, uint32_t id, uint32_t count,
		      const char *first, const char *last, int64_t more)
{
	struct sent *s = next_frame(r);

	assert_ptr_equal(s->to, to);
	assert_int_equal(s->type, CRUN_WIRE_VALUES);
	assert_int_equal(s->id, id);
	assert_int_equal(s->count, count);
	assert_int_equal(s->num, more);
	if (count && count <= MAX_ITEMS) {
		assert_string_equal(s->items[0], first);
		assert_string_equal(s->items[count - 1], last);
	}
}

static void test_list_pages(void **state)
{
	static const struct {
		const char *after; /* NULL: no item */
		int64_t page;	   /* 0: plain LIST */
		uint32_t count;
		const char *first, *last;
		int64_t more;
	} cases[] = {
		{NULL, 0, 10, "k00", "k09", 0},	   /* plain: every key */
		{NULL, 4, 4, "k00", "k03", 1},	   /* first page */
		{"", 4, 4, "k00", "k03", 1},	   /* empty after: from the start */
		{"k03", 4, 4, "k04", "k07", 1},	   /* a middle page */
		{"k07", 4, 2, "k08", "k09", 0},	   /* the last, short */
		{"k05", 4, 4, "k06", "k09", 0},	   /* exactly the rest: no more */
		{"k09", 4, 0, NULL, NULL, 0},	   /* after the last key */
		{"k035", 2, 2, "k04", "k05", 1},   /* after a key not in the run */
		{"a", 1, 1, "k00", "k00", 1},	   /* before every key */
		{"z", 1, 0, NULL, NULL, 0},	   /* after every key */
		{NULL, 10, 10, "k00", "k09", 0},   /* page of exactly all */
		{NULL, 1000, 10, "k00", "k09", 0}, /* larger than the run */
	};
	struct fixture fx;

	(void)state;
	fixture_start(&fx, NULL);
	set_keys(&fx, 10);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (cases[i].after)
			req(&fx, &fx.a, CRUN_WIRE_LIST, 0, (uint32_t)i, cases[i].page, 0,
			    cases[i].after, NULL);
		else
			req(&fx, &fx.a, CRUN_WIRE_LIST, 0, (uint32_t)i, cases[i].page, 0, NULL);
		want_page(&fx.rec, &fx.a, (uint32_t)i, cases[i].count, cases[i].first,
			  cases[i].last, cases[i].more);
		no_more_frames(&fx.rec);
	}
	fixture_stop(&fx);
}

/* Keys set and deleted between pages: the cursor is a key, so every key
 * present throughout is listed once, deleted ones are skipped, new ones
 * after the cursor are listed. */
static void test_list_pages_changing(void **state)
{
	struct fixture fx;

	(void)state;
	fixture_start(&fx, NULL);
	set_keys(&fx, 10);
	req(&fx, &fx.a, CRUN_WIRE_LIST, 0, 1, 4, 0, NULL);
	want_page(&fx.rec, &fx.a, 1, 4, "k00", "k03", 1);
	req(&fx, &fx.b, CRUN_WIRE_DELETE, 0, 2, 0, 0, "k03", NULL); /* the cursor itself */
	req(&fx, &fx.b, CRUN_WIRE_DELETE, 0, 3, 0, 0, "k04", NULL);
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 4, 0, 0, "a", "v", NULL);    /* before the cursor */
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 5, 0, 0, "k035", "v", NULL); /* after it */
	rec_clear(&fx.rec);
	req(&fx, &fx.a, CRUN_WIRE_LIST, 0, 6, 4, 0, "k03", NULL);
	want_page(&fx.rec, &fx.a, 6, 4, "k035", "k07", 1);
	req(&fx, &fx.b, CRUN_WIRE_DELETE, 0, 7, 0, 0, "k08", NULL);
	req(&fx, &fx.b, CRUN_WIRE_DELETE, 0, 8, 0, 0, "k09", NULL);
	rec_clear(&fx.rec);
	req(&fx, &fx.a, CRUN_WIRE_LIST, 0, 9, 4, 0, "k07", NULL);
	want_page(&fx.rec, &fx.a, 9, 0, NULL, NULL, 0);
	no_more_frames(&fx.rec);
	fixture_stop(&fx);
}

/* More keys than one frame lists: a plain LIST is refused with ENOBUFS,
 * pages hold at most CRUN_WIRE_MAX_ITEMS keys and COUNT counts them all. */
static void test_list_many(void **state)
{
	enum { N = CRUN_WIRE_MAX_ITEMS + 4464, BATCH = CRUN_WIRE_MAX_ITEMS / 2 };
	static char names[N][8];
	static struct crun__wire_item items[2 * BATCH];
	struct crun__wire_item after;
	struct fixture fx;
	char err[160];
	struct sent *s;

	(void)state;
	fixture_start(&fx, NULL);
	for (int i = 0; i < N; i += BATCH) {
		struct crun__wire_msg m = {CRUN_WIRE_MSET, 0, 1, 0, 0, items};

		for (int j = i; j < N && j < i + BATCH; j++) {
			snprintf(names[j], sizeof(names[j]), "%07u", (unsigned)j % 10000000);
			items[m.count].data = (const uint8_t *)names[j];
			items[m.count++].len = 7;
			items[m.count].data = (const uint8_t *)"v";
			items[m.count++].len = 1;
		}
		assert_int_equal(crun__wire_validate(&m, err, sizeof(err)), 0);
		assert_int_equal(crun__store_apply(fx.st, &fx.b, &m, 0), 0);
	}
	rec_clear(&fx.rec);
	req(&fx, &fx.a, CRUN_WIRE_COUNT, 0, 2, 0, 0, NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_INT, 2, N);
	req(&fx, &fx.a, CRUN_WIRE_LIST, 0, 3, 0, 0, NULL);
	want_error(&fx.rec, &fx.a, 3, ENOBUFS, "pages");
	req(&fx, &fx.a, CRUN_WIRE_LIST, 0, 4, (int64_t)N * 2, 0, NULL);
	s = next_frame(&fx.rec);
	assert_int_equal(s->count, CRUN_WIRE_MAX_ITEMS);
	assert_int_equal(s->num, 1);
	assert_string_equal(s->items[0], "0000000");
	after = (struct crun__wire_item){(const uint8_t *)names[CRUN_WIRE_MAX_ITEMS - 1], 7};
	{
		struct crun__wire_msg m = {CRUN_WIRE_LIST, 0, 5, CRUN_WIRE_MAX_ITEMS, 1, &after};

		assert_int_equal(crun__store_apply(fx.st, &fx.a, &m, 0), 0);
	}
	want_page(&fx.rec, &fx.a, 5, N - CRUN_WIRE_MAX_ITEMS, NULL, NULL, 0);
	no_more_frames(&fx.rec);
	fixture_stop(&fx);
}

/* Long keys: a page stops at CRUN_WIRE_LIST_PAGE_BYTES of items. */
static void test_list_page_bytes(void **state)
{
	enum { N = 300, LEN = 4000 };
	static char key[LEN + 1];
	uint32_t per_page = CRUN_WIRE_LIST_PAGE_BYTES / (4 + LEN);
	struct fixture fx;
	struct sent *s;

	(void)state;
	fixture_start(&fx, NULL);
	for (int i = 0; i < N; i++) {
		memset(key, 'x', LEN);
		snprintf(key, 8, "%05u", (unsigned)i % 100000);
		key[5] = 'x';
		req(&fx, &fx.b, CRUN_WIRE_SET, 0, 1, 0, 0, key, "v", NULL);
		rec_clear(&fx.rec);
	}
	rec_clear(&fx.rec);
	req(&fx, &fx.a, CRUN_WIRE_LIST, 0, 2, CRUN_WIRE_MAX_ITEMS, 0, NULL);
	s = next_frame(&fx.rec);
	assert_int_equal(s->type, CRUN_WIRE_VALUES);
	assert_int_equal(s->count, per_page);
	assert_int_equal(s->num, 1);
	fixture_stop(&fx);
}

/* LIST's number: a page size >= 0, and > 0 with an item. */
static void test_list_validate(void **state)
{
	struct crun__wire_item after = {(const uint8_t *)"k", 1};
	struct crun__wire_msg m = {CRUN_WIRE_LIST, 0, 1, 0, 1, &after};
	char err[160];

	(void)state;
	assert_int_equal(crun__wire_validate(&m, err, sizeof(err)), -EPROTO);
	m.num = -1;
	m.count = 0;
	assert_int_equal(crun__wire_validate(&m, err, sizeof(err)), -EPROTO);
	m.num = 5;
	assert_int_equal(crun__wire_validate(&m, err, sizeof(err)), 0);
	m.count = 1;
	assert_int_equal(crun__wire_validate(&m, err, sizeof(err)), 0);
}

/* ---- watches and ephemeral keys ---------------------------------------------- */

static void test_watch(void **state)
{
	struct fixture fx;

	(void)state;
	fixture_start(&fx, NULL);
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 50, 0, 0, "w", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 50, 0);
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 51, 0, 0, "eph", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 51, 0);

	/* the reply to the writer comes first, then the notice */
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 1, 0, 0, "w", "v1", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 1, 0);
	want_notify(&fx.rec, &fx.a, 50, CRUN_WIRE_EV_SET, "w", "v1");
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 2, 0, 0, "other", "x", NULL); /* not watched */
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 2, 0);
	req(&fx, &fx.b, CRUN_WIRE_ADD, 0, 3, 1, 0, "w", NULL); /* refused: no change */
	want_error(&fx.rec, &fx.b, 3, EINVAL, NULL);
	req(&fx, &fx.b, CRUN_WIRE_DELETE, 0, 4, 0, 0, "w", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_INT, 4, 1);
	want_notify(&fx.rec, &fx.a, 50, CRUN_WIRE_EV_DELETE, "w", "");
	req(&fx, &fx.b, CRUN_WIRE_ADD, 0, 5, 2, 0, "w", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_INT, 5, 2);
	want_notify(&fx.rec, &fx.a, 50, CRUN_WIRE_EV_SET, "w", "2");
	no_more_frames(&fx.rec);

	/* an ephemeral key goes with its owner, and watchers hear of it */
	req(&fx, &fx.b, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 6, 0, 0, "eph", "alive", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 6, 0);
	want_notify(&fx.rec, &fx.a, 51, CRUN_WIRE_EV_SET, "eph", "alive");
	crun__store_leave(fx.st, &fx.b);
	want_notify(&fx.rec, &fx.a, 51, CRUN_WIRE_EV_DELETE, "eph", "");
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 7, 0, 0, "eph", NULL);
	want_error(&fx.rec, &fx.a, 7, ENOENT, NULL);

	/* a plain SET takes the key over: the owner's exit no longer deletes it */
	assert_int_equal(crun__store_join(fx.st, &fx.b, (const uint8_t *)"run", 3), 0);
	req(&fx, &fx.b, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 8, 0, 0, "eph", "alive", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 8, 0);
	want_notify(&fx.rec, &fx.a, 51, CRUN_WIRE_EV_SET, "eph", "alive");
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 9, 0, 0, "eph", "kept", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 9, 0);
	want_notify(&fx.rec, &fx.a, 51, CRUN_WIRE_EV_SET, "eph", "kept");
	crun__store_leave(fx.st, &fx.b);
	no_more_frames(&fx.rec);
	/* so does MSET; and an ephemeral SET by another moves ownership */
	assert_int_equal(crun__store_join(fx.st, &fx.b, (const uint8_t *)"run", 3), 0);
	req(&fx, &fx.b, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 10, 0, 0, "e2", "b", NULL);
	req(&fx, &fx.a, CRUN_WIRE_MSET, 0, 11, 0, 0, "e2", "a", NULL);
	req(&fx, &fx.b, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 12, 0, 0, "e3", "b", NULL);
	req(&fx, &fx.a, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 13, 0, 0, "e3", "a", NULL);
	crun__store_leave(fx.st, &fx.b);
	assert_int_equal(crun__store_run_keys(&fx.a), 5); /* other w eph e2 e3 */
	rec_clear(&fx.rec);

	/* UNWATCH: no more notices; several watches of one key each notify */
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 52, 0, 0, "w", NULL);
	req(&fx, &fx.a, CRUN_WIRE_UNWATCH, 0, 14, 0, 0, "eph", NULL);
	rec_clear(&fx.rec);
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 15, 0, 0, "w", "two", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 15, 0);
	want_notify(&fx.rec, &fx.a, 50, CRUN_WIRE_EV_SET, "w", "two");
	want_notify(&fx.rec, &fx.a, 52, CRUN_WIRE_EV_SET, "w", "two");
	req(&fx, &fx.a, CRUN_WIRE_UNWATCH, 0, 16, 0, 0, "w", NULL); /* both go */
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 16, 0);
	assert_int_equal(fx.a.nsubs, 0);
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 17, 0, 0, "w", "quiet", NULL);
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 18, 0, 0, "eph", "quiet", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 17, 0);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 18, 0);
	no_more_frames(&fx.rec);
	fixture_stop(&fx);
}

/* A client that leaves takes its waits, watches and ephemeral keys along,
 * and a run lives while it has keys or clients. */
static void test_leave_cleans(void **state)
{
	struct fixture fx;
	static int round;

	(void)state;
	fixture_start(&fx, NULL);
	*crun__store_run_data(&fx.a) = &round;
	req(&fx, &fx.b, CRUN_WIRE_GET, 0, 1, 5000, 0, "never", NULL);
	req(&fx, &fx.b, CRUN_WIRE_WATCH, 0, 2, 0, 0, "w", NULL);
	req(&fx, &fx.b, CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 3, 0, 0, "mine", "x", NULL);
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 4, 0, 0, "kept", "x", NULL);
	assert_int_equal(fx.b.nsubs, 2);
	rec_clear(&fx.rec);
	crun__store_detach(fx.st, &fx.b); /* detach keeps b in its run */
	assert_non_null(crun__store_run_id(&fx.b, NULL));
	assert_int_equal(fx.b.nsubs, 0);
	assert_int_equal(fx.b.sub_bytes, 0);
	assert_int_equal(crun__store_next_deadline(fx.st), UINT64_MAX);
	crun__store_leave(fx.st, &fx.b);
	assert_null(crun__store_run_id(&fx.b, NULL));
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 5, 0, 0, "never", "now", NULL);
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 6, 0, 0, "w", "now", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 5, 0);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 6, 0);
	no_more_frames(&fx.rec);
	assert_int_equal(crun__store_run_keys(&fx.a), 3); /* never w kept; not mine */

	/* the run outlives its clients while it holds keys */
	crun__store_leave(fx.st, &fx.a);
	assert_int_equal(fx.rec.nfreed, 0);
	assert_int_equal(crun__store_join(fx.st, &fx.a, (const uint8_t *)"run", 3), 0);
	assert_ptr_equal(*crun__store_run_data(&fx.a), &round);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 7, 0, 0, "kept", NULL);
	want_value(&fx.rec, &fx.a, 7, 0, "x");
	/* and is freed, its data handed back, once it has neither */
	for (const char *const *k = (const char *const[]){"never", "w", "kept", NULL}; *k; k++)
		req(&fx, &fx.a, CRUN_WIRE_DELETE, 0, 8, 0, 0, *k, NULL);
	crun__store_leave(fx.st, &fx.a);
	assert_int_equal(fx.rec.nfreed, 1);
	assert_ptr_equal(fx.rec.freed[0], &round);
	assert_int_equal(crun__store_join(fx.st, &fx.a, (const uint8_t *)"run", 3), 0);
	assert_null(*crun__store_run_data(&fx.a));
	assert_int_equal(crun__store_run_keys(&fx.a), 0);
	fixture_stop(&fx);
}

static void test_runs_isolated(void **state)
{
	struct fixture fx;
	struct crun__store_client c;
	uint32_t len;

	(void)state;
	fixture_start(&fx, NULL);
	crun__store_client_init(&c, "c");
	assert_null(crun__store_run_id(&c, &len));
	assert_int_equal(len, 0);
	assert_int_equal(crun__store_join(fx.st, &c, (const uint8_t *)"other", 5), 0);
	assert_string_equal(crun__store_run_id(&c, &len), "other");
	assert_int_equal(len, 5);
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 1, 0, 0, "shared", NULL);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 2, 1000, 0, "shared", NULL);
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 3, 0, 0, "only-a", "x", NULL);
	rec_clear(&fx.rec);
	req(&fx, &c, CRUN_WIRE_SET, 0, 4, 0, 0, "shared", "from c", NULL);
	want(&fx.rec, &c, CRUN_WIRE_OK, 4, 0); /* no notice, no wake in "run" */
	no_more_frames(&fx.rec);
	req(&fx, &c, CRUN_WIRE_GET, 0, 5, 0, 0, "only-a", NULL);
	want_error(&fx.rec, &c, 5, ENOENT, NULL);
	req(&fx, &c, CRUN_WIRE_COUNT, 0, 6, 0, 0, NULL);
	want(&fx.rec, &c, CRUN_WIRE_INT, 6, 1);
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 7, 0, 0, "shared", "from b", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 7, 0);
	want_notify(&fx.rec, &fx.a, 1, CRUN_WIRE_EV_SET, "shared", "from b");
	want_value(&fx.rec, &fx.a, 2, 0, "from b");
	req(&fx, &c, CRUN_WIRE_GET, 0, 8, 0, 0, "shared", NULL);
	want_value(&fx.rec, &c, 8, 0, "from c");
	crun__store_leave(fx.st, &c);
	fixture_stop(&fx);
}

/* Clearing a run deletes its keys as DELETE does (watchers told, waiters
 * wait on), leaves other runs alone, and frees a run nobody is in. */
static void test_clear_run(void **state)
{
	struct fixture fx;
	struct crun__store_client c;

	(void)state;
	fixture_start(&fx, NULL);
	crun__store_client_init(&c, "c");
	assert_int_equal(crun__store_join(fx.st, &c, (const uint8_t *)"other", 5), 0);
	set_keys(&fx, 40);
	req(&fx, &c, CRUN_WIRE_SET, 0, 1, 0, 0, "k00", "kept", NULL);
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 2, 0, 0, "k07", NULL);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 3, 5000, 0, "gone-then-back", NULL);
	rec_clear(&fx.rec);
	assert_int_equal(crun__store_clear_run(fx.st, (const uint8_t *)"run", 3), 40);
	want_notify(&fx.rec, &fx.a, 2, CRUN_WIRE_EV_DELETE, "k07", "");
	no_more_frames(&fx.rec);
	req(&fx, &fx.b, CRUN_WIRE_COUNT, 0, 4, 0, 0, NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_INT, 4, 0);
	req(&fx, &c, CRUN_WIRE_GET, 0, 5, 0, 0, "k00", NULL);
	want_value(&fx.rec, &c, 5, 0, "kept");
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 6, 0, 0, "gone-then-back", "v", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 6, 0);
	want_value(&fx.rec, &fx.a, 3, 0, "v");
	assert_int_equal(crun__store_clear_run(fx.st, (const uint8_t *)"nope", 4), 0);
	/* A run with keys and no client is freed by the clear. */
	crun__store_leave(fx.st, &c);
	assert_int_equal(crun__store_clear_run(fx.st, (const uint8_t *)"other", 5), 1);
	assert_int_equal(crun__store_clear_run(fx.st, (const uint8_t *)"other", 5), 0);
	fixture_stop(&fx);
}

/* ---- queues --------------------------------------------------------------------- */

static void want_int(struct rec *r, struct crun__store_client *to, uint32_t id, int64_t num)
{
	want(r, to, CRUN_WIRE_INT, id, num);
}

/* PUSH, POP and LEN: first in first out, POP's num the length before it,
 * and the queues apart from the keys. */
static void test_queues(void **state)
{
	struct fixture fx;

	(void)state;
	fixture_start(&fx, NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_LEN, 0, 1, 0, 0, "q", NULL);
	want_int(&fx.rec, &fx.a, 1, 0);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 2, 0, 0, "q", NULL);
	want_int(&fx.rec, &fx.a, 2, 0);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 3, 0, 0, "q", "first", NULL);
	req(&fx, &fx.b, CRUN_WIRE_QUEUE_PUSH, 0, 4, 0, 0, "q", "", NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 5, 0, 0, "q", "third", NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 6, 0, 0, "other", "x", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 3, 0);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 4, 0);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 5, 0);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 6, 0);
	req(&fx, &fx.b, CRUN_WIRE_QUEUE_LEN, 0, 7, 0, 0, "q", NULL);
	want_int(&fx.rec, &fx.b, 7, 3);
	/* keys do not see queues, but CHECK and WAIT do */
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 8, 0, 0, "q", NULL);
	want_error(&fx.rec, &fx.a, 8, ENOENT, NULL);
	req(&fx, &fx.a, CRUN_WIRE_MGET, 0, 9, 0, 0, "q", NULL);
	want_error(&fx.rec, &fx.a, 9, ENOENT, NULL);
	req(&fx, &fx.a, CRUN_WIRE_COUNT, 0, 10, 0, 0, NULL);
	want_int(&fx.rec, &fx.a, 10, 0);
	assert_int_equal(crun__store_run_keys(&fx.a), 0);
	req(&fx, &fx.a, CRUN_WIRE_LIST, 0, 11, 0, 0, NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_VALUES, 11, 0);
	req(&fx, &fx.a, CRUN_WIRE_DELETE, 0, 12, 0, 0, "q", NULL);
	want_int(&fx.rec, &fx.a, 12, 0);
	req(&fx, &fx.a, CRUN_WIRE_CHECK, 0, 13, 0, 0, "q", "other", NULL);
	want_int(&fx.rec, &fx.a, 13, 1);
	req(&fx, &fx.a, CRUN_WIRE_WAIT, 0, 14, 1000, 0, "q", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 14, 0);
	/* a key of the queue's name is another thing */
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 15, 0, 0, "q", "key", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 15, 0);
	/* FIFO; num = the length before the pop */
	req(&fx, &fx.b, CRUN_WIRE_QUEUE_POP, 0, 16, 0, 0, "q", NULL);
	want_value(&fx.rec, &fx.b, 16, 3, "first");
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 17, 0, 0, "q", NULL);
	want_value(&fx.rec, &fx.a, 17, 2, "");
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 18, 0, 0, "q", NULL);
	want_value(&fx.rec, &fx.a, 18, 1, "third");
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 19, 0, 0, "q", NULL);
	want_int(&fx.rec, &fx.a, 19, 0);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_LEN, 0, 20, 0, 0, "q", NULL);
	want_int(&fx.rec, &fx.a, 20, 0);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 21, 0, 0, "q", NULL);
	want_value(&fx.rec, &fx.a, 21, 0, "key");
	req(&fx, &fx.a, CRUN_WIRE_DELETE, 0, 22, 0, 0, "q", NULL);
	want_int(&fx.rec, &fx.a, 22, 1);
	/* an emptied queue is no present key */
	req(&fx, &fx.a, CRUN_WIRE_CHECK, 0, 23, 0, 0, "q", NULL);
	want_int(&fx.rec, &fx.a, 23, 0);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_LEN, 0, 24, 0, 0, "other", NULL);
	want_int(&fx.rec, &fx.a, 24, 1);
	no_more_frames(&fx.rec);
	fixture_stop(&fx); /* "other" still queued: freed with the store */
}

/* A push answers one WAIT that waits for its key and has all its keys
 * then (of two waiting for it alone, the first); GET and MGET go on
 * waiting for a key. */
static void test_queue_wakes(void **state)
{
	struct fixture fx;
	struct crun__store_client c;

	(void)state;
	fixture_start(&fx, NULL);
	crun__store_client_init(&c, "c");
	assert_int_equal(crun__store_join(fx.st, &c, (const uint8_t *)"run", 3), 0);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 1, 5000, 0, "q", NULL);
	req(&fx, &c, CRUN_WIRE_WAIT, 0, 2, 5000, 0, "q", "k", NULL);
	req(&fx, &fx.b, CRUN_WIRE_WAIT, 0, 3, 5000, 0, "q", NULL);
	req(&fx, &fx.a, CRUN_WIRE_WAIT, 0, 4, 5000, 0, "q", NULL);
	no_more_frames(&fx.rec);
	/* the GET waits for a key; c's WAIT for k too: b's WAIT is first */
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 5, 0, 10, "q", "v1", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 5, 0);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 3, 0);
	no_more_frames(&fx.rec);
	req(&fx, &fx.b, CRUN_WIRE_QUEUE_POP, 0, 6, 0, 20, "q", NULL);
	want_value(&fx.rec, &fx.b, 6, 1, "v1");
	/* the next push: a's WAIT */
	req(&fx, &fx.b, CRUN_WIRE_QUEUE_PUSH, 0, 7, 0, 30, "q", "v2", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 7, 0);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 4, 0);
	no_more_frames(&fx.rec);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 8, 0, 40, "q", NULL);
	want_value(&fx.rec, &fx.a, 8, 1, "v2");
	/* with k set, c's WAIT is complete once something is queued */
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 9, 0, 50, "k", "1", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 9, 0);
	no_more_frames(&fx.rec);
	req(&fx, &fx.b, CRUN_WIRE_QUEUE_PUSH, 0, 10, 0, 60, "q", "v3", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 10, 0);
	want(&fx.rec, &c, CRUN_WIRE_OK, 2, 0);
	no_more_frames(&fx.rec);
	/* nobody waits but the GET: a push answers nothing more */
	req(&fx, &fx.b, CRUN_WIRE_QUEUE_PUSH, 0, 11, 0, 65, "q", "v4", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 11, 0);
	no_more_frames(&fx.rec);
	/* a SET of the key answers the GET; a WAIT on a queued key at once */
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 12, 0, 70, "q", "key", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 12, 0);
	want_value(&fx.rec, &fx.a, 1, 0, "key");
	req(&fx, &fx.b, CRUN_WIRE_DELETE, 0, 15, 0, 80, "q", NULL);
	want_int(&fx.rec, &fx.b, 15, 1);
	req(&fx, &c, CRUN_WIRE_WAIT, 0, 13, 5000, 90, "q", NULL);
	want(&fx.rec, &c, CRUN_WIRE_OK, 13, 0);
	/* a WAIT on an empty queue times out as any WAIT */
	req(&fx, &c, CRUN_WIRE_WAIT, 0, 14, 100, 100, "empty", NULL);
	crun__store_expire(fx.st, 200);
	want_error(&fx.rec, &c, 14, ETIMEDOUT, "'empty'");
	no_more_frames(&fx.rec);
	assert_int_equal(crun__store_next_deadline(fx.st), UINT64_MAX);
	crun__store_leave(fx.st, &c);
	fixture_stop(&fx);
}

/* Queued values count against max_keys_per_run with the keys; each is at
 * most max_value_size; popping makes room; a value too large for the
 * edge stays queued. */
static void test_queue_limits(void **state)
{
	struct crun__store_limits l;
	struct fixture fx;
	char key17[18], val65[66];

	(void)state;
	default_limits(&l);
	l.max_key_size = 16;
	l.max_value_size = 64;
	l.max_keys_per_run = 3;
	fixture_start(&fx, &l);
	memset(key17, 'k', 17);
	key17[17] = '\0';
	memset(val65, 'v', 65);
	val65[65] = '\0';
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 1, 0, 0, key17, "v", NULL);
	want_error(&fx.rec, &fx.a, 1, E2BIG, "key of 17 bytes");
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 2, 0, 0, key17, NULL);
	want_error(&fx.rec, &fx.a, 2, E2BIG, NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 3, 0, 0, "q", val65, NULL);
	want_error(&fx.rec, &fx.a, 3, E2BIG, "value of 65 bytes");
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 4, 0, 0, "k", "v", NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 5, 0, 0, "q", "1", NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 6, 0, 0, "r", "2", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 4, 0);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 5, 0);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 6, 0);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 7, 0, 0, "q", "3", NULL);
	want_error(&fx.rec, &fx.a, 7, ENOSPC, "holds the limit of 3 keys and queued values");
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 8, 0, 0, "k2", "v", NULL);
	want_error(&fx.rec, &fx.a, 8, ENOSPC, NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 9, 0, 0, "r", NULL);
	want_value(&fx.rec, &fx.a, 9, 1, "2");
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 10, 0, 0, "k2", "v", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 10, 0);
	/* a value the edge cannot send: ENOBUFS, and it stays first */
	fx.rec.max_frame = 0;
	req(&fx, &fx.a, CRUN_WIRE_DELETE, 0, 11, 0, 0, "k2", NULL);
	want_int(&fx.rec, &fx.a, 11, 1);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 12, 0, 0, "q", "a longer value", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 12, 0);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 13, 0, 0, "q", NULL);
	want_value(&fx.rec, &fx.a, 13, 2, "1");
	fx.rec.max_frame = 4;
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 14, 0, 0, "q", NULL);
	want_error(&fx.rec, &fx.a, 14, ENOBUFS, NULL);
	fx.rec.max_frame = 0;
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_POP, 0, 15, 0, 0, "q", NULL);
	want_value(&fx.rec, &fx.a, 15, 1, "a longer value");
	no_more_frames(&fx.rec);
	fixture_stop(&fx);
}

/* A run with queued values outlives its clients; clearing it drops its
 * queues and frees it. */
static void test_queue_runs(void **state)
{
	static int marker;
	struct fixture fx;
	struct crun__store_client c;

	(void)state;
	fixture_start(&fx, NULL);
	crun__store_client_init(&c, "c");
	assert_int_equal(crun__store_join(fx.st, &c, (const uint8_t *)"qrun", 4), 0);
	*crun__store_run_data(&c) = &marker;
	req(&fx, &c, CRUN_WIRE_QUEUE_PUSH, 0, 1, 0, 0, "q", "v", NULL);
	crun__store_leave(fx.st, &c);
	assert_int_equal(fx.rec.nfreed, 0);
	/* back in the run: the value is there; popped, the run goes */
	assert_int_equal(crun__store_join(fx.st, &c, (const uint8_t *)"qrun", 4), 0);
	req(&fx, &c, CRUN_WIRE_QUEUE_POP, 0, 2, 0, 0, "q", NULL);
	crun__store_leave(fx.st, &c);
	assert_int_equal(fx.rec.nfreed, 1);
	assert_ptr_equal(fx.rec.freed[0], &marker);
	/* clear: keys and queued values gone, waiters wait on */
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 3, 0, 0, "k", "v", NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 4, 0, 0, "q", "1", NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 5, 0, 0, "q", "2", NULL);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 6, 0, 0, "r", "3", NULL);
	rec_clear(&fx.rec);
	req(&fx, &fx.b, CRUN_WIRE_WAIT, 0, 7, 5000, 0, "k", "q", "r", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 7, 0);
	req(&fx, &fx.b, CRUN_WIRE_WAIT, 0, 8, 5000, 0, "gone", NULL);
	assert_int_equal(crun__store_clear_run(fx.st, (const uint8_t *)"run", 3), 4);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_LEN, 0, 9, 0, 0, "q", NULL);
	want_int(&fx.rec, &fx.a, 9, 0);
	req(&fx, &fx.a, CRUN_WIRE_CHECK, 0, 10, 0, 0, "r", NULL);
	want_int(&fx.rec, &fx.a, 10, 0);
	req(&fx, &fx.a, CRUN_WIRE_QUEUE_PUSH, 0, 11, 0, 0, "gone", "x", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 11, 0);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 8, 0);
	/* a run held by queued values alone is freed by the clear */
	assert_int_equal(crun__store_join(fx.st, &c, (const uint8_t *)"qrun", 4), 0);
	*crun__store_run_data(&c) = &marker;
	req(&fx, &c, CRUN_WIRE_QUEUE_PUSH, 0, 12, 0, 0, "q", "v", NULL);
	req(&fx, &c, CRUN_WIRE_QUEUE_PUSH, 0, 13, 0, 0, "q", "w", NULL);
	crun__store_leave(fx.st, &c);
	assert_int_equal(fx.rec.nfreed, 1);
	assert_int_equal(crun__store_clear_run(fx.st, (const uint8_t *)"qrun", 4), 2);
	assert_int_equal(fx.rec.nfreed, 2);
	assert_int_equal(crun__store_clear_run(fx.st, (const uint8_t *)"qrun", 4), 0);
	fixture_stop(&fx);
}

/* ---- limits and refusals ------------------------------------------------------ */

static void test_limits(void **state)
{
	struct crun__store_limits l;
	struct fixture fx;
	char key17[18], val65[66];

	(void)state;
	default_limits(&l);
	l.max_key_size = 16;
	l.max_value_size = 64;
	l.max_keys_per_run = 3;
	fixture_start(&fx, &l);
	memset(key17, 'k', 17);
	key17[17] = '\0';
	memset(val65, 'v', 65);
	val65[65] = '\0';

	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 1, 0, 0, key17, "v", NULL);
	want_error(&fx.rec, &fx.a, 1, E2BIG, "key of 17 bytes exceeds the limit of 16 bytes");
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 2, 0, 0, key17, NULL);
	want_error(&fx.rec, &fx.a, 2, E2BIG, NULL);
	req(&fx, &fx.a, CRUN_WIRE_MGET, 0, 3, 0, 0, "ok", key17, NULL);
	want_error(&fx.rec, &fx.a, 3, E2BIG, NULL);
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 4, 0, 0, "k", val65, NULL);
	want_error(&fx.rec, &fx.a, 4, E2BIG, "value of 65 bytes exceeds the limit of 64");
	req(&fx, &fx.a, CRUN_WIRE_CAS, 0, 5, 0, 0, "k", "", val65, NULL);
	want_error(&fx.rec, &fx.a, 5, E2BIG, NULL);
	req(&fx, &fx.a, CRUN_WIRE_MSET, 0, 6, 0, 0, "m1", "ok", "m2", val65, NULL);
	want_error(&fx.rec, &fx.a, 6, E2BIG, NULL);
	req(&fx, &fx.a, CRUN_WIRE_MSET, 0, 7, 0, 0, "m1", "ok", key17, "v", NULL);
	want_error(&fx.rec, &fx.a, 7, E2BIG, NULL);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 8, 0, 0, "m1", NULL); /* all or nothing */
	want_error(&fx.rec, &fx.a, 8, ENOENT, NULL);
	val65[40] = '\0';
	req(&fx, &fx.a, CRUN_WIRE_APPEND, 0, 9, 0, 0, "ap", val65, NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 9, 0);
	req(&fx, &fx.a, CRUN_WIRE_APPEND, 0, 10, 0, 0, "ap", val65, NULL); /* 80 > 64 */
	want_error(&fx.rec, &fx.a, 10, E2BIG, "value of 80 bytes");
	no_more_frames(&fx.rec);

	/* keys per run: ap, k2, k3 fill it */
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 11, 0, 0, "k2", "v", NULL);
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 12, 0, 0, "k3", "v", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 11, 0);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 12, 0);
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 13, 0, 0, "k4", "v", NULL);
	want_error(&fx.rec, &fx.a, 13, ENOSPC, "run 'run' holds the limit of 3 keys");
	req(&fx, &fx.a, CRUN_WIRE_MSET, 0, 14, 0, 0, "k2", "x", "k5", "y", NULL);
	want_error(&fx.rec, &fx.a, 14, ENOSPC, NULL);
	req(&fx, &fx.a, CRUN_WIRE_ADD, 0, 15, 1, 0, "k6", NULL);
	want_error(&fx.rec, &fx.a, 15, ENOSPC, NULL);
	req(&fx, &fx.a, CRUN_WIRE_APPEND, 0, 16, 0, 0, "k7", "v", NULL);
	want_error(&fx.rec, &fx.a, 16, ENOSPC, NULL);
	req(&fx, &fx.a, CRUN_WIRE_CAS, 0, 17, 0, 0, "k8", "", "v", NULL);
	want_error(&fx.rec, &fx.a, 17, ENOSPC, NULL);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 18, 0, 0, "k2", NULL);
	want_value(&fx.rec, &fx.a, 18, 0, "v");
	/* an overwrite is fine; an MSET of existing keys too */
	req(&fx, &fx.a, CRUN_WIRE_SET, 0, 19, 0, 0, "k2", "overwrite is fine", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 19, 0);
	req(&fx, &fx.a, CRUN_WIRE_MSET, 0, 20, 0, 0, "k2", "x", "k3", "y", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 20, 0);
	no_more_frames(&fx.rec);
	/* refusals are counted per client (for the log) */
	assert_true(fx.a.nrefused >= 10);
	assert_int_equal(fx.b.nrefused, 0);
	fixture_stop(&fx);
}

static void test_sub_limits(void **state)
{
	struct crun__store_limits l;
	struct fixture fx;

	(void)state;
	default_limits(&l);
	l.max_sub_bytes = 10;
	fixture_start(&fx, &l);
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 1, 0, 0, "abcd", NULL);
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 2, 1000, 0, "efgh", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 1, 0);
	assert_int_equal(fx.a.sub_bytes, 8);
	req(&fx, &fx.a, CRUN_WIRE_WAIT, 0, 3, 1000, 0, "ij", "k", NULL);
	want_error(&fx.rec, &fx.a, 3, ENOBUFS, "would hold more than 10 bytes of keys");
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 4, 0, 0, "ijk", NULL);
	want_error(&fx.rec, &fx.a, 4, ENOBUFS, NULL);
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 5, 0, 0, "ij", NULL); /* exactly 10 */
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 5, 0);
	/* b has its own budget */
	req(&fx, &fx.b, CRUN_WIRE_WATCH, 0, 6, 0, 0, "abcdefghij", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 6, 0);
	/* freed room can be used again */
	req(&fx, &fx.a, CRUN_WIRE_UNWATCH, 0, 7, 0, 0, "abcd", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 7, 0);
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 8, 0, 0, "wxyz", NULL);
	want(&fx.rec, &fx.a, CRUN_WIRE_OK, 8, 0);
	no_more_frames(&fx.rec);
	fixture_stop(&fx);

	/* and at most CRUN__STORE_MAX_SUBS waits and watches, whatever their size */
	default_limits(&l);
	fixture_start(&fx, &l);
	for (uint32_t i = 0; i < CRUN__STORE_MAX_SUBS; i++) {
		req(&fx, &fx.a, i % 2 ? CRUN_WIRE_WATCH : CRUN_WIRE_GET, 0, i, i % 2 ? 0 : 1000, 0,
		    "k", NULL);
		if (fx.rec.n > MAX_FRAMES / 2)
			rec_clear(&fx.rec);
	}
	rec_clear(&fx.rec);
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 1, 0, 0, "k", NULL);
	want_error(&fx.rec, &fx.a, 1, ENOSPC, "too many waits and watches");
	req(&fx, &fx.a, CRUN_WIRE_GET, 0, 2, 1000, 0, "k", NULL);
	want_error(&fx.rec, &fx.a, 2, ENOSPC, NULL);
	no_more_frames(&fx.rec);
	crun__store_leave(fx.st, &fx.a);
	assert_int_equal(crun__store_next_deadline(fx.st), UINT64_MAX);
	fixture_stop(&fx);
}

/* A reply the edge cannot carry becomes an ENOBUFS error; a NOTIFY it
 * cannot carry costs the watcher its connection. */
static void test_too_big_for_edge(void **state)
{
	struct fixture fx;

	(void)state;
	fixture_start(&fx, NULL);
	req(&fx, &fx.a, CRUN_WIRE_WATCH, 0, 1, 0, 0, "big", NULL);
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 2, 0, 0, "big", "0123456789abcdef", NULL);
	rec_clear(&fx.rec);
	fx.rec.max_frame = 10;
	req(&fx, &fx.b, CRUN_WIRE_GET, 0, 3, 0, 0, "big", NULL);
	want_error(&fx.rec, &fx.b, 3, ENOBUFS, "reply too large");
	req(&fx, &fx.b, CRUN_WIRE_MGET, 0, 4, 0, 0, "big", NULL);
	want_error(&fx.rec, &fx.b, 4, ENOBUFS, NULL);
	req(&fx, &fx.b, CRUN_WIRE_LIST, 0, 5, 0, 0, NULL);
	{
		struct sent *s = next_frame(&fx.rec);

		assert_int_equal(s->type, CRUN_WIRE_VALUES); /* "big" fits */
	}
	req(&fx, &fx.b, CRUN_WIRE_SET, 0, 6, 0, 0, "big", "0123456789abcdefg", NULL);
	want(&fx.rec, &fx.b, CRUN_WIRE_OK, 6, 0);
	no_more_frames(&fx.rec);
	assert_int_equal(fx.rec.ndropped, 1);
	assert_ptr_equal(fx.rec.dropped[0], &fx.a);
	fixture_stop(&fx);
}

/* ---- lifecycle and helpers ----------------------------------------------------- */

/* Destroying a busy store sends nothing and leaks nothing (ASan checks). */
static void test_destroy_busy(void **state)
{
	struct crun__store_limits l;
	struct crun__store *st;
	struct rec rec = {0};
	struct crun__store_client c[3];
	static int data;

	(void)state;
	default_limits(&l);
	st = crun__store_create(&l, 7, &rec_ops, &rec);
	assert_non_null(st);
	for (int i = 0; i < 3; i++) {
		struct crun__wire_item k[2] = {{(const uint8_t *)"key", 3},
					       {(const uint8_t *)"v", 1}};
		struct crun__wire_msg get = {CRUN_WIRE_GET, 0, 1, 1000, 1, k};
		struct crun__wire_msg watch = {CRUN_WIRE_WATCH, 0, 2, 0, 1, k};
		struct crun__wire_msg eph = {CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 3, 0, 2, k};

		crun__store_client_init(&c[i], "c");
		k[0].data = (const uint8_t *)(i == 2 ? "r2" : "r1");
		k[0].len = 2;
		assert_int_equal(crun__store_join(st, &c[i], k[0].data, 2), 0);
		k[0].data = (const uint8_t *)"key";
		k[0].len = 3;
		assert_int_equal(crun__store_apply(st, &c[i], &watch, 0), 0);
		assert_int_equal(crun__store_apply(st, &c[i], &get, 0), 0);
		k[0].data = (const uint8_t *)"eph";
		assert_int_equal(crun__store_apply(st, &c[i], &eph, 0), 0);
	}
	*crun__store_run_data(&c[0]) = &data;
	rec_clear(&rec);
	crun__store_destroy(st);
	assert_int_equal(rec.n, 0);
	assert_int_equal(rec.nfreed, 1);
	assert_ptr_equal(rec.freed[0], &data);
	crun__store_destroy(NULL);
}

static void test_show(void **state)
{
	static const struct {
		const char *in;
		size_t len;
		const char *want;
	} cases[] = {
		{"plain", 5, "plain"},
		{"a\\b'c", 5, "a\\x5cb\\x27c"},
		{"\x00\x01\xff", 3, "\\x00\\x01\\xff"},
		{"", 0, ""},
		{"0123456789012345678901234567890123456789012345678901234567890123456789", 70,
		 "0123456789012345678901234567890123456789012345678901234567890123..."},
	};
	char out[300], tiny[8];

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(cases); i++)
		assert_string_equal(crun__store_show(out, sizeof(out), (const uint8_t *)cases[i].in,
						     cases[i].len),
				    cases[i].want);
	/* a small buffer is never overrun */
	assert_true(strlen(crun__store_show(tiny, sizeof(tiny), (const uint8_t *)"\xff\xff\xff",
					    3)) < sizeof(tiny));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_operations),
		cmocka_unit_test(test_binary),
		cmocka_unit_test(test_not_store_requests),
		cmocka_unit_test(test_waiters_woken),
		cmocka_unit_test(test_waiter_timeouts),
		cmocka_unit_test(test_waiter_heap),
		cmocka_unit_test(test_mget_many),
		cmocka_unit_test(test_list_pages),
		cmocka_unit_test(test_list_pages_changing),
		cmocka_unit_test(test_list_many),
		cmocka_unit_test(test_list_page_bytes),
		cmocka_unit_test(test_list_validate),
		cmocka_unit_test(test_watch),
		cmocka_unit_test(test_leave_cleans),
		cmocka_unit_test(test_runs_isolated),
		cmocka_unit_test(test_clear_run),
		cmocka_unit_test(test_queues),
		cmocka_unit_test(test_queue_wakes),
		cmocka_unit_test(test_queue_limits),
		cmocka_unit_test(test_queue_runs),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_sub_limits),
		cmocka_unit_test(test_too_big_for_edge),
		cmocka_unit_test(test_destroy_busy),
		cmocka_unit_test(test_show),
	};

	crun__log_init("test_store", CRUN_LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Wire codec: every frame type round-trips, the decoder is incremental and
 * refuses every malformed frame with the right error, validate enforces the
 * per-type rules of wire.h, preambles and the HELLO mac. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "rendezvous/wire.h"

#define MAXP (1u << 20)

static struct crun__wire_item it(const void *data, size_t len)
{
	struct crun__wire_item i = {data, (uint32_t)len};

	return i;
}

static struct crun__wire_item its(const char *s)
{
	return it(s, strlen(s));
}

static struct crun__wire_msg mk(uint8_t type, uint8_t flags, uint32_t id, int64_t num,
				struct crun__wire_item *items, uint32_t count)
{
	struct crun__wire_msg m = {type, flags, id, num, count, items};

	return m;
}

/* Encodes m into a fresh buffer; *size gets the encoded size. */
static uint8_t *encode(const struct crun__wire_msg *m, size_t *size)
{
	size_t n = crun__wire_encoded_size(m);
	uint8_t *buf = malloc(n);

	assert_non_null(buf);
	assert_int_equal(crun__wire_encode(m, buf), n);
	*size = n;
	return buf;
}

static void assert_same_msg(const struct crun__wire_msg *a, const struct crun__wire_msg *b)
{
	assert_int_equal(a->type, b->type);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->id, b->id);
	assert_true(a->num == b->num);
	assert_int_equal(a->count, b->count);
	for (uint32_t i = 0; i < a->count; i++) {
		assert_int_equal(a->items[i].len, b->items[i].len);
		if (a->items[i].len)
			assert_memory_equal(a->items[i].data, b->items[i].data, a->items[i].len);
	}
}

/* Encode, decode, compare, validate; returns validate's result. */
static int roundtrip(const struct crun__wire_msg *m)
{
	struct crun__wire_item store[16];
	struct crun__wire_msg out;
	uint32_t cap = 16;
	char err[256] = "";
	size_t n;
	uint8_t *buf = encode(m, &n);
	long rc;
	int vrc;

	rc = crun__wire_decode(buf, n, MAXP, &out, store, &cap, err, sizeof(err));
	assert_int_equal(rc, (long)n);
	assert_same_msg(m, &out);
	vrc = crun__wire_validate(&out, err, sizeof(err));
	free(buf);
	return vrc;
}

static const uint8_t nonce_a[32] = {1,	2,  3,	4,  5,	6,  7,	8,  9,	10, 11, 12, 13, 14, 15, 16,
				    17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 0};
static const uint8_t bin[] = {'a', 0, 'b', 0, 0, 0xff, 0x80, '\n'};

static void test_requests_roundtrip(void **state)
{
	uint8_t mac[32];
	struct crun__wire_item hello[3] = {its("job-1"), it(nonce_a, 32), it(mac, 32)};
	struct crun__wire_item hello_noauth[3] = {its("job-1"), it(nonce_a, 32), it(NULL, 0)};
	struct crun__wire_item kv[2] = {its("key"), it(bin, sizeof(bin))};
	struct crun__wire_item kempty[2] = {its("key"), it(NULL, 0)};
	struct crun__wire_item bkey[1] = {it(bin, sizeof(bin))};
	struct crun__wire_item keys[3] = {its("a"), its("bb"), its("ccc")};
	struct crun__wire_item cas[3] = {its("k"), its("old"), it(bin, sizeof(bin))};
	struct crun__wire_item cas_absent[3] = {its("k"), it(NULL, 0), its("new")};
	struct crun__wire_item mset[4] = {its("k1"), it(bin, sizeof(bin)), its("k2"), it(NULL, 0)};
	struct crun__wire_item ping[1] = {it(bin, sizeof(bin))};
	struct crun__wire_item join[10] = {its("host-a:42:0badf00d"),
					   its("host-a"),
					   it(NULL, 0),
					   its("8"),
					   its("-1"),
					   its("2"),
					   its("4"),
					   its("30000"),
					   its("15000"),
					   its("3")};
	struct crun__wire_item fail[1] = {its("rank 5 (local 1) on host-b exited with status 1")};
	struct crun__wire_item fail_empty[1] = {it(NULL, 0)};
	struct crun__wire_msg reqs[] = {
		mk(CRUN_WIRE_HELLO, 0, 1, 0, hello, 3),
		mk(CRUN_WIRE_HELLO, 0, 0, 0, hello_noauth, 3),
		mk(CRUN_WIRE_SET, 0, 2, 0, kv, 2),
		mk(CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 3, 0, kempty, 2),
		mk(CRUN_WIRE_GET, 0, 4, 0, bkey, 1),
		mk(CRUN_WIRE_GET, 0, 5, 30000, keys, 1),
		mk(CRUN_WIRE_GET, 0, UINT32_MAX, INT64_MAX, keys, 1),
		mk(CRUN_WIRE_CHECK, 0, 6, 0, keys, 3),
		mk(CRUN_WIRE_CHECK, 0, 6, 0, keys, 1),
		mk(CRUN_WIRE_WAIT, 0, 7, 1, keys, 3),
		mk(CRUN_WIRE_ADD, 0, 8, -5, keys, 1),
		mk(CRUN_WIRE_ADD, 0, 8, INT64_MIN, keys, 1),
		mk(CRUN_WIRE_CAS, 0, 9, 0, cas, 3),
		mk(CRUN_WIRE_CAS, CRUN_WIRE_FL_EXPECT_ABSENT, 10, 0, cas_absent, 3),
		mk(CRUN_WIRE_DELETE, 0, 11, 0, keys, 1),
		mk(CRUN_WIRE_APPEND, 0, 12, 0, kv, 2),
		mk(CRUN_WIRE_COUNT, 0, 13, 0, NULL, 0),
		mk(CRUN_WIRE_MGET, 0, 14, 0, keys, 3),
		mk(CRUN_WIRE_MGET, 0, 14, 250, keys, 2),
		mk(CRUN_WIRE_MSET, 0, 15, 0, mset, 4),
		mk(CRUN_WIRE_LIST, 0, 16, 0, NULL, 0),
		mk(CRUN_WIRE_PING, 0, 17, 0, NULL, 0),
		mk(CRUN_WIRE_PING, 0, 18, 0, ping, 1),
		mk(CRUN_WIRE_WATCH, 0, 19, 0, keys, 1),
		mk(CRUN_WIRE_UNWATCH, 0, 20, 0, keys, 1),
		mk(CRUN_WIRE_RDZV_JOIN, 0, 21, 600000, join, 10),
		mk(CRUN_WIRE_RDZV_JOIN, 0, 21, INT64_MAX, join, 10),
		mk(CRUN_WIRE_RDZV_FAIL, 0, 22, 3, fail, 1),
		mk(CRUN_WIRE_RDZV_FAIL, 0, 22, 0, fail_empty, 1),
		mk(CRUN_WIRE_RDZV_DONE, 0, 23, 7, NULL, 0),
		mk(CRUN_WIRE_RDZV_DONE, 0, 23, INT64_MAX, NULL, 0),
	};
	bool seen[CRUN_WIRE_RDZV_DONE + 1] = {false};

	(void)state;
	memset(mac, 0xa5, sizeof(mac));
	for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
		assert_true(crun__wire_is_request(reqs[i].type));
		assert_false(crun__wire_is_reply(reqs[i].type));
		assert_int_equal(roundtrip(&reqs[i]), 0);
		seen[reqs[i].type] = true;
	}
	for (int t = CRUN_WIRE_HELLO; t <= CRUN_WIRE_RDZV_DONE; t++)
		assert_true(seen[t]);
}

static void test_replies_roundtrip(void **state)
{
	uint8_t mac[32];
	struct crun__wire_item one_mac[1] = {it(mac, 32)};
	struct crun__wire_item msg[1] = {its("authentication failed")};
	struct crun__wire_item val[1] = {it(bin, sizeof(bin))};
	struct crun__wire_item empty[1] = {it(NULL, 0)};
	struct crun__wire_item vals[4] = {its("x"), it(NULL, 0), it(bin, sizeof(bin)), its("z")};
	struct crun__wire_item notify_set[2] = {its("key"), it(bin, sizeof(bin))};
	struct crun__wire_item notify_del[2] = {its("key"), it(NULL, 0)};
	struct crun__wire_item event[3] = {
		its("left"), its("node 1 (host-b) left: connection closed"), its("1")};
	struct crun__wire_msg reps[] = {
		mk(CRUN_WIRE_OK, 0, 1, 0, NULL, 0),
		mk(CRUN_WIRE_OK, 0, 1, 0, one_mac, 1),
		mk(CRUN_WIRE_ERROR, 0, 2, EACCES, msg, 1),
		mk(CRUN_WIRE_ERROR, 0, 2, CRUN_WIRE_ERRNO_MAX, empty, 1),
		mk(CRUN_WIRE_VALUE, 0, 3, 0, val, 1),
		mk(CRUN_WIRE_VALUE, 0, 3, 0, empty, 1),
		mk(CRUN_WIRE_INT, 0, 4, 0, NULL, 0),
		mk(CRUN_WIRE_INT, 0, 4, -1, NULL, 0),
		mk(CRUN_WIRE_INT, 0, 4, INT64_MIN, NULL, 0),
		mk(CRUN_WIRE_INT, 0, 4, INT64_MAX, NULL, 0),
		mk(CRUN_WIRE_VALUES, 0, 5, 0, NULL, 0),
		mk(CRUN_WIRE_VALUES, 0, 5, 0, vals, 4),
		mk(CRUN_WIRE_NOTIFY, 0, 6, CRUN_WIRE_EV_SET, notify_set, 2),
		mk(CRUN_WIRE_NOTIFY, 0, 6, CRUN_WIRE_EV_DELETE, notify_del, 2),
		mk(CRUN_WIRE_RDZV_EVENT, 0, 7, 0, event, 3),
		mk(CRUN_WIRE_RDZV_EVENT, 0, 7, 12, event, 3),
	};
	bool seen[CRUN_WIRE_RDZV_EVENT + 1] = {false};

	(void)state;
	memset(mac, 0x5a, sizeof(mac));
	for (size_t i = 0; i < sizeof(reps) / sizeof(reps[0]); i++) {
		assert_true(crun__wire_is_reply(reps[i].type));
		assert_false(crun__wire_is_request(reps[i].type));
		assert_int_equal(roundtrip(&reps[i]), 0);
		seen[reps[i].type] = true;
	}
	for (int t = CRUN_WIRE_OK; t <= CRUN_WIRE_RDZV_EVENT; t++)
		assert_true(seen[t]);
}

/* The byte order is part of the protocol: check one frame byte by byte. */
static void test_encoding_layout(void **state)
{
	struct crun__wire_item kv[2] = {its("ab"), it("\0", 1)};
	struct crun__wire_msg m =
		mk(CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 0x01020304, 0x1122334455667788, kv, 2);
	static const uint8_t want[] = {
		0,
		0,
		0,
		23, /* len: 12 + 4+2 + 4+1 */
		CRUN_WIRE_SET,
		CRUN_WIRE_FL_EPHEMERAL,
		0,
		0,
		1,
		2,
		3,
		4, /* id */
		0x11,
		0x22,
		0x33,
		0x44,
		0x55,
		0x66,
		0x77,
		0x88,
		0,
		0,
		0,
		2, /* count */
		0,
		0,
		0,
		2,
		'a',
		'b',
		0,
		0,
		0,
		1,
		0,
	};
	size_t n;
	uint8_t *buf;

	(void)state;
	assert_int_equal(crun__wire_encoded_size(&m), sizeof(want));
	buf = encode(&m, &n);
	assert_memory_equal(buf, want, sizeof(want));
	free(buf);
}

static void test_type_names(void **state)
{
	(void)state;
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_HELLO), "HELLO");
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_SET), "SET");
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_UNWATCH), "UNWATCH");
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_ERROR), "ERROR");
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_NOTIFY), "NOTIFY");
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_RDZV_JOIN), "RDZV_JOIN");
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_RDZV_FAIL), "RDZV_FAIL");
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_RDZV_DONE), "RDZV_DONE");
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_RDZV_EVENT), "RDZV_EVENT");
	assert_string_equal(crun__wire_type_name(0), "unknown");
	assert_string_equal(crun__wire_type_name(CRUN_WIRE_RDZV_RESUME), "RDZV_RESUME");
	assert_string_equal(crun__wire_type_name(21), "unknown");
	assert_string_equal(crun__wire_type_name(0x7f), "unknown");
	assert_string_equal(crun__wire_type_name(0x87), "unknown");
	assert_string_equal(crun__wire_type_name(0xff), "unknown");
	assert_false(crun__wire_is_request(0));
	assert_true(crun__wire_is_request(CRUN_WIRE_RDZV_RESUME));
	assert_false(crun__wire_is_request(21));
	assert_false(crun__wire_is_request(CRUN_WIRE_RDZV_EVENT));
	assert_true(crun__wire_is_request(CRUN_WIRE_RDZV_JOIN));
	assert_true(crun__wire_is_request(CRUN_WIRE_RDZV_DONE));
	assert_false(crun__wire_is_reply(0x7f));
	assert_false(crun__wire_is_reply(0x87));
	assert_false(crun__wire_is_reply(CRUN_WIRE_RDZV_DONE));
	assert_true(crun__wire_is_reply(CRUN_WIRE_RDZV_EVENT));
}

static void test_incremental(void **state)
{
	struct crun__wire_item kv[2] = {its("some/key"), it(bin, sizeof(bin))};
	struct crun__wire_msg m = mk(CRUN_WIRE_SET, 0, 42, 0, kv, 2), out;
	struct crun__wire_item store[4];
	uint32_t cap = 4;
	char err[256];
	size_t n;
	uint8_t *buf = encode(&m, &n);

	(void)state;
	for (size_t len = 0; len < n; len++) {
		/* Feed a fresh copy of exactly len bytes so ASan sees any
		 * read past what was received. */
		uint8_t *part = malloc(len ? len : 1);

		assert_non_null(part);
		memcpy(part, buf, len);
		assert_int_equal(
			crun__wire_decode(part, len, MAXP, &out, store, &cap, err, sizeof(err)),
			CRUN_WIRE_NEED_MORE);
		free(part);
	}
	assert_int_equal(crun__wire_decode(buf, n, MAXP, &out, store, &cap, err, sizeof(err)),
			 (long)n);
	assert_same_msg(&m, &out);
	free(buf);
}

static void test_back_to_back(void **state)
{
	struct crun__wire_item k[1] = {its("k")};
	struct crun__wire_item v[1] = {it(bin, sizeof(bin))};
	struct crun__wire_msg a = mk(CRUN_WIRE_GET, 0, 1, 0, k, 1);
	struct crun__wire_msg b = mk(CRUN_WIRE_VALUE, 0, 1, 0, v, 1), out;
	struct crun__wire_item store[4];
	uint32_t cap = 4;
	char err[256];
	size_t na, nb;
	uint8_t *ea = encode(&a, &na), *eb = encode(&b, &nb);
	uint8_t *buf = malloc(na + nb + na);
	long rc;

	(void)state;
	assert_non_null(buf);
	memcpy(buf, ea, na);
	memcpy(buf + na, eb, nb);
	memcpy(buf + na + nb, ea, na);
	/* Two whole frames and a partial third. */
	rc = crun__wire_decode(buf, na + nb + 5, MAXP, &out, store, &cap, err, sizeof(err));
	assert_int_equal(rc, (long)na);
	assert_same_msg(&a, &out);
	rc = crun__wire_decode(buf + na, nb + 5, MAXP, &out, store, &cap, err, sizeof(err));
	assert_int_equal(rc, (long)nb);
	assert_same_msg(&b, &out);
	rc = crun__wire_decode(buf + na + nb, 5, MAXP, &out, store, &cap, err, sizeof(err));
	assert_int_equal(rc, CRUN_WIRE_NEED_MORE);
	rc = crun__wire_decode(buf + na + nb, na, MAXP, &out, store, &cap, err, sizeof(err));
	assert_int_equal(rc, (long)na);
	free(buf);
	free(ea);
	free(eb);
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void header(uint8_t *h, uint32_t len, uint8_t type, uint8_t flags, uint16_t zero,
		   uint32_t id)
{
	put32(h, len);
	h[4] = type;
	h[5] = flags;
	h[6] = (uint8_t)(zero >> 8);
	h[7] = (uint8_t)zero;
	put32(h + 8, id);
}

/* Decodes exactly the 12 header bytes (in their own allocation). */
static long decode_header_only(uint32_t len, uint8_t type, uint16_t zero, uint32_t max, char *err,
			       size_t errlen)
{
	struct crun__wire_item store[1];
	struct crun__wire_msg out;
	uint32_t cap = 1, plen = 0;
	uint8_t *h = malloc(CRUN_WIRE_HEADER_LEN);
	long rc;
	int hrc;

	assert_non_null(h);
	header(h, len, type, 0, zero, 7);
	err[0] = '\0';
	rc = crun__wire_decode(h, CRUN_WIRE_HEADER_LEN, max, &out, store, &cap, err, errlen);
	hrc = crun__wire_check_header(h, max, &plen, NULL, 0);
	if (rc < 0) {
		assert_int_equal(hrc, rc);
		assert_true(err[0] != '\0');
	} else {
		assert_int_equal(hrc, 0);
		assert_int_equal(plen, len);
	}
	free(h);
	return rc;
}

static void test_header_rejects(void **state)
{
	char err[256];

	(void)state;
	assert_int_equal(decode_header_only(1u << 31, CRUN_WIRE_SET, 0, MAXP, err, sizeof(err)),
			 -EMSGSIZE);
	assert_int_equal(decode_header_only(0xffffffffu, CRUN_WIRE_GET, 0, MAXP, err, sizeof(err)),
			 -EMSGSIZE);
	/* The absolute cap holds whatever the caller's limit says. */
	assert_int_equal(decode_header_only(CRUN_WIRE_MAX_PAYLOAD + 1, CRUN_WIRE_SET, 0, UINT32_MAX,
					    err, sizeof(err)),
			 -EMSGSIZE);
	assert_int_equal(decode_header_only(1025, CRUN_WIRE_SET, 0, 1024, err, sizeof(err)),
			 -EMSGSIZE);
	assert_non_null(strstr(err, "1025"));
	assert_int_equal(decode_header_only(1024, CRUN_WIRE_SET, 0, 1024, err, sizeof(err)),
			 CRUN_WIRE_NEED_MORE);
	assert_int_equal(decode_header_only(12, 0, 0, MAXP, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "type"));
	assert_int_equal(decode_header_only(12, 0x7f, 0, MAXP, err, sizeof(err)), -EPROTO);
	assert_int_equal(decode_header_only(12, 21, 0, MAXP, err, sizeof(err)), -EPROTO);
	assert_int_equal(decode_header_only(12, 0x87, 0, MAXP, err, sizeof(err)), -EPROTO);
	assert_int_equal(decode_header_only(12, 0xff, 0, MAXP, err, sizeof(err)), -EPROTO);
	assert_int_equal(decode_header_only(12, CRUN_WIRE_SET, 1, MAXP, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "reserved"));
	assert_int_equal(decode_header_only(12, CRUN_WIRE_SET, 0x8000, MAXP, err, sizeof(err)),
			 -EPROTO);
	assert_int_equal(decode_header_only(0, CRUN_WIRE_PING, 0, MAXP, err, sizeof(err)), -EPROTO);
	assert_int_equal(decode_header_only(11, CRUN_WIRE_PING, 0, MAXP, err, sizeof(err)),
			 -EPROTO);
	assert_int_equal(decode_header_only(12, CRUN_WIRE_PING, 0, MAXP, err, sizeof(err)),
			 CRUN_WIRE_NEED_MORE);
	/* A NULL error buffer is allowed. */
	{
		uint8_t h[12];
		uint32_t plen;

		header(h, 0, CRUN_WIRE_SET, 0, 0, 0);
		assert_int_equal(crun__wire_check_header(h, MAXP, &plen, NULL, 0), -EPROTO);
	}
}

/* Builds a raw frame: header, num 0, count, then the given body bytes. */
static uint8_t *raw_frame(uint8_t type, uint32_t count, const uint8_t *body, size_t bodylen,
			  size_t *size)
{
	size_t n = CRUN_WIRE_HEADER_LEN + CRUN_WIRE_PAYLOAD_MIN + bodylen;
	uint8_t *f = calloc(1, n);

	assert_non_null(f);
	header(f, (uint32_t)(n - CRUN_WIRE_HEADER_LEN), type, 0, 0, 9);
	put32(f + 20, count);
	if (bodylen)
		memcpy(f + 24, body, bodylen);
	*size = n;
	return f;
}

static long decode_raw(uint8_t type, uint32_t count, const uint8_t *body, size_t bodylen, char *err,
		       size_t errlen)
{
	struct crun__wire_item store[8];
	struct crun__wire_msg out;
	uint32_t cap = 8;
	size_t n;
	uint8_t *f = raw_frame(type, count, body, bodylen, &n);
	long rc;

	err[0] = '\0';
	rc = crun__wire_decode(f, n, MAXP, &out, store, &cap, err, errlen);
	if (rc < 0)
		assert_true(err[0] != '\0');
	free(f);
	return rc;
}

static void test_payload_rejects(void **state)
{
	char err[256];
	static const uint8_t one_item[] = {0, 0, 0, 2, 'h', 'i'};
	static const uint8_t two_items[] = {0, 0, 0, 1, 'a', 0, 0, 0, 1, 'b'};
	static const uint8_t past_end[] = {0, 0, 0, 3, 'h', 'i'};
	static const uint8_t huge_item[] = {0xff, 0xff, 0xff, 0xff, 'h', 'i'};
	/* Room for two item lengths by count, but the second is cut short. */
	static const uint8_t cut_length[] = {0, 0, 0, 2, 'a', 'b', 0, 0};
	static const uint8_t trailing[] = {0, 0, 0, 2, 'h', 'i', 'x', 'y', 'z'};

	(void)state;
	assert_true(decode_raw(CRUN_WIRE_SET, 1, one_item, sizeof(one_item), err, sizeof(err)) > 0);
	assert_true(decode_raw(CRUN_WIRE_SET, 2, two_items, sizeof(two_items), err, sizeof(err)) >
		    0);
	/* count larger than len can hold: each item needs 4 bytes at least */
	assert_int_equal(decode_raw(CRUN_WIRE_SET, 2, one_item, sizeof(one_item), err, sizeof(err)),
			 -EPROTO);
	assert_non_null(strstr(err, "count"));
	assert_int_equal(decode_raw(CRUN_WIRE_SET, 1, NULL, 0, err, sizeof(err)), -EPROTO);
	assert_int_equal(decode_raw(CRUN_WIRE_SET, UINT32_MAX, NULL, 0, err, sizeof(err)), -EPROTO);
	assert_int_equal(decode_raw(CRUN_WIRE_SET, 1, past_end, sizeof(past_end), err, sizeof(err)),
			 -EPROTO);
	assert_non_null(strstr(err, "past the end"));
	assert_int_equal(
		decode_raw(CRUN_WIRE_SET, 1, huge_item, sizeof(huge_item), err, sizeof(err)),
		-EPROTO);
	assert_int_equal(
		decode_raw(CRUN_WIRE_SET, 2, cut_length, sizeof(cut_length), err, sizeof(err)),
		-EPROTO);
	assert_non_null(strstr(err, "past the end"));
	assert_int_equal(decode_raw(CRUN_WIRE_SET, 1, trailing, sizeof(trailing), err, sizeof(err)),
			 -EPROTO);
	assert_non_null(strstr(err, "stray"));
	assert_int_equal(decode_raw(CRUN_WIRE_COUNT, 0, trailing, 1, err, sizeof(err)), -EPROTO);
}

static void test_max_items(void **state)
{
	size_t body = 4 * ((size_t)CRUN_WIRE_MAX_ITEMS + 1), n;
	uint8_t *zeros = calloc(1, body), *f;
	struct crun__wire_item *store = calloc(CRUN_WIRE_MAX_ITEMS + 1, sizeof(*store));
	struct crun__wire_msg out;
	uint32_t cap = CRUN_WIRE_MAX_ITEMS + 1;
	char err[256];

	(void)state;
	assert_non_null(zeros);
	assert_non_null(store);
	/* 65536 empty items: the most a frame may carry. */
	f = raw_frame(CRUN_WIRE_VALUES, CRUN_WIRE_MAX_ITEMS, zeros, body - 4, &n);
	assert_int_equal(crun__wire_decode(f, n, MAXP, &out, store, &cap, err, sizeof(err)),
			 (long)n);
	assert_int_equal(out.count, CRUN_WIRE_MAX_ITEMS);
	assert_int_equal(crun__wire_validate(&out, err, sizeof(err)), 0);
	free(f);
	/* One more is refused even though len could hold it. */
	f = raw_frame(CRUN_WIRE_VALUES, CRUN_WIRE_MAX_ITEMS + 1, zeros, body, &n);
	assert_int_equal(crun__wire_decode(f, n, MAXP, &out, store, &cap, err, sizeof(err)),
			 -EPROTO);
	free(f);
	free(store);
	free(zeros);
}

static void test_enobufs(void **state)
{
	struct crun__wire_item keys[5] = {its("a"), its("b"), its("c"), its("d"), its("e")};
	struct crun__wire_msg m = mk(CRUN_WIRE_MGET, 0, 3, 0, keys, 5), out;
	struct crun__wire_item *store = malloc(2 * sizeof(*store));
	uint32_t cap = 2;
	char err[256];
	size_t n;
	uint8_t *buf = encode(&m, &n);

	(void)state;
	assert_non_null(store);
	assert_int_equal(crun__wire_decode(buf, n, MAXP, &out, store, &cap, err, sizeof(err)),
			 -ENOBUFS);
	assert_int_equal(cap, 5);
	cap = 4; /* one short is still too small */
	assert_int_equal(crun__wire_decode(buf, n, MAXP, &out, store, &cap, err, sizeof(err)),
			 -ENOBUFS);
	assert_int_equal(cap, 5);
	store = realloc(store, cap * sizeof(*store));
	assert_non_null(store);
	assert_int_equal(crun__wire_decode(buf, n, MAXP, &out, store, &cap, err, sizeof(err)),
			 (long)n);
	assert_same_msg(&m, &out);
	assert_ptr_equal(out.items, store);
	free(store);
	free(buf);

	/* A frame without items needs no store at all. */
	m = mk(CRUN_WIRE_COUNT, 0, 4, 0, NULL, 0);
	buf = encode(&m, &n);
	cap = 0;
	assert_int_equal(crun__wire_decode(buf, n, MAXP, &out, NULL, &cap, err, sizeof(err)),
			 (long)n);
	assert_int_equal(out.count, 0);
	free(buf);
}

/* Expects validate to refuse m with a reason. */
static void refuse_msg(struct crun__wire_msg m, const char *needle)
{
	char err[256] = "";

	if (crun__wire_validate(&m, err, sizeof(err)) != -EPROTO)
		fail_msg("%s (flags 0x%x, num %lld, %u items) was accepted",
			 crun__wire_type_name(m.type), m.flags, (long long)m.num, m.count);
	assert_true(err[0] != '\0');
	if (needle && !strstr(err, needle))
		fail_msg("reason '%s' does not mention '%s'", err, needle);
}

static void accept_msg(struct crun__wire_msg m)
{
	char err[256] = "";

	if (crun__wire_validate(&m, err, sizeof(err)) != 0)
		fail_msg("%s refused: %s", crun__wire_type_name(m.type), err);
}

static void test_validate_counts(void **state)
{
	struct crun__wire_item k[4] = {its("k1"), its("v1"), its("k2"), its("v2")};
	struct crun__wire_item h[4] = {its("run"), it(nonce_a, 32), it(NULL, 0), its("x")};

	(void)state;
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, h, 2), "items");
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, h, 4), "items");
	refuse_msg(mk(CRUN_WIRE_SET, 0, 1, 0, k, 1), "items");
	refuse_msg(mk(CRUN_WIRE_SET, 0, 1, 0, k, 3), "items");
	refuse_msg(mk(CRUN_WIRE_GET, 0, 1, 0, k, 0), "items");
	refuse_msg(mk(CRUN_WIRE_GET, 0, 1, 0, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_CHECK, 0, 1, 0, k, 0), "items");
	refuse_msg(mk(CRUN_WIRE_WAIT, 0, 1, 100, k, 0), "items");
	refuse_msg(mk(CRUN_WIRE_ADD, 0, 1, 1, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_CAS, 0, 1, 0, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_CAS, 0, 1, 0, k, 4), "items");
	refuse_msg(mk(CRUN_WIRE_DELETE, 0, 1, 0, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_APPEND, 0, 1, 0, k, 1), "items");
	refuse_msg(mk(CRUN_WIRE_COUNT, 0, 1, 0, k, 1), "items");
	refuse_msg(mk(CRUN_WIRE_MGET, 0, 1, 0, k, 0), "items");
	refuse_msg(mk(CRUN_WIRE_MSET, 0, 1, 0, k, 0), "items");
	refuse_msg(mk(CRUN_WIRE_LIST, 0, 1, 0, k, 1), "page size");
	refuse_msg(mk(CRUN_WIRE_LIST, 0, 1, 5, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_PING, 0, 1, 0, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_WATCH, 0, 1, 0, k, 0), "items");
	refuse_msg(mk(CRUN_WIRE_UNWATCH, 0, 1, 0, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_ERROR, 0, 1, EIO, k, 0), "items");
	refuse_msg(mk(CRUN_WIRE_ERROR, 0, 1, EIO, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_VALUE, 0, 1, 0, k, 0), "items");
	refuse_msg(mk(CRUN_WIRE_VALUE, 0, 1, 0, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_INT, 0, 1, 0, k, 1), "items");
	refuse_msg(mk(CRUN_WIRE_NOTIFY, 0, 1, CRUN_WIRE_EV_SET, k, 1), "items");
	refuse_msg(mk(CRUN_WIRE_NOTIFY, 0, 1, CRUN_WIRE_EV_SET, k, 3), "items");
	refuse_msg(mk(CRUN_WIRE_RDZV_FAIL, 0, 1, 0, k, 0), "items");
	refuse_msg(mk(CRUN_WIRE_RDZV_FAIL, 0, 1, 0, k, 3), "items");
	refuse_msg(mk(CRUN_WIRE_RDZV_DONE, 0, 1, 0, k, 1), "items");
	refuse_msg(mk(CRUN_WIRE_RDZV_EVENT, 0, 1, 0, k, 2), "items");
	refuse_msg(mk(CRUN_WIRE_RDZV_EVENT, 0, 1, 0, k, 4), "items");
	refuse_msg(mk(0, 0, 1, 0, NULL, 0), "unknown");
	refuse_msg(mk(0x7f, 0, 1, 0, NULL, 0), "unknown");
	refuse_msg(mk(0xff, 0, 1, 0, NULL, 0), "unknown");
}

static void test_validate_flags_num(void **state)
{
	struct crun__wire_item k[3] = {its("k"), its("v"), its("w")};

	(void)state;
	refuse_msg(mk(CRUN_WIRE_SET, CRUN_WIRE_FL_EXPECT_ABSENT, 1, 0, k, 2), "flags");
	refuse_msg(mk(CRUN_WIRE_SET, 0x80, 1, 0, k, 2), "flags");
	refuse_msg(mk(CRUN_WIRE_CAS, CRUN_WIRE_FL_EPHEMERAL, 1, 0, k, 3), "flags");
	refuse_msg(mk(CRUN_WIRE_GET, CRUN_WIRE_FL_EPHEMERAL, 1, 0, k, 1), "flags");
	refuse_msg(mk(CRUN_WIRE_OK, 1, 1, 0, NULL, 0), "flags");
	accept_msg(mk(CRUN_WIRE_SET, CRUN_WIRE_FL_EPHEMERAL, 1, 0, k, 2));
	accept_msg(mk(CRUN_WIRE_CAS, CRUN_WIRE_FL_EXPECT_ABSENT, 1, 0, k, 3));

	/* GET and MGET: 0 (no wait) or a positive timeout. */
	accept_msg(mk(CRUN_WIRE_GET, 0, 1, 0, k, 1));
	accept_msg(mk(CRUN_WIRE_GET, 0, 1, 1, k, 1));
	refuse_msg(mk(CRUN_WIRE_GET, 0, 1, -1, k, 1), "negative");
	refuse_msg(mk(CRUN_WIRE_GET, 0, 1, INT64_MIN, k, 1), "negative");
	refuse_msg(mk(CRUN_WIRE_MGET, 0, 1, -1, k, 2), "negative");
	/* WAIT: strictly positive. */
	accept_msg(mk(CRUN_WIRE_WAIT, 0, 1, 1, k, 2));
	refuse_msg(mk(CRUN_WIRE_WAIT, 0, 1, 0, k, 2), "positive");
	refuse_msg(mk(CRUN_WIRE_WAIT, 0, 1, -5, k, 2), "positive");
	/* Types without a number. */
	refuse_msg(mk(CRUN_WIRE_SET, 0, 1, 1, k, 2), "number");
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, -1, k, 3), "number");
	refuse_msg(mk(CRUN_WIRE_COUNT, 0, 1, 7, NULL, 0), "number");
	refuse_msg(mk(CRUN_WIRE_PING, 0, 1, 1, NULL, 0), "number");
	/* ADD takes any delta. */
	accept_msg(mk(CRUN_WIRE_ADD, 0, 1, INT64_MIN, k, 1));
	accept_msg(mk(CRUN_WIRE_ADD, 0, 1, 0, k, 1));

	/* ERROR carries a positive errno that fits an int. */
	refuse_msg(mk(CRUN_WIRE_ERROR, 0, 1, 0, k, 1), "errno");
	refuse_msg(mk(CRUN_WIRE_ERROR, 0, 1, -EIO, k, 1), "errno");
	refuse_msg(mk(CRUN_WIRE_ERROR, 0, 1, CRUN_WIRE_ERRNO_MAX + 1, k, 1), "errno");
	refuse_msg(mk(CRUN_WIRE_ERROR, 0, 1, INT64_MAX, k, 1), "errno");
	accept_msg(mk(CRUN_WIRE_ERROR, 0, 1, 1, k, 1));

	/* NOTIFY's event. */
	refuse_msg(mk(CRUN_WIRE_NOTIFY, 0, 1, 0, k, 2), "event");
	refuse_msg(mk(CRUN_WIRE_NOTIFY, 0, 1, 3, k, 2), "event");
	refuse_msg(mk(CRUN_WIRE_NOTIFY, 0, 1, -1, k, 2), "event");

	/* Rendezvous: FAIL, DONE and RDZV_EVENT name a round >= 0. */
	accept_msg(mk(CRUN_WIRE_RDZV_FAIL, 0, 1, 0, k, 1));
	accept_msg(mk(CRUN_WIRE_RDZV_FAIL, 0, 1, 0, k, 2)); /* [message, "stop"] */
	refuse_msg(mk(CRUN_WIRE_RDZV_FAIL, 0, 1, -1, k, 1), "round");
	accept_msg(mk(CRUN_WIRE_RDZV_DONE, 0, 1, 0, NULL, 0));
	refuse_msg(mk(CRUN_WIRE_RDZV_DONE, 0, 1, INT64_MIN, NULL, 0), "round");
	accept_msg(mk(CRUN_WIRE_RDZV_EVENT, 0, 1, 0, k, 3));
	refuse_msg(mk(CRUN_WIRE_RDZV_EVENT, 0, 1, -2, k, 3), "round");
	refuse_msg(mk(CRUN_WIRE_RDZV_FAIL, CRUN_WIRE_FL_EPHEMERAL, 1, 0, k, 1), "flags");
	refuse_msg(mk(CRUN_WIRE_RDZV_EVENT, 1, 1, 0, k, 3), "flags");
}

static void test_validate_rdzv_join(void **state)
{
	struct crun__wire_item j[10] = {its("node-a"), its("host-a"), it(NULL, 0), its("1"),
					its("-1"),     its("1"),      its("1"),	   its("0"),
					its("0"),      its("0")};
	struct crun__wire_item e[3] = {it(NULL, 0), its("m"), its("0")};

	(void)state;
	accept_msg(mk(CRUN_WIRE_RDZV_JOIN, 0, 1, 1, j, 10));
	/* num is the join timeout: strictly positive. */
	refuse_msg(mk(CRUN_WIRE_RDZV_JOIN, 0, 1, 0, j, 10), "positive");
	refuse_msg(mk(CRUN_WIRE_RDZV_JOIN, 0, 1, -1, j, 10), "positive");
	refuse_msg(mk(CRUN_WIRE_RDZV_JOIN, 0, 1, 1, j, 9), "items");
	refuse_msg(mk(CRUN_WIRE_RDZV_JOIN, CRUN_WIRE_FL_EPHEMERAL, 1, 1, j, 10), "flags");
	j[0] = it(NULL, 0);
	refuse_msg(mk(CRUN_WIRE_RDZV_JOIN, 0, 1, 1, j, 10), "empty node id");
	refuse_msg(mk(CRUN_WIRE_RDZV_EVENT, 0, 1, 0, e, 3), "empty reason");
}

static void test_validate_keys(void **state)
{
	struct crun__wire_item e[4] = {it(NULL, 0), its("v"), its("k"), its("v")};
	struct crun__wire_item later[4] = {its("k"), its("v"), it(NULL, 0), its("v")};
	struct crun__wire_item mset_odd[3] = {its("k"), its("v"), its("k2")};

	(void)state;
	refuse_msg(mk(CRUN_WIRE_SET, 0, 1, 0, e, 2), "empty key");
	refuse_msg(mk(CRUN_WIRE_GET, 0, 1, 0, e, 1), "empty key");
	refuse_msg(mk(CRUN_WIRE_CHECK, 0, 1, 0, e, 1), "empty key");
	refuse_msg(mk(CRUN_WIRE_CHECK, 0, 1, 0, later, 3), "empty key");
	refuse_msg(mk(CRUN_WIRE_WAIT, 0, 1, 10, later, 3), "empty key");
	refuse_msg(mk(CRUN_WIRE_MGET, 0, 1, 0, later, 3), "empty key");
	refuse_msg(mk(CRUN_WIRE_ADD, 0, 1, 1, e, 1), "empty key");
	refuse_msg(mk(CRUN_WIRE_CAS, 0, 1, 0, e, 3), "empty key");
	refuse_msg(mk(CRUN_WIRE_DELETE, 0, 1, 0, e, 1), "empty key");
	refuse_msg(mk(CRUN_WIRE_APPEND, 0, 1, 0, e, 2), "empty key");
	refuse_msg(mk(CRUN_WIRE_MSET, 0, 1, 0, e, 4), "empty key");
	refuse_msg(mk(CRUN_WIRE_MSET, 0, 1, 0, later, 4), "empty key");
	refuse_msg(mk(CRUN_WIRE_WATCH, 0, 1, 0, e, 1), "empty key");
	refuse_msg(mk(CRUN_WIRE_UNWATCH, 0, 1, 0, e, 1), "empty key");
	refuse_msg(mk(CRUN_WIRE_NOTIFY, 0, 1, CRUN_WIRE_EV_DELETE, e, 2), "empty key");
	refuse_msg(mk(CRUN_WIRE_MSET, 0, 1, 0, mset_odd, 3), "pairs");
	/* Empty values are fine where values go. */
	accept_msg(mk(CRUN_WIRE_MSET, 0, 1, 0, later, 2));
	accept_msg(mk(CRUN_WIRE_VALUES, 0, 1, 0, e, 4));
	accept_msg(mk(CRUN_WIRE_VALUE, 0, 1, 0, e, 1));
	accept_msg(mk(CRUN_WIRE_ERROR, 0, 1, EIO, e, 1));
}

static void test_validate_hello(void **state)
{
	uint8_t n33[33] = {0}, mac[33] = {0};
	struct crun__wire_item good[3] = {its("run"), it(n33, 32), it(mac, 32)};
	struct crun__wire_item noauth[3] = {its("run"), it(n33, 32), it(NULL, 0)};
	struct crun__wire_item norun[3] = {it(NULL, 0), it(n33, 32), it(mac, 32)};
	struct crun__wire_item nonce31[3] = {its("run"), it(n33, 31), it(mac, 32)};
	struct crun__wire_item nonce33[3] = {its("run"), it(n33, 33), it(mac, 32)};
	struct crun__wire_item nonce0[3] = {its("run"), it(NULL, 0), it(NULL, 0)};
	struct crun__wire_item mac31[3] = {its("run"), it(n33, 32), it(mac, 31)};
	struct crun__wire_item mac33[3] = {its("run"), it(n33, 32), it(mac, 33)};
	struct crun__wire_item mac1[3] = {its("run"), it(n33, 32), it(mac, 1)};

	(void)state;
	accept_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, good, 3));
	accept_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, noauth, 3));
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, norun, 3), "run id");
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, nonce31, 3), "nonce");
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, nonce33, 3), "nonce");
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, nonce0, 3), "nonce");
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, mac31, 3), "mac");
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, mac33, 3), "mac");
	refuse_msg(mk(CRUN_WIRE_HELLO, 0, 1, 0, mac1, 3), "mac");
	refuse_msg(mk(CRUN_WIRE_HELLO, CRUN_WIRE_FL_EPHEMERAL, 1, 0, good, 3), "flags");
}

static void test_preambles(void **state)
{
	uint8_t c[CRUN_WIRE_CLIENT_PREAMBLE + 1], s[CRUN_WIRE_SERVER_PREAMBLE + 1];
	uint8_t nonce[32], got[32];
	uint16_t version = 0, flags = 0;
	static const uint8_t want_c[8] = {'C', 'R', 'U', 'N', 0, 1, 0, 0};

	(void)state;
	memset(c, 0xee, sizeof(c));
	crun__wire_client_preamble(c);
	assert_memory_equal(c, want_c, 8);
	assert_int_equal(c[8], 0xee); /* writes exactly 8 bytes */
	assert_int_equal(crun__wire_parse_client_preamble(c, &version), 0);
	assert_int_equal(version, CRUN_WIRE_VERSION);
	c[0] = 'c';
	assert_int_equal(crun__wire_parse_client_preamble(c, &version), -EPROTO);
	c[0] = 'C';
	c[3] = 0;
	assert_int_equal(crun__wire_parse_client_preamble(c, &version), -EPROTO);
	c[3] = 'N';
	c[7] = 1; /* reserved field */
	assert_int_equal(crun__wire_parse_client_preamble(c, &version), -EPROTO);
	c[7] = 0;
	c[4] = 0x01;
	c[5] = 0x00;
	assert_int_equal(crun__wire_parse_client_preamble(c, &version), -EPROTONOSUPPORT);
	assert_int_equal(version, 0x0100);
	c[4] = 0;
	c[5] = 2;
	assert_int_equal(crun__wire_parse_client_preamble(c, &version), -EPROTONOSUPPORT);
	assert_int_equal(version, 2);

	for (int i = 0; i < 32; i++)
		nonce[i] = (uint8_t)(0x40 + i);
	memset(s, 0xee, sizeof(s));
	crun__wire_server_preamble(s, CRUN_WIRE_F_AUTH, nonce);
	assert_int_equal(s[CRUN_WIRE_SERVER_PREAMBLE], 0xee);
	assert_memory_equal(s, "CRUN\0\1\0\1", 8);
	assert_memory_equal(s + 8, nonce, 32);
	assert_int_equal(crun__wire_parse_server_preamble(s, &version, &flags, got), 0);
	assert_int_equal(version, CRUN_WIRE_VERSION);
	assert_int_equal(flags, CRUN_WIRE_F_AUTH);
	assert_memory_equal(got, nonce, 32);

	crun__wire_server_preamble(s, 0, NULL);
	assert_int_equal(crun__wire_parse_server_preamble(s, &version, &flags, got), 0);
	assert_int_equal(flags, 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(got[i], 0);

	s[1] = 'X';
	assert_int_equal(crun__wire_parse_server_preamble(s, &version, &flags, got), -EPROTO);
	s[1] = 'R';
	s[5] = 9;
	assert_int_equal(crun__wire_parse_server_preamble(s, &version, &flags, got),
			 -EPROTONOSUPPORT);
	assert_int_equal(version, 9);
}

static void hex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;

		assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* HMAC-SHA256 through OpenSSL's EVP_MAC interface, a different path from
 * the one wire.c takes, over the message wire.h spells out. */
static void evp_hmac(const char *token, const char *role, const uint8_t *a, const uint8_t *b,
		     uint8_t *out)
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx;
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
		OSSL_PARAM_construct_end(),
	};
	char label[64];
	size_t outlen = 0;

	assert_non_null(mac);
	ctx = EVP_MAC_CTX_new(mac);
	assert_non_null(ctx);
	snprintf(label, sizeof(label), "crun-auth-v1 %s", role);
	assert_int_equal(EVP_MAC_init(ctx, (const unsigned char *)token, strlen(token), params), 1);
	assert_int_equal(EVP_MAC_update(ctx, (const unsigned char *)label, strlen(label)), 1);
	assert_int_equal(EVP_MAC_update(ctx, a, 32), 1);
	assert_int_equal(EVP_MAC_update(ctx, b, 32), 1);
	assert_int_equal(EVP_MAC_final(ctx, out, &outlen, 32), 1);
	assert_int_equal(outlen, 32);
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
}

static void test_mac(void **state)
{
	const char *token = "secret-token";
	uint8_t a[32], b[32], got[32], want[32], other[32];

	(void)state;
	for (int i = 0; i < 32; i++) {
		a[i] = (uint8_t)i;
		b[i] = (uint8_t)(32 + i);
	}
	/* Known answers, computed with
	 *   printf 'crun-auth-v1 client<a><b>' | openssl dgst -sha256 -hmac secret-token
	 * and Python's hmac module, which agree. */
	assert_int_equal(crun__wire_mac(token, strlen(token), "client", a, b, got), 0);
	hex("ebcee1731593fe7398f8605ac99738cc667f06bc935c80302e98b4950f5a4718", want, 32);
	assert_memory_equal(got, want, 32);
	evp_hmac(token, "client", a, b, other);
	assert_memory_equal(got, other, 32);

	assert_int_equal(crun__wire_mac(token, strlen(token), "server", b, a, got), 0);
	hex("0f871a0b9b4dda2cb388f7e26a37558b24f1b5812d9451995dfaf54f778549dc", want, 32);
	assert_memory_equal(got, want, 32);
	evp_hmac(token, "server", b, a, other);
	assert_memory_equal(got, other, 32);

	/* Roles, nonce order and token all matter. */
	assert_int_equal(crun__wire_mac(token, strlen(token), "client", a, b, got), 0);
	assert_int_equal(crun__wire_mac(token, strlen(token), "server", a, b, other), 0);
	assert_false(crun__wire_mac_equal(got, other));
	assert_int_equal(crun__wire_mac(token, strlen(token), "client", b, a, other), 0);
	assert_false(crun__wire_mac_equal(got, other));
	assert_int_equal(crun__wire_mac("secret-tokeN", strlen(token), "client", a, b, other), 0);
	assert_false(crun__wire_mac_equal(got, other));
	/* A token with a NUL byte inside is used whole. */
	assert_int_equal(crun__wire_mac("ab\0cd", 5, "client", a, b, got), 0);
	assert_int_equal(crun__wire_mac("ab\0ce", 5, "client", a, b, other), 0);
	assert_false(crun__wire_mac_equal(got, other));

	/* mac_equal compares all 32 bytes. */
	memcpy(other, got, 32);
	assert_true(crun__wire_mac_equal(got, other));
	other[0] ^= 1;
	assert_false(crun__wire_mac_equal(got, other));
	other[0] ^= 1;
	other[31] ^= 0x80;
	assert_false(crun__wire_mac_equal(got, other));
}

static void test_random(void **state)
{
	uint8_t x[32], y[32], zero[32] = {0};

	(void)state;
	assert_int_equal(crun__wire_random(x, sizeof(x)), 0);
	assert_int_equal(crun__wire_random(y, sizeof(y)), 0);
	assert_memory_not_equal(x, y, 32);
	assert_memory_not_equal(x, zero, 32);
	assert_int_equal(crun__wire_random(x, 0), 0);
}

/* What a client makes of an ERROR frame: its errno and its text. */
static void test_frame_error(void **state)
{
	static const struct {
		int64_t num;
		int rc;
	} nums[] = {
		{EACCES, -EACCES},    {1, -1},	     {CRUN_WIRE_ERRNO_MAX, -CRUN_WIRE_ERRNO_MAX},
		{0, -EPROTO},	      {-5, -EPROTO}, {CRUN_WIRE_ERRNO_MAX + 1, -EPROTO},
		{INT64_MAX, -EPROTO},
	};
	struct crun__wire_item item = its("bad\tkey\x7f 'k'");
	struct crun__wire_msg m = mk(CRUN_WIRE_ERROR, 0, 1, EINVAL, &item, 1);
	char buf[64], small[5], *heap;
	const char *text;

	(void)state;
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		m.num = nums[i].num;
		assert_int_equal(crun__wire_frame_errno(&m), nums[i].rc);
	}
	/* Unprintable bytes become '?'. */
	text = crun__wire_error_text(&m, buf, sizeof(buf), &heap);
	assert_ptr_equal(text, buf);
	assert_null(heap);
	assert_string_equal(text, "bad?key? 'k'");
	/* Too long for buf: cut without heap, whole with it. */
	assert_string_equal(crun__wire_error_text(&m, small, sizeof(small), NULL), "bad?");
	text = crun__wire_error_text(&m, small, sizeof(small), &heap);
	assert_non_null(heap);
	assert_ptr_equal(text, heap);
	assert_string_equal(text, "bad?key? 'k'");
	free(heap);
	/* No text. */
	m.count = 0;
	assert_string_equal(crun__wire_error_text(&m, buf, sizeof(buf), &heap), "");
	assert_null(heap);
}

/* A client accepts only valid replies from the server. */
static void test_check_reply(void **state)
{
	struct crun__wire_item items[2] = {its("k"), its("v")};
	static const struct {
		uint8_t type;
		int64_t num;
		uint32_t count;
		int rc;
		const char *err;
	} cases[] = {
		{CRUN_WIRE_OK, 0, 0, 0, NULL},
		{CRUN_WIRE_VALUE, 0, 1, 0, NULL},
		{CRUN_WIRE_NOTIFY, CRUN_WIRE_EV_SET, 2, 0, NULL},
		{CRUN_WIRE_SET, 0, 2, -EPROTO, "unexpected SET"},
		{CRUN_WIRE_HELLO, 0, 2, -EPROTO, "unexpected HELLO"},
		{CRUN_WIRE_ERROR, 0, 1, -EPROTO, "ERROR with errno 0 outside 1..4095"},
		{CRUN_WIRE_VALUE, 0, 2, -EPROTO, "VALUE takes 1 to 1 items, got 2"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct crun__wire_msg m =
			mk(cases[i].type, 0, 1, cases[i].num, items, cases[i].count);
		char err[160] = "";

		assert_int_equal(crun__wire_check_reply(&m, err, sizeof(err)), cases[i].rc);
		if (cases[i].err)
			assert_string_equal(err, cases[i].err);
	}
}

/* Decoding into a store that grows; the size a frame needs; request ids. */
static void test_decode_grow(void **state)
{
	struct crun__wire_item in[40], *store = calloc(2, sizeof(*store));
	struct crun__wire_msg m = mk(CRUN_WIRE_VALUES, 0, 5, 0, in, 40), out;
	uint32_t cap = 2, last = UINT32_MAX - 1;
	size_t size;
	uint8_t *buf;
	char err[160];

	(void)state;
	assert_non_null(store);
	for (int i = 0; i < 40; i++)
		in[i] = its("value");
	buf = encode(&m, &size);
	assert_int_equal(crun__wire_frame_size(buf, CRUN_WIRE_HEADER_LEN - 1, MAXP), 0);
	assert_int_equal(crun__wire_frame_size(buf, CRUN_WIRE_HEADER_LEN, MAXP), size);
	assert_int_equal(crun__wire_frame_size(buf, size, 16), 0); /* over the cap */
	assert_int_equal(
		crun__wire_decode_grow(buf, size - 1, MAXP, &out, &store, &cap, err, sizeof(err)),
		0);
	assert_int_equal(
		crun__wire_decode_grow(buf, size, MAXP, &out, &store, &cap, err, sizeof(err)),
		(long)size);
	assert_int_equal(cap, 40);
	assert_ptr_equal(out.items, store);
	assert_same_msg(&m, &out);
	free(store);

	/* Sizes a peer accepts, and one it refuses (never allocated). */
	in[0] = it(buf, CRUN_WIRE_MAX_PAYLOAD - CRUN_WIRE_PAYLOAD_MIN - 4);
	m.count = 1;
	assert_int_equal(crun__wire_sendable_size(&m, &size), 0);
	assert_int_equal(size, CRUN_WIRE_HEADER_LEN + CRUN_WIRE_MAX_PAYLOAD);
	in[0].len++;
	assert_int_equal(crun__wire_sendable_size(&m, &size), -E2BIG);
	assert_int_equal(size, CRUN_WIRE_HEADER_LEN + CRUN_WIRE_MAX_PAYLOAD + 1);
	free(buf);

	assert_int_equal(crun__wire_next_id(&last), UINT32_MAX);
	assert_int_equal(crun__wire_next_id(&last), 1); /* 0 is skipped */
	assert_int_equal(crun__wire_next_id(&last), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_requests_roundtrip),
		cmocka_unit_test(test_replies_roundtrip),
		cmocka_unit_test(test_encoding_layout),
		cmocka_unit_test(test_type_names),
		cmocka_unit_test(test_validate_rdzv_join),
		cmocka_unit_test(test_incremental),
		cmocka_unit_test(test_back_to_back),
		cmocka_unit_test(test_header_rejects),
		cmocka_unit_test(test_payload_rejects),
		cmocka_unit_test(test_max_items),
		cmocka_unit_test(test_enobufs),
		cmocka_unit_test(test_validate_counts),
		cmocka_unit_test(test_validate_flags_num),
		cmocka_unit_test(test_validate_keys),
		cmocka_unit_test(test_validate_hello),
		cmocka_unit_test(test_preambles),
		cmocka_unit_test(test_mac),
		cmocka_unit_test(test_random),
		cmocka_unit_test(test_frame_error),
		cmocka_unit_test(test_check_reply),
		cmocka_unit_test(test_decode_grow),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The handshake's steps (hello.h) called directly, no sockets: the client's
 * answer to every kind of server preamble and HELLO reply, the server's to
 * every kind of client preamble and first frame, and both sides run
 * against each other through the codec, byte by byte. */
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

#include "rendezvous/hello.h"
#include "rendezvous/wire.h"

#define TOKEN "s3cret-job-token"
#define PEER "10.0.0.1:29400"
#define RUN "run-1"
#define HELLO_ID 7
/* What a store with a token advertises. */
#define AUTH (CRUN_WIRE_F_AUTH | CRUN_WIRE_F_AUTH_RUN)
#define DOWNGRADE                                                                     \
	"store at '" PEER "' did not prove it knows the token: refusing it (a store " \
	"without a token, or an impostor)"

static const uint8_t snonce[CRUN_WIRE_NONCE_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const uint8_t cnonce[CRUN_WIRE_NONCE_LEN] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
static const uint8_t zeros[CRUN_WIRE_MAC_LEN];

static void put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* A server preamble with the given magic, version and flags. */
static void server_preamble(uint8_t *out, const char *magic, uint16_t version, uint16_t flags)
{
	memcpy(out, magic, 4);
	put_u16(out + 4, version);
	put_u16(out + 6, flags);
	memcpy(out + 8, snonce, CRUN_WIRE_NONCE_LEN);
}

static void client_preamble(uint8_t *out, const char *magic, uint16_t version, uint16_t zero)
{
	memcpy(out, magic, 4);
	put_u16(out + 4, version);
	put_u16(out + 6, zero);
}

static void client_init(struct crun__hello_client *h, const char *token)
{
	assert_int_equal(crun__hello_client_init(h, RUN, token, token ? strlen(token) : 0), 0);
	crun__hello_client_begin(h, PEER);
}

/* The mac over the nonces and run (a string). */
static void mac(const char *token, const char *role, const uint8_t *a, const uint8_t *b,
		const char *run, uint8_t *out)
{
	assert_int_equal(crun__wire_mac_run(token, strlen(token), role, a, b, run,
					    (uint32_t)strlen(run), out),
			 0);
}

/* ---- client: the server's preamble ---------------------------------------- */

static void test_client_preamble(void **state)
{
	static const struct {
		const char *name;
		const char *magic;
		uint16_t version, flags;
		size_t len; /* bytes of the preamble that arrived */
		const char *token;
		long rc;
		const char *err;
	} cases[] = {
		{"open store, no token", "CRUN", 1, 0, 40, NULL, 40, NULL},
		{"downgrade: open store, client has a token", "CRUN", 1, 0, 40, TOKEN, -EACCES,
		 DOWNGRADE},
		{"downgrade: open store with other flags, client has a token", "CRUN", 1,
		 CRUN_WIRE_F_RDZV_EXCL | CRUN_WIRE_F_AUTH_RUN, 40, TOKEN, -EACCES, DOWNGRADE},
		{"auth store whose proof leaves out the run id", "CRUN", 1, CRUN_WIRE_F_AUTH, 40,
		 TOKEN, -EACCES,
		 "the store at '" PEER "' speaks an older handshake whose proof does not cover "
		 "the run id: refusing it (upgrade it)"},
		{"auth store, token", "CRUN", 1, AUTH, 40, TOKEN, 40, NULL},
		{"store with the exclusion capability", "CRUN", 1, CRUN_WIRE_F_RDZV_EXCL, 40, NULL,
		 40, NULL},
		{"auth store with the exclusion capability", "CRUN", 1,
		 AUTH | CRUN_WIRE_F_RDZV_EXCL, 40, TOKEN, 40, NULL},
		{"flag bits unknown to this client", "CRUN", 1, 0xfff0, 40, NULL, 40, NULL},
		{"more bytes than the preamble", "CRUN", 1, 0, 60, NULL, 40, NULL},
		{"auth store, no token", "CRUN", 1, CRUN_WIRE_F_AUTH, 40, NULL, -EACCES,
		 "authentication failed: the store requires a token and none was given"},
		{"bad magic", "HTTP", 1, 0, 40, NULL, -EPROTO, "'" PEER "' is not a crun store"},
		{"other version", "CRUN", 2, 0, 40, TOKEN, -EPROTONOSUPPORT,
		 "the store at '" PEER "' speaks protocol version 2, this client 1"},
		{"truncated", "CRUN", 1, 0, 39, NULL, 0, NULL},
		{"nothing yet", "CRUN", 1, 0, 0, NULL, 0, NULL},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct crun__hello_client h;
		struct crun__wire_msg hello = {0};
		uint8_t buf[64] = {0}, want[CRUN_WIRE_MAC_LEN];
		char err[256] = "";
		char why[160];
		long rc;

		print_message("case: %s\n", cases[i].name);
		client_init(&h, cases[i].token);
		server_preamble(buf, cases[i].magic, cases[i].version, cases[i].flags);
		rc = crun__hello_client_preamble(&h, buf, cases[i].len, cnonce, HELLO_ID, &hello,
						 err, sizeof(err));
		assert_int_equal(rc, cases[i].rc);
		if (cases[i].err)
			assert_string_equal(err, cases[i].err);
		if (rc > 0) {
			/* The store's capabilities are kept for the connection. */
			assert_int_equal(h.flags, cases[i].flags);
			assert_int_equal(hello.type, CRUN_WIRE_HELLO);
			assert_int_equal(hello.id, HELLO_ID);
			assert_int_equal(crun__wire_validate(&hello, why, sizeof(why)), 0);
			assert_int_equal(hello.items[0].len, strlen(RUN));
			assert_memory_equal(hello.items[0].data, RUN, strlen(RUN));
			assert_memory_equal(hello.items[1].data, cnonce, CRUN_WIRE_NONCE_LEN);
			if (cases[i].flags & CRUN_WIRE_F_AUTH) {
				mac(TOKEN, "client", snonce, cnonce, RUN, want);
				assert_int_equal(hello.items[2].len, CRUN_WIRE_MAC_LEN);
				assert_memory_equal(hello.items[2].data, want, CRUN_WIRE_MAC_LEN);
				/* Once sent, the mac is gone. */
				crun__hello_client_sent(&h);
				assert_memory_equal(h.mac, zeros, CRUN_WIRE_MAC_LEN);
			} else {
				assert_int_equal(hello.items[2].len, 0);
			}
		}
		/* A new connection starts without them. */
		crun__hello_client_begin(&h, PEER);
		assert_int_equal(h.flags, 0);
		crun__hello_client_finish(&h);
	}
}

/* ---- client: the reply to HELLO ------------------------------------------- */

/* MAC_OTHER_RUN: right token, another run id; MAC_V1: right token, the
 * older mac without the run id. */
enum reply_mac { MAC_NONE, MAC_RIGHT, MAC_WRONG, MAC_SHORT, MAC_OTHER_RUN, MAC_V1 };

/* The mac a peer sends for kind: over run, another run, or none. */
static void kind_mac(enum reply_mac kind, const char *token, const char *role, const uint8_t *a,
		     const uint8_t *b, const char *run, uint8_t *out)
{
	if (kind == MAC_V1)
		assert_int_equal(crun__wire_mac(token, strlen(token), role, a, b, out), 0);
	else
		mac(token, role, a, b, kind == MAC_OTHER_RUN ? "run-2" : run, out);
}

static void test_client_reply(void **state)
{
	static const struct {
		const char *name;
		bool auth; /* the store asked for the token */
		uint8_t type;
		uint32_t id;
		int64_t num;
		enum reply_mac mac;
		const char *text; /* ERROR's message */
		int rc;
		const char *err;
	} cases[] = {
		{"open store, OK", false, CRUN_WIRE_OK, HELLO_ID, 0, MAC_NONE, NULL, 0, NULL},
		{"open store, OK with an item", false, CRUN_WIRE_OK, HELLO_ID, 0, MAC_WRONG, NULL,
		 0, NULL},
		{"auth store proves the token", true, CRUN_WIRE_OK, HELLO_ID, 0, MAC_RIGHT, NULL, 0,
		 NULL},
		{"auth store, wrong mac", true, CRUN_WIRE_OK, HELLO_ID, 0, MAC_WRONG, NULL, -EACCES,
		 DOWNGRADE},
		{"downgrade: auth store, no mac", true, CRUN_WIRE_OK, HELLO_ID, 0, MAC_NONE, NULL,
		 -EACCES, DOWNGRADE},
		{"auth store, short mac", true, CRUN_WIRE_OK, HELLO_ID, 0, MAC_SHORT, NULL, -EACCES,
		 DOWNGRADE},
		{"auth store, mac for another run id", true, CRUN_WIRE_OK, HELLO_ID, 0,
		 MAC_OTHER_RUN, NULL, -EACCES, DOWNGRADE},
		{"auth store, mac without the run id", true, CRUN_WIRE_OK, HELLO_ID, 0, MAC_V1,
		 NULL, -EACCES, DOWNGRADE},
		{"ERROR to HELLO", true, CRUN_WIRE_ERROR, HELLO_ID, EACCES, MAC_NONE,
		 "authentication failed", -EACCES, "authentication failed"},
		{"ERROR with id 0", false, CRUN_WIRE_ERROR, 0, EMFILE, MAC_NONE,
		 "too many connections", -EMFILE, "too many connections"},
		{"ERROR with unprintable text", false, CRUN_WIRE_ERROR, 0, EINVAL, MAC_NONE,
		 "bad\n\x01run", -EINVAL, "bad??run"},
		{"ERROR with an empty text", false, CRUN_WIRE_ERROR, HELLO_ID, EIO, MAC_NONE, "",
		 -EIO, ""},
		{"ERROR whose num is no errno", false, CRUN_WIRE_ERROR, HELLO_ID, 5000, MAC_NONE,
		 "x", -EPROTO, "x"},
		{"ERROR to another id", false, CRUN_WIRE_ERROR, 99, EINVAL, MAC_NONE, "x", -EPROTO,
		 "bad frame from the store at '" PEER "': ERROR with id 99 during the handshake"},
		{"VALUE to HELLO", false, CRUN_WIRE_VALUE, HELLO_ID, 0, MAC_WRONG, NULL, -EPROTO,
		 "bad frame from the store at '" PEER "': VALUE with id 7 during the handshake"},
		{"OK to another id", true, CRUN_WIRE_OK, 8, 0, MAC_RIGHT, NULL, -EPROTO,
		 "bad frame from the store at '" PEER "': OK with id 8 during the handshake"},
		{"NOTIFY", false, CRUN_WIRE_NOTIFY, HELLO_ID, CRUN_WIRE_EV_SET, MAC_WRONG, NULL,
		 -EPROTO,
		 "bad frame from the store at '" PEER "': NOTIFY with id 7 during the handshake"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct crun__hello_client h;
		struct crun__wire_msg hello, reply = {0};
		struct crun__wire_item items[2];
		uint8_t buf[40], smac[CRUN_WIRE_MAC_LEN];
		char err[256] = "stale";

		print_message("case: %s\n", cases[i].name);
		client_init(&h, cases[i].auth ? TOKEN : NULL);
		server_preamble(buf, "CRUN", 1, cases[i].auth ? AUTH : 0);
		assert_int_equal(crun__hello_client_preamble(&h, buf, sizeof(buf), cnonce, HELLO_ID,
							     &hello, err, sizeof(err)),
				 40);
		kind_mac(cases[i].mac, TOKEN, "server", cnonce, snonce, RUN, smac);
		reply.type = cases[i].type;
		reply.id = cases[i].id;
		reply.num = cases[i].num;
		reply.items = items;
		if (cases[i].text) {
			items[0] = (struct crun__wire_item){(const uint8_t *)cases[i].text,
							    (uint32_t)strlen(cases[i].text)};
			reply.count = 1;
		} else if (cases[i].mac != MAC_NONE) {
			if (cases[i].mac == MAC_WRONG)
				smac[0] ^= 1;
			items[0] = (struct crun__wire_item){smac, cases[i].mac == MAC_SHORT
									  ? CRUN_WIRE_MAC_LEN - 1
									  : CRUN_WIRE_MAC_LEN};
			items[1] = items[0];
			reply.count = cases[i].type == CRUN_WIRE_NOTIFY ? 2 : 1;
		}
		assert_int_equal(crun__hello_client_reply(&h, &reply, err, sizeof(err)),
				 cases[i].rc);
		if (cases[i].err)
			assert_string_equal(err, cases[i].err);
		/* The reply step wipes the mac whether or not sent was called. */
		assert_memory_equal(h.mac, zeros, CRUN_WIRE_MAC_LEN);
		crun__hello_client_finish(&h);
	}
}

static void test_client_lifecycle(void **state)
{
	struct crun__hello_client h;

	(void)state;
	/* Token copied, finish NULL-safe and repeatable. */
	assert_int_equal(crun__hello_client_init(&h, RUN, TOKEN, strlen(TOKEN)), 0);
	assert_string_equal(h.run_id, RUN);
	assert_non_null(h.token);
	assert_memory_equal(h.token, TOKEN, strlen(TOKEN));
	crun__hello_client_finish(&h);
	assert_null(h.token);
	assert_null(h.run_id);
	crun__hello_client_finish(&h);
	crun__hello_client_finish(NULL);
	assert_int_equal(crun__hello_client_init(&h, RUN, NULL, 0), 0);
	assert_null(h.token);
	crun__hello_client_finish(&h);
}

/* ---- server: the client's preamble ---------------------------------------- */

static void test_server_preamble(void **state)
{
	static const struct {
		const char *name;
		const char *magic;
		uint16_t version, zero;
		size_t len;
		long rc;
		const char *why;
	} cases[] = {
		{"good", "CRUN", 1, 0, 8, 8, NULL},
		{"good, a frame behind it", "CRUN", 1, 0, 20, 8, NULL},
		{"truncated", "CRUN", 1, 0, 7, 0, NULL},
		{"nothing yet", "CRUN", 1, 0, 0, 0, NULL},
		{"bad magic", "GET ", 1, 0, 8, -EPROTO, "bad magic: not a crun store client"},
		{"other version", "CRUN", 2, 0, 8, -EPROTONOSUPPORT,
		 "protocol version 2 is not supported (this server speaks 1)"},
		{"reserved field set", "CRUN", 1, 1, 8, -EPROTO,
		 "bad magic: not a crun store client"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t buf[32] = {0};
		char why[128] = "";

		print_message("case: %s\n", cases[i].name);
		client_preamble(buf, cases[i].magic, cases[i].version, cases[i].zero);
		assert_int_equal(crun__hello_server_preamble(buf, cases[i].len, why, sizeof(why)),
				 cases[i].rc);
		if (cases[i].why)
			assert_string_equal(why, cases[i].why);
	}
}

/* ---- server: the first frame ---------------------------------------------- */

static void test_server_hello(void **state)
{
	static const char long_run[] = "a-run-id-longer-than-16";
	static const struct {
		const char *name;
		const char *server_token;
		uint8_t type;
		const char *run;
		uint32_t run_len; /* 0: strlen(run) */
		enum reply_mac mac;
		int rc;
		const char *why;
	} cases[] = {
		{"open server", NULL, CRUN_WIRE_HELLO, RUN, 0, MAC_NONE, 0, NULL},
		{"open server ignores a mac", NULL, CRUN_WIRE_HELLO, RUN, 0, MAC_WRONG, 0, NULL},
		{"token, right mac", TOKEN, CRUN_WIRE_HELLO, RUN, 0, MAC_RIGHT, 0, NULL},
		{"token, wrong mac", TOKEN, CRUN_WIRE_HELLO, RUN, 0, MAC_WRONG, -EACCES,
		 "authentication failed"},
		{"token, no mac", TOKEN, CRUN_WIRE_HELLO, RUN, 0, MAC_NONE, -EACCES,
		 "authentication failed"},
		{"token, short mac", TOKEN, CRUN_WIRE_HELLO, RUN, 0, MAC_SHORT, -EACCES,
		 "authentication failed"},
		{"another token's mac", "other-token", CRUN_WIRE_HELLO, RUN, 0, MAC_RIGHT, -EACCES,
		 "authentication failed"},
		{"mac for another run id", TOKEN, CRUN_WIRE_HELLO, RUN, 0, MAC_OTHER_RUN, -EACCES,
		 "authentication failed"},
		{"older client: mac without the run id", TOKEN, CRUN_WIRE_HELLO, RUN, 0, MAC_V1,
		 -EACCES,
		 "authentication failed: the client speaks an older handshake whose proof does "
		 "not cover the run id (upgrade it)"},
		{"run id at the limit", NULL, CRUN_WIRE_HELLO, "0123456789abcdef", 0, MAC_NONE, 0,
		 NULL},
		{"run id too long", TOKEN, CRUN_WIRE_HELLO, long_run, 0, MAC_RIGHT, -E2BIG,
		 "run id of 23 bytes exceeds the limit of 16 bytes"},
		{"NUL in the run id", NULL, CRUN_WIRE_HELLO, "ru\0n", 4, MAC_NONE, -EINVAL,
		 "run id contains a NUL byte"},
		{"not a HELLO", NULL, CRUN_WIRE_SET, RUN, 0, MAC_NONE, -EPROTO,
		 "expected HELLO, got SET"},
		{"PING first", TOKEN, CRUN_WIRE_PING, RUN, 0, MAC_RIGHT, -EPROTO,
		 "expected HELLO, got PING"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *tok = cases[i].server_token;
		struct crun__hello_server hs = {tok, tok ? strlen(tok) : 0, snonce, 16};
		struct crun__wire_item items[3], reply = {(const uint8_t *)"stale", 5};
		struct crun__wire_msg m = {.type = cases[i].type, .id = 3, .items = items};
		uint8_t cmac[CRUN_WIRE_MAC_LEN], smac[CRUN_WIRE_MAC_LEN], want[CRUN_WIRE_MAC_LEN];
		char why[128] = "";
		int rc;

		print_message("case: %s\n", cases[i].name);
		kind_mac(cases[i].mac, TOKEN, "client", snonce, cnonce, cases[i].run, cmac);
		if (cases[i].mac == MAC_WRONG)
			cmac[5] ^= 0x40;
		items[0] = (struct crun__wire_item){
			(const uint8_t *)cases[i].run,
			cases[i].run_len ? cases[i].run_len : (uint32_t)strlen(cases[i].run)};
		items[1] = (struct crun__wire_item){cnonce, CRUN_WIRE_NONCE_LEN};
		items[2] = (struct crun__wire_item){cmac, cases[i].mac == MAC_NONE    ? 0
							  : cases[i].mac == MAC_SHORT ? 31
										      : 32};
		m.count = cases[i].type == CRUN_WIRE_HELLO ? 3
			  : cases[i].type == CRUN_WIRE_SET ? 2
							   : 1;
		rc = crun__hello_server_hello(&hs, &m, smac, &reply, why, sizeof(why));
		assert_int_equal(rc, cases[i].rc);
		if (cases[i].why)
			assert_string_equal(why, cases[i].why);
		if (rc == 0 && tok) {
			mac(tok, "server", cnonce, snonce, cases[i].run, want);
			assert_int_equal(reply.len, CRUN_WIRE_MAC_LEN);
			assert_ptr_equal(reply.data, smac);
			assert_memory_equal(reply.data, want, CRUN_WIRE_MAC_LEN);
		} else {
			assert_int_equal(reply.len, 0);
		}
	}
}

/* ---- both sides through the codec ----------------------------------------- */

/* Encodes m, then feeds it to the decoder one byte more at a time: nothing
 * decodes until the last byte. Returns the decoded frame (items in store). */
static void through_codec(const struct crun__wire_msg *m, uint8_t *buf, size_t cap,
			  struct crun__wire_msg *out, struct crun__wire_item *store)
{
	size_t n = crun__wire_encoded_size(m);
	char err[160];

	assert_true(n <= cap);
	assert_int_equal(crun__wire_encode(m, buf), n);
	for (size_t len = 0; len <= n; len++) {
		uint32_t items_cap = 4;
		long rc = crun__wire_decode(buf, len, 1 << 16, out, store, &items_cap, err,
					    sizeof(err));

		assert_int_equal(rc, len < n ? 0 : (long)n);
	}
	assert_int_equal(crun__wire_validate(out, err, sizeof(err)), 0);
}

static void test_both_sides(void **state)
{
	static const struct {
		const char *name;
		const char *server_token, *client_token;
		const char *run_seen; /* the run id the server gets; NULL: the one sent */
		int client_rc, server_rc, reply_rc;
		const char *err;
	} cases[] = {
		{"no tokens", NULL, NULL, NULL, 40, 0, 0, NULL},
		{"same token", TOKEN, TOKEN, NULL, 40, 0, 0, NULL},
		{"downgrade: token on the client only", NULL, TOKEN, NULL, -EACCES, 0, 0,
		 DOWNGRADE},
		{"token on the server only", TOKEN, NULL, NULL, -EACCES, 0, 0,
		 "authentication failed: the store requires a token and none was given"},
		{"different tokens", TOKEN, "other", NULL, 40, -EACCES, -EACCES,
		 "authentication failed"},
		{"run id changed on the way", TOKEN, TOKEN, "run-2", 40, -EACCES, -EACCES,
		 "authentication failed"},
		{"run id changed on the way, no tokens", NULL, NULL, "run-2", 40, 0, 0, NULL},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *st = cases[i].server_token;
		struct crun__hello_server hs = {st, st ? strlen(st) : 0, snonce, 256};
		struct crun__hello_client h;
		struct crun__wire_item store[4], reply_item;
		struct crun__wire_msg hello, got, reply;
		uint8_t pre[CRUN_WIRE_SERVER_PREAMBLE + CRUN_WIRE_CLIENT_PREAMBLE], buf[512];
		uint8_t smac[CRUN_WIRE_MAC_LEN];
		char err[256], why[128];
		long rc;

		print_message("case: %s\n", cases[i].name);
		client_init(&h, cases[i].client_token);
		crun__wire_client_preamble(pre);
		assert_int_equal(crun__hello_server_preamble(pre, CRUN_WIRE_CLIENT_PREAMBLE, why,
							     sizeof(why)),
				 CRUN_WIRE_CLIENT_PREAMBLE);
		crun__wire_server_preamble(pre, st ? AUTH : 0, st ? snonce : NULL);
		rc = crun__hello_client_preamble(&h, pre, CRUN_WIRE_SERVER_PREAMBLE, cnonce,
						 HELLO_ID, &hello, err, sizeof(err));
		assert_int_equal(rc, cases[i].client_rc);
		if (rc < 0) {
			assert_string_equal(err, cases[i].err);
			crun__hello_client_finish(&h);
			continue;
		}
		through_codec(&hello, buf, sizeof(buf), &got, store);
		crun__hello_client_sent(&h);
		if (cases[i].run_seen)
			got.items[0] =
				(struct crun__wire_item){(const uint8_t *)cases[i].run_seen,
							 (uint32_t)strlen(cases[i].run_seen)};
		rc = crun__hello_server_hello(&hs, &got, smac, &reply_item, why, sizeof(why));
		assert_int_equal(rc, cases[i].server_rc);
		if (rc < 0) {
			/* The server answers with an ERROR, the client reports it. */
			reply_item = (struct crun__wire_item){(const uint8_t *)why,
							      (uint32_t)strlen(why)};
			reply = (struct crun__wire_msg){.type = CRUN_WIRE_ERROR,
							.id = got.id,
							.num = -rc,
							.count = 1,
							.items = &reply_item};
		} else {
			reply = (struct crun__wire_msg){.type = CRUN_WIRE_OK,
							.id = got.id,
							.count = 1,
							.items = &reply_item};
		}
		through_codec(&reply, buf, sizeof(buf), &got, store);
		assert_int_equal(crun__wire_check_reply(&got, err, sizeof(err)), 0);
		assert_int_equal(crun__hello_client_reply(&h, &got, err, sizeof(err)),
				 cases[i].reply_rc);
		if (cases[i].reply_rc)
			assert_string_equal(err, cases[i].err);
		crun__hello_client_finish(&h);
	}
}

/* ---- retry policy ---------------------------------------------------------- */

static void test_retry_policy(void **state)
{
	static const struct {
		int err;
		bool retry;
	} cases[] = {
		{-ECONNREFUSED, true}, {-ENETUNREACH, true}, {-EHOSTUNREACH, true},
		{-ETIMEDOUT, true},    {-ECONNRESET, true},  {-EPIPE, true},
		{-ECONNABORTED, true}, {-EAGAIN, true},	     {-ENETDOWN, true},
		{-EACCES, false},      {-EPROTO, false},     {-EPROTONOSUPPORT, false},
		{-EMFILE, false},      {-ENOMEM, false},     {0, false},
	};
	static const int waits[] = {10, 20, 40, 80, 160, 320, 640, 1000, 1000};
	int b = CRUN__HELLO_BACKOFF_FIRST_MS;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(crun__hello_retryable(cases[i].err), cases[i].retry);
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
		assert_int_equal(b, waits[i]);
		b = crun__hello_next_backoff(b);
	}
	/* Jitter: half the backoff to all of it, as the random bits say. */
	assert_int_equal(crun__hello_jitter(1000, 0), 500);
	assert_int_equal(crun__hello_jitter(1000, 500), 1000);
	assert_int_equal(crun__hello_jitter(1000, 501), 500);
	assert_int_equal(crun__hello_jitter(10, 3), 8);
	assert_int_equal(crun__hello_jitter(1, 12345), 1);
	for (int i = 0; i < 1000; i++) {
		int w = crun__hello_jitter(640, crun__hello_random());

		assert_true(w >= 320 && w <= 640);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_preamble),	 cmocka_unit_test(test_client_reply),
		cmocka_unit_test(test_client_lifecycle), cmocka_unit_test(test_server_preamble),
		cmocka_unit_test(test_server_hello),	 cmocka_unit_test(test_both_sides),
		cmocka_unit_test(test_retry_policy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

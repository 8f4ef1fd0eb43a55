/* The codec is deliberately one shape for every frame (see wire.h): a
 * single decoder is easier to make hostile-input proof than one per type,
 * and per-type rules live in one table below. */
#include "rendezvous/wire.h"
#include "common/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

static uint16_t get_u16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get_u32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get_u64(const uint8_t *p)
{
	return ((uint64_t)get_u32(p) << 32) | get_u32(p + 4);
}

static uint8_t *put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
	return p + 2;
}

static uint8_t *put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
	return p + 4;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
	p = put_u32(p, (uint32_t)(v >> 32));
	return put_u32(p, (uint32_t)v);
}

/* Per-type rules: item counts, allowed flags, what num means. */
enum num_rule {
	NUM_ZERO,     /* must be 0 */
	NUM_ANY,      /* delta, result, errno, event */
	NUM_WAIT,     /* timeout_ms >= 0 */
	NUM_POSITIVE, /* timeout_ms > 0 */
	NUM_ROUND,    /* a round number >= 0 */
	NUM_PAGE,     /* LIST: 0 without items (plain), else a page size > 0 */
};

struct type_rule {
	const char *name;
	uint32_t min_items, max_items;
	uint8_t flags;
	enum num_rule num;
	bool key_first; /* item 0 is a key (or an id): must not be empty */
	bool internal;	/* built by the server for itself, never a frame */
};

static const struct type_rule rules[256] = {
	[CRUN_WIRE_HELLO] = {"HELLO", 3, 3, 0, NUM_ZERO, true, false},
	[CRUN_WIRE_SET] = {"SET", 2, 2, CRUN_WIRE_FL_EPHEMERAL, NUM_ZERO, true, false},
	[CRUN_WIRE_GET] = {"GET", 1, 1, 0, NUM_WAIT, true, false},
	[CRUN_WIRE_CHECK] = {"CHECK", 1, CRUN_WIRE_MAX_ITEMS, 0, NUM_ZERO, true, false},
	[CRUN_WIRE_WAIT] = {"WAIT", 1, CRUN_WIRE_MAX_ITEMS, 0, NUM_POSITIVE, true, false},
	[CRUN_WIRE_ADD] = {"ADD", 1, 1, 0, NUM_ANY, true, false},
	[CRUN_WIRE_CAS] = {"CAS", 3, 3, CRUN_WIRE_FL_EXPECT_ABSENT, NUM_ZERO, true, false},
	[CRUN_WIRE_DELETE] = {"DELETE", 1, 1, 0, NUM_ZERO, true, false},
	[CRUN_WIRE_APPEND] = {"APPEND", 2, 2, 0, NUM_ZERO, true, false},
	[CRUN_WIRE_COUNT] = {"COUNT", 0, 0, 0, NUM_ZERO, false, false},
	[CRUN_WIRE_MGET] = {"MGET", 1, CRUN_WIRE_MAX_ITEMS, 0, NUM_WAIT, true, false},
	[CRUN_WIRE_MSET] = {"MSET", 2, CRUN_WIRE_MAX_ITEMS, 0, NUM_ZERO, true, false},
	[CRUN_WIRE_LIST] = {"LIST", 0, 1, 0, NUM_PAGE, false, false},
	[CRUN_WIRE_PING] = {"PING", 0, 1, 0, NUM_ZERO, false, false},
	[CRUN_WIRE_WATCH] = {"WATCH", 1, 1, 0, NUM_ZERO, true, false},
	[CRUN_WIRE_UNWATCH] = {"UNWATCH", 1, 1, 0, NUM_ZERO, true, false},
	/* Rendezvous (rdzv.h): JOIN's num is its join timeout, item 0 the
	 * node id; FAIL and DONE name a round; the items' contents are
	 * checked by crun__rdzv_parse_join on the server. */
	[CRUN_WIRE_RDZV_JOIN] = {"RDZV_JOIN", 10, 14, 0, NUM_POSITIVE, true, false},
	[CRUN_WIRE_RDZV_FAIL] = {"RDZV_FAIL", 1, 2, 0, NUM_ROUND, false, false},
	[CRUN_WIRE_RDZV_DONE] = {"RDZV_DONE", 0, 0, 0, NUM_ROUND, false, false},
	/* RESUME: a JOIN's 14 items and an assignment of one node or more */
	[CRUN_WIRE_RDZV_RESUME] = {"RDZV_RESUME", 22, CRUN_WIRE_MAX_ITEMS, 0, NUM_POSITIVE, true,
				   false},
	/* The TCPStore clients' queues (store.h): [key, value], [key], [key]. */
	[CRUN_WIRE_QUEUE_PUSH] = {"QUEUE_PUSH", 2, 2, 0, NUM_ZERO, true, true},
	[CRUN_WIRE_QUEUE_POP] = {"QUEUE_POP", 1, 1, 0, NUM_ZERO, true, true},
	[CRUN_WIRE_QUEUE_LEN] = {"QUEUE_LEN", 1, 1, 0, NUM_ZERO, true, true},
	[CRUN_WIRE_OK] = {"OK", 0, CRUN_WIRE_MAX_ITEMS, 0, NUM_ANY, false, false},
	[CRUN_WIRE_ERROR] = {"ERROR", 1, 1, 0, NUM_ANY, false, false},
	[CRUN_WIRE_VALUE] = {"VALUE", 1, 1, 0, NUM_ANY, false, false},
	[CRUN_WIRE_INT] = {"INT", 0, 0, 0, NUM_ANY, false, false},
	[CRUN_WIRE_VALUES] = {"VALUES", 0, CRUN_WIRE_MAX_ITEMS, 0, NUM_ANY, false, false},
	[CRUN_WIRE_NOTIFY] = {"NOTIFY", 2, 2, 0, NUM_ANY, true, false},
	/* [reason, message, restart_count]; num = the round that ended */
	[CRUN_WIRE_RDZV_EVENT] = {"RDZV_EVENT", 3, 3, 0, NUM_ROUND, true, false},
};

const char *crun__wire_type_name(uint8_t type)
{
	return rules[type].name ? rules[type].name : "unknown";
}

bool crun__wire_is_request(uint8_t type)
{
	return type >= CRUN_WIRE_HELLO && type <= CRUN_WIRE_RDZV_RESUME;
}

bool crun__wire_is_reply(uint8_t type)
{
	return type >= CRUN_WIRE_OK && type <= CRUN_WIRE_RDZV_EVENT;
}

int crun__wire_check_header(const uint8_t *hdr, uint32_t max_payload, uint32_t *payload_len,
			    char *err, size_t errlen)
{
	uint32_t len = get_u32(hdr);
	uint8_t type = hdr[4];

	if (max_payload > CRUN_WIRE_MAX_PAYLOAD)
		max_payload = CRUN_WIRE_MAX_PAYLOAD;
	if (!rules[type].name || rules[type].internal) {
		crun__seterr(err, errlen, "unknown frame type %u", type);
		return -EPROTO;
	}
	if (get_u16(hdr + 6) != 0) {
		crun__seterr(err, errlen, "reserved header field is not zero");
		return -EPROTO;
	}
	if (len > max_payload) {
		crun__seterr(err, errlen, "frame of %u bytes exceeds the limit of %u bytes", len,
			     max_payload);
		return -EMSGSIZE;
	}
	if (len < CRUN_WIRE_PAYLOAD_MIN) {
		crun__seterr(err, errlen, "frame payload of %u bytes is shorter than %u", len,
			     CRUN_WIRE_PAYLOAD_MIN);
		return -EPROTO;
	}
	*payload_len = len;
	return 0;
}

long crun__wire_decode(const uint8_t *buf, size_t len, uint32_t max_payload,
		       struct crun__wire_msg *msg, struct crun__wire_item *items_store,
		       uint32_t *items_cap, char *err, size_t errlen)
{
	uint32_t plen, count, i;
	const uint8_t *p, *end;
	int rc;

	if (len < CRUN_WIRE_HEADER_LEN)
		return CRUN_WIRE_NEED_MORE;
	rc = crun__wire_check_header(buf, max_payload, &plen, err, errlen);
	if (rc < 0)
		return rc;
	if (len - CRUN_WIRE_HEADER_LEN < plen)
		return CRUN_WIRE_NEED_MORE;

	p = buf + CRUN_WIRE_HEADER_LEN;
	end = p + plen;
	count = get_u32(p + 8);
	/* Each item takes at least its 4-byte length. */
	if (count > CRUN_WIRE_MAX_ITEMS || count > (plen - CRUN_WIRE_PAYLOAD_MIN) / 4) {
		crun__seterr(err, errlen, "item count %u does not fit a %u-byte frame", count,
			     plen);
		return -EPROTO;
	}
	if (count > *items_cap) {
		*items_cap = count;
		crun__seterr(err, errlen, "need room for %u items", count);
		return -ENOBUFS;
	}
	msg->type = buf[4];
	msg->flags = buf[5];
	msg->id = get_u32(buf + 8);
	msg->num = (int64_t)get_u64(p);
	msg->count = count;
	msg->items = items_store;
	p += CRUN_WIRE_PAYLOAD_MIN;
	for (i = 0; i < count; i++) {
		uint32_t n;

		if ((size_t)(end - p) < 4) {
			crun__seterr(err, errlen, "item %u runs past the end of the frame", i);
			return -EPROTO;
		}
		n = get_u32(p);
		p += 4;
		if ((size_t)(end - p) < n) {
			crun__seterr(err, errlen,
				     "item %u of %u bytes runs past the end of the frame", i, n);
			return -EPROTO;
		}
		items_store[i].data = p;
		items_store[i].len = n;
		p += n;
	}
	if (p != end) {
		crun__seterr(err, errlen, "%zu stray bytes after the last item", (size_t)(end - p));
		return -EPROTO;
	}
	return (long)(CRUN_WIRE_HEADER_LEN + plen);
}

int crun__wire_validate(const struct crun__wire_msg *msg, char *err, size_t errlen)
{
	const struct type_rule *r = &rules[msg->type];

	if (!r->name) {
		crun__seterr(err, errlen, "unknown frame type %u", msg->type);
		return -EPROTO;
	}
	if (msg->count < r->min_items || msg->count > r->max_items) {
		crun__seterr(err, errlen, "%s takes %u to %u items, got %u", r->name, r->min_items,
			     r->max_items, msg->count);
		return -EPROTO;
	}
	if (msg->flags & ~r->flags) {
		crun__seterr(err, errlen, "%s does not take flags 0x%x", r->name, msg->flags);
		return -EPROTO;
	}
	switch (r->num) {
	case NUM_ZERO:
		if (msg->num != 0) {
			crun__seterr(err, errlen, "%s takes no number, got %lld", r->name,
				     (long long)msg->num);
			return -EPROTO;
		}
		break;
	case NUM_WAIT:
		if (msg->num < 0) {
			crun__seterr(err, errlen, "%s timeout must not be negative", r->name);
			return -EPROTO;
		}
		break;
	case NUM_POSITIVE:
		if (msg->num <= 0) {
			crun__seterr(err, errlen, "%s timeout must be positive", r->name);
			return -EPROTO;
		}
		break;
	case NUM_ROUND:
		if (msg->num < 0) {
			crun__seterr(err, errlen, "%s round must not be negative, got %lld",
				     r->name, (long long)msg->num);
			return -EPROTO;
		}
		break;
	case NUM_PAGE:
		if (msg->num < 0 || (msg->num == 0 && msg->count)) {
			crun__seterr(err, errlen, "%s page size must be positive, got %lld",
				     r->name, (long long)msg->num);
			return -EPROTO;
		}
		break;
	case NUM_ANY:
		break;
	}
	if (r->key_first && msg->count && msg->items[0].len == 0 && msg->type != CRUN_WIRE_HELLO) {
		if (msg->type == CRUN_WIRE_RDZV_JOIN || msg->type == CRUN_WIRE_RDZV_RESUME)
			crun__seterr(err, errlen, "%s with an empty node id", r->name);
		else if (msg->type == CRUN_WIRE_RDZV_EVENT)
			crun__seterr(err, errlen, "RDZV_EVENT with an empty reason");
		else
			crun__seterr(err, errlen, "%s with an empty key", r->name);
		return -EPROTO;
	}
	switch (msg->type) {
	case CRUN_WIRE_HELLO:
		if (msg->items[0].len == 0) {
			crun__seterr(err, errlen, "HELLO with an empty run id");
			return -EPROTO;
		}
		if (msg->items[1].len != CRUN_WIRE_NONCE_LEN) {
			crun__seterr(err, errlen, "HELLO nonce must be %d bytes",
				     CRUN_WIRE_NONCE_LEN);
			return -EPROTO;
		}
		if (msg->items[2].len != 0 && msg->items[2].len != CRUN_WIRE_MAC_LEN) {
			crun__seterr(err, errlen, "HELLO mac must be empty or %d bytes",
				     CRUN_WIRE_MAC_LEN);
			return -EPROTO;
		}
		break;
	case CRUN_WIRE_CHECK:
	case CRUN_WIRE_WAIT:
	case CRUN_WIRE_MGET:
		for (uint32_t i = 0; i < msg->count; i++)
			if (msg->items[i].len == 0) {
				crun__seterr(err, errlen, "%s with an empty key", r->name);
				return -EPROTO;
			}
		break;
	case CRUN_WIRE_MSET:
		if (msg->count % 2) {
			crun__seterr(err, errlen, "MSET takes key/value pairs, got %u items",
				     msg->count);
			return -EPROTO;
		}
		for (uint32_t i = 0; i < msg->count; i += 2)
			if (msg->items[i].len == 0) {
				crun__seterr(err, errlen, "MSET with an empty key");
				return -EPROTO;
			}
		break;
	case CRUN_WIRE_ERROR:
		/* A client returns -num: zero or a negative number would read as
		 * success, a huge one would not fit an int. */
		if (msg->num <= 0 || msg->num > CRUN_WIRE_ERRNO_MAX) {
			crun__seterr(err, errlen, "ERROR with errno %lld outside 1..%d",
				     (long long)msg->num, CRUN_WIRE_ERRNO_MAX);
			return -EPROTO;
		}
		break;
	case CRUN_WIRE_NOTIFY:
		if (msg->num != CRUN_WIRE_EV_SET && msg->num != CRUN_WIRE_EV_DELETE) {
			crun__seterr(err, errlen, "NOTIFY with unknown event %lld",
				     (long long)msg->num);
			return -EPROTO;
		}
		break;
	default:
		break;
	}
	return 0;
}

size_t crun__wire_encoded_size(const struct crun__wire_msg *msg)
{
	size_t n = CRUN_WIRE_HEADER_LEN + CRUN_WIRE_PAYLOAD_MIN;

	for (uint32_t i = 0; i < msg->count; i++)
		n += 4 + (size_t)msg->items[i].len;
	return n;
}

size_t crun__wire_encode(const struct crun__wire_msg *msg, uint8_t *out)
{
	size_t total = crun__wire_encoded_size(msg);
	uint8_t *p = out;

	p = put_u32(p, (uint32_t)(total - CRUN_WIRE_HEADER_LEN));
	*p++ = msg->type;
	*p++ = msg->flags;
	p = put_u16(p, 0);
	p = put_u32(p, msg->id);
	p = put_u64(p, (uint64_t)msg->num);
	p = put_u32(p, msg->count);
	for (uint32_t i = 0; i < msg->count; i++) {
		p = put_u32(p, msg->items[i].len);
		if (msg->items[i].len)
			memcpy(p, msg->items[i].data, msg->items[i].len);
		p += msg->items[i].len;
	}
	return (size_t)(p - out);
}

void crun__wire_client_preamble(uint8_t *out)
{
	memcpy(out, CRUN_WIRE_MAGIC, 4);
	put_u16(out + 4, CRUN_WIRE_VERSION);
	put_u16(out + 6, 0);
}

int crun__wire_parse_client_preamble(const uint8_t *in, uint16_t *version)
{
	if (memcmp(in, CRUN_WIRE_MAGIC, 4))
		return -EPROTO;
	*version = get_u16(in + 4);
	if (*version != CRUN_WIRE_VERSION)
		return -EPROTONOSUPPORT;
	if (get_u16(in + 6) != 0)
		return -EPROTO;
	return 0;
}

void crun__wire_server_preamble(uint8_t *out, uint16_t flags, const uint8_t *nonce)
{
	memcpy(out, CRUN_WIRE_MAGIC, 4);
	put_u16(out + 4, CRUN_WIRE_VERSION);
	put_u16(out + 6, flags);
	if (nonce)
		memcpy(out + 8, nonce, CRUN_WIRE_NONCE_LEN);
	else
		memset(out + 8, 0, CRUN_WIRE_NONCE_LEN);
}

int crun__wire_parse_server_preamble(const uint8_t *in, uint16_t *version, uint16_t *flags,
				     uint8_t *nonce)
{
	if (memcmp(in, CRUN_WIRE_MAGIC, 4))
		return -EPROTO;
	*version = get_u16(in + 4);
	*flags = get_u16(in + 6);
	memcpy(nonce, in + 8, CRUN_WIRE_NONCE_LEN);
	if (*version != CRUN_WIRE_VERSION)
		return -EPROTONOSUPPORT;
	return 0;
}

int crun__wire_mac(const void *token, size_t token_len, const char *role, const uint8_t *a,
		   const uint8_t *b, uint8_t *out)
{
	uint8_t msg[32 + 2 * CRUN_WIRE_NONCE_LEN];
	unsigned int outlen = 0;
	int n;

	n = snprintf((char *)msg, 32, "crun-auth-v1 %s", role);
	if (n < 0 || n >= 32)
		return -EINVAL;
	memcpy(msg + n, a, CRUN_WIRE_NONCE_LEN);
	memcpy(msg + n + CRUN_WIRE_NONCE_LEN, b, CRUN_WIRE_NONCE_LEN);
	if (!HMAC(EVP_sha256(), token, (int)token_len, msg, (size_t)n + 2 * CRUN_WIRE_NONCE_LEN,
		  out, &outlen) ||
	    outlen != CRUN_WIRE_MAC_LEN)
		return -EIO;
	return 0;
}

int crun__wire_mac_run(const void *token, size_t token_len, const char *role, const uint8_t *a,
		       const uint8_t *b, const void *run_id, uint32_t run_len, uint8_t *out)
{
	size_t len = 32 + 2 * CRUN_WIRE_NONCE_LEN + 4 + (size_t)run_len;
	unsigned int outlen = 0;
	uint8_t *msg = malloc(len);
	int n, rc = 0;

	if (!msg)
		return -ENOMEM;
	n = snprintf((char *)msg, 32, "crun-auth-v2 %s", role);
	if (n < 0 || n >= 32) {
		free(msg);
		return -EINVAL;
	}
	memcpy(msg + n, a, CRUN_WIRE_NONCE_LEN);
	memcpy(msg + n + CRUN_WIRE_NONCE_LEN, b, CRUN_WIRE_NONCE_LEN);
	put_u32(msg + n + 2 * CRUN_WIRE_NONCE_LEN, run_len);
	if (run_len)
		memcpy(msg + n + 2 * CRUN_WIRE_NONCE_LEN + 4, run_id, run_len);
	len = (size_t)n + 2 * CRUN_WIRE_NONCE_LEN + 4 + run_len;
	if (!HMAC(EVP_sha256(), token, (int)token_len, msg, len, out, &outlen) ||
	    outlen != CRUN_WIRE_MAC_LEN)
		rc = -EIO;
	OPENSSL_cleanse(msg, len);
	free(msg);
	return rc;
}

bool crun__wire_mac_equal(const uint8_t *a, const uint8_t *b)
{
	return CRYPTO_memcmp(a, b, CRUN_WIRE_MAC_LEN) == 0;
}

int crun__wire_random(uint8_t *buf, size_t len)
{
	return RAND_bytes(buf, (int)len) == 1 ? 0 : -EIO;
}

int crun__wire_sendable_size(const struct crun__wire_msg *msg, size_t *size)
{
	*size = crun__wire_encoded_size(msg);
	return *size - CRUN_WIRE_HEADER_LEN > CRUN_WIRE_MAX_PAYLOAD ? -E2BIG : 0;
}

long crun__wire_decode_grow(const uint8_t *buf, size_t len, uint32_t max_payload,
			    struct crun__wire_msg *msg, struct crun__wire_item **items,
			    uint32_t *items_cap, char *err, size_t errlen)
{
	for (;;) {
		uint32_t cap = *items_cap;
		long n = crun__wire_decode(buf, len, max_payload, msg, *items, &cap, err, errlen);
		struct crun__wire_item *p;

		if (n != -ENOBUFS)
			return n;
		p = realloc(*items, (size_t)cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		*items = p;
		*items_cap = cap;
	}
}

size_t crun__wire_frame_size(const uint8_t *buf, size_t len, uint32_t max_payload)
{
	uint32_t plen;

	if (len < CRUN_WIRE_HEADER_LEN ||
	    crun__wire_check_header(buf, max_payload, &plen, NULL, 0) < 0)
		return 0;
	return CRUN_WIRE_HEADER_LEN + (size_t)plen;
}

int crun__wire_check_reply(const struct crun__wire_msg *msg, char *err, size_t errlen)
{
	if (!crun__wire_is_reply(msg->type)) {
		crun__seterr(err, errlen, "unexpected %s", crun__wire_type_name(msg->type));
		return -EPROTO;
	}
	return crun__wire_validate(msg, err, errlen);
}

int crun__wire_frame_errno(const struct crun__wire_msg *msg)
{
	/* crun__wire_validate keeps num in range; a frame it has not seen may
	 * not, and a number that is no errno is the peer breaking the
	 * protocol. */
	return msg->num > 0 && msg->num <= CRUN_WIRE_ERRNO_MAX ? (int)-msg->num : -EPROTO;
}

const char *crun__wire_error_text(const struct crun__wire_msg *msg, char *buf, size_t buflen,
				  char **heap)
{
	size_t n = msg->count ? msg->items[0].len : 0;
	char *out = buf;

	if (heap)
		*heap = NULL;
	if (!buflen)
		return "";
	if (n >= buflen) {
		if (heap)
			*heap = malloc(n + 1);
		if (heap && *heap)
			out = *heap;
		else
			n = buflen - 1;
	}
	for (size_t i = 0; i < n; i++) {
		char ch = (char)msg->items[0].data[i];

		out[i] = (ch >= 0x20 && ch < 0x7f) ? ch : '?';
	}
	out[n] = '\0';
	return out;
}

uint32_t crun__wire_next_id(uint32_t *last_id)
{
	if (++*last_id == 0)
		*last_id = 1;
	return *last_id;
}

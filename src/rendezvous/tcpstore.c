/* The TCPStore protocol's pure core (tcpstore.h).
 *
 * The parser starts again from the request's first byte on every call:
 * requests are small lists of strings, so re-reading their lengths costs
 * little, and no parse state survives a partial request. */
#include "rendezvous/tcpstore.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define NONE 0xff

/* Opcode -> op, per dialect. */
static const uint8_t legacy_ops[] = {
	CRUN__TS_SET,	      CRUN__TS_COMPARE_SET, CRUN__TS_GET,	 CRUN__TS_ADD,
	CRUN__TS_CHECK,	      CRUN__TS_WAIT,	    CRUN__TS_GETNUMKEYS, CRUN__TS_WATCH_KEY,
	CRUN__TS_DELETE_KEY,  CRUN__TS_APPEND,	    CRUN__TS_MULTI_GET,	 CRUN__TS_MULTI_SET,
	CRUN__TS_CANCEL_WAIT,
};
static const uint8_t modern_ops[] = {
	CRUN__TS_VALIDATE,    CRUN__TS_SET,    CRUN__TS_COMPARE_SET, CRUN__TS_GET,
	CRUN__TS_ADD,	      CRUN__TS_CHECK,  CRUN__TS_WAIT,	     CRUN__TS_GETNUMKEYS,
	CRUN__TS_DELETE_KEY,  CRUN__TS_APPEND, CRUN__TS_MULTI_GET,   CRUN__TS_MULTI_SET,
	CRUN__TS_CANCEL_WAIT, CRUN__TS_PING,   CRUN__TS_QUEUE_PUSH,  CRUN__TS_QUEUE_POP,
	CRUN__TS_QUEUE_LEN,
};

static const char *const op_names[CRUN__TS_OPS] = {
	"VALIDATE",  "SET",	    "COMPARE_SET", "GET",	 "ADD",	      "CHECK",
	"WAIT",	     "GETNUMKEYS",  "WATCH_KEY",   "DELETE_KEY", "APPEND",    "MULTI_GET",
	"MULTI_SET", "CANCEL_WAIT", "PING",	   "QUEUE_PUSH", "QUEUE_POP", "QUEUE_LEN",
};

const char *crun__tcpstore_dialect_name(enum crun__tcpstore_dialect d)
{
	switch (d) {
	case CRUN__TCPSTORE_LEGACY:
		return "legacy (PyTorch 1.13 .. 2.1)";
	case CRUN__TCPSTORE_MODERN:
		return "modern (PyTorch 2.2 ..)";
	default:
		return "unknown";
	}
}

const char *crun__tcpstore_op_name(enum crun__tcpstore_op op)
{
	return (unsigned)op < CRUN__TS_OPS ? op_names[op] : "unknown";
}

/* ---- parsing ------------------------------------------------------------ */

/* A cursor over the bytes received so far. need: bytes short of the next
 * field (the parse then answers 0). */
struct cur {
	const uint8_t *buf;
	size_t len, off;
	bool short_;
};

static bool take(struct cur *c, void *out, size_t n)
{
	if (c->len - c->off < n) {
		c->short_ = true;
		return false;
	}
	memcpy(out, c->buf + c->off, n);
	c->off += n;
	return true;
}

/* Host byte order, as torch writes it. */
static bool take_u64(struct cur *c, uint64_t *v)
{
	return take(c, v, sizeof(*v));
}

/* A u64-length string of at most max bytes into *it. -EMSGSIZE past max;
 * 0 when short or taken (c->short_ says which). */
static int take_str(struct cur *c, struct crun__wire_item *it, uint32_t max, const char *what,
		    char *err, size_t errlen)
{
	uint64_t n;

	if (!take_u64(c, &n))
		return 0;
	if (n > max) {
		crun__seterr(err, errlen, "%s of %llu bytes exceeds the limit of %u bytes", what,
			     (unsigned long long)n, max);
		return -EMSGSIZE;
	}
	if (c->len - c->off < n) {
		c->short_ = true;
		return 0;
	}
	it->data = c->buf + c->off;
	it->len = (uint32_t)n;
	c->off += n;
	return 0;
}

static int grow(struct crun__wire_item **items, uint32_t *cap, uint32_t need)
{
	struct crun__wire_item *p;

	if (need <= *cap)
		return 0;
	p = realloc(*items, (size_t)need * sizeof(*p));
	if (!p)
		return -ENOMEM;
	*items = p;
	*cap = need;
	return 0;
}

static enum crun__tcpstore_dialect detect(const uint8_t *buf, size_t len)
{
	static const uint8_t validate[5] = {0x00, 0xce, 0xf7, 0x85, 0x3c};
	size_t n = len < sizeof(validate) ? len : sizeof(validate);

	if (buf[0] != 0)
		return CRUN__TCPSTORE_LEGACY;
	if (memcmp(buf, validate, n) != 0)
		return CRUN__TCPSTORE_LEGACY;
	return n == sizeof(validate) ? CRUN__TCPSTORE_MODERN : CRUN__TCPSTORE_UNKNOWN;
}

long crun__tcpstore_parse(struct crun__tcpstore_conn *ts, const uint8_t *buf, size_t len,
			  const struct crun__tcpstore_limits *lim, struct crun__tcpstore_req *req,
			  struct crun__wire_item **items, uint32_t *items_cap, char *err,
			  size_t errlen)
{
	enum crun__tcpstore_dialect d = ts->dialect;
	struct cur c = {buf, len, 1, false};
	uint32_t nvals = 0, per = 1;
	const uint8_t *table;
	size_t tlen;
	uint64_t count = 0;
	bool list = false; /* a request with a count of keys (maybe 0) */
	int rc;

	if (len == 0)
		return 0;
	if (d == CRUN__TCPSTORE_UNKNOWN) {
		d = detect(buf, len);
		if (d == CRUN__TCPSTORE_UNKNOWN)
			return 0;
	}
	table = d == CRUN__TCPSTORE_MODERN ? modern_ops : legacy_ops;
	tlen = d == CRUN__TCPSTORE_MODERN ? sizeof(modern_ops) : sizeof(legacy_ops);
	memset(req, 0, sizeof(*req));
	req->opcode = buf[0];
	if (buf[0] >= tlen) {
		crun__seterr(err, errlen,
			     "unknown TCPStore opcode %u in the %s dialect (a newer PyTorch?)",
			     buf[0], crun__tcpstore_dialect_name(d));
		return -EOPNOTSUPP;
	}
	req->op = (enum crun__tcpstore_op)table[buf[0]];
	switch (req->op) {
	case CRUN__TS_VALIDATE:
	case CRUN__TS_PING:
		if (!take(&c, &req->u32, sizeof(req->u32)))
			return 0;
		if (req->op == CRUN__TS_VALIDATE && req->u32 != CRUN__TCPSTORE_MAGIC) {
			crun__seterr(err, errlen, "bad VALIDATE magic 0x%08x", req->u32);
			return -EPROTO;
		}
		goto done;
	case CRUN__TS_GETNUMKEYS:
	case CRUN__TS_CANCEL_WAIT:
		goto done;
	case CRUN__TS_WATCH_KEY:
		crun__seterr(err, errlen,
			     "TCPStore %s (opcode %u, %s dialect) is not served by crun",
			     op_names[req->op], buf[0], crun__tcpstore_dialect_name(d));
		return -EOPNOTSUPP;
	case CRUN__TS_SET:
	case CRUN__TS_APPEND:
	case CRUN__TS_QUEUE_PUSH:
		nvals = 1;
		break;
	case CRUN__TS_COMPARE_SET:
		nvals = 2;
		break;
	case CRUN__TS_GET:
	case CRUN__TS_ADD:
	case CRUN__TS_DELETE_KEY:
	case CRUN__TS_QUEUE_POP:
	case CRUN__TS_QUEUE_LEN:
		break;
	case CRUN__TS_CHECK:
	case CRUN__TS_WAIT:
	case CRUN__TS_MULTI_GET:
	case CRUN__TS_MULTI_SET:
		if (!take_u64(&c, &count))
			return 0;
		list = true;
		per = req->op == CRUN__TS_MULTI_SET ? 2 : 1;
		/* Each key takes at least 8 bytes: a count past what a request
		 * may hold is refused before anything is allocated. None is
		 * fine: torch's servers answer it (crun__tcpstore_begin). */
		if (count > CRUN_WIRE_MAX_ITEMS / per || count * per * 8 > lim->max_request) {
			crun__seterr(err, errlen, "%s of %llu keys (at most %u)", op_names[req->op],
				     (unsigned long long)count, CRUN_WIRE_MAX_ITEMS / per);
			return -EMSGSIZE;
		}
		break;
	default:
		break;
	}
	if (list) {
		if (count && grow(items, items_cap, (uint32_t)(count * per)) < 0) {
			crun__seterr(err, errlen, "out of memory");
			return -ENOMEM;
		}
		for (uint64_t i = 0; i < count; i++) {
			rc = take_str(&c, &(*items)[i * per], lim->max_key_size, "a key", err,
				      errlen);
			if (rc == 0 && !c.short_ && per == 2)
				rc = take_str(&c, &(*items)[i * per + 1], lim->max_value_size,
					      "a value", err, errlen);
			if (rc < 0)
				return rc;
			if (c.short_)
				break;
		}
		req->count = (uint32_t)(count * per);
	} else {
		if (grow(items, items_cap, 3) < 0) {
			crun__seterr(err, errlen, "out of memory");
			return -ENOMEM;
		}
		rc = take_str(&c, &(*items)[0], lim->max_key_size, "a key", err, errlen);
		for (uint32_t i = 0; rc == 0 && !c.short_ && i < nvals; i++)
			rc = take_str(&c, &(*items)[1 + i], lim->max_value_size, "a value", err,
				      errlen);
		if (rc < 0)
			return rc;
		if (!c.short_ && req->op == CRUN__TS_ADD) {
			uint64_t v;

			if (take_u64(&c, &v))
				req->num = (int64_t)v;
		}
		req->count = 1 + nvals;
	}
	if (c.short_) {
		if (c.len > lim->max_request) {
			crun__seterr(err, errlen, "a %s request of over %llu bytes",
				     op_names[req->op], (unsigned long long)lim->max_request);
			return -EMSGSIZE;
		}
		return 0;
	}
	/* Keys only: a list's every per-th item, else the first. */
	for (uint32_t i = 0; i < req->count; i += count ? per : req->count) {
		if ((*items)[i].len == 0) {
			crun__seterr(err, errlen, "%s with an empty key", op_names[req->op]);
			return -EPROTO;
		}
	}
	req->items = *items;
done:
	if (c.off > lim->max_request) {
		crun__seterr(err, errlen, "a %s request of %zu bytes (limit %llu)",
			     op_names[req->op], c.off, (unsigned long long)lim->max_request);
		return -EMSGSIZE;
	}
	ts->dialect = d;
	return (long)c.off;
}

/* ---- requests to the store ------------------------------------------------ */

static void put_u8(uint8_t *out, size_t *len, uint8_t v)
{
	out[(*len)++] = v;
}

/* The store's type for each op served through it; 0: none. */
static uint8_t store_type(enum crun__tcpstore_op op)
{
	switch (op) {
	case CRUN__TS_SET:
		return CRUN_WIRE_SET;
	case CRUN__TS_COMPARE_SET:
		return CRUN_WIRE_CAS;
	case CRUN__TS_GET:
		return CRUN_WIRE_GET;
	case CRUN__TS_ADD:
		return CRUN_WIRE_ADD;
	case CRUN__TS_CHECK:
		return CRUN_WIRE_CHECK;
	case CRUN__TS_WAIT:
		return CRUN_WIRE_WAIT;
	case CRUN__TS_GETNUMKEYS:
		return CRUN_WIRE_COUNT;
	case CRUN__TS_DELETE_KEY:
		return CRUN_WIRE_DELETE;
	case CRUN__TS_APPEND:
		return CRUN_WIRE_APPEND;
	case CRUN__TS_MULTI_GET:
		return CRUN_WIRE_MGET;
	case CRUN__TS_MULTI_SET:
		return CRUN_WIRE_MSET;
	case CRUN__TS_QUEUE_PUSH:
		return CRUN_WIRE_QUEUE_PUSH;
	case CRUN__TS_QUEUE_POP:
		return CRUN_WIRE_QUEUE_POP;
	case CRUN__TS_QUEUE_LEN:
		return CRUN_WIRE_QUEUE_LEN;
	default:
		return 0;
	}
}

int crun__tcpstore_begin(struct crun__tcpstore_conn *ts, const struct crun__tcpstore_req *req,
			 struct crun__wire_msg *m, uint8_t *reply, size_t *reply_len)
{
	uint8_t type = store_type(req->op);

	*reply_len = 0;
	if (!req->count && (req->op == CRUN__TS_CHECK || req->op == CRUN__TS_WAIT ||
			    req->op == CRUN__TS_MULTI_GET || req->op == CRUN__TS_MULTI_SET)) {
		/* No keys: what torch's servers answer, without the store
		 * (whose requests name at least one key): READY, STOP_WAITING,
		 * no values, nothing. */
		if (req->op == CRUN__TS_CHECK || req->op == CRUN__TS_WAIT)
			put_u8(reply, reply_len, 0);
		return CRUN__TS_REPLY;
	}
	if (!type) {
		if (req->op == CRUN__TS_PING) {
			memcpy(reply, &req->u32, sizeof(req->u32));
			*reply_len = sizeof(req->u32);
		} else if (req->op == CRUN__TS_CANCEL_WAIT) {
			put_u8(reply, reply_len, 1); /* WAIT_CANCELED */
			return CRUN__TS_CANCEL;
		}
		return CRUN__TS_REPLY; /* VALIDATE: nothing */
	}
	if (ts->npending == CRUN__TCPSTORE_PENDING)
		return -ENOSPC;
	*m = (struct crun__wire_msg){
		.type = type,
		.id = crun__wire_next_id(&ts->last_id),
		.num = req->op == CRUN__TS_ADD	  ? req->num
		       : req->op == CRUN__TS_WAIT ? CRUN__TCPSTORE_WAIT_MS
						  : 0,
		.count = req->count,
		.items = req->items,
	};
	ts->pending[ts->npending].id = m->id;
	ts->pending[ts->npending].op = (uint8_t)req->op;
	ts->npending++;
	return CRUN__TS_APPLY;
}

void crun__tcpstore_cancel_waits(struct crun__tcpstore_conn *ts)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < ts->npending; i++)
		if (ts->pending[i].op != CRUN__TS_WAIT)
			ts->pending[n++] = ts->pending[i];
	ts->npending = n;
}

/* ---- the store's answers to TCPStore bytes ----------------------------------- */

static void put(uint8_t *out, size_t cap, size_t *len, const void *p, size_t n)
{
	if (*len + n <= cap && n)
		memcpy(out + *len, p, n);
	*len += n;
}

static void put_bytes(uint8_t *out, size_t cap, size_t *len, const uint8_t *p, uint32_t n)
{
	uint64_t n64 = n;

	put(out, cap, len, &n64, sizeof(n64));
	put(out, cap, len, p, n);
}

long crun__tcpstore_reply(struct crun__tcpstore_conn *ts, uint8_t type, uint32_t id, int64_t num,
			  const struct crun__wire_item *items, uint32_t count, uint8_t *out,
			  size_t cap, char *err, size_t errlen)
{
	static const struct crun__wire_item empty = {NULL, 0};
	enum crun__tcpstore_op op;
	size_t len = 0;
	uint8_t b;
	uint32_t i;

	for (i = 0; i < ts->npending && ts->pending[i].id != id; i++)
		;
	if (i == ts->npending)
		return -ENOENT;
	op = (enum crun__tcpstore_op)ts->pending[i].op;
	if (type == CRUN_WIRE_ERROR && num == ENOENT && op == CRUN__TS_GET &&
	    ts->dialect == CRUN__TCPSTORE_MODERN) {
		/* As the libuv server of the modern dialect answers. */
		type = CRUN_WIRE_VALUE;
		count = 1;
		items = &empty;
	}
	if (type == CRUN_WIRE_ERROR) {
		char msg[160];

		crun__wire_error_text(
			&(struct crun__wire_msg){.type = type,
						 .num = num,
						 .count = count,
						 .items = (struct crun__wire_item *)items},
			msg, sizeof(msg), NULL);
		crun__seterr(err, errlen, "%s failed: %s", op_names[op], msg);
		return -EPROTO;
	}
	switch (op) {
	case CRUN__TS_SET:
	case CRUN__TS_APPEND:
	case CRUN__TS_MULTI_SET:
	case CRUN__TS_QUEUE_PUSH:
		if (type != CRUN_WIRE_OK)
			goto bad;
		break;
	case CRUN__TS_GET:
	case CRUN__TS_COMPARE_SET:
		if (type != CRUN_WIRE_VALUE || count != 1)
			goto bad;
		put_bytes(out, cap, &len, items[0].data, items[0].len);
		break;
	case CRUN__TS_QUEUE_POP:
		/* i64 0 when empty, else the length before the pop (> 0) and
		 * the value. */
		if (type == CRUN_WIRE_INT && num == 0) {
			put(out, cap, &len, &num, sizeof(num));
			break;
		}
		if (type != CRUN_WIRE_VALUE || count != 1 || num <= 0)
			goto bad;
		put(out, cap, &len, &num, sizeof(num));
		put_bytes(out, cap, &len, items[0].data, items[0].len);
		break;
	case CRUN__TS_ADD:
	case CRUN__TS_GETNUMKEYS:
	case CRUN__TS_DELETE_KEY:
	case CRUN__TS_QUEUE_LEN:
		if (type != CRUN_WIRE_INT)
			goto bad;
		put(out, cap, &len, &num, sizeof(num));
		break;
	case CRUN__TS_CHECK:
		if (type != CRUN_WIRE_INT)
			goto bad;
		b = num == 1 ? 0 : 1; /* READY, NOT_READY */
		put(out, cap, &len, &b, 1);
		break;
	case CRUN__TS_WAIT:
		if (type != CRUN_WIRE_OK)
			goto bad;
		b = 0; /* STOP_WAITING */
		put(out, cap, &len, &b, 1);
		break;
	case CRUN__TS_MULTI_GET:
		if (type != CRUN_WIRE_VALUES)
			goto bad;
		for (uint32_t k = 0; k < count; k++)
			put_bytes(out, cap, &len, items[k].data, items[k].len);
		break;
	default:
		goto bad;
	}
	if (len > cap)
		return (long)len;
	memmove(&ts->pending[i], &ts->pending[i + 1],
		(ts->npending - i - 1) * sizeof(ts->pending[0]));
	ts->npending--;
	return (long)len;
bad:
	crun__seterr(err, errlen, "%s answered with %s", op_names[op], crun__wire_type_name(type));
	return -EPROTO;
}

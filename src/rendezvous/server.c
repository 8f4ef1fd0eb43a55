/* The store server.
 *
 * Why it is shaped this way:
 * - One thread, one loop: every key, waiter and watch is touched only from
 *   libuv callbacks, so nothing is locked.
 * - Reads land in one 64 KiB scratch buffer shared by every connection;
 *   only the tail of a frame that is still arriving is copied into a
 *   per-connection buffer. An idle connection therefore costs a few hundred
 *   bytes, and the common case (whole frames per read) copies nothing.
 * - Replies produced while handling one read (or one timer, or one close)
 *   are appended to the connection's output buffer and written once at the
 *   end of the callback (flush_dirty), first with uv_try_write so that the
 *   usual case needs no write request at all.
 * - Closing is deferred: code running inside a list walk (notifying
 *   watchers, answering waiters) only marks a connection for dropping;
 *   flush_dirty, which runs at the end of every libuv callback and outside
 *   every walk, closes it. That keeps the lists safe to iterate.
 * - Unauthenticated peers get a small frame cap (HELLO_MAX_PAYLOAD), so a
 *   stranger cannot make the server allocate more than a few KiB. */
#include "rendezvous/server.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/util.h"
#include "rendezvous/hello.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/round.h"
#include "rendezvous/wire.h"

#define SCRATCH_SIZE (64 * 1024)
/* A HELLO is 12 + 3 * 4 bytes plus run id, nonce and mac: allow a run id
 * of up to 8 KiB before the peer has proven anything. */
#define HELLO_MAX_PAYLOAD (8 * 1024 + 128)
#define RBUF_MIN 4096
#define OBUF_MIN 256
/* Buffers above this size are freed when they become empty, so a burst
 * does not leave a big allocation behind on an idle connection. */
#define BUF_KEEP (64 * 1024)
/* How long a closing connection may take to flush its last error. */
#define LINGER_MS 2000
/* Waiters plus watches one connection may hold. */
#define MAX_SUBS_PER_CONN 65536
#define ITEMS_MIN 64
/* Refusals logged per connection; a client that keeps hitting a limit
 * must not flood the log. */
#define REFUSALS_LOGGED 16

#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ---- intrusive doubly linked list ---------------------------------- */

struct list {
	struct list *prev, *next;
};

static void list_init(struct list *l)
{
	l->prev = l->next = l;
}

static bool list_empty(const struct list *l)
{
	return l->next == l;
}

static void list_add_tail(struct list *head, struct list *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

static void list_del(struct list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	list_init(n);
}

/* ---- chained hash table of byte-string keys ------------------------- */

struct hnode {
	struct hnode *next;
	const uint8_t *key;
	uint32_t klen;
	uint32_t hash;
};

struct htable {
	struct hnode **buckets; /* NULL until the first insert */
	size_t mask;            /* number of buckets - 1 */
	size_t count;
};

static uint32_t hash_bytes(uint32_t seed, const uint8_t *p, size_t n)
{
	/* FNV-1a with a per-server random offset: keys are short, and the
	 * seed keeps bucket collisions from being predictable. */
	uint32_t h = 2166136261u ^ seed;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 16777619u;
	}
	return h;
}

/* The link that points at the node with this key, or NULL. */
static struct hnode **ht_link(const struct htable *t, const uint8_t *key, uint32_t klen,
			      uint32_t hash)
{
	struct hnode **l;

	if (!t->buckets)
		return NULL;
	for (l = &t->buckets[hash & t->mask]; *l; l = &(*l)->next)
		if ((*l)->hash == hash && (*l)->klen == klen && !memcmp((*l)->key, key, klen))
			return l;
	return NULL;
}

static int ht_grow(struct htable *t)
{
	size_t n = t->buckets ? (t->mask + 1) * 2 : 16;
	struct hnode **b = calloc(n, sizeof(*b));

	if (!b)
		return -ENOMEM;
	if (t->buckets) {
		for (size_t i = 0; i <= t->mask; i++) {
			struct hnode *h = t->buckets[i], *next;

			for (; h; h = next) {
				next = h->next;
				h->next = b[h->hash & (n - 1)];
				b[h->hash & (n - 1)] = h;
			}
		}
		free(t->buckets);
	}
	t->buckets = b;
	t->mask = n - 1;
	return 0;
}

/* Inserts a node whose key is not in the table yet. 0 or -ENOMEM. */
static int ht_insert(struct htable *t, struct hnode *n)
{
	struct hnode **b;

	/* A failed grow only makes chains longer, unless there is no table. */
	if ((!t->buckets || t->count > t->mask) && ht_grow(t) < 0 && !t->buckets)
		return -ENOMEM;
	b = &t->buckets[n->hash & t->mask];
	n->next = *b;
	*b = n;
	t->count++;
	return 0;
}

static void ht_unlink(struct htable *t, struct hnode **link)
{
	*link = (*link)->next;
	t->count--;
}

/* ---- data ------------------------------------------------------------ */

struct conn;

struct entry {
	struct hnode hn; /* first member: tables hold hnode pointers */
	struct conn *owner; /* set for an ephemeral key */
	struct list owned;  /* in owner->owned */
	uint8_t *val;
	uint32_t vlen, vcap;
	uint8_t key[];
};

struct run {
	struct hnode hn;
	struct htable keys;
	struct list waiters; /* struct waiter.run_link */
	struct list watches; /* struct watch.run_link */
	struct crun_round *round; /* rendezvous state, from the first RDZV_* */
	uint32_t nconns;
	char id[]; /* NUL-terminated; hn.key points here */
};

/* A GET, MGET or WAIT that waits for keys to exist. */
struct waiter {
	uv_timer_t timer;
	struct conn *conn;
	struct list run_link, conn_link;
	uint32_t id;
	uint8_t type;
	uint32_t count;
	size_t bytes;                /* key bytes held, counted in conn->sub_bytes */
	struct crun_wire_item *keys; /* in the same allocation, after the struct */
};

struct watch {
	struct conn *conn;
	struct list run_link, conn_link;
	uint32_t id;
	uint32_t klen;
	uint8_t key[];
};

/* Lifecycle of a connection:
 *   PREAMBLE  accepted, our preamble sent, waiting for the client's
 *   HELLO     preamble fine, waiting for HELLO (handshake timer running)
 *   READY     authenticated and in a run: requests are served (the timer
 *             is the liveness timer once a JOIN asked for keep-alives)
 *   CLOSING   detached from every run, waiter and watch; its last output
 *             (an error) is flushed, then its handles are closed
 * Every move to CLOSING goes through begin_close(). */
enum conn_state {
	CONN_PREAMBLE,
	CONN_HELLO,
	CONN_READY,
	CONN_CLOSING,
};

struct conn {
	uv_tcp_t tcp;
	uv_timer_t timer; /* handshake timeout, liveness, linger while closing */
	struct crun_server *srv;
	struct list link;    /* srv->conns */
	struct list owned;   /* ephemeral entries */
	struct list waiters; /* struct waiter.conn_link */
	struct list watches; /* struct watch.conn_link */
	struct run *run;
	struct conn *dirty_next;
	uint8_t *rbuf; /* tail of a frame still arriving */
	size_t rlen, rcap;
	uint8_t *obuf; /* output not yet handed to the kernel or libuv */
	size_t olen, ocap;
	size_t inflight; /* bytes in uv_write requests not yet done */
	uint32_t nsubs;
	uint64_t sub_bytes; /* key bytes its waits and watches hold (capped at
	                     * max_conn_buffer, like its buffers) */
	uint32_t nrefused; /* requests refused for a limit (for the log) */
	int64_t keepalive_ms; /* from its last RDZV_JOIN; 0: none */
	enum conn_state state;
	uint8_t open_handles;
	bool counted;    /* counts against max_connections */
	bool hello_done; /* joined a run: the disconnect hook runs */
	bool dirty;      /* on srv->dirty */
	bool drop;       /* close without flushing, at the next flush_dirty */
	bool handles_closing;
	bool alive_expired; /* dropped for want of keep-alives */
	uint8_t nonce[CRUN_WIRE_NONCE_LEN];
	char peer[64];
	char peer_ip[INET6_ADDRSTRLEN]; /* the address in peer, no port */
};

struct write_req {
	uv_write_t req;
	uint8_t *mem;
	size_t len;
};

struct crun_server {
	uv_loop_t *loop;
	uv_tcp_t listener;
	struct crun_server_limits limits;
	uint8_t *token;
	size_t token_len;
	bool quiet;
	const char *token_hint;
	crun_server_disconnect_cb disconnect_cb;
	void *disconnect_arg;
	struct htable runs;
	struct list conns;
	uint32_t nconns;
	struct conn *dirty;
	uint8_t *scratch;
	struct crun_wire_item *items;
	uint32_t items_cap;
	uint32_t seed;
	int port;
	bool listening, listen_failed, destroying;
	size_t open_handles;
	void (*done)(void *arg);
	void *done_arg;
};

static void flush_dirty(struct crun_server *srv);
static void begin_close(struct conn *c, bool graceful);

void crun_server_limits_default(struct crun_server_limits *limits)
{
	limits->max_key_size = 4096;
	limits->max_value_size = 16u << 20;
	limits->max_keys_per_run = 1000000;
	limits->max_connections = 4096;
	limits->max_conn_buffer = 64u << 20;
	limits->handshake_timeout_ms = 10000;
}

/* ---- small helpers ----------------------------------------------------- */

/* A byte string fit for a message: printable ASCII as is, other bytes as
 * \xNN, cut after 64 bytes. */
static const char *show(char *out, size_t outlen, const uint8_t *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, i;

	for (i = 0; i < n && i < 64 && o + 5 < outlen; i++) {
		if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\' && p[i] != '\'') {
			out[o++] = (char)p[i];
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[p[i] >> 4];
			out[o++] = hex[p[i] & 15];
		}
	}
	if (i < n && o + 4 < outlen) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
	return out;
}

static const char *show_item(char *out, size_t outlen, const struct crun_wire_item *it)
{
	return show(out, outlen, it->data, it->len);
}

static struct crun_wire_item item(const void *data, size_t len)
{
	struct crun_wire_item it = { data, (uint32_t)len };

	return it;
}

static bool item_eq(const struct crun_wire_item *a, const uint8_t *b, uint32_t blen)
{
	return a->len == blen && !memcmp(a->data, b, blen);
}

static void handle_closed(struct crun_server *srv);

/* ---- output -------------------------------------------------------------- */

static void mark_dirty(struct conn *c)
{
	if (c->dirty || c->handles_closing)
		return;
	c->dirty = true;
	c->dirty_next = c->srv->dirty;
	c->srv->dirty = c;
}

/* Marks c to be closed without flushing at the next flush_dirty; reason
 * goes to the log once. */
static void drop_conn(struct conn *c, const char *reason)
{
	if (c->drop || c->handles_closing)
		return;
	if (c->state != CONN_CLOSING)
		crun_info("%s: dropped: %s", c->peer, reason);
	c->drop = true;
	mark_dirty(c);
}

static void on_write(uv_write_t *req, int status)
{
	struct write_req *w = container_of(req, struct write_req, req);
	struct conn *c = req->handle->data;
	struct crun_server *srv = c->srv;

	c->inflight -= w->len;
	free(w->mem);
	free(w);
	if (srv->destroying)
		return;
	if (status < 0 && status != UV_ECANCELED && c->state != CONN_CLOSING) {
		char why[96];

		snprintf(why, sizeof(why), "write failed: %s", uv_strerror(status));
		drop_conn(c, why);
	}
	if (c->state == CONN_CLOSING && !c->inflight)
		mark_dirty(c);
	flush_dirty(srv);
}

/* Hands c's output to the kernel (uv_try_write) or, for what it does not
 * take, to libuv (uv_write). Never closes anything: a failure marks c
 * for dropping. */
static void flush_conn(struct conn *c)
{
	struct write_req *w;
	uv_buf_t b;
	size_t off = 0;
	int n;

	if (!c->olen || c->drop || c->handles_closing)
		return;
	if (!c->inflight) {
		b = uv_buf_init((char *)c->obuf, (unsigned int)c->olen);
		n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
		if (n >= 0 && (size_t)n == c->olen) {
			c->olen = 0;
			if (c->ocap > BUF_KEEP) {
				free(c->obuf);
				c->obuf = NULL;
				c->ocap = 0;
			}
			return;
		}
		if (n < 0 && n != UV_EAGAIN) {
			char why[96];

			snprintf(why, sizeof(why), "write failed: %s", uv_strerror(n));
			drop_conn(c, why);
			return;
		}
		if (n > 0)
			off = (size_t)n;
	}
	w = malloc(sizeof(*w));
	if (!w) {
		drop_conn(c, "out of memory");
		return;
	}
	w->mem = c->obuf;
	w->len = c->olen - off;
	b = uv_buf_init((char *)c->obuf + off, (unsigned int)w->len);
	n = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
	if (n < 0) {
		char why[96];

		free(w);
		snprintf(why, sizeof(why), "write failed: %s", uv_strerror(n));
		drop_conn(c, why);
		return;
	}
	c->inflight += w->len;
	c->obuf = NULL;
	c->olen = c->ocap = 0;
}

static int obuf_reserve(struct conn *c, size_t n)
{
	size_t cap;
	uint8_t *p;

	if (c->ocap - c->olen >= n)
		return 0;
	cap = c->ocap ? c->ocap : OBUF_MIN;
	while (cap - c->olen < n)
		cap *= 2;
	p = realloc(c->obuf, cap);
	if (!p)
		return -ENOMEM;
	c->obuf = p;
	c->ocap = cap;
	return 0;
}

/* Makes room for size more bytes of output within the connection's
 * limit. 0; -ENOBUFS when size alone can never fit; -EPIPE when c is
 * (now) being dropped. */
static int out_room(struct conn *c, size_t size)
{
	uint64_t max = c->srv->limits.max_conn_buffer;

	if (c->drop || c->handles_closing)
		return -EPIPE;
	if (size > max)
		return -ENOBUFS;
	if (c->olen + c->inflight + size > max) {
		flush_conn(c);
		if (c->drop)
			return -EPIPE;
		if (c->olen + c->inflight + size > max) {
			char why[128];

			snprintf(why, sizeof(why),
				 "not reading its replies (%zu bytes waiting, limit %" PRIu64 ")",
				 c->olen + c->inflight, max);
			drop_conn(c, why);
			return -EPIPE;
		}
	}
	if (obuf_reserve(c, size) < 0) {
		drop_conn(c, "out of memory");
		return -EPIPE;
	}
	return 0;
}

static void send_raw(struct conn *c, const void *data, size_t len)
{
	if (out_room(c, len) < 0)
		return;
	memcpy(c->obuf + c->olen, data, len);
	c->olen += len;
	mark_dirty(c);
}

/* Queues one frame. 0 when queued (or silently discarded because c is
 * being dropped); -ENOBUFS when the frame is larger than a frame may be
 * or than c may buffer, so that the caller can answer with an error. */
static int send_frame(struct conn *c, uint8_t type, uint32_t id, int64_t num,
		      const struct crun_wire_item *items, uint32_t count)
{
	struct crun_wire_msg m = {
		.type = type,
		.id = id,
		.num = num,
		.count = count,
		.items = (struct crun_wire_item *)items,
	};
	size_t size = crun_wire_encoded_size(&m);
	int rc;

	if (size - CRUN_WIRE_HEADER_LEN > CRUN_WIRE_MAX_PAYLOAD || count > CRUN_WIRE_MAX_ITEMS)
		return -ENOBUFS;
	rc = out_room(c, size);
	if (rc == -ENOBUFS)
		return rc;
	if (rc < 0)
		return 0;
	c->olen += crun_wire_encode(&m, c->obuf + c->olen);
	mark_dirty(c);
	return 0;
}

static void reply_err(struct conn *c, uint32_t id, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void reply_err(struct conn *c, uint32_t id, int errnum, const char *fmt, ...)
{
	struct crun_wire_item it;
	char msg[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(msg))
		n = sizeof(msg) - 1;
	it = item(msg, (size_t)n);
	send_frame(c, CRUN_WIRE_ERROR, id, errnum, &it, 1);
}

/* Answers a request refused for a limit with an error, and logs it (the
 * first REFUSALS_LOGGED times on a connection). */
static void refuse(struct conn *c, uint32_t id, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void refuse(struct conn *c, uint32_t id, int errnum, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->nrefused < REFUSALS_LOGGED)
		crun_info("%s: refused request: %s", c->peer, msg);
	else if (c->nrefused == REFUSALS_LOGGED)
		crun_info("%s: refused request: %s (further refusals on this connection are not "
			  "logged)",
			  c->peer, msg);
	c->nrefused++;
	reply_err(c, id, errnum, "%s", msg);
}

static void reply_ok(struct conn *c, uint32_t id)
{
	send_frame(c, CRUN_WIRE_OK, id, 0, NULL, 0);
}

static void reply_int(struct conn *c, uint32_t id, int64_t num)
{
	send_frame(c, CRUN_WIRE_INT, id, num, NULL, 0);
}

static void reply_too_big(struct conn *c, uint32_t id)
{
	refuse(c, id, ENOBUFS, "reply too large for one frame or for this connection's buffer");
}

static void reply_value_num(struct conn *c, uint32_t id, int64_t num, const void *data,
			    size_t len)
{
	struct crun_wire_item it = item(data, len);

	if (send_frame(c, CRUN_WIRE_VALUE, id, num, &it, 1) == -ENOBUFS)
		reply_too_big(c, id);
}

static void reply_value(struct conn *c, uint32_t id, const void *data, size_t len)
{
	reply_value_num(c, id, 0, data, len);
}

/* ---- runs and entries ---------------------------------------------------- */

static struct run *run_acquire(struct crun_server *srv, const uint8_t *id, uint32_t len)
{
	uint32_t h = hash_bytes(srv->seed, id, len);
	struct hnode **l = ht_link(&srv->runs, id, len, h);
	struct run *r;

	if (l) {
		r = (struct run *)*l;
		r->nconns++;
		return r;
	}
	r = calloc(1, sizeof(*r) + len + 1);
	if (!r)
		return NULL;
	memcpy(r->id, id, len);
	r->hn.key = (const uint8_t *)r->id;
	r->hn.klen = len;
	r->hn.hash = h;
	list_init(&r->waiters);
	list_init(&r->watches);
	if (ht_insert(&srv->runs, &r->hn) < 0) {
		free(r);
		return NULL;
	}
	r->nconns = 1;
	return r;
}

static void entry_free(struct entry *e)
{
	free(e->val);
	free(e);
}

static void run_free(struct run *r)
{
	crun_round_destroy(r->round);
	if (r->keys.buckets) {
		for (size_t i = 0; i <= r->keys.mask; i++) {
			struct hnode *h = r->keys.buckets[i], *next;

			for (; h; h = next) {
				next = h->next;
				entry_free((struct entry *)h);
			}
		}
	}
	free(r->keys.buckets);
	free(r);
}

/* Frees r once nothing refers to it any more: no keys, no connections. */
static void run_maybe_free(struct crun_server *srv, struct run *r)
{
	struct hnode **l;

	if (r->nconns || r->keys.count)
		return;
	l = ht_link(&srv->runs, r->hn.key, r->hn.klen, r->hn.hash);
	if (l)
		ht_unlink(&srv->runs, l);
	run_free(r);
}

static struct entry *entry_find(const struct run *r, const struct crun_wire_item *key,
				uint32_t hash)
{
	struct hnode **l = ht_link(&r->keys, key->data, key->len, hash);

	return l ? (struct entry *)*l : NULL;
}

static struct entry *entry_create(struct run *r, const struct crun_wire_item *key, uint32_t hash)
{
	struct entry *e = calloc(1, sizeof(*e) + key->len);

	if (!e)
		return NULL;
	memcpy(e->key, key->data, key->len);
	e->hn.key = e->key;
	e->hn.klen = key->len;
	e->hn.hash = hash;
	list_init(&e->owned);
	if (ht_insert(&r->keys, &e->hn) < 0) {
		free(e);
		return NULL;
	}
	return e;
}

/* Replaces e's value. Reuses the allocation when it fits and is not far
 * too large. 0 or -ENOMEM (the old value is kept). */
static int entry_store(struct entry *e, const uint8_t *data, uint32_t len)
{
	if (len > e->vcap || (e->vcap > 4096 && len < e->vcap / 4)) {
		uint32_t cap = len < 16 ? 16 : len;
		uint8_t *p = realloc(e->val, cap);

		if (!p)
			return -ENOMEM;
		e->val = p;
		e->vcap = cap;
	}
	if (len)
		memcpy(e->val, data, len);
	e->vlen = len;
	return 0;
}

static void entry_set_owner(struct entry *e, struct conn *owner)
{
	if (e->owner == owner)
		return;
	if (e->owner)
		list_del(&e->owned);
	e->owner = owner;
	if (owner)
		list_add_tail(&owner->owned, &e->owned);
}

/* ---- watches and waiters --------------------------------------------------- */

static void notify(struct run *r, const uint8_t *key, uint32_t klen, int64_t event,
		   const uint8_t *val, uint32_t vlen)
{
	struct crun_wire_item items[2] = { item(key, klen), item(val, vlen) };

	for (struct list *l = r->watches.next; l != &r->watches; l = l->next) {
		struct watch *w = container_of(l, struct watch, run_link);

		if (w->klen != klen || memcmp(w->key, key, klen))
			continue;
		if (send_frame(w->conn, CRUN_WIRE_NOTIFY, w->id, event, items, 2) == -ENOBUFS)
			drop_conn(w->conn, "a watched value is too large for its buffer");
	}
}

static void on_waiter_closed(uv_handle_t *h)
{
	struct waiter *w = container_of((uv_timer_t *)h, struct waiter, timer);
	struct crun_server *srv = h->data;

	free(w);
	handle_closed(srv);
}

static void waiter_remove(struct waiter *w)
{
	list_del(&w->run_link);
	list_del(&w->conn_link);
	w->conn->nsubs--;
	w->conn->sub_bytes -= w->bytes;
	w->conn = NULL;
	uv_close((uv_handle_t *)&w->timer, on_waiter_closed);
}

/* Answers a GET, MGET or WAIT whose keys all exist. */
static void answer_read(struct conn *c, struct run *r, uint8_t type, uint32_t id,
			const struct crun_wire_item *keys, uint32_t count)
{
	struct crun_wire_item stack[16] = { { NULL, 0 } }, *vals = stack;
	struct entry *e;

	switch (type) {
	case CRUN_WIRE_GET:
		e = entry_find(r, &keys[0], hash_bytes(c->srv->seed, keys[0].data, keys[0].len));
		reply_value(c, id, e->val, e->vlen);
		break;
	case CRUN_WIRE_MGET:
		if (count > CRUN_ARRAY_SIZE(stack)) {
			vals = malloc(count * sizeof(*vals));
			if (!vals) {
				reply_err(c, id, ENOMEM, "out of memory");
				return;
			}
		}
		for (uint32_t i = 0; i < count; i++) {
			e = entry_find(r, &keys[i],
				       hash_bytes(c->srv->seed, keys[i].data, keys[i].len));
			vals[i] = item(e->val, e->vlen);
		}
		if (send_frame(c, CRUN_WIRE_VALUES, id, 0, vals, count) == -ENOBUFS)
			reply_too_big(c, id);
		if (vals != stack)
			free(vals);
		break;
	default:
		reply_ok(c, id);
		break;
	}
}

/* Index of the first key that does not exist, or count when all do. */
static uint32_t first_missing(const struct crun_server *srv, const struct run *r,
			      const struct crun_wire_item *keys, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++)
		if (!entry_find(r, &keys[i], hash_bytes(srv->seed, keys[i].data, keys[i].len)))
			return i;
	return count;
}

static void on_waiter_timeout(uv_timer_t *t)
{
	struct waiter *w = container_of(t, struct waiter, timer);
	struct conn *c = w->conn;
	struct crun_server *srv = c->srv;
	uint32_t i = first_missing(srv, c->run, w->keys, w->count);
	char k[300];

	if (i == w->count)
		i = 0;
	reply_err(c, w->id, ETIMEDOUT, "timed out waiting for key '%s'",
		  show_item(k, sizeof(k), &w->keys[i]));
	waiter_remove(w);
	flush_dirty(srv);
}

/* Answers every waiter of r that waits for key and now has all its keys. */
static void wake_waiters(struct crun_server *srv, struct run *r, const uint8_t *key,
			 uint32_t klen)
{
	struct list *l, *next;

	for (l = r->waiters.next; l != &r->waiters; l = next) {
		struct waiter *w = container_of(l, struct waiter, run_link);
		bool hit = false;

		next = l->next;
		for (uint32_t i = 0; i < w->count && !hit; i++)
			hit = item_eq(&w->keys[i], key, klen);
		if (!hit || first_missing(srv, r, w->keys, w->count) < w->count)
			continue;
		answer_read(w->conn, r, w->type, w->id, w->keys, w->count);
		waiter_remove(w);
	}
}

/* After e's value changed: tell its watchers, wake its waiters. */
static void changed(struct crun_server *srv, struct run *r, struct entry *e)
{
	if (!list_empty(&r->watches))
		notify(r, e->key, e->hn.klen, CRUN_WIRE_EV_SET, e->val, e->vlen);
	if (!list_empty(&r->waiters))
		wake_waiters(srv, r, e->key, e->hn.klen);
}

/* Removes the entry at link from r and tells its watchers. */
static void entry_delete(struct run *r, struct hnode **link)
{
	struct entry *e = (struct entry *)*link;

	ht_unlink(&r->keys, link);
	entry_set_owner(e, NULL);
	if (!list_empty(&r->watches))
		notify(r, e->key, e->hn.klen, CRUN_WIRE_EV_DELETE, NULL, 0);
	entry_free(e);
}

static void on_conn_timer(uv_timer_t *t);

/* A connection's waits and watches may hold at most max_conn_buffer bytes
 * of keys, so that no client makes the server keep more for it than its
 * buffers may; refuses the request (ENOBUFS) when bytes more would not
 * fit. */
static bool sub_room(struct conn *c, uint32_t id, uint64_t bytes)
{
	uint64_t max = c->srv->limits.max_conn_buffer;

	if (c->sub_bytes + bytes <= max)
		return true;
	refuse(c, id, ENOBUFS,
	       "waits and watches on one connection would hold more than %" PRIu64
	       " bytes of keys",
	       max);
	return false;
}

/* Registers a waiting GET/MGET/WAIT; keys are copied. */
static void add_waiter(struct conn *c, const struct crun_wire_msg *m)
{
	struct crun_server *srv = c->srv;
	size_t bytes = 0;
	struct waiter *w;
	uint8_t *p;

	if (c->nsubs >= MAX_SUBS_PER_CONN) {
		refuse(c, m->id, ENOSPC, "too many waits and watches on one connection (%d)",
			  MAX_SUBS_PER_CONN);
		return;
	}
	for (uint32_t i = 0; i < m->count; i++)
		bytes += m->items[i].len;
	if (!sub_room(c, m->id, bytes))
		return;
	w = malloc(sizeof(*w) + m->count * sizeof(struct crun_wire_item) + bytes);
	if (!w) {
		reply_err(c, m->id, ENOMEM, "out of memory");
		return;
	}
	w->keys = (struct crun_wire_item *)(w + 1);
	p = (uint8_t *)(w->keys + m->count);
	for (uint32_t i = 0; i < m->count; i++) {
		memcpy(p, m->items[i].data, m->items[i].len);
		w->keys[i] = item(p, m->items[i].len);
		p += m->items[i].len;
	}
	w->conn = c;
	w->id = m->id;
	w->type = m->type;
	w->count = m->count;
	w->bytes = bytes;
	if (uv_timer_init(srv->loop, &w->timer) < 0) {
		free(w);
		reply_err(c, m->id, ENOMEM, "cannot create a timer");
		return;
	}
	srv->open_handles++;
	w->timer.data = srv;
	uv_timer_start(&w->timer, on_waiter_timeout, (uint64_t)m->num, 0);
	list_add_tail(&c->run->waiters, &w->run_link);
	list_add_tail(&c->waiters, &w->conn_link);
	c->nsubs++;
	c->sub_bytes += bytes;
}

/* ---- requests ---------------------------------------------------------- */

static bool check_key(struct conn *c, uint32_t id, const struct crun_wire_item *key)
{
	uint32_t max = c->srv->limits.max_key_size;

	if (key->len <= max)
		return true;
	refuse(c, id, E2BIG, "key of %u bytes exceeds the limit of %u bytes", key->len, max);
	return false;
}

static bool check_value(struct conn *c, uint32_t id, uint64_t len)
{
	uint32_t max = c->srv->limits.max_value_size;

	if (len <= max)
		return true;
	refuse(c, id, E2BIG, "value of %" PRIu64 " bytes exceeds the limit of %u bytes", len, max);
	return false;
}

static bool check_room(struct conn *c, uint32_t id, uint64_t new_keys)
{
	uint64_t max = c->srv->limits.max_keys_per_run;
	char r[300];

	if (c->run->keys.count + new_keys <= max)
		return true;
	refuse(c, id, ENOSPC, "run '%s' holds the limit of %" PRIu64 " keys",
	       show((char *)r, sizeof(r), (const uint8_t *)c->run->id, c->run->hn.klen), max);
	return false;
}

/* Finds key in c's run or creates it (limits checked); NULL after an
 * error reply. */
static struct entry *get_or_create(struct conn *c, uint32_t id, const struct crun_wire_item *key,
				   uint32_t hash)
{
	struct entry *e = entry_find(c->run, key, hash);

	if (e)
		return e;
	if (!check_room(c, id, 1))
		return NULL;
	e = entry_create(c->run, key, hash);
	if (!e)
		reply_err(c, id, ENOMEM, "out of memory");
	return e;
}

static void op_set(struct conn *c, const struct crun_wire_msg *m)
{
	struct crun_server *srv = c->srv;
	const struct crun_wire_item *key = &m->items[0], *val = &m->items[1];
	uint32_t h = hash_bytes(srv->seed, key->data, key->len);
	struct entry *e;

	if (!check_value(c, m->id, val->len))
		return;
	e = get_or_create(c, m->id, key, h);
	if (!e)
		return;
	if (entry_store(e, val->data, val->len) < 0) {
		reply_err(c, m->id, ENOMEM, "out of memory");
		if (!e->val)
			entry_delete(c->run, ht_link(&c->run->keys, key->data, key->len, h));
		return;
	}
	entry_set_owner(e, (m->flags & CRUN_WIRE_FL_EPHEMERAL) ? c : NULL);
	reply_ok(c, m->id);
	changed(srv, c->run, e);
}

/* GET, MGET and WAIT: answer now, fail, or wait. */
static void op_read(struct conn *c, const struct crun_wire_msg *m)
{
	uint32_t miss = first_missing(c->srv, c->run, m->items, m->count);
	char k[300];

	if (miss == m->count) {
		answer_read(c, c->run, m->type, m->id, m->items, m->count);
		return;
	}
	if (m->num > 0) {
		add_waiter(c, m);
		return;
	}
	reply_err(c, m->id, ENOENT, "key '%s' not found", show_item(k, sizeof(k), &m->items[miss]));
}

static void op_check(struct conn *c, const struct crun_wire_msg *m)
{
	reply_int(c, m->id, first_missing(c->srv, c->run, m->items, m->count) == m->count);
}

/* Strict decimal int64: optional sign, 1 to 19 digits, nothing else. */
static int parse_i64(const uint8_t *p, uint32_t n, int64_t *out)
{
	uint64_t v = 0, lim;
	bool neg = false;
	uint32_t i = 0;

	if (n && (p[0] == '-' || p[0] == '+')) {
		neg = p[0] == '-';
		i = 1;
	}
	if (i == n)
		return -EINVAL;
	lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		if (v > (lim - (uint64_t)(p[i] - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

static void op_add(struct conn *c, const struct crun_wire_msg *m)
{
	struct crun_server *srv = c->srv;
	const struct crun_wire_item *key = &m->items[0];
	uint32_t h = hash_bytes(srv->seed, key->data, key->len);
	struct entry *e = entry_find(c->run, key, h);
	int64_t old = 0, now;
	char num[24], k[300];
	int n;

	if (e) {
		int rc = parse_i64(e->val, e->vlen, &old);

		if (rc == -EINVAL) {
			reply_err(c, m->id, EINVAL, "value of '%s' is not a decimal integer",
				  show_item(k, sizeof(k), key));
			return;
		}
		if (rc < 0) {
			reply_err(c, m->id, ERANGE, "value of '%s' is out of the int64 range",
				  show_item(k, sizeof(k), key));
			return;
		}
	}
	if (__builtin_add_overflow(old, m->num, &now)) {
		reply_err(c, m->id, ERANGE, "adding %" PRId64 " to %" PRId64 " overflows int64",
			  m->num, old);
		return;
	}
	n = snprintf(num, sizeof(num), "%" PRId64, now);
	if (!check_value(c, m->id, (uint64_t)n))
		return;
	if (!e)
		e = get_or_create(c, m->id, key, h);
	if (!e)
		return;
	if (entry_store(e, (const uint8_t *)num, (uint32_t)n) < 0) {
		reply_err(c, m->id, ENOMEM, "out of memory");
		if (!e->val)
			entry_delete(c->run, ht_link(&c->run->keys, key->data, key->len, h));
		return;
	}
	reply_int(c, m->id, now);
	changed(srv, c->run, e);
}

/* compareSet as torch's TCPStore: a missing key is created when expected
 * is empty, else the reply is expected; a present key is swapped when it
 * equals expected; the reply is the value now stored. EXPECT_ABSENT swaps
 * only a missing key. */
static void op_cas(struct conn *c, const struct crun_wire_msg *m)
{
	struct crun_server *srv = c->srv;
	const struct crun_wire_item *key = &m->items[0], *expected = &m->items[1],
				    *desired = &m->items[2];
	uint32_t h = hash_bytes(srv->seed, key->data, key->len);
	struct entry *e = entry_find(c->run, key, h);
	bool absent_only = m->flags & CRUN_WIRE_FL_EXPECT_ABSENT;

	if (!check_value(c, m->id, desired->len))
		return;
	if (e) {
		if (absent_only || !item_eq(expected, e->val, e->vlen)) {
			reply_value(c, m->id, e->val, e->vlen);
			return;
		}
	} else if (!absent_only && expected->len) {
		reply_value(c, m->id, expected->data, expected->len);
		return;
	} else {
		e = get_or_create(c, m->id, key, h);
		if (!e)
			return;
	}
	if (entry_store(e, desired->data, desired->len) < 0) {
		reply_err(c, m->id, ENOMEM, "out of memory");
		if (!e->val)
			entry_delete(c->run, ht_link(&c->run->keys, key->data, key->len, h));
		return;
	}
	/* num = 1: the swap happened (the value alone cannot say so). */
	reply_value_num(c, m->id, 1, e->val, e->vlen);
	changed(srv, c->run, e);
}

static void op_delete(struct conn *c, const struct crun_wire_msg *m)
{
	const struct crun_wire_item *key = &m->items[0];
	struct hnode **l = ht_link(&c->run->keys, key->data, key->len,
				   hash_bytes(c->srv->seed, key->data, key->len));

	reply_int(c, m->id, l != NULL);
	if (l)
		entry_delete(c->run, l);
}

static void op_append(struct conn *c, const struct crun_wire_msg *m)
{
	struct crun_server *srv = c->srv;
	const struct crun_wire_item *key = &m->items[0], *val = &m->items[1];
	uint32_t h = hash_bytes(srv->seed, key->data, key->len);
	struct entry *e = entry_find(c->run, key, h);
	uint64_t len = (e ? e->vlen : 0) + (uint64_t)val->len;

	if (!check_value(c, m->id, len))
		return;
	if (!e)
		e = get_or_create(c, m->id, key, h);
	if (!e)
		return;
	if (len > e->vcap) {
		/* Geometric growth: repeated appends stay linear. */
		uint64_t cap = (uint64_t)e->vcap * 2;
		uint8_t *p;

		if (cap < len)
			cap = len;
		if (cap < 16)
			cap = 16;
		if (cap > srv->limits.max_value_size)
			cap = len;
		p = realloc(e->val, cap);
		if (!p) {
			reply_err(c, m->id, ENOMEM, "out of memory");
			if (!e->val)
				entry_delete(c->run,
					     ht_link(&c->run->keys, key->data, key->len, h));
			return;
		}
		e->val = p;
		e->vcap = (uint32_t)cap;
	}
	if (val->len)
		memcpy(e->val + e->vlen, val->data, val->len);
	e->vlen = (uint32_t)len;
	reply_ok(c, m->id);
	changed(srv, c->run, e);
}

static void op_mset(struct conn *c, const struct crun_wire_msg *m)
{
	struct crun_server *srv = c->srv;
	uint64_t new_keys = 0;

	/* All or nothing: every limit is checked before the first store. */
	for (uint32_t i = 0; i < m->count; i += 2) {
		if (!check_key(c, m->id, &m->items[i]) ||
		    !check_value(c, m->id, m->items[i + 1].len))
			return;
		if (!entry_find(c->run, &m->items[i],
				hash_bytes(srv->seed, m->items[i].data, m->items[i].len)))
			new_keys++;
	}
	if (new_keys && !check_room(c, m->id, new_keys))
		return;
	for (uint32_t i = 0; i < m->count; i += 2) {
		const struct crun_wire_item *key = &m->items[i], *val = &m->items[i + 1];
		uint32_t h = hash_bytes(srv->seed, key->data, key->len);
		struct entry *e = entry_find(c->run, key, h);

		if (!e)
			e = entry_create(c->run, key, h);
		if (!e || entry_store(e, val->data, val->len) < 0) {
			reply_err(c, m->id, ENOMEM, "out of memory after %u of %u keys", i / 2,
				  m->count / 2);
			if (e && !e->val)
				entry_delete(c->run,
					     ht_link(&c->run->keys, key->data, key->len, h));
			return;
		}
		entry_set_owner(e, NULL);
		changed(srv, c->run, e);
	}
	reply_ok(c, m->id);
}

static int cmp_keys(const void *a, const void *b)
{
	const struct crun_wire_item *x = a, *y = b;
	uint32_t n = x->len < y->len ? x->len : y->len;
	int d = memcmp(x->data, y->data, n);

	if (d)
		return d;
	return (x->len > y->len) - (x->len < y->len);
}

static void op_list(struct conn *c, const struct crun_wire_msg *m)
{
	const struct htable *t = &c->run->keys;
	struct crun_wire_item *keys;
	size_t n = 0;

	if (t->count > CRUN_WIRE_MAX_ITEMS) {
		refuse(c, m->id, ENOBUFS, "run holds %zu keys, more than one reply can list (%d)",
		       t->count, CRUN_WIRE_MAX_ITEMS);
		return;
	}
	keys = malloc((t->count ? t->count : 1) * sizeof(*keys));
	if (!keys) {
		reply_err(c, m->id, ENOMEM, "out of memory");
		return;
	}
	if (t->buckets)
		for (size_t i = 0; i <= t->mask; i++)
			for (struct hnode *h = t->buckets[i]; h; h = h->next)
				keys[n++] = item(h->key, h->klen);
	qsort(keys, n, sizeof(*keys), cmp_keys);
	if (send_frame(c, CRUN_WIRE_VALUES, m->id, 0, keys, (uint32_t)n) == -ENOBUFS)
		reply_too_big(c, m->id);
	free(keys);
}

static void op_watch(struct conn *c, const struct crun_wire_msg *m)
{
	const struct crun_wire_item *key = &m->items[0];
	struct watch *w;

	if (c->nsubs >= MAX_SUBS_PER_CONN) {
		refuse(c, m->id, ENOSPC, "too many waits and watches on one connection (%d)",
			  MAX_SUBS_PER_CONN);
		return;
	}
	if (!sub_room(c, m->id, key->len))
		return;
	w = malloc(sizeof(*w) + key->len);
	if (!w) {
		reply_err(c, m->id, ENOMEM, "out of memory");
		return;
	}
	w->conn = c;
	w->id = m->id;
	w->klen = key->len;
	memcpy(w->key, key->data, key->len);
	list_add_tail(&c->run->watches, &w->run_link);
	list_add_tail(&c->watches, &w->conn_link);
	c->nsubs++;
	c->sub_bytes += key->len;
	reply_ok(c, m->id);
}

static void watch_free(struct watch *w)
{
	list_del(&w->run_link);
	list_del(&w->conn_link);
	w->conn->nsubs--;
	w->conn->sub_bytes -= w->klen;
	free(w);
}

static void op_unwatch(struct conn *c, const struct crun_wire_msg *m)
{
	struct list *l, *next;

	for (l = c->watches.next; l != &c->watches; l = next) {
		struct watch *w = container_of(l, struct watch, conn_link);

		next = l->next;
		if (item_eq(&m->items[0], w->key, w->klen))
			watch_free(w);
	}
	reply_ok(c, m->id);
}

/* ---- rendezvous ------------------------------------------------------------ */

/* round.c's way out: frames go to a connection's output like any reply;
 * the round's timer callback ends with flush_dirty like every callback. */
static int round_send(void *peer, uint8_t type, uint32_t id, int64_t num,
		      const struct crun_wire_item *items, uint32_t count)
{
	return send_frame(peer, type, id, num, items, count);
}

static void round_flush(void *ctx)
{
	flush_dirty(ctx);
}

static void round_handle_opened(void *ctx)
{
	((struct crun_server *)ctx)->open_handles++;
}

static void round_handle_closed(void *ctx)
{
	handle_closed(ctx);
}

static const struct crun_round_ops round_ops = {
	.send = round_send,
	.flush = round_flush,
	.handle_opened = round_handle_opened,
	.handle_closed = round_handle_closed,
};

/* The rendezvous state of c's run, made on first use; NULL after an
 * error reply. */
static struct crun_round *run_round(struct conn *c, uint32_t id)
{
	struct run *r = c->run;
	char shown[300];

	if (!r->round) {
		show(shown, sizeof(shown), (const uint8_t *)r->id, r->hn.klen);
		r->round = crun_round_create(c->srv->loop, shown, &round_ops, c->srv);
		if (!r->round)
			reply_err(c, id, ENOMEM, "out of memory");
	}
	return r->round;
}

/* (Re)starts c's liveness timer: every frame from c calls this. */
static void keepalive_reset(struct conn *c)
{
	if (c->state != CONN_READY || c->drop || c->handles_closing)
		return;
	if (c->keepalive_ms > 0)
		uv_timer_start(&c->timer, on_conn_timer, (uint64_t)c->keepalive_ms, 0);
	else
		uv_timer_stop(&c->timer);
}

static void op_rdzv_join(struct conn *c, const struct crun_wire_msg *m)
{
	struct crun_round_event ev = { .type = CRUN_ROUND_EV_JOIN, .peer = c, .id = m->id };
	struct crun_rdzv_node node;
	struct crun_rdzv_conf conf;
	struct crun_round *round;
	bool admitted_before;
	char err[256];
	int rc;

	rc = crun_rdzv_parse_join(m, &node, &conf, err, sizeof(err));
	if (rc < 0) {
		if (rc == -ENOMEM)
			reply_err(c, m->id, ENOMEM, "out of memory");
		else
			refuse(c, m->id, EINVAL, "bad RDZV_JOIN: %s", err);
		return;
	}
	round = run_round(c, m->id);
	if (!round)
		goto out_finish;
	admitted_before = crun_round_has_peer(round, c);
	ev.node = &node;
	ev.conf = &conf;
	ev.peer_addr = c->peer_ip;
	crun_round_apply(round, &ev);
	/* Only a JOIN the round admitted sets the keep-alive window: a refused
	 * one (EALREADY, a mismatch, a closed run) leaves the connection as it
	 * was. */
	round = c->run->round;
	if (!admitted_before && round && crun_round_has_peer(round, c)) {
		c->keepalive_ms = conf.keepalive_ms;
		keepalive_reset(c);
	}
out_finish:
	crun_rdzv_node_finish(&node);
}

/* RDZV_FAIL and RDZV_DONE. */
static void op_rdzv_end(struct conn *c, const struct crun_wire_msg *m)
{
	struct crun_round_event ev = { .peer = c, .id = m->id, .num = m->num };
	struct crun_round *round = run_round(c, m->id);
	char msg[1024];

	if (!round)
		return;
	if (m->type == CRUN_WIRE_RDZV_FAIL) {
		/* The message goes into other nodes' logs: printable only. */
		size_t n = m->items[0].len < sizeof(msg) - 1 ? m->items[0].len : sizeof(msg) - 1;

		for (size_t i = 0; i < n; i++) {
			uint8_t b = m->items[0].data[i];

			msg[i] = b >= 0x20 && b < 0x7f ? (char)b : '?';
		}
		msg[n] = '\0';
		ev.type = CRUN_ROUND_EV_FAIL;
		ev.message = msg;
	} else {
		ev.type = CRUN_ROUND_EV_DONE;
	}
	crun_round_apply(round, &ev);
}

/* True when the request's keys are within the key size limit (all keys
 * of CHECK/WAIT/MGET, the even items of MSET, else item 0). */
static bool check_keys(struct conn *c, const struct crun_wire_msg *m)
{
	switch (m->type) {
	case CRUN_WIRE_CHECK:
	case CRUN_WIRE_WAIT:
	case CRUN_WIRE_MGET:
		for (uint32_t i = 0; i < m->count; i++)
			if (!check_key(c, m->id, &m->items[i]))
				return false;
		return true;
	case CRUN_WIRE_COUNT:
	case CRUN_WIRE_LIST:
	case CRUN_WIRE_PING:
	case CRUN_WIRE_MSET: /* checked with the values */
	case CRUN_WIRE_RDZV_JOIN: /* no keys: crun_rdzv_parse_join checks */
	case CRUN_WIRE_RDZV_FAIL:
	case CRUN_WIRE_RDZV_DONE:
		return true;
	default:
		return check_key(c, m->id, &m->items[0]);
	}
}

static void log_request(const struct conn *c, const struct crun_wire_msg *m)
{
	char k[300] = "";

	if (m->count && m->type != CRUN_WIRE_PING)
		show_item(k, sizeof(k), &m->items[0]);
	crun_debug("%s: %s id %u '%s'%s num %" PRId64 " (%u items)", c->peer,
		   crun_wire_type_name(m->type), m->id, k, m->count > 1 ? " ..." : "", m->num,
		   m->count);
}

static void handle_request(struct conn *c, const struct crun_wire_msg *m)
{
	if (crun_log_enabled(CRUN_LOG_DEBUG))
		log_request(c, m);
	if (!check_keys(c, m))
		return;
	switch (m->type) {
	case CRUN_WIRE_SET:
		op_set(c, m);
		break;
	case CRUN_WIRE_GET:
	case CRUN_WIRE_MGET:
	case CRUN_WIRE_WAIT:
		op_read(c, m);
		break;
	case CRUN_WIRE_CHECK:
		op_check(c, m);
		break;
	case CRUN_WIRE_ADD:
		op_add(c, m);
		break;
	case CRUN_WIRE_CAS:
		op_cas(c, m);
		break;
	case CRUN_WIRE_DELETE:
		op_delete(c, m);
		break;
	case CRUN_WIRE_APPEND:
		op_append(c, m);
		break;
	case CRUN_WIRE_COUNT:
		reply_int(c, m->id, (int64_t)c->run->keys.count);
		break;
	case CRUN_WIRE_MSET:
		op_mset(c, m);
		break;
	case CRUN_WIRE_LIST:
		op_list(c, m);
		break;
	case CRUN_WIRE_PING:
		if (m->count)
			reply_value(c, m->id, m->items[0].data, m->items[0].len);
		else
			reply_value(c, m->id, NULL, 0);
		break;
	case CRUN_WIRE_WATCH:
		op_watch(c, m);
		break;
	case CRUN_WIRE_UNWATCH:
		op_unwatch(c, m);
		break;
	case CRUN_WIRE_RDZV_JOIN:
		op_rdzv_join(c, m);
		break;
	case CRUN_WIRE_RDZV_FAIL:
	case CRUN_WIRE_RDZV_DONE:
		op_rdzv_end(c, m);
		break;
	default:
		break;
	}
}

/* ---- handshake and framing ------------------------------------------------ */

/* Answers id with an error, logs why, and closes c once the error is out. */
static void fail_conn(struct conn *c, uint32_t id, int errnum, const char *what, const char *why)
{
	crun_info("%s: %s: %s", c->peer, what, why);
	reply_err(c, id, errnum, "%s", why);
	begin_close(c, true);
}

static void handle_preamble(struct conn *c, const uint8_t *p)
{
	char why[128];
	long rc = crun__hello_server_preamble(p, CRUN_WIRE_CLIENT_PREAMBLE, why, sizeof(why));

	if (rc < 0) {
		fail_conn(c, 0, (int)-rc, rc == -EPROTO ? "protocol error" : "refused", why);
		return;
	}
	c->state = CONN_HELLO;
}

/* The first frame: the steps are hello.c's. */
static void handle_hello(struct conn *c, const struct crun_wire_msg *m)
{
	struct crun_server *srv = c->srv;
	const struct crun__hello_server hs = { srv->token, srv->token_len, c->nonce,
					       srv->limits.max_key_size };
	const struct crun_wire_item *run_id = &m->items[0];
	uint8_t server_mac[CRUN_WIRE_MAC_LEN];
	struct crun_wire_item reply;
	char r[300], why[128];
	int rc;

	rc = crun__hello_server_hello(&hs, m, server_mac, &reply, why, sizeof(why));
	if (rc == -EACCES) {
		crun_info("%s: authentication failed (run '%s')", c->peer,
			  show_item(r, sizeof(r), run_id));
		reply_err(c, m->id, EACCES, "%s", why);
		begin_close(c, true);
		return;
	}
	if (rc < 0) {
		fail_conn(c, m->id, -rc, rc == -EPROTO ? "protocol error" : "refused", why);
		return;
	}
	show_item(r, sizeof(r), run_id);
	c->run = run_acquire(srv, run_id->data, run_id->len);
	if (!c->run) {
		fail_conn(c, m->id, ENOMEM, "refused", "out of memory");
		return;
	}
	c->hello_done = true;
	c->state = CONN_READY;
	uv_timer_stop(&c->timer);
	send_frame(c, CRUN_WIRE_OK, m->id, 0, &reply, 1);
	crun_log(srv->quiet ? CRUN_LOG_DEBUG : CRUN_LOG_INFO, "%s: joined run '%s'%s", c->peer, r, srv->token ? " (authenticated)" : "");
}

static void handle_frame(struct conn *c, const struct crun_wire_msg *m)
{
	char err[160];

	if (crun_wire_validate(m, err, sizeof(err)) < 0) {
		fail_conn(c, m->id, EPROTO, "protocol error", err);
		return;
	}
	if (!crun_wire_is_request(m->type)) {
		snprintf(err, sizeof(err), "unexpected %s frame from a client",
			 crun_wire_type_name(m->type));
		fail_conn(c, m->id, EPROTO, "protocol error", err);
		return;
	}
	if (c->state == CONN_HELLO) {
		handle_hello(c, m);
		return;
	}
	if (m->type == CRUN_WIRE_HELLO) {
		fail_conn(c, m->id, EPROTO, "protocol error", "HELLO after the handshake");
		return;
	}
	handle_request(c, m);
}

static uint32_t max_payload(const struct conn *c)
{
	uint64_t max = c->srv->limits.max_conn_buffer - CRUN_WIRE_HEADER_LEN;

	if (c->state != CONN_READY)
		return HELLO_MAX_PAYLOAD;
	return max > CRUN_WIRE_MAX_PAYLOAD ? CRUN_WIRE_MAX_PAYLOAD : (uint32_t)max;
}

static int grow_items(struct crun_server *srv, uint32_t need)
{
	uint32_t cap = srv->items_cap * 2;
	struct crun_wire_item *p;

	if (cap < need)
		cap = need;
	if (cap > CRUN_WIRE_MAX_ITEMS)
		cap = CRUN_WIRE_MAX_ITEMS;
	p = realloc(srv->items, cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	srv->items = p;
	srv->items_cap = cap;
	return 0;
}

/* Handles every whole frame in buf; returns the bytes consumed. Stops
 * early when c starts closing. */
static size_t process(struct conn *c, const uint8_t *buf, size_t len)
{
	struct crun_server *srv = c->srv;
	struct crun_wire_msg m;
	size_t off = 0;
	char err[160];

	while (c->state != CONN_CLOSING && !c->drop) {
		uint32_t cap = srv->items_cap;
		long n;

		if (c->state == CONN_PREAMBLE) {
			if (len - off < CRUN_WIRE_CLIENT_PREAMBLE)
				break;
			handle_preamble(c, buf + off);
			off += CRUN_WIRE_CLIENT_PREAMBLE;
			continue;
		}
		n = crun_wire_decode(buf + off, len - off, max_payload(c), &m, srv->items, &cap,
				     err, sizeof(err));
		if (n == -ENOBUFS) {
			if (grow_items(srv, cap) < 0) {
				drop_conn(c, "out of memory");
				break;
			}
			continue;
		}
		if (n < 0) {
			fail_conn(c, 0, EPROTO, "protocol error", err);
			break;
		}
		if (n == 0)
			break;
		off += (size_t)n;
		handle_frame(c, &m);
	}
	return off;
}

/* ---- connection lifecycle ------------------------------------------------- */

static void handle_closed(struct crun_server *srv)
{
	srv->open_handles--;
	if (!srv->destroying || srv->open_handles)
		return;
	free(srv->runs.buckets);
	free(srv->scratch);
	free(srv->items);
	if (srv->token) {
		memset(srv->token, 0, srv->token_len);
		free(srv->token);
	}
	void (*done)(void *) = srv->done;
	void *arg = srv->done_arg;
	free(srv);
	if (done)
		done(arg);
}

static void on_conn_closed(uv_handle_t *h)
{
	struct conn *c = h->data;
	struct crun_server *srv = c->srv;

	if (--c->open_handles == 0) {
		list_del(&c->link);
		free(c->rbuf);
		free(c->obuf);
		free(c);
	}
	handle_closed(srv);
}

static void close_handles(struct conn *c)
{
	if (c->handles_closing)
		return;
	c->handles_closing = true;
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
	uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

/* Moves c to CLOSING: leaves its run (deleting its ephemeral keys, which
 * notifies their watchers), cancels its waits and watches, runs the
 * disconnect hook. graceful: its pending output (an error) is flushed by
 * flush_dirty before the handles close; else they close now. */
static void begin_close(struct conn *c, bool graceful)
{
	struct crun_server *srv = c->srv;

	if (c->state == CONN_CLOSING) {
		if (!graceful)
			close_handles(c);
		return;
	}
	c->state = CONN_CLOSING;
	uv_read_stop((uv_stream_t *)&c->tcp);
	uv_timer_stop(&c->timer);
	if (c->counted) {
		srv->nconns--;
		c->counted = false;
	}
	while (!list_empty(&c->waiters))
		waiter_remove(container_of(c->waiters.next, struct waiter, conn_link));
	while (!list_empty(&c->watches))
		watch_free(container_of(c->watches.next, struct watch, conn_link));
	while (!list_empty(&c->owned)) {
		struct entry *e = container_of(c->owned.next, struct entry, owned);

		entry_delete(c->run, ht_link(&c->run->keys, e->key, e->hn.klen, e->hn.hash));
	}
	if (c->run && c->run->round) {
		struct crun_round_event ev = { .type = CRUN_ROUND_EV_LOST, .peer = c };
		char why[64], t[24];

		if (c->alive_expired)
			snprintf(why, sizeof(why), "no keep-alive for %s",
				 crun_rdzv_format_ms(c->keepalive_ms, t, sizeof(t)));
		else
			snprintf(why, sizeof(why), "connection closed");
		ev.message = why;
		crun_round_apply(c->run->round, &ev);
	}
	if (c->hello_done && srv->disconnect_cb)
		srv->disconnect_cb(srv, c->run->id, c->peer, srv->disconnect_arg);
	if (c->run) {
		c->run->nconns--;
		run_maybe_free(srv, c->run);
		c->run = NULL;
	}
	if (graceful)
		mark_dirty(c);
	else
		close_handles(c);
}

/* Writes the output of every connection touched since the last call and
 * carries out the closes that were deferred. Runs at the end of every
 * libuv callback; closing one connection can touch others (ephemeral keys
 * deleted, watchers notified), which simply puts them on the list too. */
static void flush_dirty(struct crun_server *srv)
{
	struct conn *c;

	while ((c = srv->dirty)) {
		srv->dirty = c->dirty_next;
		c->dirty = false;
		if (c->handles_closing)
			continue;
		if (!c->drop)
			flush_conn(c);
		if (c->drop) {
			begin_close(c, false);
			continue;
		}
		if (c->state != CONN_CLOSING)
			continue;
		if (!c->inflight)
			close_handles(c);
		else
			uv_timer_start(&c->timer, on_conn_timer, LINGER_MS, 0);
	}
}

static void on_conn_timer(uv_timer_t *t)
{
	struct conn *c = t->data;
	struct crun_server *srv = c->srv;
	char why[96];

	if (c->state == CONN_CLOSING) {
		close_handles(c);
	} else if (c->state == CONN_READY) {
		char ms[24];

		/* No frame for keepalive_ms: the peer is gone or cut off. */
		c->alive_expired = true;
		snprintf(why, sizeof(why), "no keep-alive for %s",
			 crun_rdzv_format_ms(c->keepalive_ms, ms, sizeof(ms)));
		drop_conn(c, why);
	} else {
		snprintf(why, sizeof(why), "no handshake within %u ms",
			 srv->limits.handshake_timeout_ms);
		fail_conn(c, 0, ETIMEDOUT, "closed", why);
	}
	flush_dirty(srv);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct conn *c = h->data;
	uint64_t cap = c->state == CONN_READY ? c->srv->limits.max_conn_buffer
					      : HELLO_MAX_PAYLOAD + CRUN_WIRE_HEADER_LEN;
	uint64_t want;

	if (!c->rlen) {
		*buf = uv_buf_init((char *)c->srv->scratch, SCRATCH_SIZE);
		return;
	}
	/* The frame in rbuf is incomplete. Grow towards its announced size
	 * (already checked against the cap), but no faster than the data
	 * arrives, so an announced size alone allocates little. */
	want = c->rlen + RBUF_MIN;
	if (c->rlen >= CRUN_WIRE_HEADER_LEN && c->state != CONN_PREAMBLE) {
		uint64_t total = CRUN_WIRE_HEADER_LEN + (((uint64_t)c->rbuf[0] << 24) |
							 ((uint64_t)c->rbuf[1] << 16) |
							 ((uint64_t)c->rbuf[2] << 8) | c->rbuf[3]);
		uint64_t step = 2 * (uint64_t)c->rlen + SCRATCH_SIZE;

		if (total > want)
			want = total < step ? total : step;
	}
	if (want > cap)
		want = cap;
	if (want > c->rcap) {
		uint8_t *p = realloc(c->rbuf, want);

		if (!p) {
			*buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
			return;
		}
		c->rbuf = p;
		c->rcap = want;
	}
	*buf = uv_buf_init((char *)c->rbuf + c->rlen, (unsigned int)(c->rcap - c->rlen));
}

static void keep_tail(struct conn *c, const uint8_t *p, size_t n)
{
	if (n > c->rcap) {
		size_t cap = n < RBUF_MIN ? RBUF_MIN : n;
		uint8_t *q = malloc(cap);

		if (!q) {
			drop_conn(c, "out of memory");
			return;
		}
		free(c->rbuf);
		c->rbuf = q;
		c->rcap = cap;
	}
	memcpy(c->rbuf, p, n);
	c->rlen = n;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct conn *c = s->data;
	struct crun_server *srv = c->srv;
	size_t used;

	if (nread < 0) {
		if (c->state != CONN_CLOSING) {
			if (nread == UV_EOF) {
				crun_log(srv->quiet ? CRUN_LOG_DEBUG : CRUN_LOG_INFO,
					 "%s: connection closed", c->peer);
				begin_close(c, true);
			} else {
				crun_log(srv->quiet ? CRUN_LOG_DEBUG : CRUN_LOG_INFO,
					 "%s: connection closed: %s", c->peer,
					 uv_strerror((int)nread));
				begin_close(c, false);
			}
		}
		flush_dirty(srv);
		return;
	}
	if (nread == 0)
		return;
	if (buf->base == (char *)srv->scratch) {
		used = process(c, srv->scratch, (size_t)nread);
		if (c->state != CONN_CLOSING && used < (size_t)nread)
			keep_tail(c, srv->scratch + used, (size_t)nread - used);
		if (used && c->keepalive_ms)
			keepalive_reset(c);
	} else {
		c->rlen += (size_t)nread;
		used = process(c, c->rbuf, c->rlen);
		if (used && c->keepalive_ms)
			keepalive_reset(c);
		if (used) {
			memmove(c->rbuf, c->rbuf + used, c->rlen - used);
			c->rlen -= used;
		}
		if (!c->rlen && c->rcap > BUF_KEEP) {
			free(c->rbuf);
			c->rbuf = NULL;
			c->rcap = 0;
		}
	}
	flush_dirty(srv);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct crun_server *srv = server->data;
	uint8_t preamble[CRUN_WIRE_SERVER_PREAMBLE];
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	struct conn *c;

	if (status < 0) {
		crun_warn("cannot accept a connection: %s", uv_strerror(status));
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		crun_warn("cannot accept a connection: out of memory");
		return;
	}
	c->srv = srv;
	list_init(&c->link);
	list_init(&c->owned);
	list_init(&c->waiters);
	list_init(&c->watches);
	if (uv_tcp_init(srv->loop, &c->tcp) < 0) {
		free(c);
		return;
	}
	c->tcp.data = c;
	c->open_handles = 1;
	srv->open_handles++;
	if (uv_timer_init(srv->loop, &c->timer) == 0) {
		c->timer.data = c;
		c->open_handles++;
		srv->open_handles++;
	} else {
		/* Keep the close accounting simple: one close per handle. */
		c->handles_closing = true;
		uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
		return;
	}
	list_add_tail(&srv->conns, &c->link);
	snprintf(c->peer, sizeof(c->peer), "unknown peer");
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
		c->state = CONN_CLOSING;
		close_handles(c);
		return;
	}
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
		crun__format_addr((struct sockaddr *)&ss, c->peer, sizeof(c->peer), c->peer_ip);
	uv_tcp_nodelay(&c->tcp, 1);

	if (srv->nconns >= srv->limits.max_connections) {
		char why[96];

		crun_wire_server_preamble(preamble, 0, NULL);
		send_raw(c, preamble, sizeof(preamble));
		snprintf(why, sizeof(why), "too many connections (limit %u)",
			 srv->limits.max_connections);
		crun_info("refused connection from %s: %s", c->peer, why);
		reply_err(c, 0, EMFILE, "too many connections");
		begin_close(c, true);
		flush_dirty(srv);
		return;
	}
	c->counted = true;
	srv->nconns++;
	if (srv->token && crun_wire_random(c->nonce, sizeof(c->nonce)) < 0) {
		crun_warn("cannot draw a nonce for %s: closing it", c->peer);
		begin_close(c, false);
		return;
	}
	crun_wire_server_preamble(preamble, srv->token ? CRUN_WIRE_F_AUTH : 0,
				  srv->token ? c->nonce : NULL);
	send_raw(c, preamble, sizeof(preamble));
	crun_log(srv->quiet ? CRUN_LOG_DEBUG : CRUN_LOG_INFO, "accepted connection from %s",
		 c->peer);
	uv_timer_start(&c->timer, on_conn_timer, srv->limits.handshake_timeout_ms, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
		begin_close(c, false);
	flush_dirty(srv);
}

/* ---- public API ------------------------------------------------------------ */

struct crun_server *crun_server_create(uv_loop_t *loop, const struct crun_server_opts *opts)
{
	struct crun_server *srv = calloc(1, sizeof(*srv));

	if (!srv)
		return NULL;
	srv->loop = loop;
	if (opts)
		srv->limits = opts->limits;
	else
		crun_server_limits_default(&srv->limits);
	/* A frame needs at least a header and a minimal payload. */
	if (srv->limits.max_conn_buffer < RBUF_MIN)
		srv->limits.max_conn_buffer = RBUF_MIN;
	/* libuv buffers carry an unsigned int length. */
	if (srv->limits.max_conn_buffer > 2ull * CRUN_WIRE_MAX_PAYLOAD)
		srv->limits.max_conn_buffer = 2ull * CRUN_WIRE_MAX_PAYLOAD;
	if (srv->limits.max_connections == 0)
		srv->limits.max_connections = 1;
	if (srv->limits.handshake_timeout_ms == 0)
		srv->limits.handshake_timeout_ms = 1;
	list_init(&srv->conns);
	srv->scratch = malloc(SCRATCH_SIZE);
	srv->items = malloc(ITEMS_MIN * sizeof(*srv->items));
	srv->items_cap = ITEMS_MIN;
	if (!srv->scratch || !srv->items)
		goto out_free;
	if (opts) {
		srv->quiet = opts->quiet;
		srv->token_hint = opts->token_hint;
	}
	if (opts && opts->token && opts->token_len) {
		srv->token = malloc(opts->token_len);
		if (!srv->token)
			goto out_free;
		memcpy(srv->token, opts->token, opts->token_len);
		srv->token_len = opts->token_len;
	}
	if (crun_wire_random((uint8_t *)&srv->seed, sizeof(srv->seed)) < 0)
		goto out_free_token;
	if (uv_tcp_init(loop, &srv->listener) < 0)
		goto out_free_token;
	srv->listener.data = srv;
	srv->open_handles = 1;
	return srv;

out_free_token:
	if (srv->token) {
		memset(srv->token, 0, srv->token_len);
		free(srv->token);
	}
out_free:
	free(srv->items);
	free(srv->scratch);
	free(srv);
	return NULL;
}

static bool sockaddr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)sa;

		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)sa;
		const uint8_t *a = s6->sin6_addr.s6_addr;
		static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

		if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
			return true;
		return !memcmp(a, mapped, sizeof(mapped)) && a[12] == 127;
	}
	return false;
}

static int resolve(uv_loop_t *loop, const char *host, int port, struct sockaddr_storage *ss)
{
	struct addrinfo hints, *res;
	uv_getaddrinfo_t req;
	int rc;

	memset(ss, 0, sizeof(*ss));
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
		return 0;
	if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
		return 0;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	rc = uv_getaddrinfo(loop, &req, NULL, host, NULL, &hints);
	if (rc < 0)
		return rc;
	res = req.addrinfo;
	if (!res) {
		rc = UV_EAI_NONAME;
	} else {
		memcpy(ss, res->ai_addr, res->ai_addrlen);
		if (ss->ss_family == AF_INET)
			((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		else
			((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
	}
	uv_freeaddrinfo(res);
	return rc;
}

int crun_server_listen(struct crun_server *srv, const char *host, int port, char *err,
		       size_t errlen)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	char shown[320];
	const char *fmt;
	int rc;

	if (!host || !*host)
		host = "0.0.0.0";
	fmt = strchr(host, ':') ? "[%s]:%d" : "%s:%d";
	snprintf(shown, sizeof(shown), fmt, host, port);
	if (srv->listening || srv->listen_failed) {
		snprintf(err, errlen, "cannot listen on '%s': the server is already set up", shown);
		return -EALREADY;
	}
	if (port < 0 || port > 65535) {
		snprintf(err, errlen, "cannot listen on '%s': port out of range 0-65535", shown);
		return -EINVAL;
	}
	rc = resolve(srv->loop, host, port, &ss);
	if (rc < 0) {
		snprintf(err, errlen, "cannot resolve '%s': %s", host, uv_strerror(rc));
		/* getaddrinfo's codes are not errnos */
		return rc > -4000 ? rc : -EADDRNOTAVAIL;
	}
	rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&ss, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&srv->listener, 4096, on_connection);
	if (rc == 0)
		rc = uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&ss, &len);
	if (rc < 0) {
		srv->listen_failed = true;
		snprintf(err, errlen, "cannot listen on '%s': %s", shown, uv_strerror(rc));
		return rc;
	}
	srv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						   : ((struct sockaddr_in *)&ss)->sin_port);
	srv->listening = true;
	if (!srv->token && !sockaddr_is_loopback((const struct sockaddr *)&ss)) {
		snprintf(shown, sizeof(shown), fmt, host, srv->port);
		crun_warn("listening on %s without a token: anyone who can reach this port can "
			  "join and change the job's keys; set %s",
			  shown, srv->token_hint ? srv->token_hint : "--token-file or CRUN_TOKEN");
	}
	return 0;
}

int crun_server_port(const struct crun_server *srv)
{
	return srv && srv->listening ? srv->port : 0;
}

void crun_server_set_disconnect_cb(struct crun_server *srv, crun_server_disconnect_cb cb,
				   void *arg)
{
	srv->disconnect_cb = cb;
	srv->disconnect_arg = arg;
}

uint32_t crun_server_connections(const struct crun_server *srv)
{
	return srv ? srv->nconns : 0;
}

static void on_listener_closed(uv_handle_t *h)
{
	handle_closed(h->data);
}

void crun_server_destroy(struct crun_server *srv, void (*done)(void *arg), void *arg)
{
	if (!srv)
		return;
	srv->destroying = true;
	srv->done = done;
	srv->done_arg = arg;
	while (srv->dirty) {
		srv->dirty->dirty = false;
		srv->dirty = srv->dirty->dirty_next;
	}
	/* No notifications, no hooks, no replies: everything simply goes.
	 * Connections leave srv->conns in their close callback. */
	for (struct list *l = srv->conns.next; l != &srv->conns; l = l->next) {
		struct conn *c = container_of(l, struct conn, link);

		while (!list_empty(&c->waiters))
			waiter_remove(container_of(c->waiters.next, struct waiter, conn_link));
		while (!list_empty(&c->watches))
			watch_free(container_of(c->watches.next, struct watch, conn_link));
		while (!list_empty(&c->owned))
			entry_set_owner(container_of(c->owned.next, struct entry, owned), NULL);
		c->run = NULL;
		c->state = CONN_CLOSING;
		close_handles(c);
	}
	if (srv->runs.buckets) {
		for (size_t i = 0; i <= srv->runs.mask; i++) {
			struct hnode *h = srv->runs.buckets[i], *next;

			for (; h; h = next) {
				next = h->next;
				run_free((struct run *)h);
			}
			srv->runs.buckets[i] = NULL;
		}
	}
	srv->runs.count = 0;
	uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
}

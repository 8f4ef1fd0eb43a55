/* The store's semantics (store.h).
 *
 * Why it is shaped this way:
 * - Runs and keys are in intrusive hash tables (common/htable.h) keyed by
 *   the bytes themselves; an entry carries its key after the struct, so a
 *   key costs one allocation plus its value.
 * - Waiting requests sit in two lists (their run's and their client's, to
 *   be cancelled when it leaves), in the list of the first of their keys
 *   that is missing (the run's table of awaited keys: a change to a key
 *   looks only at the requests that wait for it, so N ranks waiting on
 *   one barrier key while N others set their own keys cost O(N), not
 *   O(N^2)), and in one binary heap ordered by deadline, so the edge needs
 *   a single timer for all of them and expiring is O(log n) per wait.
 * - Replies go to ops->send as item arrays pointing into the entries or the
 *   request: nothing is copied or allocated to answer a request, except an
 *   MGET of more than 16 keys and a LIST.
 * - Code inside a walk (notifying watchers, waking waiters) never frees a
 *   client: ops->drop only asks the edge to close one later.
 * - A queue is a singly linked list of values with a tail pointer, in a
 *   table of its own per run; it goes when its last value is popped, so
 *   a present queue is a non-empty one. */
#include "rendezvous/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/htable.h"
#include "common/log.h"
#include "common/util.h"

/* An MGET of up to this many keys answers from the stack. */
#define MGET_STACK 16
#define HEAP_MIN 16

struct entry {
	struct crun__hnode hn;		  /* first member: tables hold hnodes */
	struct crun__store_client *owner; /* set for an ephemeral key */
	struct crun__list owned;	  /* in owner->owned */
	uint8_t *val;
	uint32_t vlen, vcap;
	uint8_t key[];
};

/* One queued value. */
struct qval {
	struct qval *next;
	uint32_t len;
	uint8_t data[];
};

struct queue {
	struct crun__hnode hn; /* first member: tables hold hnodes */
	struct qval *head, **tail;
	uint64_t len;
	uint8_t key[];
};

struct crun__store_run {
	struct crun__hnode hn;
	struct crun__htable keys;
	struct crun__htable awaited; /* struct awaited: keys waiters miss */
	struct crun__htable queues;  /* struct queue, never empty */
	uint64_t nqueued;	     /* values in all of them */
	struct crun__list waiters;   /* struct waiter.run_link */
	struct crun__list watches;   /* struct watch.run_link */
	void *data;		     /* the edge's (crun__store_run_data) */
	uint32_t nclients;
	char id[]; /* NUL-terminated; hn.key points here */
};

/* A key that waiters miss: the waiters whose first missing key it is. */
struct awaited {
	struct crun__hnode hn;	   /* first member: tables hold hnodes */
	struct crun__list waiters; /* struct waiter.key_link */
	uint8_t key[];
};

/* A GET, MGET or WAIT that waits for keys to exist. */
struct waiter {
	struct crun__store_client *client;
	struct crun__list run_link, client_link;
	struct crun__list key_link; /* in awaited->waiters */
	struct awaited *awaited;    /* NULL: in no key's list */
	uint64_t deadline;
	uint64_t seq; /* ties between equal deadlines: first come first */
	size_t slot;  /* index in the store's heap */
	uint32_t id;
	uint8_t type;
	uint32_t count;
	size_t bytes;		      /* key bytes held, in client->sub_bytes */
	struct crun__wire_item *keys; /* in the same allocation, after the struct */
};

struct watch {
	struct crun__store_client *client;
	struct crun__list run_link, client_link;
	uint32_t id;
	uint32_t klen;
	uint8_t key[];
};

struct crun__store {
	struct crun__store_limits limits;
	const struct crun__store_ops *ops;
	void *ctx;
	uint32_t seed;
	struct crun__htable runs;
	struct waiter **heap; /* min-heap by (deadline, seq) */
	size_t nheap, heapcap;
	uint64_t next_seq;
};

/* ---- small helpers ----------------------------------------------------- */

const char *crun__store_show(char *out, size_t outlen, const uint8_t *p, size_t n)
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

static const char *show_item(char *out, size_t outlen, const struct crun__wire_item *it)
{
	return crun__store_show(out, outlen, it->data, it->len);
}

static struct crun__wire_item item(const void *data, size_t len)
{
	struct crun__wire_item it = {data, (uint32_t)len};

	return it;
}

static bool item_eq(const struct crun__wire_item *a, const uint8_t *b, uint32_t blen)
{
	return a->len == blen && !memcmp(a->data, b, blen);
}

static uint32_t hash_item(const struct crun__store *st, const struct crun__wire_item *it)
{
	return crun__hash_bytes(st->seed, it->data, it->len);
}

/* What a request does, in words: "reads", "says it is done with". */
static const char *request_verb(uint8_t type)
{
	switch (type) {
	case CRUN_WIRE_HELLO:
		return "says hello";
	case CRUN_WIRE_SET:
		return "sets";
	case CRUN_WIRE_GET:
		return "reads";
	case CRUN_WIRE_CHECK:
		return "checks whether these exist:";
	case CRUN_WIRE_WAIT:
		return "waits for";
	case CRUN_WIRE_ADD:
		return "adds a number to";
	case CRUN_WIRE_CAS:
		return "compares and sets";
	case CRUN_WIRE_DELETE:
		return "deletes";
	case CRUN_WIRE_APPEND:
		return "appends to";
	case CRUN_WIRE_COUNT:
		return "counts the keys";
	case CRUN_WIRE_MGET:
		return "reads";
	case CRUN_WIRE_MSET:
		return "sets";
	case CRUN_WIRE_LIST:
		return "lists the keys under";
	case CRUN_WIRE_PING:
		return "checks that the store answers";
	case CRUN_WIRE_WATCH:
		return "watches";
	case CRUN_WIRE_UNWATCH:
		return "stops watching";
	case CRUN_WIRE_RDZV_JOIN:
		return "joins the rendezvous as";
	case CRUN_WIRE_RDZV_RESUME:
		return "joins the rendezvous again as";
	case CRUN_WIRE_RDZV_FAIL:
		return "says it failed";
	case CRUN_WIRE_RDZV_DONE:
		return "says it is done";
	case CRUN_WIRE_QUEUE_PUSH:
		return "adds to the queue";
	case CRUN_WIRE_QUEUE_POP:
		return "takes from the queue";
	case CRUN_WIRE_QUEUE_LEN:
		return "asks how long the queue is:";
	default:
		return "sends a request the store does not know";
	}
}

void crun__store_log_request(const struct crun__store_client *c, const struct crun__wire_msg *m)
{
	char k[300] = "", what[360] = "", more[80] = "";
	bool keys = m->type == CRUN_WIRE_MGET || m->type == CRUN_WIRE_MSET ||
		    m->type == CRUN_WIRE_CHECK;
	bool round = m->type == CRUN_WIRE_RDZV_FAIL || m->type == CRUN_WIRE_RDZV_DONE;
	/* MSET's items are key, value, key, value ... */
	uint32_t n = m->type == CRUN_WIRE_MSET ? m->count / 2 : m->count;

	if (m->count && m->type != CRUN_WIRE_PING && !round) {
		show_item(k, sizeof(k), &m->items[0]);
		if (keys && n > 1)
			snprintf(what, sizeof(what), " %u keys, '%s' first", n, k);
		else
			snprintf(what, sizeof(what), " '%s'", k);
	}
	/* What the other items and the number mean depends on the request
	 * (wire.h). */
	switch (m->type) {
	case CRUN_WIRE_SET:
	case CRUN_WIRE_APPEND:
	case CRUN_WIRE_QUEUE_PUSH:
		if (m->count > 1)
			snprintf(more, sizeof(more), " (a value of %u bytes)", m->items[1].len);
		break;
	case CRUN_WIRE_GET:
	case CRUN_WIRE_MGET:
	case CRUN_WIRE_WAIT:
		if (m->num > 0)
			snprintf(more, sizeof(more), ", waiting up to %" PRId64 " ms", m->num);
		break;
	case CRUN_WIRE_ADD:
		snprintf(more, sizeof(more), " (%" PRId64 ")", m->num);
		break;
	case CRUN_WIRE_RDZV_FAIL:
		snprintf(more, sizeof(more), " in round %" PRId64, m->num);
		break;
	case CRUN_WIRE_RDZV_DONE:
		snprintf(more, sizeof(more), " with round %" PRId64, m->num);
		break;
	default:
		if (!keys && m->count > 1 && !round)
			snprintf(more, sizeof(more), " and %u more", m->count - 1);
		break;
	}
	crun__debug("store: %s %s%s%s", c->name, request_verb(m->type), what, more);
}

/* ---- replies ------------------------------------------------------------- */

static int emit(struct crun__store *st, struct crun__store_client *c, uint8_t type, uint32_t id,
		int64_t num, const struct crun__wire_item *items, uint32_t count)
{
	return st->ops->send(st->ctx, c, type, id, num, items, count);
}

static void reply_errv(struct crun__store *st, struct crun__store_client *c, uint32_t id,
		       int errnum, const char *fmt, va_list ap)
{
	struct crun__wire_item it;
	char msg[256];
	int n;

	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(msg))
		n = sizeof(msg) - 1;
	it = item(msg, (size_t)n);
	emit(st, c, CRUN_WIRE_ERROR, id, errnum, &it, 1);
}

void crun__store_reply_error(struct crun__store *st, struct crun__store_client *c, uint32_t id,
			     int errnum, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	reply_errv(st, c, id, errnum, fmt, ap);
	va_end(ap);
}

void crun__store_refuse(struct crun__store *st, struct crun__store_client *c, uint32_t id,
			int errnum, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->nrefused < CRUN__STORE_REFUSALS_LOGGED)
		crun__info("%s: refused request: %s", c->name, msg);
	else if (c->nrefused == CRUN__STORE_REFUSALS_LOGGED)
		crun__info("%s: refused request: %s (further refusals on this connection are not "
			   "logged)",
			   c->name, msg);
	c->nrefused++;
	crun__store_reply_error(st, c, id, errnum, "%s", msg);
}

static void reply_oom(struct crun__store *st, struct crun__store_client *c, uint32_t id)
{
	crun__store_reply_error(st, c, id, ENOMEM, "out of memory");
}

static void reply_too_big(struct crun__store *st, struct crun__store_client *c, uint32_t id)
{
	crun__store_refuse(st, c, id, ENOBUFS,
			   "reply too large for one frame or for this connection's buffer");
}

static void reply_value_num(struct crun__store *st, struct crun__store_client *c, uint32_t id,
			    int64_t num, const void *data, size_t len)
{
	struct crun__wire_item it = item(data, len);

	if (emit(st, c, CRUN_WIRE_VALUE, id, num, &it, 1) == -ENOBUFS)
		reply_too_big(st, c, id);
}

/* ---- runs and entries ---------------------------------------------------- */

static struct crun__store_run *run_acquire(struct crun__store *st, const uint8_t *id, uint32_t len)
{
	uint32_t h = crun__hash_bytes(st->seed, id, len);
	struct crun__hnode *n = crun__htable_find(&st->runs, id, len, h);
	struct crun__store_run *r;

	if (n) {
		r = (struct crun__store_run *)n;
		r->nclients++;
		return r;
	}
	r = calloc(1, sizeof(*r) + len + 1);
	if (!r)
		return NULL;
	memcpy(r->id, id, len);
	r->hn.key = (const uint8_t *)r->id;
	r->hn.klen = len;
	r->hn.hash = h;
	crun__list_init(&r->waiters);
	crun__list_init(&r->watches);
	if (crun__htable_insert(&st->runs, &r->hn) < 0) {
		free(r);
		return NULL;
	}
	r->nclients = 1;
	return r;
}

static void entry_free(struct entry *e)
{
	free(e->val);
	free(e);
}

static void entry_node_free(struct crun__hnode *n, void *arg)
{
	(void)arg;
	entry_free((struct entry *)n);
}

static void awaited_node_free(struct crun__hnode *n, void *arg)
{
	(void)arg;
	free(n);
}

static void queue_free(struct queue *q)
{
	while (q->head) {
		struct qval *v = q->head;

		q->head = v->next;
		free(v);
	}
	free(q);
}

static void queue_node_free(struct crun__hnode *n, void *arg)
{
	(void)arg;
	queue_free((struct queue *)n);
}

/* Drops every queue of r; returns the number of values they held. */
static uint64_t drop_queues(struct crun__store_run *r)
{
	uint64_t n = r->nqueued;

	crun__htable_clear(&r->queues, queue_node_free, NULL);
	r->nqueued = 0;
	return n;
}

static void run_free(struct crun__store *st, struct crun__store_run *r)
{
	if (r->data && st->ops->run_freed)
		st->ops->run_freed(st->ctx, r->data);
	crun__htable_clear(&r->keys, entry_node_free, NULL);
	crun__htable_clear(&r->awaited, awaited_node_free, NULL);
	drop_queues(r);
	free(r);
}

/* Frees r once nothing refers to it any more: no keys, no queued values,
 * no clients. */
static void run_maybe_free(struct crun__store *st, struct crun__store_run *r)
{
	if (r->nclients || r->keys.count || r->queues.count)
		return;
	crun__htable_remove(&st->runs, &r->hn);
	run_free(st, r);
}

static struct entry *entry_find(const struct crun__store_run *r, const struct crun__wire_item *key,
				uint32_t hash)
{
	return (struct entry *)crun__htable_find(&r->keys, key->data, key->len, hash);
}

static struct queue *queue_find(const struct crun__store_run *r, const struct crun__wire_item *key,
				uint32_t hash)
{
	return (struct queue *)crun__htable_find(&r->queues, key->data, key->len, hash);
}

static struct entry *entry_create(struct crun__store_run *r, const struct crun__wire_item *key,
				  uint32_t hash)
{
	struct entry *e = calloc(1, sizeof(*e) + key->len);

	if (!e)
		return NULL;
	memcpy(e->key, key->data, key->len);
	e->hn.key = e->key;
	e->hn.klen = key->len;
	e->hn.hash = hash;
	crun__list_init(&e->owned);
	if (crun__htable_insert(&r->keys, &e->hn) < 0) {
		free(e);
		return NULL;
	}
	return e;
}

/* Replaces e's value. Reuses the allocation when it fits and is not far
 * too large. 0 or -ENOMEM (the old value is kept). An entry that holds a
 * value, even an empty one, always has an allocation: a NULL val means
 * the entry was created for this request and never held one. */
static int entry_store(struct entry *e, const uint8_t *data, uint32_t len)
{
	if (!e->val || len > e->vcap || (e->vcap > 4096 && len < e->vcap / 4)) {
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

static void entry_set_owner(struct entry *e, struct crun__store_client *owner)
{
	if (e->owner == owner)
		return;
	if (e->owner)
		crun__list_del(&e->owned);
	e->owner = owner;
	if (owner)
		crun__list_add_tail(&owner->owned, &e->owned);
}

/* ---- the heap of waiters --------------------------------------------------- */

static bool earlier(const struct waiter *a, const struct waiter *b)
{
	return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void heap_put(struct crun__store *st, size_t i, struct waiter *w)
{
	st->heap[i] = w;
	w->slot = i;
}

static void heap_up(struct crun__store *st, size_t i)
{
	struct waiter *w = st->heap[i];

	while (i > 0 && earlier(w, st->heap[(i - 1) / 2])) {
		heap_put(st, i, st->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_put(st, i, w);
}

static void heap_down(struct crun__store *st, size_t i)
{
	struct waiter *w = st->heap[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= st->nheap)
			break;
		if (c + 1 < st->nheap && earlier(st->heap[c + 1], st->heap[c]))
			c++;
		if (!earlier(st->heap[c], w))
			break;
		heap_put(st, i, st->heap[c]);
		i = c;
	}
	heap_put(st, i, w);
}

static int heap_insert(struct crun__store *st, struct waiter *w)
{
	if (st->nheap == st->heapcap) {
		size_t cap = st->heapcap ? st->heapcap * 2 : HEAP_MIN;
		struct waiter **p = realloc(st->heap, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		st->heap = p;
		st->heapcap = cap;
	}
	st->heap[st->nheap++] = w;
	heap_up(st, st->nheap - 1);
	return 0;
}

static void heap_remove(struct crun__store *st, struct waiter *w)
{
	size_t i = w->slot;
	struct waiter *last = st->heap[--st->nheap];

	if (last == w)
		return;
	heap_put(st, i, last);
	if (i > 0 && earlier(last, st->heap[(i - 1) / 2]))
		heap_up(st, i);
	else
		heap_down(st, i);
}

/* ---- watches and waiters --------------------------------------------------- */

static void notify(struct crun__store *st, struct crun__store_run *r, const uint8_t *key,
		   uint32_t klen, int64_t event, const uint8_t *val, uint32_t vlen)
{
	struct crun__wire_item items[2] = {item(key, klen), item(val, vlen)};

	for (struct crun__list *l = r->watches.next; l != &r->watches; l = l->next) {
		struct watch *w = crun__container_of(l, struct watch, run_link);

		if (w->klen != klen || memcmp(w->key, key, klen))
			continue;
		if (emit(st, w->client, CRUN_WIRE_NOTIFY, w->id, event, items, 2) == -ENOBUFS)
			st->ops->drop(st->ctx, w->client,
				      "a watched value is too large for its buffer");
	}
}

/* Takes w out of the list of the key it waits for. */
static void waiter_unindex(struct crun__store_run *r, struct waiter *w)
{
	struct awaited *a = w->awaited;

	if (!a)
		return;
	crun__list_del(&w->key_link);
	w->awaited = NULL;
	if (crun__list_empty(&a->waiters)) {
		crun__htable_remove(&r->awaited, &a->hn);
		free(a);
	}
}

static void waiter_remove(struct crun__store *st, struct waiter *w)
{
	waiter_unindex(w->client->run, w);
	crun__list_del(&w->run_link);
	crun__list_del(&w->client_link);
	heap_remove(st, w);
	w->client->nsubs--;
	w->client->sub_bytes -= w->bytes;
	free(w);
}

/* Answers a GET, MGET or WAIT whose keys all exist. */
static void answer_read(struct crun__store *st, struct crun__store_client *c, uint8_t type,
			uint32_t id, const struct crun__wire_item *keys, uint32_t count)
{
	struct crun__wire_item stack[MGET_STACK] = {{NULL, 0}}, *vals = stack;
	struct crun__store_run *r = c->run;
	struct entry *e;

	switch (type) {
	case CRUN_WIRE_GET:
		e = entry_find(r, &keys[0], hash_item(st, &keys[0]));
		reply_value_num(st, c, id, 0, e->val, e->vlen);
		break;
	case CRUN_WIRE_MGET:
		if (count > MGET_STACK) {
			vals = malloc(count * sizeof(*vals));
			if (!vals) {
				reply_oom(st, c, id);
				return;
			}
		}
		for (uint32_t i = 0; i < count; i++) {
			e = entry_find(r, &keys[i], hash_item(st, &keys[i]));
			vals[i] = item(e->val, e->vlen);
		}
		if (emit(st, c, CRUN_WIRE_VALUES, id, 0, vals, count) == -ENOBUFS)
			reply_too_big(st, c, id);
		if (vals != stack)
			free(vals);
		break;
	default:
		emit(st, c, CRUN_WIRE_OK, id, 0, NULL, 0);
		break;
	}
}

/* Whether key is there for a request of this type: a key, or for CHECK
 * and WAIT also a (non-empty) queue. */
static bool present(const struct crun__store *st, const struct crun__store_run *r,
		    const struct crun__wire_item *key, uint8_t type)
{
	uint32_t h = hash_item(st, key);

	if (entry_find(r, key, h))
		return true;
	return (type == CRUN_WIRE_CHECK || type == CRUN_WIRE_WAIT) && r->queues.count &&
	       queue_find(r, key, h);
}

/* Index of the first key that is not there for a request of this type,
 * or count when all are. */
static uint32_t first_missing(const struct crun__store *st, const struct crun__store_run *r,
			      const struct crun__wire_item *keys, uint32_t count, uint8_t type)
{
	for (uint32_t i = 0; i < count; i++)
		if (!present(st, r, &keys[i], type))
			return i;
	return count;
}

/* Puts w in the list of its key keys[i], which is missing. 0 or -ENOMEM. */
static int waiter_index(struct crun__store *st, struct crun__store_run *r, struct waiter *w,
			uint32_t i)
{
	const struct crun__wire_item *k = &w->keys[i];
	uint32_t h = hash_item(st, k);
	struct crun__hnode *n = crun__htable_find(&r->awaited, k->data, k->len, h);
	struct awaited *a = (struct awaited *)n;

	if (!a) {
		a = malloc(sizeof(*a) + k->len);
		if (!a)
			return -ENOMEM;
		memcpy(a->key, k->data, k->len);
		a->hn.key = a->key;
		a->hn.klen = k->len;
		a->hn.hash = h;
		crun__list_init(&a->waiters);
		if (crun__htable_insert(&r->awaited, &a->hn) < 0) {
			free(a);
			return -ENOMEM;
		}
	}
	crun__list_add_tail(&a->waiters, &w->key_link);
	w->awaited = a;
	return 0;
}

/* The waiters that missed key, which now exists: those that have all their
 * keys are answered, the others wait in the list of their next missing
 * key. */
static void wake_waiters(struct crun__store *st, struct crun__store_run *r, const uint8_t *key,
			 uint32_t klen)
{
	uint32_t h = crun__hash_bytes(st->seed, key, klen);
	struct awaited *a = (struct awaited *)crun__htable_find(&r->awaited, key, klen, h);
	struct crun__list woken;

	if (!a)
		return;
	/* Off the table first: the walk re-indexes waiters under other keys. */
	crun__list_init(&woken);
	while (!crun__list_empty(&a->waiters)) {
		struct crun__list *l = a->waiters.next;

		crun__list_del(l);
		crun__list_add_tail(&woken, l);
		crun__container_of(l, struct waiter, key_link)->awaited = NULL;
	}
	crun__htable_remove(&r->awaited, &a->hn);
	free(a);
	while (!crun__list_empty(&woken)) {
		struct waiter *w = crun__container_of(woken.next, struct waiter, key_link);
		uint32_t i = first_missing(st, r, w->keys, w->count, w->type);

		crun__list_del(&w->key_link);
		if (i < w->count && waiter_index(st, r, w, i) == 0)
			continue;
		if (i < w->count)
			reply_oom(st, w->client, w->id);
		else
			answer_read(st, w->client, w->type, w->id, w->keys, w->count);
		waiter_remove(st, w);
	}
}

/* After a push to the queue key: answers the first WAIT in key's list
 * that now has all its keys, if any; WAITs on the way that miss another
 * key move to that key's list; GET and MGET wait on for a key. */
static void wake_one(struct crun__store *st, struct crun__store_run *r,
		     const struct crun__wire_item *key)
{
	struct awaited *a = (struct awaited *)crun__htable_find(&r->awaited, key->data, key->len,
								hash_item(st, key));
	struct crun__list *l, *next;

	if (!a)
		return;
	for (l = a->waiters.next; l != &a->waiters; l = next) {
		struct waiter *w = crun__container_of(l, struct waiter, key_link);
		uint32_t i;

		next = l->next;
		if (w->type != CRUN_WIRE_WAIT)
			continue;
		i = first_missing(st, r, w->keys, w->count, w->type);
		if (i == w->count) {
			answer_read(st, w->client, w->type, w->id, w->keys, w->count);
			waiter_remove(st, w); /* may free a: stop here */
			return;
		}
		crun__list_del(&w->key_link);
		w->awaited = NULL;
		if (waiter_index(st, r, w, i) < 0) {
			reply_oom(st, w->client, w->id);
			waiter_remove(st, w);
		}
	}
	if (crun__list_empty(&a->waiters)) {
		crun__htable_remove(&r->awaited, &a->hn);
		free(a);
	}
}

/* After e's value changed: tell its watchers, wake its waiters. */
static void changed(struct crun__store *st, struct crun__store_run *r, struct entry *e)
{
	if (!crun__list_empty(&r->watches))
		notify(st, r, e->key, e->hn.klen, CRUN_WIRE_EV_SET, e->val, e->vlen);
	if (!crun__list_empty(&r->waiters))
		wake_waiters(st, r, e->key, e->hn.klen);
}

/* Removes e from r and tells its watchers. */
static void entry_delete(struct crun__store *st, struct crun__store_run *r, struct entry *e)
{
	crun__htable_remove(&r->keys, &e->hn);
	entry_set_owner(e, NULL);
	if (!crun__list_empty(&r->watches))
		notify(st, r, e->key, e->hn.klen, CRUN_WIRE_EV_DELETE, NULL, 0);
	entry_free(e);
}

/* After a failed store into e: a key that never held a value goes. */
static void store_failed(struct crun__store *st, struct crun__store_client *c, uint32_t id,
			 struct entry *e)
{
	reply_oom(st, c, id);
	if (!e->val)
		entry_delete(st, c->run, e);
}

/* A client may hold CRUN__STORE_MAX_SUBS waits and watches, with at most
 * max_sub_bytes bytes of keys, so that no client makes the store keep more
 * for it than its buffers may; refuses the request when bytes more would
 * not fit. */
static bool sub_room(struct crun__store *st, struct crun__store_client *c, uint32_t id,
		     uint64_t bytes)
{
	uint64_t max = st->limits.max_sub_bytes;

	if (c->nsubs >= CRUN__STORE_MAX_SUBS) {
		crun__store_refuse(st, c, id, ENOSPC,
				   "too many waits and watches on one connection (%d)",
				   CRUN__STORE_MAX_SUBS);
		return false;
	}
	if (c->sub_bytes + bytes <= max)
		return true;
	crun__store_refuse(st, c, id, ENOBUFS,
			   "waits and watches on one connection would hold more than %" PRIu64
			   " bytes of keys",
			   max);
	return false;
}

/* Registers a waiting GET/MGET/WAIT; keys are copied. */
static void add_waiter(struct crun__store *st, struct crun__store_client *c,
		       const struct crun__wire_msg *m, uint64_t now)
{
	size_t bytes = 0;
	struct waiter *w;
	uint8_t *p;

	for (uint32_t i = 0; i < m->count; i++)
		bytes += m->items[i].len;
	if (!sub_room(st, c, m->id, bytes))
		return;
	w = malloc(sizeof(*w) + m->count * sizeof(struct crun__wire_item) + bytes);
	if (!w) {
		reply_oom(st, c, m->id);
		return;
	}
	w->keys = (struct crun__wire_item *)(w + 1);
	p = (uint8_t *)(w->keys + m->count);
	for (uint32_t i = 0; i < m->count; i++) {
		memcpy(p, m->items[i].data, m->items[i].len);
		w->keys[i] = item(p, m->items[i].len);
		p += m->items[i].len;
	}
	w->client = c;
	w->id = m->id;
	w->type = m->type;
	w->count = m->count;
	w->bytes = bytes;
	/* UINT64_MAX means "nothing waits": a deadline stops short of it. */
	w->deadline =
		(uint64_t)m->num < UINT64_MAX - 1 - now ? now + (uint64_t)m->num : UINT64_MAX - 1;
	w->seq = st->next_seq++;
	w->awaited = NULL;
	if (heap_insert(st, w) < 0) {
		free(w);
		reply_oom(st, c, m->id);
		return;
	}
	if (waiter_index(st, c->run, w, first_missing(st, c->run, w->keys, w->count, w->type)) <
	    0) {
		heap_remove(st, w);
		free(w);
		reply_oom(st, c, m->id);
		return;
	}
	crun__list_add_tail(&c->run->waiters, &w->run_link);
	crun__list_add_tail(&c->waiters, &w->client_link);
	c->nsubs++;
	c->sub_bytes += bytes;
}

uint64_t crun__store_next_deadline(const struct crun__store *st)
{
	return st->nheap ? st->heap[0]->deadline : UINT64_MAX;
}

void crun__store_expire(struct crun__store *st, uint64_t now)
{
	while (st->nheap && st->heap[0]->deadline <= now) {
		struct waiter *w = st->heap[0];
		struct crun__store_client *c = w->client;
		uint32_t i = first_missing(st, c->run, w->keys, w->count, w->type);
		char k[300];

		if (i == w->count)
			i = 0;
		crun__store_reply_error(st, c, w->id, ETIMEDOUT, "timed out waiting for key '%s'",
					show_item(k, sizeof(k), &w->keys[i]));
		waiter_remove(st, w);
	}
}

/* ---- requests ---------------------------------------------------------- */

static bool check_key(struct crun__store *st, struct crun__store_client *c, uint32_t id,
		      const struct crun__wire_item *key)
{
	uint32_t max = st->limits.max_key_size;

	if (key->len <= max)
		return true;
	crun__store_refuse(st, c, id, E2BIG, "key of %u bytes exceeds the limit of %u bytes",
			   key->len, max);
	return false;
}

static bool check_value(struct crun__store *st, struct crun__store_client *c, uint32_t id,
			uint64_t len)
{
	uint32_t max = st->limits.max_value_size;

	if (len <= max)
		return true;
	crun__store_refuse(st, c, id, E2BIG,
			   "value of %" PRIu64 " bytes exceeds the limit of %u bytes", len, max);
	return false;
}

static bool check_room(struct crun__store *st, struct crun__store_client *c, uint32_t id,
		       uint64_t new_keys)
{
	uint64_t max = st->limits.max_keys_per_run;
	char r[300];

	if (c->run->keys.count + c->run->nqueued + new_keys <= max)
		return true;
	crun__store_refuse(
		st, c, id, ENOSPC, "run '%s' holds the limit of %" PRIu64 " keys%s",
		crun__store_show(r, sizeof(r), (const uint8_t *)c->run->id, c->run->hn.klen), max,
		c->run->nqueued ? " and queued values" : "");
	return false;
}

/* Finds key in c's run or creates it (limits checked); NULL after an
 * error reply. */
static struct entry *get_or_create(struct crun__store *st, struct crun__store_client *c,
				   uint32_t id, const struct crun__wire_item *key, uint32_t hash)
{
	struct entry *e = entry_find(c->run, key, hash);

	if (e)
		return e;
	if (!check_room(st, c, id, 1))
		return NULL;
	e = entry_create(c->run, key, hash);
	if (!e)
		reply_oom(st, c, id);
	return e;
}

/* True when the request's keys are within the key size limit (all keys
 * of CHECK/WAIT/MGET, the even items of MSET, else item 0). */
static bool check_keys(struct crun__store *st, struct crun__store_client *c,
		       const struct crun__wire_msg *m)
{
	switch (m->type) {
	case CRUN_WIRE_CHECK:
	case CRUN_WIRE_WAIT:
	case CRUN_WIRE_MGET:
		for (uint32_t i = 0; i < m->count; i++)
			if (!check_key(st, c, m->id, &m->items[i]))
				return false;
		return true;
	case CRUN_WIRE_COUNT:
	case CRUN_WIRE_LIST:
	case CRUN_WIRE_PING:
	case CRUN_WIRE_MSET: /* checked with the values */
		return true;
	default:
		return check_key(st, c, m->id, &m->items[0]);
	}
}

static void op_set(struct crun__store *st, struct crun__store_client *c,
		   const struct crun__wire_msg *m)
{
	const struct crun__wire_item *key = &m->items[0], *val = &m->items[1];
	struct entry *e;

	if (!check_value(st, c, m->id, val->len))
		return;
	e = get_or_create(st, c, m->id, key, hash_item(st, key));
	if (!e)
		return;
	if (entry_store(e, val->data, val->len) < 0) {
		store_failed(st, c, m->id, e);
		return;
	}
	entry_set_owner(e, (m->flags & CRUN_WIRE_FL_EPHEMERAL) ? c : NULL);
	emit(st, c, CRUN_WIRE_OK, m->id, 0, NULL, 0);
	changed(st, c->run, e);
}

/* GET, MGET and WAIT: answer now, fail, or wait. */
static void op_read(struct crun__store *st, struct crun__store_client *c,
		    const struct crun__wire_msg *m, uint64_t now)
{
	uint32_t miss = first_missing(st, c->run, m->items, m->count, m->type);
	char k[300];

	if (miss == m->count) {
		answer_read(st, c, m->type, m->id, m->items, m->count);
		return;
	}
	if (m->num > 0) {
		add_waiter(st, c, m, now);
		return;
	}
	crun__store_reply_error(st, c, m->id, ENOENT, "key '%s' not found",
				show_item(k, sizeof(k), &m->items[miss]));
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

static void op_add(struct crun__store *st, struct crun__store_client *c,
		   const struct crun__wire_msg *m)
{
	const struct crun__wire_item *key = &m->items[0];
	uint32_t h = hash_item(st, key);
	struct entry *e = entry_find(c->run, key, h);
	int64_t old = 0, now;
	char num[24], k[300];
	int n;

	if (e) {
		int rc = parse_i64(e->val, e->vlen, &old);

		if (rc == -EINVAL) {
			crun__store_reply_error(st, c, m->id, EINVAL,
						"value of '%s' is not a decimal integer",
						show_item(k, sizeof(k), key));
			return;
		}
		if (rc < 0) {
			crun__store_reply_error(st, c, m->id, ERANGE,
						"value of '%s' is out of the int64 range",
						show_item(k, sizeof(k), key));
			return;
		}
	}
	if (__builtin_add_overflow(old, m->num, &now)) {
		crun__store_reply_error(st, c, m->id, ERANGE,
					"adding %" PRId64 " to %" PRId64 " overflows int64", m->num,
					old);
		return;
	}
	n = snprintf(num, sizeof(num), "%" PRId64, now);
	if (!check_value(st, c, m->id, (uint64_t)n))
		return;
	if (!e)
		e = get_or_create(st, c, m->id, key, h);
	if (!e)
		return;
	if (entry_store(e, (const uint8_t *)num, (uint32_t)n) < 0) {
		store_failed(st, c, m->id, e);
		return;
	}
	emit(st, c, CRUN_WIRE_INT, m->id, now, NULL, 0);
	changed(st, c->run, e);
}

/* compareSet as torch's TCPStore: a missing key is created when expected
 * is empty, else the reply is expected; a present key is swapped when it
 * equals expected; the reply is the value now stored. EXPECT_ABSENT swaps
 * only a missing key. */
static void op_cas(struct crun__store *st, struct crun__store_client *c,
		   const struct crun__wire_msg *m)
{
	const struct crun__wire_item *key = &m->items[0], *expected = &m->items[1],
				     *desired = &m->items[2];
	uint32_t h = hash_item(st, key);
	struct entry *e = entry_find(c->run, key, h);
	bool absent_only = m->flags & CRUN_WIRE_FL_EXPECT_ABSENT;

	if (!check_value(st, c, m->id, desired->len))
		return;
	if (e) {
		if (absent_only || !item_eq(expected, e->val, e->vlen)) {
			reply_value_num(st, c, m->id, 0, e->val, e->vlen);
			return;
		}
	} else if (!absent_only && expected->len) {
		reply_value_num(st, c, m->id, 0, expected->data, expected->len);
		return;
	} else {
		e = get_or_create(st, c, m->id, key, h);
		if (!e)
			return;
	}
	if (entry_store(e, desired->data, desired->len) < 0) {
		store_failed(st, c, m->id, e);
		return;
	}
	/* num = 1: the swap happened (the value alone cannot say so). */
	reply_value_num(st, c, m->id, 1, e->val, e->vlen);
	changed(st, c->run, e);
}

static void op_delete(struct crun__store *st, struct crun__store_client *c,
		      const struct crun__wire_msg *m)
{
	struct entry *e = entry_find(c->run, &m->items[0], hash_item(st, &m->items[0]));

	emit(st, c, CRUN_WIRE_INT, m->id, e != NULL, NULL, 0);
	if (e)
		entry_delete(st, c->run, e);
}

static void op_append(struct crun__store *st, struct crun__store_client *c,
		      const struct crun__wire_msg *m)
{
	const struct crun__wire_item *key = &m->items[0], *val = &m->items[1];
	uint32_t h = hash_item(st, key);
	struct entry *e = entry_find(c->run, key, h);
	uint64_t len = (e ? e->vlen : 0) + (uint64_t)val->len;

	if (!check_value(st, c, m->id, len))
		return;
	if (!e)
		e = get_or_create(st, c, m->id, key, h);
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
		if (cap > st->limits.max_value_size)
			cap = len;
		p = realloc(e->val, cap);
		if (!p) {
			store_failed(st, c, m->id, e);
			return;
		}
		e->val = p;
		e->vcap = (uint32_t)cap;
	}
	if (val->len)
		memcpy(e->val + e->vlen, val->data, val->len);
	e->vlen = (uint32_t)len;
	emit(st, c, CRUN_WIRE_OK, m->id, 0, NULL, 0);
	changed(st, c->run, e);
}

static void op_mset(struct crun__store *st, struct crun__store_client *c,
		    const struct crun__wire_msg *m)
{
	uint64_t new_keys = 0;

	/* All or nothing: every limit is checked before the first store. */
	for (uint32_t i = 0; i < m->count; i += 2) {
		if (!check_key(st, c, m->id, &m->items[i]) ||
		    !check_value(st, c, m->id, m->items[i + 1].len))
			return;
		if (!entry_find(c->run, &m->items[i], hash_item(st, &m->items[i])))
			new_keys++;
	}
	if (new_keys && !check_room(st, c, m->id, new_keys))
		return;
	for (uint32_t i = 0; i < m->count; i += 2) {
		const struct crun__wire_item *key = &m->items[i], *val = &m->items[i + 1];
		uint32_t h = hash_item(st, key);
		struct entry *e = entry_find(c->run, key, h);

		if (!e)
			e = entry_create(c->run, key, h);
		if (!e || entry_store(e, val->data, val->len) < 0) {
			crun__store_reply_error(st, c, m->id, ENOMEM,
						"out of memory after %u of %u keys", i / 2,
						m->count / 2);
			if (e && !e->val)
				entry_delete(st, c->run, e);
			return;
		}
		entry_set_owner(e, NULL);
		changed(st, c->run, e);
	}
	emit(st, c, CRUN_WIRE_OK, m->id, 0, NULL, 0);
}

static int cmp_keys(const void *a, const void *b)
{
	const struct crun__wire_item *x = a, *y = b;
	uint32_t n = x->len < y->len ? x->len : y->len;
	int d = memcmp(x->data, y->data, n);

	if (d)
		return d;
	return (x->len > y->len) - (x->len < y->len);
}

/* Max-heap of keys (cmp_keys order): h[0] is the largest of n. */
static void heap_sift_down(struct crun__wire_item *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct crun__wire_item t;

		if (l < n && cmp_keys(&h[l], &h[m]) > 0)
			m = l;
		if (r < n && cmp_keys(&h[r], &h[m]) > 0)
			m = r;
		if (m == i)
			return;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static void heap_push(struct crun__wire_item *h, size_t n, struct crun__wire_item it)
{
	size_t i = n;

	h[i] = it;
	while (i > 0 && cmp_keys(&h[(i - 1) / 2], &h[i]) < 0) {
		struct crun__wire_item t = h[i];

		h[i] = h[(i - 1) / 2];
		h[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
}

/* LIST, plain (num 0: every key in one reply) or paged (wire.h). A page
 * keeps the smallest keys above after in a max-heap of the page's size, so
 * a page costs one pass over the run, not a sort of it. */
static void op_list(struct crun__store *st, struct crun__store_client *c,
		    const struct crun__wire_msg *m)
{
	const struct crun__htable *t = &c->run->keys;
	const struct crun__wire_item *after = m->count && m->items[0].len ? &m->items[0] : NULL;
	bool paged = m->num > 0;
	size_t limit = paged && (uint64_t)m->num < CRUN_WIRE_MAX_ITEMS ? (size_t)m->num
								       : CRUN_WIRE_MAX_ITEMS;
	struct crun__wire_item *keys;
	struct crun__hnode *h;
	size_t n = 0, above = 0, k, bytes = 0, b;

	if (!paged && t->count > CRUN_WIRE_MAX_ITEMS) {
		crun__store_reply_error(st, c, m->id, ENOBUFS,
					"run holds %zu keys, more than one reply can list (%d); "
					"list them in pages",
					t->count, CRUN_WIRE_MAX_ITEMS);
		return;
	}
	if (!paged)
		limit = t->count;
	keys = malloc((limit ? limit : 1) * sizeof(*keys));
	if (!keys) {
		reply_oom(st, c, m->id);
		return;
	}
	for (h = crun__htable_first(t, &b); h; h = crun__htable_next(t, h, &b)) {
		struct crun__wire_item it = item(h->key, h->klen);

		if (after && cmp_keys(&it, after) <= 0)
			continue;
		above++;
		if (n < limit) {
			heap_push(keys, n++, it);
		} else if (n && cmp_keys(&it, &keys[0]) < 0) {
			keys[0] = it;
			heap_sift_down(keys, n, 0);
		}
	}
	qsort(keys, n, sizeof(*keys), cmp_keys);
	k = n;
	if (paged) {
		for (k = 0; k < n; k++) {
			bytes += 4 + (size_t)keys[k].len;
			if (k > 0 && bytes > CRUN_WIRE_LIST_PAGE_BYTES)
				break;
		}
	}
	if (emit(st, c, CRUN_WIRE_VALUES, m->id, k < above, keys, (uint32_t)k) == -ENOBUFS)
		reply_too_big(st, c, m->id);
	free(keys);
}

static void op_watch(struct crun__store *st, struct crun__store_client *c,
		     const struct crun__wire_msg *m)
{
	const struct crun__wire_item *key = &m->items[0];
	struct watch *w;

	if (!sub_room(st, c, m->id, key->len))
		return;
	w = malloc(sizeof(*w) + key->len);
	if (!w) {
		reply_oom(st, c, m->id);
		return;
	}
	w->client = c;
	w->id = m->id;
	w->klen = key->len;
	memcpy(w->key, key->data, key->len);
	crun__list_add_tail(&c->run->watches, &w->run_link);
	crun__list_add_tail(&c->watches, &w->client_link);
	c->nsubs++;
	c->sub_bytes += key->len;
	emit(st, c, CRUN_WIRE_OK, m->id, 0, NULL, 0);
}

static void watch_free(struct watch *w)
{
	crun__list_del(&w->run_link);
	crun__list_del(&w->client_link);
	w->client->nsubs--;
	w->client->sub_bytes -= w->klen;
	free(w);
}

static void op_unwatch(struct crun__store *st, struct crun__store_client *c,
		       const struct crun__wire_msg *m)
{
	struct crun__list *l, *next;

	for (l = c->watches.next; l != &c->watches; l = next) {
		struct watch *w = crun__container_of(l, struct watch, client_link);

		next = l->next;
		if (item_eq(&m->items[0], w->key, w->klen))
			watch_free(w);
	}
	emit(st, c, CRUN_WIRE_OK, m->id, 0, NULL, 0);
}

static void op_queue_push(struct crun__store *st, struct crun__store_client *c,
			  const struct crun__wire_msg *m)
{
	const struct crun__wire_item *key = &m->items[0], *val = &m->items[1];
	struct crun__store_run *r = c->run;
	uint32_t h = hash_item(st, key);
	struct queue *q = queue_find(r, key, h);
	struct qval *v;

	if (!check_value(st, c, m->id, val->len) || !check_room(st, c, m->id, 1))
		return;
	v = malloc(sizeof(*v) + val->len);
	if (!v) {
		reply_oom(st, c, m->id);
		return;
	}
	v->next = NULL;
	v->len = val->len;
	if (val->len)
		memcpy(v->data, val->data, val->len);
	if (!q) {
		q = calloc(1, sizeof(*q) + key->len);
		if (!q) {
			free(v);
			reply_oom(st, c, m->id);
			return;
		}
		memcpy(q->key, key->data, key->len);
		q->hn.key = q->key;
		q->hn.klen = key->len;
		q->hn.hash = h;
		q->tail = &q->head;
		if (crun__htable_insert(&r->queues, &q->hn) < 0) {
			free(q);
			free(v);
			reply_oom(st, c, m->id);
			return;
		}
	}
	*q->tail = v;
	q->tail = &v->next;
	q->len++;
	r->nqueued++;
	emit(st, c, CRUN_WIRE_OK, m->id, 0, NULL, 0);
	if (!crun__list_empty(&r->waiters))
		wake_one(st, r, key);
}

static void op_queue_pop(struct crun__store *st, struct crun__store_client *c,
			 const struct crun__wire_msg *m)
{
	struct crun__store_run *r = c->run;
	struct queue *q = queue_find(r, &m->items[0], hash_item(st, &m->items[0]));
	struct crun__wire_item it;
	struct qval *v;

	if (!q) {
		emit(st, c, CRUN_WIRE_INT, m->id, 0, NULL, 0);
		return;
	}
	v = q->head;
	it = item(v->data, v->len);
	/* A value too large to send stays queued. */
	if (emit(st, c, CRUN_WIRE_VALUE, m->id, (int64_t)q->len, &it, 1) == -ENOBUFS) {
		reply_too_big(st, c, m->id);
		return;
	}
	q->head = v->next;
	free(v);
	r->nqueued--;
	if (--q->len == 0) {
		crun__htable_remove(&r->queues, &q->hn);
		free(q);
	}
}

static void op_queue_len(struct crun__store *st, struct crun__store_client *c,
			 const struct crun__wire_msg *m)
{
	struct queue *q = queue_find(c->run, &m->items[0], hash_item(st, &m->items[0]));

	emit(st, c, CRUN_WIRE_INT, m->id, q ? (int64_t)q->len : 0, NULL, 0);
}

static bool is_store_request(uint8_t type)
{
	return (type >= CRUN_WIRE_SET && type <= CRUN_WIRE_UNWATCH) ||
	       (type >= CRUN_WIRE_QUEUE_PUSH && type <= CRUN_WIRE_QUEUE_LEN);
}

int crun__store_apply(struct crun__store *st, struct crun__store_client *c,
		      const struct crun__wire_msg *m, uint64_t now)
{
	if (!is_store_request(m->type))
		return -EINVAL;
	if (!check_keys(st, c, m))
		return 0;
	switch (m->type) {
	case CRUN_WIRE_SET:
		op_set(st, c, m);
		break;
	case CRUN_WIRE_GET:
	case CRUN_WIRE_MGET:
	case CRUN_WIRE_WAIT:
		op_read(st, c, m, now);
		break;
	case CRUN_WIRE_CHECK:
		emit(st, c, CRUN_WIRE_INT, m->id,
		     first_missing(st, c->run, m->items, m->count, m->type) == m->count, NULL, 0);
		break;
	case CRUN_WIRE_ADD:
		op_add(st, c, m);
		break;
	case CRUN_WIRE_CAS:
		op_cas(st, c, m);
		break;
	case CRUN_WIRE_DELETE:
		op_delete(st, c, m);
		break;
	case CRUN_WIRE_APPEND:
		op_append(st, c, m);
		break;
	case CRUN_WIRE_COUNT:
		emit(st, c, CRUN_WIRE_INT, m->id, (int64_t)c->run->keys.count, NULL, 0);
		break;
	case CRUN_WIRE_MSET:
		op_mset(st, c, m);
		break;
	case CRUN_WIRE_LIST:
		op_list(st, c, m);
		break;
	case CRUN_WIRE_PING:
		if (m->count)
			reply_value_num(st, c, m->id, 0, m->items[0].data, m->items[0].len);
		else
			reply_value_num(st, c, m->id, 0, NULL, 0);
		break;
	case CRUN_WIRE_WATCH:
		op_watch(st, c, m);
		break;
	case CRUN_WIRE_UNWATCH:
		op_unwatch(st, c, m);
		break;
	case CRUN_WIRE_QUEUE_PUSH:
		op_queue_push(st, c, m);
		break;
	case CRUN_WIRE_QUEUE_POP:
		op_queue_pop(st, c, m);
		break;
	case CRUN_WIRE_QUEUE_LEN:
		op_queue_len(st, c, m);
		break;
	}
	return 0;
}

/* ---- clients and the store ------------------------------------------------ */

void crun__store_client_init(struct crun__store_client *c, const char *name)
{
	memset(c, 0, sizeof(*c));
	c->name = name;
	crun__list_init(&c->owned);
	crun__list_init(&c->waiters);
	crun__list_init(&c->watches);
}

int crun__store_join(struct crun__store *st, struct crun__store_client *c, const uint8_t *run_id,
		     uint32_t len)
{
	c->run = run_acquire(st, run_id, len);
	return c->run ? 0 : -ENOMEM;
}

void crun__store_detach(struct crun__store *st, struct crun__store_client *c)
{
	while (!crun__list_empty(&c->waiters))
		waiter_remove(st, crun__container_of(c->waiters.next, struct waiter, client_link));
	while (!crun__list_empty(&c->watches))
		watch_free(crun__container_of(c->watches.next, struct watch, client_link));
	while (!crun__list_empty(&c->owned))
		entry_delete(st, c->run, crun__container_of(c->owned.next, struct entry, owned));
}

void crun__store_leave(struct crun__store *st, struct crun__store_client *c)
{
	crun__store_detach(st, c);
	if (!c->run)
		return;
	c->run->nclients--;
	run_maybe_free(st, c->run);
	c->run = NULL;
}

uint64_t crun__store_clear_run(struct crun__store *st, const uint8_t *run_id, uint32_t len)
{
	uint32_t h = crun__hash_bytes(st->seed, run_id, len);
	struct crun__hnode *n = crun__htable_find(&st->runs, run_id, len, h);
	struct crun__store_run *r;
	struct entry **all;
	uint64_t count = 0;
	size_t b;

	if (!n)
		return 0;
	r = (struct crun__store_run *)n;
	/* The table forbids removal during a walk: walk first, or, short of
	 * memory for that, take the first key until none is left. */
	all = r->keys.count ? malloc(r->keys.count * sizeof(*all)) : NULL;
	if (all) {
		for (n = crun__htable_first(&r->keys, &b); n;
		     n = crun__htable_next(&r->keys, n, &b))
			all[count++] = (struct entry *)n;
		for (uint64_t i = 0; i < count; i++)
			entry_delete(st, r, all[i]);
		free(all);
	}
	while ((n = crun__htable_first(&r->keys, &b))) {
		entry_delete(st, r, (struct entry *)n);
		count++;
	}
	count += drop_queues(r);
	run_maybe_free(st, r);
	return count;
}

const char *crun__store_run_id(const struct crun__store_client *c, uint32_t *len)
{
	if (len)
		*len = c->run ? c->run->hn.klen : 0;
	return c->run ? c->run->id : NULL;
}

void **crun__store_run_data(struct crun__store_client *c)
{
	return c->run ? &c->run->data : NULL;
}

uint64_t crun__store_run_keys(const struct crun__store_client *c)
{
	return c->run ? c->run->keys.count : 0;
}

struct crun__store *crun__store_create(const struct crun__store_limits *limits, uint32_t seed,
				       const struct crun__store_ops *ops, void *ctx)
{
	struct crun__store *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->limits = *limits;
	st->seed = seed;
	st->ops = ops;
	st->ctx = ctx;
	crun__htable_init(&st->runs);
	return st;
}

/* Frees a run with its waits and watches, which stay linked to their
 * clients: the store is going, and so are they. */
static void run_node_free(struct crun__hnode *n, void *st)
{
	struct crun__store_run *r = (struct crun__store_run *)n;

	while (!crun__list_empty(&r->waiters)) {
		struct waiter *w = crun__container_of(r->waiters.next, struct waiter, run_link);

		crun__list_del(&w->run_link);
		free(w);
	}
	while (!crun__list_empty(&r->watches)) {
		struct watch *w = crun__container_of(r->watches.next, struct watch, run_link);

		crun__list_del(&w->run_link);
		free(w);
	}
	run_free(st, r);
}

void crun__store_destroy(struct crun__store *st)
{
	if (!st)
		return;
	crun__htable_clear(&st->runs, run_node_free, st);
	free(st->heap);
	free(st);
}

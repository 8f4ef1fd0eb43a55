/* The store's semantics with no I/O: runs, keys, values, waiters, watches
 * and limits, for the requests of wire.h (SET .. UNWATCH; the rendezvous
 * requests go to store_rdzv.h).
 *
 * The store never sees a socket, a clock or an event loop. An edge (the
 * libuv server in server.c, or a unit test) tells it about clients
 * (crun__store_join, crun__store_leave), hands it decoded and validated
 * requests (crun__store_apply) with the current time, and asks it to
 * expire waits whose deadline passed (crun__store_expire). The store
 * answers through the edge's ops, synchronously, from inside those calls:
 * a frame for a client (a reply, a NOTIFY, a waiter's answer, in the order
 * the client must receive them) or a notice that a client must be dropped.
 *
 * Keys: an ephemeral key (SET with CRUN_WIRE_FL_EPHEMERAL) belongs to the
 * client that set it last; a later plain SET or MSET of the key by anyone
 * makes it an ordinary key again. When the owner leaves, its keys are
 * deleted and watchers get a delete NOTIFY. A run is freed once it has no
 * keys, no queued values and no clients.
 *
 * Queues (the requests QUEUE_PUSH, QUEUE_POP and QUEUE_LEN, which only
 * the TCPStore edge sends, tcpstore.h): per run, a map of FIFO queues of
 * values apart from the keys, as PyTorch's TCPStore has them. GET, MGET,
 * COUNT, LIST, DELETE and WATCH see keys only; CHECK and WAIT count a
 * non-empty queue as a present key. A queue exists while it holds a
 * value. PUSH [key, value] appends and answers OK, then wakes one WAIT
 * on key whose keys are all present now (of WAITs on key alone, the one
 * that began first): one per value pushed, so that of several clients
 * blocked on one queue only one pops each value. POP [key] answers INT 0 when the queue is empty,
 * else VALUE [the first value] with num = the queue's length before the pop (what TCPStore sends);
 * LEN [key] answers INT the length. A run holds at most max_keys_per_run keys and queued values
 * together; a queued value is at most max_value_size bytes.
 *
 * Everything runs on one thread; nothing is locked. */
#ifndef CRUN_RENDEZVOUS_STORE_H
#define CRUN_RENDEZVOUS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/list.h"
#include "rendezvous/wire.h"

/* Waits plus watches one client may hold. */
#define CRUN__STORE_MAX_SUBS 65536
/* Refusals logged per client; a client that keeps hitting a limit must not
 * flood the log. */
#define CRUN__STORE_REFUSALS_LOGGED 16

struct crun__store;
struct crun__store_run;

struct crun__store_limits {
	uint32_t max_key_size;	 /* bytes (also the run id's cap at HELLO) */
	uint32_t max_value_size; /* bytes */
	uint64_t max_keys_per_run;
	uint64_t max_sub_bytes; /* key bytes one client's waits and watches
				 * may hold */
};

/* One connection as the store sees it. The edge embeds it in its own
 * connection, sets it up with crun__store_client_init, and finds its
 * connection again from the pointer the ops receive (container_of). Every
 * field but name belongs to the store. */
struct crun__store_client {
	const char *name;	     /* for log lines; the edge's, kept as is */
	struct crun__store_run *run; /* NULL until crun__store_join */
	struct crun__list owned;     /* its ephemeral keys */
	struct crun__list waiters;   /* its waiting GET/MGET/WAIT */
	struct crun__list watches;
	uint32_t nsubs;	    /* waiters plus watches */
	uint64_t sub_bytes; /* key bytes they hold */
	uint32_t nrefused;  /* requests refused for a limit */
};

/* What the store asks of its edge. Each runs synchronously inside the
 * store call that produced it and must not call back into the store, close
 * a client or free anything: an edge that must close a client marks it and
 * does so after the call returns. */
struct crun__store_ops {
	/* Queues one frame to client to (items point into the store's or the
	 * request's memory, valid during the call only). It may be called for
	 * a client that drop() marked earlier in the same call: the edge
	 * discards that frame and returns 0. 0 when queued (or discarded); -ENOBUFS when the frame
	 * can never fit (too large for a frame or for to's buffer): the store then answers the
	 * request with an ENOBUFS error instead. */
	int (*send)(void *ctx, struct crun__store_client *to, uint8_t type, uint32_t id,
		    int64_t num, const struct crun__wire_item *items, uint32_t count);
	/* c must lose its connection (a watched value too large for its
	 * buffer); reason is for the log, valid during the call. */
	void (*drop)(void *ctx, struct crun__store_client *c, const char *reason);
	/* A run is being freed and its data slot (crun__store_run_data) held
	 * data, not NULL. May be NULL when the edge never sets a slot. */
	void (*run_freed)(void *ctx, void *data);
};

/* A store with these limits; seed keys the hash of its tables (draw it at
 * random). ops and ctx are kept (ops must outlive the store). NULL when
 * out of memory. */
struct crun__store *crun__store_create(const struct crun__store_limits *limits, uint32_t seed,
				       const struct crun__store_ops *ops, void *ctx);

/* Frees every run, key, wait and watch without sending anything
 * (run_freed still runs for slots that hold data). Clients still joined
 * must not be passed to the store again: their lists still point into
 * the freed store, so the edge discards them (or initialises them anew
 * with crun__store_client_init). NULL is allowed. */
void crun__store_destroy(struct crun__store *st);

/* Sets up c, in no run yet; name is used in log lines (not copied). */
void crun__store_client_init(struct crun__store_client *c, const char *name);

/* Puts c, which is in no run, into the run run_id (len bytes), creating
 * the run. HELLO refuses a run id with a NUL byte, so such an id is the
 * edge's own namespace (tcpstore.h's); crun__store_run_id shows it cut at
 * the NUL. 0 or -ENOMEM. */
int crun__store_join(struct crun__store *st, struct crun__store_client *c, const uint8_t *run_id,
		     uint32_t len);

/* Cancels c's waits (they get no answer) and watches, and deletes its
 * ephemeral keys (their watchers get a delete NOTIFY). c stays in its run.
 * Idempotent; nothing happens for a client in no run. */
void crun__store_detach(struct crun__store *st, struct crun__store_client *c);

/* crun__store_detach, then takes c out of its run, which is freed when it
 * has no keys and no clients left. c may join again afterwards. */
void crun__store_leave(struct crun__store *st, struct crun__store_client *c);

/* Deletes every key of the run run_id (len bytes), as a DELETE of each
 * would (its watchers are told; waiters go on waiting for the keys to come
 * again), and drops its queues; frees the run when no client is in it.
 * Returns the number of keys deleted plus the number of queued values
 * dropped (0 when there is no such run). */
uint64_t crun__store_clear_run(struct crun__store *st, const uint8_t *run_id, uint32_t len);

/* c's run id, NUL-terminated, and its length in *len (may be NULL); NULL
 * for a client in no run. Valid while c is in the run. */
const char *crun__store_run_id(const struct crun__store_client *c, uint32_t *len);

/* A pointer the edge may keep per run (the rendezvous round): NULL until
 * set; handed to ops->run_freed when the run goes. Returns the slot of
 * c's run, or NULL for a client in no run. */
void **crun__store_run_data(struct crun__store_client *c);

/* Number of keys in c's run, queues not counted (0 for a client in no
 * run). */
uint64_t crun__store_run_keys(const struct crun__store_client *c);

/* Applies one request of c, which must be in a run; m must have passed
 * crun__wire_validate. now is the edge's clock in ms, the origin of the
 * request's timeout. Replies, NOTIFYs and woken waiters go out through
 * ops before it returns. 0, or -EINVAL (nothing sent) when m's type is not
 * a key-value request (HELLO, the RDZV_* requests, a reply). */
int crun__store_apply(struct crun__store *st, struct crun__store_client *c,
		      const struct crun__wire_msg *m, uint64_t now);

/* The earliest deadline of a waiting request (ms, the clock of now), or
 * UINT64_MAX when nothing waits. */
uint64_t crun__store_next_deadline(const struct crun__store *st);

/* Answers every waiting request whose deadline is at or before now with
 * ETIMEDOUT, earliest deadline first (then in the order they began to
 * wait). */
void crun__store_expire(struct crun__store *st, uint64_t now);

/* An ERROR reply to request id of c (printf format). */
void crun__store_reply_error(struct crun__store *st, struct crun__store_client *c, uint32_t id,
			     int errnum, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* An ERROR reply to a request refused for a limit or for bad input, also
 * logged (the first CRUN__STORE_REFUSALS_LOGGED times per client). */
void crun__store_refuse(struct crun__store *st, struct crun__store_client *c, uint32_t id,
			int errnum, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Logs m, a request of c, at debug level (one line: type, id, first key,
 * num, number of items). */
void crun__store_log_request(const struct crun__store_client *c, const struct crun__wire_msg *m);

/* A byte string fit for a message into out: printable ASCII as is, other
 * bytes (and \ and ') as \xNN, cut after 64 bytes with "...". Returns
 * out. */
const char *crun__store_show(char *out, size_t outlen, const uint8_t *p, size_t n);

#endif

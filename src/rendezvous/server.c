/* The store server: the libuv edge of the store (store.h).
 *
 * Why it is shaped this way:
 * - One thread, one loop: the store and every round are touched only from
 *   libuv callbacks, so nothing is locked.
 * - This file only moves bytes: it accepts, reads and frames (wire.h),
 *   runs the handshake, hands each request to the store (rendezvous
 *   requests to store_rdzv.h) and queues what they answer. Every key-value
 *   decision is in store.c; buffers and sockets are netio.h's.
 * - Replies produced while handling one read (or one timer, or one close)
 *   are queued and written once at the end of the callback (flush_dirty).
 * - Every waiting request shares one timer, set after each callback to the
 *   store's earliest deadline.
 * - Closing is deferred: the store and the rounds, which run inside list
 *   walks, only mark a connection for dropping; flush_dirty, which runs at
 *   the end of every libuv callback and outside every walk, closes it.
 * - Unauthenticated peers get a small frame cap (HELLO_MAX_PAYLOAD), so a
 *   stranger cannot make the server allocate more than a few KiB, and a
 *   quota of their own (budget.h decides): a flood of them closes the
 *   oldest of them, never an authenticated connection, and a client that
 *   answers the handshake at once is through before its turn comes.
 * - Every byte buffered for a connection, in or out, is charged to one
 *   global budget as allocated (account()); input grows only as it
 *   arrives, so a frame's announced length alone costs nothing. A
 *   connection that would grow past the budget is refused.
 * - Refusals are deferred like closes (refuse_conn marks, flush_dirty
 *   carries out): an error frame, then the close; their log lines are
 *   rate limited per kind, so a flood costs a few lines.
 * - One sweep timer a second checks slow requests and idle connections,
 *   instead of a timer per connection. */
#include "rendezvous/server.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "common/htable.h"
#include "common/list.h"
#include "common/log.h"
#include "common/ratelimit.h"
#include "common/util.h"
#include "rendezvous/budget.h"
#include "rendezvous/hello.h"
#include "rendezvous/netio.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/round.h"
#include "rendezvous/store.h"
#include "rendezvous/store_rdzv.h"
#include "rendezvous/tcpstore.h"
#include "rendezvous/wire.h"

#define SCRATCH_SIZE (64 * 1024)
/* A HELLO is 12 + 3 * 4 bytes plus run id, nonce and mac: allow a run id
 * of up to 8 KiB before the peer has proven anything. */
#define HELLO_MAX_PAYLOAD (8 * 1024 + 128)
/* The most an unauthenticated connection holds: a whole HELLO coming in,
 * the preamble and an error going out. */
#define PREAUTH_CONN_BYTES (HELLO_MAX_PAYLOAD + CRUN_WIRE_HEADER_LEN + 256)
/* How long a closing connection may take to flush its last error. */
#define LINGER_MS 2000
#define ITEMS_MIN 64
/* Period of the sweep for slow requests and idle connections. */
#define SWEEP_MS 1000
/* Refusal log lines: at most this many per kind per period. */
#define REFUSE_LOG_BURST 10
#define REFUSE_LOG_PERIOD_MS 10000
#define LIFECYCLE_LOG_BURST 100
/* Connections accepted per loop iteration at most (on_connection). */
#define ACCEPT_BURST 32
/* An error frame of a connection being refused bypasses the budget; this
 * bounds it. */
#define FINAL_ERROR_MAX 512

#define container_of crun__container_of

/* Lifecycle of a connection:
 *   PREAMBLE  accepted, waiting for the client's preamble (ours goes out
 *             with its first byte); a TCPStore connection stays here
 *             until its first valid request
 *   HELLO     preamble fine, waiting for HELLO (handshake timer running)
 *   READY     authenticated and in a run: requests are served (the timer
 *             is the liveness timer once a JOIN asked for keep-alives)
 *   CLOSING   out of its run, its waits and watches gone; its last output
 *             (an error) is flushed, then its handles are closed
 * Every move to CLOSING goes through begin_close(). */
enum conn_state {
	CONN_PREAMBLE,
	CONN_HELLO,
	CONN_READY,
	CONN_CLOSING,
};

/* Kinds of refusal, each with its own log rate limit. */
enum refusal {
	REF_PROTOCOL,
	REF_HANDSHAKE,
	REF_AUTH,
	REF_PREAUTH,
	REF_CONNS,
	REF_BUDGET,
	REF_SLOW,
	REF_IDLE,
	REF_LIFECYCLE, /* accepted and closed lines of unauthenticated ones */
	REF_TCPSTORE,  /* TCPStore connections closed (protocol, tcpstore off) */
	REF_KINDS,
};

/* The unauthenticated connections of one source address, so that the
 * quota of a source is a lookup, not a walk over every connection. */
struct source {
	struct crun__hnode node; /* in srv->sources, keyed by ip */
	char ip[INET6_ADDRSTRLEN];
	struct crun__list conns; /* oldest first, by conn.source_link */
	uint32_t n;
};

struct conn {
	uv_tcp_t tcp;
	uv_timer_t timer; /* handshake timeout, liveness, linger while closing */
	struct crun__server *srv;
	struct crun__store_client sc;	/* the store's view: run, keys, waits */
	struct crun__list link;		/* srv->conns */
	struct crun__list preauth_link; /* srv->preauth while preauth */
	struct crun__list source_link;	/* source->conns while preauth */
	struct source *source;
	struct conn *dirty_next;
	struct crun__inbuf in;
	struct crun__outq out;
	int64_t keepalive_ms;	 /* from its last RDZV_JOIN; 0: none */
	uint64_t charged;	 /* bytes charged to srv->budget */
	uint64_t frame_start_ms; /* first byte of the frame in c->in */
	uint64_t last_ms;	 /* its last frame in or out */
	/* A refusal to carry out at the next flush_dirty: the error sent
	 * (0: none) and why. */
	int refuse_errnum;
	char refuse_why[160];
	enum conn_state state;
	uint8_t open_handles;
	bool counted;	 /* counts against max_connections */
	bool hello_done; /* joined a run: the disconnect hook runs */
	bool dirty;	 /* on srv->dirty */
	bool drop;	 /* close without flushing, at the next flush_dirty */
	bool handles_closing;
	bool alive_expired; /* dropped for want of keep-alives */
	bool preauth;	    /* on srv->preauth: not authenticated yet */
	bool over_budget;   /* on_alloc found no room in the budget */
	bool final_error;   /* its last error: past the budget */
	bool torch;	    /* speaks TCPStore (tcpstore.h), not crun's wire */
	bool torch_counted; /* in srv->ntorch */
	bool preamble_sent;
	struct crun__tcpstore_conn ts;
	uint8_t nonce[CRUN_WIRE_NONCE_LEN];
	char peer[64];
	char peer_ip[INET6_ADDRSTRLEN]; /* the address in peer, no port */
};

struct crun__server {
	uv_loop_t *loop;
	uv_tcp_t listener;
	uv_timer_t wait_timer;	 /* the store's earliest deadline */
	uv_timer_t sweep;	 /* slow requests and idle connections */
	uv_check_t accept_check; /* takes a connection held over (on_connection) */
	uint32_t accepts;	 /* taken in this loop iteration */
	int queue_only;		 /* > 0: enqueue never flushes (round_send) */
	bool accept_pending;	 /* libuv holds one for accept_check */
	uint64_t wait_deadline;	 /* what wait_timer is set to; UINT64_MAX: off */
	struct crun__store *store;
	struct crun__store_rdzv_env rdzv;
	struct crun__server_limits limits;
	uint32_t ntorch; /* TCPStore connections past their first request */
	uint8_t *token;
	size_t token_len;
	bool quiet;
	uint16_t caps; /* CRUN_WIRE_F_* capabilities our preamble advertises */
	const char *token_hint;
	bool require_token;
	bool tcpstore;
	crun__server_disconnect_cb disconnect_cb;
	void *disconnect_arg;
	struct crun__list conns;
	uint32_t nconns;
	struct crun__list preauth; /* unauthenticated connections, oldest first */
	uint32_t npreauth;
	struct crun__htable sources; /* struct source of those connections */
	uint32_t seed;		     /* of the sources' hashes */
	struct crun__budget budget;
	struct crun__ratelimit refuse_log[REF_KINDS];
	struct crun__server_stats stats;
	struct conn *dirty;
	uint8_t *scratch;
	struct crun__wire_item *items;
	uint32_t items_cap;
	int port;
	bool listening, listen_failed, destroying;
	size_t open_handles;
	/* Out of descriptors: the soft RLIMIT_NOFILE (INT_MAX: none), a
	 * descriptor held in reserve to accept and close with when accept
	 * fails (-1: none), and the rate limit of the lines saying so. */
	int fd_limit;
	int reserve_fd;
	struct crun__ratelimit fd_log;
	void (*done)(void *arg);
	void *done_arg;
	/* The embedder's own writes (crun__server_set): a client without a
	 * connection, whose replies go nowhere. */
	struct crun__store_client self;
	bool self_joined;
};

static void flush_dirty(struct crun__server *srv);
static void begin_close(struct conn *c, bool graceful);
static void send_preamble(struct conn *c);

void crun__server_limits_default(struct crun__server_limits *limits)
{
	limits->max_key_size = 4096;
	limits->max_value_size = 16u << 20;
	limits->max_keys_per_run = 1000000;
	limits->max_connections = 4096;
	limits->max_conn_buffer = 64u << 20;
	limits->handshake_timeout_ms = 10000;
	limits->max_total_buffer = 0;
	limits->max_preauth = 1024;
	limits->max_preauth_per_source = 256;
	limits->request_timeout_ms = 30000;
	limits->idle_timeout_ms = 3600000;
	limits->max_tcpstore = 0;
}

/* ---- small helpers ----------------------------------------------------- */

static const char *show_item(char *out, size_t outlen, const struct crun__wire_item *it)
{
	return crun__store_show(out, outlen, it->data, it->len);
}

static void handle_closed(struct crun__server *srv);

/* The metrics' reason of each kind (REF_LIFECYCLE is no refusal). */
static const enum crun__server_refusal refusal_reason[REF_KINDS] = {
	[REF_PROTOCOL] = CRUN_SRV_REF_PROTOCOL, [REF_HANDSHAKE] = CRUN_SRV_REF_HANDSHAKE,
	[REF_AUTH] = CRUN_SRV_REF_AUTH,		[REF_PREAUTH] = CRUN_SRV_REF_PREAUTH,
	[REF_CONNS] = CRUN_SRV_REF_CONNS,	[REF_BUDGET] = CRUN_SRV_REF_BUDGET,
	[REF_SLOW] = CRUN_SRV_REF_SLOW,		[REF_IDLE] = CRUN_SRV_REF_IDLE,
	[REF_TCPSTORE] = CRUN_SRV_REF_TCPSTORE,
};

const char *crun__server_refusal_name(enum crun__server_refusal r)
{
	static const char *const names[CRUN_SRV_NREFUSALS] = {
		[CRUN_SRV_REF_PROTOCOL] = "protocol",
		[CRUN_SRV_REF_HANDSHAKE] = "handshake_timeout",
		[CRUN_SRV_REF_AUTH] = "auth",
		[CRUN_SRV_REF_PREAUTH] = "preauth_evicted",
		[CRUN_SRV_REF_CONNS] = "max_connections",
		[CRUN_SRV_REF_BUDGET] = "buffer_budget",
		[CRUN_SRV_REF_SLOW] = "request_timeout",
		[CRUN_SRV_REF_IDLE] = "idle_timeout",
		[CRUN_SRV_REF_TCPSTORE] = "tcpstore",
		[CRUN_SRV_REF_FDS] = "out_of_fds",
	};

	return (unsigned)r < CRUN_SRV_NREFUSALS ? names[r] : "unknown";
}

const double crun__server_round_bounds[CRUN_SRV_ROUND_BUCKETS] = {
	0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800,
};

const struct crun__server_stats *crun__server_stats(const struct crun__server *srv)
{
	return &srv->stats;
}

/* One refusal line of kind at info level, rate limited per kind
 * (REFUSE_LOG_BURST per REFUSE_LOG_PERIOD_MS); the next line allowed
 * counts those held back. */
static void log_refusal(struct crun__server *srv, enum refusal kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void log_refusal(struct crun__server *srv, enum refusal kind, const char *fmt, ...)
{
	char line[512];
	uint64_t held;
	va_list ap;

	if (kind != REF_LIFECYCLE)
		srv->stats.refusals[refusal_reason[kind]]++;
	if (!crun__ratelimit_allow(&srv->refuse_log[kind], uv_now(srv->loop), &held))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (held)
		crun__info("%s; %" PRIu64 " more like it not logged", line, held);
	else
		crun__info("%s", line);
}

/* A connection's lifecycle line (accepted, closed): info, or debug when
 * the server is quiet. Those of connections not authenticated are rate
 * limited like refusals (LIFECYCLE_LOG_BURST per period), so a flood of
 * strangers costs a few lines, not a line each. */
static void log_lifecycle(struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void log_lifecycle(struct conn *c, const char *fmt, ...)
{
	struct crun__server *srv = c->srv;
	enum crun__log_level level = srv->quiet ? CRUN_LOG_DEBUG : CRUN_LOG_INFO;
	char line[512];
	uint64_t held = 0;
	va_list ap;

	if (!crun__log_enabled(level))
		return;
	if (!c->hello_done &&
	    !crun__ratelimit_allow(&srv->refuse_log[REF_LIFECYCLE], uv_now(srv->loop), &held))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (held)
		crun__log(level,
			  "%s; %" PRIu64 " more lines of unauthenticated connections not logged",
			  line, held);
	else
		crun__log(level, "%s", line);
}

/* Charges c's buffers, as allocated now, to the global budget. */
static void account(struct conn *c)
{
	uint64_t now = c->in.cap + c->out.cap + c->out.inflight_mem;

	crun__budget_move(&c->srv->budget, c->charged, now);
	c->charged = now;
}

static void mark_dirty(struct conn *c);

/* Marks c to be refused at the next flush_dirty: its unsent output goes,
 * an ERROR (errnum, why) is queued, and it closes once that is out. The
 * log line (kind, rate limited) is the caller's. Safe inside the store's
 * walks. */
static void refuse_conn(struct conn *c, int errnum, const char *why)
{
	if (c->refuse_errnum || c->drop || c->handles_closing || c->state == CONN_CLOSING)
		return;
	c->refuse_errnum = errnum;
	snprintf(c->refuse_why, sizeof(c->refuse_why), "%s", why);
	mark_dirty(c);
}

/* Refuses c because its buffers would grow past the global budget. */
static void refuse_over_budget(struct conn *c, const char *what)
{
	struct crun__server *srv = c->srv;
	char why[160];

	snprintf(why, sizeof(why),
		 "server buffer budget exhausted (%s; %" PRIu64 " of %" PRIu64
		 " bytes in use by all connections)",
		 what, srv->budget.used, srv->budget.limit);
	log_refusal(srv, REF_BUDGET, "%s: refused: %s", c->peer, why);
	refuse_conn(c, ENOBUFS, why);
}

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
		crun__info("%s: dropped: %s", c->peer, reason);
	c->drop = true;
	mark_dirty(c);
}

static void drop_write_failed(struct conn *c, int err)
{
	char why[96];

	if (err == -ENOMEM) {
		drop_conn(c, "out of memory");
		return;
	}
	snprintf(why, sizeof(why), "write failed: %s", uv_strerror(err));
	drop_conn(c, why);
}

static void on_written(struct crun__outq *q, int status)
{
	struct conn *c = container_of(q, struct conn, out);
	struct crun__server *srv = c->srv;

	account(c);
	if (srv->destroying)
		return;
	if (status < 0 && status != UV_ECANCELED && c->state != CONN_CLOSING)
		drop_write_failed(c, status);
	if (c->state == CONN_CLOSING && !c->out.inflight)
		mark_dirty(c);
	flush_dirty(srv);
}

/* Hands c's output to the kernel or libuv. Never closes anything: a
 * failure marks c for dropping. */
static void flush_conn(struct conn *c)
{
	int rc;

	if (c->drop || c->handles_closing)
		return;
	rc = crun__outq_flush(&c->out, (uv_stream_t *)&c->tcp, on_written);
	account(c);
	if (rc < 0)
		drop_write_failed(c, rc);
}

/* Queues m, len bytes encoded (or, when m is NULL, the len bytes at raw).
 * 0 when queued, or discarded because c is (now) being dropped; -ENOBUFS
 * when it can never fit c's buffer. */
static int enqueue(struct conn *c, const struct crun__wire_msg *m, const void *raw, size_t len)
{
	uint64_t max = c->srv->limits.max_conn_buffer;
	char why[128];
	int rc;

	if (c->drop || c->handles_closing)
		return 0;
	if (c->refuse_errnum && !c->final_error)
		return 0; /* being refused: only its error goes out */
	if (!(c->final_error && len <= FINAL_ERROR_MAX) &&
	    !crun__budget_fits(&c->srv->budget, c->charged,
			       c->charged - c->out.cap + crun__outq_grown_cap(&c->out, len))) {
		if (!c->srv->queue_only)
			flush_conn(c);
		if (!c->drop && !crun__budget_fits(&c->srv->budget, c->charged,
						   c->charged - c->out.cap +
							   crun__outq_grown_cap(&c->out, len))) {
			snprintf(why, sizeof(why), "a reply of %zu bytes, %zu waiting", len,
				 c->out.len + c->out.inflight);
			refuse_over_budget(c, why);
			return 0;
		}
	}
	rc = crun__outq_put(&c->out, max, m, raw, len);
	if (rc == 0)
		c->srv->stats.bytes_sent += len;
	if (rc == -EAGAIN && !c->srv->queue_only) {
		flush_conn(c);
		/* The flushed buffer is in flight, still charged: the new one
		 * must fit the budget beside it. */
		if (!c->drop && !(c->final_error && len <= FINAL_ERROR_MAX) &&
		    !crun__budget_fits(&c->srv->budget, c->charged,
				       c->charged - c->out.cap +
					       crun__outq_grown_cap(&c->out, len))) {
			snprintf(why, sizeof(why), "a reply of %zu bytes, %zu waiting", len,
				 c->out.len + c->out.inflight);
			refuse_over_budget(c, why);
			return 0;
		}
		rc = c->drop ? 0 : crun__outq_put(&c->out, max, m, raw, len);
		if (rc == 0 && !c->drop)
			c->srv->stats.bytes_sent += len;
	}
	account(c);
	if (rc == -EAGAIN) {
		snprintf(why, sizeof(why),
			 "not reading its replies (%zu bytes waiting, limit %" PRIu64 ")",
			 c->out.len + c->out.inflight, max);
		drop_conn(c, why);
	} else if (rc == -ENOMEM) {
		drop_conn(c, "out of memory");
	} else if (rc == 0) {
		c->last_ms = uv_now(c->srv->loop);
		mark_dirty(c);
	}
	return rc == -ENOBUFS ? rc : 0;
}

static void send_raw(struct conn *c, const void *data, size_t len)
{
	enqueue(c, NULL, data, len);
}

/* Queues one frame. 0 when queued (or silently discarded because c is
 * being dropped); -ENOBUFS when the frame is larger than a frame may be
 * or than c may buffer, so that the caller can answer with an error. */
static int send_frame(struct conn *c, uint8_t type, uint32_t id, int64_t num,
		      const struct crun__wire_item *items, uint32_t count)
{
	struct crun__wire_msg m = {
		.type = type,
		.id = id,
		.num = num,
		.count = count,
		.items = (struct crun__wire_item *)items,
	};
	size_t size = crun__wire_encoded_size(&m);

	if (size - CRUN_WIRE_HEADER_LEN > CRUN_WIRE_MAX_PAYLOAD || count > CRUN_WIRE_MAX_ITEMS)
		return -ENOBUFS;
	return enqueue(c, &m, NULL, size);
}

/* An ERROR reply to request id (printf format), formatted as the store's. */
#define reply_err(c, id, errnum, ...) \
	crun__store_reply_error((c)->srv->store, &(c)->sc, id, errnum, __VA_ARGS__)

/* ---- the store's and the rounds' way out ------------------------------------ */

/* Closes c, a TCPStore connection, with a rate-limited line: the protocol
 * has no error reply. */
static void torch_close(struct conn *c, const char *why)
{
	log_refusal(c->srv, REF_TCPSTORE, "%s: TCPStore protocol error: %s; closed", c->peer, why);
	if (!c->drop && !c->handles_closing) {
		c->drop = true; /* the line above is its only one */
		mark_dirty(c);
	}
}

/* The store's answer to c, a TCPStore connection, in TCPStore's bytes.
 * Frames no TCPStore request is owed (an error about no request) go. */
static int torch_send(struct conn *c, uint8_t type, uint32_t id, int64_t num,
		      const struct crun__wire_item *items, uint32_t count)
{
	uint8_t small[1024], *out = small;
	char err[200];
	long n;

	if (c->drop || c->handles_closing || c->state == CONN_CLOSING)
		return 0;
	n = crun__tcpstore_reply(&c->ts, type, id, num, items, count, small, sizeof(small), err,
				 sizeof(err));
	if (n > (long)sizeof(small)) {
		if ((uint64_t)n > c->srv->limits.max_conn_buffer) {
			torch_close(c, "a reply larger than the connection's buffer");
			return 0;
		}
		out = malloc((size_t)n);
		if (!out) {
			drop_conn(c, "out of memory");
			return 0;
		}
		n = crun__tcpstore_reply(&c->ts, type, id, num, items, count, out, (size_t)n, err,
					 sizeof(err));
	}
	if (n == -EPROTO)
		torch_close(c, err);
	else if (n > 0 && enqueue(c, NULL, out, (size_t)n) == -ENOBUFS)
		torch_close(c, "a reply larger than the connection's buffer");
	if (out != small)
		free(out);
	return 0;
}

static struct conn *client_conn(void *client)
{
	return container_of((struct crun__store_client *)client, struct conn, sc);
}

/* Frames go to a connection's output like any reply; every callback ends
 * with flush_dirty, which writes them. */
static int store_send(void *ctx, struct crun__store_client *to, uint8_t type, uint32_t id,
		      int64_t num, const struct crun__wire_item *items, uint32_t count)
{
	struct conn *c;

	if (to == &((struct crun__server *)ctx)->self)
		return 0;
	c = client_conn(to);
	if (c->torch)
		return torch_send(c, type, id, num, items, count);
	return send_frame(c, type, id, num, items, count);
}

static void store_drop(void *ctx, struct crun__store_client *c, const char *reason)
{
	(void)ctx;
	drop_conn(client_conn(c), reason);
}

static const struct crun__store_ops store_ops = {
	.send = store_send,
	.drop = store_drop,
	.run_freed = crun__store_rdzv_free,
};

/* The round's frames are only queued: nothing goes out before the round
 * has journaled the change they announce (a connection whose queue is
 * full is dropped rather than flushed early). */
static int round_send(void *peer, uint8_t type, uint32_t id, int64_t num,
		      const struct crun__wire_item *items, uint32_t count)
{
	struct conn *c = client_conn(peer);
	struct crun__server *srv = c->srv;
	int rc;

	srv->queue_only++;
	rc = send_frame(c, type, id, num, items, count);
	srv->queue_only--;
	return rc;
}

static void round_flush(void *ctx)
{
	flush_dirty(ctx);
}

static void round_handle_opened(void *ctx)
{
	((struct crun__server *)ctx)->open_handles++;
}

static void round_handle_closed(void *ctx)
{
	handle_closed(ctx);
}

static void round_formed(void *ctx, uint64_t ms)
{
	struct crun__server_stats *st = &((struct crun__server *)ctx)->stats;
	double s = (double)ms / 1000.0;
	int i = 0;

	st->rounds_formed++;
	st->round_seconds_sum += s;
	while (i < CRUN_SRV_ROUND_BUCKETS && s > crun__server_round_bounds[i])
		i++;
	if (i < CRUN_SRV_ROUND_BUCKETS)
		st->round_buckets[i]++;
}

static const struct crun__round_ops round_ops = {
	.send = round_send,
	.formed = round_formed,
	.flush = round_flush,
	.handle_opened = round_handle_opened,
	.handle_closed = round_handle_closed,
};

/* ---- requests ---------------------------------------------------------- */

static void on_conn_timer(uv_timer_t *t);

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

static void fail_conn(struct conn *c, uint32_t id, int errnum, const char *what, const char *why);

static void handle_request(struct conn *c, const struct crun__wire_msg *m)
{
	struct crun__server *srv = c->srv;
	int64_t keepalive_ms = -1;

	if (crun__log_enabled(CRUN_LOG_DEBUG))
		crun__store_log_request(&c->sc, m);
	if (crun__store_apply(srv->store, &c->sc, m, uv_now(srv->loop)) != -EINVAL)
		return;
	if (m->type < CRUN_WIRE_RDZV_JOIN || m->type > CRUN_WIRE_RDZV_RESUME)
		return;
	/* A store that does not advertise RESUME (the old-store test hook)
	 * refuses it as an older one does. */
	if (m->type == CRUN_WIRE_RDZV_RESUME && !(srv->caps & CRUN_WIRE_F_RDZV_RESUME)) {
		fail_conn(c, m->id, EPROTO, "protocol error", "unexpected RDZV_RESUME");
		return;
	}
	crun__store_rdzv_apply(&srv->rdzv, srv->store, &c->sc, m, c->peer_ip, &keepalive_ms);
	if (keepalive_ms >= 0) {
		c->keepalive_ms = keepalive_ms;
		keepalive_reset(c);
	}
}

/* ---- handshake and framing ------------------------------------------------ */

/* The source of address ip; created (with no connection) when create is
 * set and there is none. NULL when there is none, or no memory. */
static struct source *source_get(struct crun__server *srv, const char *ip, bool create)
{
	uint32_t len = (uint32_t)strlen(ip);
	uint32_t hash = crun__hash_bytes(srv->seed, (const uint8_t *)ip, len);
	struct crun__hnode *n = crun__htable_find(&srv->sources, (const uint8_t *)ip, len, hash);
	struct source *src;

	if (n || !create)
		return n ? container_of(n, struct source, node) : NULL;
	src = calloc(1, sizeof(*src));
	if (!src)
		return NULL;
	snprintf(src->ip, sizeof(src->ip), "%s", ip);
	crun__list_init(&src->conns);
	src->node.key = (const uint8_t *)src->ip;
	src->node.klen = len;
	src->node.hash = hash;
	if (crun__htable_insert(&srv->sources, &src->node) < 0) {
		free(src);
		return NULL;
	}
	return src;
}

/* Counts c, just admitted, as unauthenticated. 0 or -ENOMEM. */
static int preauth_enter(struct conn *c)
{
	struct crun__server *srv = c->srv;
	struct source *src = source_get(srv, c->peer_ip, true);

	if (!src)
		return -ENOMEM;
	c->source = src;
	crun__list_add_tail(&src->conns, &c->source_link);
	src->n++;
	c->preauth = true;
	crun__list_add_tail(&srv->preauth, &c->preauth_link);
	srv->npreauth++;
	return 0;
}

/* c no longer counts as unauthenticated (it authenticated or closes). */
static void preauth_leave(struct conn *c)
{
	struct crun__server *srv = c->srv;

	if (!c->preauth)
		return;
	c->preauth = false;
	crun__list_del(&c->preauth_link);
	srv->npreauth--;
	crun__list_del(&c->source_link);
	if (--c->source->n == 0) {
		crun__htable_remove(&srv->sources, &c->source->node);
		free(c->source);
	}
	c->source = NULL;
}

/* Answers id with an error, logs why, and closes c once the error is out. */
static void fail_conn(struct conn *c, uint32_t id, int errnum, const char *what, const char *why)
{
	log_refusal(c->srv, errnum == ETIMEDOUT ? REF_HANDSHAKE : REF_PROTOCOL, "%s: %s: %s",
		    c->peer, what, why);
	c->final_error = true;
	send_preamble(c);
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
static void handle_hello(struct conn *c, const struct crun__wire_msg *m)
{
	struct crun__server *srv = c->srv;
	const struct crun__hello_server hs = {srv->token, srv->token_len, c->nonce,
					      srv->limits.max_key_size};
	const struct crun__wire_item *run_id = &m->items[0];
	uint8_t server_mac[CRUN_WIRE_MAC_LEN];
	struct crun__wire_item reply;
	char r[300], why[128];
	int rc;

	rc = crun__hello_server_hello(&hs, m, server_mac, &reply, why, sizeof(why));
	if (rc == -EACCES) {
		log_refusal(srv, REF_AUTH, "%s: authentication failed (run '%s')", c->peer,
			    show_item(r, sizeof(r), run_id));
		c->final_error = true;
		reply_err(c, m->id, EACCES, "%s", why);
		begin_close(c, true);
		return;
	}
	if (rc < 0) {
		fail_conn(c, m->id, -rc, rc == -EPROTO ? "protocol error" : "refused", why);
		return;
	}
	show_item(r, sizeof(r), run_id);
	if (crun__store_join(srv->store, &c->sc, run_id->data, run_id->len) < 0) {
		OPENSSL_cleanse(server_mac, sizeof(server_mac));
		fail_conn(c, m->id, ENOMEM, "refused", "out of memory");
		return;
	}
	c->hello_done = true;
	c->state = CONN_READY;
	preauth_leave(c);
	uv_timer_stop(&c->timer);
	/* Only now: a stranger's connection costs one system call less. Its
	 * preamble and error, a first write and a last, wait for no ACK. */
	uv_tcp_nodelay(&c->tcp, 1);
	send_frame(c, CRUN_WIRE_OK, m->id, 0, &reply, 1);
	OPENSSL_cleanse(server_mac, sizeof(server_mac));
	crun__log(srv->quiet ? CRUN_LOG_DEBUG : CRUN_LOG_INFO, "%s: joined run '%s'%s", c->peer, r,
		  srv->token ? " (authenticated)" : "");
}

static void handle_frame(struct conn *c, const struct crun__wire_msg *m)
{
	char err[160];

	if (crun__wire_validate(m, err, sizeof(err)) < 0) {
		fail_conn(c, m->id, EPROTO, "protocol error", err);
		return;
	}
	if (!(c->srv->caps & CRUN_WIRE_F_RDZV_EXCL) &&
	    ((m->type == CRUN_WIRE_RDZV_JOIN && m->count != CRUN_RDZV_JOIN_ITEMS_BASE) ||
	     (m->type == CRUN_WIRE_RDZV_FAIL && m->count != 1))) {
		snprintf(err, sizeof(err), "%s takes %u to %u items, got %u",
			 crun__wire_type_name(m->type), m->type == CRUN_WIRE_RDZV_FAIL ? 1 : 10,
			 m->type == CRUN_WIRE_RDZV_FAIL ? 1 : 10, m->count);
		fail_conn(c, m->id, EPROTO, "protocol error", err);
		return;
	}
	if (!crun__wire_is_request(m->type)) {
		snprintf(err, sizeof(err), "unexpected %s frame from a client",
			 crun__wire_type_name(m->type));
		fail_conn(c, m->id, EPROTO, "protocol error", err);
		return;
	}
	c->srv->stats.requests[m->type]++;
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

/* Our preamble, once the client's first byte says it speaks crun (or
 * before an error to one that said nothing yet). */
static void send_preamble(struct conn *c)
{
	struct crun__server *srv = c->srv;
	uint8_t preamble[CRUN_WIRE_SERVER_PREAMBLE];

	if (c->preamble_sent || c->torch)
		return; /* a TCPStore client reads no preamble, nor crun's errors */
	c->preamble_sent = true;
	crun__wire_server_preamble(
		preamble, (srv->token ? CRUN_WIRE_F_AUTH | CRUN_WIRE_F_AUTH_RUN : 0) | srv->caps,
		srv->token ? c->nonce : NULL);
	send_raw(c, preamble, sizeof(preamble));
}

/* c's first byte is not crun's: a TCPStore client, served when the server
 * was asked to (opts.tcpstore), else closed. */
static void start_torch(struct conn *c, uint8_t first)
{
	if (!c->srv->tcpstore) {
		log_refusal(c->srv, REF_TCPSTORE,
			    "%s: protocol error: not a crun client (first byte 0x%02x) and "
			    "TCPStore clients are not served here; closed",
			    c->peer, first);
		c->drop = true; /* the line above is its only one */
		mark_dirty(c);
		return;
	}
	c->torch = true;
}

/* c's first valid TCPStore request: it joins the TCPStore namespace and
 * counts as an authenticated connection (it has nothing more to prove). */
static int torch_ready(struct conn *c)
{
	struct crun__server *srv = c->srv;

	if (srv->ntorch >= srv->limits.max_tcpstore)
		return -EUSERS;
	if (crun__store_join(srv->store, &c->sc, (const uint8_t *)CRUN__TCPSTORE_RUN,
			     CRUN__TCPSTORE_RUN_LEN) < 0)
		return -ENOMEM;
	srv->ntorch++;
	c->torch_counted = true;
	c->state = CONN_READY;
	preauth_leave(c);
	uv_timer_stop(&c->timer);
	uv_tcp_nodelay(&c->tcp, 1);
	/* No idle timeout (a TCPStore client never reconnects): the kernel
	 * finds the peers that vanished. */
	uv_tcp_keepalive(&c->tcp, 1, 60);
	log_lifecycle(c, "%s: TCPStore client, %s dialect", c->peer,
		      crun__tcpstore_dialect_name(c->ts.dialect));
	return 0;
}

/* c said nothing within the handshake timeout. crun's clients send their
 * preamble at once, but PyTorch 1.13's TCPStore opens a second connection
 * per store for watch callbacks that stays silent until a watch (and
 * dies with its process when closed under it): with TCPStore served, c
 * is taken for such a connection and kept, but as an unauthenticated one:
 * the quotas of those (max_preauth, per source) still bound how many a
 * stranger holds, and a flood closes the oldest. Its timer runs again, for
 * a request it starts and does not finish. */
static void torch_silent(struct conn *c)
{
	if (!c->torch)
		log_lifecycle(c, "%s: silent for %u ms: taken for a TCPStore connection", c->peer,
			      c->srv->limits.handshake_timeout_ms);
	c->torch = true;
	uv_timer_start(&c->timer, on_conn_timer, c->srv->limits.handshake_timeout_ms, 0);
}

static void handle_torch(struct conn *c, const struct crun__tcpstore_req *req)
{
	struct crun__server *srv = c->srv;
	struct crun__wire_msg m;
	uint8_t reply[16];
	size_t rlen;
	char err[160];
	int rc;

	if ((unsigned)req->op <
	    sizeof(srv->stats.tcpstore_requests) / sizeof(srv->stats.tcpstore_requests[0]))
		srv->stats.tcpstore_requests[req->op]++;
	rc = crun__tcpstore_begin(&c->ts, req, &m, reply, &rlen);
	if (rc == -ENOSPC) {
		torch_close(c, "too many requests waiting for a reply");
		return;
	}
	if (rc == CRUN__TS_APPLY) {
		if (crun__wire_validate(&m, err, sizeof(err)) < 0) {
			torch_close(c, err);
			return;
		}
		if (crun__log_enabled(CRUN_LOG_DEBUG))
			crun__store_log_request(&c->sc, &m);
		crun__store_apply(srv->store, &c->sc, &m, uv_now(srv->loop));
		return;
	}
	if (rc == CRUN__TS_CANCEL) {
		/* Its waits get no answer from the store now; one that was
		 * answered already was answered before this reply, which the
		 * client expects (tcpstore.h). */
		crun__store_detach(srv->store, &c->sc);
		crun__tcpstore_cancel_waits(&c->ts);
	}
	if (rlen)
		send_raw(c, reply, rlen);
}

/* Handles every whole TCPStore request in buf; returns the bytes
 * consumed. */
static size_t process_torch(struct conn *c, const uint8_t *buf, size_t len)
{
	struct crun__server *srv = c->srv;
	struct crun__tcpstore_limits lim = {
		.max_key_size = srv->limits.max_key_size,
		.max_value_size = srv->limits.max_value_size,
	};
	struct crun__tcpstore_req req;
	size_t off = 0;
	char err[200];

	while (c->state != CONN_CLOSING && !c->drop && !c->refuse_errnum && off < len) {
		long n;

		/* The first request is small; the connection is READY after it,
		 * also for the requests that follow it in this read. */
		lim.max_request = c->state == CONN_READY ? srv->limits.max_conn_buffer
							 : HELLO_MAX_PAYLOAD + CRUN_WIRE_HEADER_LEN;
		n = crun__tcpstore_parse(&c->ts, buf + off, len - off, &lim, &req, &srv->items,
					 &srv->items_cap, err, sizeof(err));

		if (n == 0)
			break;
		if (n < 0) {
			torch_close(c, err);
			break;
		}
		off += (size_t)n;
		if (c->state != CONN_READY) {
			int rc = torch_ready(c);

			if (rc == -EUSERS) {
				snprintf(err, sizeof(err),
					 "too many TCPStore connections (limit %u)",
					 srv->limits.max_tcpstore);
				torch_close(c, err);
				break;
			}
			if (rc < 0) {
				drop_conn(c, "out of memory");
				break;
			}
		}
		handle_torch(c, &req);
	}
	return off;
}

static uint32_t max_payload(const struct conn *c)
{
	uint64_t max = c->srv->limits.max_conn_buffer - CRUN_WIRE_HEADER_LEN;

	if (c->state != CONN_READY)
		return HELLO_MAX_PAYLOAD;
	return max > CRUN_WIRE_MAX_PAYLOAD ? CRUN_WIRE_MAX_PAYLOAD : (uint32_t)max;
}

/* Handles every whole frame in buf; returns the bytes consumed. Stops
 * early when c starts closing or is to be refused. */
static size_t process(struct conn *c, const uint8_t *buf, size_t len)
{
	struct crun__server *srv = c->srv;
	struct crun__wire_msg m;
	size_t off = 0;
	char err[160];

	while (c->state != CONN_CLOSING && !c->drop && !c->refuse_errnum) {
		long n;

		if (c->torch)
			return off + process_torch(c, buf + off, len - off);
		if (c->state == CONN_PREAMBLE) {
			if (len - off == 0)
				break;
			if (!c->preamble_sent && buf[off] != CRUN_WIRE_MAGIC[0]) {
				start_torch(c, buf[off]);
				continue;
			}
			send_preamble(c);
			if (len - off < CRUN_WIRE_CLIENT_PREAMBLE)
				break;
			handle_preamble(c, buf + off);
			off += CRUN_WIRE_CLIENT_PREAMBLE;
			continue;
		}
		n = crun__wire_decode_grow(buf + off, len - off, max_payload(c), &m, &srv->items,
					   &srv->items_cap, err, sizeof(err));
		if (n == -ENOMEM) {
			drop_conn(c, "out of memory");
			break;
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

static void handle_closed(struct crun__server *srv)
{
	srv->open_handles--;
	if (!srv->destroying || srv->open_handles)
		return;
	free(srv->scratch);
	free(srv->items);
	if (srv->token) {
		memset(srv->token, 0, srv->token_len);
		free(srv->token);
	}
	if (srv->reserve_fd >= 0)
		close(srv->reserve_fd);
	void (*done)(void *) = srv->done;
	void *arg = srv->done_arg;
	free(srv);
	if (done)
		done(arg);
}

static void on_conn_closed(uv_handle_t *h)
{
	struct conn *c = h->data;
	struct crun__server *srv = c->srv;

	if (--c->open_handles == 0) {
		if (!srv->destroying)
			preauth_leave(c);
		crun__list_del(&c->link);
		crun__inbuf_finish(&c->in);
		crun__outq_finish(&c->out);
		account(c);
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
	struct crun__server *srv = c->srv;
	char why[64], t[24];

	if (c->state == CONN_CLOSING) {
		if (!graceful)
			close_handles(c);
		return;
	}
	c->state = CONN_CLOSING;
	uv_read_stop((uv_stream_t *)&c->tcp);
	uv_timer_stop(&c->timer);
	preauth_leave(c);
	if (c->counted) {
		srv->nconns--;
		c->counted = false;
	}
	if (c->torch_counted) {
		srv->ntorch--;
		c->torch_counted = false;
	}
	crun__store_detach(srv->store, &c->sc);
	if (c->alive_expired)
		snprintf(why, sizeof(why), "no keep-alive for %s",
			 crun__rdzv_format_ms(c->keepalive_ms, t, sizeof(t)));
	else
		snprintf(why, sizeof(why), "connection closed");
	crun__store_rdzv_lost(&c->sc, why);
	if (c->hello_done && srv->disconnect_cb)
		srv->disconnect_cb(srv, crun__store_run_id(&c->sc, NULL), c->peer,
				   srv->disconnect_arg);
	crun__store_leave(srv->store, &c->sc);
	if (graceful)
		mark_dirty(c);
	else
		close_handles(c);
}

static void on_wait_timer(uv_timer_t *t)
{
	struct crun__server *srv = t->data;

	srv->wait_deadline = UINT64_MAX;
	crun__store_expire(srv->store, uv_now(srv->loop));
	flush_dirty(srv);
}

/* Sets the one timer of every waiting request to the store's earliest
 * deadline, when that changed. */
static void arm_wait_timer(struct crun__server *srv)
{
	uint64_t next = srv->store ? crun__store_next_deadline(srv->store) : UINT64_MAX;
	uint64_t now;

	if (next == srv->wait_deadline)
		return;
	srv->wait_deadline = next;
	if (next == UINT64_MAX) {
		uv_timer_stop(&srv->wait_timer);
		return;
	}
	now = uv_now(srv->loop);
	uv_timer_start(&srv->wait_timer, on_wait_timer, next > now ? next - now : 0, 0);
}

/* Writes the output of every connection touched since the last call and
 * carries out the closes that were deferred. Runs at the end of every
 * libuv callback; closing one connection can touch others (ephemeral keys
 * deleted, watchers notified), which simply puts them on the list too. */
static void flush_dirty(struct crun__server *srv)
{
	struct conn *c;

	while ((c = srv->dirty)) {
		srv->dirty = c->dirty_next;
		c->dirty = false;
		if (c->handles_closing)
			continue;
		if (c->refuse_errnum && !c->drop && c->state != CONN_CLOSING) {
			/* What it did not send goes: the budget gets it back
			 * and the error does not wait behind it. */
			crun__outq_finish(&c->out);
			crun__inbuf_finish(&c->in);
			account(c);
			c->final_error = true;
			send_preamble(c);
			reply_err(c, 0, c->refuse_errnum, "%s", c->refuse_why);
			begin_close(c, true);
		}
		if (!c->drop)
			flush_conn(c);
		if (c->drop) {
			begin_close(c, false);
			continue;
		}
		if (c->state != CONN_CLOSING)
			continue;
		if (!c->out.inflight)
			close_handles(c);
		else
			uv_timer_start(&c->timer, on_conn_timer, LINGER_MS, 0);
	}
	arm_wait_timer(srv);
}

static void on_conn_timer(uv_timer_t *t)
{
	struct conn *c = t->data;
	struct crun__server *srv = c->srv;
	char why[96];

	if (c->state == CONN_CLOSING) {
		close_handles(c);
	} else if (c->state == CONN_READY) {
		char ms[24];

		/* No frame for keepalive_ms: the peer is gone or cut off. It
		 * is told why, should the path back still work (a one-way
		 * loss): an agent must not take a closed connection without a
		 * word for a store that died. */
		c->alive_expired = true;
		snprintf(why, sizeof(why), "no keep-alive for %s",
			 crun__rdzv_format_ms(c->keepalive_ms, ms, sizeof(ms)));
		crun__info("%s: dropped: %s", c->peer, why);
		refuse_conn(c, ETIMEDOUT, why);
	} else if (srv->tcpstore && !c->preamble_sent && !c->in.len) {
		torch_silent(c);
	} else {
		snprintf(why, sizeof(why), "no handshake within %u ms",
			 srv->limits.handshake_timeout_ms);
		fail_conn(c, 0, ETIMEDOUT, "closed", why);
	}
	flush_dirty(srv);
}

/* The announced length of the frame whose start is in c->in; 0 while its
 * header is not in. */
static uint64_t partial_len(const struct conn *c)
{
	const uint8_t *b = c->in.buf;

	if (c->torch)
		return c->in.len; /* no length up front: what came so far */
	if (c->in.len < CRUN_WIRE_HEADER_LEN)
		return 0;
	return ((uint64_t)b[0] << 24) | ((uint64_t)b[1] << 16) | ((uint64_t)b[2] << 8) | b[3];
}

/* Once a second: refuses authenticated connections whose frame is taking
 * too long and closes idle ones. */
static void on_sweep(uv_timer_t *t)
{
	struct crun__server *srv = t->data;
	uint64_t now = uv_now(srv->loop);
	char why[160], d[24], lim[24];

	for (struct crun__list *l = srv->conns.next; l != &srv->conns; l = l->next) {
		struct conn *c = container_of(l, struct conn, link);
		struct crun__idle_state idle;
		uint64_t allow;

		if (c->state != CONN_READY || c->drop || c->refuse_errnum)
			continue;
		if (c->in.len) {
			allow = crun__budget_request_ms(srv->limits.request_timeout_ms,
							partial_len(c));
			if (now - c->frame_start_ms < allow)
				continue;
			snprintf(why, sizeof(why),
				 "slow request: %zu bytes of a frame in %s (limit %s)", c->in.len,
				 crun__rdzv_format_ms((int64_t)(now - c->frame_start_ms), d,
						      sizeof(d)),
				 crun__rdzv_format_ms((int64_t)allow, lim, sizeof(lim)));
			log_refusal(srv, REF_SLOW, "%s: refused: %s", c->peer, why);
			refuse_conn(c, ETIMEDOUT, why);
			continue;
		}
		if (c->torch)
			continue; /* a TCPStore client never reconnects */
		idle = (struct crun__idle_state){
			.now_ms = now,
			.last_ms = c->last_ms,
			.timeout_ms = srv->limits.idle_timeout_ms,
			.output = c->out.len || c->out.inflight,
			.subscribed = c->sc.nsubs > 0,
			.owns_keys = !crun__list_empty(&c->sc.owned),
			.keepalive = c->keepalive_ms > 0,
		};
		if (!crun__idle_expired(&idle))
			continue;
		snprintf(why, sizeof(why), "idle for %s; connect again",
			 crun__rdzv_format_ms((int64_t)(now - c->last_ms), d, sizeof(d)));
		log_refusal(srv, REF_IDLE, "%s: closed: %s", c->peer, why);
		/* ECONNABORTED: what clients take for a lost connection, so
		 * that libcrun connects again on its next call. */
		refuse_conn(c, ECONNABORTED, why);
	}
	flush_dirty(srv);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct conn *c = h->data;
	uint64_t cap = c->state == CONN_READY ? c->srv->limits.max_conn_buffer
					      : HELLO_MAX_PAYLOAD + CRUN_WIRE_HEADER_LEN;
	uint64_t room = crun__budget_room(&c->srv->budget, c->charged) - c->charged + c->in.cap;

	(void)suggested;
	if (c->in.len && room < cap)
		cap = room;
	crun__inbuf_alloc(&c->in, c->srv->scratch, SCRATCH_SIZE, cap,
			  c->state != CONN_PREAMBLE && !c->torch, buf);
	account(c);
	/* No room left for this connection's frame: on_read gets UV_ENOBUFS. */
	c->over_budget = buf->len == 0 && c->in.len && cap == room;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct conn *c = s->data;
	struct crun__server *srv = c->srv;
	bool had_partial;
	size_t used;

	if (nread == UV_ENOBUFS && c->state != CONN_CLOSING) {
		char what[96];

		if (c->over_budget)
			snprintf(what, sizeof(what), "a frame of %" PRIu64 " bytes, %zu in",
				 partial_len(c), c->in.len);
		else
			snprintf(what, sizeof(what), "out of memory");
		refuse_over_budget(c, what);
		flush_dirty(srv);
		return;
	}
	if (nread < 0) {
		if (c->state != CONN_CLOSING) {
			if (nread == UV_EOF) {
				log_lifecycle(c, "%s: connection closed", c->peer);
				begin_close(c, true);
			} else {
				log_lifecycle(c, "%s: connection closed: %s", c->peer,
					      uv_strerror((int)nread));
				begin_close(c, false);
			}
		}
		flush_dirty(srv);
		return;
	}
	if (nread == 0)
		return;
	srv->stats.bytes_received += (uint64_t)nread;
	had_partial = c->in.len > 0;
	if (buf->base == (char *)srv->scratch) {
		size_t rest;

		used = process(c, srv->scratch, (size_t)nread);
		rest = (size_t)nread - used;
		if (c->state != CONN_CLOSING && !c->drop && !c->refuse_errnum && rest) {
			uint64_t keep = rest < CRUN__NETIO_RBUF_MIN ? CRUN__NETIO_RBUF_MIN : rest;

			if (!crun__budget_fits(&srv->budget, c->charged, c->charged + keep))
				refuse_over_budget(c, "the start of a frame");
			else if (crun__inbuf_keep(&c->in, srv->scratch + used, rest) < 0)
				drop_conn(c, "out of memory");
		}
	} else {
		c->in.len += (size_t)nread;
		used = process(c, c->in.buf, c->in.len);
	}
	if (used) {
		c->last_ms = uv_now(srv->loop);
		if (c->keepalive_ms)
			keepalive_reset(c);
	}
	if (buf->base != (char *)srv->scratch)
		crun__inbuf_consume(&c->in, used);
	if (c->in.len && (!had_partial || used))
		c->frame_start_ms = uv_now(srv->loop);
	account(c);
	flush_dirty(srv);
}

/* ---- out of file descriptors ---------------------------------------------- */

/* A connection accepted onto one of the last FD_HEADROOM descriptors below
 * the limit is refused, so that refusing (accept, send, close) always finds
 * a descriptor and accept never fails for lack of one in the first place:
 * descriptors are allocated lowest first, so descriptor n means n are open. */
#define FD_HEADROOM 8
#define FD_LOG_BURST 10
#define FD_LOG_PERIOD_MS 10000

static void fd_reserve_init(struct crun__server *srv)
{
	struct rlimit rl;

	srv->fd_limit = INT_MAX;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < INT_MAX)
		srv->fd_limit = (int)rl.rlim_cur;
	srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	srv->fd_log.burst = FD_LOG_BURST;
	srv->fd_log.period_ms = FD_LOG_PERIOD_MS;
}

/* The line for a connection refused for lack of descriptors, rate limited:
 * FD_LOG_BURST lines per FD_LOG_PERIOD_MS, the next one counting those
 * held back. */
static void fd_log_refused(struct crun__server *srv, const char *peer)
{
	uint64_t held;

	srv->stats.refusals[CRUN_SRV_REF_FDS]++;
	if (!crun__ratelimit_allow(&srv->fd_log, uv_now(srv->loop), &held))
		return;
	if (held)
		crun__warn("refused a connection from %s: out of file descriptors (limit %d); "
			   "%" PRIu64 " more refused and not logged",
			   peer, srv->fd_limit, held);
	else
		crun__warn("refused a connection from %s: out of file descriptors (limit %d)", peer,
			   srv->fd_limit);
}

/* accept(2) failed for lack of descriptors (libuv's own reserve is spent):
 * frees the reserve, accepts and closes one pending connection with it,
 * takes the reserve again. The listener stays readable only while
 * connections are pending, so this does not spin. */
static void fd_refuse_with_reserve(struct crun__server *srv)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char peer[INET6_ADDRSTRLEN + 16] = "unknown peer", ip[INET6_ADDRSTRLEN];
	uv_os_fd_t lfd;
	int fd;

	if (srv->reserve_fd < 0 || uv_fileno((uv_handle_t *)&srv->listener, &lfd) < 0) {
		fd_log_refused(srv, peer);
		return;
	}
	close(srv->reserve_fd);
	fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd >= 0) {
		crun__format_addr((struct sockaddr *)&ss, peer, sizeof(peer), ip);
		close(fd);
	}
	srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		fd_log_refused(srv, peer);
}

/* True when c's descriptor is within FD_HEADROOM of the limit. */
static bool fd_exhausted(const struct crun__server *srv, struct conn *c)
{
	uv_os_fd_t fd;

	return uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && fd >= srv->fd_limit - FD_HEADROOM;
}

/* Makes room for c, just accepted, as budget.h decides: closes the
 * oldest unauthenticated connection (of c's source, else of any) when a
 * quota is full. False when every slot is authenticated. */
static bool admit(struct crun__server *srv, struct conn *c)
{
	struct crun__admit_counts in = {
		.conns = srv->nconns,
		.max_conns = srv->limits.max_connections,
		.preauth = srv->npreauth,
		.max_preauth = srv->limits.max_preauth,
		.max_preauth_source = srv->limits.max_preauth_per_source,
	};
	struct source *src = source_get(srv, c->peer_ip, false);
	enum crun__admit verdict;
	struct conn *victim;
	char why[160];

	in.source_preauth = src ? src->n : 0;
	verdict = crun__admit_preauth(&in);
	if (verdict == CRUN__ADMIT)
		return true;
	if (verdict == CRUN__ADMIT_REFUSE)
		return false;
	if (verdict == CRUN__ADMIT_EVICT_SOURCE)
		victim = container_of(src->conns.next, struct conn, source_link);
	else
		victim = container_of(srv->preauth.next, struct conn, preauth_link);
	if (verdict == CRUN__ADMIT_EVICT_SOURCE)
		snprintf(why, sizeof(why),
			 "too many unauthenticated connections from %s (limit %u); try again",
			 c->peer_ip, srv->limits.max_preauth_per_source);
	else if (in.preauth >= in.max_preauth)
		snprintf(why, sizeof(why),
			 "too many unauthenticated connections (limit %u); try again",
			 srv->limits.max_preauth);
	else
		snprintf(why, sizeof(why), "too many connections (limit %u); try again",
			 srv->limits.max_connections);
	log_refusal(srv, REF_PREAUTH, "%s: closed to admit %s: %s", victim->peer, c->peer, why);
	victim->final_error = true;
	send_preamble(victim); /* a crun client reads it before the error */
	reply_err(victim, 0, ECONNABORTED, "%s", why);
	begin_close(victim, true);
	return true;
}

/* Takes the connection libuv has accepted on the listener. */
static void accept_one(struct crun__server *srv)
{
	uv_stream_t *server = (uv_stream_t *)&srv->listener;
	uint8_t preamble[CRUN_WIRE_SERVER_PREAMBLE];
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	struct conn *c;

	c = calloc(1, sizeof(*c));
	if (!c) {
		crun__warn("cannot accept a connection: out of memory");
		return;
	}
	c->srv = srv;
	crun__list_init(&c->link);
	crun__store_client_init(&c->sc, c->peer);
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
	crun__list_add_tail(&srv->conns, &c->link);
	snprintf(c->peer, sizeof(c->peer), "unknown peer");
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
		c->state = CONN_CLOSING;
		close_handles(c);
		return;
	}
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
		crun__format_addr((struct sockaddr *)&ss, c->peer, sizeof(c->peer), c->peer_ip);

	if (fd_exhausted(srv, c)) {
		char why[64];

		/* final_error: the preamble and the error go out even when
		 * the budget is spent. */
		c->final_error = true;
		crun__wire_server_preamble(preamble, 0, NULL);
		send_raw(c, preamble, sizeof(preamble));
		snprintf(why, sizeof(why), "out of file descriptors (limit %d)", srv->fd_limit);
		fd_log_refused(srv, c->peer);
		reply_err(c, 0, EMFILE, "%s", why);
		begin_close(c, true);
		flush_dirty(srv);
		return;
	}
	if (!admit(srv, c)) {
		c->final_error = true;
		crun__wire_server_preamble(preamble, 0, NULL);
		send_raw(c, preamble, sizeof(preamble));
		log_refusal(srv, REF_CONNS,
			    "refused connection from %s: too many connections (limit %u)", c->peer,
			    srv->limits.max_connections);
		reply_err(c, 0, EMFILE, "too many connections");
		begin_close(c, true);
		flush_dirty(srv);
		return;
	}
	c->counted = true;
	srv->nconns++;
	srv->stats.accepted++;
	c->last_ms = uv_now(srv->loop);
	if (preauth_enter(c) < 0) {
		crun__warn("cannot accept a connection from %s: out of memory", c->peer);
		begin_close(c, false);
		return;
	}
	if (srv->token && crun__wire_random(c->nonce, sizeof(c->nonce)) < 0) {
		crun__warn("cannot draw a nonce for %s: closing it", c->peer);
		begin_close(c, false);
		return;
	}
	log_lifecycle(c, "accepted connection from %s", c->peer);
	uv_timer_start(&c->timer, on_conn_timer, srv->limits.handshake_timeout_ms, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
		begin_close(c, false);
	flush_dirty(srv);
}

/* libuv's listener accepts until the backlog is empty, so a flood of new
 * connections would keep the loop from the requests of the clients
 * already in. At most ACCEPT_BURST are taken per loop iteration; the next
 * one stays with libuv, which stops watching the listener, until the
 * check phase of the iteration, after every other I/O callback. */
static void on_connection(uv_stream_t *server, int status)
{
	struct crun__server *srv = server->data;

	if (status == UV_EMFILE || status == UV_ENFILE) {
		fd_refuse_with_reserve(srv);
		return;
	}
	if (status < 0) {
		crun__warn("cannot accept a connection: %s", uv_strerror(status));
		return;
	}
	if (srv->accepts >= ACCEPT_BURST) {
		srv->accept_pending = true;
		return;
	}
	srv->accepts++;
	accept_one(srv);
}

static void on_accept_check(uv_check_t *h)
{
	struct crun__server *srv = h->data;

	srv->accepts = 0;
	if (!srv->accept_pending || srv->destroying)
		return;
	srv->accept_pending = false;
	srv->accepts = 1;
	accept_one(srv);
}

/* ---- public API ------------------------------------------------------------ */

/* Physical memory in bytes; 0 when unknown. */
static uint64_t phys_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

	return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* The memory limit of this process's cgroup, from /proc/self/cgroup:
 * memory.max (v2) or memory.limit_in_bytes (v1) under /sys/fs/cgroup.
 * 0: none or unknown. */
static uint64_t cgroup_memory(void)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[512], path[600];
	uint64_t limit = 0;

	if (!f)
		return 0;
	while (!limit && fgets(line, sizeof(line), f)) {
		char *ctl = strchr(line, ':'), *cg = ctl ? strchr(ctl + 1, ':') : NULL;
		unsigned long long v;
		FILE *lf;

		if (!cg)
			continue;
		*cg++ = '\0';
		cg[strcspn(cg, "\n")] = '\0';
		ctl++;
		if (!strcmp(ctl, ""))
			snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", cg);
		else if (strstr(ctl, "memory"))
			snprintf(path, sizeof(path),
				 "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", cg);
		else
			continue;
		lf = fopen(path, "re");
		if (!lf)
			continue;
		if (fgets(line, sizeof(line), lf) && sscanf(line, "%llu", &v) == 1)
			limit = v; /* "max": none */
		fclose(lf);
	}
	fclose(f);
	return limit;
}

struct crun__server *crun__server_create(uv_loop_t *loop, const struct crun__server_opts *opts)
{
	struct crun__server *srv = calloc(1, sizeof(*srv));
	struct crun__store_limits store_limits;
	uint32_t seed;

	if (!srv)
		return NULL;
	srv->loop = loop;
	if (opts)
		srv->limits = opts->limits;
	else
		crun__server_limits_default(&srv->limits);
	/* A frame needs at least a header and a minimal payload. */
	if (srv->limits.max_conn_buffer < CRUN__NETIO_RBUF_MIN)
		srv->limits.max_conn_buffer = CRUN__NETIO_RBUF_MIN;
	/* libuv buffers carry an unsigned int length. */
	if (srv->limits.max_conn_buffer > 2ull * CRUN_WIRE_MAX_PAYLOAD)
		srv->limits.max_conn_buffer = 2ull * CRUN_WIRE_MAX_PAYLOAD;
	if (srv->limits.max_connections == 0)
		srv->limits.max_connections = 1;
	if (srv->limits.handshake_timeout_ms == 0)
		srv->limits.handshake_timeout_ms = 1;
	if (!srv->limits.max_total_buffer)
		srv->limits.max_total_buffer = crun__budget_default(phys_memory(), cgroup_memory());
	if (srv->limits.max_total_buffer < CRUN__BUDGET_MIN)
		srv->limits.max_total_buffer = CRUN__BUDGET_MIN;
	if (srv->limits.max_conn_buffer > srv->limits.max_total_buffer)
		srv->limits.max_conn_buffer = srv->limits.max_total_buffer;
	srv->budget.limit = srv->limits.max_total_buffer;
	if (!srv->limits.max_tcpstore || srv->limits.max_tcpstore > srv->limits.max_connections)
		srv->limits.max_tcpstore = srv->limits.max_tcpstore
						   ? srv->limits.max_connections
						   : srv->limits.max_connections / 2;
	crun__admit_clamp(srv->limits.max_connections, srv->limits.max_total_buffer,
			  PREAUTH_CONN_BYTES, &srv->limits.max_preauth,
			  &srv->limits.max_preauth_per_source);
	for (int k = 0; k < REF_KINDS; k++) {
		srv->refuse_log[k].burst =
			k == REF_LIFECYCLE ? LIFECYCLE_LOG_BURST : REFUSE_LOG_BURST;
		srv->refuse_log[k].period_ms = REFUSE_LOG_PERIOD_MS;
	}
	crun__list_init(&srv->conns);
	crun__list_init(&srv->preauth);
	crun__htable_init(&srv->sources);
	srv->scratch = malloc(SCRATCH_SIZE);
	srv->items = malloc(ITEMS_MIN * sizeof(*srv->items));
	srv->items_cap = ITEMS_MIN;
	if (!srv->scratch || !srv->items)
		goto out_free;
	srv->caps = CRUN_WIRE_F_RDZV_EXCL | CRUN_WIRE_F_LIST_PAGED | CRUN_WIRE_F_RDZV_RESUME;
	/* Test hook, for the compatibility tests only: behave as a store
	 * older than the exclusion items and "stop" (no capability; a JOIN
	 * of 14 items or a FAIL of 2 is a protocol error). */
	if (getenv("CRUN_TEST_RDZV_OLD_STORE"))
		srv->caps = 0;
	/* Test hook: behave as a store without paged LIST. */
	if (getenv("CRUN_TEST_OLD_LIST"))
		srv->caps &= ~CRUN_WIRE_F_LIST_PAGED;
	if (opts && opts->embedded)
		srv->caps |= CRUN_WIRE_F_EMBEDDED;
	if (opts) {
		srv->quiet = opts->quiet;
		srv->token_hint = opts->token_hint;
		srv->require_token = opts->require_token;
		srv->tcpstore = opts->tcpstore;
	}
	if (opts && opts->token && opts->token_len) {
		srv->token = malloc(opts->token_len);
		if (!srv->token)
			goto out_free;
		memcpy(srv->token, opts->token, opts->token_len);
		srv->token_len = opts->token_len;
	}
	store_limits.max_key_size = srv->limits.max_key_size;
	store_limits.max_value_size = srv->limits.max_value_size;
	store_limits.max_keys_per_run = srv->limits.max_keys_per_run;
	store_limits.max_sub_bytes = srv->limits.max_conn_buffer;
	if (crun__wire_random((uint8_t *)&seed, sizeof(seed)) < 0 ||
	    crun__wire_random((uint8_t *)&srv->seed, sizeof(srv->seed)) < 0)
		goto out_free_token;
	srv->store = crun__store_create(&store_limits, seed, &store_ops, srv);
	if (!srv->store)
		goto out_free_token;
	srv->rdzv.loop = loop;
	srv->rdzv.ops = &round_ops;
	srv->rdzv.ctx = srv;
	if (uv_tcp_init(loop, &srv->listener) < 0)
		goto out_free_store;
	uv_timer_init(loop, &srv->wait_timer); /* cannot fail */
	uv_timer_init(loop, &srv->sweep);
	uv_check_init(loop, &srv->accept_check);
	srv->listener.data = srv;
	srv->wait_timer.data = srv;
	srv->sweep.data = srv;
	srv->accept_check.data = srv;
	srv->wait_deadline = UINT64_MAX;
	srv->open_handles = 4;
	uv_timer_start(&srv->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
	uv_unref((uv_handle_t *)&srv->sweep);
	uv_check_start(&srv->accept_check, on_accept_check);
	uv_unref((uv_handle_t *)&srv->accept_check);
	fd_reserve_init(srv);
	return srv;

out_free_store:
	crun__store_destroy(srv->store);
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

int crun__server_listen(struct crun__server *srv, const char *host, int port, char *err,
			size_t errlen)
{
	bool loopback, used;
	char shown[320];
	int rc;

	if (!host || !*host)
		host = "0.0.0.0";
	if (srv->listening || srv->listen_failed) {
		crun__format_endpoint(shown, sizeof(shown), host, port);
		snprintf(err, errlen, "cannot listen on '%s': the server is already set up", shown);
		return -EALREADY;
	}
	rc = crun__net_listen(&srv->listener, host, port, on_connection, &srv->port, &loopback,
			      &used, err, errlen);
	if (rc < 0) {
		srv->listen_failed = used;
		return rc;
	}
	srv->listening = true;
	if (!srv->token && !loopback && srv->require_token) {
		crun__format_endpoint(shown, sizeof(shown), host, srv->port);
		snprintf(err, errlen,
			 "refusing to listen on %s without a token (--require-token): set %s",
			 shown, srv->token_hint ? srv->token_hint : "--token-file or CRUN_TOKEN");
		return -ENOKEY;
	}
	if (!srv->token && !loopback) {
		crun__format_endpoint(shown, sizeof(shown), host, srv->port);
		crun__warn("listening on %s without a token: anyone who can reach this port can "
			   "join and change the job's keys; set %s",
			   shown, srv->token_hint ? srv->token_hint : "--token-file or CRUN_TOKEN");
	}
	if (srv->tcpstore && !loopback) {
		crun__format_endpoint(shown, sizeof(shown), host, srv->port);
		crun__log(
			srv->quiet ? CRUN_LOG_INFO : CRUN_LOG_WARN,
			"serving PyTorch TCPStore clients on %s: they cannot authenticate; anyone "
			"who can reach this port can read and change their keys (not crun's)",
			shown);
	}
	return 0;
}

uint64_t crun__server_tcpstore_clear(struct crun__server *srv)
{
	uint64_t n = crun__store_clear_run(srv->store, (const uint8_t *)CRUN__TCPSTORE_RUN,
					   CRUN__TCPSTORE_RUN_LEN);

	flush_dirty(srv); /* what the deletes told watchers, if any */
	return n;
}

int crun__server_port(const struct crun__server *srv)
{
	return srv && srv->listening ? srv->port : 0;
}

void crun__server_set_journal(struct crun__server *srv, struct crun__journal_file *journal)
{
	srv->rdzv.journal = journal;
}

int crun__server_set(struct crun__server *srv, const char *run_id, const char *key, const void *val,
		     size_t len)
{
	struct crun__wire_item items[2] = {
		{(const uint8_t *)key, (uint32_t)strlen(key)},
		{(const uint8_t *)val, (uint32_t)len},
	};
	struct crun__wire_msg m = {.type = CRUN_WIRE_SET, .count = 2, .items = items};
	uint32_t idlen;
	const char *joined;
	int rc;

	if (!srv || !srv->store)
		return -ENOTCONN;
	if (len > srv->limits.max_value_size || items[0].len > srv->limits.max_key_size ||
	    !items[0].len)
		return -E2BIG;
	joined = srv->self_joined ? crun__store_run_id(&srv->self, &idlen) : NULL;
	if (joined && strcmp(joined, run_id)) {
		crun__store_leave(srv->store, &srv->self);
		srv->self_joined = false;
	}
	if (!srv->self_joined) {
		crun__store_client_init(&srv->self, "self");
		rc = crun__store_join(srv->store, &srv->self, (const uint8_t *)run_id,
				      (uint32_t)strlen(run_id));
		if (rc < 0)
			return rc;
		srv->self_joined = true;
	}
	rc = crun__store_apply(srv->store, &srv->self, &m, uv_now(srv->loop));
	flush_dirty(srv); /* what the change told watchers and waiters */
	return rc;
}

void crun__server_set_disconnect_cb(struct crun__server *srv, crun__server_disconnect_cb cb,
				    void *arg)
{
	srv->disconnect_cb = cb;
	srv->disconnect_arg = arg;
}

uint32_t crun__server_connections(const struct crun__server *srv)
{
	return srv ? srv->nconns : 0;
}

uint64_t crun__server_total_buffer(const struct crun__server *srv)
{
	return srv->budget.limit;
}

static void on_listener_closed(uv_handle_t *h)
{
	handle_closed(h->data);
}

static void free_source(struct crun__hnode *n, void *arg)
{
	(void)arg;
	free(container_of(n, struct source, node));
}

void crun__server_destroy(struct crun__server *srv, void (*done)(void *arg), void *arg)
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
	crun__store_destroy(srv->store);
	srv->store = NULL;
	/* The connections go without leaving their sources. */
	crun__htable_clear(&srv->sources, free_source, NULL);
	for (struct crun__list *l = srv->conns.next; l != &srv->conns; l = l->next) {
		struct conn *c = container_of(l, struct conn, link);

		c->state = CONN_CLOSING;
		close_handles(c);
	}
	uv_close((uv_handle_t *)&srv->wait_timer, on_listener_closed);
	uv_close((uv_handle_t *)&srv->sweep, on_listener_closed);
	uv_close((uv_handle_t *)&srv->accept_check, on_listener_closed);
	uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
}

/* Asynchronous store client on a libuv loop, for crun's agent.
 *
 * libcrun's client (include/crun/store.h) blocks; the agent cannot, since
 * its loop also supervises workers and may host the store itself (then the
 * server and this client share one loop). This client speaks the same
 * protocol with the same codec (wire.h) and handshake (hello.h), without
 * blocking: requests are sent at once and their replies delivered to
 * callbacks; pushed frames (NOTIFY, RDZV_EVENT) go to the event callback.
 *
 * Lifecycle: create -> connect (once) -> connect_cb(0) -> requests ... ->
 * LOST (optional) -> destroy. The client connects at most once and never
 * reconnects: to reach the store again, the agent creates a new one.
 *
 * Liveness: with keepalive_interval_ms > 0 the client sends PING every
 * interval; when no byte at all has arrived for interval x max_attempt it
 * declares the store lost. A lost connection (EOF, reset, keep-alive
 * timeout, a malformed frame, an ERROR the server sends before closing) is
 * reported once: every pending request is first failed with the error,
 * then the event callback runs with type LOST. Errors and messages:
 *   -ECONNRESET  "connection to the store at '10.0.0.1:29400' closed"
 *                (or "... reset")
 *   -EPIPE       "connection to the store at '...' failed: broken pipe"
 *   -ETIMEDOUT   "no reply from the store at '...' for 15s"
 *   -EPROTO      "bad frame from the store at '...': <why>"
 *   the server's errno, with its message, when it said why it closed.
 * After LOST, requests fail with -ENOTCONN.
 *
 * All callbacks run on the loop's thread, never from inside a call to a
 * function here (except destroy, which runs none). A callback may call any
 * function here, including crun__aclient_destroy (then no further callback
 * runs). The embedder must ignore SIGPIPE, as for the server (server.h).
 * Not thread-safe: use the client from the loop's thread only. */
#ifndef CRUN_RENDEZVOUS_ACLIENT_H
#define CRUN_RENDEZVOUS_ACLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "rendezvous/wire.h"

struct crun__aclient;

struct crun__aclient_opts {
	const char *host; /* name or address (IPv4/IPv6, no brackets) */
	int port;	  /* 1..65535 */
	const char *run_id;
	const void *token; /* NULL: none; copied */
	size_t token_len;
	int64_t connect_timeout_ms;    /* keep retrying refused/unreachable
					* connections (10 ms backoff doubling to
					* 1 s) this long; 0: try once (each
					* address of host once, the whole attempt
					* bounded by 10 s) */
	int64_t keepalive_interval_ms; /* 0: no keep-alive */
	int keepalive_max_attempt;     /* >= 1 (ignored without keep-alive) */
	uint32_t max_frame;	       /* largest reply payload accepted, in bytes;
					* 0: 64 MiB. A larger frame loses the
					* connection with -EPROTO. */
};

enum crun__aclient_event_type {
	CRUN_ACLIENT_EV_LOST = 1,   /* connection lost; err and message set */
	CRUN_ACLIENT_EV_NOTIFY = 2, /* a NOTIFY frame; msg set (id: the WATCH's) */
	CRUN_ACLIENT_EV_RDZV = 3,   /* an RDZV_EVENT frame; msg set (id: the JOIN's) */
};

/* msg and its items are valid only during the callback; err is 0 and
 * message NULL for NOTIFY and RDZV, msg NULL for LOST. */
typedef void (*crun__aclient_event_cb)(struct crun__aclient *c, enum crun__aclient_event_type type,
				       int err, const char *message,
				       const struct crun__wire_msg *msg, void *arg);

/* Called exactly once when connect finishes: status 0 (message NULL), or a
 * negative errno with a one-line message:
 *   -EACCES      "authentication failed" (the server's words; also when the
 *                store asks for a token and there is none, or cannot prove
 *                it knows ours); never retried
 *   -ETIMEDOUT   "cannot connect to the store at 'node0:29400' within 30s:
 *                connection refused" after connect_timeout_ms of retrying
 *   -ECONNREFUSED ... (connect_timeout_ms 0) "cannot connect to the store
 *                at '...': connection refused"
 *   -EMFILE      the store is at its connection limit (its message)
 *   -EPROTO / -EPROTONOSUPPORT  not a crun store / another version.
 * Not called when the client is destroyed first. */
typedef void (*crun__aclient_connect_cb)(struct crun__aclient *c, int status, const char *message,
					 void *arg);

/* Called exactly once per request (unless the client is destroyed first):
 * status 0 with the reply (OK, VALUE, INT, VALUES; message NULL), or a
 * negative errno: the ERROR frame's errno (message = the server's text,
 * reply = the ERROR frame), -ETIMEDOUT (timeout_ms passed; "no reply from
 * the store at '...' to GET within 100ms"; a later reply is dropped), or
 * the connection's error when it was lost (reply NULL then). reply and its
 * items are valid only during the callback. */
typedef void (*crun__aclient_reply_cb)(struct crun__aclient *c, int status, const char *message,
				       const struct crun__wire_msg *reply, void *arg);

/* NULL on bad options (no host, port outside 1..65535, no run id, negative
 * timeouts, keep-alive without max_attempt >= 1, a token of length 0) or
 * allocation failure. Connects nothing; event_cb may be NULL. */
struct crun__aclient *crun__aclient_create(uv_loop_t *loop, const struct crun__aclient_opts *opts,
					   crun__aclient_event_cb event_cb, void *arg);

/* Starts connecting (resolve, connect with retry, preambles, HELLO with
 * mutual HMAC); cb reports the outcome. Names are resolved with
 * uv_getaddrinfo (again before each retry), literals directly; every
 * address is tried in order. 0, or a negative errno when it cannot even
 * start (-EINVAL: no cb; -EALREADY: connect was called before). */
int crun__aclient_connect(struct crun__aclient *c, crun__aclient_connect_cb cb, void *arg);

/* Sends a request (any request type but HELLO). msg->id is ignored (the
 * client assigns one, returned through *id when id is not NULL: it is the
 * id RDZV_EVENT and NOTIFY frames carry). msg and its items are copied
 * before the call returns. timeout_ms <= 0: no client-side timeout.
 * Returns 0 (cb will run) or a negative errno (cb will not run): -ENOTCONN
 * before connect_cb(0) or after LOST, -EINVAL for a frame that breaks
 * wire.h's rules, -E2BIG above the protocol's size cap, -ENOMEM. */
int crun__aclient_request(struct crun__aclient *c, const struct crun__wire_msg *msg,
			  int64_t timeout_ms, crun__aclient_reply_cb cb, void *arg, uint32_t *id);

/* Whether the store of the current connection advertised flag (a
 * CRUN_WIRE_F_* capability bit of its preamble). Meaningful from
 * connect_cb(0) until LOST; false before. */
bool crun__aclient_store_has(const struct crun__aclient *c, uint16_t flag);

/* The store's address as "HOST:PORT" ("[::1]:29400" for IPv6): the
 * numeric peer address once TCP connected, before that host and port as
 * given. Valid until destroy. */
const char *crun__aclient_peer(const struct crun__aclient *c);

/* Closes the connection; pending requests and an unfinished connect get no
 * callback. Frees memory in the close callbacks, so the loop must run
 * afterwards for the memory to go. NULL is allowed. */
void crun__aclient_destroy(struct crun__aclient *c);

#endif

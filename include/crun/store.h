/* libcrun: client of the crun rendezvous store.
 *
 * A struct crun_store is one TCP connection to a store server (crun's agent
 * or crun-rdzvd) scoped to one run id. Calls are blocking, each bounded by
 * a timeout in milliseconds (a negative or zero timeout means the handle's
 * default, see crun_store_opts.timeout_ms; the exceptions, where 0 means
 * "do not wait", are named at their functions). Every action returns 0 (or
 * a documented non-negative result) on success and a negative errno on
 * failure:
 *   -ENOENT       the key does not exist (get without waiting)
 *   -ETIMEDOUT    the call did not finish in time
 *   -ECONNREFUSED / -EHOSTUNREACH / -ECONNRESET / -EPIPE  network failures
 *   -EACCES       authentication failed (wrong or missing token)
 *   -EPROTO       the peer broke the protocol
 *   -EPROTONOSUPPORT  the server speaks another protocol version
 *   -E2BIG        key or value larger than the server allows
 *   -ENOSPC       the run holds as many keys as the server allows
 *   -EMFILE       the server is at its connection limit
 *   -EINVAL       bad argument, or ADD on a value that is not a number
 *   -ERANGE       ADD would overflow an int64
 *   -ENOTCONN     next_event without waiting on a handle that is not connected
 * crun_store_errmsg() gives a one-line message for the last failure: the
 * server's own message for a refusal ("authentication failed"), else one
 * made here ("cannot connect to '10.0.0.1:29400': connection refused").
 *
 * A call that times out leaves the handle usable: a reply that arrives
 * later is recognised by its request id and dropped. A call that waits on
 * the server (get and mget with wait_ms, wait) tells the server how long to
 * wait and gives up itself half a second after that.
 *
 * A handle is not thread-safe: use one per thread. Calls connect lazily:
 * crun_store_connect is optional. When the connection drops, the next call
 * reconnects (with the same bounded retry as crun_store_connect, bounded
 * also by the call's own timeout), re-registers watches, and retries
 * requests that are safe to repeat; add, append and cas whose reply was
 * lost return -ECONNRESET instead, because they may have been applied.
 * Changes made while the connection was down are not replayed as events,
 * and EPHEMERAL keys set on the old connection are gone (the server deletes
 * them when it closes).
 *
 * Authentication is mutual: with a token, the client proves it knows the
 * token (HMAC of the server's nonce and the run id) and checks that the
 * server does too (HMAC of the client's nonce and the run id), failing
 * with -EACCES otherwise. A client that has a token refuses a server that
 * asks for none, since it cannot prove anything: "store at 'E' did not
 * prove it knows the token: refusing it (a store without a token, or an
 * impostor)". A server that asks for a token when the client has none
 * fails at once with -EACCES. -EACCES is never retried. */
#ifndef CRUN_STORE_H
#define CRUN_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <crun/export.h>

#ifdef __cplusplus
extern "C" {
#endif

struct crun_store;

struct crun_store_opts {
	const char *host;   /* name or address; NULL: "127.0.0.1" */
	int port;	    /* 0: 29400 */
	const char *run_id; /* NULL: "default" */
	const void *token;  /* NULL: no authentication */
	size_t token_len;
	int connect_timeout_ms; /* total time to keep retrying; 0: 30000 */
	int timeout_ms;		/* default per-call timeout; 0: 300000 */
	size_t max_event_bytes; /* unread watch events held at most, in bytes;
				 * 0: 64 MiB. See crun_store_watch. */
};

/* A value returned by the store: data is malloc'd, NUL-terminated one byte
 * past len (so text values can be used as strings); free with
 * crun_store_buf_finish(). */
struct crun_store_buf {
	uint8_t *data;
	size_t len;
};
CRUN_EXPORT void crun_store_buf_finish(struct crun_store_buf *buf);

/* Allocates a handle; copies everything in opts. Connects nothing.
 * Returns NULL on allocation failure or invalid options (a port outside
 * 0-65535, a negative timeout, an empty host or run id, a token of length
 * 0). */
CRUN_EXPORT struct crun_store *crun_store_create(const struct crun_store_opts *opts);

/* Fills opts from the environment crun sets for workers: CRUN_STORE
 * (HOST:PORT, [V6ADDR]:PORT or HOST; default 127.0.0.1:29400),
 * CRUN_RUN_ID (default "default"), CRUN_TOKEN or else CRUN_TOKEN_FILE (a
 * file holding the token; trailing newlines are stripped),
 * CRUN_CONNECT_TIMEOUT and CRUN_TIMEOUT (durations like 30, 2.5s, 500ms).
 * The strings stay valid until the next call (a token read from a file is
 * wiped then); not thread-safe. 0 or a negative errno (-EINVAL for a
 * malformed variable, the file's error for an unreadable token file). */
CRUN_EXPORT int crun_store_opts_from_env(struct crun_store_opts *opts);
/* The same, writing a one-line reason naming the variable to err (when
 * not NULL) on failure. */
CRUN_EXPORT int crun_store_opts_from_env_err(struct crun_store_opts *opts, char *err,
					     size_t errlen);

/* Connects and authenticates, retrying refused or unreachable connections
 * and connections reset during the handshake with exponential backoff
 * (10 ms doubling to 1 s) until connect_timeout_ms has passed.
 * Authentication failures and other refusals by the server (-EMFILE,
 * -EPROTONOSUPPORT) are not retried. Returns 0 at once when connected; on
 * a handle whose connection dropped it reconnects and re-registers the
 * watches. 0 or a negative errno (the last attempt's error, or -ETIMEDOUT
 * when the time ran out inside an attempt). */
CRUN_EXPORT int crun_store_connect(struct crun_store *s);

/* Closes the connection and frees the handle, wiping its copy of the
 * token. NULL is allowed. */
CRUN_EXPORT void crun_store_destroy(struct crun_store *s);

/* One line describing the last failure on this handle ("" if none). */
CRUN_EXPORT const char *crun_store_errmsg(const struct crun_store *s);

/* Text of a crun store error code (a negative errno). */
CRUN_EXPORT const char *crun_store_strerror(int code);

/* Flags */
#define CRUN_STORE_EPHEMERAL 0x01     /* set: delete the key when this connection closes */
#define CRUN_STORE_EXPECT_ABSENT 0x02 /* cas: swap only if the key is missing */

/* Sets key to len bytes at val (any bytes; keys are non-empty C strings).
 * set_flags takes CRUN_STORE_EPHEMERAL, nothing else (-EINVAL). */
CRUN_EXPORT int crun_store_set(struct crun_store *s, const char *key, const void *val, size_t len,
			       int timeout_ms);
CRUN_EXPORT int crun_store_set_flags(struct crun_store *s, const char *key, const void *val,
				     size_t len, int flags, int timeout_ms);

/* Gets a value into *out (emptied first; free with crun_store_buf_finish).
 * wait_ms == 0: -ENOENT at once when the key is missing (the call itself
 * bounded by the handle's default timeout); wait_ms > 0: waits up to
 * wait_ms for it to be set (-ETIMEDOUT); wait_ms < 0: waits up to the
 * handle's default timeout. */
CRUN_EXPORT int crun_store_get(struct crun_store *s, const char *key, struct crun_store_buf *out,
			       int wait_ms);

/* 1 when every key exists (also for n == 0), 0 when one does not, or a
 * negative errno. */
CRUN_EXPORT int crun_store_check(struct crun_store *s, const char *const *keys, size_t n,
				 int timeout_ms);

/* Waits until every key exists: 0, -ETIMEDOUT, or another error.
 * timeout_ms == 0 checks once without waiting; < 0 waits up to the
 * handle's default timeout. No keys: 0 at once. */
CRUN_EXPORT int crun_store_wait(struct crun_store *s, const char *const *keys, size_t n,
				int timeout_ms);

/* Adds delta to the decimal integer stored at key (missing: 0) and stores
 * the new value in *out (may be NULL). -EINVAL when the value is not a
 * decimal integer, -ERANGE on overflow. Not repeated after a lost reply. */
CRUN_EXPORT int crun_store_add(struct crun_store *s, const char *key, int64_t delta, int64_t *out,
			       int timeout_ms);

/* Compare-and-set. Replaces the value by desired when it equals expected
 * (or, with CRUN_STORE_EXPECT_ABSENT, when the key is missing; expected is
 * then ignored). *current (may be NULL) receives the value stored
 * afterwards (desired when the swap happened; for a missing key and a
 * non-empty expected, expected, as torch's TCPStore answers). Returns 1
 * when the swap happened, 0 when it did not, or a negative errno. */
CRUN_EXPORT int crun_store_cas(struct crun_store *s, const char *key, const void *expected,
			       size_t elen, const void *desired, size_t dlen, int flags,
			       struct crun_store_buf *current, int timeout_ms);

/* 1 when the key existed and was deleted, 0 when it did not exist. */
CRUN_EXPORT int crun_store_delete(struct crun_store *s, const char *key, int timeout_ms);

/* Appends val to the value at key (creating it when missing). Not
 * repeated after a lost reply. */
CRUN_EXPORT int crun_store_append(struct crun_store *s, const char *key, const void *val,
				  size_t len, int timeout_ms);

/* Number of keys in the run, in *out (may be NULL). */
CRUN_EXPORT int crun_store_count(struct crun_store *s, int64_t *out, int timeout_ms);

/* Gets n values into vals[0..n). wait_ms as for crun_store_get (without
 * waiting, one missing key fails the call with -ENOENT). On failure
 * nothing is left allocated in vals. */
CRUN_EXPORT int crun_store_mget(struct crun_store *s, const char *const *keys, size_t n,
				struct crun_store_buf *vals, int wait_ms);

/* Sets n keys at once, all or nothing. */
CRUN_EXPORT int crun_store_mset(struct crun_store *s, const char *const *keys,
				const void *const *vals, const size_t *lens, size_t n,
				int timeout_ms);

/* Lists the run's keys, sorted, however many the run holds. *keys is a
 * malloc'd array of n malloc'd strings; free with crun_store_list_free.
 * A store that pages LIST is asked one page (up to 65,536 keys) at a time,
 * each page after the last key of the one before, timeout_ms bounding each
 * page: a key present through the whole call is listed exactly once, one
 * set or deleted meanwhile may or may not be. */
CRUN_EXPORT int crun_store_list(struct crun_store *s, char ***keys, size_t *n, int timeout_ms);
CRUN_EXPORT void crun_store_list_free(char **keys, size_t n);

/* Round trip to the server. Returns the round-trip time in microseconds
 * (>= 0) or a negative errno. */
CRUN_EXPORT int64_t crun_store_ping(struct crun_store *s, int timeout_ms);

/* Watches: after crun_store_watch, every change of key is queued as an
 * event; crun_store_next_event returns the oldest, waiting up to
 * timeout_ms for one (0: do not wait; -ETIMEDOUT when none came; < 0: the
 * handle's default timeout). Events that arrive while another call is
 * running are queued. The queue holds at most opts.max_event_bytes (keys,
 * values and about 50 bytes of bookkeeping per event): when an event does
 * not fit, one CRUN_STORE_EV_OVERFLOW (key "", empty value) is queued in
 * its place, like inotify's IN_Q_OVERFLOW, and every event after it is
 * dropped until the OVERFLOW has been returned; then read the watched keys
 * again. Watching a key twice is one watch.
 * While waiting, next_event reconnects a dropped connection like any call.
 * With timeout 0 it never connects: it returns -ECONNRESET when it finds
 * the connection closed and -ENOTCONN while it stays down; call
 * crun_store_connect (or any other call) to reconnect and re-watch.
 * *ev is owned by the caller: free it with crun_store_event_finish. */
enum crun_store_event_type {
	CRUN_STORE_EV_SET = 1,
	CRUN_STORE_EV_DELETE = 2,
	CRUN_STORE_EV_OVERFLOW = 3, /* events were dropped: the queue was full */
};
struct crun_store_event {
	enum crun_store_event_type type;
	char *key;		     /* malloc'd */
	struct crun_store_buf value; /* empty for DELETE */
};
CRUN_EXPORT void crun_store_event_finish(struct crun_store_event *ev);

CRUN_EXPORT int crun_store_watch(struct crun_store *s, const char *key, int timeout_ms);
CRUN_EXPORT int crun_store_unwatch(struct crun_store *s, const char *key, int timeout_ms);
CRUN_EXPORT int crun_store_next_event(struct crun_store *s, struct crun_store_event *ev,
				      int timeout_ms);

/* The connection's file descriptor (-1 when not connected), for callers
 * that poll it themselves: when it is readable, call next_event with a
 * timeout of 0. */
CRUN_EXPORT int crun_store_fd(const struct crun_store *s);

#ifdef __cplusplus
}
#endif

#endif

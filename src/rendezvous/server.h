/* The crun store server: a TCP key-value store on a caller's libuv loop.
 *
 * The same code runs embedded in crun's agent and alone in crun-rdzvd. It
 * speaks the protocol in wire.h, keeps keys per run id, answers waiting
 * GET/WAIT/MGET requests when their keys arrive (timers, never polling),
 * pushes NOTIFY frames to watchers, enforces the limits below, and drops a
 * misbehaving client without disturbing anyone else. The key-value
 * semantics are store.h's, which does no I/O; this server is its libuv edge.
 *
 * The server sends its preamble once the client's first byte is in (a
 * refusal at accept, out of descriptors or connections, sends it and its
 * error at once): crun's clients send theirs without waiting, and a first
 * byte other than crun's magic makes the connection a TCPStore one
 * (opts.tcpstore), served in tcpstore.h's protocol in the namespace
 * CRUN__TCPSTORE_RUN. Such a connection is unauthenticated (it counts
 * against max_preauth and the handshake timeout, and its first request
 * must fit the small frame cap of a HELLO, 8 KiB) until its first valid
 * request, then counts as any other. A connection that sends nothing
 * within the handshake timeout is taken, when TCPStore is served, for
 * PyTorch 1.13's silent callback connection and kept, counting as any
 * other too. Every budget below applies to TCPStore connections except
 * the idle timeout (a TCPStore client never reconnects). A protocol error,
 * an error of the store or an opcode crun does not serve closes one (the
 * protocol has no error reply), with a rate-limited info line.
 *
 * Logging: one info line per connection event (accepted, authenticated,
 * refused, closed); one debug line per request when the log level is
 * debug.
 *
 * The embedder must ignore SIGPIPE (signal(SIGPIPE, SIG_IGN)): a peer that
 * vanishes while a reply is being written must cost a connection, not the
 * process.
 *
 * Keys: an ephemeral key (SET with CRUN_WIRE_FL_EPHEMERAL) belongs to the
 * connection that set it last; a later plain SET or MSET of the key by
 * anyone makes it an ordinary key again. When the owner closes, its keys
 * are deleted and watchers get a delete NOTIFY. A run's memory is freed
 * once it has no keys and no connections. */
#ifndef CRUN_RENDEZVOUS_SERVER_H
#define CRUN_RENDEZVOUS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct crun__server;

/* The upper bounds, in seconds, of the round-duration histogram's buckets
 * (crun_rdzv_round_formation_seconds). */
#define CRUN_SRV_ROUND_BUCKETS 10
extern const double crun__server_round_bounds[CRUN_SRV_ROUND_BUCKETS];

struct crun__server_limits {
	uint32_t max_key_size;	       /* bytes; default 4096 */
	uint32_t max_value_size;       /* bytes; default 16 MiB */
	uint64_t max_keys_per_run;     /* default 1000000 */
	uint32_t max_connections;      /* default 4096 */
	uint64_t max_conn_buffer;      /* bytes buffered per connection, in and
					* out each; default 64 MiB; clamped to
					* 4 KiB .. 2 GiB. Also caps one frame. */
	uint32_t handshake_timeout_ms; /* connect -> HELLO done; default 10000 */
	/* Bytes buffered across every connection, in and out, counted as
	 * allocated. 0 (the default): a quarter of physical memory or of the
	 * cgroup's memory limit, whichever is lower, at least 1 MiB, computed
	 * by crun__server_create. max_conn_buffer is clamped to it. A
	 * connection whose buffers would grow past it gets an ENOBUFS error
	 * and is closed. */
	uint64_t max_total_buffer;
	/* Connections not authenticated yet (HELLO not done), in all and per
	 * source address; defaults 1024 and 256, clamped so that they never
	 * fill max_connections alone (budget.h). When one is full the oldest
	 * unauthenticated connection (of that source, else of any) gets an
	 * ECONNABORTED error and is closed to make room; authenticated connections
	 * never count against them. */
	uint32_t max_preauth;
	uint32_t max_preauth_per_source;
	/* From the first byte of a frame of an authenticated connection to
	 * its last: this plus one second per MiB announced; default 30000;
	 * 0: none. */
	uint32_t request_timeout_ms;
	/* An authenticated connection with no request arriving, no reply
	 * waiting, no wait, watch or ephemeral key and no rendezvous
	 * keep-alive is closed after this long without a frame; default
	 * 3600000 (libcrun reconnects on its next call); 0: never. */
	uint32_t idle_timeout_ms;
	/* TCPStore connections (opts.tcpstore) past their first request, at
	 * most; one more is closed at its first request. 0 (the default):
	 * half of max_connections, so that crun's own clients always keep
	 * the other half; clamped to max_connections. */
	uint32_t max_tcpstore;
};

/* Fills limits with the defaults above. */
void crun__server_limits_default(struct crun__server_limits *limits);

struct crun__server_opts {
	struct crun__server_limits limits;
	const void *token; /* NULL: no authentication; copied */
	size_t token_len;
	/* Embedded use (crun's agent): connection lifecycle lines (accepted,
	 * joined, closed) at debug instead of info; refusals, authentication
	 * failures and rounds stay at info. */
	bool quiet;
	/* How the user gives this server a token, for the warning about a
	 * non-loopback store without one ("--rdzv-conf token_file=FILE").
	 * NULL: crun-rdzvd's "--token-file or CRUN_TOKEN". Not copied: a
	 * string that lives as long as the server. */
	const char *token_hint;
	/* Refuse to listen on an address that is not loopback without a
	 * token (crun-rdzvd --require-token) instead of warning. */
	bool require_token;
	/* Runs inside a crun agent: the preamble says so
	 * (CRUN_WIRE_F_EMBEDDED), and agents do not wait for it to come
	 * back. */
	bool embedded;
	/* Also serve PyTorch's c10d TCPStore protocol (tcpstore.h) on the
	 * same port: a connection whose first bytes are not crun's
	 * preamble is read as TCPStore. Those clients cannot authenticate;
	 * they share one namespace that no crun run can see or name. */
	bool tcpstore;
};

/* Hook for embedders (the agent's rendezvous): called on the loop's
 * thread when a connection that completed HELLO closes, with its run id
 * and its peer address ("1.2.3.4:5678" or "[::1]:5678"), after its
 * ephemeral keys were deleted. Both strings are valid during the call
 * only. Not called from crun__server_destroy. The hook must not destroy
 * the server. */
typedef void (*crun__server_disconnect_cb)(struct crun__server *srv, const char *run_id,
					   const char *peer, void *arg);

/* Creates a server on loop. Listens on nothing yet. NULL on failure. */
struct crun__server *crun__server_create(uv_loop_t *loop, const struct crun__server_opts *opts);

/* Binds and listens on host:port (port 0 picks a free port; see
 * crun__server_port). host may be an IPv4 or IPv6 literal or a name.
 * Logs the loud warning when the address is not loopback and there is no
 * token; with opts.require_token that is -ENOKEY instead (the socket is
 * closed with the server). Returns 0 or a negative errno (-EADDRINUSE,
 * -ENOKEY ...), with a message in err. */
int crun__server_listen(struct crun__server *srv, const char *host, int port, char *err,
			size_t errlen);

/* Deletes every key of the TCPStore namespace (opts.tcpstore): an agent
 * store before the workers of a new attempt start, since PyTorch's clients
 * expect a fresh store each attempt. Returns the number of keys deleted. */
uint64_t crun__server_tcpstore_clear(struct crun__server *srv);

/* The port actually bound (after listen), else 0. */
int crun__server_port(const struct crun__server *srv);

/* Sets key of run run_id to len bytes of val from inside the process (the
 * agent's own status), as a plain SET by a client would: watchers and
 * waiters hear of it. The run then lives as long as the server. 0 when the
 * store applied it or refused it (a refusal for a limit is logged as any
 * client's); -E2BIG for a key or value past the limits; -ENOMEM. */
int crun__server_set(struct crun__server *srv, const char *run_id, const char *key, const void *val,
		     size_t len);

void crun__server_set_disconnect_cb(struct crun__server *srv, crun__server_disconnect_cb cb,
				    void *arg);

struct crun__journal_file;

/* Records the rendezvous rounds in journal (journal_file.h; crun-rdzvd
 * --state-dir), and restores runs from it, from now on. journal must
 * outlive srv; stop it (crun__journal_file_stop) before
 * crun__server_destroy, which frees every run without it being over. */
void crun__server_set_journal(struct crun__server *srv, struct crun__journal_file *journal);

/* Why the server refused or closed a connection: the `reason` label of
 * crun_store_refusals_total (crun__server_refusal_name). */
enum crun__server_refusal {
	CRUN_SRV_REF_PROTOCOL,	/* a protocol error (crun's wire) */
	CRUN_SRV_REF_HANDSHAKE, /* no HELLO within the handshake timeout */
	CRUN_SRV_REF_AUTH,	/* authentication failed */
	CRUN_SRV_REF_PREAUTH,	/* closed to admit a newer unauthenticated one */
	CRUN_SRV_REF_CONNS,	/* max_connections reached */
	CRUN_SRV_REF_BUDGET,	/* a buffer budget exceeded */
	CRUN_SRV_REF_SLOW,	/* a frame slower than the request timeout */
	CRUN_SRV_REF_IDLE,	/* the idle timeout */
	CRUN_SRV_REF_TCPSTORE,	/* a TCPStore protocol error, or TCPStore off */
	CRUN_SRV_REF_FDS,	/* out of file descriptors at accept */
	CRUN_SRV_NREFUSALS,
};

/* What the server did since it was created, for the metrics
 * (server_metrics.h). Counters only grow. */
struct crun__server_stats {
	uint64_t accepted; /* connections accepted */
	/* Requests by wire type (crun__wire_type_name), HELLO included,
	 * and TCPStore requests by op (crun__tcpstore_op_name). */
	uint64_t requests[256];
	uint64_t tcpstore_requests[32];
	uint64_t bytes_received, bytes_sent; /* sent: queued to the kernel */
	uint64_t refusals[CRUN_SRV_NREFUSALS];
	/* Rendezvous rounds formed (an open round closed and assigned), and
	 * their durations from the open round's first joiner to then. */
	uint64_t rounds_formed;
	double round_seconds_sum;
	uint64_t round_buckets[CRUN_SRV_ROUND_BUCKETS]; /* by crun__server_round_bounds */
};

const char *crun__server_refusal_name(enum crun__server_refusal r);

/* The stats of srv, live (valid as long as srv). */
const struct crun__server_stats *crun__server_stats(const struct crun__server *srv);

/* Number of open connections. */
uint32_t crun__server_connections(const struct crun__server *srv);

/* The global byte budget in force (max_total_buffer, resolved). */
uint64_t crun__server_total_buffer(const struct crun__server *srv);

/* Stops listening, closes every connection (pending waiters get no
 * reply) and frees everything once the handles have closed; done (may be
 * NULL) runs after the last close callback. Call once; srv is invalid
 * afterwards. */
void crun__server_destroy(struct crun__server *srv, void (*done)(void *arg), void *arg);

#endif

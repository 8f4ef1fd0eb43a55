/* The store server's budgets, decided without I/O: the global byte budget
 * of buffered input and output, the admission of connections that have
 * not authenticated yet, and the deadlines of slow requests and idle
 * connections. server.c feeds these functions counts and times and
 * carries out what they return; tests call them directly. */
#ifndef CRUN_RENDEZVOUS_BUDGET_H
#define CRUN_RENDEZVOUS_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

/* The smallest global budget: one frame of the smallest per-connection
 * buffer, with room to spare. */
#define CRUN__BUDGET_MIN (1u << 20)
/* A frame's slow-request allowance grows by one second per this many
 * bytes announced: a peer must send at least this fast. */
#define CRUN__BUDGET_MIN_RATE (1u << 20)

/* Bytes buffered across every connection: input still being assembled
 * and output not yet written, counted as allocated. */
struct crun__budget {
	uint64_t limit;
	uint64_t used;
};

/* The default limit: a quarter of the memory the process may use, the
 * smaller of phys (physical memory, bytes) and cgroup (the cgroup's
 * memory limit; 0 or UINT64_MAX: none), never below CRUN__BUDGET_MIN.
 * phys 0 (unknown) counts as 4 GiB. */
uint64_t crun__budget_default(uint64_t phys, uint64_t cgroup);

/* True when a holder of old bytes may grow to new within the budget
 * (shrinking always may). */
bool crun__budget_fits(const struct crun__budget *b, uint64_t old, uint64_t new_bytes);

/* Records that a holder's charge moved from old to new bytes. */
void crun__budget_move(struct crun__budget *b, uint64_t old, uint64_t new_bytes);

/* The most a holder of old bytes may hold now: old plus what is left. */
uint64_t crun__budget_room(const struct crun__budget *b, uint64_t old);

/* What to do with a connection just accepted, before it authenticates. */
enum crun__admit {
	CRUN__ADMIT,		  /* take it */
	CRUN__ADMIT_EVICT_SOURCE, /* close the oldest unauthenticated one of its
				   * source, then take it */
	CRUN__ADMIT_EVICT_OLDEST, /* close the oldest unauthenticated one of
				   * any source, then take it */
	CRUN__ADMIT_REFUSE,	  /* every slot is authenticated: refuse it */
};

struct crun__admit_counts {
	uint32_t conns;		 /* open connections, authenticated or not */
	uint32_t max_conns;	 /* limit of conns */
	uint32_t preauth;	 /* unauthenticated connections */
	uint32_t max_preauth;	 /* limit of preauth */
	uint32_t source_preauth; /* unauthenticated connections of the new
				  * one's source address */
	uint32_t max_preauth_source;
};

/* The decision for one more unauthenticated connection: the newest is
 * preferred, since a client that answers the handshake at once is done
 * long before its turn to be evicted comes, while one that holds a
 * connection without answering is the one evicted; authenticated
 * connections are never closed to make room. */
enum crun__admit crun__admit_preauth(const struct crun__admit_counts *in);

/* Clamps the pre-authentication quotas so that they can never fill
 * max_conns, nor a quarter of the byte budget, alone: max_preauth to at
 * most half of max_conns and to budget / 4 / conn_bytes (what one
 * unauthenticated connection may hold at most), at least 1; the
 * per-source quota to at most max_preauth (at least 1). */
void crun__admit_clamp(uint32_t max_conns, uint64_t budget, uint64_t conn_bytes,
		       uint32_t *max_preauth, uint32_t *max_preauth_source);

/* How long a frame announcing len bytes (0: header not in yet) may take
 * to arrive from its first byte: base_ms plus one second per
 * CRUN__BUDGET_MIN_RATE bytes. base_ms 0: no limit (UINT64_MAX). */
uint64_t crun__budget_request_ms(uint64_t base_ms, uint64_t len);

/* What an authenticated connection is doing, for the idle timeout. */
struct crun__idle_state {
	uint64_t now_ms;
	uint64_t last_ms;    /* its last frame in or out */
	uint64_t timeout_ms; /* 0: no idle timeout */
	bool partial;	     /* a frame is arriving (slow-request timer's) */
	bool output;	     /* replies not yet written */
	bool subscribed;     /* waits or watches pending */
	bool owns_keys;	     /* ephemeral keys die with it */
	bool keepalive;	     /* a rendezvous member with keep-alives */
};

/* True when s is idle past its timeout: nothing pending, nothing owned,
 * no keep-alive duty, and no frame for timeout_ms. */
bool crun__idle_expired(const struct crun__idle_state *s);

#endif

/* Rendezvous rounds of one run, inside the store server (internal to
 * src/rendezvous: store_rdzv.c drives it, nothing else includes it).
 *
 * One struct crun__round per run that has seen a rendezvous request. It is
 * an explicit state machine (OPEN, RUNNING, RECOVERING, CLOSED; see rdzv.h
 * for the protocol and the meaning of each state) moved only by
 * crun__round_apply(). The server turns requests and disconnects into
 * events; the round's own timer (last call, join timeouts) makes the
 * others. The round never sees a socket: it queues frames to a peer (an
 * opaque pointer, the server's connection) through ops->send, which must
 * not close or free anything synchronously. A peer pointer is kept only
 * until the LOST event for it, which the server must deliver for every
 * connection of the run that closes. */
#ifndef CRUN_RENDEZVOUS_ROUND_H
#define CRUN_RENDEZVOUS_ROUND_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "rendezvous/journal.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/wire.h"

struct crun__round;

struct crun__round_ops {
	/* Queues one frame to peer. 0, or -ENOBUFS when the frame can never
	 * fit the peer's buffer (the round then answers with an error). */
	int (*send)(void *peer, uint8_t type, uint32_t id, int64_t num,
		    const struct crun__wire_item *items, uint32_t count);
	/* Runs at the end of the round's timer callback, after its events:
	 * the server writes what was queued (and may close connections,
	 * delivering LOST events, and even destroy this round). */
	void (*flush)(void *ctx);
	/* The round opened / finished closing a libuv handle (the server
	 * counts them to know when its destroy is complete). */
	void (*handle_opened)(void *ctx);
	void (*handle_closed)(void *ctx);
	/* NULL, or runs when an OPEN round closes with its members assigned:
	 * ms from its first joiner's arrival to then (for the metrics). */
	void (*formed)(void *ctx, uint64_t ms);
};

enum crun__round_event_type {
	CRUN_ROUND_EV_JOIN,	       /* peer, id, node, conf, peer_addr */
	CRUN_ROUND_EV_LOST,	       /* peer, message: why ("connection closed") */
	CRUN_ROUND_EV_FAIL,	       /* peer, id, num = round, message */
	CRUN_ROUND_EV_DONE,	       /* peer, id, num = round */
	CRUN_ROUND_EV_LAST_CALL,       /* (timer) last_call_ms after min nodes */
	CRUN_ROUND_EV_JOIN_TIMEOUT,    /* (timer) peer: its join timeout passed */
	CRUN_ROUND_EV_COOLED,	       /* (timer) peer: its cool-down passed */
	CRUN_ROUND_EV_RESUME,	       /* peer, id, node, conf (join_timeout_ms is
					* the resume's wait_ms), assignment */
	CRUN_ROUND_EV_RESUME_DEADLINE, /* (timer) the RECOVERING round's deadline
					* passed */
};

struct crun__round_event {
	enum crun__round_event_type type;
	void *peer;
	uint32_t id;
	int64_t num;
	const struct crun__rdzv_node *node; /* JOIN; copied */
	const struct crun__rdzv_conf *conf; /* JOIN; copied */
	const char *peer_addr;		    /* JOIN: the peer's IP as the server sees it,
					     * used when node->addr is empty */
	const char *message;		    /* FAIL, LOST; may be NULL */
	bool stop;			    /* FAIL: the run must not restart */
	/* RESUME: the assignment the resumer holds; copied */
	const struct crun__rdzv_assignment *assignment;
};

/* A round state for the run named run_id (a printable form, for
 * messages; copied), timers on loop. NULL when out of memory. */
struct crun__round *crun__round_create(uv_loop_t *loop, const char *run_id,
				       const struct crun__round_ops *ops, void *ctx);

/* Applies one event (see rdzv.h for each state's answer): replies and
 * pushes are queued through ops->send before it returns. Safe to call
 * for any event in any state; events that do not apply are answered as
 * rdzv.h says or ignored (LOST of an unknown peer). */
void crun__round_apply(struct crun__round *r, const struct crun__round_event *ev);

/* True when peer is a joiner, member, standby or excluded node of r: the server
 * arms a connection's keep-alive only once its JOIN has been admitted, so
 * that a refused JOIN leaves the connection as it was. */
bool crun__round_has_peer(const struct crun__round *r, const void *peer);

/* The journal (crun-rdzvd --state-dir) of r: cb runs with arg at the end
 * of each crun__round_apply (timer events included) that changed what a
 * journal records of the run (a round was assigned, ended or is being
 * resumed, or the run closed), before the server writes the replies of
 * that change; and once with destroyed true from crun__round_destroy (r
 * is valid during the call; arg is then the callback's to free). */
typedef void (*crun__round_journal_cb)(void *arg, const struct crun__round *r, bool destroyed);
void crun__round_set_journal(struct crun__round *r, crun__round_journal_cb cb, void *arg);

/* Fills run with what the journal keeps of r (journal.h; allocated, free
 * with crun__journal_run_finish); run_id is left NULL for the caller. A
 * RECOVERING round is recorded as running. 0 or -ENOMEM. */
int crun__round_record(const struct crun__round *r, struct crun__journal_run *run);

/* True when a journal has nothing to keep of r: no JOIN or resume has
 * configured the run (it was just made, or it was restored from a
 * journal and dropped because no member resumed it; see rdzv.h). */
bool crun__round_is_new(const struct crun__round *r);

/* Puts r, new from crun__round_create (no event applied yet), into the
 * state a journal recorded for its run: running -> RECOVERING with the
 * recorded members, its deadline run->wait_ms ahead (60 s when 0) until
 * the first resume sets its own (when it passes first, or a node that is
 * not a member joins first, the run starts afresh in round 1); open -> OPEN in the recorded round;
 * finished, failed -> CLOSED. 0 or -ENOMEM (r is then as it was). */
int crun__round_restore(struct crun__round *r, const struct crun__journal_run *run);

/* Frees r without sending anything; its timer is closed and the memory
 * freed in the close callback (ops->handle_closed runs then). NULL is
 * allowed. */
void crun__round_destroy(struct crun__round *r);

#endif

/* The agent's side of the multi-node rendezvous (rendezvous/rdzv.h): the
 * store it may host, its store client, its rounds.
 *
 * Owns: the store client and its outstanding requests, the current
 * round's assignment and MASTER_ADDR. It decides nothing about workers:
 * what it learns reaches its owner (the group) through the hooks, each
 * run from the loop, never from inside a function declared here. */
#ifndef CRUN_AGENT_RENDEZVOUS_H
#define CRUN_AGENT_RENDEZVOUS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agent/agent.h"
#include "agent/monitor.h"
#include "agent/placement.h"
#include "rendezvous/rdzv.h"

struct crun__server;

/* The end of the assigned round, as the store announced it. */
struct crun__round_end {
	int64_t round;
	bool exhausted;	       /* the restarts are exhausted: the job ends */
	bool node_joined;      /* a node joined: not counted as a restart */
	bool node_left;	       /* a node left, or the store dropped it (the
				* message names which:
				* crun__mon_round_end_gone) */
	int64_t restart_count; /* the run's restart count after it; -1:
				* unknown (a resume refused because the round
				* ended: the next assignment tells) */
	const char *message;   /* which rank on which host failed, or which
				* node left; valid during the hook */
};

struct crun__rdzv_hooks {
	/* The round is assigned and MASTER_ADDR/PORT known: the attempt's
	 * place (its master_addr stays valid until the next join). */
	void (*ready)(void *arg, const struct crun__placement *place);
	/* The store ended the assigned round. */
	void (*ended)(void *arg, const struct crun__round_end *end);
	/* The exit barrier passed: every node is done. */
	void (*done)(void *arg);
	/* The rendezvous failed (connect, join, barrier, a rejoin that did
	 * not succeed in time), or, with lost, the connection to the store is
	 * lost (the next crun__rdzv_join() reconnects). message: one whole
	 * line. */
	void (*failed)(void *arg, bool lost, const char *message);
	void *arg;
};

/* The other nodes' step summaries (straggler.h) of the assigned round, for
 * crun__rdzv_fetch_steps: status 0 with count values (one per other node,
 * in group rank order; valid during the call; empty for a node that has
 * not published one), or a negative errno with a message: -ECANCELED
 * when the round ended meanwhile, the connection's error when it was lost
 * (LOST follows). */
typedef void (*crun__rdzv_steps_cb)(void *arg, int status, const char *message,
				    const struct crun__wire_item *values, uint32_t count);

/* Outstanding request to the store (freed by its reply, or with the
 * client). */
struct rdzv_req;

struct agent_rdzv {
	uv_loop_t *loop;
	const struct crun__agent_spec *spec;
	char hostname[256];
	struct crun__rdzv_hooks hooks;
	/* Set by the owner: records the rounds and the store's losses
	 * (monitor.h); NULL: nothing. */
	struct crun__monitor *monitor;
	uint64_t join_ms; /* wall time of the last join, for the round's
			   * duration */
	struct crun__aclient *client;
	bool connected;
	bool join_wanted;   /* join as soon as connected */
	bool hosting;	    /* this agent's server serves the endpoint */
	char endpoint[300]; /* "host:port" ("[v6]:port"), as given */
	char node_id[330];
	char self_addr[300]; /* JOIN's addr: --local-addr, the endpoint when
			      * hosting it on a non-loopback address, else
			      * empty (the store uses the peer address) */
	uint64_t gen;	     /* bumped by every join: older replies are stale */
	uint32_t join_id;    /* RDZV_EVENTs carry it */
	bool assigned;
	struct crun__rdzv_assignment asg;
	char master_addr[300];
	int master_port;
	bool master_agent_store; /* group rank 0's agent hosts MASTER_PORT */
	/* With the agent store, the workers' store this agent hosts once it
	 * has been group rank 0 (agent_store.h), kept until the end. */
	struct crun__server *worker_store;
	struct crun__server *hosted; /* the endpoint's store when hosting (not
				      * owned: the owner destroys it) */
	bool ended;		     /* the store ended the assigned round */
	/* Why the last request could not be sent (a whole line). */
	char *error_msg;
	struct rdzv_req *reqs; /* outstanding requests */
	int64_t steps_round;   /* where this node's step summary is, if any */
	int steps_node;
	/* A node of steps_each_round had no summary for an MGET: the other
	 * nodes' summaries of that round are read one GET each. */
	int64_t steps_each_round;
	/* The store was lost: the next join reconnects with a new client
	 * (same node id: the store lets the new connection replace the old),
	 * and the rejoin timer ends the job when no round is assigned by
	 * rejoin_by (loop time). */
	bool lost;
	bool rejoining; /* from the loss until the next assignment */
	uint64_t rejoin_by;
	uv_timer_t rejoin_timer;
	bool timer_open;
	/* The last connected store's preamble flags (CRUN_WIRE_F_*), kept
	 * past the loss of its connection: they say how to take it
	 * (store_loss.h). */
	uint16_t store_flags;
	bool placed; /* the ready hook ran for the assigned round */
	/* Resuming the assigned round after losing a standalone store by a
	 * closed connection (store_loss.h): no hook runs and the workers run
	 * on while a new client connects, until resume_by (loop time), and
	 * sends RDZV_RESUME. resume_since: the loss; resume_why: its cause. */
	bool resuming;
	uint64_t resume_since, resume_by;
	char resume_why[160];
	/* This node's FAIL and DONE of the assigned round, until the next
	 * join: held while resuming and sent again after a resume, since a
	 * store that restarted has neither. fail_msg NULL: no FAIL. */
	char *fail_msg;
	bool fail_stop;
	bool done_sent;
	bool done_closed; /* a DONE sent after the resume found the run closed */
};

/* Decides whether this agent hosts the store (and binds it: then *server
 * is the agent's to destroy, else NULL), creates the store client and
 * starts connecting (retrying until the join timeout). Prints what failed. 0 or a negative errno.
 */
int crun__rdzv_setup(struct agent_rdzv *r, uv_loop_t *loop, const struct crun__agent_spec *spec,
		     const char *hostname, const struct crun__rdzv_hooks *hooks,
		     struct crun__server **server);
/* A member of a running round that loses a standalone store by a close
 * or a reset (not by keep-alive silence) keeps its workers: it reconnects
 * for the spec's reconnect timeout and resumes the round (rdzv.h's
 * RDZV_RESUME) without any hook, holding a FAIL or DONE meanwhile. The
 * round is then the same (nothing happens), or over (ended), or the run is
 * closed (failed, or done after a DONE), or the store did not come back
 * in time (failed, lost, as any loss). A store hosted by node 0's agent
 * that goes away by a close or a reset ends the job: failed, not lost. */
/* Joins the next round (once connected): a new generation; ready, failed,
 * or ended (when the round ends before MASTER_ADDR is known) follows.
 * After failed(lost) it first connects again, as a new node; failed
 * follows when that does not succeed, or when no round is assigned within
 * the spec's rejoin timeout of the loss. 0, or a negative errno when the
 * request cannot be sent (then crun__rdzv_error() says why and no hook
 * follows; -ETIMEDOUT: the rejoin timeout has passed). */
int crun__rdzv_join(struct agent_rdzv *r);
/* Tells the store that a local worker failed in the assigned round
 * (message: "rank 5 (local rank 1) on host-b exited with code 1"); the
 * round's end follows. With stop, the run must not restart (repeat.h):
 * the store ends it as failed, "exhausted", on every node. */
void crun__rdzv_fail(struct agent_rdzv *r, const char *message, bool stop);
/* Enters the exit barrier: done, or ended when the round ends first. 0,
 * or a negative errno as crun__rdzv_join. */
int crun__rdzv_done(struct agent_rdzv *r);
/* Step summaries, small and at the caller's pace (the agent's straggler
 * watch: at most one of each per node every few seconds). Each lives under
 * "rdzv/<round>/steps/<group rank>" for the assigned round, as an
 * ephemeral key (it goes with this node's connection); publishing in a new
 * round deletes this node's summary of the previous one. */
/* Sets this node's summary (len bytes, copied). 0, or -ENOTCONN before
 * the round is assigned or without the store, or what the client says.
 * The reply is only logged (debug). */
int crun__rdzv_publish_steps(struct agent_rdzv *r, const char *summary, size_t len);
/* Sets key to this node's status document (status.h; len bytes, copied)
 * as an ephemeral key of the run: it goes with this node's connection.
 * At any time while connected, in a round or not. 0, or -ENOTCONN
 * without a connection, or what the client says; the reply is only
 * logged (debug). */
int crun__rdzv_publish_status(struct agent_rdzv *r, const char *key, const char *doc, size_t len);
/* Reads every other node's summary without waiting, in one round trip:
 * one MGET; once a node of the round had none (the MGET fails as a whole
 * then), one GET per other node, sent together, for the rest of the
 * round, so that a node that never publishes hides no other. cb runs once
 * (unless r is finished first). 0, or a negative errno (cb will not run):
 * -ENOTCONN as above, -EINVAL for a single node. */
int crun__rdzv_fetch_steps(struct agent_rdzv *r, crun__rdzv_steps_cb cb, void *arg);
/* Ends the connection to the store as lost, from this side: its requests
 * fail, the failed hook runs with lost (at once, from inside this call)
 * and the next join connects again. For an agent that finds it was
 * stopped for longer than the keep-alive window, so that the store has
 * dropped it already (why: "..." in the loss line). Nothing when there is
 * no connection or it is lost already. */
void crun__rdzv_lose(struct agent_rdzv *r, const char *why);
/* The line that says why the last join or barrier could not be sent. */
const char *crun__rdzv_error(const struct agent_rdzv *r);
/* Closes the store client (no more hooks) and frees what r holds. Safe to
 * call more than once, and on a zeroed r. */
void crun__rdzv_finish(struct agent_rdzv *r);

#endif

/* Rendezvous rounds: the protocol and its semantics.
 *
 * The round's state lives in the store server (round.c, driven by
 * store_rdzv.c), which sees every agent's connection: a node whose
 * connection drops, or whose keep-alives stop, is gone at once, and every other
 * member is told by a push (RDZV_EVENT), never by polling. Agents talk to
 * it with the asynchronous client (aclient.h) on their libuv loop; the
 * helpers below encode requests and decode replies for both sides.
 *
 * Wire (additions to wire.h, same frame shape; numbers are decimal ASCII
 * items unless said otherwise):
 *
 *   RDZV_JOIN  items [node_id, host, addr, nproc, node_rank, min_nodes,
 *              max_nodes, last_call_ms, keepalive_ms, max_restarts];
 *              num = join_timeout_ms (> 0).
 *     node_id    unique per agent process ("<hostname>:<pid>:<8 hex>")
 *     host       host name, for messages and failure summaries
 *     addr       address other nodes reach this node at (its
 *                --local-addr); empty: the server uses the peer address
 *                of the connection as seen by the server
 *     nproc      workers on this node (>= 1)
 *     node_rank  fixed group rank (static backend), or -1
 *     min_nodes, max_nodes   --nnodes MIN:MAX (1 <= min <= max)
 *     last_call_ms   wait after min nodes joined for more (0 allowed)
 *     keepalive_ms   liveness window: when > 0 the server drops this
 *                connection if no frame at all arrives from it for that
 *                long (keep_alive_interval x keep_alive_max_attempt);
 *                agents send PING every keep_alive_interval. The
 *                connection's latest JOIN sets it (0 turns it off); every
 *                frame restarts it.
 *     max_restarts   the job's --max-restarts
 *   and optionally (a JOIN of 10 items has them 0; an agent sends them
 *   only to a store whose preamble sets CRUN_WIRE_F_RDZV_EXCL, wire.h,
 *   since an older store refuses a JOIN of 14 items):
 *     blacklist_failures, blacklist_window_ms, cooldown_min_ms,
 *     cooldown_max_ms   a node (a node id) whose failures (a worker
 *                failure it reported, or its connection lost while a
 *                member) reach blacklist_failures within
 *                blacklist_window_ms is excluded: a JOIN of it is held
 *                until its cool-down has passed (cooldown_min_ms, doubled
 *                for each later exclusion up to cooldown_max_ms), and it
 *                gets one RDZV_EVENT "excluded" (num 0) saying so; then it
 *                joins as any JOIN would. 0 failures: never.
 *   A JOIN whose node id is held by another connection of the run (the
 *   same agent, reconnected) replaces it: the old connection's node is
 *   lost first, as if its connection had closed.
 *   The first JOIN of a run fixes min/max/last_call/max_restarts, the
 *   exclusion settings (the first JOIN of 14 items does: a JOIN of 10
 *   items, from an agent older than them, is not compared on them, so
 *   old and new agents mix in one run) and
 *   whether ranks are static (node_rank given) or dynamic; a later JOIN
 *   whose values differ gets ERROR EINVAL naming the mismatch ("--nnodes
 *   2:4 differs from the run's 2", "--max-restarts 0 differs from the
 *   run's 3", "last_call_timeout 1500ms differs from the run's 1s", "no
 *   --node-rank given, but the run's group ranks are static").
 *   The reply comes when the round closes (or ERROR):
 *     VALUES [round, restart_count, group_rank, nnodes,
 *             then per member in group-rank order: node_id, host, addr,
 *             nproc]   (4 + 4*nnodes items)
 *     Rounds are numbered from 1 per run; addr is never empty there.
 *   ERROR ETIMEDOUT  join_timeout passed while the OPEN round had fewer
 *                    than min nodes: "only 1 of at least 2 nodes joined
 *                    within 600s", followed by "; missing from round 3:
 *                    node 1 (host-b), node 2 (host-c)" naming the members
 *                    of the last round that are not back. A standby
 *                    joiner (see RUNNING): "no round of run 'ID' opened
 *                    within 600s: round 3 runs with the maximum of 4
 *                    nodes".
 *   ERROR ESHUTDOWN  "run 'ID' is closed: the job has finished" (or
 *                    "...: the job failed")
 *   ERROR EINVAL     "bad RDZV_JOIN: <what>" for an item that
 *                    crun__rdzv_parse_join refuses (node_rank >= max_nodes
 *                    included); mismatched configuration; "node rank 1 is
 *                    already taken by node 'ID' (host-b)"; "node id 'ID'
 *                    is already in use by another connection"
 *   ERROR EALREADY   this connection already joined the OPEN round, is a
 *                    member of the RUNNING one, or waits on standby
 *   A refused JOIN leaves the connection (and the run) as they were.
 *
 *   RDZV_EVENT (reply type 0x86, pushed) id = the member's JOIN id;
 *     num = the round that ended; items [reason, message, restart_count]
 *     reason "failure"  a worker failed (RDZV_FAIL), counted
 *            "left"     a member's connection dropped or its keep-alives
 *                       stopped, counted
 *            "join"     a node is waiting to join and the run is below
 *                       max_nodes; not counted
 *            "excluded" (num 0, to a held joiner) the node is excluded;
 *                       the message says for how long
 *            "exhausted" restart_count went above max_restarts, or a
 *                       RDZV_FAIL said "stop": the run is closed as
 *                       failed; agents stop and exit 1. The message is
 *                       the failure's, with "; no restarts left
 *                       (--max-restarts N)" appended when they ran out
 *     message: what happened ("node 1 (host-b) left: connection closed",
 *     "...: no keep-alive for 15s", FAIL's message, "node 'ID' (host-c)
 *     is joining"); restart_count: the run's count after this round (a
 *     counted end adds one).
 *     Every member of the round gets it exactly once (except the member
 *     that left); members stop their workers and JOIN again (unless
 *     "exhausted").
 *
 *   RDZV_FAIL  items [message] or [message, "stop"]; num = round. Ends
 *              that round with reason "failure" when it is still the
 *              current one (else no-op); with "stop" (the failure would
 *              only repeat: a configuration error, or the same failure
 *              twice without progress) the run closes as failed, with
 *              reason "exhausted", which agents of every version stop on.
 *              An agent sends "stop" only to a store whose preamble sets
 *              CRUN_WIRE_F_RDZV_EXCL (an older store refuses a FAIL of
 *              two items as a protocol error); to another it sends the
 *              plain failure, and the run restarts until --max-restarts.
 *              message says what failed ("rank 5 (local 1) on host-b
 *              exited with status 1"; non-printable bytes become '?', at
 *              most 1023 bytes). Reply OK; ERROR EINVAL when the sender is
 *              not a member of that (running) round.
 *   RDZV_DONE  items []; num = round. Exit barrier: the reply OK comes when
 *              every member of the round has sent DONE; then the run is
 *              closed (later JOINs get ESHUTDOWN). If the round ends
 *              first, ERROR ECANCELED "round N ended: REASON: MESSAGE"
 *              (also for a DONE that names a round already over). ERROR
 *              EINVAL from a non-member, EALREADY for a second DONE,
 *              while the round runs. Once the run has closed with every
 *              member done, a DONE for its last round is answered OK from
 *              any connection: an agent whose connection broke after its
 *              DONE retries on a new one and must still finish. A
 *              member whose connection closes after its DONE does not end
 *              the round ("left" is only for nodes not done): the barrier
 *              completes without it.
 *   RDZV_RESUME  items [the 14 items of a JOIN (node_id ... cooldown_max_ms),
 *              then the assignment this node holds, as a JOIN's VALUES
 *              reply gave it: round, restart_count, group_rank, nnodes,
 *              per member node_id, host, addr, nproc]; num = wait_ms (> 0).
 *     Sent only to a store whose preamble sets CRUN_WIRE_F_RDZV_RESUME, by
 *     an agent that lost its connection while a member of a running round
 *     (its workers still running) and reached the store again: the store
 *     may have restarted and know nothing of the run. It asks to go on in
 *     that round without stopping the workers. The resumer must be the
 *     member at group_rank of the assignment (same node_id and nproc).
 *     The store answers:
 *     - the run is RUNNING that same round with the same members (the store
 *       did not restart, or rebuilt it): the connection takes the member's
 *       place (as a JOIN of a reconnected node id does) and the reply is
 *       the round's assignment, as a JOIN's VALUES.
 *     - the run is unknown (a store restarted without a journal), or
 *       RECOVERING that round (below): the run is rebuilt from the resumes:
 *       the first creates it RECOVERING, with the JOIN part's configuration,
 *       the assignment's round, restart count and members, and a deadline
 *       wait_ms ahead; each resume of a listed member is held; once every
 *       member has resumed the round is RUNNING again and every held resume
 *       gets the assignment (workers never noticed). A resume whose round,
 *       members or configuration differ from the recovering round's gets
 *       ERROR ECANCELED (it then joins as a new node), unless its round is
 *       higher: then the recovering round is dropped (its held resumes,
 *       and DONEs, get ECANCELED) and rebuilt from this one.
 *     - the deadline passes with members missing: the round ends as if
 *       they had left (counted: restart_count + 1, or "exhausted" above
 *       max_restarts): each held resume gets ERROR ECANCELED "round N
 *       ended: node 2 (host-c) did not come back within 15s after the
 *       store restarted", the run is OPEN for round N + 1, and the
 *       resumers JOIN it as in any restart. When that end exhausts the
 *       restarts the run closes as failed and each held resume gets
 *       ERROR ESHUTDOWN "run 'ID' is closed: the job failed: <the same
 *       message>; no restarts left (--max-restarts N)".
 *     - a store with a journal (crun-rdzvd --state-dir) loads each run
 *       that was RUNNING as a RECOVERING round "restored" from the
 *       journal, with its recorded configuration, members, round and
 *       restart count, and answers resumes as for any RECOVERING round
 *       (above): one that matches is held, one that differs gets
 *       ECANCELED, one of a higher round drops the restored round and
 *       rebuilds the run from itself. Until a member resumes, the
 *       deadline is the recorded keep-alive window (60 s when none) from
 *       the store's first request of the run; the first resume sets its
 *       own. A restored round that no member has resumed is dropped, not
 *       ended (nothing counted), when that deadline passes or a node that
 *       is not a member JOINs: the run starts afresh, as a run the store
 *       never knew (round 1, restart count 0, no configuration; the
 *       journal's record of the old round goes), and that JOIN is
 *       the first of round 1, checked against nothing recorded. Nobody
 *       holds such a round: its job ended while the store was down (its
 *       agents would have resumed), or a new job reuses the run id
 *       (torchrun and crun users pass the same --rdzv-id job after job;
 *       node ids are new for each agent): the new job's settings apply,
 *       and its --max-restarts is not charged for the old job's members.
 *       (A new node of the old job that JOINs before any member resumed
 *       makes the run start afresh too: the members' resumes then get
 *       ECANCELED and they join round 1.) A run the journal records as
 *       CLOSED answers ERROR ESHUTDOWN, and a DONE for its last round OK,
 *       as before the restart.
 *     - the run is RUNNING a later round, or OPEN: ERROR ECANCELED "round
 *       N ended: ..." (the agent stops its workers and joins again);
 *       CLOSED: ESHUTDOWN.
 *     While a round is RECOVERING:
 *     - a JOIN of one of its members (an agent that gave up resuming, or
 *       whose workers stopped) ends the round at once, counted, as "left"
 *       ("node 1 (host-b) joined again instead of resuming the round"):
 *       held resumes get ECANCELED with that message and the JOIN is one
 *       for round N + 1 (OPEN), as any JOIN after a restart;
 *     - a JOIN of another node (but see the journal above for a restored
 *       round nobody resumed) is checked as any JOIN and waits as a
 *       standby joiner would (its join timeout runs): once the round runs
 *       again it ends it with "join" when the round is below max_nodes
 *       and nobody sent DONE, else it goes on waiting; when the round ends
 *       it is in the next one;
 *     - a member's connection that closes after its resume was held is
 *       no longer back (it may resume again before the deadline), and a
 *       DONE it sent is forgotten;
 *     - RDZV_FAIL from a held member ends the round (reason "failure",
 *       its held resumes get ECANCELED); RDZV_DONE from a held member is
 *       counted once the round runs again (the barrier may then complete
 *       at once); either from a connection that has not resumed gets
 *       ERROR EINVAL ("... send RDZV_RESUME first").
 *     A resume answered with the assignment makes its connection the
 *     member: the round's RDZV_EVENT then carries the RESUME's id (as it
 *     carries a JOIN's), and the keep-alive window of its JOIN part
 *     applies as for a JOIN, from the moment the resume is held. A DONE
 *     the member sent on an earlier connection no longer counts: it sends
 *     DONE again. A second resume of the same member on another
 *     connection replaces the first (which gets ERROR EEXIST; a DONE held
 *     from it is dropped without an answer there). The run is "unknown"
 *     to the store when no round was ever assigned in it and nobody waits
 *     in its first round; a run OPEN in any other way cancels the resume.
 *     Agents send wait_ms = their keep-alive window (keepalive_ms): a
 *     member not back within it after the store is back is treated as a
 *     member whose keep-alives stopped.
 *     ERROR EINVAL: a malformed resume (crun__rdzv_parse_resume's
 *     reasons), or a resumer that is not the member at group_rank.
 *
 * Round lifecycle per run (an explicit state machine in round.c):
 *   OPEN      collecting joins. Closes at once when max_nodes have
 *             joined, or last_call_ms after min_nodes have joined. A
 *             round after the first also closes at once when min_nodes
 *             are in and every member of the previous round that is still
 *             connected has rejoined (so a restart does not wait for the
 *             last call). join_timeout is per joiner (its JOIN's num) and
 *             applies while the round has fewer than min nodes (once min
 *             are in, the last call bounds the wait). Note: with
 *             last_call_ms 0 and min < max a round closes with the first
 *             min nodes back; the others then end it again with "join".
 *   RUNNING   assigned. A JOIN from a new node: if members < max_nodes
 *             and no member has sent DONE, the round ends with reason
 *             "join" and the joiner is carried into the next OPEN round;
 *             else the joiner waits (standby) until a round opens (it is
 *             then in it, in arrival order, up to max_nodes) or its
 *             join_timeout passes, or gets ESHUTDOWN when the run closes.
 *   (ended)   -> the next round is OPEN at once, with any standby joiners
 *             already in it; members re-join.
 *   RECOVERING  (RDZV_RESUME) the round the members' resumes name, rebuilt
 *             by a store that lost it; -> RUNNING when every member is
 *             back, -> (ended) when its deadline passes first, a member
 *             joins instead, or a member fails; one restored from a
 *             journal that no member resumed -> OPEN round 1 (afresh,
 *             nothing counted) when its deadline passes or another node
 *             joins.
 *   CLOSED    run finished (all DONE) or failed (exhausted): every JOIN
 *             gets ESHUTDOWN.
 * The state lives as long as the run does in the server: until no
 * connection and no key of the run is left (then a JOIN starts afresh,
 * round 1); with a journal (crun-rdzvd --state-dir) a run that is closed or
 * in a round is restored from it instead, as after a restart. The run's
 * keys are shared by its rounds as before.
 * Group ranks: static: in node_rank order (so equal to node_rank when
 * ranks 0..n-1 all joined, as they must with min = max); otherwise a
 * stable order: the order in which node ids first joined the run (a node
 * keeps its place across rounds). Global ranks are contiguous per node in group-rank order
 * (heterogeneous nproc allowed; world size = sum of nproc).
 *
 * MASTER_ADDR/MASTER_PORT: the agent of group rank 0 picks a free port on
 * its addr and SETs "rdzv/<round>/master" = "ADDR:PORT" (ADDR in brackets
 * for IPv6); the others GET it with a wait. Each agent SETs its step
 * summary (agent/straggler.h) as the ephemeral "rdzv/<round>/steps/<group
 * rank>" and reads the others' without a wait, at most every 2 s: one
 * MGET, or, once a node of the round had none, one GET each. Workers'
 * keys written through libcrun's worker API are scoped under
 * "round/<round>/". */
#ifndef CRUN_RENDEZVOUS_RDZV_H
#define CRUN_RENDEZVOUS_RDZV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rendezvous/wire.h"

#define CRUN_RDZV_JOIN_ITEMS 14
/* A JOIN without the exclusion items (blacklist_* off). */
#define CRUN_RDZV_JOIN_ITEMS_BASE 10
/* Bytes of scratch crun__rdzv_join_msg needs for its numbers. */
#define CRUN_RDZV_JOIN_SCRATCH 256
/* RDZV_FAIL's second item: the run must not restart. */
#define CRUN_RDZV_FAIL_STOP "stop"
/* Limits a JOIN is checked against: an assignment of max nodes must fit
 * one frame (4 + 4 * nnodes items), the world size an int. */
#define CRUN_RDZV_MAX_NODES ((CRUN_WIRE_MAX_ITEMS - 4) / 4)
#define CRUN_RDZV_MAX_NPROC 65536
#define CRUN_RDZV_MAX_STR 1024	     /* bytes of node_id, host, addr */
#define CRUN_RDZV_MAX_BLACKLIST 1000 /* blacklist_failures */

/* One node as a JOIN describes it and as an assignment lists it. */
struct crun__rdzv_node {
	char *node_id;
	char *host;
	char *addr;
	int nproc;
	int node_rank; /* -1: dynamic */
};

struct crun__rdzv_conf {
	int min_nodes, max_nodes;
	int64_t join_timeout_ms;
	int64_t last_call_ms;
	int64_t keepalive_ms;
	int max_restarts;
	/* Exclusion of a node that keeps failing (0 failures: never). */
	int blacklist_failures;
	int64_t blacklist_window_ms;
	int64_t cooldown_min_ms, cooldown_max_ms;
	/* The JOIN carries the four settings above (14 items); false: a JOIN
	 * of 10 items, from an agent that predates them or sent to a store
	 * without CRUN_WIRE_F_RDZV_EXCL, and the four are 0. */
	bool has_exclusion;
};

/* The outcome of a round for one node. */
struct crun__rdzv_assignment {
	int64_t round;
	int64_t restart_count;
	int group_rank;
	int nnodes;
	struct crun__rdzv_node *nodes; /* nnodes, in group-rank order */
	int world_size;		       /* sum of nproc */
	int rank_offset;	       /* first global rank of this node */
};

/* Builds a JOIN request in msg using items (CRUN_RDZV_JOIN_ITEMS of
 * them): of 14 items when conf->has_exclusion (only for a store that
 * advertised CRUN_WIRE_F_RDZV_EXCL), else of 10 items, without them and scratch
 * (CRUN_RDZV_JOIN_SCRATCH bytes for the decimal numbers); every pointer in msg refers to self,
 * items or scratch. */
void crun__rdzv_join_msg(const struct crun__rdzv_node *self, const struct crun__rdzv_conf *conf,
			 struct crun__wire_msg *msg, struct crun__wire_item *items, char *scratch);

/* Parses a JOIN request (server side). Strict: every number decimal
 * ASCII ('-' only for node_rank -1) and in range (1 <= nproc <=
 * CRUN_RDZV_MAX_NPROC, 1 <= min <= max <= CRUN_RDZV_MAX_NODES, node_rank
 * -1 or in [0, max), last_call_ms, keepalive_ms >= 0, 0 <= max_restarts
 * <= INT_MAX, join timeout (num) > 0); node_id and host non-empty, addr
 * may be empty; strings printable ASCII of at most CRUN_RDZV_MAX_STR
 * bytes. Strings are malloc'd into node (free with
 * crun__rdzv_node_finish; nothing to free on error). 0, -ENOMEM, or
 * -EPROTO with a reason in err. */
int crun__rdzv_parse_join(const struct crun__wire_msg *msg, struct crun__rdzv_node *node,
			  struct crun__rdzv_conf *conf, char *err, size_t errlen);

/* Parses a JOIN's VALUES reply (client side) into a (allocates; free
 * with crun__rdzv_assignment_finish; nothing to free on error). Strict as
 * parse_join: round, restart_count >= 0, 1 <= nnodes <=
 * CRUN_RDZV_MAX_NODES, exactly 4 + 4 * nnodes items, group_rank in [0,
 * nnodes), every node's node_id, host and addr non-empty and printable,
 * nproc in [1, CRUN_RDZV_MAX_NPROC]. Sets each node's node_rank to its
 * group rank, world_size and rank_offset. 0, -ENOMEM, or -EPROTO with a
 * reason. */
int crun__rdzv_parse_assignment(const struct crun__wire_msg *msg, struct crun__rdzv_assignment *a,
				char *err, size_t errlen);
void crun__rdzv_assignment_finish(struct crun__rdzv_assignment *a);
void crun__rdzv_node_finish(struct crun__rdzv_node *node);

/* Items of a RESUME for an assignment of nnodes nodes, and the bytes of
 * scratch crun__rdzv_resume_msg needs. A resume must fit one frame:
 * nnodes at most CRUN_RDZV_RESUME_MAX_NODES (larger runs join again). */
#define CRUN_RDZV_RESUME_ITEMS(nnodes) (CRUN_RDZV_JOIN_ITEMS + 4 + 4 * (size_t)(nnodes))
#define CRUN_RDZV_RESUME_SCRATCH(nnodes) (CRUN_RDZV_JOIN_SCRATCH + 24 * (4 + (size_t)(nnodes)))
#define CRUN_RDZV_RESUME_MAX_NODES ((CRUN_WIRE_MAX_ITEMS - CRUN_RDZV_JOIN_ITEMS - 4) / 4)

/* Builds a RESUME request in msg: self and conf as for a JOIN (always the
 * 14-item form: conf->has_exclusion is ignored), a the assignment self
 * holds (a->nnodes <= CRUN_RDZV_RESUME_MAX_NODES), num = wait_ms. items
 * holds CRUN_RDZV_RESUME_ITEMS(a->nnodes), scratch
 * CRUN_RDZV_RESUME_SCRATCH(a->nnodes) bytes; msg points into self, a,
 * items and scratch. */
void crun__rdzv_resume_msg(const struct crun__rdzv_node *self, const struct crun__rdzv_conf *conf,
			   const struct crun__rdzv_assignment *a, int64_t wait_ms,
			   struct crun__wire_msg *msg, struct crun__wire_item *items,
			   char *scratch);

/* Parses a RESUME (server side) as crun__rdzv_parse_join and
 * crun__rdzv_parse_assignment parse its two parts (conf->join_timeout_ms
 * is then the resume's wait_ms), and checks that node is the member at
 * the assignment's group_rank (same node_id and nproc). node and a are
 * allocated (free both); nothing to free on error. 0, -ENOMEM, or -EPROTO
 * with a reason in err. */
int crun__rdzv_parse_resume(const struct crun__wire_msg *msg, struct crun__rdzv_node *node,
			    struct crun__rdzv_conf *conf, struct crun__rdzv_assignment *a,
			    char *err, size_t errlen);

/* A duration for messages: "15s" for whole seconds, else "200ms".
 * Returns buf. */
const char *crun__rdzv_format_ms(int64_t ms, char *buf, size_t len);

#endif

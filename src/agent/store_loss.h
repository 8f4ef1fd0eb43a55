/* What an agent does when its connection to the store ends, and what a
 * store's answer to its RDZV_RESUME (rendezvous/rdzv.h) means: pure
 * functions of what the agent knows, for rendezvous.c to carry out.
 *
 * The rule (crun(1), MULTI-NODE):
 *   - a store that runs inside node 0's agent (CRUN_WIRE_F_EMBEDDED)
 *     whose connection closes or resets has gone with that agent and never
 *     comes back: the job ends at once (GONE), whatever the round;
 *   - a member of a running round (assigned, its place known, the round
 *     not ended) whose standalone store (CRUN_WIRE_F_RDZV_RESUME) closes
 *     or resets the connection keeps its workers and reconnects to resume
 *     the round (RESUME): the store restarted, or a connection broke;
 *   - anything else is the plain loss (REJOIN): the workers are killed and
 *     the agent joins again as a new node. That covers the keep-alive
 *     window passing without a reply (-ETIMEDOUT: the network cut this
 *     node off, and the store has dropped it or will), an agent that was
 *     stopped, a store that said why it closed, an older store, and an
 *     assignment too large for one RESUME frame. */
#ifndef CRUN_AGENT_STORE_LOSS_H
#define CRUN_AGENT_STORE_LOSS_H

#include <stdbool.h>
#include <stdint.h>

enum crun__store_loss {
	CRUN__LOSS_REJOIN = 1, /* kill the workers, join again as a new node */
	CRUN__LOSS_RESUME,     /* keep the workers, reconnect, RDZV_RESUME */
	CRUN__LOSS_GONE,       /* node 0's agent and its store are gone: end */
};

struct crun__store_loss_facts {
	int err;	      /* how the connection ended (aclient.h's LOST):
			       * -ECONNRESET closed or reset, -EPIPE, -ETIMEDOUT
			       * keep-alive silence, or the store's errno */
	uint16_t store_flags; /* the lost store's preamble flags (CRUN_WIRE_F_*) */
	bool hosting;	      /* this agent serves the store itself */
	bool member;	      /* a member of a running round, as above */
	int nnodes;	      /* the round's nodes (member only) */
};

/* The loss kind for f (see the rule above). */
enum crun__store_loss crun__store_loss_classify(const struct crun__store_loss_facts *f);

/* The store's answer to a RESUME. */
enum crun__resume_outcome {
	CRUN__RESUME_SAME_ROUND = 1, /* VALUES of the same round: go on */
	CRUN__RESUME_ROUND_OVER,     /* ECANCELED: the round ended meanwhile;
				      * stop the workers, join the next one */
	CRUN__RESUME_CLOSED,	     /* ESHUTDOWN: the run is closed */
	CRUN__RESUME_REFUSED,	     /* anything else (a VALUES frame of
				      * another round or node included): lose
				      * the store as REJOIN does */
};

/* status: 0 for a reply frame of type reply_type (a CRUN_WIRE_* value),
 * else the ERROR's negative errno; round: of the VALUES (when status is
 * 0 and it parsed), held: the round the agent resumes. */
enum crun__resume_outcome crun__resume_outcome(int status, uint8_t reply_type, int64_t round,
					       int64_t held);

#endif

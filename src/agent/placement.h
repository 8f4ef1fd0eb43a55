/* Where an attempt of the worker group stands in the job.
 *
 * Without rendezvous the launcher's flags fix it for the whole job (only
 * the restart count and the round move on a restart); with rendezvous each
 * round's assignment brings a new one (rendezvous.h hands it over with the
 * group's READY event). The workers of the attempt get it in their
 * environment: GROUP_RANK, GROUP_WORLD_SIZE, WORLD_SIZE, RANK (rank_offset
 * plus the local rank), MASTER_ADDR, MASTER_PORT, CRUN_ROUND and
 * TORCHELASTIC_RESTART_COUNT. */
#ifndef CRUN_AGENT_PLACEMENT_H
#define CRUN_AGENT_PLACEMENT_H

#include <stdint.h>

struct crun__placement {
	int group_rank;
	int nnodes;
	int world_size;
	int rank_offset; /* global rank of local rank 0 */
	int64_t round;	 /* CRUN_ROUND */
	int restart_count;
	/* MASTER_ADDR: not owned; it stays valid while the attempt runs (the
	 * spec's, or the rendezvous's until its next join). */
	const char *master_addr;
	int master_port;
	/* TORCHELASTIC_USE_AGENT_STORE: MASTER_ADDR:MASTER_PORT is an agent
	 * store (agent.h). With rendezvous group rank 0's agent decides, for
	 * every node of the round. */
	bool agent_store;
};

#endif

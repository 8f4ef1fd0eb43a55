/* The agent store's server (agent.h, agent_store): the store of an agent
 * that PyTorch's workers reach at MASTER_ADDR:MASTER_PORT with the TCPStore
 * protocol, one connection or more per worker of the whole job. */
#ifndef CRUN_AGENT_AGENT_STORE_H
#define CRUN_AGENT_AGENT_STORE_H

#include <uv.h>

#include "agent/agent.h"
#include "rendezvous/server.h"

/* Raises limits so that nworkers workers, each with a connection or two,
 * fit: connections, and the connections not yet past their first request
 * (every worker connects at once when a round starts). Raises this
 * process's soft descriptor limit towards the hard one when they would
 * not fit in it. */
void crun__agent_store_limits(struct crun__server_limits *limits, int nworkers);

/* Group rank 0's store for the workers of a multi-node job: TCPStore on,
 * the job's token for crun's own clients, bound to addr when it is an
 * address literal, else to every address, on a port the kernel picks.
 * Returns 0 with *out, or a negative errno after printing one line. */
int crun__agent_store_open(uv_loop_t *loop, const struct crun__agent_spec *spec, const char *addr,
			   struct crun__server **out);

#endif

/* `crun status`'s view of a job: the documents the agents publish
 * (agent/status.h), gathered into one job document, and that document as
 * a table. Pure: no I/O but the FILE the table goes to, no clock.
 *
 * The job document (`crun status --json`; crun(1) STATUS):
 *   version        1
 *   run_id, endpoint, time_ms (when read; ages count from it)
 *   round, restart_count, max_restarts, state: the newest round's, as the
 *                  node furthest on reports them (null: unknown)
 *   members: [{group_rank, node_id, host, addr, local_world_size, state}]
 *                  the round's members, each with its node's group state
 *                  ("missing": no status from it); without rendezvous one
 *                  per node that publishes
 *   ranks: [{rank, node, local_rank, pid, state, beat_age_s, step,
 *            step_s, straggler_ratio, gpu}]  every worker of every node
 *                  of the newest round (in it, and a member of it), by
 *                  global rank (workers without one last)
 *   beat_age_s: the beat's age on its node's clock plus how long ago the
 *                  node published by the reader's, the latter within [0,
 *                  4 s] (hosts' clocks differ); null for an exited worker
 *   last_failure: {line, node, time_ms} or null: the newest of the nodes'
 *                  (youngest on its own node's clock)
 *   not_in_round: [{node, node_id, round, state}] the nodes that publish
 *                  but are not in the newest round (an older one, or not a
 *                  member); their workers are not in ranks
 *   nodes: [...]   the agents' own documents, as published, by group rank
 */
#ifndef CRUN_RENDEZVOUS_STATUS_VIEW_H
#define CRUN_RENDEZVOUS_STATUS_VIEW_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#define CRUN_STATUS_KEY_PREFIX "crun/status/"

/* The job document from the agents' documents (an array; borrowed: the
 * result holds references of its own). now_ms: the reader's wall time.
 * NULL when out of memory or nodes is not an array. */
json_t *crun__status_job(const char *run_id, const char *endpoint, json_t *nodes, uint64_t now_ms);

/* The job document as a human table. */
void crun__status_render(FILE *f, const json_t *job);

#endif

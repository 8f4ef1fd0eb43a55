/* This node's status in the job's store, for `crun status`.
 *
 * crun__status_doc() turns the monitor (monitor.h) into one JSON document
 * (pure); the publisher puts it under CRUN_STATUS_PREFIX<node id> in the
 * run's keys of the job's store: on every monitor event, at most once per
 * CRUN_STATUS_MIN_GAP_MS, and every CRUN_STATUS_PERIOD_MS besides, so that
 * a reader sees beats age and the group's state move while the traffic
 * stays bounded (one document of a few KiB per node and second at most).
 *
 * The document (crun(1) STATUS lists the same fields; "version" grows
 * when one changes meaning):
 *   version        1
 *   run_id, node (host name), node_id, pid (the agent's), endpoint (the
 *   store), time_ms (when published: readers compute ages from it),
 *   started_ms, round (null before one), group_rank, nnodes, world_size,
 *   restart_count, max_restarts, state (the group's), store_lost,
 *   exit_status (null while running),
 *   members: [{group_rank, node_id, host, addr, local_world_size}] from
 *            group rank 0 only (empty from the others: readers take them
 *            from rank 0, so the traffic grows with the nodes, not their
 *            square),
 *   workers: [{local_rank, rank, pid, state, exit_code, signal,
 *              started_ms, last_beat_ms, step, step_s, straggler_ratio,
 *              gpu: {index, uuid, name, util, mem_used, mem_total, temp_c,
 *                    power_w, sampled_ms} or null}],
 *   last_failure: {line, time_ms} or null
 * Unknown values are null (a beat never seen, no step, no round). */
#ifndef CRUN_AGENT_STATUS_H
#define CRUN_AGENT_STATUS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agent/monitor.h"

#define CRUN_STATUS_PREFIX "crun/status/"
#define CRUN_STATUS_VERSION 1
#define CRUN_STATUS_MIN_GAP_MS 1000
#define CRUN_STATUS_PERIOD_MS 3000

/* What the monitor does not hold. */
struct crun__status_info {
	const char *node_id;  /* the rendezvous node id, or the host name */
	const char *endpoint; /* the job's store, "HOST:PORT" */
	long pid;	      /* the agent's */
};

/* The document of m at now_ms; NULL when out of memory. The caller owns
 * it (json_decref). */
json_t *crun__status_doc(const struct crun__monitor *m, const struct crun__status_info *info,
			 uint64_t now_ms);

/* Where the publisher puts a document: sets key to len bytes of doc in the
 * job's store (rendezvous.c's client, or the agent's own server). 0 or a
 * negative errno; a failure is only logged (debug): the next one tries
 * again. */
typedef int (*crun__status_put)(void *arg, const char *key, const char *doc, size_t len);

struct crun__status_pub {
	uv_loop_t *loop;
	struct crun__monitor *monitor;
	struct crun__status_info info;
	char node_id[330];
	char endpoint[300];
	char key[400];
	crun__status_put put;
	void *put_arg;
	uv_timer_t tick, soon;
	uint64_t last_ms;	     /* loop time of the last publication */
	uint64_t tick_due, soon_due; /* loop time each timer is due at */
	uv_prepare_t turn;	     /* notes each turn of the loop */
	uint64_t turned_ms;	     /* loop time of the last turn */
	uint64_t stall_ms;
	bool started, closed;
};

/* Observes monitor and starts the timers; publishes at once. info's
 * strings are copied. stall_ms (0: never): a loop that stood still longer
 * (the process was stopped) publishes only after CRUN_STATUS_MIN_GAP_MS,
 * once the agent has heard what happened meanwhile (with rendezvous: the
 * keep-alive interval, less than the window in which the store drops a
 * silent node). 0 or a negative errno (then nothing is started). */
int crun__status_pub_start(struct crun__status_pub *p, uv_loop_t *loop,
			   struct crun__monitor *monitor, const struct crun__status_info *info,
			   crun__status_put put, void *put_arg, uint64_t stall_ms);
/* Publishes now (the job's end), whatever the rate limit says. */
void crun__status_pub_now(struct crun__status_pub *p);
/* Stops the timers and closes them (the loop must run once more). Safe
 * on a publisher never started, and twice. The monitor keeps the
 * observer, which then does nothing. */
void crun__status_pub_close(struct crun__status_pub *p);

/* The closing line of a run without rendezvous into buf (no "crun: "):
 * "run 'ID' ended: succeeded (0 restarts, 3.2s)", "run 'ID' ended:
 * failed: CAUSE (2 restarts, 10.0s)" (cause: the root cause's line; NULL:
 * "exit status N"), "run 'ID' ended: stopped by SIGTERM (...)", or
 * "... ended: exit status 127 (...)" for a command that could not run.
 * Pure. */
void crun__status_closing_line(char *buf, size_t len, const char *run_id, int exit_status,
			       const char *cause, int64_t restarts, double elapsed_s);

#endif

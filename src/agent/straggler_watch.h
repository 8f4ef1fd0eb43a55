/* The agent's straggler watch: the libuv edge of the straggler detector
 * (straggler.h).
 *
 * It hands each step beat of a local worker to the detector with the
 * loop's time, and prints what the detector says as one warning line
 * ("rank 5 on host-b is a straggler: ..."). With rendezvous and more than
 * one node, every CRUN__STRAGGLER_PERIOD_MS it publishes this node's
 * summary through the store when it has something new (or has not
 * published one this round) and reads the other nodes' with one request
 * (rendezvous.h), so that each node compares its ranks with the whole
 * job; without rendezvous it compares the local ranks only.
 *
 * Owns: the detector and one timer. Uses, not owns: the rendezvous. Its
 * owner calls attempt() when the workers of an attempt start, stop() when
 * they are gone, and step() for each beat, all from the loop. With the
 * spec's factor 0 every call does nothing. */
#ifndef CRUN_AGENT_STRAGGLER_WATCH_H
#define CRUN_AGENT_STRAGGLER_WATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agent/agent.h"
#include "agent/monitor.h"
#include "agent/placement.h"
#include "agent/rendezvous.h"

#define CRUN__STRAGGLER_PERIOD_MS 2000

struct crun__straggler;

struct straggler_watch {
	uv_loop_t *loop;
	struct agent_rdzv *rdzv; /* NULL without rendezvous */
	const char *hostname;
	/* Set by the owner after init: gets each local rank's pace after a
	 * decision, and the stragglers named; NULL: nothing. */
	struct crun__monitor *monitor;
	int nlocal;
	struct crun__straggler *core; /* NULL: disabled */
	uv_timer_t timer;
	bool timer_open;
	bool shared;	/* this attempt exchanges summaries */
	bool published; /* this attempt's summary is in the store */
	bool fetching;	/* a read of the others' is outstanding */
	char *summary;
	size_t summary_cap;
};

/* Sets w up for spec's nproc_per_node ranks. 0, -EINVAL for a spec whose
 * straggler settings the detector refuses, or -ENOMEM. */
int crun__straggler_watch_init(struct straggler_watch *w, uv_loop_t *loop,
			       const struct crun__agent_spec *spec, struct agent_rdzv *rdzv,
			       const char *hostname);
/* The workers of an attempt at place start: a fresh history. */
void crun__straggler_watch_attempt(struct straggler_watch *w, const struct crun__placement *place);
/* Local rank local_rank beat step at now_ms (uv_now), with work_s
 * seconds of its own work in that step (-1: not said). */
void crun__straggler_watch_step(struct straggler_watch *w, int local_rank, int64_t step,
				double work_s, uint64_t now_ms);
/* The attempt's workers are gone or being stopped: publishes the last
 * summary when it has something new, then no more. */
void crun__straggler_watch_stop(struct straggler_watch *w);
/* Closes the timer; memory goes in crun__straggler_watch_finish(), after
 * the loop has run. Safe on a zeroed w. */
void crun__straggler_watch_close(struct straggler_watch *w);
void crun__straggler_watch_finish(struct straggler_watch *w);

#endif

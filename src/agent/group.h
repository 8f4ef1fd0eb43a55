/* The worker group's executor: the thin libuv edge around the pure state
 * machine of group_step.h. It turns what happens on the loop (a worker
 * reaped, a pipe closed, a signal, its timer, what the rendezvous hears)
 * into events, asks crun__group_step() what to do, and does it: spawn,
 * signal, arm the timer, join a round, report.
 *
 * Owns: the state machine's state, the workers of the current attempt,
 * its failure records, its one timer. Uses, not owns: the spawner, the
 * rendezvous and the guard, which its owner (agent.c) sets up. */
#ifndef CRUN_AGENT_GROUP_H
#define CRUN_AGENT_GROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "agent/agent.h"
#include "agent/gpu_watch.h"
#include "agent/group_step.h"
#include "agent/heartbeat.h"
#include "agent/monitor.h"
#include "agent/placement.h"
#include "agent/rendezvous.h"
#include "agent/repeat.h"
#include "agent/spawn.h"
#include "agent/straggler_watch.h"
#include "agent/summary.h"

struct group {
	/* Set by the owner before crun__group_init(); not owned. */
	const struct crun__agent_spec *spec;
	uv_loop_t *loop;
	struct crun__spawner *spawner;
	struct agent_rdzv *rdzv; /* NULL without rendezvous */
	struct reaper *reaper;
	struct crun__heartbeat *heartbeat; /* NULL: workers are not watched */
	struct crun__monitor *monitor;	   /* what it records; NULL: nothing */
	/* Waits for the GPUs to release an attempt's dead workers before the
	 * next attempt spawns (NULL: never waits). */
	struct crun__gpu_watch *gpus;
	/* Runs from the loop for every `step N [WORK]` beat of a local
	 * worker, after max_step is updated (NULL: none); for a straggler
	 * detector. work_s: WORK, -1 when the beat has none. */
	void (*on_step)(void *arg, int local_rank, int64_t step, double work_s, uint64_t now_ms);
	void *on_step_arg;
	const char *name; /* the job's, in the summary */
	const char *hostname;
	const char *own_error_file; /* crun's TORCHELASTIC_ERROR_FILE, or NULL */
	bool keeps_files;	    /* a log directory: error files stay */
	/* Rendezvous: the owner's keep-alive window (0: none) and the loop
	 * time it last ran its keep-alive tick (every half interval). A worker
	 * exit seen after a longer silence means the agent was stopped and its
	 * guard killed the workers: the store has dropped this node, and the
	 * group hears that first. */
	int64_t frozen_after_ms;
	uint64_t last_alive_ms;
	/* Runs once, from the loop, when the group reaches a final state. */
	void (*finished)(void *arg, enum crun__group_end end);
	void *arg;

	/* The executor's own. */
	struct crun__group_core core;
	struct worker **workers; /* of the current attempt, by local rank */
	int nworkers;		 /* created in this attempt */
	int running;		 /* workers not yet reaped */
	int open_pipes;		 /* their pipes not yet closed */
	int attempts;		 /* attempts started (counted restarts or not) */
	/* The highest step any local worker beat in the current attempt; -1
	 * when none. Reset when an attempt starts. */
	int64_t max_step;
	/* The repeat rule (repeat.h): the failures of the previous attempt
	 * (none unless it ended with a failure here) and of this one;
	 * attempt_failed: this one recorded a failure; attempt_start:
	 * uv_now() when it started. */
	struct crun__attempt prev_attempt, this_attempt;
	bool attempt_failed;
	uint64_t attempt_start;
	/* A worker of the current attempt found hung: what crun says of it
	 * ("no heartbeat for 30 s, last step 1184"); hang_lr < 0: none. */
	int hang_lr;
	bool hang_recorded;
	char hang_msg[256];
	struct crun__liveness_hang hang;
	uv_timer_t timer;
	enum crun__group_timer timer_kind;
	bool timer_open;
	struct crun__failures failures;
	/* The pids of the last attempt's workers (by local rank; 0: none),
	 * for the GPU release wait; gpu_waiting: SPAWN_ALL is held until the
	 * wait ends, and an event that comes first ends it and drops the
	 * spawn (the step takes the event with no worker running). */
	pid_t *dead_pids;
	bool gpu_waiting;
	/* Step times of the attempt's workers: fed their step beats. */
	struct straggler_watch stragglers;
	/* The store's word on the end of the assigned round (until the next
	 * join), and the rendezvous's line during a failure event. */
	char *round_end;
	int64_t round_end_round;
	int64_t round_end_count;
	bool round_end_joined;
	enum crun__mon_cause round_end_cause; /* of the restart that follows */
	/* Why the attempt that ends is restarted, recorded once, by the
	 * spawn of the next attempt (CRUN_MON_NCAUSES: none said yet): the
	 * attempt's first failure, unless the store's end of the round says
	 * otherwise, or the loss of the store that then stops it. */
	enum crun__mon_cause restart_cause;
	const char *rdzv_msg;
	/* Events the actions of a step caused (spawned, a join that failed),
	 * stepped in order after it: a ring of at most one per action. */
	bool busy;
	int next_head;
	int next_n;
	struct crun__group_event next[CRUN__GROUP_MAX_ACTIONS];
};

/* Sets up g at place (the job's without rendezvous): its timer, the
 * worker array. Takes over the spawner's hooks (exited, pipe_closed).
 * 0 or a negative errno. */
int crun__group_init(struct group *g, const struct crun__placement *place);
/* Fills hooks with the group's handlers, for crun__rdzv_setup(). */
void crun__group_rdzv_hooks(struct group *g, struct crun__rdzv_hooks *hooks);
/* Begins the job: the START event. */
void crun__group_start(struct group *g);
/* A handled signal arrived. */
void crun__group_signal(struct group *g, int sig);
/* Passes sig to every running worker's own process (not its process
 * group), nothing else: no event of the state machine, whose state it
 * does not change. */
void crun__group_forward(struct group *g, int sig);
/* crun's exit status (agent.h) once final, else -1. */
int crun__group_status(const struct group *g);
/* What the group does now, or how it ended, in words for the operator's
 * debug lines: "stopping the workers because a worker failed (1 still
 * running, 2 output streams open)", "the job succeeded". */
void crun__group_describe(const struct group *g, char *buf, size_t len);
/* Closes the timer (its memory goes with g after the loop has run). */
void crun__group_close(struct group *g);
/* Frees what g holds; after the loop has run out. */
void crun__group_finish(struct group *g);

/* Test hook: kill(2) as the group sends signals to worker groups. The
 * unit test replaces it to simulate a process that survives SIGKILL. */
extern int (*agent_kill)(pid_t pid, int sig);

#endif

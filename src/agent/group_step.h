/* The worker group's state machine, as a pure function.
 *
 * crun__group_step() takes the group's state, one event and the facts the
 * decision needs (counts the executor keeps), and returns the next state
 * and the actions to carry out, in order. It has no I/O, no clock, no
 * process and no global: group.c feeds it the events of the libuv loop
 * and carries out what it returns; the unit test calls it
 * directly for every (state, event) pair.
 *
 * An event that cannot happen in a state (a worker exit while no worker
 * runs, a timer that was never armed, anything after a final state) is
 * refused: the step returns -EPROTO and changes nothing. The executor
 * reports that as an internal error; it never passes unnoticed. */
#ifndef CRUN_AGENT_GROUP_STEP_H
#define CRUN_AGENT_GROUP_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/placement.h"
#include "agent/repeat.h"

enum crun__group_state {
	CRUN__GROUP_INIT = 0,
	CRUN__GROUP_STARTING,	 /* spawning the workers of an attempt */
	CRUN__GROUP_RUNNING,	 /* every worker started; supervising */
	CRUN__GROUP_STOPPING,	 /* ending the attempt: waiting for workers, pipes */
	CRUN__GROUP_RESTARTING,	 /* rendezvous: a local worker failed; waiting
				  * for the store to end the round */
	CRUN__GROUP_RENDEZVOUS,	 /* rendezvous: joining a round, then learning
				  * MASTER_ADDR/PORT; no worker runs */
	CRUN__GROUP_FINISHING,	 /* rendezvous: every local worker exited 0; in
				  * the exit barrier until every node is done */
	CRUN__GROUP_SUCCEEDED,	 /* final: exit 0 */
	CRUN__GROUP_FAILED,	 /* final: exit 1 */
	CRUN__GROUP_STOPPED,	 /* final: a handled signal; exit 128+N */
	CRUN__GROUP_EXEC_FAILED, /* final: the command cannot run; 127/126 */
	CRUN__GROUP_NSTATES,
};

enum crun__group_event_kind {
	CRUN__GEV_START = 0,	  /* begin the job */
	CRUN__GEV_SPAWNED,	  /* every worker of the attempt started */
	CRUN__GEV_SPAWN_FAILED,	  /* a worker could not be started */
	CRUN__GEV_WORKER_EXITED,  /* a worker was reaped */
	CRUN__GEV_PIPE_CLOSED,	  /* an output pipe of a started worker closed */
	CRUN__GEV_SIGNAL,	  /* a handled signal arrived */
	CRUN__GEV_TIMER_KILL,	  /* the shutdown timeout passed */
	CRUN__GEV_TIMER_STUCK,	  /* the kill timeout after SIGKILL passed */
	CRUN__GEV_TIMER_DRAIN,	  /* the wait for pipes after the last exit passed */
	CRUN__GEV_WORKER_HUNG,	  /* a worker is hung (heartbeat.h): its stack next */
	CRUN__GEV_HANG_CAPTURED,  /* the hung worker's stack was taken (or not) */
	CRUN__GEV_RDZV_READY,	  /* rendezvous: assigned, MASTER_ADDR/PORT known */
	CRUN__GEV_ROUND_ENDED,	  /* rendezvous: the store ended the round */
	CRUN__GEV_BARRIER_PASSED, /* rendezvous: every node is done */
	CRUN__GEV_RDZV_ERROR,	  /* rendezvous: connect, join or barrier failed */
	CRUN__GEV_STORE_LOST,	  /* rendezvous: the connection to the store is lost */
	CRUN__GROUP_NEVENTS,
};

struct crun__group_event {
	enum crun__group_event_kind kind;
	/* WORKER_EXITED, PIPE_CLOSED, WORKER_HUNG: the worker's local rank (the executor's;
	 * the step passes it through to RECORD_FAILURE and TELL_STORE). */
	int worker;
	/* WORKER_EXITED */
	int exit_code;
	int term_signal; /* 0: exited normally */
	/* SIGNAL */
	int signal;
	/* SPAWN_FAILED: 127 (the command was not found), 126 (found but not
	 * executable), or 0 (the agent failed: files, pipes, memory). */
	int exec_status;
	/* ROUND_ENDED: the store says the restarts are exhausted. */
	bool exhausted;
	/* RDZV_READY: the round's place for the attempt. */
	struct crun__placement place;
};

/* Why the current attempt is being stopped. */
enum crun__group_stop {
	CRUN__GSTOP_NONE = 0,
	CRUN__GSTOP_DONE,	    /* every worker exited 0 */
	CRUN__GSTOP_FAILURE,	    /* a worker failed */
	CRUN__GSTOP_SIGNAL,	    /* crun got a handled signal */
	CRUN__GSTOP_NOT_FOUND,	    /* the command does not exist */
	CRUN__GSTOP_NOT_EXECUTABLE, /* the command cannot be executed */
	CRUN__GSTOP_AGENT,	    /* the agent failed (files, memory, rendezvous) */
	CRUN__GSTOP_ROUND,	    /* rendezvous: the store ended the round */
	CRUN__GSTOP_LOST,	    /* rendezvous: the store is lost (the workers
				     * are SIGKILLed; then a round is joined
				     * again) */
};

/* How the job ended; crun__group_exit_status() gives crun's exit status. */
enum crun__group_end {
	CRUN__GEND_NONE = 0,
	CRUN__GEND_SUCCEEDED,	   /* 0: every worker exited 0 (every node's) */
	CRUN__GEND_FAILED,	   /* 1: a worker failed, no restart left, or a
				    * worker would not die */
	CRUN__GEND_STOPPED,	   /* 128+N: handled signal N */
	CRUN__GEND_NOT_FOUND,	   /* 127 */
	CRUN__GEND_NOT_EXECUTABLE, /* 126 */
	CRUN__GEND_AGENT_ERROR,	   /* 1: the agent failed, the rendezvous
				    * failed (a rejoin after losing the
				    * store included) */
};

enum crun__group_timer {
	CRUN__GTIMER_KILL = 1, /* shutdown timeout: then SIGKILL */
	CRUN__GTIMER_STUCK,    /* kill timeout: then give up on the unreaped */
	CRUN__GTIMER_DRAIN,    /* every worker reaped; pipes still open */
};

/* Lines the executor prints (it has the words: names, counts, messages). */
enum crun__group_note {
	CRUN__GNOTE_STOPPING = 1,     /* "got SIGTERM; stopping" */
	CRUN__GNOTE_STOPPING_WORKERS, /* "got SIGTERM; stopping the workers" */
	CRUN__GNOTE_KILLING,	      /* "got SIGTERM again; killing the workers" */
	CRUN__GNOTE_SHUTDOWN_TIMEOUT, /* "N workers still running after ..." */
	CRUN__GNOTE_OPEN_PIPES,	      /* "output of rank R is still open ..." */
	CRUN__GNOTE_RESTARTING,	      /* "worker group failed: ...; restarting" */
	CRUN__GNOTE_ROUND_ENDED,      /* "round 3 ended: ...; restarting ..." */
	CRUN__GNOTE_RDZV_ERROR,	      /* the rendezvous's own line */
};

enum crun__group_action_kind {
	CRUN__GACT_SAY = 1,	   /* arg: a note */
	CRUN__GACT_SPAWN_ALL,	   /* start every worker at the state's place;
				    * SPAWNED or SPAWN_FAILED follows */
	CRUN__GACT_SIGNAL_RUNNING, /* arg: a signal for every unreaped
				    * worker's process group */
	CRUN__GACT_KILL_LEFTOVERS, /* SIGKILL every started worker's group
				    * (what it left behind); the guard forgets them */
	CRUN__GACT_ARM_TIMER,	   /* arg: a timer (replaces the armed one) */
	CRUN__GACT_DISARM_TIMER,
	CRUN__GACT_CLOSE_PIPES,	     /* close the started workers' open pipes */
	CRUN__GACT_ABANDON_UNREAPED, /* report and give up on every unreaped
				      * worker: none counts as running after it */
	CRUN__GACT_RECORD_FAILURE,   /* record the event's worker's failure */
	CRUN__GACT_CLEAR_FAILURES,
	CRUN__GACT_TELL_STORE,	    /* tell the store the event's worker failed
				     * (and, with no_restart, that the run must
				     * not restart) */
	CRUN__GACT_RELEASE_WORKERS, /* the attempt is over: let go of its workers */
	CRUN__GACT_JOIN,	    /* join the next round; RDZV_ERROR follows
				     * when the request cannot be sent */
	CRUN__GACT_EXIT_BARRIER,    /* enter the exit barrier; likewise */
	CRUN__GACT_SUMMARY,	    /* the failure summary, crun's error file */
	CRUN__GACT_FINISH,	    /* arg: the end; close the agent's handles */
	CRUN__GACT_CAPTURE_STACK,   /* arg: a hung worker; take its stack, then
				     * HANG_CAPTURED follows */
	CRUN__GACT_KILL_HUNG,	    /* arg: the hung worker; kill it */
};

struct crun__group_action {
	enum crun__group_action_kind kind;
	int arg;
};

#define CRUN__GROUP_MAX_ACTIONS 16

struct crun__group_actions {
	int n;
	struct crun__group_action a[CRUN__GROUP_MAX_ACTIONS];
};

/* The group's state. Set it up with crun__group_core_init(); only the step
 * changes it. */
struct crun__group_core {
	enum crun__group_state state;
	/* The current attempt (valid from SPAWN_ALL until it is over). */
	enum crun__group_stop stop;
	int stop_signal;
	bool leftovers_killed; /* KILL_LEFTOVERS done */
	bool gave_up;	       /* a worker would not die */
	bool capturing;	       /* a hung worker's stack is being taken */
	int hung_worker;       /* its local rank */
	/* Rendezvous: the store ended the assigned round (exhausted: and with
	 * it the job). Cleared by each join. */
	bool round_ended;
	bool exhausted;
	struct crun__placement place;
	enum crun__group_end end; /* final states */
	/* The attempt's failure is not to be restarted (repeat.h), and why;
	 * set with its first failure, kept to the summary. */
	enum crun__restart_verdict no_restart;
};

/* What the step needs to know besides its state, counted by the executor
 * after it has booked the event (a reaped worker no longer runs, a closed
 * pipe is no longer open). */
struct crun__group_facts {
	bool rdzv;	  /* rendezvous: the store decides restarts */
	int running;	  /* started workers not yet reaped */
	int open_pipes;	  /* their output pipes not yet closed */
	int failures;	  /* failures recorded in this attempt (a
			   * RECORD_FAILURE of this step counts too) */
	int max_restarts; /* without rendezvous: restarts allowed */
	/* The repeat rule's verdict on the attempt's failures so far, this
	 * event's included (repeat.h); the step takes it with the first
	 * failure it records. */
	enum crun__restart_verdict verdict;
};

/* INIT at place (the restart count and round of a fresh job are 0). */
void crun__group_core_init(struct crun__group_core *g, const struct crun__placement *place);

/* Applies ev to *g. 0: *g is the next state and out holds the actions to
 * carry out, in order. -EPROTO: ev cannot happen in g's state (or needs
 * rendezvous without it); *g is unchanged and out is empty. */
int crun__group_step(struct crun__group_core *g, const struct crun__group_event *ev,
		     const struct crun__group_facts *f, struct crun__group_actions *out);

/* crun's exit status in a final state (see agent.h); -1 in any other. */
int crun__group_exit_status(const struct crun__group_core *g);

/* Ends the job at once as an agent error (FAILED, exit 1), from any state
 * that is not final: out holds the actions that stop everything (disarm
 * the timer, SIGKILL every worker group, close the pipes, finish). For the
 * executor when crun__group_step() refused an event, which is a bug of
 * crun's: the job must not wait for events that will never move it. In a
 * final state it does nothing (out is empty). */
void crun__group_abort(struct crun__group_core *g, struct crun__group_actions *out);
/* 127 (-ENOENT), 126 (errors of exec that mean "cannot execute"), or 0
 * (anything else: the agent's own failure) for a failed uv_spawn. */
int crun__group_exec_status(int err);
bool crun__group_is_final(enum crun__group_state s);

const char *crun__group_state_name(enum crun__group_state s);
const char *crun__group_event_name(enum crun__group_event_kind k);

#endif

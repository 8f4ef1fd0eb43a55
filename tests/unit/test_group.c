/* Unit tests of the worker group's state machine (src/agent/group_step.c),
 * called directly: no loop, no process.
 *
 * `rows` lists what the step does, one row per (mode, state, event) and
 * the facts that choose a branch; its actions are spelled as a string.
 * Every (mode, state, event) without a row must be refused: together the
 * two checks cover every pair. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/group_step.h"
#include "common/util.h"

/* The state a row starts from. */
enum {
	F_ROUND_ENDED = 1, /* the store ended the round */
	F_EXHAUSTED = 2,   /* ... and the restarts are exhausted */
	F_LEFTOVERS = 4,   /* leftovers already killed */
	F_GAVE_UP = 8,	   /* a worker would not die */
	/* The repeat rule's verdict on the attempt's first failure (facts),
	 * and one already taken (the state's no_restart). */
	F_CONFIG = 16,
	F_REPEAT = 32,
	F_NO_RESTART = 64,
	F_CAPTURING = 128, /* worker 1 is hung; its stack is being taken */
};

enum mode { N, R }; /* without / with rendezvous */

struct row {
	enum mode mode;
	enum crun__group_state state;
	enum crun__group_stop stop;
	int stop_signal;
	unsigned flags;
	struct crun__group_event ev;
	int running, pipes, failures, restarts; /* facts; max_restarts is 3 */
	enum crun__group_state next;
	int status; /* exit status in next (-1: not final) */
	const char *actions;
};

#define S(x) CRUN__GROUP_##x
#define STOP(x) CRUN__GSTOP_##x
#define EV(x)                         \
	{                             \
		.kind = CRUN__GEV_##x \
	}
#define EXIT(code, sig)                                                          \
	{                                                                        \
		.kind = CRUN__GEV_WORKER_EXITED, .worker = 1, .exit_code = code, \
		.term_signal = sig                                               \
	}
#define SIG(n)                                        \
	{                                             \
		.kind = CRUN__GEV_SIGNAL, .signal = n \
	}
#define SPAWN_FAILED(st)                                          \
	{                                                         \
		.kind = CRUN__GEV_SPAWN_FAILED, .exec_status = st \
	}
#define ENDED(ex)                                              \
	{                                                      \
		.kind = CRUN__GEV_ROUND_ENDED, .exhausted = ex \
	}
#define READY                                            \
	{                                                \
		.kind = CRUN__GEV_RDZV_READY, .place = { \
			.group_rank = 1,                 \
			.nnodes = 2,                     \
			.world_size = 4,                 \
			.rank_offset = 2,                \
			.round = 4,                      \
			.restart_count = 2,              \
			.master_addr = "10.0.0.1",       \
			.master_port = 29500             \
		}                                        \
	}

#define HUNG                                               \
	{                                                  \
		.kind = CRUN__GEV_WORKER_HUNG, .worker = 1 \
	}

/* What the attempt's end does once nothing runs and no pipe is open. */
#define OVER "kill-leftovers release disarm "

static const struct row rows[] = {
	/* mode state stop sig flags event running pipes failures restarts -> next status actions */
	{N, S(INIT), 0, 0, 0, EV(START), 0, 0, 0, 0, S(STARTING), -1, "spawn-all"},
	{R, S(INIT), 0, 0, 0, EV(START), 0, 0, 0, 0, S(RENDEZVOUS), -1, "clear-failures join"},

	{N, S(STARTING), 0, 0, 0, EV(SPAWNED), 2, 4, 0, 0, S(RUNNING), -1, ""},
	{R, S(STARTING), 0, 0, 0, EV(SPAWNED), 2, 4, 0, 0, S(RUNNING), -1, ""},
	{N, S(STARTING), 0, 0, 0, SPAWN_FAILED(127), 0, 0, 0, 0, S(EXEC_FAILED), 127,
	 OVER "finish:not-found"},
	{N, S(STARTING), 0, 0, 0, SPAWN_FAILED(126), 0, 0, 0, 0, S(EXEC_FAILED), 126,
	 OVER "finish:not-executable"},
	{N, S(STARTING), 0, 0, 0, SPAWN_FAILED(126), 1, 2, 0, 0, S(STOPPING), -1,
	 "signal:15 arm:kill"},
	{N, S(STARTING), 0, 0, 0, SPAWN_FAILED(0), 0, 0, 0, 0, S(FAILED), 1,
	 OVER "finish:agent-error"},
	{R, S(STARTING), 0, 0, 0, SPAWN_FAILED(0), 0, 0, 0, 0, S(FAILED), 1,
	 OVER "finish:agent-error"},
	/* Before the workers start (the executor waits for the GPUs of the
	 * previous attempt's workers): nothing runs, nothing is spawned. */
	{N, S(STARTING), 0, 0, 0, SIG(SIGTERM), 0, 0, 0, 0, S(STOPPED), 143,
	 "say:stopping finish:stopped"},
	{R, S(STARTING), 0, 0, 0, SIG(SIGINT), 0, 0, 0, 0, S(STOPPED), 130,
	 "say:stopping finish:stopped"},
	{R, S(STARTING), 0, 0, 0, ENDED(false), 0, 0, 0, 0, S(RENDEZVOUS), -1,
	 "say:round-ended clear-failures join"},
	{R, S(STARTING), 0, 0, 0, ENDED(true), 0, 0, 0, 0, S(FAILED), 1,
	 "say:round-ended summary finish:failed"},
	{R, S(STARTING), 0, 0, 0, EV(RDZV_ERROR), 0, 0, 0, 0, S(FAILED), 1,
	 "say:rdzv-error finish:agent-error"},
	{R, S(STARTING), 0, 0, 0, EV(STORE_LOST), 0, 0, 0, 0, S(RENDEZVOUS), -1,
	 "say:rdzv-error clear-failures join"},

	{N, S(RUNNING), 0, 0, 0, EXIT(0, 0), 1, 4, 0, 0, S(RUNNING), -1, ""},
	{N, S(RUNNING), 0, 0, 0, EXIT(0, 0), 0, 2, 0, 0, S(STOPPING), -1,
	 "kill-leftovers arm:drain"},
	{N, S(RUNNING), 0, 0, 0, EXIT(0, 0), 0, 0, 0, 0, S(SUCCEEDED), 0, OVER "finish:succeeded"},
	{R, S(RUNNING), 0, 0, 0, EXIT(0, 0), 0, 0, 0, 0, S(FINISHING), -1, OVER "barrier"},
	{R, S(RUNNING), 0, 0, F_ROUND_ENDED, EXIT(0, 0), 0, 0, 0, 0, S(RENDEZVOUS), -1,
	 OVER "clear-failures join"},
	{N, S(RUNNING), 0, 0, 0, EXIT(1, 0), 2, 4, 0, 0, S(STOPPING), -1,
	 "record:1 signal:15 arm:kill"},
	{R, S(RUNNING), 0, 0, 0, EXIT(0, SIGSEGV), 2, 4, 0, 0, S(STOPPING), -1,
	 "record:1 tell-store:1 signal:15 arm:kill"},
	{N, S(RUNNING), 0, 0, 0, EXIT(1, 0), 0, 0, 0, 0, S(STARTING), -1,
	 "record:1 " OVER "say:restarting clear-failures spawn-all"},
	{N, S(RUNNING), 0, 0, 0, EXIT(1, 0), 0, 0, 0, 3, S(FAILED), 1,
	 "record:1 " OVER "summary finish:failed"},
	{R, S(RUNNING), 0, 0, 0, EXIT(1, 0), 0, 0, 0, 0, S(RESTARTING), -1,
	 "record:1 tell-store:1 kill-leftovers release disarm"},
	/* Not restarted: a configuration error, a failure that repeats. */
	{N, S(RUNNING), 0, 0, F_CONFIG, EXIT(78, 0), 0, 0, 0, 0, S(FAILED), 1,
	 "record:1 " OVER "summary finish:failed"},
	{N, S(RUNNING), 0, 0, F_REPEAT, EXIT(1, 0), 0, 0, 0, 1, S(FAILED), 1,
	 "record:1 " OVER "summary finish:failed"},
	{N, S(RUNNING), 0, 0, F_REPEAT, EXIT(1, 0), 2, 4, 0, 1, S(STOPPING), -1,
	 "record:1 signal:15 arm:kill"},
	{R, S(RUNNING), 0, 0, F_CONFIG, EXIT(78, 0), 2, 4, 0, 0, S(STOPPING), -1,
	 "record:1 tell-store:1 signal:15 arm:kill"},
	{R, S(RUNNING), 0, 0, F_REPEAT, EXIT(1, 0), 0, 0, 0, 0, S(RESTARTING), -1,
	 "record:1 tell-store:1 kill-leftovers release disarm"},
	{N, S(RUNNING), 0, 0, 0, EV(PIPE_CLOSED), 2, 3, 0, 0, S(RUNNING), -1, ""},
	{R, S(RUNNING), 0, 0, 0, EV(PIPE_CLOSED), 2, 3, 0, 0, S(RUNNING), -1, ""},
	{N, S(RUNNING), 0, 0, 0, SIG(SIGTERM), 2, 4, 0, 0, S(STOPPING), -1,
	 "say:stopping-workers signal:15 arm:kill"},
	{R, S(RUNNING), 0, 0, 0, SIG(SIGINT), 2, 4, 0, 0, S(STOPPING), -1,
	 "say:stopping-workers signal:2 arm:kill"},
	{R, S(RUNNING), 0, 0, 0, ENDED(false), 2, 4, 0, 0, S(STOPPING), -1,
	 "say:round-ended signal:15 arm:kill"},
	{R, S(RUNNING), 0, 0, 0, EV(RDZV_ERROR), 2, 4, 0, 0, S(STOPPING), -1,
	 "say:rdzv-error signal:15 arm:kill"},
	/* The store is lost: kill the workers at once, then rejoin. */
	{R, S(RUNNING), 0, 0, 0, EV(STORE_LOST), 0, 0, 0, 0, S(RENDEZVOUS), -1,
	 "say:rdzv-error " OVER "clear-failures join"},
	{R, S(RUNNING), 0, 0, 0, EV(STORE_LOST), 2, 4, 0, 0, S(STOPPING), -1,
	 "say:rdzv-error signal:9 arm:stuck"},
	/* A hang: recorded first, nothing signalled before its stack is taken. */
	{N, S(RUNNING), 0, 0, 0, HUNG, 4, 8, 0, 0, S(STOPPING), -1, "record:1 capture:1"},
	{R, S(RUNNING), 0, 0, 0, HUNG, 4, 8, 0, 0, S(STOPPING), -1,
	 "record:1 tell-store:1 capture:1"},
	{N, S(STOPPING), STOP(FAILURE), 0, F_CAPTURING, EV(HANG_CAPTURED), 4, 8, 1, 0, S(STOPPING),
	 -1, "kill-hung:1 signal:15 arm:kill"},
	{R, S(STOPPING), STOP(FAILURE), 0, F_CAPTURING, EV(HANG_CAPTURED), 2, 4, 1, 0, S(STOPPING),
	 -1, "kill-hung:1 signal:15 arm:kill"},
	/* A signal came meanwhile: it was forwarded already. */
	{N, S(STOPPING), STOP(SIGNAL), SIGTERM, F_CAPTURING, EV(HANG_CAPTURED), 1, 2, 1, 0,
	 S(STOPPING), -1, "kill-hung:1 arm:kill"},
	/* Every worker is gone already, or no stack was being taken. */
	{N, S(STOPPING), STOP(FAILURE), 0, F_CAPTURING, EV(HANG_CAPTURED), 0, 2, 1, 0, S(STOPPING),
	 -1, ""},
	{N, S(STOPPING), STOP(FAILURE), 0, 0, EV(HANG_CAPTURED), 2, 4, 1, 0, S(STOPPING), -1, ""},
	/* Ranks that exit on their own meanwhile are other failures. */
	{N, S(STOPPING), STOP(FAILURE), 0, F_CAPTURING, EXIT(1, 0), 3, 8, 1, 0, S(STOPPING), -1,
	 "record:1"},

	/* Killed by our own SIGTERM or SIGKILL: not a failure of its own. */
	{N, S(STOPPING), STOP(FAILURE), 0, 0, EXIT(0, SIGTERM), 1, 4, 1, 0, S(STOPPING), -1, ""},
	{N, S(STOPPING), STOP(FAILURE), 0, 0, EXIT(3, 0), 1, 4, 1, 0, S(STOPPING), -1, "record:1"},
	{N, S(STOPPING), STOP(SIGNAL), 2, 0, EXIT(3, 0), 1, 4, 0, 0, S(STOPPING), -1, ""},
	{N, S(STOPPING), STOP(FAILURE), 0, 0, EXIT(0, SIGKILL), 0, 1, 1, 0, S(STOPPING), -1,
	 "kill-leftovers arm:drain"},
	{N, S(STOPPING), STOP(FAILURE), 0, 0, EXIT(3, 0), 0, 0, 1, 1, S(STARTING), -1,
	 "record:1 " OVER "say:restarting clear-failures spawn-all"},
	{N, S(STOPPING), STOP(FAILURE), 0, F_GAVE_UP, EXIT(0, SIGKILL), 0, 0, 1, 0, S(FAILED), 1,
	 OVER "summary finish:failed"},
	/* The first failure's verdict holds; a later one's verdict is not
	 * looked at. */
	{N, S(STOPPING), STOP(FAILURE), 0, F_NO_RESTART, EXIT(0, SIGTERM), 0, 0, 1, 0, S(FAILED), 1,
	 OVER "summary finish:failed"},
	{N, S(STOPPING), STOP(FAILURE), 0, F_REPEAT, EXIT(3, 0), 0, 0, 1, 0, S(STARTING), -1,
	 "record:1 " OVER "say:restarting clear-failures spawn-all"},
	{N, S(STOPPING), STOP(SIGNAL), SIGINT, 0, EXIT(0, SIGINT), 0, 0, 0, 0, S(STOPPED), 130,
	 OVER "finish:stopped"},
	{N, S(STOPPING), STOP(NOT_FOUND), 0, 0, EXIT(0, SIGTERM), 0, 0, 0, 0, S(EXEC_FAILED), 127,
	 OVER "finish:not-found"},
	{N, S(STOPPING), STOP(NOT_EXECUTABLE), 0, 0, EXIT(0, SIGTERM), 0, 0, 0, 0, S(EXEC_FAILED),
	 126, OVER "finish:not-executable"},
	{N, S(STOPPING), STOP(AGENT), 0, 0, EXIT(0, SIGTERM), 0, 0, 0, 0, S(FAILED), 1,
	 OVER "finish:agent-error"},
	{R, S(STOPPING), STOP(ROUND), 0, F_ROUND_ENDED, EXIT(0, SIGTERM), 0, 0, 0, 0, S(RENDEZVOUS),
	 -1, OVER "clear-failures join"},
	{R, S(STOPPING), STOP(ROUND), 0, F_ROUND_ENDED | F_EXHAUSTED, EXIT(0, SIGTERM), 0, 0, 0, 0,
	 S(FAILED), 1, OVER "summary finish:failed"},
	{R, S(STOPPING), STOP(LOST), 0, 0, EXIT(0, SIGKILL), 0, 0, 0, 0, S(RENDEZVOUS), -1,
	 OVER "clear-failures join"},
	{R, S(STOPPING), STOP(LOST), 0, F_GAVE_UP, EXIT(0, SIGKILL), 0, 0, 0, 0, S(FAILED), 1,
	 OVER "summary finish:failed"},
	{R, S(STOPPING), STOP(FAILURE), 0, F_ROUND_ENDED, EXIT(0, SIGTERM), 0, 0, 1, 0,
	 S(RENDEZVOUS), -1, OVER "clear-failures join"},
	{R, S(STOPPING), STOP(FAILURE), 0, F_GAVE_UP, EXIT(0, SIGKILL), 0, 0, 1, 0, S(FAILED), 1,
	 OVER "summary finish:failed"},
	{R, S(STOPPING), STOP(DONE), 0, 0, EXIT(0, 0), 0, 0, 0, 0, S(FINISHING), -1,
	 OVER "barrier"},
	{N, S(STOPPING), STOP(DONE), 0, F_LEFTOVERS, EV(PIPE_CLOSED), 0, 1, 0, 0, S(STOPPING), -1,
	 ""},
	{N, S(STOPPING), STOP(DONE), 0, F_LEFTOVERS, EV(PIPE_CLOSED), 0, 0, 0, 0, S(SUCCEEDED), 0,
	 "release disarm finish:succeeded"},
	{R, S(STOPPING), STOP(FAILURE), 0, 0, EV(PIPE_CLOSED), 1, 1, 1, 0, S(STOPPING), -1, ""},
	{N, S(STOPPING), STOP(FAILURE), 0, 0, SIG(SIGTERM), 2, 4, 1, 0, S(STOPPING), -1,
	 "say:stopping-workers signal:15"},
	{N, S(STOPPING), STOP(SIGNAL), SIGTERM, 0, SIG(SIGTERM), 2, 4, 0, 0, S(STOPPING), -1,
	 "say:killing signal:9 arm:stuck"},
	{N, S(STOPPING), STOP(DONE), 0, F_LEFTOVERS, SIG(SIGINT), 0, 1, 0, 0, S(STOPPING), -1,
	 "say:stopping close-pipes"},
	{R, S(STOPPING), STOP(SIGNAL), SIGINT, F_LEFTOVERS, SIG(SIGINT), 0, 1, 0, 0, S(STOPPING),
	 -1, "close-pipes"},
	{N, S(STOPPING), STOP(FAILURE), 0, 0, EV(TIMER_KILL), 2, 4, 1, 0, S(STOPPING), -1,
	 "say:shutdown-timeout signal:9 arm:stuck"},
	{N, S(STOPPING), STOP(FAILURE), 0, 0, EV(TIMER_STUCK), 1, 2, 1, 0, S(STOPPING), -1,
	 "abandon close-pipes kill-leftovers arm:drain"},
	{N, S(STOPPING), STOP(FAILURE), 0, 0, EV(TIMER_STUCK), 1, 0, 1, 0, S(FAILED), 1,
	 "abandon close-pipes " OVER "summary finish:failed"},
	{R, S(STOPPING), STOP(SIGNAL), SIGTERM, 0, EV(TIMER_STUCK), 1, 0, 0, 0, S(STOPPED), 143,
	 "abandon close-pipes " OVER "finish:stopped"},
	{R, S(STOPPING), STOP(ROUND), 0, 0, EV(TIMER_KILL), 1, 2, 0, 0, S(STOPPING), -1,
	 "say:shutdown-timeout signal:9 arm:stuck"},
	{N, S(STOPPING), STOP(DONE), 0, F_LEFTOVERS, EV(TIMER_DRAIN), 0, 2, 0, 0, S(STOPPING), -1,
	 "say:open-pipes close-pipes"},
	{R, S(STOPPING), STOP(DONE), 0, F_LEFTOVERS, EV(TIMER_DRAIN), 0, 2, 0, 0, S(STOPPING), -1,
	 "say:open-pipes close-pipes"},
	{R, S(STOPPING), STOP(FAILURE), 0, 0, ENDED(false), 1, 2, 1, 0, S(STOPPING), -1,
	 "say:round-ended"},
	{R, S(STOPPING), STOP(SIGNAL), SIGTERM, 0, ENDED(false), 1, 2, 0, 0, S(STOPPING), -1, ""},
	{R, S(STOPPING), STOP(FAILURE), 0, 0, EV(RDZV_ERROR), 1, 2, 1, 0, S(STOPPING), -1,
	 "say:rdzv-error"},
	{R, S(STOPPING), STOP(SIGNAL), SIGTERM, 0, EV(STORE_LOST), 1, 2, 0, 0, S(STOPPING), -1, ""},
	{R, S(STOPPING), STOP(FAILURE), 0, 0, EV(STORE_LOST), 1, 2, 1, 0, S(STOPPING), -1,
	 "say:rdzv-error signal:9 arm:stuck"},
	{R, S(STOPPING), STOP(ROUND), 0, F_LEFTOVERS, EV(STORE_LOST), 0, 1, 0, 0, S(STOPPING), -1,
	 "say:rdzv-error"},
	{R, S(STOPPING), STOP(ROUND), 0, F_ROUND_ENDED | F_EXHAUSTED, EV(STORE_LOST), 1, 2, 0, 0,
	 S(STOPPING), -1, ""},

	{R, S(RESTARTING), 0, 0, 0, SIG(SIGTERM), 0, 0, 1, 0, S(STOPPED), 143,
	 "say:stopping finish:stopped"},
	{R, S(RESTARTING), 0, 0, 0, ENDED(false), 0, 0, 1, 0, S(RENDEZVOUS), -1,
	 "say:round-ended clear-failures join"},
	{R, S(RESTARTING), 0, 0, 0, ENDED(true), 0, 0, 1, 0, S(FAILED), 1,
	 "say:round-ended summary finish:failed"},
	{R, S(RESTARTING), 0, 0, 0, EV(RDZV_ERROR), 0, 0, 1, 0, S(FAILED), 1,
	 "say:rdzv-error finish:agent-error"},
	{R, S(RESTARTING), 0, 0, 0, EV(STORE_LOST), 0, 0, 1, 0, S(RENDEZVOUS), -1,
	 "say:rdzv-error clear-failures join"},

	{R, S(RENDEZVOUS), 0, 0, 0, READY, 0, 0, 0, 0, S(STARTING), -1, "spawn-all"},
	{R, S(RENDEZVOUS), 0, 0, 0, SIG(SIGHUP), 0, 0, 0, 0, S(STOPPED), 129,
	 "say:stopping finish:stopped"},
	{R, S(RENDEZVOUS), 0, 0, 0, ENDED(false), 0, 0, 0, 0, S(RENDEZVOUS), -1,
	 "say:round-ended clear-failures join"},
	{R, S(RENDEZVOUS), 0, 0, 0, ENDED(true), 0, 0, 0, 0, S(FAILED), 1,
	 "say:round-ended summary finish:failed"},
	{R, S(RENDEZVOUS), 0, 0, 0, EV(RDZV_ERROR), 0, 0, 0, 0, S(FAILED), 1,
	 "say:rdzv-error finish:agent-error"},
	{R, S(RENDEZVOUS), 0, 0, 0, EV(STORE_LOST), 0, 0, 0, 0, S(RENDEZVOUS), -1,
	 "say:rdzv-error clear-failures join"},

	{R, S(FINISHING), 0, 0, 0, EV(BARRIER_PASSED), 0, 0, 0, 0, S(SUCCEEDED), 0,
	 "finish:succeeded"},
	{R, S(FINISHING), 0, 0, 0, SIG(SIGQUIT), 0, 0, 0, 0, S(STOPPED), 131,
	 "say:stopping finish:stopped"},
	{R, S(FINISHING), 0, 0, 0, ENDED(false), 0, 0, 0, 0, S(RENDEZVOUS), -1,
	 "say:round-ended clear-failures join"},
	{R, S(FINISHING), 0, 0, 0, ENDED(true), 0, 0, 0, 0, S(FAILED), 1,
	 "say:round-ended summary finish:failed"},
	{R, S(FINISHING), 0, 0, 0, EV(RDZV_ERROR), 0, 0, 0, 0, S(FAILED), 1,
	 "say:rdzv-error finish:agent-error"},
	{R, S(FINISHING), 0, 0, 0, EV(STORE_LOST), 0, 0, 0, 0, S(FAILED), 1,
	 "say:rdzv-error finish:agent-error"},
};

static const char *note_name(int note)
{
	switch (note) {
	case CRUN__GNOTE_STOPPING:
		return "stopping";
	case CRUN__GNOTE_STOPPING_WORKERS:
		return "stopping-workers";
	case CRUN__GNOTE_KILLING:
		return "killing";
	case CRUN__GNOTE_SHUTDOWN_TIMEOUT:
		return "shutdown-timeout";
	case CRUN__GNOTE_OPEN_PIPES:
		return "open-pipes";
	case CRUN__GNOTE_RESTARTING:
		return "restarting";
	case CRUN__GNOTE_ROUND_ENDED:
		return "round-ended";
	case CRUN__GNOTE_RDZV_ERROR:
		return "rdzv-error";
	}
	return "?";
}

static const char *end_name(int end)
{
	switch (end) {
	case CRUN__GEND_SUCCEEDED:
		return "succeeded";
	case CRUN__GEND_FAILED:
		return "failed";
	case CRUN__GEND_STOPPED:
		return "stopped";
	case CRUN__GEND_NOT_FOUND:
		return "not-found";
	case CRUN__GEND_NOT_EXECUTABLE:
		return "not-executable";
	case CRUN__GEND_AGENT_ERROR:
		return "agent-error";
	}
	return "?";
}

static const char *timer_name(int timer)
{
	switch (timer) {
	case CRUN__GTIMER_KILL:
		return "kill";
	case CRUN__GTIMER_STUCK:
		return "stuck";
	case CRUN__GTIMER_DRAIN:
		return "drain";
	}
	return "?";
}

/* The actions as a row spells them. */
static void spell(const struct crun__group_actions *acts, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (int i = 0; i < acts->n; i++) {
		const struct crun__group_action *a = &acts->a[i];
		char one[64];

		switch (a->kind) {
		case CRUN__GACT_SAY:
			snprintf(one, sizeof(one), "say:%s", note_name(a->arg));
			break;
		case CRUN__GACT_SPAWN_ALL:
			snprintf(one, sizeof(one), "spawn-all");
			break;
		case CRUN__GACT_SIGNAL_RUNNING:
			snprintf(one, sizeof(one), "signal:%d", a->arg);
			break;
		case CRUN__GACT_KILL_LEFTOVERS:
			snprintf(one, sizeof(one), "kill-leftovers");
			break;
		case CRUN__GACT_ARM_TIMER:
			snprintf(one, sizeof(one), "arm:%s", timer_name(a->arg));
			break;
		case CRUN__GACT_DISARM_TIMER:
			snprintf(one, sizeof(one), "disarm");
			break;
		case CRUN__GACT_CLOSE_PIPES:
			snprintf(one, sizeof(one), "close-pipes");
			break;
		case CRUN__GACT_ABANDON_UNREAPED:
			snprintf(one, sizeof(one), "abandon");
			break;
		case CRUN__GACT_RECORD_FAILURE:
			snprintf(one, sizeof(one), "record:%d", a->arg);
			break;
		case CRUN__GACT_CLEAR_FAILURES:
			snprintf(one, sizeof(one), "clear-failures");
			break;
		case CRUN__GACT_TELL_STORE:
			snprintf(one, sizeof(one), "tell-store:%d", a->arg);
			break;
		case CRUN__GACT_RELEASE_WORKERS:
			snprintf(one, sizeof(one), "release");
			break;
		case CRUN__GACT_JOIN:
			snprintf(one, sizeof(one), "join");
			break;
		case CRUN__GACT_EXIT_BARRIER:
			snprintf(one, sizeof(one), "barrier");
			break;
		case CRUN__GACT_SUMMARY:
			snprintf(one, sizeof(one), "summary");
			break;
		case CRUN__GACT_FINISH:
			snprintf(one, sizeof(one), "finish:%s", end_name(a->arg));
			break;
		case CRUN__GACT_CAPTURE_STACK:
			snprintf(one, sizeof(one), "capture:%d", a->arg);
			break;
		case CRUN__GACT_KILL_HUNG:
			snprintf(one, sizeof(one), "kill-hung:%d", a->arg);
			break;
		default:
			snprintf(one, sizeof(one), "?%d", (int)a->kind);
			break;
		}
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? " " : "", one);
		assert_true(off < len);
	}
}

static const struct crun__placement job = {
	.nnodes = 1,
	.world_size = 2,
	.master_addr = "127.0.0.1",
	.master_port = 29400,
};

static void prepare(struct crun__group_core *g, const struct row *r)
{
	crun__group_core_init(g, &job);
	g->state = r->state;
	g->stop = r->stop;
	g->stop_signal = r->stop_signal;
	g->round_ended = r->flags & F_ROUND_ENDED;
	g->exhausted = r->flags & F_EXHAUSTED;
	g->leftovers_killed = r->flags & F_LEFTOVERS;
	g->gave_up = r->flags & F_GAVE_UP;
	g->no_restart = r->flags & F_NO_RESTART ? CRUN__NO_RESTART_REPEAT : CRUN__RESTART;
	g->capturing = r->flags & F_CAPTURING;
	g->hung_worker = g->capturing ? 1 : 0;
	g->place.restart_count = r->restarts;
}

static struct crun__group_facts facts_of(const struct row *r)
{
	struct crun__group_facts f = {
		.rdzv = r->mode == R,
		.running = r->running,
		.open_pipes = r->pipes,
		.failures = r->failures,
		.max_restarts = 3,
		.verdict = r->flags & F_CONFIG	 ? CRUN__NO_RESTART_CONFIG
			   : r->flags & F_REPEAT ? CRUN__NO_RESTART_REPEAT
						 : CRUN__RESTART,
	};

	return f;
}

static void test_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(rows); i++) {
		const struct row *r = &rows[i];
		struct crun__group_facts f = facts_of(r);
		struct crun__group_actions acts;
		struct crun__group_core g;
		char got[512];
		int rc;

		prepare(&g, r);
		rc = crun__group_step(&g, &r->ev, &f, &acts);
		if (rc < 0)
			fail_msg("row %zu (%s, %s): refused", i, crun__group_state_name(r->state),
				 crun__group_event_name(r->ev.kind));
		spell(&acts, got, sizeof(got));
		if (strcmp(got, r->actions) || g.state != r->next ||
		    crun__group_exit_status(&g) != r->status)
			fail_msg("row %zu (%s, %s): got %s %d '%s', want %s %d '%s'", i,
				 crun__group_state_name(r->state),
				 crun__group_event_name(r->ev.kind),
				 crun__group_state_name(g.state), crun__group_exit_status(&g), got,
				 crun__group_state_name(r->next), r->status, r->actions);
		/* The verdict is taken with the attempt's first failure, and
		 * kept (the summary and the store's message say why). */
		if (!r->failures && strstr(r->actions, "record:"))
			assert_int_equal(g.no_restart, f.verdict);
		else if (!(r->flags & F_NO_RESTART) && g.state != S(STARTING))
			assert_int_equal(g.no_restart, CRUN__RESTART);
	}
}

static bool has_row(enum mode m, enum crun__group_state s, enum crun__group_event_kind k)
{
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(rows); i++)
		if (rows[i].mode == m && rows[i].state == s && rows[i].ev.kind == k)
			return true;
	return false;
}

/* Every pair without a row is refused, whatever the facts, and the state
 * stays as it was. */
static void test_impossible_refused(void **state)
{
	static const struct crun__group_facts variants[] = {
		{.running = 0, .open_pipes = 0},
		{.running = 2, .open_pipes = 4, .failures = 1},
	};
	int refused = 0;

	(void)state;
	for (int m = N; m <= R; m++) {
		for (int s = 0; s < CRUN__GROUP_NSTATES; s++) {
			for (int k = 0; k < CRUN__GROUP_NEVENTS; k++) {
				if (has_row(m, s, k))
					continue;
				for (size_t v = 0; v < CRUN_ARRAY_SIZE(variants); v++) {
					struct crun__group_facts f = variants[v];
					struct crun__group_event ev = {.kind = k,
								       .signal = SIGTERM};
					struct crun__group_actions acts = {.n = 5};
					struct crun__group_core g, before;

					f.rdzv = m == R;
					f.max_restarts = 3;
					crun__group_core_init(&g, &job);
					g.state = s;
					g.stop = CRUN__GSTOP_FAILURE;
					before = g;
					if (crun__group_step(&g, &ev, &f, &acts) != -EPROTO)
						fail_msg("%s mode: (%s, %s) was not refused",
							 m == R ? "rendezvous" : "plain",
							 crun__group_state_name(s),
							 crun__group_event_name(k));
					assert_int_equal(acts.n, 0);
					assert_memory_equal(&g, &before, sizeof(g));
				}
				refused++;
			}
		}
	}
	/* Most pairs cannot happen: a sign that the table is the whole
	 * behaviour, not a default that swallows events. */
	assert_true(refused > CRUN__GROUP_NSTATES * CRUN__GROUP_NEVENTS);
	/* Values outside the enums are refused too. */
	{
		struct crun__group_facts f = {.max_restarts = 3};
		struct crun__group_event ev = {.kind = CRUN__GROUP_NEVENTS};
		struct crun__group_actions acts;
		struct crun__group_core g;

		crun__group_core_init(&g, &job);
		assert_int_equal(crun__group_step(&g, &ev, &f, &acts), -EPROTO);
		g.state = CRUN__GROUP_NSTATES;
		ev.kind = CRUN__GEV_START;
		assert_int_equal(crun__group_step(&g, &ev, &f, &acts), -EPROTO);
	}
}

/* What the rows do not show: the placement READY brings, the restart
 * count a restart adds, and whole runs of steps. */
static struct crun__group_actions step_ok(struct crun__group_core *g, struct crun__group_event ev,
					  struct crun__group_facts f)
{
	struct crun__group_actions acts;

	f.max_restarts = 3;
	assert_int_equal(crun__group_step(g, &ev, &f, &acts), 0);
	return acts;
}

static void test_placement(void **state)
{
	struct crun__group_event ready = READY;
	struct crun__group_core g;

	(void)state;
	crun__group_core_init(&g, &job);
	assert_int_equal(g.place.master_port, 29400);
	step_ok(&g, (struct crun__group_event)EV(START), (struct crun__group_facts){.rdzv = true});
	step_ok(&g, ready, (struct crun__group_facts){.rdzv = true});
	assert_int_equal(g.state, CRUN__GROUP_STARTING);
	assert_int_equal(g.place.group_rank, 1);
	assert_int_equal(g.place.rank_offset, 2);
	assert_int_equal(g.place.world_size, 4);
	assert_int_equal(g.place.round, 4);
	assert_int_equal(g.place.restart_count, 2);
	assert_string_equal(g.place.master_addr, "10.0.0.1");
	assert_int_equal(g.place.master_port, 29500);
}

/* Two failures and a success without rendezvous (max 3 restarts). */
static void test_restarts(void **state)
{
	struct crun__group_facts none = {0}, two = {.running = 2, .open_pipes = 4};
	struct crun__group_actions acts;
	struct crun__group_core g;

	(void)state;
	crun__group_core_init(&g, &job);
	step_ok(&g, (struct crun__group_event)EV(START), none);
	for (int attempt = 0; attempt < 2; attempt++) {
		struct crun__group_facts left = {.running = 1, .open_pipes = 4};
		struct crun__group_facts after = {.running = 0, .open_pipes = 4, .failures = 1};

		step_ok(&g, (struct crun__group_event)EV(SPAWNED), two);
		acts = step_ok(&g, (struct crun__group_event)EXIT(1, 0), left);
		assert_int_equal(g.state, CRUN__GROUP_STOPPING);
		step_ok(&g, (struct crun__group_event)EXIT(0, SIGTERM), after);
		for (int pipes = 3; pipes >= 0; pipes--) {
			after.open_pipes = pipes;
			acts = step_ok(&g, (struct crun__group_event)EV(PIPE_CLOSED), after);
		}
		assert_int_equal(g.state, CRUN__GROUP_STARTING);
		assert_int_equal(g.place.restart_count, attempt + 1);
		assert_int_equal(g.place.round, attempt + 1);
		assert_int_equal(acts.a[acts.n - 1].kind, CRUN__GACT_SPAWN_ALL);
	}
	step_ok(&g, (struct crun__group_event)EV(SPAWNED), two);
	step_ok(&g, (struct crun__group_event)EXIT(0, 0), (struct crun__group_facts){.running = 1});
	step_ok(&g, (struct crun__group_event)EXIT(0, 0), none);
	assert_int_equal(g.state, CRUN__GROUP_SUCCEEDED);
	assert_int_equal(crun__group_exit_status(&g), 0);
}

/* A hang, a rank it brought down, the stack, the restart: the hung rank
 * stays the root cause and the next attempt starts afresh. */
static void test_hang(void **state)
{
	struct crun__group_event hung = HUNG;
	struct crun__group_actions acts;
	struct crun__group_core g;
	char got[256];

	(void)state;
	crun__group_core_init(&g, &job);
	step_ok(&g, (struct crun__group_event)EV(START), (struct crun__group_facts){0});
	step_ok(&g, (struct crun__group_event)EV(SPAWNED),
		(struct crun__group_facts){.running = 2});
	acts = step_ok(&g, hung, (struct crun__group_facts){.running = 2, .open_pipes = 4});
	spell(&acts, got, sizeof(got));
	assert_string_equal(got, "record:1 capture:1");
	acts = step_ok(&g, (struct crun__group_event)EXIT(1, 0),
		       (struct crun__group_facts){.running = 1, .open_pipes = 4, .failures = 1});
	spell(&acts, got, sizeof(got));
	assert_string_equal(got, "record:1");
	acts = step_ok(&g, (struct crun__group_event)EV(HANG_CAPTURED),
		       (struct crun__group_facts){.running = 1, .open_pipes = 4, .failures = 2});
	spell(&acts, got, sizeof(got));
	assert_string_equal(got, "kill-hung:1 signal:15 arm:kill");
	assert_false(g.capturing);
	acts = step_ok(&g, (struct crun__group_event)EXIT(0, SIGKILL),
		       (struct crun__group_facts){.failures = 2});
	spell(&acts, got, sizeof(got));
	assert_string_equal(got, OVER "say:restarting clear-failures spawn-all");
	assert_int_equal(g.state, CRUN__GROUP_STARTING);
	assert_int_equal(g.place.restart_count, 1);
}

/* The store is lost, or a second signal comes, while a hung worker's
 * stack is being taken: every worker gets SIGKILL at once, and the
 * capture's end then changes nothing (no shutdown timer over the kill
 * timer, no second SIGKILL). */
static void test_hang_then_kill(void **state)
{
	static const struct crun__group_event kills[] = {
		EV(STORE_LOST), {.kind = CRUN__GEV_SIGNAL, .signal = SIGTERM}};
	struct crun__group_event hung = HUNG;
	struct crun__group_actions acts;
	char got[256];

	(void)state;
	for (size_t i = 0; i < sizeof(kills) / sizeof(kills[0]); i++) {
		struct crun__group_core g;

		crun__group_core_init(&g, &job);
		step_ok(&g, (struct crun__group_event)EV(START),
			(struct crun__group_facts){.rdzv = true});
		step_ok(&g, (struct crun__group_event){.kind = CRUN__GEV_RDZV_READY, .place = job},
			(struct crun__group_facts){.rdzv = true});
		step_ok(&g, (struct crun__group_event)EV(SPAWNED),
			(struct crun__group_facts){.rdzv = true, .running = 2});
		step_ok(&g, hung,
			(struct crun__group_facts){.rdzv = true, .running = 2, .open_pipes = 4});
		if (kills[i].kind == CRUN__GEV_SIGNAL) /* the first is forwarded */
			step_ok(&g, kills[i],
				(struct crun__group_facts){.rdzv = true,
							   .running = 2,
							   .open_pipes = 4,
							   .failures = 1});
		acts = step_ok(&g, kills[i],
			       (struct crun__group_facts){
				       .rdzv = true, .running = 2, .open_pipes = 4, .failures = 1});
		spell(&acts, got, sizeof(got));
		assert_non_null(strstr(got, "signal:9 arm:stuck"));
		assert_false(g.capturing);
		acts = step_ok(&g, (struct crun__group_event)EV(HANG_CAPTURED),
			       (struct crun__group_facts){
				       .rdzv = true, .running = 2, .open_pipes = 4, .failures = 1});
		spell(&acts, got, sizeof(got));
		assert_string_equal(got, "");
	}
}

/* A refused event ends the job as an agent error, from every state that
 * is not final; a final state stays as it is. */
static void test_abort(void **state)
{
	(void)state;
	for (int st = 0; st < CRUN__GROUP_NSTATES; st++) {
		struct crun__group_core g;
		struct crun__group_actions acts;
		char got[256];

		crun__group_core_init(&g, &job);
		g.state = st;
		crun__group_abort(&g, &acts);
		if (crun__group_is_final(st)) {
			assert_int_equal(acts.n, 0);
			assert_int_equal(g.state, st);
			continue;
		}
		spell(&acts, got, sizeof(got));
		assert_string_equal(got, "disarm kill-leftovers close-pipes finish:agent-error");
		assert_int_equal(g.state, CRUN__GROUP_FAILED);
		assert_int_equal(crun__group_exit_status(&g), 1);
	}
}

static void test_exec_status(void **state)
{
	(void)state;
	assert_int_equal(crun__group_exec_status(-ENOENT), 127);
	assert_int_equal(crun__group_exec_status(-EACCES), 126);
	assert_int_equal(crun__group_exec_status(-ENOEXEC), 126);
	assert_int_equal(crun__group_exec_status(-ENOMEM), 0);
	assert_int_equal(crun__group_exec_status(-EMFILE), 0);
	assert_string_equal(crun__group_state_name(CRUN__GROUP_EXEC_FAILED), "exec-failed");
	assert_string_equal(crun__group_event_name(CRUN__GEV_STORE_LOST), "store-lost");
	for (int s = 0; s < CRUN__GROUP_NSTATES; s++)
		assert_string_not_equal(crun__group_state_name(s), "?");
	for (int k = 0; k < CRUN__GROUP_NEVENTS; k++)
		assert_string_not_equal(crun__group_event_name(k), "?");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),	    cmocka_unit_test(test_impossible_refused),
		cmocka_unit_test(test_placement),   cmocka_unit_test(test_restarts),
		cmocka_unit_test(test_exec_status), cmocka_unit_test(test_abort),
		cmocka_unit_test(test_hang),	    cmocka_unit_test(test_hang_then_kill),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The workers' heartbeats: the libuv edge around liveness.h.
 *
 * Every worker gets one end of a socket pair as file descriptor 3, named
 * by CRUN_HEARTBEAT_FD=3 in its environment, and writes lines on it
 * ("step 12\n", see liveness.h). With TORCHELASTIC_ENABLE_FILE_TIMER=1
 * and no TORCHELASTIC_TIMER_FILE in crun's environment, the edge also
 * makes a named pipe for the job (in the agent's private directory, which
 * its guard removes even when crun is killed), names it in every worker's
 * TORCHELASTIC_TIMER_FILE, and reads the JSON requests of torch's
 * FileTimerClient from it. It feeds what it reads to the pure core and
 * runs one timer, for the earliest deadline; when it passes, it reports
 * the hung worker to its owner and stops watching until the next worker
 * starts (a new attempt). An expired FileTimer whose process is no longer
 * the worker's (exited, or its pid reused) is dropped instead, as torch's
 * server drops it.
 *
 * Owns: the core's state, the channels (freed when their handles have
 * closed), the timer, the named pipe, and its directory when it made one
 * (no private directory was given). */
#ifndef CRUN_AGENT_HEARTBEAT_H
#define CRUN_AGENT_HEARTBEAT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "agent/liveness.h"
#include "agent/monitor.h"

/* The descriptor a worker's channel has, and its variable. */
#define CRUN__HEARTBEAT_FD 3
#define CRUN__HEARTBEAT_ENV "CRUN_HEARTBEAT_FD"

struct beat_chan;

struct crun__heartbeat {
	/* Set by the owner before crun__heartbeat_init(); not owned. */
	uv_loop_t *loop;
	/* Run from the loop. hung: worker h->worker (a local rank) is hung;
	 * nothing more is reported until a worker starts again. on_step: a
	 * `step N` or `step N WORK` line of a local rank (NULL: none), for
	 * whoever follows progress; work_s is WORK, -1 when the line has
	 * none. The worker group (group.c) takes all three: it keeps
	 * max_step and passes every step on through its own on_step hook, to
	 * which a straggler detector connects. */
	void (*hung)(void *arg, const struct crun__liveness_hang *h);
	void (*on_step)(void *arg, int local_rank, int64_t step, double work_s, uint64_t now_ms);
	void *arg;
	struct crun__monitor *monitor; /* records every beat; NULL: none */

	/* The edge's own. */
	struct crun__liveness core;
	struct beat_chan **chans; /* by local rank; NULL: none open */
	pid_t *pids;		  /* by local rank; 0: not running */
	char *states;		  /* by local rank: process states, when checked */
	int n;
	uv_timer_t timer;
	bool timer_open;
	bool paused; /* a hang was reported */
	/* FileTimer */
	char *timer_dir;
	char *timer_file; /* NULL: no FileTimer server */
	char *timer_env;  /* "TORCHELASTIC_TIMER_FILE=<timer_file>" */
	uv_pipe_t fifo;
	bool fifo_open;
	char fifo_buf[4096];
	size_t fifo_len;
	bool fifo_skip;	  /* dropping the rest of an overlong request */
	uint64_t fifo_at; /* when fifo_buf last grew (loop time) */
	uint64_t unknown_lines;
};

/* Sets up hb for nworkers local ranks: the timer and, with file_timer,
 * the named pipe (see above), as dir/timer.fifo; dir (not owned, must
 * outlive hb) is the agent's private directory; NULL: a directory of its
 * own in $TMPDIR, removed by crun__heartbeat_finish() only. 0 or a
 * negative errno (said on stderr). */
int crun__heartbeat_init(struct crun__heartbeat *hb, const struct crun__liveness_config *cfg,
			 int nworkers, bool file_timer, const char *dir);

/* The handle for local rank lr's channel, initialised, for uv_spawn's
 * stdio[CRUN__HEARTBEAT_FD] (UV_CREATE_PIPE | UV_WRITABLE_PIPE); closes
 * the channel lr had. NULL when out of memory (the worker then runs
 * without a channel). */
uv_pipe_t *crun__heartbeat_channel(struct crun__heartbeat *hb, int lr);
/* Local rank lr started as pid: read its channel, watch it once it
 * speaks. Or it could not be started / it exited: close its channel. */
void crun__heartbeat_started(struct crun__heartbeat *hb, int lr, pid_t pid);
void crun__heartbeat_gone(struct crun__heartbeat *hb, int lr);

/* Whether pid is, now, local rank lr's running worker or a live (not
 * zombie) process of its session (workers lead their own). For whoever
 * is about to signal the pid of an expired FileTimer: the check made when
 * the timer expired may be stale by then (the pid exited, or was reused). */
bool crun__heartbeat_owns(const struct crun__heartbeat *hb, int lr, pid_t pid);

/* Closes every handle; the memory goes in crun__heartbeat_finish() after
 * the loop has run. */
void crun__heartbeat_close(struct crun__heartbeat *hb);
void crun__heartbeat_finish(struct crun__heartbeat *hb);

#endif

/* Workers: their command line, their environment, their log and error
 * files, and their processes.
 *
 * Owns: the environment every worker shares (built once per job), and
 * each struct worker with its libuv handles (a process and two output
 * pipes). A worker is freed when its last handle has closed and its owner
 * has let go of it (crun__worker_detach), whichever comes last. */
#ifndef CRUN_AGENT_SPAWN_H
#define CRUN_AGENT_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "agent/agent.h"
#include "agent/heartbeat.h"
#include "agent/output.h"
#include "agent/placement.h"
#include "agent/reaper.h"

#define CRUN__PREFIX_MAX 256 /* a longer rendered prefix is cut */

struct crun__spawner;

struct worker {
	struct crun__spawner *sp;
	int local_rank;
	int rank;
	int attempt; /* restart count when it was started */
	int seq;     /* attempts of this agent before its own: names its log
		      * directory (attempt_<seq>), so that a restart that is
		      * not counted (a node joined) never overwrites a log */
	uv_process_t proc;
	struct outpipe out[2]; /* [0] stdout, [1] stderr */
	int handles;	       /* libuv handles not yet closed */
	bool detached;	       /* the owner no longer refers to it */
	bool spawned;	       /* uv_spawn succeeded */
	bool exec_failed;      /* uv_spawn itself failed (fork or exec) */
	bool running;	       /* spawned and not yet reaped */
	pid_t pid;
	int exit_code;	 /* valid once reaped */
	int term_signal; /* 0: exited normally */
	uint64_t exit_wall_ms;
	char *error_file;  /* its TORCHELASTIC_ERROR_FILE */
	char *log_path[2]; /* stdout.log / stderr.log, or NULL */
	char prefix[CRUN__PREFIX_MAX];
};

/* What the workers of a job share. The owner fills in the first fields
 * (not owned: they outlive the spawner) and calls crun__spawner_env_init. */
struct crun__spawner {
	uv_loop_t *loop;
	const struct crun__agent_spec *spec;
	const char *log_root;  /* the run's own (logdir.h); NULL: no log files */
	const char *tmp_dir;   /* directory of error files without log_root */
	const char *store_env; /* "CRUN_STORE=host:port"; NULL: no store */
	const char *token_env; /* "CRUN_TOKEN=..."; NULL: none */
	/* One node's agent store (agent.h): its TCPStore keys are dropped
	 * before each attempt's workers start. NULL: none. */
	struct crun__server *agent_store;
	struct console *console; /* [0] stdout, [1] stderr */
	struct reaper *reaper;	 /* told each worker's process group */
	/* Gives each worker its heartbeat channel (CRUN_HEARTBEAT_FD) and,
	 * when it serves one, TORCHELASTIC_TIMER_FILE; NULL: neither. */
	struct crun__heartbeat *heartbeat;
	/* Run from the loop (never from inside crun__worker_spawn): a
	 * worker was reaped; a pipe of a worker not yet detached closed. */
	void (*exited)(struct worker *w, void *arg);
	void (*pipe_closed)(struct worker *w, void *arg);
	void *arg;

	/* The shared part of every worker's environment. */
	char **env;
	size_t nenv;
	char *env_own[24]; /* the agent's own strings in env */
	int nenv_own;
	const char *cuda_visible; /* inherited CUDA_VISIBLE_DEVICES (virtual
				   * local rank); NULL: unset */
};

/* Builds the environment every worker shares (see agent.h). Prints the
 * OMP_NUM_THREADS notice when it sets it. 0 or -ENOMEM. */
int crun__spawner_env_init(struct crun__spawner *s);
void crun__spawner_env_finish(struct crun__spawner *s);

/* Creates worker local_rank of an attempt at place (seq: the attempt's
 * number in this agent): log files, pipes, and the process. Returns the
 * worker (also when it failed to start: then *err is the negative errno
 * from uv_spawn or from opening its files, and w->spawned is false), or
 * NULL when out of memory. */
struct worker *crun__worker_spawn(struct crun__spawner *s, const struct crun__placement *place,
				  int local_rank, int seq, int *err);
/* Gives up on a worker that was not reaped after SIGKILL: its process
 * handle is closed, so libuv no longer waits for it (no exit follows). */
void crun__worker_abandon(struct worker *w);
/* The owner lets go of w; frees it once its handles have closed. */
void crun__worker_detach(struct worker *w);

#endif

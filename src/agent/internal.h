/* Internals of the agent, shared by its files and by tests/unit/test_agent.c.
 *
 *   agent.c    crun_agent_run(): setup of loop, signals, store, directories
 *              and environment; teardown
 *   group.c    the worker group's state machine: one event function
 *   spawn.c    one worker: argv, environment, log files, uv_spawn, exit
 *   output.c   output pipes: line assembly, prefixes, console and log files
 *   summary.c  failure records, the failure summary, crun's error file
 *   json.c     a small JSON reader and writer for TORCHELASTIC_ERROR_FILE
 *   reaper.c   the guard process that kills worker groups if crun dies
 *   rendezvous.c  multi-node: hosting the store, the agent's store client,
 *              joining rounds, MASTER_ADDR/PORT, failures, exit barrier
 *
 * Memory of a worker: the group creates one struct worker per local rank
 * and attempt. It owns up to three libuv handles (process, stdout pipe,
 * stderr pipe); the worker is freed when the last handle has closed and the
 * group has let go of it (agent_worker_detach), whichever comes last. */
#ifndef CRUN_AGENT_INTERNAL_H
#define CRUN_AGENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "agent/agent.h"
#include "rendezvous/rdzv.h"

/* Lines up to this length reach the console whole, with one write(2). A
 * longer line is written as it comes, its prefix once, while the console
 * stream is held for it so that no other line lands inside it. */
#define AGENT_LINE_MAX (256 * 1024)
/* After every worker of an attempt has been reaped, how long to wait for
 * their pipes to close (a process that left the worker's process group may
 * hold them) before closing them ourselves. */
#define AGENT_DRAIN_MS 1000
#define AGENT_PREFIX_MAX 96

struct agent;
struct worker;

/* ---- json.c ---- */

enum json_type {
	JSON_NULL,
	JSON_BOOL,
	JSON_NUMBER,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

/* A parsed JSON value. Strings are NUL-terminated UTF-8 (len excludes the
 * NUL; "\u0000" is kept as a byte, so len is authoritative); numbers keep
 * their text in str. Arrays and objects chain their members through
 * child/next; members of objects have key set. */
struct json {
	enum json_type type;
	bool boolean;
	char *str;
	size_t len;
	char *key;
	struct json *child;
	struct json *next;
};

#define JSON_MAX_DEPTH 64

/* Parses text[0..len) as one JSON value (RFC 8259; nesting up to
 * JSON_MAX_DEPTH). Returns a tree to free with agent_json_free(), or NULL
 * with "line L column C: what was wrong" in err. */
struct json *agent_json_parse(const char *text, size_t len, char *err, size_t errlen);
void agent_json_free(struct json *v);
/* Member key of object obj, or NULL (also when obj is not an object). */
struct json *agent_json_get(const struct json *obj, const char *key);
/* New values for building documents; NULL when out of memory. The string
 * is copied. agent_json_set() replaces or appends member key of obj, taking
 * ownership of val (freed on failure); 0 or -ENOMEM. */
struct json *agent_json_new(enum json_type type);
struct json *agent_json_new_string(const char *s, size_t len);
struct json *agent_json_new_number(long long n);
int agent_json_set(struct json *obj, const char *key, struct json *val);
/* Serializes v compactly (as Python's json.dumps does, with ", " and ": "
 * separators). Returns a malloc'd NUL-terminated string or NULL. */
char *agent_json_dump(const struct json *v);

/* ---- reaper.c ---- */

/* The guard: a process forked before any worker that holds the read end
 * of a pipe whose write end only crun holds. crun tells it each worker's
 * process group; when the pipe reaches EOF without a goodbye (crun died,
 * even by SIGKILL) it SIGKILLs every group it knows, removes cleanup_dir,
 * and exits. It is in a process group of its own and ignores the terminal's
 * signals, so ^C or a signal to crun's group does not take it away. */
struct reaper {
	pid_t pid;   /* 0: no guard */
	int fd;	     /* write end, O_CLOEXEC; -1: none */
	bool broken; /* the guard is gone; warned once */
};

/* Forks the guard. capacity: the most groups watched at once. cleanup_dir
 * (may be NULL): a directory whose files the guard removes, with the
 * directory, if crun dies. 0 or a negative errno. */
int agent_reaper_start(struct reaper *r, size_t capacity, const char *cleanup_dir);
/* Tells the guard to kill group pgid if crun dies / to forget it. */
void agent_reaper_watch(struct reaper *r, pid_t pgid);
void agent_reaper_forget(struct reaper *r, pid_t pgid);
/* Says goodbye (the guard kills nothing), waits for the guard to exit. */
void agent_reaper_stop(struct reaper *r);

/* ---- output.c ---- */

/* One of crun's console streams (stdout or stderr), shared by the pipes of
 * that stream of every worker. */
struct console {
	int fd;
	bool broken;		 /* a write failed (EPIPE...): output is dropped */
	struct outpipe *owner;	 /* pipe in the middle of a line > AGENT_LINE_MAX */
	struct outpipe *waiters; /* pipes holding output until owner is done */
};

struct outpipe {
	uv_pipe_t handle;
	struct worker *worker;
	struct console *console; /* NULL: not shown on the console */
	int file_fd;		 /* log file; -1: none */
	const char *file_path;
	char *buf; /* bytes of an unfinished line (and, while
		    * waiting for the console, more lines) */
	size_t len, cap;
	bool open;	/* initialised and not yet closed */
	bool eof;	/* EOF (or a read error) was seen */
	bool long_line; /* owns the console; prefix already written */
	bool after_cr;	/* the last segment ended with '\r' (a CRLF split
			 * between reads: its '\n' gets no prefix) */
	bool waiting;	/* on the console's waiters list */
	struct outpipe *next_waiter;
};

void agent_console_init(struct console *c, int fd);

/* Initialises p (handle on loop) for worker w. The pipe is ready to be
 * passed to uv_spawn as UV_CREATE_PIPE; the caller sets console and
 * file_fd. 0 or a negative errno. */
int agent_outpipe_init(struct outpipe *p, uv_loop_t *loop, struct worker *w);
/* Starts reading after a successful uv_spawn. 0 or a negative errno. */
int agent_outpipe_start(struct outpipe *p);
/* Writes out what is buffered (an unfinished line gets a newline), closes
 * the log file and uv_closes the pipe. On EOF the pipe does this itself.
 * Either way the worker is told when the handle has closed. */
void agent_outpipe_close(struct outpipe *p);

/* ---- spawn.c ---- */

struct worker {
	struct agent *agent;
	int local_rank;
	int rank;
	int attempt; /* restart count when it was started */
	int seq;     /* attempts of this agent before its own: names its log
	              * directory (attempt_<seq>), so that a restart that is
	              * not counted (a node joined) never overwrites a log */
	uv_process_t proc;
	struct outpipe out[2]; /* [0] stdout, [1] stderr */
	int handles;	       /* libuv handles not yet closed */
	bool detached;	       /* the group no longer refers to it */
	bool spawned;	       /* uv_spawn succeeded */
	bool exec_failed;      /* uv_spawn itself failed (fork or exec) */
	bool running;	       /* spawned and not yet reaped */
	pid_t pid;
	int exit_code;	 /* valid once reaped */
	int term_signal; /* 0: exited normally */
	uint64_t exit_wall_ms;
	char *error_file;  /* its TORCHELASTIC_ERROR_FILE */
	char *log_path[2]; /* stdout.log / stderr.log, or NULL */
	char prefix[AGENT_PREFIX_MAX];
	size_t prefix_len;
};

/* Builds the environment every worker shares (see agent.h) into a->env.
 * Prints the OMP_NUM_THREADS notice when it sets it. 0 or -ENOMEM. */
int agent_env_init(struct agent *a);
void agent_env_finish(struct agent *a);

/* Creates worker local_rank of the current attempt: log files, pipes, and
 * the process. Returns the worker (also when it failed to start: then
 * *err is the negative errno from uv_spawn or from opening its files, and
 * w->spawned is false), or NULL when out of memory. */
struct worker *agent_worker_spawn(struct agent *a, int local_rank, int *err);
/* Called by a handle's close callback; for a pipe the group hears of it
 * (EV_PIPE_CLOSED) unless it has let go of w. */
void agent_worker_handle_closed(struct worker *w, bool is_pipe);
/* Gives up on a worker that was not reaped after SIGKILL: its process
 * handle is closed, so libuv no longer waits for it. */
void agent_worker_abandon(struct worker *w);
/* The group lets go of w; frees it once its handles have closed. */
void agent_worker_detach(struct worker *w);
/* mkdir -p with mode 0777 (umask applies). 0 or a negative errno. */
int agent_mkdir_p(const char *path);

/* ---- summary.c ---- */

struct failure {
	int rank;
	int local_rank;
	pid_t pid;
	int exit_code;
	int term_signal;
	uint64_t wall_ms;
	char *error_file; /* copied; NULL: none */
	char *log_file;	  /* stderr log (else stdout log); NULL: none */
};

/* Records w's failure (exit code or signal) in a->failures. 0 or -ENOMEM. */
int agent_failure_add(struct agent *a, const struct worker *w);
void agent_failures_clear(struct agent *a);
/* "exited with code 3" / "was killed by SIGSEGV" */
void agent_describe_exit(char *buf, size_t len, int exit_code, int term_signal);
/* Prints the failure summary of the last attempt to stderr and, when crun
 * was given TORCHELASTIC_ERROR_FILE, writes the root cause there. With
 * rendezvous, when no local rank failed in the last round, the root cause
 * is the round's end as the store reported it (a->rdzv.end_msg: which
 * rank on which host failed, or which node left). */
void agent_summary_report(struct agent *a);
/* Writes root-cause JSON: the worker's error file (parsed from err_text,
 * errorCode set to code) if it parses, else a document made of message
 * and detail. tmp file, fsync, rename. 0 or a negative errno. */
int agent_error_file_write(const char *path, const char *err_text, size_t err_len,
			   const char *message, const char *detail, int code);
/* Reads the error file a worker wrote: message and traceback (malloc'd,
 * NULL when absent). 0, or a negative errno when the file is missing,
 * unreadable or not the JSON of @record. */
int agent_error_file_read(const char *path, char **message, char **traceback);

/* ---- group.c ---- */

enum group_state {
	GROUP_INIT = 0,
	GROUP_STARTING,	   /* spawning the workers of an attempt */
	GROUP_RUNNING,	   /* every worker started; supervising */
	GROUP_STOPPING,	   /* ending the attempt: waiting for workers, pipes */
	GROUP_RESTARTING,  /* attempt over, the next one is being set up */
	GROUP_SUCCEEDED,   /* final: every worker exited 0 */
	GROUP_FAILED,	   /* final: exit 1 */
	GROUP_STOPPED,	   /* final: a handled signal; exit 128+N */
	GROUP_EXEC_FAILED, /* final: the command cannot run; exit 126/127 */
	GROUP_RENDEZVOUS,  /* rendezvous: joining a round, then learning
			    * MASTER_ADDR/PORT; no worker runs */
	GROUP_FINISHING,   /* rendezvous: every local worker exited 0; in the
			    * exit barrier (DONE) until every node is done */
};

enum group_event {
	EV_START,	  /* begin the first attempt */
	EV_WORKER_EXITED, /* w's process was reaped */
	EV_PIPE_CLOSED,	  /* one of w's pipes closed (after EOF) */
	EV_SIGNAL,	  /* arg: a handled signal arrived */
	EV_TIMER,	  /* the group's timer fired */
	/* Rendezvous (rendezvous.c); details in a->rdzv. */
	EV_RDZV_READY, /* the round is assigned and MASTER_ADDR/PORT known */
	EV_RDZV_ENDED, /* the store ended the round (end_reason, end_msg) */
	EV_RDZV_DONE,  /* the exit barrier passed: the job succeeded */
	EV_RDZV_ERROR, /* connect, join or barrier failed (error_msg) */
	EV_STORE_LOST, /* the connection to the store is lost (error_msg) */
};

/* Why the current attempt is being stopped. */
enum stop_reason {
	STOP_NONE = 0,
	STOP_DONE,    /* every worker exited 0 */
	STOP_FAILURE, /* a worker failed */
	STOP_SIGNAL,  /* crun got a handled signal */
	STOP_EXEC,    /* the command cannot be executed */
	STOP_AGENT,   /* the agent failed (files, memory) */
	STOP_ROUND,   /* rendezvous: the store ended the round */
	STOP_LOST,    /* rendezvous: the store is lost */
};

enum timer_phase {
	TIMER_NONE = 0,
	TIMER_KILL,  /* shutdown timeout: then SIGKILL */
	TIMER_STUCK, /* kill timeout: then give up on the unreaped */
	TIMER_DRAIN, /* every worker reaped; pipes still open */
};

void agent_group_event(struct agent *a, enum group_event ev, struct worker *w, int arg);
const char *agent_group_state_name(enum group_state s);

/* ---- rendezvous.c ---- */

/* Outstanding request to the store (freed by its reply, or with the
 * client). */
struct rdzv_req;

struct agent_rdzv {
	struct crun_aclient *client;
	bool connected;
	bool join_wanted;   /* join as soon as connected */
	bool hosting;	    /* this agent's server serves the endpoint */
	char endpoint[300]; /* "host:port" ("[v6]:port"), as given */
	char node_id[330];
	char self_addr[300]; /* JOIN's addr: --local-addr, the endpoint when
			      * hosting it on a non-loopback address, else
			      * empty (the store uses the peer address) */
	uint64_t gen;	     /* bumped by every join: older replies are stale */
	uint32_t join_id;    /* RDZV_EVENTs carry it */
	bool assigned;
	struct crun_rdzv_assignment asg;
	char master_addr[300];
	/* The end of the assigned round, from its RDZV_EVENT. */
	bool ended;
	char end_reason[16]; /* failure, left, join, exhausted */
	char *end_msg;
	int64_t end_count; /* restart count after it */
	/* Why the rendezvous failed or the store was lost (a whole line). */
	char *error_msg;
	struct rdzv_req *reqs; /* outstanding requests */
};

/* Decides whether this agent hosts the store (and binds it), creates the
 * store client and starts connecting (retrying until the join timeout).
 * Sets the CRUN_STORE and CRUN_TOKEN strings. Prints what failed. 0 or a
 * negative errno. */
int agent_rdzv_setup(struct agent *a);
/* Joins the next round (once connected): a new generation; EV_RDZV_READY,
 * EV_RDZV_ERROR or EV_STORE_LOST follow, or EV_RDZV_ENDED when the round
 * ends before MASTER_ADDR is known. 0, or a negative errno when the
 * request cannot be sent (error_msg says why; no event follows). */
int agent_rdzv_join(struct agent *a);
/* Tells the store that a local worker failed in the assigned round
 * (message: "rank 5 (local rank 1) on host-b exited with code 1"); the
 * round's EV_RDZV_ENDED follows. */
void agent_rdzv_fail(struct agent *a, const char *message);
/* Enters the exit barrier: EV_RDZV_DONE, or EV_RDZV_ENDED when the round
 * ends first. 0, or a negative errno as agent_rdzv_join. */
int agent_rdzv_done(struct agent *a);
/* Closes the store client (no more events) and frees what rendezvous.c
 * holds. Safe to call more than once. */
void agent_rdzv_finish(struct agent *a);
/* Removes a directory of plain files (no subdirectories): the agent's
 * private directory of error files; also used by the guard process. */
void agent_remove_dir(const char *dir);

/* ---- agent.c ---- */

struct agent {
	uv_loop_t loop;
	const struct crun_agent_spec *spec;
	const char *name; /* spec->name or argv[0] */
	char hostname[256];
	int world_size;

	enum group_state state;
	enum stop_reason reason;
	int stop_signal;
	int exec_error; /* negative errno of the failed exec */
	int restart_count;
	int attempts; /* attempts started so far (counted restarts or not) */
	int exit_status;       /* valid in a final state */
	bool leftovers_killed; /* attempt: every group got SIGKILL */
	bool gave_up;	       /* attempt: a worker would not die */
	bool shut;	       /* agent_shutdown() was called */
	bool lingering;	       /* hosting: serving the store after the end */
	bool handles_closed;   /* timer, signals and server closed */

	struct worker **workers; /* of the current attempt, nproc entries */
	int nworkers;		 /* created in this attempt */
	int running;		 /* workers not yet reaped */
	int open_pipes;		 /* pipes not yet closed */

	uv_timer_t timer;
	enum timer_phase timer_phase;
	uv_signal_t *signals;
	int nsignals;

	struct console console[2];
	struct reaper reaper;
	struct crun_server *server;
	char *store_env; /* CRUN_STORE=host:port */
	char *token_env; /* CRUN_TOKEN=... */

	char *log_root;		    /* <log_dir>/<run_id>, or NULL */
	char *tmp_dir;		    /* private dir for error files, or NULL */
	const char *own_error_file; /* crun's TORCHELASTIC_ERROR_FILE */

	/* The current attempt's place in the job: fixed without rendezvous,
	 * from each round's assignment with it. */
	int group_rank;
	int nnodes;
	int rank_offset; /* global rank of local rank 0 */
	int64_t round;	 /* CRUN_ROUND */
	const char *master_addr;
	int master_port;
	struct agent_rdzv rdzv;
	char **env; /* shared part of every worker's env */
	size_t nenv;
	char *env_own[24]; /* the agent's own strings in env */
	int nenv_own;
	const char *cuda_visible; /* inherited CUDA_VISIBLE_DEVICES (virtual
				   * local rank); NULL: unset */

	struct failure *failures; /* of the current attempt, in order */
	size_t nfailures, cap_failures;
};

/* True when local rank lr's stream (0 out, 1 err) goes to a file / to the
 * console. */
bool agent_stream_to_file(const struct agent *a, int lr, int stream);
bool agent_stream_to_console(const struct agent *a, int lr, int stream);
/* Ends the loop: closes the agent's own handles (signals, timer, store).
 * Called once the group reaches a final state. */
void agent_shutdown(struct agent *a);
/* Test hook: kill(2) as the agent sends signals to worker groups. The
 * unit test replaces it to simulate a process that survives SIGKILL. */
extern int (*agent_kill)(pid_t pid, int sig);

#endif

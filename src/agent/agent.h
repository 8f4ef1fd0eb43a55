/* The agent: runs one node's worker group and supervises it.
 *
 * crun's launcher parses flags and config into a struct crun__agent_spec
 * and calls crun__agent_run(), which owns the process until the job ends:
 * one libuv loop with the workers' exits, their output pipes, the handled
 * signals and timers as events (nothing polls). It returns crun's exit
 * status (see crun(1), EXIT STATUS):
 *   0        every worker of an attempt exited 0
 *   1        the job failed (restarts exhausted, a worker that would not
 *            die, or the agent itself failed)
 *   2        the spec is invalid (the launcher checks first; this is a
 *            safety net)
 *   126/127  the command could not be executed / was not found (no restart)
 *   128+N    crun was stopped by handled signal N
 * With rendezvous (spec->rdzv.enabled, several nodes) 1 also means: the
 * rendezvous failed (join timeout, run closed, wrong token, configuration
 * differing from the run's), or the agent lost the store and could not
 * rejoin within rdzv.rejoin_timeout_ms.
 *
 * The worker group is an explicit state machine (group_step.h; group.c
 * carries it out on the loop):
 *   INIT -> STARTING -> RUNNING -> STOPPING -> STARTING (a restart) ...
 *                                          \-> SUCCEEDED | FAILED | STOPPED
 *                                              | EXEC_FAILED
 * and, with rendezvous, RENDEZVOUS (joining a round) before STARTING,
 * RESTARTING (waiting for the store to end a failed round) and FINISHING
 * (the exit barrier) before SUCCEEDED, with one pure function applying
 * events (worker exit, pipe closed, signal, timer, what the store says)
 * to it.
 *
 * Process side effects of crun__agent_run(), for the launcher:
 *   - SIGPIPE is ignored in crun (a closed stdout must not kill the
 *     agent); the handled signals get libuv handlers while it runs.
 *   - Before any worker starts it forks a small guard process (reaper.c)
 *     that SIGKILLs every worker's process group if crun dies, even by
 *     SIGKILL. Call crun__agent_run() before creating threads.
 *   - Workers lead their own session and process group (setsid), have
 *     stdin on /dev/null and stdout/stderr on pipes into the agent. */
#ifndef CRUN_AGENT_AGENT_H
#define CRUN_AGENT_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/liveness.h"

#define CRUN_AGENT_MAX_SIGNALS 16

/* Which standard streams of a local rank are redirected or teed:
 * bit 0 stdout, bit 1 stderr (torchrun's Std: 1 out, 2 err, 3 all). */
enum crun__std {
	CRUN_STD_NONE = 0,
	CRUN_STD_OUT = 1,
	CRUN_STD_ERR = 2,
	CRUN_STD_ALL = 3,
};

struct crun__agent_spec {
	/* The command each worker execs: argv[0] is looked up in PATH (as
	 * execvp does) unless it contains a slash. "${local_rank}" in any
	 * argument is replaced by the worker's local rank. NULL-terminated. */
	char **argv;
	int argc;
	/* Name of the job in messages and in the failure summary ("train.py
	 * FAILED"): the script or program the user named; NULL: the script
	 * or module when argv[0] is python*, else argv[0]. */
	const char *name;

	int nproc_per_node;	     /* >= 1 */
	int nnodes;		     /* 1 without rendezvous (rdzv.min/max_nodes
				      * with it) */
	int node_rank;		     /* group rank of this node; with rendezvous
				      * its fixed rank, or -1: the rendezvous
				      * assigns one */
	const char *role;	     /* ROLE_NAME; "default" */
	int max_restarts;	     /* default 3 */
	int64_t shutdown_timeout_ms; /* SIGTERM -> SIGKILL grace; default 30000 */
	/* After SIGKILL, how long to wait for workers to be reaped (and their
	 * pipes to close) before reporting them by rank and pid and giving up
	 * on them, so that a process stuck in the kernel never hangs crun.
	 * Default 5000. */
	int64_t kill_timeout_ms;
	/* The repeat rule (repeat.h): an attempt that ran at least this long
	 * made progress, heartbeat or not. Default 60000; 0: only heartbeat
	 * steps count. */
	int64_t min_attempt_ms;

	const char *run_id;	 /* TORCHELASTIC_RUN_ID and the store's run:
				  * --rdzv-id, "none" without, a fresh uuid
				  * with --standalone (as torchrun) */
	const char *master_addr; /* MASTER_ADDR for workers; NULL: "127.0.0.1";
				  * unused with rendezvous */
	int master_port;	 /* MASTER_PORT for workers; 0: the agent picks
				  * a free port once per job; unused with
				  * rendezvous */
	/* The agent store: PyTorch's workers get
	 * TORCHELASTIC_USE_AGENT_STORE=True and a MASTER_ADDR:MASTER_PORT
	 * naming a store of the agent's that also speaks PyTorch's TCPStore
	 * protocol (rendezvous/server.h, tcpstore), instead of rank 0's worker
	 * hosting one there. One node: the store of host_store (bound to
	 * store_host:store_port). With rendezvous: the agent of group rank 0
	 * hosts one on its node's address, kept for the agent's life so that
	 * restarts reuse its port; its TCPStore keys are dropped before each
	 * round's workers start. Without it: TORCHELASTIC_USE_AGENT_STORE=False
	 * and a free MASTER_PORT, as before. */
	bool agent_store;
	const char *local_addr; /* this node's address as others see it
				 * (rendezvous: its MASTER_ADDR when it holds
				 * rank 0); NULL: the address the store sees
				 * its connection come from */

	/* Log files. With a log dir, the run takes a directory of its own in
	 * it (logdir.h: <log_dir>/<run_id>, <log_dir>/<UTC time> for the run
	 * id "none", with .1, .2, ... when the name is taken; when rdzv
	 * max_nodes > 1, <log_dir>/<run_id>/<hostname>[.n]), said on the
	 * console, and each attempt n (the restart count) gets
	 * <that>/attempt_<n>/<local_rank>/, created as needed,
	 * holding {stdout,stderr}.log for the streams that are redirected or
	 * teed (raw worker output, no prefix, truncated when reused) and
	 * error.json, the worker's TORCHELASTIC_ERROR_FILE. NULL: no files;
	 * if some stream is still redirected or teed, the agent makes a
	 * directory $TMPDIR/crun-logs-XXXXXX to use as log dir, says where,
	 * and keeps it (as torchrun does). Error files then live in a private
	 * temporary directory that the agent removes at the end. */
	const char *log_dir;
	/* The events file (events.h), appended to from the start; NULL:
	 * none. One that cannot be opened stops the agent before anything
	 * starts (exit status 2). */
	const char *events_path;
	/* Per local rank (index < nproc_per_node; arrays of that length owned
	 * by the caller): redirect = to the file only, tee = file and console
	 * (a stream in both is teed, as in torchrun).
	 * NULL arrays mean CRUN_STD_NONE for everyone. */
	const enum crun__std *redirects;
	const enum crun__std *tee;
	/* Local ranks whose output reaches the console; NULL: all. Array of
	 * nproc_per_node bools. On the console each whole line is prefixed
	 * with the global rank, "[3]:", or with role and rank when the role
	 * is not "default", "[trainer3]:"; stdout lines go to crun's stdout,
	 * stderr lines to crun's stderr. */
	const bool *console_ranks;
	/* The prefix of console lines instead of the one above, torchrun's
	 * --log-line-prefix-template (agent/prefix.h renders it per worker;
	 * log files stay unprefixed); NULL: the one above. */
	const char *log_line_prefix_template;

	/* Signals that are forwarded to every worker's process group before
	 * crun exits 128+signal. Default SIGTERM, SIGINT, SIGHUP, SIGQUIT.
	 * The workers then get shutdown_timeout_ms before SIGKILL; a second
	 * handled signal during that wait sends SIGKILL at once. */
	int signals[CRUN_AGENT_MAX_SIGNALS];
	int nsignals;
	/* Whether the first handled signal's line (the grace period and that
	 * a second signal kills at once) is a debug line only: a remote
	 * agent's controller says it once for every host. */
	bool quiet_stop_hint;
	/* Signals that are only forwarded to every running worker's own
	 * process (not its group: the program decides what its children
	 * get): crun goes on, in whatever state the group is (Slurm's
	 * --signal=USR1@60 warning). None of them may be in signals. */
	int forward_signals[CRUN_AGENT_MAX_SIGNALS];
	int nforward_signals;

	/* With virtual local rank, every worker sees LOCAL_RANK=0 and
	 * CUDA_VISIBLE_DEVICES set to its own device (torchrun's
	 * --virtual-local-rank). */
	bool virtual_local_rank;

	/* Stragglers (straggler_watch.h): a local rank whose step time, the
	 * median over its last straggler_window heartbeat steps, is at least
	 * straggler_factor x the job's median is named in one warning per
	 * episode. straggler_factor 0: off; defaults 1.5 and 20. */
	double straggler_factor;
	int straggler_window;

	/* Embedded rendezvous store for native workers. When host_store is
	 * set the agent runs crun__server (rendezvous/server.h) on its own loop,
	 * bound to store_host:store_port (port 0: a free port), with token
	 * (token_len bytes of text without NUL or newline, since it travels in
	 * CRUN_TOKEN; NULL: the agent makes a random hex one per job), and
	 * gives every worker CRUN_STORE=HOST:PORT, CRUN_RUN_ID, CRUN_ROUND
	 * (the restart count) and CRUN_TOKEN, which libcrun reads. Without
	 * host_store, inherited or extra_env CRUN_* variables pass through. */
	bool host_store;
	const char *store_host; /* NULL: "127.0.0.1" */
	int store_port;
	const void *token;
	size_t token_len;
	/* The file the token came from (--rdzv-conf token_file), named in the
	 * job file and the start line so that `crun status` can read it;
	 * NULL: none given (the agent writes the token it makes to a file of
	 * its own, jobfile.h). */
	const char *token_file;

	/* Multi-node rendezvous. With enabled, the agent forms the job with
	 * the agents of the other nodes through the store at host:port (its
	 * rounds are rendezvous/rdzv.h's): each round it joins, gets its group
	 * rank, the world size and its first global rank, learns
	 * MASTER_ADDR/MASTER_PORT (group rank 0 picks a free port on its
	 * address and publishes it), and starts its workers; a worker failure
	 * anywhere, a node that leaves or joins ends the round on every node
	 * and the agents join the next one. The restart count and the
	 * decision that restarts are exhausted come from the store. host_store
	 * and store_host/port are then unused: the agent hosts the store
	 * itself when is_host says so (binding host:port; when the port is
	 * taken on this machine, by another agent or crun-rdzvd, it joins as
	 * a client), with token (NULL: no authentication); workers get
	 * CRUN_STORE=host:port, CRUN_RUN_ID, CRUN_ROUND=the round and
	 * CRUN_TOKEN when there is a token. */
	struct crun__agent_rdzv {
		bool enabled;
		const char *host; /* endpoint: name or address, no brackets */
		int port;
		/* 1: host the store; 0: never; -1: when host is this machine
		 * (one of its interface addresses, its host name, localhost,
		 * a loopback address) */
		int is_host;
		int min_nodes, max_nodes;	/* --nnodes MIN:MAX */
		int64_t join_timeout_ms;	/* connecting and each join */
		int64_t last_call_timeout_ms;	/* wait for more after MIN */
		int64_t close_timeout_ms;	/* the host serves this long at
						 * most after the job ended, until
						 * the others have left */
		int64_t keep_alive_interval_ms; /* PING period */
		int keep_alive_max_attempt;	/* silent periods before the
						 * store (or a node) is lost */
		int64_t read_timeout_ms;	/* store requests (MASTER_ADDR) */
		/* After losing the store (cut off, evicted, the store gone)
		 * the agent SIGKILLs its workers at once, reconnects and joins
		 * again as a new node; it gives up (exit 1) when it is not in
		 * a round again this long after the loss. */
		int64_t rejoin_timeout_ms;
		/* A node (an agent) that fails blacklist_failures times within
		 * blacklist_window_ms is excluded by the store for a cool-down:
		 * cooldown_min_ms, doubled for each later exclusion up to
		 * cooldown_max_ms (0 failures: never). The first node of a run
		 * fixes them. */
		int blacklist_failures;
		int64_t blacklist_window_ms;
		int64_t cooldown_min_ms, cooldown_max_ms;
		/* A member of a running round that loses a standalone store
		 * (crun-rdzvd) by a closed or reset connection keeps its workers
		 * running and reconnects this long to resume the round
		 * (rdzv.h's RDZV_RESUME); then it loses the store as above. */
		int64_t reconnect_timeout_ms;
	} rdzv;

	/* Liveness of the workers (liveness.h): every worker gets a heartbeat
	 * channel, CRUN_HEARTBEAT_FD; one that speaks on it is watched with
	 * these timeouts, and found hung it is reported, its stack taken, and
	 * the group stopped and restarted (a failure of its rank). Defaults:
	 * initial 600 s, steady 180 s, no auto factor, no sections. With
	 * TORCHELASTIC_ENABLE_FILE_TIMER=1 and no TORCHELASTIC_TIMER_FILE in
	 * crun's environment the agent also serves torch's FileTimer. */
	struct crun__liveness_config heartbeat;

	/* GPUs through NVML (gpu_watch.h), loaded at run time from
	 * nvml_library (NULL: $CRUN_NVML_LIBRARY, else libnvidia-ml.so.1).
	 * Every gpu_sample_interval_ms the GPUs are read into the monitor (0:
	 * never; default 5000). Before a restart's workers start, the agent
	 * waits up to gpu_release_timeout_ms for the GPUs to drop the dead
	 * workers' processes (0: no wait; default 50000). Without NVML
	 * neither happens. */
	int64_t gpu_sample_interval_ms;
	int64_t gpu_release_timeout_ms;
	const char *nvml_library;

	/* Extra KEY=VALUE pairs for every worker's environment, applied after
	 * the inherited environment and before the torchrun variables.
	 * NULL-terminated; may be NULL. */
	char **extra_env;

	/* The metrics endpoint (rendezvous/metrics_http.h, agent/metrics.h):
	 * http://metrics_host:metrics_port/metrics; port 0 picks a free one,
	 * -1 (the default): none. metrics_host NULL: 0.0.0.0. */
	int metrics_port;
	const char *metrics_host;
};

/* The environment of worker local rank L, global rank R = node_rank *
 * nproc_per_node + L (with rendezvous: the round's first global rank of
 * this node + L; WORLD_SIZE the sum of every node's workers, GROUP_RANK
 * the group rank, GROUP_WORLD_SIZE the nodes of the round,
 * TORCHELASTIC_RESTART_COUNT the run's restart count) (later entries
 * win):
 *   1. crun's environment, then extra_env;
 *   2. LOCAL_RANK=L (0 with virtual_local_rank), RANK=R, ROLE_RANK=R,
 *      GROUP_RANK=node_rank, ROLE_NAME=role, LOCAL_WORLD_SIZE=nproc,
 *      WORLD_SIZE=ROLE_WORLD_SIZE=nnodes*nproc, GROUP_WORLD_SIZE=nnodes,
 *      MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT (0, 1, ...),
 *      TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
 *      TORCHELASTIC_USE_AGENT_STORE=False, TORCHELASTIC_ERROR_FILE (a path
 *      of its own per worker and attempt);
 *   3. TORCH_NCCL_ASYNC_ERROR_HANDLING=1 unless set; OMP_NUM_THREADS=1
 *      unless set when nproc > 1 (with one notice line);
 *   4. with virtual_local_rank, CUDA_VISIBLE_DEVICES=the L-th entry of
 *      the inherited list, else L;
 *   5. with host_store or rendezvous, CRUN_STORE, CRUN_RUN_ID, CRUN_ROUND,
 *      CRUN_TOKEN.
 * crun's own TORCHELASTIC_ERROR_FILE, if set, receives the root cause of a
 * failed job in the JSON format of PyTorch's @record. */

/* Fills spec with the defaults above (argv NULL). */
void crun__agent_spec_init(struct crun__agent_spec *spec);

/* Runs the job to its end and returns crun's exit status. Prints the
 * workers' output, notices and the failure summary on stdout/stderr. */
int crun__agent_run(const struct crun__agent_spec *spec);

#endif

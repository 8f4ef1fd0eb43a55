/* What an operator can see of one node's job.
 *
 * The agent's parts record here what happens on this node (a round
 * formed, a worker started, beat or exited, a restart, the store lost and
 * found, a straggler), and three readers show it: the status this agent
 * publishes in the store for `crun status`, the metrics endpoint
 * (`--metrics-port`) and the events file (`--events`).
 *
 * Pure: no I/O and no clock. Every recording call is given the wall time
 * in milliseconds since the epoch (`now_ms`); the events it makes reach
 * the observers inside the call, in order. The monitor is owned by
 * agent.c (one per agent); a part that records holds a pointer to it, and
 * every function here takes a NULL monitor as "record nothing", so that a
 * part used without one (a unit test) needs no checks. */
#ifndef CRUN_AGENT_MONITOR_H
#define CRUN_AGENT_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CRUN_MON_MAX_OBSERVERS 4
#define CRUN_MON_TEXT 512 /* bytes of a message, with its NUL */

/* Every event an operator cares about. The names (crun__mon_event_name)
 * are the "event" field of the events file: stable, documented in
 * crun(1) EVENTS. */
enum crun__mon_event_kind {
	CRUN_MON_JOB_STARTED = 0, /* the agent began the job */
	CRUN_MON_ROUND_FORMED,	  /* this node's attempt is placed: round,
				   * world size, members */
	CRUN_MON_ROUND_CLOSED,	  /* the store ended the round; message:
				   * why */
	CRUN_MON_MEMBER_JOINED,	  /* a node is in this round that was not in
				   * the previous one; node: its name */
	CRUN_MON_MEMBER_LEFT,	  /* a node of the previous round is not in
				   * this one */
	CRUN_MON_MEMBER_EVICTED,  /* the store dropped a node (this one, or
				   * another by the store's word) */
	CRUN_MON_WORKER_STARTED,  /* rank, local_rank, pid */
	CRUN_MON_WORKER_EXITED,	  /* rank, local_rank, pid, exit_code or
				   * signal */
	CRUN_MON_WORKER_HUNG,	  /* rank, local_rank, pid; message: why */
	CRUN_MON_RESTART,	  /* the group restarts; cause, restart count */
	CRUN_MON_STORE_LOST,	  /* message: why */
	CRUN_MON_STORE_RECOVERED, /* back in a round (or the round resumed) */
	CRUN_MON_STRAGGLER,	  /* rank, local_rank; ratio, step */
	CRUN_MON_GPU_WAIT,	  /* waited for GPUs to free their memory
				   * before a restart; seconds, message */
	CRUN_MON_JOB_FINISHED,	  /* the job ended here; exit_code, message */
	CRUN_MON_NEVENTS,
};

/* Why the group restarted: the `cause` label of
 * crun_restarts_total and the "cause" field of a restart event. */
enum crun__mon_cause {
	CRUN_MON_CAUSE_WORKER_FAILED = 0, /* a worker exited non-zero or by a
					   * signal, here or on another node */
	CRUN_MON_CAUSE_WORKER_HUNG,	  /* a worker stopped beating */
	CRUN_MON_CAUSE_NODE_JOINED,	  /* a node joined (not counted against
					   * max_restarts) */
	CRUN_MON_CAUSE_NODE_LEFT,	  /* a node left or was evicted */
	CRUN_MON_CAUSE_STORE_LOST,	  /* this agent lost the store */
	CRUN_MON_NCAUSES,
};

/* A worker's state in status and metrics (`state` label of
 * crun_workers). */
enum crun__mon_worker_state {
	CRUN_MON_W_NONE = 0, /* not started in this attempt */
	CRUN_MON_W_RUNNING,
	CRUN_MON_W_HUNG, /* found hung; being stopped */
	CRUN_MON_W_SUCCEEDED,
	CRUN_MON_W_FAILED, /* exited non-zero or by a signal */
	CRUN_MON_W_NSTATES,
};

/* One GPU as NVML reports it. Fields NVML did not give are negative
 * (counters: UINT64_MAX). */
struct crun__mon_gpu {
	int index;		     /* NVML's index */
	char uuid[96];		     /* "GPU-…" */
	char name[96];		     /* "NVIDIA H200" */
	double util;		     /* GPU utilisation, 0..1 */
	int64_t mem_used, mem_total; /* bytes */
	double temp_c;
	double power_w;
	uint64_t ecc_corrected, ecc_uncorrected; /* volatile ECC errors */
	uint64_t xid_total;			 /* XID events seen */
	uint64_t sampled_ms;			 /* when; 0: never */
};

struct crun__mon_worker {
	int local_rank;
	int rank;  /* global rank in the attempt; -1 before one starts */
	pid_t pid; /* 0: none */
	enum crun__mon_worker_state state;
	int exit_code;	 /* valid when exited; -1 when by a signal */
	int term_signal; /* 0: none */
	uint64_t started_ms;
	uint64_t last_beat_ms;	/* 0: never beat in this attempt */
	int64_t step;		/* last heartbeat step; -1: none */
	double step_s;		/* its step time (median of the window); 0:
				 * unknown */
	double straggler_ratio; /* step time / the job's median; 0: unknown */
	int gpu;		/* index into monitor.gpus; -1: unknown */
};

/* A node of the current round (with rendezvous), in group-rank order. */
struct crun__mon_member {
	int group_rank;
	char node_id[128];
	char host[128];
	char addr[128];
	int local_world_size;
};

struct crun__mon_event {
	enum crun__mon_event_kind kind;
	uint64_t time_ms; /* wall time */
	int64_t round;	  /* -1: none yet */
	int group_rank;	  /* this node's; -1 before a round */
	int rank;	  /* global rank; -1: not about one worker */
	int local_rank;	  /* -1: not about one worker */
	pid_t pid;
	int exit_code;		    /* WORKER_EXITED, JOB_FINISHED; -1 by a signal */
	int term_signal;	    /* WORKER_EXITED */
	enum crun__mon_cause cause; /* RESTART */
	int64_t restart_count;	    /* RESTART: after it */
	int64_t step;		    /* STRAGGLER, WORKER_HUNG, RESTART (the
				     * highest a local worker beat); -1: none */
	double value;		    /* STRAGGLER: ratio; GPU_WAIT: seconds */
	const char *node;	    /* MEMBER_*: that node's host; else NULL
				     * (this node) */
	const char *message;	    /* one line, or NULL */
};

struct crun__monitor;
typedef void (*crun__mon_observer)(void *arg, const struct crun__monitor *m,
				   const struct crun__mon_event *ev);

struct crun__monitor {
	/* Fixed at init. */
	char run_id[256];
	char node[256];	   /* this host's name */
	char node_id[330]; /* with rendezvous, this agent's id in the store
			    * (agent.c sets it after the rendezvous's
			    * setup); empty without */
	int max_restarts;
	int nproc;
	uint64_t started_ms;

	/* The current attempt. */
	int64_t round; /* -1: none yet */
	int group_rank;
	int nnodes;
	int world_size;
	int64_t restart_count;
	const char *group_state;	  /* crun__group_state_name() */
	struct crun__mon_worker *workers; /* nproc, by local rank */
	struct crun__mon_member *members; /* nmembers; with rendezvous */
	int nmembers;

	/* GPUs, filled by the NVML sampler; none without NVML. */
	struct crun__mon_gpu *gpus;
	int ngpus;

	/* The last failure, with its root cause (the first failure of the
	 * attempt, as the summary names it): "rank 3 (local 1) on node2
	 * exited 1: CUDA error ...". Empty: none yet. */
	char last_failure[CRUN_MON_TEXT];
	uint64_t last_failure_ms;
	/* The store: lost now? */
	bool store_lost;
	/* The round in which this node's own eviction was recorded (-1:
	 * none): it is recorded once, whoever finds it first. */
	int64_t self_evicted_round;
	/* The job's end: exit status once finished, else -1. */
	int exit_status;

	/* Counters, for the metrics (monotonic over the agent's life). */
	uint64_t events[CRUN_MON_NEVENTS];
	uint64_t restarts[CRUN_MON_NCAUSES];
	uint64_t rounds;			   /* rounds this node was placed in */
	double last_round_seconds;		   /* from join to placed */
	double rounds_seconds_sum;		   /* over every round */
	uint64_t worker_exits[CRUN_MON_W_NSTATES]; /* by the state they ended
						    * in */
	double gpu_wait_seconds_sum;

	/* Observers: each runs for every event, in the order added. */
	crun__mon_observer observers[CRUN_MON_MAX_OBSERVERS];
	void *observer_args[CRUN_MON_MAX_OBSERVERS];
	int nobservers;
};

/* Sets m up for nproc workers. 0 or -ENOMEM. */
int crun__monitor_init(struct crun__monitor *m, const char *run_id, const char *node, int nproc,
		       int max_restarts, uint64_t now_ms);
void crun__monitor_finish(struct crun__monitor *m);
/* 0, or -ENOSPC when CRUN_MON_MAX_OBSERVERS are already there. */
int crun__monitor_observe(struct crun__monitor *m, crun__mon_observer fn, void *arg);

const char *crun__mon_event_name(enum crun__mon_event_kind k);
const char *crun__mon_cause_name(enum crun__mon_cause c);
const char *crun__mon_worker_state_name(enum crun__mon_worker_state s);
/* The cause of the restart that follows a round the store ended: a node
 * joined, a node left (or the store dropped it), a worker hung (the
 * store's message of a hang, "rank 5 (local rank 1) on b hung: ..."),
 * else a worker failed. */
enum crun__mon_cause crun__mon_round_end_cause(bool node_joined, bool node_left,
					       const char *message);

/* A node that a round's end names as gone. */
struct crun__mon_gone {
	int group_rank;
	char host[128];
	bool evicted; /* the store dropped it (no keep-alive, it did not come
		       * back after the store restarted); else the node
		       * left (its connection closed, it joined again) */
};
/* The nodes the store's end of a round names as gone, in the order named,
 * up to max of them into gone (NULL with max 0: only count): "node 1 (b)
 * left: no keep-alive for 15s" (evicted), "node 1 (b) left: connection
 * closed" (left), "node 0 (a), node 1 (b) and 2 more did not come back
 * within 30s after the store restarted" (evicted; the two named), "node 1
 * (b) joined again instead of resuming the round" (left). How many it
 * names; 0 for any other message. */
int crun__mon_round_end_gone(const char *message, struct crun__mon_gone *gone, int max);

/* What the agent's parts record. Each updates the state above and, where
 * an operator cares, emits one event. */

void crun__monitor_job_started(struct crun__monitor *m, uint64_t now_ms);
/* The group's state changed (for status only; no event). */
void crun__monitor_group_state(struct crun__monitor *m, const char *state);
/* The attempt is placed: round, ranks, the round's members (NULL/0
 * without rendezvous). join_ms: when this node asked to join (0:
 * unknown), for the round's duration. Emits MEMBER_JOINED/LEFT against
 * the previous round's members, then ROUND_FORMED. */
void crun__monitor_round_formed(struct crun__monitor *m, uint64_t now_ms, int64_t round,
				int group_rank, int nnodes, int world_size, int64_t restart_count,
				const struct crun__mon_member *members, int nmembers,
				uint64_t join_ms);
void crun__monitor_round_closed(struct crun__monitor *m, uint64_t now_ms, const char *why);
/* node: the evicted node's host, NULL for this one. */
void crun__monitor_member_evicted(struct crun__monitor *m, uint64_t now_ms, const char *node,
				  const char *why);
void crun__monitor_worker_started(struct crun__monitor *m, uint64_t now_ms, int local_rank,
				  int rank, pid_t pid);
/* exit_code >= 0, or term_signal > 0. */
void crun__monitor_worker_exited(struct crun__monitor *m, uint64_t now_ms, int local_rank,
				 int exit_code, int term_signal);
void crun__monitor_worker_hung(struct crun__monitor *m, uint64_t now_ms, int local_rank,
			       const char *why);
/* A heartbeat: step -1 for a beat without one (no event). */
void crun__monitor_worker_beat(struct crun__monitor *m, uint64_t now_ms, int local_rank,
			       int64_t step);
/* The straggler detector's view of a local rank: its step time and its
 * ratio to the job's median; straggler: it was just named one (emits
 * STRAGGLER). */
void crun__monitor_worker_pace(struct crun__monitor *m, uint64_t now_ms, int local_rank,
			       double step_s, double ratio, bool straggler);
/* The failure that ends the attempt, one line with its root cause. */
void crun__monitor_failure(struct crun__monitor *m, uint64_t now_ms, const char *line);
/* The next attempt begins after one that ended: restart_count is the new
 * attempt's; step the highest step a worker of this node beat in the
 * attempt that ended (-1: none). */
void crun__monitor_restart(struct crun__monitor *m, uint64_t now_ms, enum crun__mon_cause cause,
			   int64_t restart_count, int64_t step);
/* Emits STORE_LOST once per outage (again only after a recovery), and
 * STORE_RECOVERED only while lost. */
void crun__monitor_store_lost(struct crun__monitor *m, uint64_t now_ms, const char *why);
void crun__monitor_store_recovered(struct crun__monitor *m, uint64_t now_ms);
/* The NVML sampler's GPUs (copied; ngpus <= what init allows: any). 0 or
 * -ENOMEM. */
int crun__monitor_set_gpus(struct crun__monitor *m, const struct crun__mon_gpu *gpus, int ngpus);
/* Which GPU (index into gpus) local_rank uses; -1 unknown. */
void crun__monitor_worker_gpu(struct crun__monitor *m, int local_rank, int gpu);
void crun__monitor_gpu_wait(struct crun__monitor *m, uint64_t now_ms, double seconds,
			    const char *message);
void crun__monitor_job_finished(struct crun__monitor *m, uint64_t now_ms, int exit_status,
				const char *message);

#endif

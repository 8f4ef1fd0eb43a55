/* From parsed options to what the agent runs: the number of workers on
 * this host, the command line of each worker, the run id, MASTER_ADDR and
 * MASTER_PORT, and the per-rank stream settings. This is where words like
 * "gpu" meet the machine, so the machine is a parameter (tests pass fake
 * /proc and /dev directories). */
#ifndef CRUN_LAUNCHER_PLAN_H
#define CRUN_LAUNCHER_PLAN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "agent/agent.h"
#include "launcher/options.h"

/* The host as the plan sees it; NULL fields mean the real machine. */
struct crun__launch_host {
	const char *gpus_dir; /* NULL: /proc/driver/nvidia/gpus */
	const char *dev_dir;  /* NULL: /dev (nvidia0, nvidia1, ...) */
	long ncpus;	      /* 0: online CPUs */
};

struct crun__launch_plan {
	int nproc;   /* workers on this node */
	char **argv; /* the worker command, NULL-terminated; the array
		      * is owned, the strings are the options' or
		      * static */
	int argc;
	char *run_id; /* --rdzv-id, a random id (standalone) or "none" */
	const char *master_addr;
	int master_port;	   /* 0: to be picked (dry run) */
	enum crun__std *redirects; /* nproc entries, or NULL: none */
	enum crun__std *tee;
	bool *console_ranks; /* nproc entries, or NULL: all */
	char *token;	     /* from rdzv_conf token_file; NULL: the agent's
			      * (one node), none (rendezvous) */
	size_t token_len;

	/* Several nodes (--nnodes above 1, or an --rdzv-endpoint, without
	 * --standalone): the agent joins rounds at the store rdzv_host:
	 * rdzv_port (c10d: --rdzv-endpoint, default port 29400; static:
	 * --rdzv-endpoint, else --master-addr:--master-port, default
	 * 127.0.0.1:29500). */
	bool rendezvous;
	/* The static backend: asked for, or implied as torchrun does when
	 * several nodes give --master-addr and no --rdzv-endpoint. */
	bool rdzv_static;
	char rdzv_host[256];
	int rdzv_port;
	int node_rank; /* static: --node-rank; c10d: --node-rank when given,
			* else -1 (the rendezvous orders the nodes) */
	int is_host;   /* rdzv_conf is_host; unset: -1 (c10d: decided from
			* the endpoint), static: node rank 0 hosts */

	/* --agent-store resolved (torch_probe.h), and why, for --dry-run
	 * and the log: "on (PyTorch 2.15.0 in /usr/lib/...)". */
	bool agent_store;
	char agent_store_why[PATH_MAX + 160];
};

/* NVIDIA GPUs visible to a CUDA program, counted without CUDA: the entries
 * of gpus_dir (one per device), else the nvidiaN nodes of dev_dir; then
 * CUDA_VISIBLE_DEVICES (cvd, NULL when unset) as the driver reads it:
 * indexes and GPU-/MIG- UUIDs up to the first invalid or repeated entry.
 * Returns the count (0 when there are none). */
int crun__launch_count_gpus(const char *gpus_dir, const char *dev_dir, const char *cvd);

/* A free TCP port: binds port 0 on the wildcard address, reads the port
 * the kernel chose, closes. 0 or a negative errno with a reason in err. */
int crun__launch_free_port(int *port, char *err, size_t errlen);

/* Resolves o on host (NULL: this machine) with envp (PYTHON_EXEC,
 * CUDA_VISIBLE_DEVICES). With pick_port, a missing --master-port becomes a
 * free port now (one node only); without, it stays 0. More than one node
 * needs --rdzv-endpoint with c10d, and a fixed --nnodes with static.
 * Returns 0 or -EINVAL with one line in err naming the flag (as
 * options.h); plan must be finished either way. */
int crun__launch_plan_make(struct crun__launch_plan *plan, const struct crun__launch_opts *o,
			   char **envp, const struct crun__launch_host *host, bool pick_port,
			   char *err, size_t errlen);
void crun__launch_plan_finish(struct crun__launch_plan *plan);

/* Fills spec (initialised by crun__agent_spec_init) from plan and o; spec
 * points into both, which must outlive it. */
void crun__launch_plan_to_spec(const struct crun__launch_plan *plan,
			       const struct crun__launch_opts *o, struct crun__agent_spec *spec);

/* --signals-to-forward without the signals that --signals-to-handle
 * names (those end crun). out holds CRUN_AGENT_MAX_SIGNALS; returns the
 * count written. */
int crun__launch_forward_signals(const struct crun__launch_opts *o, int *out);

/* --dry-run: the resolved configuration as key=value lines. */
void crun__launch_plan_print(FILE *f, const struct crun__launch_plan *plan,
			     const struct crun__launch_opts *o);

/* Prints w as one POSIX shell word (crun__shell_quote), for commands that
 * --dry-run shows. */
void crun__launch_print_word(FILE *f, const char *w);

#endif

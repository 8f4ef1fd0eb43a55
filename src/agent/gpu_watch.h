/* The agent's GPUs, the libuv edge: samples NVML into the monitor and,
 * before a restart, waits for the GPUs to let go of the dead workers.
 *
 * Sampling: every interval_ms (from the first turn of the loop) each GPU
 * NVML sees is read (nvml.h), its XID events taken, and the monitor gets
 * them (crun__monitor_set_gpus) along with each local rank's GPU
 * (crun__monitor_worker_gpu, gpu.h's mapping). A new XID is one warning
 * line. Without NVML nothing is sampled and the monitor has no GPUs;
 * with interval_ms 0 the GPUs are read once, at init, for the release
 * wait's mapping only, and the monitor gets none.
 *
 * Release wait (crun__gpu_watch_wait): a restart's workers must not find
 * their GPUs still full of the dead workers' memory (the driver frees it
 * some time after the process is reaped, as NVIDIA's ft_launcher knows).
 * The wait polls NVML on the loop every 200 ms, never blocking, until no
 * pid of the dead workers is among the compute processes of their GPUs
 * (every GPU when a worker's is unknown), or timeout_ms passed; on a GPU
 * whose processes NVML cannot list, until its used memory is back to
 * what it was at init (within 512 MiB, as ft_launcher's tolerance). One
 * line says what it waits for, one how long it waited; the monitor
 * records it (crun__monitor_gpu_wait). No NVML, a timeout of 0, or NVML
 * that can tell neither: no wait at all.
 *
 * Owns: its two timers, the NVML handle, the sampled GPUs. */
#ifndef CRUN_AGENT_GPU_WATCH_H
#define CRUN_AGENT_GPU_WATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "agent/gpu.h"
#include "agent/monitor.h"
#include "agent/nvml.h"

struct crun__gpu_watch {
	uv_loop_t *loop;
	struct crun__monitor *monitor; /* may be NULL */
	struct crun__nvml *nvml;       /* NULL: no NVML; nothing happens */
	int64_t interval_ms;	       /* 0: no sampling */
	int64_t release_timeout_ms;    /* 0: no release wait */
	int nproc;
	struct crun__gpu_ref *refs; /* per local rank */
	int ngpus;
	struct crun__mon_gpu *gpus;
	uint64_t *xids;
	unsigned long long *last_xid;
	int64_t *base_used; /* per GPU: used bytes at the first sample (-1) */
	int *mapped;	    /* per local rank: its GPU as last sampled (-2: none yet) */
	bool sampled;	    /* once */

	uv_timer_t sample;
	uv_timer_t poll;
	bool timers_open;

	/* The release wait in progress (waiting): the dead workers' pids,
	 * their GPUs (index into gpus, -1: any), when it began (uv_now). */
	bool waiting;
	pid_t *wait_pids;
	int *wait_gpus;
	bool *held; /* per pid: a GPU held it at the last poll */
	int nheld;  /* how many; -ENOTSUP: NVML could tell of no GPU */
	int nwait;
	pid_t *procs; /* a GPU's processes, scratch for each poll */
	int procs_max;
	uint64_t wait_start;
	void (*released)(void *arg);
	void *released_arg;
};

/* Sets w up and, with NVML (nvml_path: $CRUN_NVML_LIBRARY, NULL: the
 * system's), starts sampling. env/extra_env and virtual_local_rank
 * map local ranks to GPUs (gpu.h). 0, or a negative errno (memory, libuv):
 * NVML that is absent is no error. */
int crun__gpu_watch_init(struct crun__gpu_watch *w, uv_loop_t *loop, struct crun__monitor *monitor,
			 int nproc, int64_t interval_ms, int64_t release_timeout_ms,
			 const char *nvml_path, char *const *env, char *const *extra_env,
			 bool virtual_local_rank);

/* Before the next attempt: waits for the GPUs of the dead workers (pids
 * by local rank, n of them; 0 entries are skipped) as above. true: a wait
 * has begun and released(arg) runs from the loop when it ends; false:
 * nothing to wait for (released is not called). */
bool crun__gpu_watch_wait(struct crun__gpu_watch *w, const pid_t *pids, int n,
			  void (*released)(void *arg), void *arg);
/* Ends a wait in progress now, without calling released (something else
 * moved the group on); says how long it waited. */
void crun__gpu_watch_stop(struct crun__gpu_watch *w, const char *why);

/* Closes the timers; memory goes in crun__gpu_watch_finish after the loop
 * has run. */
void crun__gpu_watch_close(struct crun__gpu_watch *w);
void crun__gpu_watch_finish(struct crun__gpu_watch *w);

#endif

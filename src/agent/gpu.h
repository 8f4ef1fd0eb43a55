/* GPUs, the pure part: which GPU a local rank uses, and NVML's readings
 * as the monitor shows them. No NVML, no environment of its own, no
 * clock: the edge (gpu_watch.c, through nvml.c) reads and passes in. */
#ifndef CRUN_AGENT_GPU_H
#define CRUN_AGENT_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/monitor.h"

/* A GPU as a worker names it. */
enum crun__gpu_ref_kind {
	CRUN__GPU_UNKNOWN = 0, /* no telling (a MIG instance, an entry CUDA
				* would refuse, a rank beyond the list) */
	CRUN__GPU_INDEX,       /* NVML's index */
	CRUN__GPU_UUID,	       /* "GPU-…" */
};

struct crun__gpu_ref {
	enum crun__gpu_ref_kind kind;
	int index;
	char uuid[96];
};

/* The GPU of local rank lr, as the workers' environment decides it:
 * CUDA_VISIBLE_DEVICES of env (crun's environment) then extra_env (NULL-terminated
 * KEY=VALUE arrays, either may be NULL; the last one set wins, as
 * spawn.c builds the workers' environment).
 *   - unset: index lr (the worker uses device LOCAL_RANK);
 *   - set: its lr-th entry (comma-separated): digits are an index,
 *     "GPU-…" a UUID, "MIG-…" (a MIG instance) or anything else unknown;
 *     beyond the list (or an empty entry) unknown, as CUDA would see no
 *     device there;
 *   - with virtual_local_rank the worker sees LOCAL_RANK=0 and its own
 *     entry as CUDA_VISIBLE_DEVICES, which names the same GPU, except
 *     beyond the list, where spawn.c gives it lr (index lr).
 * Indexes are NVML's (nvidia-smi's), which are CUDA's with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID. */
void crun__gpu_of_rank(char *const *env, char *const *extra_env, int lr, bool virtual_local_rank,
		       struct crun__gpu_ref *out);

/* Index into gpus (as crun__monitor_set_gpus holds them) of ref; -1 when
 * none matches or ref is unknown. */
int crun__gpu_find(const struct crun__mon_gpu *gpus, int ngpus, const struct crun__gpu_ref *ref);

/* One device's raw NVML readings; has_* false: NVML did not give it (a
 * function missing from the library, or not supported on the device). */
struct crun__gpu_reading {
	int index;
	bool has_uuid, has_name, has_util, has_mem, has_temp, has_power;
	bool has_ecc_corrected, has_ecc_uncorrected;
	char uuid[96];
	char name[96];
	unsigned int util_percent;		/* nvmlUtilization_t.gpu */
	unsigned long long mem_used, mem_total; /* bytes */
	unsigned int temp_c;
	unsigned int power_mw;
	unsigned long long ecc_corrected, ecc_uncorrected; /* volatile */
};

/* The monitor's view of r: unknown fields negative (counters
 * UINT64_MAX), utilisation as 0..1, power in watts. xid_total: XID events
 * seen on it (UINT64_MAX: not watched); now_ms: sampled_ms. */
void crun__gpu_from_reading(const struct crun__gpu_reading *r, uint64_t xid_total, uint64_t now_ms,
			    struct crun__mon_gpu *out);

#endif

/* NVML, loaded at run time: crun builds and runs without it.
 *
 * crun__nvml_open() dlopen()s libnvidia-ml.so.1 (or the file its caller
 * names: $CRUN_NVML_LIBRARY, which is how the tests load their double),
 * finds the functions crun uses (nvml_abi.h) and initialises NVML. Without
 * the library, without one of the functions every use needs (nvmlInit_v2,
 * nvmlShutdown, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2), or
 * when nvmlInit_v2 fails it returns NULL after one debug line: the GPU
 * fields are then simply missing. Any other function that is missing
 * makes its field unknown (crun__gpu_reading's has_*), nothing more.
 *
 * Every call blocks in the driver for as long as NVML takes (well under
 * a millisecond per device and call on a healthy GPU; nvmlInit can take
 * a second or more where the driver's persistence mode is off); the agent
 * calls from its loop: the open once, a handful of calls per GPU per
 * sample. */
#ifndef CRUN_AGENT_NVML_H
#define CRUN_AGENT_NVML_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/gpu.h"

struct crun__nvml;

/* NULL: no NVML (see above). path NULL: "libnvidia-ml.so.1". Watches
 * every device for XID critical errors when NVML can. */
struct crun__nvml *crun__nvml_open(const char *path);
/* nvmlShutdown, dlclose; NULL does nothing. */
void crun__nvml_close(struct crun__nvml *nv);

/* Devices NVML saw at open. */
int crun__nvml_count(const struct crun__nvml *nv);
/* Reads device index (0 <= index < count) into r. 0, or -ENODEV when
 * NVML has no handle for it (r then knows nothing but its index). */
int crun__nvml_read(struct crun__nvml *nv, int index, struct crun__gpu_reading *r);
/* Takes every XID event NVML has queued (never waits) and adds one per
 * event to xids[device index] (count entries); last_xid[index] gets the
 * event's XID. The number of events, or -ENOTSUP when XIDs are not
 * watched. */
int crun__nvml_poll_xids(struct crun__nvml *nv, uint64_t *xids, unsigned long long *last_xid);
/* Whether XIDs of device index are watched (its xid_total is known). */
bool crun__nvml_watches_xids(const struct crun__nvml *nv, int index);
/* The compute processes on device index: up to max pids (and the bytes
 * each uses, when mem is not NULL). Their number (which may be above max:
 * only max are filled), -ENOTSUP when the library cannot list them, or
 * -EIO with NVML's reason logged at debug level. */
int crun__nvml_processes(struct crun__nvml *nv, int index, pid_t *pids, unsigned long long *mem,
			 int max);

#endif

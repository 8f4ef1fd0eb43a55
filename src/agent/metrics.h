/* The agent's metrics in Prometheus's text format (crun_*): what the
 * monitor (monitor.h) knows of this node's job, per worker and per GPU.
 * Pure: the monitor and the time are given. Every name, its type, labels
 * and meaning are listed in crun(1) METRICS. */
#ifndef CRUN_AGENT_METRICS_H
#define CRUN_AGENT_METRICS_H

#include <stdint.h>

struct crun__prom;
struct crun__monitor;

/* Appends the agent's families for m at now_ms (wall ms, for the
 * heartbeat ages). A per-worker or per-GPU figure the monitor does not
 * know (no beat yet, a field NVML did not give) is left out, and a
 * family with nothing known is left out whole. */
void crun__agent_metrics_render(struct crun__prom *p, const struct crun__monitor *m,
				uint64_t now_ms);

#endif

/* The store server's metrics in Prometheus's text format (crun_store_*,
 * crun_rdzv_*), rendered from its stats: what crun-rdzvd serves, and an
 * agent that hosts the job's store too. Pure given the stats. The names
 * and their meaning are listed in crun-rdzvd(8) METRICS. */
#ifndef CRUN_RENDEZVOUS_SERVER_METRICS_H
#define CRUN_RENDEZVOUS_SERVER_METRICS_H

#include <stdint.h>

#include "rendezvous/server.h"

struct crun__prom;

/* Appends every store family; connections: open now
 * (crun__server_connections). */
void crun__server_metrics_render(struct crun__prom *p, const struct crun__server_stats *st,
				 uint32_t connections);

/* crun_build_info{version="..."} 1. */
void crun__metrics_build_info(struct crun__prom *p, const char *version);

#endif

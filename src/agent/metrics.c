#include "agent/metrics.h"

#include <stdbool.h>
#include <stdio.h>

#include "agent/monitor.h"
#include "common/prom.h"

/* A family's header before its first sample, so that a family with no
 * sample is not written at all. */
struct fam {
	const char *name, *type, *help;
	bool written;
};

static void fam_begin(struct crun__prom *p, struct fam *f)
{
	if (!f->written)
		crun__prom_family(p, f->name, f->type, f->help);
	f->written = true;
}

static void job(struct crun__prom *p, const struct crun__monitor *m)
{
	crun__prom_family(
		p, "crun_job_info", "gauge",
		"The job this agent runs: its run id and this node's host name; always 1.");
	crun__prom_sample(p, "crun_job_info", 1, "run_id", m->run_id, "node", m->node, NULL);
	if (m->round >= 0) {
		crun__prom_family(p, "crun_round", "gauge",
				  "The rendezvous round (attempt) this node is placed in.");
		crun__prom_sample(p, "crun_round", (double)m->round, NULL);
		crun__prom_family(p, "crun_nodes", "gauge", "Nodes in the current round.");
		crun__prom_sample(p, "crun_nodes", m->nnodes, NULL);
		crun__prom_family(p, "crun_world_size", "gauge",
				  "Workers in the current round, over every node.");
		crun__prom_sample(p, "crun_world_size", m->world_size, NULL);
	}
	crun__prom_family(p, "crun_rounds_total", "counter", "Rounds this node was placed in.");
	crun__prom_sample_u64(p, "crun_rounds_total", m->rounds, NULL);
	crun__prom_family(p, "crun_round_join_seconds", "summary",
			  "Seconds from asking to join a round to being placed in it.");
	crun__prom_sample(p, "crun_round_join_seconds_sum", m->rounds_seconds_sum, NULL);
	crun__prom_sample_u64(p, "crun_round_join_seconds_count", m->rounds, NULL);

	crun__prom_family(p, "crun_restarts_total", "counter",
			  "Restarts of this node's worker group, by cause.");
	for (int c = 0; c < CRUN_MON_NCAUSES; c++)
		crun__prom_sample_u64(p, "crun_restarts_total", m->restarts[c], "cause",
				      crun__mon_cause_name((enum crun__mon_cause)c), NULL);
	crun__prom_family(p, "crun_job_restarts", "gauge",
			  "The job's restart count, as counted against --max-restarts.");
	crun__prom_sample(p, "crun_job_restarts", (double)m->restart_count, NULL);
	crun__prom_family(p, "crun_max_restarts", "gauge", "The job's --max-restarts.");
	crun__prom_sample(p, "crun_max_restarts", m->max_restarts, NULL);

	crun__prom_family(p, "crun_events_total", "counter",
			  "Events of this node's job, by kind (as in the events file).");
	for (int k = 0; k < CRUN_MON_NEVENTS; k++)
		crun__prom_sample_u64(p, "crun_events_total", m->events[k], "event",
				      crun__mon_event_name((enum crun__mon_event_kind)k), NULL);
	crun__prom_family(p, "crun_store_lost", "gauge",
			  "1 while this agent has lost the store, else 0.");
	crun__prom_sample(p, "crun_store_lost", m->store_lost ? 1 : 0, NULL);
	crun__prom_family(p, "crun_gpu_wait_seconds_total", "counter",
			  "Seconds spent before restarts waiting for GPUs to free their memory.");
	crun__prom_sample(p, "crun_gpu_wait_seconds_total", m->gpu_wait_seconds_sum, NULL);
}

static void workers(struct crun__prom *p, const struct crun__monitor *m, uint64_t now_ms)
{
	struct fam age = {"crun_worker_heartbeat_age_seconds", "gauge",
			  "Seconds since the worker's last heartbeat, while it runs.", false};
	struct fam step = {"crun_worker_step", "gauge", "The last step the worker reported.",
			   false};
	struct fam step_s = {"crun_worker_step_seconds", "gauge",
			     "The worker's step time (median of its recent steps).", false};
	struct fam ratio = {"crun_worker_straggler_ratio", "gauge",
			    "The worker's step time over the job's median step time.", false};
	struct fam gpu = {"crun_worker_gpu_info", "gauge",
			  "The GPU a worker uses (NVML index and UUID); always 1.", false};
	int nstate[CRUN_MON_W_NSTATES] = {0};
	char rank[16], local[16], idx[16];

	for (int i = 0; i < m->nproc; i++)
		if ((unsigned)m->workers[i].state < CRUN_MON_W_NSTATES)
			nstate[m->workers[i].state]++;
	crun__prom_family(p, "crun_workers", "gauge", "This node's workers, by state.");
	for (int s = 0; s < CRUN_MON_W_NSTATES; s++)
		crun__prom_sample(p, "crun_workers", nstate[s], "state",
				  crun__mon_worker_state_name((enum crun__mon_worker_state)s),
				  NULL);
	crun__prom_family(p, "crun_worker_exits_total", "counter",
			  "Workers of this node that ended, by the state they ended in.");
	for (int s = CRUN_MON_W_HUNG; s < CRUN_MON_W_NSTATES; s++)
		crun__prom_sample_u64(p, "crun_worker_exits_total", m->worker_exits[s], "state",
				      crun__mon_worker_state_name((enum crun__mon_worker_state)s),
				      NULL);

#define RANK_LABELS "rank", rank, "local_rank", local
	for (int i = 0; i < m->nproc; i++) {
		const struct crun__mon_worker *w = &m->workers[i];
		bool live = w->state == CRUN_MON_W_RUNNING || w->state == CRUN_MON_W_HUNG;

		if (w->rank < 0 || !live || !w->last_beat_ms)
			continue;
		snprintf(rank, sizeof(rank), "%d", w->rank);
		snprintf(local, sizeof(local), "%d", w->local_rank);
		fam_begin(p, &age);
		crun__prom_sample(
			p, age.name,
			now_ms > w->last_beat_ms ? (double)(now_ms - w->last_beat_ms) / 1e3 : 0.0,
			RANK_LABELS, NULL);
	}
	for (int i = 0; i < m->nproc; i++) {
		const struct crun__mon_worker *w = &m->workers[i];

		if (w->rank < 0 || w->step < 0)
			continue;
		snprintf(rank, sizeof(rank), "%d", w->rank);
		snprintf(local, sizeof(local), "%d", w->local_rank);
		fam_begin(p, &step);
		crun__prom_sample(p, step.name, (double)w->step, RANK_LABELS, NULL);
	}
	for (int i = 0; i < m->nproc; i++) {
		const struct crun__mon_worker *w = &m->workers[i];

		if (w->rank < 0 || w->step_s <= 0)
			continue;
		snprintf(rank, sizeof(rank), "%d", w->rank);
		snprintf(local, sizeof(local), "%d", w->local_rank);
		fam_begin(p, &step_s);
		crun__prom_sample(p, step_s.name, w->step_s, RANK_LABELS, NULL);
	}
	for (int i = 0; i < m->nproc; i++) {
		const struct crun__mon_worker *w = &m->workers[i];

		if (w->rank < 0 || w->straggler_ratio <= 0)
			continue;
		snprintf(rank, sizeof(rank), "%d", w->rank);
		snprintf(local, sizeof(local), "%d", w->local_rank);
		fam_begin(p, &ratio);
		crun__prom_sample(p, ratio.name, w->straggler_ratio, RANK_LABELS, NULL);
	}
	for (int i = 0; i < m->nproc; i++) {
		const struct crun__mon_worker *w = &m->workers[i];

		if (w->rank < 0 || w->gpu < 0 || w->gpu >= m->ngpus)
			continue;
		snprintf(rank, sizeof(rank), "%d", w->rank);
		snprintf(local, sizeof(local), "%d", w->local_rank);
		snprintf(idx, sizeof(idx), "%d", m->gpus[w->gpu].index);
		fam_begin(p, &gpu);
		crun__prom_sample(p, gpu.name, 1, RANK_LABELS, "gpu", idx, "uuid",
				  m->gpus[w->gpu].uuid, NULL);
	}
#undef RANK_LABELS
}

/* One per-GPU family: the GPUs whose field is known (double fields:
 * >= 0; counters: not UINT64_MAX). */
enum gpu_field { G_UTIL, G_MEM_USED, G_MEM_TOTAL, G_TEMP, G_POWER, G_ECC_C, G_ECC_U, G_XID, G_N };

static const struct fam gpu_fams[G_N] = {
	{"crun_gpu_utilization_ratio", "gauge",
	 "GPU utilisation, 0 to 1 (NVML's share of time a kernel ran).", false},
	{"crun_gpu_memory_used_bytes", "gauge", "GPU memory in use.", false},
	{"crun_gpu_memory_total_bytes", "gauge", "GPU memory in all.", false},
	{"crun_gpu_temperature_celsius", "gauge", "GPU temperature.", false},
	{"crun_gpu_power_watts", "gauge", "GPU power draw.", false},
	{"crun_gpu_ecc_corrected_errors_total", "counter", "Corrected (volatile) ECC errors.",
	 false},
	{"crun_gpu_ecc_uncorrected_errors_total", "counter", "Uncorrected (volatile) ECC errors.",
	 false},
	{"crun_gpu_xid_errors_total", "counter", "XID error events seen.", false},
};

static bool gpu_value(const struct crun__mon_gpu *g, enum gpu_field f, double *v, uint64_t *u)
{
	switch (f) {
	case G_UTIL:
		*v = g->util;
		return g->util >= 0;
	case G_MEM_USED:
		*v = (double)g->mem_used;
		return g->mem_used >= 0;
	case G_MEM_TOTAL:
		*v = (double)g->mem_total;
		return g->mem_total >= 0;
	case G_TEMP:
		*v = g->temp_c;
		return g->temp_c >= 0;
	case G_POWER:
		*v = g->power_w;
		return g->power_w >= 0;
	case G_ECC_C:
		*u = g->ecc_corrected;
		return g->ecc_corrected != UINT64_MAX;
	case G_ECC_U:
		*u = g->ecc_uncorrected;
		return g->ecc_uncorrected != UINT64_MAX;
	case G_XID:
		*u = g->xid_total;
		return g->xid_total != UINT64_MAX;
	default:
		return false;
	}
}

static void gpus(struct crun__prom *p, const struct crun__monitor *m)
{
	char idx[16];

	if (m->ngpus <= 0)
		return;
	crun__prom_family(p, "crun_gpu_info", "gauge",
			  "A GPU of this node: NVML index, UUID and name; always 1.");
	for (int i = 0; i < m->ngpus; i++) {
		snprintf(idx, sizeof(idx), "%d", m->gpus[i].index);
		crun__prom_sample(p, "crun_gpu_info", 1, "gpu", idx, "uuid", m->gpus[i].uuid,
				  "name", m->gpus[i].name, NULL);
	}
	for (int f = 0; f < G_N; f++) {
		struct fam fam = gpu_fams[f];

		for (int i = 0; i < m->ngpus; i++) {
			const struct crun__mon_gpu *g = &m->gpus[i];
			double v = 0;
			uint64_t u = 0;
			bool counter = f >= G_ECC_C;

			if (!gpu_value(g, (enum gpu_field)f, &v, &u))
				continue;
			snprintf(idx, sizeof(idx), "%d", g->index);
			fam_begin(p, &fam);
			if (counter)
				crun__prom_sample_u64(p, fam.name, u, "gpu", idx, "uuid", g->uuid,
						      NULL);
			else
				crun__prom_sample(p, fam.name, v, "gpu", idx, "uuid", g->uuid,
						  NULL);
		}
	}
}

void crun__agent_metrics_render(struct crun__prom *p, const struct crun__monitor *m,
				uint64_t now_ms)
{
	job(p, m);
	workers(p, m, now_ms);
	gpus(p, m);
}

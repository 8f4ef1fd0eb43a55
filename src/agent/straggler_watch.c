/* The agent's straggler watch (straggler_watch.h).
 *
 * Why it is shaped this way:
 * - Beats are decided on as they come, locally: a straggler among this
 *   node's ranks is named within a step of its window filling. The other
 *   nodes' step times only move the job's median, which changes slowly,
 *   so reading them every period is enough; that keeps the store's load
 *   to one SET (only when something changed) and one MGET per node and
 *   period, whatever the step rate, and no MGET before this node has a
 *   step time to judge. A node that never publishes (its workers beat
 *   without steps) only has no times in the job's median
 *   (crun__rdzv_fetch_steps reads the others all the same).
 * - Deciding happens only when a beat changed its rank's step time or the
 *   other nodes' summaries arrived, and the core keeps the job's median
 *   between (straggler.h): a worker flooding step lines, or many fast
 *   ranks, cost the loop little.
 * - A reply that arrives after its attempt ended is dropped by the
 *   rendezvous (the round's generation) or here (shared is false). */
#include "agent/straggler_watch.h"
#include "agent/straggler.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void decide(struct straggler_watch *w)
{
	struct crun__straggler_event ev[8];
	char line[512];
	double step_ms, median_ms;
	int n;

	do {
		n = crun__straggler_check(w->core, ev, 8);
		for (int i = 0; i < n; i++) {
			crun__straggler_format(&ev[i], w->hostname, line, sizeof(line));
			if (ev[i].kind == CRUN_STRAGGLER_SLOW)
				crun__warn("%s", line);
			else
				crun__info("%s", line);
			crun__monitor_worker_pace(
				w->monitor, crun__wall_ms(), ev[i].local_rank, ev[i].step_ms / 1e3,
				ev[i].step_ms / ev[i].median_ms, ev[i].kind == CRUN_STRAGGLER_SLOW);
		}
	} while (n == 8);
	for (int lr = 0; w->monitor && lr < w->nlocal; lr++)
		if (crun__straggler_pace(w->core, lr, &step_ms, &median_ms))
			crun__monitor_worker_pace(w->monitor, 0, lr, step_ms / 1e3,
						  step_ms / median_ms, false);
}

static void got_steps(void *arg, int status, const char *message,
		      const struct crun__wire_item *values, uint32_t count)
{
	struct straggler_watch *w = arg;
	char err[128];

	w->fetching = false;
	if (!w->shared)
		return;
	if (status < 0) {
		crun__debug("cannot read the other nodes' step summaries: %s", message);
		return;
	}
	crun__straggler_remote_clear(w->core);
	for (uint32_t i = 0; i < count; i++)
		if (values[i].len && /* empty: that node has published none */
		    crun__straggler_remote_add(w->core, (const char *)values[i].data, values[i].len,
					       err, sizeof(err)) < 0)
			crun__debug("a node's step summary is not usable: %s", err);
	decide(w);
}

/* This node's summary, when the store does not have it yet. */
static void publish(struct straggler_watch *w)
{
	int rc, len;

	if (w->published && !crun__straggler_fresh(w->core))
		return;
	len = crun__straggler_summary(w->core, w->summary, w->summary_cap);
	rc = len < 0 ? len : crun__rdzv_publish_steps(w->rdzv, w->summary, (size_t)len);
	if (rc == 0)
		w->published = true;
	else if (rc != -ENOTCONN)
		crun__debug("cannot publish this node's step summary: %s", strerror(-rc));
}

static void on_timer(uv_timer_t *t)
{
	struct straggler_watch *w = t->data;
	int rc;

	if (!w->shared)
		return;
	publish(w);
	if (!w->fetching && crun__straggler_has_times(w->core)) {
		rc = crun__rdzv_fetch_steps(w->rdzv, got_steps, w);
		if (rc == 0)
			w->fetching = true;
		else if (rc != -ENOTCONN)
			crun__debug("cannot read the other nodes' step summaries: %s",
				    strerror(-rc));
	}
}

int crun__straggler_watch_init(struct straggler_watch *w, uv_loop_t *loop,
			       const struct crun__agent_spec *spec, struct agent_rdzv *rdzv,
			       const char *hostname)
{
	struct crun__straggler_conf conf = {spec->straggler_factor, spec->straggler_window};
	int rc;

	memset(w, 0, sizeof(*w));
	w->loop = loop;
	w->rdzv = rdzv;
	w->hostname = hostname;
	w->nlocal = spec->nproc_per_node;
	if (conf.factor == 0)
		return 0;
	w->core = crun__straggler_create(&conf, spec->nproc_per_node, 0);
	if (!w->core)
		return -EINVAL;
	w->summary_cap = crun__straggler_summary_max(w->core);
	w->summary = malloc(w->summary_cap);
	if (!w->summary)
		return -ENOMEM;
	rc = uv_timer_init(loop, &w->timer);
	if (rc < 0)
		return rc;
	w->timer.data = w;
	w->timer_open = true;
	return 0;
}

void crun__straggler_watch_attempt(struct straggler_watch *w, const struct crun__placement *place)
{
	if (!w->core)
		return;
	crun__straggler_reset(w->core, place->rank_offset);
	w->published = false;
	w->shared = w->rdzv && place->nnodes > 1;
	if (w->shared)
		uv_timer_start(&w->timer, on_timer, CRUN__STRAGGLER_PERIOD_MS,
			       CRUN__STRAGGLER_PERIOD_MS);
}

void crun__straggler_watch_step(struct straggler_watch *w, int local_rank, int64_t step,
				double work_s, uint64_t now_ms)
{
	if (!w->core)
		return;
	/* Most beats leave the rank's step time as it was: nothing to say. */
	if (crun__straggler_beat(w->core, local_rank, step, work_s < 0 ? -1 : work_s * 1000,
				 now_ms))
		decide(w);
}

void crun__straggler_watch_stop(struct straggler_watch *w)
{
	if (!w->core || !w->shared)
		return;
	/* The last steps count for the nodes still running. */
	publish(w);
	w->shared = false;
	uv_timer_stop(&w->timer);
}

void crun__straggler_watch_close(struct straggler_watch *w)
{
	if (!w->timer_open)
		return;
	w->timer_open = false;
	uv_close((uv_handle_t *)&w->timer, NULL);
}

void crun__straggler_watch_finish(struct straggler_watch *w)
{
	crun__straggler_destroy(w->core);
	w->core = NULL;
	free(w->summary);
	w->summary = NULL;
}

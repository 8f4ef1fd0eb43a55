/* This node's status document and its publisher (status.h). */
#include "agent/status.h"

#include "agent/summary.h"
#include "common/log.h"
#include "common/record.h"
#include "common/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *opt_int(int64_t v, bool known)
{
	return known ? json_integer((json_int_t)v) : json_null();
}

static json_t *gpu_doc(const struct crun__mon_gpu *g)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "index", json_integer(g->index));
	json_object_set_new(o, "uuid", crun__record_text(g->uuid));
	json_object_set_new(o, "name", crun__record_text(g->name));
	json_object_set_new(o, "util", g->util >= 0 ? json_real(g->util) : json_null());
	json_object_set_new(o, "mem_used", opt_int(g->mem_used, g->mem_used >= 0));
	json_object_set_new(o, "mem_total", opt_int(g->mem_total, g->mem_total >= 0));
	json_object_set_new(o, "temp_c", g->temp_c >= 0 ? json_real(g->temp_c) : json_null());
	json_object_set_new(o, "power_w", g->power_w >= 0 ? json_real(g->power_w) : json_null());
	json_object_set_new(o, "sampled_ms", opt_int((int64_t)g->sampled_ms, g->sampled_ms != 0));
	return o;
}

static json_t *worker_doc(const struct crun__monitor *m, const struct crun__mon_worker *w)
{
	json_t *o = json_object();
	/* A worker found hung ends hung: its exit shows in its status. */
	bool exited = w->state == CRUN_MON_W_SUCCEEDED || w->state == CRUN_MON_W_FAILED ||
		      (w->state == CRUN_MON_W_HUNG && (w->term_signal > 0 || w->exit_code >= 0));

	if (!o)
		return NULL;
	json_object_set_new(o, "local_rank", json_integer(w->local_rank));
	json_object_set_new(o, "rank", opt_int(w->rank, w->rank >= 0));
	json_object_set_new(o, "pid", opt_int(w->pid, w->pid > 0));
	json_object_set_new(o, "state", json_string(crun__mon_worker_state_name(w->state)));
	json_object_set_new(o, "exit_code",
			    opt_int(w->exit_code, exited && w->exit_code >= 0 && !w->term_signal));
	json_object_set_new(o, "signal", opt_int(w->term_signal, w->term_signal > 0));
	json_object_set_new(o, "started_ms", opt_int((int64_t)w->started_ms, w->started_ms != 0));
	json_object_set_new(o, "last_beat_ms",
			    opt_int((int64_t)w->last_beat_ms, w->last_beat_ms != 0));
	json_object_set_new(o, "step", opt_int(w->step, w->step >= 0));
	json_object_set_new(o, "step_s", w->step_s > 0 ? json_real(w->step_s) : json_null());
	json_object_set_new(o, "straggler_ratio",
			    w->straggler_ratio > 0 ? json_real(w->straggler_ratio) : json_null());
	json_object_set_new(o, "gpu",
			    w->gpu >= 0 && w->gpu < m->ngpus && m->gpus ? gpu_doc(&m->gpus[w->gpu])
									: json_null());
	return o;
}

static json_t *member_doc(const struct crun__mon_member *mb)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "group_rank", json_integer(mb->group_rank));
	json_object_set_new(o, "node_id", crun__record_text(mb->node_id));
	json_object_set_new(o, "host", crun__record_text(mb->host));
	json_object_set_new(o, "addr", crun__record_text(mb->addr));
	json_object_set_new(o, "local_world_size", json_integer(mb->local_world_size));
	return o;
}

json_t *crun__status_doc(const struct crun__monitor *m, const struct crun__status_info *info,
			 uint64_t now_ms)
{
	json_t *o = json_object(), *workers = json_array(), *members = json_array(), *fail;
	const char *node_id = m->node_id[0] ? m->node_id : info->node_id;
	int err = 0;

	if (!o || !workers || !members)
		goto out_fail;
	err |= json_object_set_new(o, "version", json_integer(CRUN_STATUS_VERSION));
	err |= json_object_set_new(o, "run_id", crun__record_text(m->run_id));
	err |= json_object_set_new(o, "node", crun__record_text(m->node));
	err |= json_object_set_new(o, "node_id", crun__record_text(node_id ? node_id : m->node));
	err |= json_object_set_new(o, "pid", json_integer(info->pid));
	err |= json_object_set_new(o, "endpoint",
				   crun__record_text(info->endpoint ? info->endpoint : ""));
	err |= json_object_set_new(o, "time_ms", json_integer((json_int_t)now_ms));
	err |= json_object_set_new(o, "started_ms", json_integer((json_int_t)m->started_ms));
	err |= json_object_set_new(o, "round", opt_int(m->round, m->round >= 0));
	err |= json_object_set_new(o, "group_rank", opt_int(m->group_rank, m->round >= 0));
	err |= json_object_set_new(o, "nnodes", opt_int(m->nnodes, m->nnodes > 0));
	err |= json_object_set_new(o, "world_size", opt_int(m->world_size, m->world_size > 0));
	err |= json_object_set_new(o, "restart_count", json_integer(m->restart_count));
	err |= json_object_set_new(o, "max_restarts", json_integer(m->max_restarts));
	err |= json_object_set_new(o, "state",
				   crun__record_text(m->group_state ? m->group_state : ""));
	err |= json_object_set_new(o, "store_lost", json_boolean(m->store_lost));
	err |= json_object_set_new(o, "exit_status", opt_int(m->exit_status, m->exit_status >= 0));
	/* The members only from group rank 0: every node listing them would
	 * grow the traffic as the square of the nodes. */
	for (int i = 0; i < m->nmembers && m->members && m->round >= 0 && m->group_rank == 0; i++)
		err |= json_array_append_new(members, member_doc(&m->members[i]));
	for (int i = 0; i < m->nproc && m->workers; i++)
		err |= json_array_append_new(workers, worker_doc(m, &m->workers[i]));
	err |= json_object_set_new(o, "members", members);
	members = NULL;
	err |= json_object_set_new(o, "workers", workers);
	workers = NULL;
	if (m->last_failure[0]) {
		fail = json_object();
		err |= json_object_set_new(fail, "line", crun__record_text(m->last_failure));
		err |= json_object_set_new(fail, "time_ms",
					   json_integer((json_int_t)m->last_failure_ms));
		err |= json_object_set_new(o, "last_failure", fail);
	} else {
		err |= json_object_set_new(o, "last_failure", json_null());
	}
	if (!err)
		return o;
out_fail:
	json_decref(workers);
	json_decref(members);
	json_decref(o);
	return NULL;
}

/* ---- the publisher ---------------------------------------------------------- */

static void on_timer(uv_timer_t *t);

static void arm(struct crun__status_pub *p, uv_timer_t *t, uint64_t *due, uint64_t ms)
{
	*due = uv_now(p->loop) + ms;
	uv_timer_start(t, on_timer, ms, 0);
}

static void publish(struct crun__status_pub *p)
{
	json_t *doc;
	char *textdoc;
	int rc;

	if (p->closed)
		return;
	p->last_ms = uv_now(p->loop);
	uv_timer_stop(&p->soon);
	doc = crun__status_doc(p->monitor, &p->info, crun__wall_ms());
	textdoc = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!textdoc) {
		crun__debug("cannot make this node's status: out of memory");
		return;
	}
	rc = p->put(p->put_arg, p->key, textdoc, strlen(textdoc));
	free(textdoc);
	if (rc < 0) {
		/* Not connected yet (rendezvous), or lost: again after the gap,
		 * not only at the next tick. */
		crun__debug("this node's status (for crun status) is not published yet: %s; "
			    "trying again soon",
			    rc == -ENOTCONN ? "not connected to the store" : strerror(-rc));
		arm(p, &p->soon, &p->soon_due, CRUN_STATUS_MIN_GAP_MS);
	}
}

/* A loop that did not turn for longer than stall_ms (the process was
 * stopped) may find that the store dropped this node meanwhile, and a
 * write on that connection would end the job as if the store were gone:
 * the agent must find out first (its workers' exits, its keep-alive), so
 * the publication waits for the gap. */
static void on_timer(uv_timer_t *t)
{
	struct crun__status_pub *p = t->data;
	uint64_t now = uv_now(p->loop);

	if (t == &p->tick) {
		arm(p, &p->tick, &p->tick_due, CRUN_STATUS_PERIOD_MS);
		/* Published by an event less than the gap ago: that one is
		 * recent enough, or the one due soon will be. */
		if (uv_is_active((uv_handle_t *)&p->soon) ||
		    (p->last_ms && now - p->last_ms < CRUN_STATUS_MIN_GAP_MS))
			return;
	}
	if (p->stall_ms && now - p->turned_ms > p->stall_ms) {
		crun__debug("crun was busy or stopped for %llu ms: this node's status is "
			    "published a little later",
			    (unsigned long long)(now - p->turned_ms));
		arm(p, &p->soon, &p->soon_due, CRUN_STATUS_MIN_GAP_MS);
		return;
	}
	publish(p);
}

static void on_prepare(uv_prepare_t *h)
{
	struct crun__status_pub *p = h->data;

	p->turned_ms = uv_now(p->loop);
}

/* Every event: soon, but not sooner than the gap after the last one. */
static void on_event(void *arg, const struct crun__monitor *m, const struct crun__mon_event *ev)
{
	struct crun__status_pub *p = arg;
	uint64_t now, due;

	(void)m;
	(void)ev;
	if (p->closed || uv_is_active((uv_handle_t *)&p->soon))
		return;
	now = uv_now(p->loop);
	due = p->last_ms + CRUN_STATUS_MIN_GAP_MS;
	arm(p, &p->soon, &p->soon_due, due > now ? due - now : 0);
}

int crun__status_pub_start(struct crun__status_pub *p, uv_loop_t *loop,
			   struct crun__monitor *monitor, const struct crun__status_info *info,
			   crun__status_put put, void *put_arg, uint64_t stall_ms)
{
	int rc;

	memset(p, 0, sizeof(*p));
	p->loop = loop;
	p->monitor = monitor;
	p->put = put;
	p->put_arg = put_arg;
	snprintf(p->node_id, sizeof(p->node_id), "%s",
		 monitor->node_id[0] ? monitor->node_id : info->node_id);
	snprintf(p->endpoint, sizeof(p->endpoint), "%s", info->endpoint ? info->endpoint : "");
	p->info.node_id = p->node_id;
	p->info.endpoint = p->endpoint;
	p->info.pid = info->pid;
	snprintf(p->key, sizeof(p->key), CRUN_STATUS_PREFIX "%s", p->node_id);
	rc = crun__monitor_observe(monitor, on_event, p);
	if (rc < 0)
		return rc;
	uv_timer_init(loop, &p->tick);
	uv_timer_init(loop, &p->soon);
	p->tick.data = p;
	p->soon.data = p;
	p->stall_ms = stall_ms;
	p->turned_ms = uv_now(loop);
	uv_prepare_init(loop, &p->turn);
	p->turn.data = p;
	uv_prepare_start(&p->turn, on_prepare);
	uv_unref((uv_handle_t *)&p->turn);
	p->started = true;
	arm(p, &p->tick, &p->tick_due, 0);
	return 0;
}

void crun__status_pub_now(struct crun__status_pub *p)
{
	if (p->started)
		publish(p);
}

void crun__status_pub_close(struct crun__status_pub *p)
{
	if (!p->started || p->closed)
		return;
	p->closed = true;
	uv_close((uv_handle_t *)&p->tick, NULL);
	uv_close((uv_handle_t *)&p->soon, NULL);
	uv_close((uv_handle_t *)&p->turn, NULL);
}

void crun__status_closing_line(char *buf, size_t len, const char *run_id, int exit_status,
			       const char *cause, int64_t restarts, double elapsed_s)
{
	char how[CRUN_MON_TEXT + 64], sig[32];

	if (exit_status == 0)
		snprintf(how, sizeof(how), "succeeded");
	else if (exit_status == 1)
		snprintf(how, sizeof(how), "failed: %s", cause && *cause ? cause : "exit status 1");
	else if (exit_status > 128 && exit_status < 128 + 65) {
		crun__signal_format(sig, sizeof(sig), exit_status - 128);
		snprintf(how, sizeof(how), "stopped by %s", sig);
	} else
		snprintf(how, sizeof(how), "exit status %d", exit_status);
	snprintf(buf, len, "run '%s' ended: %s (%" PRId64 " restart%s, %.1fs)", run_id, how,
		 restarts, restarts == 1 ? "" : "s", elapsed_s);
}

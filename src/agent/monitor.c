/* The monitor's state and events (monitor.h): pure bookkeeping. */
#include "agent/monitor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const event_names[CRUN_MON_NEVENTS] = {
	[CRUN_MON_JOB_STARTED] = "job_started",
	[CRUN_MON_ROUND_FORMED] = "round_formed",
	[CRUN_MON_ROUND_CLOSED] = "round_closed",
	[CRUN_MON_MEMBER_JOINED] = "member_joined",
	[CRUN_MON_MEMBER_LEFT] = "member_left",
	[CRUN_MON_MEMBER_EVICTED] = "member_evicted",
	[CRUN_MON_WORKER_STARTED] = "worker_started",
	[CRUN_MON_WORKER_EXITED] = "worker_exited",
	[CRUN_MON_WORKER_HUNG] = "worker_hung",
	[CRUN_MON_RESTART] = "restart",
	[CRUN_MON_STORE_LOST] = "store_lost",
	[CRUN_MON_STORE_RECOVERED] = "store_recovered",
	[CRUN_MON_STRAGGLER] = "straggler",
	[CRUN_MON_GPU_WAIT] = "gpu_wait",
	[CRUN_MON_JOB_FINISHED] = "job_finished",
};

static const char *const cause_names[CRUN_MON_NCAUSES] = {
	[CRUN_MON_CAUSE_WORKER_FAILED] = "worker_failed",
	[CRUN_MON_CAUSE_WORKER_HUNG] = "worker_hung",
	[CRUN_MON_CAUSE_NODE_JOINED] = "node_joined",
	[CRUN_MON_CAUSE_NODE_LEFT] = "node_left",
	[CRUN_MON_CAUSE_STORE_LOST] = "store_lost",
};

static const char *const worker_state_names[CRUN_MON_W_NSTATES] = {
	[CRUN_MON_W_NONE] = "none",	[CRUN_MON_W_RUNNING] = "running",
	[CRUN_MON_W_HUNG] = "hung",	[CRUN_MON_W_SUCCEEDED] = "succeeded",
	[CRUN_MON_W_FAILED] = "failed",
};

const char *crun__mon_event_name(enum crun__mon_event_kind k)
{
	return (unsigned)k < CRUN_MON_NEVENTS ? event_names[k] : "unknown";
}

const char *crun__mon_cause_name(enum crun__mon_cause c)
{
	return (unsigned)c < CRUN_MON_NCAUSES ? cause_names[c] : "unknown";
}

const char *crun__mon_worker_state_name(enum crun__mon_worker_state s)
{
	return (unsigned)s < CRUN_MON_W_NSTATES ? worker_state_names[s] : "unknown";
}

enum crun__mon_cause crun__mon_round_end_cause(bool node_joined, bool node_left,
					       const char *message)
{
	if (node_joined)
		return CRUN_MON_CAUSE_NODE_JOINED;
	if (node_left)
		return CRUN_MON_CAUSE_NODE_LEFT;
	if (message && strstr(message, " hung: "))
		return CRUN_MON_CAUSE_WORKER_HUNG;
	return CRUN_MON_CAUSE_WORKER_FAILED;
}

/* "node N (HOST)" at *p: its rank and host; *p moves past it. */
static bool parse_node(const char **p, int *rank, char *host, size_t len)
{
	const char *s = *p, *end;
	char *num_end;
	long n;

	if (strncmp(s, "node ", 5) || s[5] < '0' || s[5] > '9')
		return false;
	n = strtol(s + 5, &num_end, 10);
	if (n > INT32_MAX || strncmp(num_end, " (", 2))
		return false;
	s = num_end + 2;
	end = strchr(s, ')');
	if (!end || end == s)
		return false;
	snprintf(host, len, "%.*s", (int)(end - s), s);
	*rank = (int)n;
	*p = end + 1;
	return true;
}

int crun__mon_round_end_gone(const char *message, struct crun__mon_gone *gone, int max)
{
	struct crun__mon_gone one;
	const char *p = message;
	int n = 0;
	bool evicted;

	if (!p)
		return 0;
	for (;;) {
		if (!parse_node(&p, &one.group_rank, one.host, sizeof(one.host)))
			return 0;
		if (gone && n < max)
			gone[n] = one;
		n++;
		if (strncmp(p, ", ", 2))
			break;
		p += 2;
	}
	if (!strncmp(p, " and ", 5)) { /* " and 3 more" */
		p += 5;
		while (*p >= '0' && *p <= '9')
			p++;
		if (strncmp(p, " more", 5))
			return 0;
		p += 5;
	}
	if (!strncmp(p, " left: ", 7))
		evicted = !strncmp(p + 7, "no keep-alive", 13);
	else if (!strncmp(p, " did not come back", 18))
		evicted = true;
	else if (!strncmp(p, " joined again", 13))
		evicted = false;
	else
		return 0;
	for (int i = 0; gone && i < n && i < max; i++)
		gone[i].evicted = evicted;
	return n;
}

static void reset_worker(struct crun__mon_worker *w, int local_rank)
{
	int gpu = w->gpu;

	memset(w, 0, sizeof(*w));
	w->local_rank = local_rank;
	w->rank = -1;
	w->exit_code = -1;
	w->step = -1;
	w->gpu = gpu;
}

int crun__monitor_init(struct crun__monitor *m, const char *run_id, const char *node, int nproc,
		       int max_restarts, uint64_t now_ms)
{
	memset(m, 0, sizeof(*m));
	if (nproc < 1)
		return -EINVAL;
	m->workers = calloc((size_t)nproc, sizeof(*m->workers));
	if (!m->workers)
		return -ENOMEM;
	snprintf(m->run_id, sizeof(m->run_id), "%s", run_id ? run_id : "");
	snprintf(m->node, sizeof(m->node), "%s", node ? node : "");
	m->nproc = nproc;
	m->max_restarts = max_restarts;
	m->started_ms = now_ms;
	m->round = -1;
	m->group_rank = -1;
	m->exit_status = -1;
	m->self_evicted_round = -1;
	m->group_state = "init";
	for (int lr = 0; lr < nproc; lr++) {
		m->workers[lr].gpu = -1;
		reset_worker(&m->workers[lr], lr);
	}
	return 0;
}

void crun__monitor_finish(struct crun__monitor *m)
{
	free(m->workers);
	free(m->members);
	free(m->gpus);
	m->workers = NULL;
	m->members = NULL;
	m->gpus = NULL;
	m->nmembers = m->ngpus = 0;
}

int crun__monitor_observe(struct crun__monitor *m, crun__mon_observer fn, void *arg)
{
	if (m->nobservers >= CRUN_MON_MAX_OBSERVERS)
		return -ENOSPC;
	m->observers[m->nobservers] = fn;
	m->observer_args[m->nobservers] = arg;
	m->nobservers++;
	return 0;
}

static struct crun__mon_event event(const struct crun__monitor *m, enum crun__mon_event_kind k,
				    uint64_t now_ms)
{
	struct crun__mon_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.kind = k;
	ev.time_ms = now_ms;
	ev.round = m->round;
	ev.group_rank = m->group_rank;
	ev.rank = -1;
	ev.local_rank = -1;
	ev.exit_code = -1;
	ev.restart_count = m->restart_count;
	ev.step = -1;
	return ev;
}

static void emit(struct crun__monitor *m, const struct crun__mon_event *ev)
{
	m->events[ev->kind]++;
	for (int i = 0; i < m->nobservers; i++)
		m->observers[i](m->observer_args[i], m, ev);
}

static struct crun__mon_worker *worker(struct crun__monitor *m, int local_rank)
{
	if (!m || local_rank < 0 || local_rank >= m->nproc)
		return NULL;
	return &m->workers[local_rank];
}

static struct crun__mon_event worker_event(struct crun__monitor *m, enum crun__mon_event_kind k,
					   uint64_t now_ms, const struct crun__mon_worker *w)
{
	struct crun__mon_event ev = event(m, k, now_ms);

	ev.rank = w->rank;
	ev.local_rank = w->local_rank;
	ev.pid = w->pid;
	ev.step = w->step;
	return ev;
}

void crun__monitor_job_started(struct crun__monitor *m, uint64_t now_ms)
{
	if (!m)
		return;
	struct crun__mon_event ev = event(m, CRUN_MON_JOB_STARTED, now_ms);
	emit(m, &ev);
}

void crun__monitor_group_state(struct crun__monitor *m, const char *state)
{
	if (m)
		m->group_state = state;
}

static bool has_member(const struct crun__mon_member *list, int n, const char *node_id)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(list[i].node_id, node_id))
			return true;
	return false;
}

void crun__monitor_round_formed(struct crun__monitor *m, uint64_t now_ms, int64_t round,
				int group_rank, int nnodes, int world_size, int64_t restart_count,
				const struct crun__mon_member *members, int nmembers,
				uint64_t join_ms)
{
	struct crun__mon_member *next = NULL;
	struct crun__mon_event ev;

	if (!m)
		return;
	if (nmembers > 0) {
		next = calloc((size_t)nmembers, sizeof(*next));
		if (next)
			memcpy(next, members, (size_t)nmembers * sizeof(*next));
		else
			nmembers = 0;
	}
	m->round = round;
	m->group_rank = group_rank;
	m->nnodes = nnodes;
	m->world_size = world_size;
	m->restart_count = restart_count;
	for (int lr = 0; lr < m->nproc; lr++)
		reset_worker(&m->workers[lr], lr);
	/* Members against the previous round's: only between two rounds
	 * this node was in. */
	if (m->rounds > 0) {
		for (int i = 0; i < nmembers; i++) {
			if (has_member(m->members, m->nmembers, next[i].node_id))
				continue;
			ev = event(m, CRUN_MON_MEMBER_JOINED, now_ms);
			ev.node = next[i].host;
			emit(m, &ev);
		}
		for (int i = 0; i < m->nmembers; i++) {
			if (has_member(next, nmembers, m->members[i].node_id))
				continue;
			ev = event(m, CRUN_MON_MEMBER_LEFT, now_ms);
			ev.node = m->members[i].host;
			emit(m, &ev);
		}
	}
	free(m->members);
	m->members = next;
	m->nmembers = nmembers;
	m->rounds++;
	m->last_round_seconds = join_ms && now_ms >= join_ms ? (double)(now_ms - join_ms) / 1e3 : 0;
	m->rounds_seconds_sum += m->last_round_seconds;
	ev = event(m, CRUN_MON_ROUND_FORMED, now_ms);
	ev.value = m->last_round_seconds;
	emit(m, &ev);
}

void crun__monitor_round_closed(struct crun__monitor *m, uint64_t now_ms, const char *why)
{
	if (!m)
		return;
	struct crun__mon_event ev = event(m, CRUN_MON_ROUND_CLOSED, now_ms);
	ev.message = why;
	emit(m, &ev);
}

void crun__monitor_member_evicted(struct crun__monitor *m, uint64_t now_ms, const char *node,
				  const char *why)
{
	if (!m)
		return;
	if (!node) {
		if (m->self_evicted_round == m->round)
			return;
		m->self_evicted_round = m->round;
	}
	struct crun__mon_event ev = event(m, CRUN_MON_MEMBER_EVICTED, now_ms);
	ev.node = node;
	ev.message = why;
	emit(m, &ev);
}

void crun__monitor_worker_started(struct crun__monitor *m, uint64_t now_ms, int local_rank,
				  int rank, pid_t pid)
{
	struct crun__mon_worker *w = worker(m, local_rank);

	if (!w)
		return;
	reset_worker(w, local_rank);
	w->rank = rank;
	w->pid = pid;
	w->state = CRUN_MON_W_RUNNING;
	w->started_ms = now_ms;
	struct crun__mon_event ev = worker_event(m, CRUN_MON_WORKER_STARTED, now_ms, w);
	emit(m, &ev);
}

void crun__monitor_worker_exited(struct crun__monitor *m, uint64_t now_ms, int local_rank,
				 int exit_code, int term_signal)
{
	struct crun__mon_worker *w = worker(m, local_rank);

	if (!w)
		return;
	w->exit_code = term_signal > 0 ? -1 : exit_code;
	w->term_signal = term_signal > 0 ? term_signal : 0;
	/* A worker found hung ends hung, whatever killed it. */
	if (w->state != CRUN_MON_W_HUNG)
		w->state =
			!term_signal && exit_code == 0 ? CRUN_MON_W_SUCCEEDED : CRUN_MON_W_FAILED;
	m->worker_exits[w->state]++;
	struct crun__mon_event ev = worker_event(m, CRUN_MON_WORKER_EXITED, now_ms, w);
	ev.exit_code = w->exit_code;
	ev.term_signal = w->term_signal;
	emit(m, &ev);
}

void crun__monitor_worker_hung(struct crun__monitor *m, uint64_t now_ms, int local_rank,
			       const char *why)
{
	struct crun__mon_worker *w = worker(m, local_rank);

	if (!w)
		return;
	w->state = CRUN_MON_W_HUNG;
	struct crun__mon_event ev = worker_event(m, CRUN_MON_WORKER_HUNG, now_ms, w);
	ev.message = why;
	emit(m, &ev);
}

void crun__monitor_worker_beat(struct crun__monitor *m, uint64_t now_ms, int local_rank,
			       int64_t step)
{
	struct crun__mon_worker *w = worker(m, local_rank);

	if (!w)
		return;
	w->last_beat_ms = now_ms;
	if (step >= 0)
		w->step = step;
}

void crun__monitor_worker_pace(struct crun__monitor *m, uint64_t now_ms, int local_rank,
			       double step_s, double ratio, bool straggler)
{
	struct crun__mon_worker *w = worker(m, local_rank);

	if (!w)
		return;
	w->step_s = step_s;
	w->straggler_ratio = ratio;
	if (!straggler)
		return;
	struct crun__mon_event ev = worker_event(m, CRUN_MON_STRAGGLER, now_ms, w);
	ev.value = ratio;
	emit(m, &ev);
}

void crun__monitor_failure(struct crun__monitor *m, uint64_t now_ms, const char *line)
{
	if (!m)
		return;
	snprintf(m->last_failure, sizeof(m->last_failure), "%s", line ? line : "");
	m->last_failure_ms = now_ms;
}

void crun__monitor_restart(struct crun__monitor *m, uint64_t now_ms, enum crun__mon_cause cause,
			   int64_t restart_count, int64_t step)
{
	if (!m || (unsigned)cause >= CRUN_MON_NCAUSES)
		return;
	m->restarts[cause]++;
	m->restart_count = restart_count;
	struct crun__mon_event ev = event(m, CRUN_MON_RESTART, now_ms);
	ev.cause = cause;
	ev.step = step >= 0 ? step : -1;
	ev.restart_count = restart_count;
	emit(m, &ev);
}

void crun__monitor_store_lost(struct crun__monitor *m, uint64_t now_ms, const char *why)
{
	if (!m || m->store_lost)
		return;
	m->store_lost = true;
	struct crun__mon_event ev = event(m, CRUN_MON_STORE_LOST, now_ms);
	ev.message = why;
	emit(m, &ev);
}

void crun__monitor_store_recovered(struct crun__monitor *m, uint64_t now_ms)
{
	if (!m || !m->store_lost)
		return;
	m->store_lost = false;
	struct crun__mon_event ev = event(m, CRUN_MON_STORE_RECOVERED, now_ms);
	emit(m, &ev);
}

int crun__monitor_set_gpus(struct crun__monitor *m, const struct crun__mon_gpu *gpus, int ngpus)
{
	struct crun__mon_gpu *copy = NULL;

	if (!m)
		return 0;
	if (ngpus > 0) {
		copy = malloc((size_t)ngpus * sizeof(*copy));
		if (!copy)
			return -ENOMEM;
		memcpy(copy, gpus, (size_t)ngpus * sizeof(*copy));
	}
	free(m->gpus);
	m->gpus = copy;
	m->ngpus = ngpus > 0 ? ngpus : 0;
	return 0;
}

void crun__monitor_worker_gpu(struct crun__monitor *m, int local_rank, int gpu)
{
	struct crun__mon_worker *w = worker(m, local_rank);

	if (w)
		w->gpu = gpu;
}

void crun__monitor_gpu_wait(struct crun__monitor *m, uint64_t now_ms, double seconds,
			    const char *message)
{
	if (!m)
		return;
	m->gpu_wait_seconds_sum += seconds;
	struct crun__mon_event ev = event(m, CRUN_MON_GPU_WAIT, now_ms);
	ev.value = seconds;
	ev.message = message;
	emit(m, &ev);
}

void crun__monitor_job_finished(struct crun__monitor *m, uint64_t now_ms, int exit_status,
				const char *message)
{
	if (!m)
		return;
	m->exit_status = exit_status;
	struct crun__mon_event ev = event(m, CRUN_MON_JOB_FINISHED, now_ms);
	ev.exit_code = exit_status;
	ev.message = message;
	emit(m, &ev);
}

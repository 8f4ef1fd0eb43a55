/* The worker group's executor. Every decision is crun__group_step()'s
 * (group_step.c holds the table); this file books each event (a reaped
 * worker no longer runs, a closed pipe is no longer open), hands it to the
 * step, and carries out the actions it returns, in order. An action that
 * causes an event of its own (spawning reports SPAWNED or SPAWN_FAILED, a
 * join that cannot be sent RDZV_ERROR) queues it, and it is stepped once
 * the current actions are done, so the step always sees one event at a
 * time. */
#include "agent/group.h"
#include "rendezvous/server.h"
#include "agent/stackdump.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* After every worker of an attempt has been reaped, how long to wait for
 * their pipes to close (a process that left the worker's process group may
 * hold them) before closing them ourselves. */
#define DRAIN_MS 1000
/* How long taking a hung worker's stacks may last. */
#define CAPTURE_MS 5000

int (*agent_kill)(pid_t pid, int sig) = kill;

static void feed(struct group *g, const struct crun__group_event *ev);

/* ---- the repeat rule's view of failures (repeat.h) ---- */

/* Adds f to the current attempt's failures, with the attempt's step and
 * length when it is the first. */
static void add_attempt_failure(struct group *g, const struct crun__attempt_failure *f)
{
	if (!g->this_attempt.n) {
		g->this_attempt.max_step = g->max_step;
		g->this_attempt.duration_ms = (int64_t)(uv_now(g->loop) - g->attempt_start);
	}
	if (crun__attempt_add(&g->this_attempt, f) < 0)
		crun__error("out of memory recording the failure of rank %d", f->rank);
}

/* Notes w's failure for the rule, its error file read here, once: a
 * failure of its own, or a death by the agent's signal after it wrote
 * its error file (else nothing is known of it). A worker killed for
 * hanging was noted when it was found hung (note_hang). */
static void note_failure(struct group *g, const struct worker *w)
{
	char *message = NULL, *traceback = NULL;
	struct crun__attempt_failure f = {
		.rank = w->rank,
		.exit_code = w->exit_code,
		.term_signal = w->term_signal,
		.by_agent = g->core.state == CRUN__GROUP_STOPPING &&
			    (w->term_signal == SIGTERM || w->term_signal == SIGKILL),
	};

	if ((!w->exit_code && !w->term_signal) || w->local_rank == g->hang_lr)
		return;
	if (w->error_file)
		agent_error_file_read(w->error_file, &message, &traceback);
	free(traceback);
	f.message = message;
	if (!f.by_agent || message)
		add_attempt_failure(g, &f);
	free(message);
}

/* A worker found hung: a failure of its own, the same one each time it
 * hangs, noted before the step decides on it. */
static void note_hang(struct group *g, const struct worker *w)
{
	struct crun__attempt_failure f = {
		.rank = w->rank,
		.term_signal = SIGKILL,
		.message = "hung",
	};

	add_attempt_failure(g, &f);
}

/* A new attempt: the one that ended is the previous one when it failed
 * here; else there is none to compare with. */
static void next_attempt(struct group *g)
{
	struct crun__attempt t = g->prev_attempt;

	crun__attempt_clear(&t);
	if (g->attempt_failed) {
		g->prev_attempt = g->this_attempt;
		g->this_attempt = t;
	} else {
		g->prev_attempt = t;
		crun__attempt_clear(&g->this_attempt);
	}
	g->attempt_failed = false;
	g->max_step = -1;
	g->attempt_start = uv_now(g->loop);
}

static void then(struct group *g, const struct crun__group_event *ev)
{
	if (g->next_n == CRUN__GROUP_MAX_ACTIONS) {
		crun__error("internal error: worker group event '%s' dropped",
			    crun__group_event_name(ev->kind));
		return;
	}
	g->next[(g->next_head + g->next_n) % CRUN__GROUP_MAX_ACTIONS] = *ev;
	g->next_n++;
}

/* ---- what the actions do ---- */

/* Sends sig to the process group of every started worker (only those not
 * yet reaped, unless all). A group that is gone (ESRCH) is fine. */
static void signal_groups(struct group *g, int sig, bool all)
{
	for (int i = 0; i < g->nworkers; i++) {
		struct worker *w = g->workers[i];
		if (!w->spawned || (!all && !w->running))
			continue;
		agent_kill(-w->pid, sig);
		/* A stopped worker acts on a signal only once it runs again
		 * (SIGKILL acts at once; stop signals must stay stops). */
		if (sig != SIGKILL && sig != SIGCONT && sig != SIGSTOP && sig != SIGTSTP &&
		    sig != SIGTTIN && sig != SIGTTOU)
			agent_kill(-w->pid, SIGCONT);
	}
}

static void close_pipes(struct group *g)
{
	for (int i = 0; i < g->nworkers; i++) {
		struct worker *w = g->workers[i];
		if (!w->spawned)
			continue;
		for (int s = 0; s < 2; s++)
			crun__outpipe_close(&w->out[s]);
	}
}

static void on_timer(uv_timer_t *t)
{
	struct group *g = t->data;
	struct crun__group_event ev = {0};

	switch (g->timer_kind) {
	case CRUN__GTIMER_KILL:
		ev.kind = CRUN__GEV_TIMER_KILL;
		break;
	case CRUN__GTIMER_STUCK:
		ev.kind = CRUN__GEV_TIMER_STUCK;
		break;
	case CRUN__GTIMER_DRAIN:
		ev.kind = CRUN__GEV_TIMER_DRAIN;
		break;
	}
	feed(g, &ev);
}

static void arm_timer(struct group *g, enum crun__group_timer kind)
{
	const struct crun__agent_spec *spec = g->spec;
	int64_t ms = 0;

	switch (kind) {
	case CRUN__GTIMER_KILL:
		ms = spec->shutdown_timeout_ms;
		break;
	case CRUN__GTIMER_STUCK:
		ms = spec->kill_timeout_ms;
		break;
	case CRUN__GTIMER_DRAIN:
		ms = spec->kill_timeout_ms < DRAIN_MS ? spec->kill_timeout_ms : DRAIN_MS;
		break;
	}
	g->timer_kind = kind;
	uv_timer_start(&g->timer, on_timer, ms > 0 ? (uint64_t)ms : 0, 0);
}

/* Starts every worker of the attempt at the state's place. */
static void spawn_all(struct group *g)
{
	const struct crun__agent_spec *spec = g->spec;
	struct crun__group_event ev = {.kind = CRUN__GEV_SPAWNED};

	/* An attempt ended before this one: this is its restart. */
	if (g->attempts > 0)
		crun__monitor_restart(g->monitor, crun__wall_ms(),
				      g->restart_cause == CRUN_MON_NCAUSES
					      ? CRUN_MON_CAUSE_WORKER_FAILED
					      : g->restart_cause,
				      g->core.place.restart_count, g->max_step);
	g->restart_cause = CRUN_MON_NCAUSES;
	g->running = 0;
	g->open_pipes = 0;
	g->nworkers = 0;
	g->attempts++;
	next_attempt(g);
	if (g->spawner->agent_store)
		crun__server_tcpstore_clear(g->spawner->agent_store);
	g->hang_lr = -1;
	g->hang_recorded = false;
	crun__straggler_watch_attempt(&g->stragglers, &g->core.place);
	if (!g->rdzv) /* one round per attempt, numbered as the restarts */
		crun__monitor_round_formed(g->monitor, crun__wall_ms(), g->core.place.round,
					   g->core.place.group_rank, g->core.place.nnodes,
					   g->core.place.world_size, g->core.place.restart_count,
					   NULL, 0, 0);
	for (int lr = 0; lr < spec->nproc_per_node; lr++) {
		int err;
		struct worker *w =
			crun__worker_spawn(g->spawner, &g->core.place, lr, g->attempts - 1, &err);

		if (!w) {
			crun__error("cannot start worker local rank %d: %s", lr, strerror(ENOMEM));
			ev.kind = CRUN__GEV_SPAWN_FAILED;
			break;
		}
		g->workers[g->nworkers++] = w;
		if (w->spawned) {
			crun__monitor_worker_started(g->monitor, crun__wall_ms(), lr, w->rank,
						     w->pid);
			g->running++;
			g->open_pipes += 2;
			continue;
		}
		ev.kind = CRUN__GEV_SPAWN_FAILED;
		ev.exec_status = w->exec_failed ? crun__group_exec_status(err) : 0;
		if (ev.exec_status) {
			char msg[512];

			snprintf(msg, sizeof(msg), "cannot execute '%s': %s", spec->argv[0],
				 uv_strerror(err));
			crun__error("%s", msg);
			if (g->own_error_file)
				agent_error_file_write(g->own_error_file, NULL, 0, msg, msg,
						       ev.exec_status);
		} else if (w->exec_failed) {
			crun__error("cannot start worker rank %d: %s", w->rank, uv_strerror(err));
		}
		break;
	}
	then(g, &ev);
}

static void abandon_unreaped(struct group *g)
{
	for (int i = 0; i < g->nworkers; i++) {
		struct worker *w = g->workers[i];
		if (!w->running)
			continue;
		crun__error("rank %d (local rank %d, pid %d) did not exit %lld ms after SIGKILL "
			    "(stuck in the kernel?); giving up on it",
			    w->rank, w->local_rank, (int)w->pid,
			    (long long)g->spec->kill_timeout_ms);
		crun__worker_abandon(w);
		g->running--;
	}
}

/* The worker's last line for its failure record: stderr's, else
 * stdout's; NULL when it wrote none. */
static const char *last_line(const struct worker *w)
{
	if (w->out[1].last_line[0])
		return w->out[1].last_line;
	return w->out[0].last_line[0] ? w->out[0].last_line : NULL;
}

/* The attempt's first failure, as the summary names its root cause,
 * with the worker's last line. */
static void note_root_cause(struct group *g)
{
	const struct crun__failure *f = &g->failures.v[0];
	char line[CRUN_MON_TEXT];
	size_t n;

	crun__failure_describe(f, g->hostname, line, sizeof(line));
	n = strlen(line);
	if (f->last_line && !f->hang && n < sizeof(line))
		snprintf(line + n, sizeof(line) - n, ": %s", f->last_line);
	crun__monitor_failure(g->monitor, crun__wall_ms(), line);
}

/* A pipe of w closed: its last line is final now (the exit may have been
 * recorded before the pipe was read to its end). */
static void update_last_line(struct group *g, const struct worker *w)
{
	const char *line = last_line(w);

	for (size_t i = 0; line && i < g->failures.n; i++) {
		struct crun__failure *f = &g->failures.v[i];
		char *copy;

		if (f->pid != w->pid || f->local_rank != w->local_rank ||
		    (f->last_line && !strcmp(f->last_line, line)))
			continue;
		copy = strdup(line);
		if (!copy)
			continue;
		free(f->last_line);
		f->last_line = copy;
		if (i == 0)
			note_root_cause(g);
	}
}

static void record_failure(struct group *g, int lr)
{
	const struct worker *w = g->workers[lr];
	struct crun__failure f = {
		.rank = w->rank,
		.local_rank = w->local_rank,
		.pid = w->pid,
		.exit_code = w->exit_code,
		.term_signal = w->term_signal,
		.wall_ms = w->exit_wall_ms,
		.error_file = w->error_file,
		.log_file = w->log_path[1] ? w->log_path[1] : w->log_path[0],
		.last_line = (char *)last_line(w),
	};
	char hang[300];

	if (lr == g->hang_lr && !g->hang_recorded) {
		g->hang_recorded = true; /* its exit, if recorded, is its own */
		snprintf(hang, sizeof(hang), "hung: %s", g->hang_msg);
		f.hang = hang;
		f.wall_ms = crun__wall_ms(); /* found hung now; it has not exited */
	}

	if (crun__failures_add(&g->failures, &f) < 0)
		crun__error("out of memory recording the failure of rank %d", w->rank);
	else if (g->failures.n == 1)
		note_root_cause(g);
	if (g->restart_cause == CRUN_MON_NCAUSES)
		g->restart_cause =
			f.hang ? CRUN_MON_CAUSE_WORKER_HUNG : CRUN_MON_CAUSE_WORKER_FAILED;
	g->attempt_failed = true;
}

/* "not restarting: ..." when the attempt's failure is not restarted
 * (repeat.h); empty when it is. */
static void why_not_restarting(const struct group *g, char *buf, size_t len)
{
	const struct crun__attempt *a = &g->this_attempt;
	const struct crun__attempt_failure *f = a->v;
	char what[64], min[24];

	buf[0] = '\0';
	if (!g->core.no_restart || !a->n)
		return;
	agent_describe_exit(what, sizeof(what), f->exit_code, f->term_signal);
	if (g->core.no_restart == CRUN__NO_RESTART_CONFIG) {
		snprintf(buf, len,
			 "not restarting: rank %d %s: a configuration error, which every attempt "
			 "would meet",
			 f->rank, what);
		return;
	}
	if (f->message && !strcmp(f->message, "hung"))
		snprintf(what, sizeof(what), "hung");
	crun__rdzv_format_ms(g->spec->min_attempt_ms, min, sizeof(min));
	snprintf(buf, len,
		 "not restarting: rank %d failed the same way twice without progress: %s after "
		 "%.1fs (no heartbeat step beyond the last attempt's; --min-attempt-time %s)",
		 f->rank, what, (double)a->duration_ms / 1000.0, min);
}

/* Every node's agent hears this as the round's end; with no_restart, as
 * the end of the run. */
static void tell_store(struct group *g, int lr)
{
	const struct worker *w = g->workers[lr];
	const char *why = g->core.no_restart == CRUN__NO_RESTART_CONFIG ? "a configuration error"
			  : g->core.no_restart == CRUN__NO_RESTART_REPEAT
				  ? "it failed the same way twice without progress"
				  : NULL;
	char what[64], msg[512];

	if (lr == g->hang_lr)
		snprintf(msg, sizeof(msg), "rank %d (local rank %d) on %s hung: %s%s%s", w->rank,
			 w->local_rank, g->hostname, g->hang_msg, why ? "; not restarting: " : "",
			 why ? why : "");
	else {
		agent_describe_exit(what, sizeof(what), w->exit_code, w->term_signal);
		snprintf(msg, sizeof(msg), "rank %d (local rank %d) on %s %s%s%s", w->rank,
			 w->local_rank, g->hostname, what, why ? "; not restarting: " : "",
			 why ? why : "");
	}
	crun__rdzv_fail(g->rdzv, msg, why != NULL);
}

/* ---- hung workers ---- */

/* What a stack dump needs after its worker may be gone. */
struct capture {
	struct group *g;
	int attempt;
	int lr;
	char prefix[CRUN__PREFIX_MAX];
	char *log_path; /* the worker's stderr log; NULL: none */
};

/* Writes text to crun's stderr, each line after prefix, and to path. */
static void write_stack(const char *prefix, const char *path, const char *tool, const char *text)
{
	const char *line = text;
	int fd;

	fprintf(stderr, "%s crun: stack of the hung worker (%s):\n", prefix, tool);
	while (*line) {
		const char *nl = strchr(line, '\n');
		int n = nl ? (int)(nl - line) : (int)strlen(line);
		fprintf(stderr, "%s %.*s\n", prefix, n, line);
		if (!nl)
			break;
		line = nl + 1;
	}
	fflush(stderr);
	if (!path)
		return;
	fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd < 0)
		return;
	dprintf(fd, "crun: stack of the hung worker (%s):\n%s", tool, text);
	close(fd);
}

static void captured(void *arg, const char *text, const char *tool)
{
	struct capture *c = arg;
	struct group *g = c->g;
	struct crun__group_event ev = {.kind = CRUN__GEV_HANG_CAPTURED, .worker = c->lr};

	write_stack(c->prefix, c->log_path, tool, text);
	if (c->attempt == g->attempts) {
		for (size_t i = 0; i < g->failures.n; i++) {
			struct crun__failure *f = &g->failures.v[i];
			if (f->local_rank == c->lr && f->hang && !f->stack)
				f->stack = strdup(text);
		}
		if (g->core.capturing && g->core.state == CRUN__GROUP_STOPPING)
			feed(g, &ev);
	}
	free(c->log_path);
	free(c);
}

static void capture_stack(struct group *g, int lr)
{
	const struct worker *w = g->workers[lr];
	struct capture *c = calloc(1, sizeof(*c));
	struct crun__group_event ev = {.kind = CRUN__GEV_HANG_CAPTURED, .worker = lr};
	int err = -ENOMEM;

	if (c) {
		c->g = g;
		c->attempt = g->attempts;
		c->lr = lr;
		snprintf(c->prefix, sizeof(c->prefix), "%s", w->prefix);
		c->log_path = w->log_path[1] ? strdup(w->log_path[1]) : NULL;
		err = crun__stackdump_start(g->loop, w->pid, CAPTURE_MS, captured, c);
	}
	if (err < 0) {
		crun__warn("cannot take the stack of rank %d: %s", w->rank, strerror(-err));
		if (c)
			free(c->log_path);
		free(c);
		then(g, &ev);
	}
}

/* As torch's FileTimer server: the request's signal to the request's
 * process; a heartbeat hang: SIGKILL to the worker's process group. */
static void kill_hung(struct group *g, int lr)
{
	const struct worker *w = g->workers[lr];

	if (lr == g->hang_lr && g->hang.why == CRUN__HUNG_FILE_TIMER) {
		/* the pid may have exited, or been reused, while the stack
		 * was being taken */
		if (g->hang.signal > 0 &&
		    (!g->heartbeat || crun__heartbeat_owns(g->heartbeat, lr, g->hang.pid)))
			agent_kill(g->hang.pid, g->hang.signal);
		return;
	}
	if (w->spawned && w->running)
		agent_kill(-w->pid, SIGKILL);
}

static void worker_hung(void *arg, const struct crun__liveness_hang *h)
{
	struct group *g = arg;
	struct crun__group_event ev = {.kind = CRUN__GEV_WORKER_HUNG, .worker = h->worker};
	const struct worker *w;

	if (g->core.state != CRUN__GROUP_RUNNING || h->worker >= g->nworkers)
		return; /* stopping already, for its own reason */
	w = g->workers[h->worker];
	if (!w->running)
		return;
	g->hang_lr = h->worker;
	g->hang = *h;
	crun__liveness_describe(h, g->hang_msg, sizeof(g->hang_msg));
	crun__monitor_worker_hung(g->monitor, crun__wall_ms(), h->worker, g->hang_msg);
	crun__error("rank %d (local rank %d, pid %d) hung: %s; taking its stack, then "
		    "stopping the workers",
		    w->rank, w->local_rank, (int)w->pid, g->hang_msg);
	note_hang(g, w);
	feed(g, &ev);
}

static void worker_step(void *arg, int lr, int64_t step, double work_s, uint64_t now_ms)
{
	struct group *g = arg;

	if (step > g->max_step)
		g->max_step = step;
	if (g->on_step)
		g->on_step(g->on_step_arg, lr, step, work_s, now_ms);
}

static void release_workers(struct group *g)
{
	if (g->dead_pids)
		memset(g->dead_pids, 0, (size_t)g->spec->nproc_per_node * sizeof(*g->dead_pids));
	for (int i = 0; i < g->nworkers; i++) {
		if (g->dead_pids)
			g->dead_pids[g->workers[i]->local_rank] =
				g->workers[i]->spawned ? g->workers[i]->pid : 0;
		crun__worker_detach(g->workers[i]);
		g->workers[i] = NULL;
	}
	g->nworkers = 0;
}

static void forget_round_end(struct group *g)
{
	free(g->round_end);
	g->round_end = NULL;
}

/* A join or the exit barrier could not be sent. */
static void rdzv_send_failed(struct group *g)
{
	struct crun__group_event ev = {.kind = CRUN__GEV_RDZV_ERROR};

	g->rdzv_msg = crun__rdzv_error(g->rdzv);
	then(g, &ev);
}

static void summary(struct group *g)
{
	char why[512];
	struct crun__summary_job job = {
		.name = g->name,
		.hostname = g->hostname,
		.restart_count = g->core.place.restart_count,
		.keeps_files = g->keeps_files,
		.own_error_file = g->own_error_file,
		.round_end = g->core.round_ended ? g->round_end : NULL,
		.round = g->round_end_round,
		.not_restarting = why,
	};

	why_not_restarting(g, why, sizeof(why));
	crun__summary_report(&job, &g->failures);
}

static void say(struct group *g, const struct crun__group_event *ev, enum crun__group_note note)
{
	char name[32], what[300];

	if (ev->kind == CRUN__GEV_SIGNAL)
		crun__signal_format(name, sizeof(name), ev->signal);
	switch (note) {
	case CRUN__GNOTE_STOPPING:
		crun__info("got %s; stopping", name);
		return;
	case CRUN__GNOTE_STOPPING_WORKERS: {
		const char *again = ev->signal == SIGINT ? "a second Ctrl-C kills them at once"
							 : "a second signal kills them at once";
		bool stopping = g->core.state == CRUN__GROUP_STOPPING &&
				uv_is_active((uv_handle_t *)&g->timer);
		enum crun__log_level level =
			g->spec->quiet_stop_hint ? CRUN_LOG_DEBUG : CRUN_LOG_INFO;
		char grace[32];

		/* Once per job: a second handled signal kills (KILLING). When
		 * the workers are being stopped already, their grace period
		 * runs since then; when they were sent SIGKILL, none is left. */
		if (stopping && g->timer_kind == CRUN__GTIMER_STUCK) {
			crun__log(level, "got %s; the workers were sent SIGKILL already", name);
			return;
		}
		if (stopping && g->timer_kind == CRUN__GTIMER_KILL) {
			uint64_t left = uv_timer_get_due_in(&g->timer);

			if (left >= 1000)
				left = (left + 999) / 1000 * 1000;
			crun__rdzv_format_ms((int64_t)left, grace, sizeof(grace));
			crun__log(level,
				  "got %s; stopping the workers (%s now, SIGKILL in at most %s, "
				  "--shutdown-timeout); %s",
				  name, name, grace, again);
			return;
		}
		crun__rdzv_format_ms(g->spec->shutdown_timeout_ms, grace, sizeof(grace));
		crun__log(level,
			  "got %s; stopping the workers (%s now, SIGKILL after %s, "
			  "--shutdown-timeout); %s",
			  name, name, grace, again);
		return;
	}
	case CRUN__GNOTE_KILLING:
		crun__info("got %s again; killing the workers now (SIGKILL)", name);
		return;
	case CRUN__GNOTE_SHUTDOWN_TIMEOUT: {
		char grace[32];

		crun__rdzv_format_ms(g->spec->shutdown_timeout_ms, grace, sizeof(grace));
		crun__warn("%d worker%s still running after the shutdown timeout (%s); "
			   "sending SIGKILL",
			   g->running, g->running == 1 ? "" : "s", grace);
		return;
	}
	case CRUN__GNOTE_OPEN_PIPES:
		for (int i = 0; i < g->nworkers; i++) {
			struct worker *w = g->workers[i];
			if (w->spawned && (w->out[0].open || w->out[1].open))
				crun__warn("output of rank %d is still open in a process outside "
					   "its process group; not waiting for it",
					   w->rank);
		}
		return;
	case CRUN__GNOTE_RESTARTING:
		if (!g->failures.n) {
			crun__warn("worker group failed; restarting (restart %d of %d)",
				   g->core.place.restart_count, g->spec->max_restarts);
			return;
		}
		if (g->failures.v[0].hang)
			snprintf(what, sizeof(what), "%s", g->failures.v[0].hang);
		else
			agent_describe_exit(what, sizeof(what), g->failures.v[0].exit_code,
					    g->failures.v[0].term_signal);
		crun__warn("worker group failed: rank %d (local rank %d, pid %d) %s; restarting "
			   "(restart %d of %d)",
			   g->failures.v[0].rank, g->failures.v[0].local_rank,
			   (int)g->failures.v[0].pid, what, g->core.place.restart_count,
			   g->spec->max_restarts);
		return;
	case CRUN__GNOTE_ROUND_ENDED: {
		const char *why = g->round_end ? g->round_end : "?";
		long long round = (long long)g->round_end_round;

		if (!g->core.exhausted)
			g->restart_cause = g->round_end_cause;
		if (g->core.exhausted)
			crun__error("round %lld ended: %s", round, why);
		else if (g->round_end_joined)
			crun__warn("round %lld ended: %s; restarting (a joining node is not "
				   "counted as a restart)",
				   round, why);
		else if (g->round_end_count < 0)
			crun__warn("round %lld ended: %s; restarting", round, why);
		else
			crun__warn("round %lld ended: %s; restarting (restart %lld of %d)", round,
				   why, (long long)g->round_end_count, g->spec->max_restarts);
		return;
	}
	case CRUN__GNOTE_RDZV_ERROR:
		if (g->rdzv_msg)
			crun__error("%s", g->rdzv_msg);
		return;
	}
}

/* ---- the debug line of each step, in words ---- */

/* What happened, for an operator: "local rank 1 (rank 3) exited with code 2". */
static void describe_event(const struct group *g, const struct crun__group_event *ev, char *buf,
			   size_t len)
{
	char what[96], who[48] = "";

	if (ev->worker >= 0 && ev->worker < g->nworkers && g->workers[ev->worker])
		snprintf(who, sizeof(who), "local rank %d (rank %d)", ev->worker,
			 g->workers[ev->worker]->rank);
	else if (ev->worker >= 0)
		snprintf(who, sizeof(who), "local rank %d", ev->worker);
	switch (ev->kind) {
	case CRUN__GEV_START:
		snprintf(buf, len, "the job starts");
		return;
	case CRUN__GEV_SPAWNED:
		snprintf(buf, len, "every worker of the attempt has started");
		return;
	case CRUN__GEV_SPAWN_FAILED:
		snprintf(buf, len, "%s",
			 ev->exec_status == 127	  ? "the command was not found"
			 : ev->exec_status == 126 ? "the command cannot be executed"
						  : "a worker could not be started");
		return;
	case CRUN__GEV_WORKER_EXITED:
		agent_describe_exit(what, sizeof(what), ev->exit_code, ev->term_signal);
		snprintf(buf, len, "%s %s", who, what);
		return;
	case CRUN__GEV_PIPE_CLOSED:
		snprintf(buf, len, "%s closed its stdout or stderr", who);
		return;
	case CRUN__GEV_SIGNAL:
		crun__signal_format(what, sizeof(what), ev->signal);
		snprintf(buf, len, "crun got %s", what);
		return;
	case CRUN__GEV_TIMER_KILL:
		snprintf(buf, len, "the shutdown timeout passed");
		return;
	case CRUN__GEV_TIMER_STUCK:
		snprintf(buf, len, "workers outlived the wait after SIGKILL");
		return;
	case CRUN__GEV_TIMER_DRAIN:
		snprintf(buf, len, "the wait for the workers' last output passed");
		return;
	case CRUN__GEV_WORKER_HUNG:
		snprintf(buf, len, "%s is hung", who);
		return;
	case CRUN__GEV_HANG_CAPTURED:
		snprintf(buf, len, "the hung worker's stack was taken");
		return;
	case CRUN__GEV_RDZV_READY:
		snprintf(buf, len, "the rendezvous gave this node its ranks");
		return;
	case CRUN__GEV_ROUND_ENDED:
		snprintf(buf, len, "the store ended the round");
		return;
	case CRUN__GEV_BARRIER_PASSED:
		snprintf(buf, len, "every node is done");
		return;
	case CRUN__GEV_RDZV_ERROR:
		snprintf(buf, len, "the rendezvous failed");
		return;
	case CRUN__GEV_STORE_LOST:
		snprintf(buf, len, "the connection to the store was lost");
		return;
	case CRUN__GROUP_NEVENTS:
		break;
	}
	snprintf(buf, len, "something unknown happened");
}

static const char *stop_reason(enum crun__group_stop stop)
{
	switch (stop) {
	case CRUN__GSTOP_DONE:
		return "every worker exited 0";
	case CRUN__GSTOP_FAILURE:
		return "a worker failed";
	case CRUN__GSTOP_SIGNAL:
		return "crun got a signal";
	case CRUN__GSTOP_NOT_FOUND:
		return "the command was not found";
	case CRUN__GSTOP_NOT_EXECUTABLE:
		return "the command cannot be executed";
	case CRUN__GSTOP_AGENT:
		return "crun itself failed";
	case CRUN__GSTOP_ROUND:
		return "the store ended the round";
	case CRUN__GSTOP_LOST:
		return "the store was lost";
	case CRUN__GSTOP_NONE:
		break;
	}
	return "the attempt is over";
}

void crun__group_describe(const struct group *g, char *buf, size_t len)
{
	const struct crun__group_core *c = &g->core;

	switch (c->state) {
	case CRUN__GROUP_INIT:
		snprintf(buf, len, "not started yet");
		return;
	case CRUN__GROUP_STARTING:
		if (c->place.restart_count > 0)
			snprintf(buf, len, "starting the workers again (restart %d)",
				 c->place.restart_count);
		else
			snprintf(buf, len, "starting the workers");
		return;
	case CRUN__GROUP_RUNNING:
		snprintf(buf, len, "%d of %d workers running, %d output stream%s open", g->running,
			 g->nworkers, g->open_pipes, g->open_pipes == 1 ? "" : "s");
		return;
	case CRUN__GROUP_STOPPING:
		snprintf(buf, len,
			 "stopping the workers because %s (%d still running, %d output stream%s "
			 "open)",
			 stop_reason(c->stop), g->running, g->open_pipes,
			 g->open_pipes == 1 ? "" : "s");
		return;
	case CRUN__GROUP_RESTARTING:
		snprintf(buf, len, "waiting for the store to end the round, then restarting");
		return;
	case CRUN__GROUP_RENDEZVOUS:
		snprintf(buf, len, "joining the next rendezvous round");
		return;
	case CRUN__GROUP_FINISHING:
		snprintf(buf, len, "waiting for the other nodes to finish");
		return;
	case CRUN__GROUP_SUCCEEDED:
		snprintf(buf, len, "the job succeeded");
		return;
	case CRUN__GROUP_FAILED:
		snprintf(buf, len, "the job failed");
		return;
	case CRUN__GROUP_STOPPED:
		snprintf(buf, len, "the job was stopped by a signal");
		return;
	case CRUN__GROUP_EXEC_FAILED:
		snprintf(buf, len, "the command could not be run");
		return;
	case CRUN__GROUP_NSTATES:
		break;
	}
	snprintf(buf, len, "in an unknown state");
}

static void debug_step(const struct group *g, const struct crun__group_event *ev,
		       enum crun__group_state was)
{
	char what[160], now[160];

	describe_event(g, ev, what, sizeof(what));
	crun__group_describe(g, now, sizeof(now));
	crun__debug("worker group: %s; %s%s", what, g->core.state == was ? "still " : "now ", now);
}

/* ---- the GPUs of the dead workers ---- */

/* The next queued event (there is one: an action queued it). */
static struct crun__group_event take_next(struct group *g)
{
	struct crun__group_event ev = g->next[g->next_head];

	g->next_head = (g->next_head + 1) % CRUN__GROUP_MAX_ACTIONS;
	g->next_n--;
	return ev;
}

static void gpus_released(void *arg)
{
	struct group *g = arg;
	struct crun__group_event ev;

	g->gpu_waiting = false;
	spawn_all(g);
	ev = take_next(g);
	feed(g, &ev);
}

/* SPAWN_ALL after the previous attempt's workers: first wait for their
 * GPUs (gpu_watch.h), unless nothing is to be waited for or other events
 * are queued behind this one. */
static void spawn_after_gpus(struct group *g)
{
	if (!g->next_n && g->gpus &&
	    crun__gpu_watch_wait(g->gpus, g->dead_pids, g->spec->nproc_per_node, gpus_released,
				 g)) {
		g->gpu_waiting = true;
		return;
	}
	spawn_all(g);
}

static void carry_out(struct group *g, const struct crun__group_event *ev,
		      const struct crun__group_action *a)
{
	switch (a->kind) {
	case CRUN__GACT_SAY:
		say(g, ev, (enum crun__group_note)a->arg);
		return;
	case CRUN__GACT_SPAWN_ALL:
		spawn_after_gpus(g);
		return;
	case CRUN__GACT_SIGNAL_RUNNING:
		crun__straggler_watch_stop(&g->stragglers);
		signal_groups(g, a->arg, false);
		return;
	case CRUN__GACT_KILL_LEFTOVERS:
		/* Whatever the workers started in their groups goes with them;
		 * then the guard can forget the groups. */
		signal_groups(g, SIGKILL, true);
		for (int i = 0; i < g->nworkers; i++)
			if (g->workers[i]->spawned)
				agent_reaper_forget(g->reaper, g->workers[i]->pid);
		return;
	case CRUN__GACT_ARM_TIMER:
		arm_timer(g, (enum crun__group_timer)a->arg);
		return;
	case CRUN__GACT_DISARM_TIMER:
		uv_timer_stop(&g->timer);
		return;
	case CRUN__GACT_CLOSE_PIPES:
		close_pipes(g);
		return;
	case CRUN__GACT_ABANDON_UNREAPED:
		abandon_unreaped(g);
		return;
	case CRUN__GACT_RECORD_FAILURE:
		record_failure(g, a->arg);
		return;
	case CRUN__GACT_CLEAR_FAILURES:
		crun__failures_clear(&g->failures);
		return;
	case CRUN__GACT_TELL_STORE:
		tell_store(g, a->arg);
		return;
	case CRUN__GACT_RELEASE_WORKERS:
		crun__straggler_watch_stop(&g->stragglers);
		release_workers(g);
		return;
	case CRUN__GACT_JOIN:
		forget_round_end(g);
		if (crun__rdzv_join(g->rdzv) < 0)
			rdzv_send_failed(g);
		return;
	case CRUN__GACT_EXIT_BARRIER:
		if (crun__rdzv_done(g->rdzv) < 0)
			rdzv_send_failed(g);
		return;
	case CRUN__GACT_SUMMARY:
		summary(g);
		return;
	case CRUN__GACT_FINISH:
		uv_timer_stop(&g->timer);
		g->finished(g->arg, (enum crun__group_end)a->arg);
		return;
	case CRUN__GACT_CAPTURE_STACK:
		capture_stack(g, a->arg);
		return;
	case CRUN__GACT_KILL_HUNG:
		kill_hung(g, a->arg);
		return;
	}
}

/* Steps ev, carries out the actions, then the events they caused. */
static void feed(struct group *g, const struct crun__group_event *first)
{
	struct crun__group_event ev = *first;

	if (g->busy) {
		then(g, first); /* from inside an action: after it */
		return;
	}
	if (g->gpu_waiting) {
		/* Something happened before the GPUs were free: the wait
		 * ends, no worker starts, and the step takes the event in
		 * STARTING as one between two attempts. */
		char what[200];

		g->gpu_waiting = false;
		describe_event(g, first, what, sizeof(what));
		crun__gpu_watch_stop(g->gpus, what);
	}
	g->busy = true;
	for (;;) {
		struct crun__group_facts f = {
			.rdzv = g->rdzv != NULL,
			.running = g->running,
			.open_pipes = g->open_pipes,
			.failures = (int)g->failures.n,
			.max_restarts = g->spec->max_restarts,
			.verdict = crun__restart_verdict(&g->prev_attempt, &g->this_attempt,
							 g->spec->min_attempt_ms),
		};
		struct crun__group_actions acts;
		enum crun__group_state was = g->core.state;

		if (crun__group_step(&g->core, &ev, &f, &acts) < 0) {
			crun__error("internal error: the worker group (%s) cannot take event '%s'; "
				    "stopping the job",
				    crun__group_state_name(was), crun__group_event_name(ev.kind));
			g->next_n = 0;
			crun__group_abort(&g->core, &acts);
			for (int i = 0; i < acts.n; i++)
				carry_out(g, &ev, &acts.a[i]);
		} else {
			if (crun__log_enabled(CRUN_LOG_DEBUG))
				debug_step(g, &ev, was);
			for (int i = 0; i < acts.n; i++)
				carry_out(g, &ev, &acts.a[i]);
		}
		if (g->core.state != was)
			crun__monitor_group_state(g->monitor,
						  crun__group_state_name(g->core.state));
		if (!g->next_n)
			break;
		ev = take_next(g);
	}
	g->busy = false;
}

/* ---- events from the spawner and the rendezvous ---- */

static void worker_exited(struct worker *w, void *arg)
{
	struct group *g = arg;
	struct crun__group_event ev = {
		.kind = CRUN__GEV_WORKER_EXITED,
		.worker = w->local_rank,
		.exit_code = w->exit_code,
		.term_signal = w->term_signal,
	};

	g->running--;
	crun__monitor_worker_exited(g->monitor, crun__wall_ms(), w->local_rank, w->exit_code,
				    w->term_signal);
	if (g->rdzv && g->frozen_after_ms > 0 &&
	    uv_now(g->loop) - g->last_alive_ms >= (uint64_t)g->frozen_after_ms) {
		char why[96];

		snprintf(why, sizeof(why), "this agent was stopped for %.1fs",
			 (double)(uv_now(g->loop) - g->last_alive_ms) / 1000.0);
		crun__rdzv_lose(g->rdzv, why);
	}
	note_failure(g, w);
	feed(g, &ev);
}

static void pipe_closed(struct worker *w, void *arg)
{
	struct group *g = arg;
	struct crun__group_event ev = {.kind = CRUN__GEV_PIPE_CLOSED, .worker = w->local_rank};

	if (!w->spawned)
		return; /* never counted */
	update_last_line(g, w);
	g->open_pipes--;
	feed(g, &ev);
}

static void rdzv_ready(void *arg, const struct crun__placement *place)
{
	struct crun__group_event ev = {.kind = CRUN__GEV_RDZV_READY, .place = *place};

	feed(arg, &ev);
}

static void rdzv_ended(void *arg, const struct crun__round_end *end)
{
	struct group *g = arg;
	struct crun__group_event ev = {.kind = CRUN__GEV_ROUND_ENDED, .exhausted = end->exhausted};

	forget_round_end(g);
	g->round_end = strdup(end->message);
	g->round_end_round = end->round;
	g->round_end_count = end->restart_count;
	g->round_end_joined = end->node_joined;
	g->round_end_cause =
		crun__mon_round_end_cause(end->node_joined, end->node_left, end->message);
	crun__monitor_round_closed(g->monitor, crun__wall_ms(), end->message);
	/* The nodes the store dropped; one that left on its own is the next
	 * round's member_left. */
	if (end->node_left) {
		struct crun__mon_gone gone[64];
		int n = crun__mon_round_end_gone(end->message, gone, (int)CRUN_ARRAY_SIZE(gone));

		/* This node's own eviction goes as this node's (NULL), so that
		 * the monitor records it once, here or at the keep-alive tick
		 * that found the agent stopped. */
		for (int i = 0; i < n && i < (int)CRUN_ARRAY_SIZE(gone); i++)
			if (gone[i].evicted)
				crun__monitor_member_evicted(
					g->monitor, crun__wall_ms(),
					gone[i].group_rank == g->core.place.group_rank
						? NULL
						: gone[i].host,
					end->message);
	}
	if (!end->node_joined && !g->failures.n) /* another node's, as the summary says */
		crun__monitor_failure(g->monitor, crun__wall_ms(), end->message);
	feed(g, &ev);
}

static void rdzv_done(void *arg)
{
	struct crun__group_event ev = {.kind = CRUN__GEV_BARRIER_PASSED};

	feed(arg, &ev);
}

static void rdzv_failed(void *arg, bool lost, const char *message)
{
	struct group *g = arg;
	struct crun__group_event ev = {.kind = lost ? CRUN__GEV_STORE_LOST : CRUN__GEV_RDZV_ERROR};
	enum crun__group_stop was = g->core.stop;

	g->rdzv_msg = message;
	feed(g, &ev);
	g->rdzv_msg = NULL;
	/* The attempt ends for the loss (the workers start again in a new
	 * round, once the node rejoins one); or, between two attempts, the
	 * loss is what sends the node to the next round. */
	if (lost && ((was != CRUN__GSTOP_LOST && g->core.stop == CRUN__GSTOP_LOST) ||
		     (g->core.state == CRUN__GROUP_RENDEZVOUS && g->attempts > 0 &&
		      g->restart_cause == CRUN_MON_NCAUSES)))
		g->restart_cause = CRUN_MON_CAUSE_STORE_LOST;
}

/* ---- lifecycle ---- */

int crun__group_init(struct group *g, const struct crun__placement *place)
{
	int err;

	crun__group_core_init(&g->core, place);
	g->restart_cause = CRUN_MON_NCAUSES;
	g->max_step = -1;
	g->prev_attempt.max_step = g->this_attempt.max_step = -1;
	g->workers = calloc((size_t)g->spec->nproc_per_node, sizeof(*g->workers));
	g->dead_pids = calloc((size_t)g->spec->nproc_per_node, sizeof(*g->dead_pids));
	if (!g->workers || !g->dead_pids)
		return -ENOMEM;
	err = uv_timer_init(g->loop, &g->timer);
	if (err < 0)
		return err;
	g->timer.data = g;
	g->timer_open = true;
	err = crun__straggler_watch_init(&g->stragglers, g->loop, g->spec, g->rdzv, g->hostname);
	if (err < 0)
		return err;
	g->stragglers.monitor = g->monitor;
	g->spawner->exited = worker_exited;
	g->spawner->pipe_closed = pipe_closed;
	g->spawner->arg = g;
	g->max_step = -1;
	g->hang_lr = -1;
	if (g->heartbeat) {
		g->heartbeat->hung = worker_hung;
		g->heartbeat->on_step = worker_step;
		g->heartbeat->arg = g;
	}
	return 0;
}

void crun__group_rdzv_hooks(struct group *g, struct crun__rdzv_hooks *hooks)
{
	hooks->ready = rdzv_ready;
	hooks->ended = rdzv_ended;
	hooks->done = rdzv_done;
	hooks->failed = rdzv_failed;
	hooks->arg = g;
}

void crun__group_start(struct group *g)
{
	struct crun__group_event ev = {.kind = CRUN__GEV_START};

	feed(g, &ev);
}

void crun__group_signal(struct group *g, int sig)
{
	struct crun__group_event ev = {.kind = CRUN__GEV_SIGNAL, .signal = sig};

	feed(g, &ev);
}

void crun__group_forward(struct group *g, int sig)
{
	char name[32];
	int n = 0;

	/* The worker's own process, not its group: its children (a shell's
	 * commands, data loaders) must not die of a warning that only the
	 * program itself handles. */
	for (int i = 0; i < g->nworkers; i++) {
		struct worker *w = g->workers[i];

		if (!w->spawned || !w->running)
			continue;
		agent_kill(w->pid, sig);
		n++;
	}
	crun__signal_format(name, sizeof(name), sig);
	crun__info("got %s; forwarded to %d running worker%s", name, n, n == 1 ? "" : "s");
}

int crun__group_status(const struct group *g)
{
	return crun__group_exit_status(&g->core);
}

void crun__group_close(struct group *g)
{
	crun__straggler_watch_close(&g->stragglers);
	if (!g->timer_open)
		return;
	g->timer_open = false;
	uv_close((uv_handle_t *)&g->timer, NULL);
}

void crun__group_finish(struct group *g)
{
	crun__failures_finish(&g->failures);
	crun__attempt_finish(&g->prev_attempt);
	crun__attempt_finish(&g->this_attempt);
	crun__straggler_watch_finish(&g->stragglers);
	forget_round_end(g);
	free(g->workers);
	g->workers = NULL;
	free(g->dead_pids);
	g->dead_pids = NULL;
}

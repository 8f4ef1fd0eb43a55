/* The worker group's state machine.
 *
 * Everything that happens to the group comes through agent_group_event():
 * the start, a worker reaped by libuv, a worker's pipe closed, a handled
 * signal, the group's one timer. The table below is the whole behaviour;
 * the rest of this file carries it out.
 *
 *   state     event                   action                      next
 *   INIT      START                   spawn every worker          RUNNING
 *   STARTING  (spawn failed)          stop (exec or agent error)  STOPPING
 *   RUNNING   worker exit 0           (last one: stop, done)      RUNNING/STOPPING
 *   RUNNING   worker exit !0/signal   record failure; SIGTERM     STOPPING
 *                                     the rest; arm kill timer
 *   RUNNING   signal N                forward N; arm kill timer   STOPPING
 *   STOPPING  worker exit             record if it failed on its  STOPPING
 *                                     own; when none is left:
 *                                     SIGKILL the groups (what
 *                                     workers left behind), wait
 *                                     for pipes (drain timer)
 *   STOPPING  pipe closed             when every worker is reaped RESTARTING or
 *                                     and every pipe closed: the  a final state
 *                                     attempt is over
 *   STOPPING  signal N (first)        forward N                   STOPPING
 *   STOPPING  signal N (again)        SIGKILL now                 STOPPING
 *   STOPPING  timer: kill             SIGKILL; arm stuck timer    STOPPING
 *   STOPPING  timer: stuck            report and abandon the      STOPPING
 *                                     unreaped; close pipes
 *   STOPPING  timer: drain            close the pipes still open  STOPPING
 *   RESTARTING (attempt over, restarts left) count + 1; spawn   RUNNING
 *   final     anything                nothing
 *
 * When the attempt is over: every worker exited 0 -> SUCCEEDED (0); a
 * failure with restarts left (and no worker abandoned) -> RESTARTING; a
 * failure without -> failure summary, FAILED (1); a signal -> STOPPED
 * (128+N); a command that cannot be executed -> EXEC_FAILED (127/126); an
 * agent error -> FAILED (1).
 *
 * With rendezvous (several nodes) the store decides about restarts, and
 * these rows replace or join the ones above:
 *
 *   state      event                  action                      next
 *   INIT       START                  join a round                RENDEZVOUS
 *   RENDEZVOUS ready (rank, master)   spawn every worker          RUNNING
 *   RUNNING    worker exit !0/signal  record; tell the store      STOPPING
 *                                     (RDZV_FAIL); SIGTERM rest
 *   RUNNING    round ended (event)    print why; SIGTERM all      STOPPING
 *   RUNNING    store lost             print it; SIGTERM all       STOPPING
 *   (attempt over) all exited 0       exit barrier (RDZV_DONE)    FINISHING
 *   (attempt over) failure            wait for the round's end    RESTARTING
 *   (attempt over) round ended        join the next round         RENDEZVOUS
 *   RESTARTING round ended            join the next round         RENDEZVOUS
 *   FINISHING  barrier passed         nothing                     SUCCEEDED
 *   FINISHING  round ended            join the next round         RENDEZVOUS
 *   any of RENDEZVOUS, RESTARTING, FINISHING (no worker runs):
 *              round ended exhausted  failure summary             FAILED
 *              store lost, error      print it                    FAILED
 *              signal N               nothing to stop             STOPPED
 * A round that ends "exhausted" ends the job (the summary, exit 1) once
 * the workers are stopped. */
#include "agent/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

int (*agent_kill)(pid_t pid, int sig) = kill;

const char *agent_group_state_name(enum group_state s)
{
	static const char *const names[] = {
		[GROUP_INIT] = "init",
		[GROUP_STARTING] = "starting",
		[GROUP_RUNNING] = "running",
		[GROUP_STOPPING] = "stopping",
		[GROUP_RESTARTING] = "restarting",
		[GROUP_SUCCEEDED] = "succeeded",
		[GROUP_FAILED] = "failed",
		[GROUP_STOPPED] = "stopped",
		[GROUP_EXEC_FAILED] = "exec-failed",
		[GROUP_RENDEZVOUS] = "rendezvous",
		[GROUP_FINISHING] = "finishing",
	};

	return (unsigned)s < CRUN_ARRAY_SIZE(names) ? names[s] : "?";
}

static void on_timer(uv_timer_t *t)
{
	agent_group_event(t->data, EV_TIMER, NULL, 0);
}

static void set_timer(struct agent *a, enum timer_phase phase, int64_t ms)
{
	a->timer_phase = phase;
	uv_timer_start(&a->timer, on_timer, ms > 0 ? (uint64_t)ms : 0, 0);
}

static void stop_timer(struct agent *a)
{
	a->timer_phase = TIMER_NONE;
	uv_timer_stop(&a->timer);
}

static const char *sig_name(int sig, char *buf, size_t len)
{
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev)
		snprintf(buf, len, "SIG%s", abbrev);
	else
		snprintf(buf, len, "signal %d", sig);
	return buf;
}

/* Sends sig to the process group of every started worker (only those not
 * yet reaped, unless all). A group that is gone (ESRCH) is fine. */
static void signal_groups(struct agent *a, int sig, bool all)
{
	for (int i = 0; i < a->nworkers; i++) {
		struct worker *w = a->workers[i];
		if (!w->spawned || (!all && !w->running))
			continue;
		agent_kill(-w->pid, sig);
	}
}

static void close_pipes(struct agent *a)
{
	for (int i = 0; i < a->nworkers; i++) {
		struct worker *w = a->workers[i];
		if (!w->spawned)
			continue;
		for (int s = 0; s < 2; s++)
			agent_outpipe_close(&w->out[s]);
	}
}

static void finalize(struct agent *a, enum group_state state, int status)
{
	a->state = state;
	a->exit_status = status;
	stop_timer(a);
	agent_shutdown(a);
}

static void start_attempt(struct agent *a);
static void check_done(struct agent *a);

static bool rdzv(const struct agent *a)
{
	return a->spec->rdzv.enabled;
}

static bool exhausted(const struct agent *a)
{
	return a->rdzv.ended && !strcmp(a->rdzv.end_reason, "exhausted");
}

/* Joins the next round (rendezvous). */
static void join_round(struct agent *a)
{
	a->state = GROUP_RENDEZVOUS;
	agent_failures_clear(a);
	if (agent_rdzv_join(a) < 0) {
		crun_error("%s", a->rdzv.error_msg);
		finalize(a, GROUP_FAILED, 1);
	}
}

/* The attempt is over and the store ended its round: the next round, or
 * the end of the job when the restarts are exhausted. */
static void round_over(struct agent *a)
{
	if (exhausted(a) || a->gave_up) {
		agent_summary_report(a);
		finalize(a, GROUP_FAILED, 1);
		return;
	}
	join_round(a);
}

/* The exit barrier (rendezvous): every local worker exited 0. */
static void finishing(struct agent *a)
{
	a->state = GROUP_FINISHING;
	if (agent_rdzv_done(a) < 0) {
		crun_error("%s", a->rdzv.error_msg);
		finalize(a, GROUP_FAILED, 1);
	}
}

static void begin_stop(struct agent *a, enum stop_reason reason, int sig)
{
	a->state = GROUP_STOPPING;
	a->reason = reason;
	a->stop_signal = sig;
	if (a->running > 0) {
		signal_groups(a, reason == STOP_SIGNAL ? sig : SIGTERM, false);
		set_timer(a, TIMER_KILL, a->spec->shutdown_timeout_ms);
	}
	check_done(a);
}

static void restart(struct agent *a)
{
	const struct failure *f = &a->failures[0];
	char what[64];

	agent_describe_exit(what, sizeof(what), f->exit_code, f->term_signal);
	crun_warn("worker group failed: rank %d (local rank %d, pid %d) %s; restarting "
		  "(restart %d of %d)",
		  f->rank, f->local_rank, (int)f->pid, what, a->restart_count + 1,
		  a->spec->max_restarts);
	a->state = GROUP_RESTARTING;
	a->restart_count++;
	a->round = a->restart_count;
	agent_failures_clear(a);
	start_attempt(a);
}

static void attempt_over(struct agent *a)
{
	for (int i = 0; i < a->nworkers; i++) {
		agent_worker_detach(a->workers[i]);
		a->workers[i] = NULL;
	}
	a->nworkers = 0;
	stop_timer(a);

	switch (a->reason) {
	case STOP_DONE:
		if (!rdzv(a))
			finalize(a, GROUP_SUCCEEDED, 0);
		else if (a->rdzv.ended)
			round_over(a);
		else
			finishing(a);
		return;
	case STOP_ROUND:
		round_over(a);
		return;
	case STOP_LOST:
		finalize(a, GROUP_FAILED, 1);
		return;
	case STOP_FAILURE:
		if (rdzv(a)) {
			if (a->rdzv.ended || a->gave_up) {
				round_over(a);
				return;
			}
			/* The store ends the round for every node; wait. */
			a->state = GROUP_RESTARTING;
			return;
		}
		if (a->nfailures && !a->gave_up && a->restart_count < a->spec->max_restarts) {
			restart(a);
			return;
		}
		agent_summary_report(a);
		finalize(a, GROUP_FAILED, 1);
		return;
	case STOP_SIGNAL:
		finalize(a, GROUP_STOPPED, 128 + a->stop_signal);
		return;
	case STOP_EXEC:
		finalize(a, GROUP_EXEC_FAILED, a->exec_error == -ENOENT ? 127 : 126);
		return;
	case STOP_AGENT:
	case STOP_NONE:
		finalize(a, GROUP_FAILED, 1);
		return;
	}
}

/* The attempt ends once every worker is reaped and every pipe closed. */
static void check_done(struct agent *a)
{
	if (a->running > 0)
		return;
	if (!a->leftovers_killed) {
		/* Whatever the workers started in their groups goes with
		 * them; then the guard can forget the groups. */
		a->leftovers_killed = true;
		signal_groups(a, SIGKILL, true);
		for (int i = 0; i < a->nworkers; i++)
			if (a->workers[i]->spawned)
				agent_reaper_forget(&a->reaper, a->workers[i]->pid);
		if (a->open_pipes > 0)
			set_timer(a, TIMER_DRAIN,
				  a->spec->kill_timeout_ms < AGENT_DRAIN_MS
					  ? a->spec->kill_timeout_ms
					  : AGENT_DRAIN_MS);
	}
	if (a->open_pipes > 0)
		return;
	attempt_over(a);
}

/* -ENOENT: not found (127); these: found but cannot be executed (126). */
static bool is_exec_error(int err)
{
	switch (-err) {
	case ENOENT:
	case EACCES:
	case EPERM:
	case ENOEXEC:
	case EISDIR:
	case ENOTDIR:
	case ELOOP:
	case ENAMETOOLONG:
	case E2BIG:
	case ETXTBSY:
	case ELIBBAD:
		return true;
	default:
		return false;
	}
}

static void start_attempt(struct agent *a)
{
	const struct crun_agent_spec *spec = a->spec;

	a->state = GROUP_STARTING;
	a->reason = STOP_NONE;
	a->stop_signal = 0;
	a->leftovers_killed = false;
	a->gave_up = false;
	a->running = 0;
	a->open_pipes = 0;
	a->nworkers = 0;
	a->attempts++; /* workers of this attempt are numbered attempts - 1 */
	for (int lr = 0; lr < spec->nproc_per_node; lr++) {
		int err;
		struct worker *w = agent_worker_spawn(a, lr, &err);

		if (!w) {
			crun_error("cannot start worker local rank %d: %s", lr, strerror(ENOMEM));
			begin_stop(a, STOP_AGENT, 0);
			return;
		}
		a->workers[a->nworkers++] = w;
		if (w->spawned) {
			a->running++;
			a->open_pipes += 2;
			continue;
		}
		if (w->exec_failed && is_exec_error(err)) {
			crun_error("cannot execute '%s': %s", spec->argv[0], uv_strerror(err));
			a->exec_error = err;
			if (a->own_error_file) {
				char msg[512];
				snprintf(msg, sizeof(msg), "cannot execute '%s': %s", spec->argv[0],
					 uv_strerror(err));
				agent_error_file_write(a->own_error_file, NULL, 0, msg, msg,
						       err == -ENOENT ? 127 : 126);
			}
			begin_stop(a, STOP_EXEC, 0);
		} else {
			if (w->exec_failed)
				crun_error("cannot start worker rank %d: %s", w->rank,
					   uv_strerror(err));
			begin_stop(a, STOP_AGENT, 0);
		}
		return;
	}
	a->state = GROUP_RUNNING;
}

static void worker_exited(struct agent *a, struct worker *w)
{
	bool ok = !w->term_signal && !w->exit_code;

	a->running--;
	switch (a->state) {
	case GROUP_RUNNING:
		if (ok) {
			if (a->running == 0)
				begin_stop(a, STOP_DONE, 0);
			return;
		}
		if (agent_failure_add(a, w) < 0)
			crun_error("out of memory recording the failure of rank %d", w->rank);
		if (rdzv(a)) {
			char what[64], msg[512];

			/* Every node's agent hears this as the round's end. */
			agent_describe_exit(what, sizeof(what), w->exit_code, w->term_signal);
			snprintf(msg, sizeof(msg), "rank %d (local rank %d) on %s %s", w->rank,
				 w->local_rank, a->hostname, what);
			agent_rdzv_fail(a, msg);
		}
		begin_stop(a, STOP_FAILURE, 0);
		return;
	case GROUP_STOPPING:
		/* A worker that failed on its own while the others were being
		 * stopped is a failure too; one that died of our SIGTERM or
		 * SIGKILL is not. */
		if (a->reason == STOP_FAILURE && !ok && w->term_signal != SIGTERM &&
		    w->term_signal != SIGKILL)
			agent_failure_add(a, w);
		check_done(a);
		return;
	default:
		return;
	}
}

static void got_signal(struct agent *a, int sig)
{
	char name[32];

	switch (a->state) {
	case GROUP_RENDEZVOUS:
	case GROUP_RESTARTING:
	case GROUP_FINISHING:
		/* No worker runs (RESTARTING is a rest state only with
		 * rendezvous). */
		crun_info("got %s; stopping", sig_name(sig, name, sizeof(name)));
		finalize(a, GROUP_STOPPED, 128 + sig);
		return;
	case GROUP_RUNNING:
		crun_info("got %s; stopping the workers", sig_name(sig, name, sizeof(name)));
		begin_stop(a, STOP_SIGNAL, sig);
		return;
	case GROUP_STOPPING:
		if (a->running == 0) {
			/* Only output was being drained: stop waiting, and end
			 * with the signal instead of restarting or going on. */
			if (a->reason == STOP_DONE || a->reason == STOP_FAILURE ||
			    a->reason == STOP_ROUND) {
				crun_info("got %s; stopping", sig_name(sig, name, sizeof(name)));
				a->reason = STOP_SIGNAL;
				a->stop_signal = sig;
			}
			close_pipes(a);
			return;
		}
		if (a->reason != STOP_SIGNAL) {
			crun_info("got %s; stopping the workers",
				  sig_name(sig, name, sizeof(name)));
			a->reason = STOP_SIGNAL;
			a->stop_signal = sig;
			signal_groups(a, sig, false);
			return;
		}
		crun_info("got %s again; killing the workers", sig_name(sig, name, sizeof(name)));
		signal_groups(a, SIGKILL, false);
		set_timer(a, TIMER_STUCK, a->spec->kill_timeout_ms);
		return;
	default:
		return;
	}
}

static void timer_fired(struct agent *a)
{
	enum timer_phase phase = a->timer_phase;

	a->timer_phase = TIMER_NONE;
	switch (phase) {
	case TIMER_KILL:
		crun_warn("%d worker%s still running after the shutdown timeout (%lld ms); "
			  "sending SIGKILL",
			  a->running, a->running == 1 ? "" : "s",
			  (long long)a->spec->shutdown_timeout_ms);
		signal_groups(a, SIGKILL, false);
		set_timer(a, TIMER_STUCK, a->spec->kill_timeout_ms);
		return;
	case TIMER_STUCK:
		for (int i = 0; i < a->nworkers; i++) {
			struct worker *w = a->workers[i];
			if (!w->running)
				continue;
			crun_error("rank %d (local rank %d, pid %d) did not exit %lld ms after "
				   "SIGKILL (stuck in the kernel?); giving up on it",
				   w->rank, w->local_rank, (int)w->pid,
				   (long long)a->spec->kill_timeout_ms);
			agent_worker_abandon(w);
			a->running--;
		}
		a->gave_up = true;
		close_pipes(a);
		check_done(a);
		return;
	case TIMER_DRAIN:
		for (int i = 0; i < a->nworkers; i++) {
			struct worker *w = a->workers[i];
			if (w->spawned && (w->out[0].open || w->out[1].open))
				crun_warn(
					"output of rank %d is still open in a process outside its "
					"process group; not waiting for it",
					w->rank);
		}
		close_pipes(a);
		return;
	case TIMER_NONE:
		return;
	}
}

/* No worker runs and none will: the rendezvous states between attempts. */
static bool between_attempts(const struct agent *a)
{
	return a->state == GROUP_RENDEZVOUS || a->state == GROUP_RESTARTING ||
	       a->state == GROUP_FINISHING;
}

/* Whether the attempt being stopped still leads to another round. */
static bool stop_goes_on(const struct agent *a)
{
	return a->reason == STOP_FAILURE || a->reason == STOP_DONE || a->reason == STOP_ROUND;
}

/* The store ended the assigned round (a->rdzv.end_*): one line says why,
 * on every node alike. */
static void round_ended(struct agent *a)
{
	const char *why = a->rdzv.end_msg ? a->rdzv.end_msg : "?";
	long long round = (long long)a->rdzv.asg.round;

	if (a->state == GROUP_STOPPING && !stop_goes_on(a))
		return; /* ending anyway */
	if (exhausted(a))
		crun_error("round %lld ended: %s", round, why);
	else if (!strcmp(a->rdzv.end_reason, "join"))
		crun_warn("round %lld ended: %s; restarting (a joining node is not counted as "
			  "a restart)",
			  round, why);
	else
		crun_warn("round %lld ended: %s; restarting (restart %lld of %d)", round, why,
			  (long long)a->rdzv.end_count, a->spec->max_restarts);
	switch (a->state) {
	case GROUP_RUNNING:
		begin_stop(a, STOP_ROUND, 0);
		return;
	case GROUP_RENDEZVOUS:
	case GROUP_RESTARTING:
	case GROUP_FINISHING:
		round_over(a);
		return;
	default:
		/* STOPPING: attempt_over sees a->rdzv.ended. */
		return;
	}
}

/* The rendezvous failed or the store is lost: the job cannot go on. */
static void rdzv_failed(struct agent *a, bool lost)
{
	if (a->state == GROUP_STOPPING && (!stop_goes_on(a) || exhausted(a)))
		return; /* the job ends anyway, for its own reason */
	if (a->rdzv.error_msg)
		crun_error("%s", a->rdzv.error_msg);
	switch (a->state) {
	case GROUP_RUNNING:
		begin_stop(a, lost ? STOP_LOST : STOP_AGENT, 0);
		return;
	case GROUP_STOPPING:
		a->reason = lost ? STOP_LOST : STOP_AGENT;
		return;
	default:
		if (between_attempts(a))
			finalize(a, GROUP_FAILED, 1);
		return;
	}
}

void agent_group_event(struct agent *a, enum group_event ev, struct worker *w, int arg)
{
	if (crun_log_enabled(CRUN_LOG_DEBUG))
		crun_debug("group %s: event %d rank %d arg %d", agent_group_state_name(a->state),
			   (int)ev, w ? w->rank : -1, arg);
	switch (ev) {
	case EV_START:
		if (a->state == GROUP_INIT) {
			if (rdzv(a))
				join_round(a);
			else
				start_attempt(a);
		}
		return;
	case EV_WORKER_EXITED:
		worker_exited(a, w);
		return;
	case EV_PIPE_CLOSED:
		if (!w->spawned)
			return;
		a->open_pipes--;
		if (a->state == GROUP_STOPPING)
			check_done(a);
		return;
	case EV_SIGNAL:
		got_signal(a, arg);
		return;
	case EV_TIMER:
		if (a->state == GROUP_STOPPING)
			timer_fired(a);
		return;
	case EV_RDZV_READY:
		if (a->state == GROUP_RENDEZVOUS)
			start_attempt(a);
		return;
	case EV_RDZV_ENDED:
		round_ended(a);
		return;
	case EV_RDZV_DONE:
		if (a->state == GROUP_FINISHING)
			finalize(a, GROUP_SUCCEEDED, 0);
		return;
	case EV_RDZV_ERROR:
		rdzv_failed(a, false);
		return;
	case EV_STORE_LOST:
		rdzv_failed(a, true);
		return;
	}
}

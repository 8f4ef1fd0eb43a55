/* The worker group's state machine: the table below is the whole
 * behaviour, and `table` further down is the same table as code, one row
 * per (state, event) with the function that carries it out. A pair that
 * is not in it cannot happen and is refused.
 *
 *   state      event                  actions                     next
 *   INIT       start                  spawn every worker          STARTING
 *   INIT       start (rendezvous)     join a round                RENDEZVOUS
 *   STARTING   spawned                -                           RUNNING
 *   STARTING   spawn failed           stop (exec or agent error)  STOPPING
 *   RUNNING    worker exit 0          last one: stop, done        RUNNING/STOPPING
 *   RUNNING    worker exit !0/signal  record; tell the store      STOPPING
 *                                     (rendezvous; not to restart
 *                                     when the verdict says so);
 *                                     SIGTERM the rest; arm the
 *                                     kill timer
 *   RUNNING    pipe closed            -                           RUNNING
 *   RUNNING    signal N               forward N; kill timer       STOPPING
 *   RUNNING    round ended            say why; SIGTERM all        STOPPING
 *   RUNNING    rdzv error             say it; SIGTERM all         STOPPING
 *   RUNNING    store lost             say it; SIGKILL all now     STOPPING
 *   RUNNING    worker hung            record it; tell the store;  STOPPING
 *                                     take its stack (nothing is
 *                                     signalled until it is taken)
 *   STOPPING   worker exit            record it if it failed on   STOPPING, or the
 *                                     its own; when none is left: attempt is over
 *                                     SIGKILL the groups (what
 *                                     workers left behind), wait
 *                                     for pipes (drain timer)
 *   STOPPING   pipe closed            when every worker is reaped STOPPING, or the
 *                                     and every pipe closed: the  attempt is over
 *                                     attempt is over
 *   STOPPING   signal N (first)       forward N                   STOPPING
 *   STOPPING   signal N (again)       SIGKILL now; stuck timer    STOPPING
 *   STOPPING   signal, none running   close the pipes; end with   STOPPING
 *                                     the signal
 *   STOPPING   timer: kill            SIGKILL; arm the stuck one  STOPPING
 *   STOPPING   timer: stuck           report and abandon the      STOPPING, or the
 *                                     unreaped; close the pipes   attempt is over
 *   STOPPING   timer: drain           close the pipes still open  STOPPING
 *   STOPPING   round ended            note it (the attempt's end  STOPPING
 *                                     joins the next round)
 *   STOPPING   rdzv error             say it; the job ends        STOPPING
 *   STOPPING   store lost             say it; SIGKILL all now;    STOPPING
 *                                     the attempt's end rejoins
 *   STOPPING   hang captured          kill the hung worker;       STOPPING
 *                                     SIGTERM the rest; kill timer
 *   RENDEZVOUS ready (the placement)  spawn every worker          STARTING
 *   FINISHING  barrier passed         -                           SUCCEEDED
 *   STARTING, RENDEZVOUS, RESTARTING, FINISHING (no worker runs; STARTING
 *   takes these only while the executor holds SPAWN_ALL back for the
 *   GPUs of the previous attempt's workers, and drops it):
 *              round ended            say why; join the next      RENDEZVOUS
 *              round ended exhausted  failure summary             FAILED
 *              rdzv error             say it                      FAILED
 *              store lost             say it; join again          RENDEZVOUS
 *                                     (FINISHING: FAILED)
 *                                     (STARTING plain: signal only)
 *              signal N               nothing to stop             STOPPED
 *   final      anything               refused
 *
 * When the attempt is over (every worker reaped, every pipe closed):
 *   every worker exited 0       SUCCEEDED; with rendezvous the exit
 *                               barrier (FINISHING), or the next round
 *                               when the store ended this one
 *   a failure, restarts left    count it; spawn again (STARTING); with
 *   (no worker abandoned, and   rendezvous the store decides: wait for
 *   the verdict of repeat.h     its end of the round (RESTARTING)
 *   allows it)
 *   a failure, none left        failure summary; FAILED (1)
 *   a signal N                  STOPPED (128+N)
 *   the command cannot run      EXEC_FAILED (127 not found, 126)
 *   the agent failed            FAILED (1)
 *   the store is lost           join a round again on a new connection
 *                               (rendezvous.c bounds it with the rejoin
 *                               deadline); FAILED when a worker would
 *                               not die
 *   the store ended the round   the next round, or the summary and FAILED
 *                               when it says the restarts are exhausted
 *                               or a worker would not die */
#include "agent/group_step.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>

/* One step in progress: the state being built and the actions so far. */
struct step {
	struct crun__group_core *g;
	const struct crun__group_event *ev;
	struct crun__group_facts f; /* a copy: abandoning changes running */
	struct crun__group_actions *out;
	bool overflow;
	bool recorded; /* RECORD_FAILURE in this step */
};

static void act(struct step *s, enum crun__group_action_kind kind, int arg)
{
	if (s->out->n == CRUN__GROUP_MAX_ACTIONS) {
		s->overflow = true;
		return;
	}
	s->out->a[s->out->n].kind = kind;
	s->out->a[s->out->n].arg = arg;
	s->out->n++;
}

static void say(struct step *s, enum crun__group_note note)
{
	act(s, CRUN__GACT_SAY, note);
}

static enum crun__group_state final_state(enum crun__group_end end)
{
	switch (end) {
	case CRUN__GEND_SUCCEEDED:
		return CRUN__GROUP_SUCCEEDED;
	case CRUN__GEND_STOPPED:
		return CRUN__GROUP_STOPPED;
	case CRUN__GEND_NOT_FOUND:
	case CRUN__GEND_NOT_EXECUTABLE:
		return CRUN__GROUP_EXEC_FAILED;
	case CRUN__GEND_FAILED:
	case CRUN__GEND_AGENT_ERROR:
	case CRUN__GEND_NONE:
		break;
	}
	return CRUN__GROUP_FAILED;
}

static void finish(struct step *s, enum crun__group_end end, int sig)
{
	s->g->state = final_state(end);
	s->g->end = end;
	if (end == CRUN__GEND_STOPPED)
		s->g->stop_signal = sig;
	act(s, CRUN__GACT_FINISH, end);
}

static void start_attempt(struct step *s)
{
	struct crun__group_core *g = s->g;

	g->state = CRUN__GROUP_STARTING;
	g->stop = CRUN__GSTOP_NONE;
	g->stop_signal = 0;
	g->leftovers_killed = false;
	g->gave_up = false;
	g->no_restart = CRUN__RESTART;
	g->capturing = false;
	act(s, CRUN__GACT_SPAWN_ALL, 0);
}

static void join_round(struct step *s)
{
	s->g->state = CRUN__GROUP_RENDEZVOUS;
	s->g->round_ended = false;
	s->g->exhausted = false;
	act(s, CRUN__GACT_CLEAR_FAILURES, 0);
	act(s, CRUN__GACT_JOIN, 0);
}

/* The attempt is over and the store ended its round: the next round, or
 * the end of the job when the restarts are exhausted. */
static void round_over(struct step *s)
{
	if (s->g->exhausted || s->g->gave_up) {
		act(s, CRUN__GACT_SUMMARY, 0);
		finish(s, CRUN__GEND_FAILED, 0);
		return;
	}
	join_round(s);
}

static void attempt_over(struct step *s)
{
	struct crun__group_core *g = s->g;
	int failures = s->f.failures + (s->recorded ? 1 : 0);

	act(s, CRUN__GACT_RELEASE_WORKERS, 0);
	act(s, CRUN__GACT_DISARM_TIMER, 0);
	switch (g->stop) {
	case CRUN__GSTOP_DONE:
		if (!s->f.rdzv) {
			finish(s, CRUN__GEND_SUCCEEDED, 0);
		} else if (g->round_ended) {
			round_over(s);
		} else {
			g->state = CRUN__GROUP_FINISHING;
			act(s, CRUN__GACT_EXIT_BARRIER, 0);
		}
		return;
	case CRUN__GSTOP_ROUND:
		round_over(s);
		return;
	case CRUN__GSTOP_FAILURE:
		if (s->f.rdzv) {
			if (g->round_ended || g->gave_up)
				round_over(s);
			else
				g->state = CRUN__GROUP_RESTARTING; /* the store ends the round */
			return;
		}
		if (failures && !g->gave_up && !g->no_restart &&
		    g->place.restart_count < s->f.max_restarts) {
			g->place.restart_count++;
			g->place.round = g->place.restart_count;
			say(s, CRUN__GNOTE_RESTARTING);
			act(s, CRUN__GACT_CLEAR_FAILURES, 0);
			start_attempt(s);
			return;
		}
		act(s, CRUN__GACT_SUMMARY, 0);
		finish(s, CRUN__GEND_FAILED, 0);
		return;
	case CRUN__GSTOP_SIGNAL:
		finish(s, CRUN__GEND_STOPPED, g->stop_signal);
		return;
	case CRUN__GSTOP_NOT_FOUND:
		finish(s, CRUN__GEND_NOT_FOUND, 0);
		return;
	case CRUN__GSTOP_NOT_EXECUTABLE:
		finish(s, CRUN__GEND_NOT_EXECUTABLE, 0);
		return;
	case CRUN__GSTOP_LOST:
		/* Rejoin on a new connection (the rendezvous bounds it). */
		if (g->gave_up) {
			act(s, CRUN__GACT_SUMMARY, 0);
			finish(s, CRUN__GEND_FAILED, 0);
		} else {
			join_round(s);
		}
		return;
	case CRUN__GSTOP_AGENT:
	case CRUN__GSTOP_NONE:
		finish(s, CRUN__GEND_AGENT_ERROR, 0);
		return;
	}
}

/* The attempt ends once every worker is reaped and every pipe closed. */
static void check_done(struct step *s)
{
	struct crun__group_core *g = s->g;

	if (s->f.running > 0)
		return;
	if (!g->leftovers_killed) {
		g->leftovers_killed = true;
		act(s, CRUN__GACT_KILL_LEFTOVERS, 0);
		if (s->f.open_pipes > 0)
			act(s, CRUN__GACT_ARM_TIMER, CRUN__GTIMER_DRAIN);
	}
	if (s->f.open_pipes > 0)
		return;
	attempt_over(s);
}

/* Workers of a node that lost the store are SIGKILLed at once: the other
 * nodes go on without them. */
/* SIGKILL every worker now; a stack still being taken no longer holds
 * anything back (its HANG_CAPTURED changes nothing). */
static void kill_now(struct step *s)
{
	s->g->capturing = false;
	act(s, CRUN__GACT_SIGNAL_RUNNING, SIGKILL);
	act(s, CRUN__GACT_ARM_TIMER, CRUN__GTIMER_STUCK);
}

static void begin_stop(struct step *s, enum crun__group_stop stop, int sig)
{
	s->g->state = CRUN__GROUP_STOPPING;
	s->g->stop = stop;
	s->g->stop_signal = sig;
	if (s->f.running > 0 && stop == CRUN__GSTOP_LOST) {
		kill_now(s);
	} else if (s->f.running > 0) {
		act(s, CRUN__GACT_SIGNAL_RUNNING, stop == CRUN__GSTOP_SIGNAL ? sig : SIGTERM);
		act(s, CRUN__GACT_ARM_TIMER, CRUN__GTIMER_KILL);
	}
	check_done(s);
}

/* Whether the attempt being stopped still leads to another round. */
static bool stop_goes_on(const struct crun__group_core *g)
{
	return g->stop == CRUN__GSTOP_FAILURE || g->stop == CRUN__GSTOP_DONE ||
	       g->stop == CRUN__GSTOP_ROUND;
}

static bool worker_ok(const struct crun__group_event *ev)
{
	return !ev->term_signal && !ev->exit_code;
}

/* The first failure of the attempt decides whether it is restarted. */
static void record_failure(struct step *s)
{
	if (!s->f.failures && !s->recorded)
		s->g->no_restart = s->f.verdict;
	act(s, CRUN__GACT_RECORD_FAILURE, s->ev->worker);
	s->recorded = true;
}

static void note_round_end(struct step *s)
{
	s->g->round_ended = true;
	s->g->exhausted = s->ev->exhausted;
}

/* ---- the rows ---- */

typedef void row_fn(struct step *s);

static void start(struct step *s)
{
	if (s->f.rdzv)
		join_round(s);
	else
		start_attempt(s);
}

static void spawned(struct step *s)
{
	s->g->state = CRUN__GROUP_RUNNING;
}

static void spawn_failed(struct step *s)
{
	switch (s->ev->exec_status) {
	case 127:
		begin_stop(s, CRUN__GSTOP_NOT_FOUND, 0);
		return;
	case 126:
		begin_stop(s, CRUN__GSTOP_NOT_EXECUTABLE, 0);
		return;
	default:
		begin_stop(s, CRUN__GSTOP_AGENT, 0);
		return;
	}
}

static void nothing(struct step *s)
{
	(void)s;
}

static void running_exit(struct step *s)
{
	if (worker_ok(s->ev)) {
		if (s->f.running == 0)
			begin_stop(s, CRUN__GSTOP_DONE, 0);
		return;
	}
	record_failure(s);
	if (s->f.rdzv)
		act(s, CRUN__GACT_TELL_STORE, s->ev->worker); /* every node hears it */
	begin_stop(s, CRUN__GSTOP_FAILURE, 0);
}

static void running_signal(struct step *s)
{
	say(s, CRUN__GNOTE_STOPPING_WORKERS);
	begin_stop(s, CRUN__GSTOP_SIGNAL, s->ev->signal);
}

static void running_round_ended(struct step *s)
{
	note_round_end(s);
	say(s, CRUN__GNOTE_ROUND_ENDED);
	begin_stop(s, CRUN__GSTOP_ROUND, 0);
}

static void running_rdzv_error(struct step *s)
{
	say(s, CRUN__GNOTE_RDZV_ERROR);
	begin_stop(s, CRUN__GSTOP_AGENT, 0);
}

static void running_store_lost(struct step *s)
{
	say(s, CRUN__GNOTE_RDZV_ERROR);
	begin_stop(s, CRUN__GSTOP_LOST, 0);
}

/* The hung worker is the root cause: recorded before anything it brings
 * down. It is stopped only once its stack has been taken. */
static void running_hung(struct step *s)
{
	record_failure(s);
	if (s->f.rdzv)
		act(s, CRUN__GACT_TELL_STORE, s->ev->worker);
	s->g->state = CRUN__GROUP_STOPPING;
	s->g->stop = CRUN__GSTOP_FAILURE;
	s->g->capturing = true;
	s->g->hung_worker = s->ev->worker;
	act(s, CRUN__GACT_CAPTURE_STACK, s->ev->worker);
}

static void stopping_captured(struct step *s)
{
	struct crun__group_core *g = s->g;

	if (!g->capturing)
		return;
	g->capturing = false;
	if (s->f.running == 0)
		return;
	act(s, CRUN__GACT_KILL_HUNG, g->hung_worker);
	if (g->stop == CRUN__GSTOP_FAILURE)
		act(s, CRUN__GACT_SIGNAL_RUNNING, SIGTERM);
	act(s, CRUN__GACT_ARM_TIMER, CRUN__GTIMER_KILL);
}

/* A worker that failed on its own while the others were being stopped is
 * a failure too; one that died of our SIGTERM or SIGKILL is not. */
static void stopping_exit(struct step *s)
{
	const struct crun__group_event *ev = s->ev;

	if (s->g->stop == CRUN__GSTOP_FAILURE && !worker_ok(ev) && ev->term_signal != SIGTERM &&
	    ev->term_signal != SIGKILL)
		record_failure(s);
	check_done(s);
}

static void stopping_signal(struct step *s)
{
	struct crun__group_core *g = s->g;

	if (s->f.running == 0) {
		/* Only output was being drained: stop waiting, and end with
		 * the signal instead of restarting or going on. */
		if (stop_goes_on(g)) {
			say(s, CRUN__GNOTE_STOPPING);
			g->stop = CRUN__GSTOP_SIGNAL;
			g->stop_signal = s->ev->signal;
		}
		act(s, CRUN__GACT_CLOSE_PIPES, 0);
		return;
	}
	if (g->stop != CRUN__GSTOP_SIGNAL) {
		say(s, CRUN__GNOTE_STOPPING_WORKERS);
		g->stop = CRUN__GSTOP_SIGNAL;
		g->stop_signal = s->ev->signal;
		act(s, CRUN__GACT_SIGNAL_RUNNING, s->ev->signal);
		return;
	}
	say(s, CRUN__GNOTE_KILLING);
	kill_now(s);
}

static void stopping_timer_kill(struct step *s)
{
	say(s, CRUN__GNOTE_SHUTDOWN_TIMEOUT);
	act(s, CRUN__GACT_SIGNAL_RUNNING, SIGKILL);
	act(s, CRUN__GACT_ARM_TIMER, CRUN__GTIMER_STUCK);
}

static void stopping_timer_stuck(struct step *s)
{
	act(s, CRUN__GACT_ABANDON_UNREAPED, 0);
	s->f.running = 0;
	s->g->gave_up = true;
	act(s, CRUN__GACT_CLOSE_PIPES, 0);
	check_done(s);
}

static void stopping_timer_drain(struct step *s)
{
	say(s, CRUN__GNOTE_OPEN_PIPES);
	act(s, CRUN__GACT_CLOSE_PIPES, 0);
}

static void stopping_round_ended(struct step *s)
{
	note_round_end(s);
	if (stop_goes_on(s->g))
		say(s, CRUN__GNOTE_ROUND_ENDED); /* the attempt's end sees it */
}

static void stopping_rdzv_failed(struct step *s, enum crun__group_stop stop)
{
	if (!stop_goes_on(s->g) || s->g->exhausted)
		return; /* the job ends anyway, for its own reason */
	say(s, CRUN__GNOTE_RDZV_ERROR);
	s->g->stop = stop;
}

static void stopping_rdzv_error(struct step *s)
{
	stopping_rdzv_failed(s, CRUN__GSTOP_AGENT);
}

static void stopping_store_lost(struct step *s)
{
	bool goes_on = stop_goes_on(s->g) && !s->g->exhausted;

	stopping_rdzv_failed(s, CRUN__GSTOP_LOST);
	if (goes_on && s->f.running > 0)
		kill_now(s);
}

static void ready(struct step *s)
{
	s->g->place = s->ev->place;
	start_attempt(s);
}

/* STARTING (before the workers start), RENDEZVOUS, RESTARTING,
 * FINISHING: no worker runs. */
static void idle_signal(struct step *s)
{
	say(s, CRUN__GNOTE_STOPPING);
	finish(s, CRUN__GEND_STOPPED, s->ev->signal);
}

static void idle_round_ended(struct step *s)
{
	note_round_end(s);
	say(s, CRUN__GNOTE_ROUND_ENDED);
	round_over(s);
}

static void idle_rdzv_failed(struct step *s)
{
	say(s, CRUN__GNOTE_RDZV_ERROR);
	finish(s, CRUN__GEND_AGENT_ERROR, 0);
}

/* STARTING, RESTARTING, RENDEZVOUS: nothing runs; join again on a new
 * connection. */
static void idle_store_lost(struct step *s)
{
	say(s, CRUN__GNOTE_RDZV_ERROR);
	join_round(s);
}

static void barrier_passed(struct step *s)
{
	finish(s, CRUN__GEND_SUCCEEDED, 0);
}

#define S(x) CRUN__GROUP_##x
#define E(x) CRUN__GEV_##x

/* The table: a (state, event) pair not in it cannot happen. The final
 * states take no event. */
static const struct row {
	enum crun__group_state state;
	enum crun__group_event_kind event;
	row_fn *fn;
} table[] = {
	{S(INIT), E(START), start},

	{S(STARTING), E(SPAWNED), spawned},
	{S(STARTING), E(SPAWN_FAILED), spawn_failed},
	/* Before spawning (the executor waits for GPUs): nothing runs. */
	{S(STARTING), E(SIGNAL), idle_signal},
	{S(STARTING), E(ROUND_ENDED), idle_round_ended},
	{S(STARTING), E(RDZV_ERROR), idle_rdzv_failed},
	{S(STARTING), E(STORE_LOST), idle_store_lost},

	{S(RUNNING), E(WORKER_EXITED), running_exit},
	{S(RUNNING), E(PIPE_CLOSED), nothing},
	{S(RUNNING), E(SIGNAL), running_signal},
	{S(RUNNING), E(ROUND_ENDED), running_round_ended},
	{S(RUNNING), E(RDZV_ERROR), running_rdzv_error},
	{S(RUNNING), E(STORE_LOST), running_store_lost},
	{S(RUNNING), E(WORKER_HUNG), running_hung},

	{S(STOPPING), E(WORKER_EXITED), stopping_exit},
	{S(STOPPING), E(PIPE_CLOSED), check_done},
	{S(STOPPING), E(SIGNAL), stopping_signal},
	{S(STOPPING), E(TIMER_KILL), stopping_timer_kill},
	{S(STOPPING), E(TIMER_STUCK), stopping_timer_stuck},
	{S(STOPPING), E(TIMER_DRAIN), stopping_timer_drain},
	{S(STOPPING), E(ROUND_ENDED), stopping_round_ended},
	{S(STOPPING), E(RDZV_ERROR), stopping_rdzv_error},
	{S(STOPPING), E(STORE_LOST), stopping_store_lost},
	{S(STOPPING), E(HANG_CAPTURED), stopping_captured},

	{S(RESTARTING), E(SIGNAL), idle_signal},
	{S(RESTARTING), E(ROUND_ENDED), idle_round_ended},
	{S(RESTARTING), E(RDZV_ERROR), idle_rdzv_failed},
	{S(RESTARTING), E(STORE_LOST), idle_store_lost},

	{S(RENDEZVOUS), E(SIGNAL), idle_signal},
	{S(RENDEZVOUS), E(RDZV_READY), ready},
	{S(RENDEZVOUS), E(ROUND_ENDED), idle_round_ended},
	{S(RENDEZVOUS), E(RDZV_ERROR), idle_rdzv_failed},
	{S(RENDEZVOUS), E(STORE_LOST), idle_store_lost},

	{S(FINISHING), E(SIGNAL), idle_signal},
	{S(FINISHING), E(ROUND_ENDED), idle_round_ended},
	{S(FINISHING), E(BARRIER_PASSED), barrier_passed},
	{S(FINISHING), E(RDZV_ERROR), idle_rdzv_failed},
	{S(FINISHING), E(STORE_LOST), idle_rdzv_failed},
};

#undef S
#undef E

static row_fn *lookup(enum crun__group_state state, enum crun__group_event_kind event)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (table[i].state == state && table[i].event == event)
			return table[i].fn;
	return NULL;
}

/* Events and states that exist only with rendezvous. */
static bool needs_rdzv(const struct crun__group_core *g, enum crun__group_event_kind k)
{
	switch (g->state) {
	case CRUN__GROUP_RESTARTING:
	case CRUN__GROUP_RENDEZVOUS:
	case CRUN__GROUP_FINISHING:
		return true;
	default:
		break;
	}
	return k >= CRUN__GEV_RDZV_READY;
}

void crun__group_core_init(struct crun__group_core *g, const struct crun__placement *place)
{
	*g = (struct crun__group_core){.state = CRUN__GROUP_INIT, .place = *place};
	g->place.restart_count = 0;
	g->place.round = 0;
}

int crun__group_step(struct crun__group_core *g, const struct crun__group_event *ev,
		     const struct crun__group_facts *f, struct crun__group_actions *out)
{
	struct crun__group_core next = *g;
	struct step s = {.g = &next, .ev = ev, .f = *f, .out = out};
	row_fn *row = lookup(g->state, ev->kind);

	out->n = 0;
	if (!row || (needs_rdzv(g, ev->kind) && !f->rdzv))
		return -EPROTO;
	row(&s);
	if (s.overflow) {
		out->n = 0;
		return -EPROTO;
	}
	*g = next;
	return 0;
}

void crun__group_abort(struct crun__group_core *g, struct crun__group_actions *out)
{
	struct step s = {.g = g, .out = out};

	out->n = 0;
	if (crun__group_is_final(g->state))
		return;
	act(&s, CRUN__GACT_DISARM_TIMER, 0);
	act(&s, CRUN__GACT_KILL_LEFTOVERS, 0);
	act(&s, CRUN__GACT_CLOSE_PIPES, 0);
	g->state = CRUN__GROUP_FAILED;
	g->end = CRUN__GEND_AGENT_ERROR;
	act(&s, CRUN__GACT_FINISH, CRUN__GEND_AGENT_ERROR);
}

int crun__group_exit_status(const struct crun__group_core *g)
{
	switch (g->state) {
	case CRUN__GROUP_SUCCEEDED:
		return 0;
	case CRUN__GROUP_FAILED:
		return 1;
	case CRUN__GROUP_STOPPED:
		return 128 + g->stop_signal;
	case CRUN__GROUP_EXEC_FAILED:
		return g->end == CRUN__GEND_NOT_FOUND ? 127 : 126;
	default:
		return -1;
	}
}

int crun__group_exec_status(int err)
{
	switch (-err) {
	case ENOENT:
		return 127;
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
		return 126;
	default:
		return 0;
	}
}

bool crun__group_is_final(enum crun__group_state s)
{
	return s == CRUN__GROUP_SUCCEEDED || s == CRUN__GROUP_FAILED || s == CRUN__GROUP_STOPPED ||
	       s == CRUN__GROUP_EXEC_FAILED;
}

const char *crun__group_state_name(enum crun__group_state s)
{
	static const char *const names[] = {
		[CRUN__GROUP_INIT] = "init",
		[CRUN__GROUP_STARTING] = "starting",
		[CRUN__GROUP_RUNNING] = "running",
		[CRUN__GROUP_STOPPING] = "stopping",
		[CRUN__GROUP_RESTARTING] = "restarting",
		[CRUN__GROUP_RENDEZVOUS] = "rendezvous",
		[CRUN__GROUP_FINISHING] = "finishing",
		[CRUN__GROUP_SUCCEEDED] = "succeeded",
		[CRUN__GROUP_FAILED] = "failed",
		[CRUN__GROUP_STOPPED] = "stopped",
		[CRUN__GROUP_EXEC_FAILED] = "exec-failed",
	};

	return (unsigned)s < CRUN__GROUP_NSTATES ? names[s] : "?";
}

const char *crun__group_event_name(enum crun__group_event_kind k)
{
	static const char *const names[] = {
		[CRUN__GEV_START] = "start",
		[CRUN__GEV_SPAWNED] = "spawned",
		[CRUN__GEV_SPAWN_FAILED] = "spawn-failed",
		[CRUN__GEV_WORKER_EXITED] = "worker-exited",
		[CRUN__GEV_PIPE_CLOSED] = "pipe-closed",
		[CRUN__GEV_SIGNAL] = "signal",
		[CRUN__GEV_TIMER_KILL] = "timer-kill",
		[CRUN__GEV_TIMER_STUCK] = "timer-stuck",
		[CRUN__GEV_TIMER_DRAIN] = "timer-drain",
		[CRUN__GEV_WORKER_HUNG] = "worker-hung",
		[CRUN__GEV_HANG_CAPTURED] = "hang-captured",
		[CRUN__GEV_RDZV_READY] = "rdzv-ready",
		[CRUN__GEV_ROUND_ENDED] = "round-ended",
		[CRUN__GEV_BARRIER_PASSED] = "barrier-passed",
		[CRUN__GEV_RDZV_ERROR] = "rdzv-error",
		[CRUN__GEV_STORE_LOST] = "store-lost",
	};

	return (unsigned)k < CRUN__GROUP_NEVENTS ? names[k] : "?";
}

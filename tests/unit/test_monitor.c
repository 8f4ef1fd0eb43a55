/* Unit tests of the monitor (src/agent/monitor.c) and of the events
 * file's lines (src/agent/events.c), table-driven where the cases are
 * many: the members a new round brings and loses, the workers' states,
 * the counters, the observers, a NULL monitor, the restart cause of a
 * round's end, and the JSON of each kind of event. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "agent/events.h"
#include "agent/monitor.h"

#define T0 1796195983000ULL /* 2026-12-02T07:19:43.000Z */

/* What an observer saw. */
struct seen {
	int n;
	enum crun__mon_event_kind kind[64];
	char node[64][128];
	int64_t round[64];
	int exit_code[64];
	int term_signal[64];
	enum crun__mon_cause cause[64];
	char message[64][128];
};

static void record(void *arg, const struct crun__monitor *m, const struct crun__mon_event *ev)
{
	struct seen *s = arg;

	(void)m;
	if (s->n >= 64)
		return;
	s->kind[s->n] = ev->kind;
	snprintf(s->node[s->n], sizeof(s->node[0]), "%s", ev->node ? ev->node : "");
	s->round[s->n] = ev->round;
	s->exit_code[s->n] = ev->exit_code;
	s->term_signal[s->n] = ev->term_signal;
	s->cause[s->n] = ev->cause;
	snprintf(s->message[s->n], sizeof(s->message[0]), "%s", ev->message ? ev->message : "");
	s->n++;
}

static void members_of(const char *list, struct crun__mon_member *v, int *n)
{
	char copy[256], *save = NULL;

	*n = 0;
	snprintf(copy, sizeof(copy), "%s", list);
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		memset(&v[*n], 0, sizeof(v[0]));
		v[*n].group_rank = *n;
		snprintf(v[*n].node_id, sizeof(v[0].node_id), "%s:1", t);
		snprintf(v[*n].host, sizeof(v[0].host), "%s", t);
		v[*n].local_world_size = 2;
		(*n)++;
	}
}

/* ---- members: joined and left against the previous round ---- */

static const struct members_row {
	const char *what;
	const char *prev, *next;
	const char *joined, *left; /* in the order emitted, comma-separated */
} members_rows[] = {
	{"same nodes", "a,b", "a,b", "", ""},	 {"one joins", "a,b", "a,b,c", "c", ""},
	{"one leaves", "a,b,c", "a,c", "", "b"}, {"one replaced", "a,b", "a,c", "c", "b"},
	{"all new", "a", "b,c", "b,c", "a"},	 {"order changes only", "a,b,c", "c,a,b", "", ""},
	{"from none", "", "a,b", "a,b", ""},	 {"to none (no rendezvous)", "a,b", "", "", "a,b"},
};

static void join_names(const struct seen *s, int from, enum crun__mon_event_kind k, char *buf,
		       size_t len)
{
	buf[0] = '\0';
	for (int i = from; i < s->n; i++) {
		if (s->kind[i] != k)
			continue;
		if (buf[0])
			strncat(buf, ",", len - strlen(buf) - 1);
		strncat(buf, s->node[i], len - strlen(buf) - 1);
	}
}

static void test_members(void **state)
{
	(void)state;
	for (size_t r = 0; r < sizeof(members_rows) / sizeof(members_rows[0]); r++) {
		const struct members_row *row = &members_rows[r];
		struct crun__mon_member prev[8], next[8];
		int nprev, nnext, from;
		struct crun__monitor m;
		struct seen s = {0};
		char got[256];

		members_of(row->prev, prev, &nprev);
		members_of(row->next, next, &nnext);
		assert_int_equal(crun__monitor_init(&m, "run", "a", 2, 3, T0), 0);
		assert_int_equal(crun__monitor_observe(&m, record, &s), 0);
		crun__monitor_round_formed(&m, T0 + 10, 1, 0, nprev, 2 * nprev, 0, prev, nprev, T0);
		/* The first round this node is in has no diff. */
		assert_int_equal(s.n, 1);
		assert_int_equal(s.kind[0], CRUN_MON_ROUND_FORMED);
		from = s.n;
		crun__monitor_round_formed(&m, T0 + 20, 2, 0, nnext, 2 * nnext, 1, next, nnext,
					   T0 + 15);
		join_names(&s, from, CRUN_MON_MEMBER_JOINED, got, sizeof(got));
		if (strcmp(got, row->joined))
			fail_msg("%s: joined '%s', want '%s'", row->what, got, row->joined);
		join_names(&s, from, CRUN_MON_MEMBER_LEFT, got, sizeof(got));
		if (strcmp(got, row->left))
			fail_msg("%s: left '%s', want '%s'", row->what, got, row->left);
		/* ROUND_FORMED comes last, after the members' events. */
		assert_int_equal(s.kind[s.n - 1], CRUN_MON_ROUND_FORMED);
		assert_int_equal(s.round[s.n - 1], 2);
		assert_int_equal(m.nmembers, nnext);
		assert_int_equal(m.rounds, 2);
		assert_true(m.last_round_seconds > 0.004 && m.last_round_seconds < 0.006);
		crun__monitor_finish(&m);
	}
}

/* ---- workers: the state each call leaves ---- */

enum call { STARTED, EXITED, HUNG, BEAT, PACE, STRAGGLER };

static const struct worker_row {
	const char *what;
	enum call calls[4];
	int ncalls;
	int exit_code, term_signal; /* for EXITED */
	enum crun__mon_worker_state want;
	int want_exit_code, want_signal;
	int64_t want_step;
	enum crun__mon_event_kind last_event; /* CRUN_MON_NEVENTS: none */
} worker_rows[] = {
	{"never started", {BEAT}, 0, 0, 0, CRUN_MON_W_NONE, -1, 0, -1, CRUN_MON_NEVENTS},
	{"running", {STARTED}, 1, 0, 0, CRUN_MON_W_RUNNING, -1, 0, -1, CRUN_MON_WORKER_STARTED},
	{"beats a step",
	 {STARTED, BEAT},
	 2,
	 0,
	 0,
	 CRUN_MON_W_RUNNING,
	 -1,
	 0,
	 7,
	 CRUN_MON_WORKER_STARTED},
	{"exit 0",
	 {STARTED, EXITED},
	 2,
	 0,
	 0,
	 CRUN_MON_W_SUCCEEDED,
	 0,
	 0,
	 -1,
	 CRUN_MON_WORKER_EXITED},
	{"exit 3", {STARTED, EXITED}, 2, 3, 0, CRUN_MON_W_FAILED, 3, 0, -1, CRUN_MON_WORKER_EXITED},
	{"killed",
	 {STARTED, EXITED},
	 2,
	 0,
	 9,
	 CRUN_MON_W_FAILED,
	 -1,
	 9,
	 -1,
	 CRUN_MON_WORKER_EXITED},
	{"hung", {STARTED, BEAT, HUNG}, 3, 0, 0, CRUN_MON_W_HUNG, -1, 0, 7, CRUN_MON_WORKER_HUNG},
	{"hung then killed",
	 {STARTED, HUNG, EXITED},
	 3,
	 0,
	 9,
	 CRUN_MON_W_HUNG,
	 -1,
	 9,
	 -1,
	 CRUN_MON_WORKER_EXITED},
	{"pace, no event",
	 {STARTED, PACE},
	 2,
	 0,
	 0,
	 CRUN_MON_W_RUNNING,
	 -1,
	 0,
	 -1,
	 CRUN_MON_WORKER_STARTED},
	{"straggler named",
	 {STARTED, BEAT, STRAGGLER},
	 3,
	 0,
	 0,
	 CRUN_MON_W_RUNNING,
	 -1,
	 0,
	 7,
	 CRUN_MON_STRAGGLER},
	{"restarted: fresh",
	 {STARTED, EXITED, STARTED},
	 3,
	 1,
	 0,
	 CRUN_MON_W_RUNNING,
	 -1,
	 0,
	 -1,
	 CRUN_MON_WORKER_STARTED},
};

static void test_workers(void **state)
{
	(void)state;
	for (size_t r = 0; r < sizeof(worker_rows) / sizeof(worker_rows[0]); r++) {
		const struct worker_row *row = &worker_rows[r];
		struct crun__monitor m;
		struct seen s = {0};
		const struct crun__mon_worker *w;

		assert_int_equal(crun__monitor_init(&m, "run", "a", 2, 3, T0), 0);
		crun__monitor_observe(&m, record, &s);
		for (int i = 0; i < row->ncalls; i++) {
			uint64_t t = T0 + 100 * (uint64_t)(i + 1);

			switch (row->calls[i]) {
			case STARTED:
				crun__monitor_worker_started(&m, t, 1, 5, 4242);
				break;
			case EXITED:
				crun__monitor_worker_exited(&m, t, 1, row->exit_code,
							    row->term_signal);
				break;
			case HUNG:
				crun__monitor_worker_hung(&m, t, 1, "no heartbeat for 3 s");
				break;
			case BEAT:
				crun__monitor_worker_beat(&m, t, 1, 7);
				break;
			case PACE:
				crun__monitor_worker_pace(&m, t, 1, 0.5, 1.1, false);
				break;
			case STRAGGLER:
				crun__monitor_worker_pace(&m, t, 1, 0.9, 2.5, true);
				break;
			}
		}
		w = &m.workers[1];
		if (w->state != row->want)
			fail_msg("%s: state %s, want %s", row->what,
				 crun__mon_worker_state_name(w->state),
				 crun__mon_worker_state_name(row->want));
		assert_int_equal(w->exit_code, row->want_exit_code);
		assert_int_equal(w->term_signal, row->want_signal);
		assert_int_equal(w->step, row->want_step);
		assert_int_equal(w->local_rank, 1);
		if (row->last_event == CRUN_MON_NEVENTS)
			assert_int_equal(s.n, 0);
		else
			assert_int_equal(s.kind[s.n - 1], row->last_event);
		/* An exit is counted under the state the worker ended in. */
		if (row->last_event == CRUN_MON_WORKER_EXITED && m.worker_exits[row->want] != 1)
			fail_msg("%s: %s exits %llu, want 1", row->what,
				 crun__mon_worker_state_name(row->want),
				 (unsigned long long)m.worker_exits[row->want]);
		/* The other worker is untouched. */
		assert_int_equal(m.workers[0].state, CRUN_MON_W_NONE);
		assert_int_equal(m.workers[0].rank, -1);
		crun__monitor_finish(&m);
	}
}

static void test_worker_fields(void **state)
{
	struct crun__monitor m;

	(void)state;
	assert_int_equal(crun__monitor_init(&m, "run", "a", 2, 3, T0), 0);
	crun__monitor_worker_gpu(&m, 0, 3);
	crun__monitor_worker_started(&m, T0 + 1, 0, 4, 100);
	crun__monitor_worker_beat(&m, T0 + 2, 0, 11);
	crun__monitor_worker_beat(&m, T0 + 3, 0, -1); /* a beat without a step */
	crun__monitor_worker_pace(&m, T0 + 4, 0, 0.25, 1.2, false);
	assert_int_equal(m.workers[0].rank, 4);
	assert_int_equal(m.workers[0].pid, 100);
	assert_int_equal(m.workers[0].started_ms, T0 + 1);
	assert_int_equal(m.workers[0].last_beat_ms, T0 + 3);
	assert_int_equal(m.workers[0].step, 11);
	assert_true(m.workers[0].step_s == 0.25);
	assert_true(m.workers[0].straggler_ratio == 1.2);
	/* The GPU stays across attempts and rounds. */
	crun__monitor_worker_started(&m, T0 + 5, 0, 4, 101);
	crun__monitor_round_formed(&m, T0 + 6, 3, 0, 1, 2, 1, NULL, 0, 0);
	assert_int_equal(m.workers[0].gpu, 3);
	assert_int_equal(m.workers[0].state, CRUN_MON_W_NONE);
	assert_int_equal(m.workers[1].gpu, -1);
	/* Out of range: nothing. */
	crun__monitor_worker_started(&m, T0, 2, 9, 1);
	crun__monitor_worker_started(&m, T0, -1, 9, 1);
	crun__monitor_worker_gpu(&m, 5, 1);
	crun__monitor_finish(&m);
	assert_null(m.workers);
}

/* ---- counters ---- */

static void test_counters(void **state)
{
	struct crun__monitor m;
	struct crun__mon_gpu gpus[2] = {{.index = 0}, {.index = 1}};

	(void)state;
	assert_int_equal(crun__monitor_init(&m, "run", "a", 3, 2, T0), 0);
	assert_int_equal(m.exit_status, -1);
	assert_string_equal(m.group_state, "init");
	crun__monitor_job_started(&m, T0);
	crun__monitor_group_state(&m, "running");
	assert_string_equal(m.group_state, "running");
	crun__monitor_round_formed(&m, T0 + 2000, 0, 0, 1, 3, 0, NULL, 0, T0);
	for (int lr = 0; lr < 3; lr++)
		crun__monitor_worker_started(&m, T0 + 2100, lr, lr, 10 + lr);
	crun__monitor_worker_exited(&m, T0 + 3000, 0, 1, 0);
	crun__monitor_worker_exited(&m, T0 + 3000, 1, 0, 15);
	crun__monitor_worker_exited(&m, T0 + 3000, 2, 0, 0);
	crun__monitor_failure(&m, T0 + 3000, "rank 0 (local_rank 0) on a exited with code 1");
	crun__monitor_restart(&m, T0 + 3001, CRUN_MON_CAUSE_WORKER_FAILED, 1, -1);
	crun__monitor_restart(&m, T0 + 4000, CRUN_MON_CAUSE_NODE_JOINED, 1, -1);
	crun__monitor_restart(&m, T0 + 5000, CRUN_MON_CAUSE_WORKER_FAILED, 2, -1);
	crun__monitor_restart(&m, T0 + 5000, CRUN_MON_NCAUSES, 3, -1); /* refused */
	crun__monitor_round_formed(&m, T0 + 6000, 1, 0, 1, 3, 2, NULL, 0, T0 + 5000);
	crun__monitor_gpu_wait(&m, T0 + 6000, 1.5, "2 GPUs freed");
	crun__monitor_gpu_wait(&m, T0 + 6000, 0.5, NULL);
	assert_int_equal(crun__monitor_set_gpus(&m, gpus, 2), 0);
	assert_int_equal(m.ngpus, 2);
	assert_int_equal(crun__monitor_set_gpus(&m, NULL, 0), 0);
	assert_int_equal(m.ngpus, 0);
	assert_null(m.gpus);
	crun__monitor_job_finished(&m, T0 + 7000, 1, "failed");

	assert_int_equal(m.events[CRUN_MON_JOB_STARTED], 1);
	assert_int_equal(m.events[CRUN_MON_ROUND_FORMED], 2);
	assert_int_equal(m.events[CRUN_MON_WORKER_STARTED], 3);
	assert_int_equal(m.events[CRUN_MON_WORKER_EXITED], 3);
	assert_int_equal(m.events[CRUN_MON_RESTART], 3);
	assert_int_equal(m.events[CRUN_MON_GPU_WAIT], 2);
	assert_int_equal(m.events[CRUN_MON_JOB_FINISHED], 1);
	assert_int_equal(m.restarts[CRUN_MON_CAUSE_WORKER_FAILED], 2);
	assert_int_equal(m.restarts[CRUN_MON_CAUSE_NODE_JOINED], 1);
	assert_int_equal(m.restarts[CRUN_MON_CAUSE_STORE_LOST], 0);
	assert_int_equal(m.restart_count, 2);
	assert_int_equal(m.worker_exits[CRUN_MON_W_FAILED], 2);
	assert_int_equal(m.worker_exits[CRUN_MON_W_SUCCEEDED], 1);
	assert_int_equal(m.rounds, 2);
	assert_true(m.last_round_seconds == 1.0);
	assert_true(m.rounds_seconds_sum == 3.0);
	assert_true(m.gpu_wait_seconds_sum == 2.0);
	assert_string_equal(m.last_failure, "rank 0 (local_rank 0) on a exited with code 1");
	assert_int_equal(m.last_failure_ms, T0 + 3000);
	assert_int_equal(m.exit_status, 1);
	crun__monitor_finish(&m);
}

/* ---- the store: one loss per outage ---- */

static void test_store(void **state)
{
	struct crun__monitor m;
	struct seen s = {0};

	(void)state;
	assert_int_equal(crun__monitor_init(&m, "run", "a", 1, 3, T0), 0);
	crun__monitor_observe(&m, record, &s);
	crun__monitor_store_recovered(&m, T0); /* not lost: nothing */
	crun__monitor_store_lost(&m, T0 + 1, "connection closed");
	crun__monitor_store_lost(&m, T0 + 2, "again, while resuming");
	assert_true(m.store_lost);
	crun__monitor_store_recovered(&m, T0 + 3);
	crun__monitor_store_recovered(&m, T0 + 4);
	assert_false(m.store_lost);
	crun__monitor_store_lost(&m, T0 + 5, "no reply for 15s");
	assert_int_equal(s.n, 3);
	assert_int_equal(s.kind[0], CRUN_MON_STORE_LOST);
	assert_string_equal(s.message[0], "connection closed");
	assert_int_equal(s.kind[1], CRUN_MON_STORE_RECOVERED);
	assert_int_equal(s.kind[2], CRUN_MON_STORE_LOST);
	assert_string_equal(s.message[2], "no reply for 15s");
	crun__monitor_finish(&m);
}

/* This node's own eviction is recorded once per round, whether the
 * keep-alive tick or the store's word finds it first; another node's
 * each time the store names it. */
static void test_self_evicted(void **state)
{
	struct crun__monitor m;
	struct crun__mon_member one = {.group_rank = 0, .node_id = "a:1", .host = "a"};
	struct seen s = {0};

	(void)state;
	assert_int_equal(crun__monitor_init(&m, "run", "a", 1, 3, T0), 0);
	crun__monitor_observe(&m, record, &s);
	crun__monitor_round_formed(&m, T0, 1, 0, 2, 2, 0, &one, 1, T0);
	s.n = 0;
	crun__monitor_member_evicted(&m, T0 + 1, NULL, "this agent was stopped for 20.0s");
	crun__monitor_member_evicted(&m, T0 + 2, NULL, "node 0 (a) left: no keep-alive for 15s");
	crun__monitor_member_evicted(&m, T0 + 3, "b", "node 1 (b) left: no keep-alive");
	crun__monitor_member_evicted(&m, T0 + 4, "b", "node 1 (b) left: no keep-alive");
	assert_int_equal(s.n, 3);
	assert_string_equal(s.node[0], "");
	assert_string_equal(s.message[0], "this agent was stopped for 20.0s");
	assert_string_equal(s.node[1], "b");
	assert_string_equal(s.node[2], "b");
	crun__monitor_round_formed(&m, T0 + 5, 2, 0, 1, 1, 1, &one, 1, T0 + 5);
	s.n = 0;
	crun__monitor_member_evicted(&m, T0 + 6, NULL, "again, in round 2");
	assert_int_equal(s.n, 1);
	assert_int_equal(s.round[0], 2);
	crun__monitor_finish(&m);
}

/* ---- observers ---- */

static int order[8], norder;

static void first(void *arg, const struct crun__monitor *m, const struct crun__mon_event *ev)
{
	(void)m;
	(void)ev;
	order[norder++] = *(int *)arg;
}

static void test_observers(void **state)
{
	struct crun__monitor m;
	int ids[5] = {1, 2, 3, 4, 5};

	(void)state;
	assert_int_equal(crun__monitor_init(&m, "run", "a", 1, 3, T0), 0);
	for (int i = 0; i < CRUN_MON_MAX_OBSERVERS; i++)
		assert_int_equal(crun__monitor_observe(&m, first, &ids[i]), 0);
	assert_int_equal(crun__monitor_observe(&m, first, &ids[4]), -ENOSPC);
	norder = 0;
	crun__monitor_job_started(&m, T0);
	assert_int_equal(norder, CRUN_MON_MAX_OBSERVERS);
	for (int i = 0; i < norder; i++)
		assert_int_equal(order[i], i + 1);
	/* No event: no call. */
	norder = 0;
	crun__monitor_group_state(&m, "running");
	crun__monitor_worker_beat(&m, T0, 0, 1);
	crun__monitor_failure(&m, T0, "x");
	crun__monitor_worker_gpu(&m, 0, 0);
	assert_int_equal(norder, 0);
	crun__monitor_finish(&m);
	assert_int_equal(crun__monitor_init(&m, "run", "a", 0, 3, T0), -EINVAL);
}

/* ---- a NULL monitor records nothing, and does not crash ---- */

static void test_null(void **state)
{
	struct crun__mon_member mem = {.node_id = "x", .host = "x"};

	(void)state;
	crun__monitor_job_started(NULL, T0);
	crun__monitor_group_state(NULL, "running");
	crun__monitor_round_formed(NULL, T0, 1, 0, 1, 1, 0, &mem, 1, T0);
	crun__monitor_round_closed(NULL, T0, "why");
	crun__monitor_member_evicted(NULL, T0, "b", "why");
	crun__monitor_worker_started(NULL, T0, 0, 0, 1);
	crun__monitor_worker_exited(NULL, T0, 0, 1, 0);
	crun__monitor_worker_hung(NULL, T0, 0, "why");
	crun__monitor_worker_beat(NULL, T0, 0, 1);
	crun__monitor_worker_pace(NULL, T0, 0, 1, 2, true);
	crun__monitor_failure(NULL, T0, "line");
	crun__monitor_restart(NULL, T0, CRUN_MON_CAUSE_NODE_LEFT, 1, -1);
	crun__monitor_store_lost(NULL, T0, "why");
	crun__monitor_store_recovered(NULL, T0);
	assert_int_equal(crun__monitor_set_gpus(NULL, NULL, 0), 0);
	crun__monitor_worker_gpu(NULL, 0, 0);
	crun__monitor_gpu_wait(NULL, T0, 1, "x");
	crun__monitor_job_finished(NULL, T0, 0, "succeeded");
}

/* ---- names and the cause of a round's end ---- */

static const struct cause_row {
	bool joined, left;
	const char *message;
	enum crun__mon_cause want;
} cause_rows[] = {
	{true, false, "node 2 (c) joined", CRUN_MON_CAUSE_NODE_JOINED},
	{false, true, "node 1 (b) left: no keep-alive for 15s", CRUN_MON_CAUSE_NODE_LEFT},
	{false, false, "rank 5 (local rank 1) on b exited with code 1",
	 CRUN_MON_CAUSE_WORKER_FAILED},
	{false, false, "rank 5 (local rank 1) on b hung: no heartbeat for 30 s",
	 CRUN_MON_CAUSE_WORKER_HUNG},
	{false, false, NULL, CRUN_MON_CAUSE_WORKER_FAILED},
};

/* The nodes a round's end names as gone: "RANK:HOST:e|l" each, in order. */
static const struct {
	const char *message;
	const char *want;
} gone_rows[] = {
	{"node 1 (host-b) left: no keep-alive for 15s", "1:host-b:e"},
	{"node 1 (host-b) left: connection closed", "1:host-b:l"},
	{"node 3 (c) left: replaced by a new connection of the same node", "3:c:l"},
	{"node 0 (a), node 1 (b) did not come back within 30s after the store restarted",
	 "0:a:e 1:b:e"},
	{"node 0 (a), node 2 (c) and 3 more did not come back within 30s after the store "
	 "restarted",
	 "0:a:e 2:c:e"},
	{"node 1 (b) joined again instead of resuming the round", "1:b:l"},
	/* Not a node that is gone. */
	{"node 1 (b) reported a failure", ""},
	{"rank 3 (local rank 1) on b exited with code 1", ""},
	{"out of memory rebuilding the round", ""},
	{"node x (b) left: connection closed", ""},
	{"node 1 (b left: connection closed", ""},
	{"", ""},
	{NULL, ""},
};

static void test_round_end_gone(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(gone_rows) / sizeof(gone_rows[0]); i++) {
		struct crun__mon_gone gone[4];
		char got[256] = "";
		size_t o = 0;
		int n = crun__mon_round_end_gone(gone_rows[i].message, gone, 4);

		assert_int_equal(crun__mon_round_end_gone(gone_rows[i].message, NULL, 0), n);
		for (int k = 0; k < n; k++)
			o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%d:%s:%c", k ? " " : "",
					      gone[k].group_rank, gone[k].host,
					      gone[k].evicted ? 'e' : 'l');
		if (strcmp(got, gone_rows[i].want))
			fail_msg("'%s': got '%s', want '%s'",
				 gone_rows[i].message ? gone_rows[i].message : "(null)", got,
				 gone_rows[i].want);
	}
}

static void test_names(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cause_rows) / sizeof(cause_rows[0]); i++)
		assert_int_equal(crun__mon_round_end_cause(cause_rows[i].joined, cause_rows[i].left,
							   cause_rows[i].message),
				 cause_rows[i].want);
	for (int k = 0; k < CRUN_MON_NEVENTS; k++)
		assert_string_not_equal(crun__mon_event_name(k), "unknown");
	for (int c = 0; c < CRUN_MON_NCAUSES; c++)
		assert_string_not_equal(crun__mon_cause_name(c), "unknown");
	for (int s = 0; s < CRUN_MON_W_NSTATES; s++)
		assert_string_not_equal(crun__mon_worker_state_name(s), "unknown");
	assert_string_equal(crun__mon_event_name(CRUN_MON_NEVENTS), "unknown");
	assert_string_equal(crun__mon_cause_name(CRUN_MON_CAUSE_NODE_LEFT), "node_left");
	assert_string_equal(crun__mon_event_name(CRUN_MON_MEMBER_EVICTED), "member_evicted");
}

/* ---- the events file's lines ---- */

/* The line of the one event act makes, parsed. */
static json_t *line_of(struct crun__monitor *m, const struct crun__mon_event *ev)
{
	char *line = crun__events_line(m, ev);
	json_error_t err;
	json_t *o;
	size_t n;

	assert_non_null(line);
	n = strlen(line);
	assert_true(n > 2 && line[n - 1] == '\n');
	assert_null(memchr(line, '\n', n - 1)); /* one line */
	o = json_loads(line, 0, &err);
	if (!o)
		fail_msg("not JSON: %s: %s", err.text, line);
	free(line);
	return o;
}

static struct crun__mon_event last;

static void keep(void *arg, const struct crun__monitor *m, const struct crun__mon_event *ev)
{
	(void)arg;
	(void)m;
	last = *ev;
}

/* Fields every line has, and which of the others a line has. */
static const char *const common_keys[] = {"time",  "ts",   "event",	 "run",
					  "round", "node", "group_rank", "restart_count"};

static void has_keys(json_t *o, const char *keys)
{
	char copy[256], *save = NULL;
	size_t want = sizeof(common_keys) / sizeof(common_keys[0]), got = json_object_size(o);

	for (size_t i = 0; i < sizeof(common_keys) / sizeof(common_keys[0]); i++)
		if (!json_object_get(o, common_keys[i]))
			fail_msg("no '%s'", common_keys[i]);
	snprintf(copy, sizeof(copy), "%s", keys);
	for (char *k = strtok_r(copy, ",", &save); k; k = strtok_r(NULL, ",", &save), want++)
		if (!json_object_get(o, k))
			fail_msg("%s: no '%s'", json_string_value(json_object_get(o, "event")), k);
	if (got != want)
		fail_msg("%s: %zu fields, want %zu (%s and the common ones)",
			 json_string_value(json_object_get(o, "event")), got, want, keys);
}

static void test_lines(void **state)
{
	struct crun__monitor m;
	struct crun__mon_member mem[2];
	int nmem;
	json_t *o;

	(void)state;
	assert_int_equal(crun__monitor_init(&m, "job-1", "host-a", 2, 3, T0), 0);
	crun__monitor_observe(&m, keep, NULL);

	crun__monitor_job_started(&m, T0 + 345);
	o = line_of(&m, &last);
	has_keys(o, "");
	assert_string_equal(json_string_value(json_object_get(o, "time")),
			    "2026-12-02T07:19:43.345Z");
	assert_true(json_real_value(json_object_get(o, "ts")) == (double)(T0 + 345) / 1000);
	assert_string_equal(json_string_value(json_object_get(o, "event")), "job_started");
	assert_string_equal(json_string_value(json_object_get(o, "run")), "job-1");
	assert_string_equal(json_string_value(json_object_get(o, "node")), "host-a");
	assert_true(json_is_null(json_object_get(o, "round")));
	assert_true(json_is_null(json_object_get(o, "group_rank")));
	json_decref(o);

	/* No worker beat a step: the restart says none. */
	crun__monitor_restart(&m, T0 + 400, CRUN_MON_CAUSE_STORE_LOST, 0, -1);
	o = line_of(&m, &last);
	has_keys(o, "cause");
	json_decref(o);

	members_of("host-a,host-b", mem, &nmem);
	crun__monitor_round_formed(&m, T0 + 2500, 4, 1, 2, 4, 0, mem, nmem, T0 + 1000);
	o = line_of(&m, &last);
	has_keys(o, "nnodes,world_size,seconds,members");
	assert_int_equal(json_integer_value(json_object_get(o, "round")), 4);
	assert_int_equal(json_integer_value(json_object_get(o, "group_rank")), 1);
	assert_true(json_real_value(json_object_get(o, "seconds")) == 1.5);
	assert_string_equal(json_string_value(json_array_get(json_object_get(o, "members"), 1)),
			    "host-b");
	json_decref(o);

	crun__monitor_worker_started(&m, T0 + 2600, 1, 3, 777);
	o = line_of(&m, &last);
	has_keys(o, "rank,local_rank,pid");
	assert_int_equal(json_integer_value(json_object_get(o, "pid")), 777);
	json_decref(o);

	crun__monitor_worker_beat(&m, T0 + 2700, 1, 12);
	crun__monitor_worker_pace(&m, T0 + 2800, 1, 0.31, 1.9, true);
	o = line_of(&m, &last);
	has_keys(o, "rank,local_rank,pid,step,ratio,seconds");
	assert_true(json_real_value(json_object_get(o, "ratio")) == 1.9);
	assert_true(json_real_value(json_object_get(o, "seconds")) == 0.31);
	json_decref(o);

	crun__monitor_worker_hung(&m, T0 + 2900, 1, "no heartbeat for 3 s, last step 12");
	o = line_of(&m, &last);
	has_keys(o, "rank,local_rank,pid,step,message");
	json_decref(o);

	crun__monitor_worker_exited(&m, T0 + 3000, 1, 0, 9);
	o = line_of(&m, &last);
	has_keys(o, "rank,local_rank,pid,step,signal");
	assert_int_equal(json_integer_value(json_object_get(o, "signal")), 9);
	json_decref(o);

	crun__monitor_worker_started(&m, T0 + 3100, 0, 2, 778);
	crun__monitor_worker_exited(&m, T0 + 3200, 0, 3, 0);
	o = line_of(&m, &last);
	has_keys(o, "rank,local_rank,pid,exit_code");
	assert_int_equal(json_integer_value(json_object_get(o, "exit_code")), 3);
	json_decref(o);

	crun__monitor_round_closed(&m, T0 + 3300, "node 1 (host-b) left: \"quoted\"\nand\ttabs");
	o = line_of(&m, &last);
	has_keys(o, "message");
	assert_string_equal(json_string_value(json_object_get(o, "message")),
			    "node 1 (host-b) left: \"quoted\"\nand\ttabs");
	json_decref(o);

	crun__monitor_member_evicted(&m, T0 + 3300, "host-b", "no keep-alive for 15s");
	o = line_of(&m, &last);
	has_keys(o, "member,message");
	assert_string_equal(json_string_value(json_object_get(o, "member")), "host-b");
	json_decref(o);
	crun__monitor_member_evicted(&m, T0 + 3300, NULL, "stopped");
	o = line_of(&m, &last);
	assert_string_equal(json_string_value(json_object_get(o, "member")), "host-a");
	json_decref(o);

	crun__monitor_restart(&m, T0 + 3400, CRUN_MON_CAUSE_NODE_LEFT, 1, 12);
	o = line_of(&m, &last);
	has_keys(o, "cause,step");
	assert_int_equal(json_integer_value(json_object_get(o, "step")), 12);
	assert_string_equal(json_string_value(json_object_get(o, "cause")), "node_left");
	assert_int_equal(json_integer_value(json_object_get(o, "restart_count")), 1);
	json_decref(o);

	crun__monitor_store_lost(&m, T0 + 3500, "connection closed");
	o = line_of(&m, &last);
	has_keys(o, "message");
	json_decref(o);
	crun__monitor_store_recovered(&m, T0 + 3600);
	o = line_of(&m, &last);
	has_keys(o, "");
	json_decref(o);

	crun__monitor_gpu_wait(&m, T0 + 3700, 2.25, "GPU 0 freed its memory");
	o = line_of(&m, &last);
	has_keys(o, "seconds,message");
	json_decref(o);

	/* a worker's line cut at a byte limit inside "é", and a Latin-1 byte:
	 * still text, not null */
	crun__monitor_job_finished(&m, T0 + 3900, 1, "failed: caf\xe9 cr\xc3\xa8me br\xc3");
	o = line_of(&m, &last);
	assert_string_equal(json_string_value(json_object_get(o, "message")),
			    "failed: caf\xef\xbf\xbd cr\xc3\xa8me br");
	json_decref(o);

	crun__monitor_job_finished(&m, T0 + 4000, 0, "succeeded");
	o = line_of(&m, &last);
	has_keys(o, "exit_code,message");
	assert_string_equal(json_string_value(json_object_get(o, "event")), "job_finished");
	json_decref(o);
	crun__monitor_finish(&m);
}

/* The file: created, appended to, one line per event. */
static void test_file(void **state)
{
	char path[] = "/tmp/crun-test-events-XXXXXX", line[1024];
	struct crun__events e;
	struct crun__monitor m;
	FILE *f;
	int fd, n = 0;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "earlier\n", 8), 8);
	close(fd);
	assert_int_equal(crun__events_open(&e, path), 0);
	assert_int_equal(crun__monitor_init(&m, "r", "h", 1, 0, T0), 0);
	crun__monitor_observe(&m, crun__events_observe, &e);
	crun__monitor_job_started(&m, T0);
	crun__monitor_job_finished(&m, T0 + 1, 0, "succeeded");
	crun__events_close(&e);
	crun__events_close(&e);
	crun__monitor_job_started(&m, T0 + 2); /* closed: nothing */
	crun__monitor_finish(&m);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n++;
	fclose(f);
	assert_int_equal(n, 3);
	unlink(path);
	assert_int_equal(crun__events_open(&e, "/nonexistent-dir/events.jsonl"), -ENOENT);
	assert_int_equal(e.fd, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_members),	       cmocka_unit_test(test_workers),
		cmocka_unit_test(test_worker_fields),  cmocka_unit_test(test_counters),
		cmocka_unit_test(test_store),	       cmocka_unit_test(test_observers),
		cmocka_unit_test(test_null),	       cmocka_unit_test(test_names),
		cmocka_unit_test(test_lines),	       cmocka_unit_test(test_file),
		cmocka_unit_test(test_round_end_gone), cmocka_unit_test(test_self_evicted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the straggler detector (src/agent/straggler.c), called
 * directly with made-up beats and times: no loop, no process.
 *
 * `scenarios` lists jobs: per local rank a step time (with an optional
 * phase in which one rank runs at another speed, a beat stride and
 * jitter), the other nodes' summary, and what the detector must say: how
 * many SLOW and RECOVERED events per rank, and by which step the first
 * SLOW came. A lock-step job's ranks all take the slowest rank's time per
 * step (they wait for each other in collectives); with work, the beats
 * also carry each rank's own time (`step N WORK`).
 *
 * The store part (rendezvous.h: crun__rdzv_publish_steps/fetch_steps) runs
 * two agents' rendezvous on one loop, one of them hosting the store, over
 * loopback. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/rendezvous.h"
#include "agent/straggler.h"
#include "common/log.h"
#include "common/util.h"
#include "rendezvous/server.h"

#include <signal.h>
#include <stdlib.h>
#include <uv.h>

#define NR 8

struct scenario {
	const char *name;
	int nlocal, rank_offset;
	double factor;
	int window, steps;
	double ms[NR];	   /* step time per local rank */
	int stride[NR];	   /* beats every stride steps (0: every step) */
	double jitter;	   /* each interval x (1 +- jitter), deterministic */
	int outlier_every; /* every n-th step of every rank takes 10x */
	/* phase: local rank p_rank takes p_ms per step in steps [p_from, p_to) */
	int p_rank, p_from, p_to;
	double p_ms;
	int restart_at; /* every rank's step count starts again at 0 here */
	const char *remote;
	int slow[NR], recovered[NR];
	int first_slow_by; /* 0: no SLOW at all */
	bool lockstep;	   /* every rank's interval is the slowest one's */
	bool work;	   /* beats carry the rank's own time as its work */
};

static const struct scenario scenarios[] = {
	{"even job", 4, 0, 1.5, 20, 200, {100, 100, 100, 100}, .p_rank = -1},
	{"even job with jitter",
	 4,
	 0,
	 1.5,
	 20,
	 300,
	 {100, 100, 100, 100},
	 .jitter = 0.3,
	 .p_rank = -1},
	{"even job with outliers",
	 4,
	 0,
	 1.5,
	 20,
	 300,
	 {100, 100, 100, 100},
	 .outlier_every = 7,
	 .p_rank = -1},
	{"one slow rank",
	 4,
	 0,
	 1.5,
	 20,
	 200,
	 {100, 100, 190, 100},
	 .p_rank = -1,
	 .slow = {0, 0, 1, 0},
	 .first_slow_by = 21},
	{"one slow rank, jitter",
	 4,
	 4,
	 1.5,
	 20,
	 200,
	 {100, 100, 100, 190},
	 .jitter = 0.2,
	 .p_rank = -1,
	 .slow = {0, 0, 0, 1},
	 .first_slow_by = 21},
	{"slow but the window is not full", 4, 0, 1.5, 20, 20, {100, 300, 100, 100}, .p_rank = -1},
	{"disabled", 4, 0, 0, 20, 200, {100, 300, 100, 100}, .p_rank = -1},
	{"below the factor", 4, 0, 1.5, 20, 200, {100, 100, 140, 100}, .p_rank = -1},
	{"one rank alone", 1, 0, 1.5, 20, 200, {300}, .p_rank = -1},
	{"two ranks, one slow",
	 2,
	 0,
	 1.5,
	 20,
	 100,
	 {100, 160},
	 .p_rank = -1,
	 .slow = {0, 1},
	 .first_slow_by = 21},
	{"short window",
	 4,
	 0,
	 2,
	 5,
	 50,
	 {10, 10, 10, 25},
	 .p_rank = -1,
	 .slow = {0, 0, 0, 1},
	 .first_slow_by = 6},
	{"skipped step numbers",
	 4,
	 0,
	 1.5,
	 20,
	 400,
	 {100, 100, 100, 100},
	 {1, 5, 3, 7},
	 .p_rank = -1},
	{"skipped step numbers, slow",
	 4,
	 0,
	 1.5,
	 20,
	 400,
	 {100, 100, 100, 200},
	 {1, 5, 3, 7},
	 .p_rank = -1,
	 .slow = {0, 0, 0, 1},
	 .first_slow_by = 28},
	{"an episode and its end",
	 4,
	 0,
	 1.5,
	 20,
	 200,
	 {100, 100, 100, 100},
	 .p_rank = 1,
	 .p_from = 30,
	 .p_to = 80,
	 .p_ms = 250,
	 .slow = {0, 1, 0, 0},
	 .recovered = {0, 1, 0, 0},
	 .first_slow_by = 45},
	{"two episodes",
	 4,
	 0,
	 1.5,
	 20,
	 120,
	 {100, 100, 100, 300},
	 .p_rank = 3,
	 .p_from = 40,
	 .p_to = 80,
	 .p_ms = 100,
	 .slow = {0, 0, 0, 2},
	 .recovered = {0, 0, 0, 1},
	 .first_slow_by = 21},
	{"a restart of the count",
	 4,
	 0,
	 1.5,
	 20,
	 100,
	 {100, 100, 100, 100},
	 .p_rank = -1,
	 .restart_at = 50},
	{"slow rank, the count restarts",
	 4,
	 0,
	 1.5,
	 20,
	 100,
	 {100, 100, 100, 200},
	 .p_rank = -1,
	 .restart_at = 50,
	 .slow = {0, 0, 0, 1},
	 .first_slow_by = 21},
	{"a slow node, the job is fast",
	 2,
	 6,
	 1.5,
	 20,
	 100,
	 {300, 310},
	 .p_rank = -1,
	 .remote = "steps 1\n0 100000 90\n1 100000 90\n2 101000 90\n3 99000 90\n4 100000 "
		   "90\n5 100000 90\n",
	 .slow = {1, 1},
	 .first_slow_by = 21},
	{"a lone slow rank, the others remote",
	 1,
	 3,
	 1.5,
	 20,
	 100,
	 {300},
	 .p_rank = -1,
	 .remote = "steps 1\n0 100000 90\n1 100000 90\n2 100000 90\n",
	 .slow = {1},
	 .first_slow_by = 21},
	{"a fast node, the job is slow",
	 2,
	 0,
	 1.5,
	 20,
	 100,
	 {100, 100},
	 .p_rank = -1,
	 .remote = "steps 1\n2 300000 30\n3 300000 30\n4 300000 30\n"},
	{"own ranks in the remote summary are ignored",
	 1,
	 0,
	 1.5,
	 20,
	 100,
	 {300},
	 .p_rank = -1,
	 .remote = "steps 1\n0 100000 90\n"},
	{"lock-step, one slow rank, intervals only: nobody can be named",
	 4,
	 0,
	 1.5,
	 20,
	 200,
	 {40, 40, 100, 40},
	 .jitter = 0.1,
	 .p_rank = -1,
	 .lockstep = true},
	{"lock-step, one slow rank, with work",
	 4,
	 0,
	 1.5,
	 20,
	 200,
	 {40, 40, 100, 40},
	 .jitter = 0.1,
	 .p_rank = -1,
	 .slow = {0, 0, 1, 0},
	 .first_slow_by = 20,
	 .lockstep = true,
	 .work = true},
	{"lock-step even job with work, jitter and outliers",
	 4,
	 0,
	 1.5,
	 20,
	 300,
	 {40, 40, 40, 40},
	 .jitter = 0.3,
	 .outlier_every = 7,
	 .p_rank = -1,
	 .lockstep = true,
	 .work = true},
	{"lock-step, a slow phase with work, beats every 5 steps",
	 4,
	 0,
	 1.5,
	 20,
	 400,
	 {40, 40, 40, 40},
	 {0, 5, 0, 0},
	 .p_rank = 1,
	 .p_from = 100,
	 .p_to = 250,
	 .p_ms = 90,
	 .slow = {0, 1, 0, 0},
	 .recovered = {0, 1, 0, 0},
	 .lockstep = true,
	 .work = true},
	{"work against the other nodes' work",
	 1,
	 3,
	 1.5,
	 20,
	 100,
	 {100},
	 .p_rank = -1,
	 .remote = "steps 1\n0 40000 90\n1 40000 90\n2 40000 90\n",
	 .slow = {1},
	 .first_slow_by = 20,
	 .work = true},
};

/* Deterministic noise in [-1, 1]. */
static double noise(uint32_t *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return (double)((*seed >> 8) & 0xffff) / 32767.5 - 1;
}

static void run_scenario(const struct scenario *sc)
{
	struct crun__straggler_conf conf = {sc->factor, sc->window};
	struct crun__straggler *s = crun__straggler_create(&conf, sc->nlocal, sc->rank_offset);
	double t[NR] = {0};
	int slow[NR] = {0}, recovered[NR] = {0}, first_slow = 0;
	uint32_t seed = 42;
	char err[128];

	assert_non_null(s);
	if (sc->remote)
		assert_int_equal(crun__straggler_remote_add(s, sc->remote, strlen(sc->remote), err,
							    sizeof(err)),
				 0);
	for (int k = 1; k <= sc->steps; k++) {
		struct crun__straggler_event ev[NR];
		double own[NR], slowest = 0;
		int n;

		for (int r = 0; r < sc->nlocal; r++) {
			double ms = r == sc->p_rank && k >= sc->p_from && k < sc->p_to ? sc->p_ms
										       : sc->ms[r];

			if (sc->outlier_every && k % sc->outlier_every == 0)
				ms *= 10;
			own[r] = ms * (1 + sc->jitter * noise(&seed));
			slowest = own[r] > slowest ? own[r] : slowest;
		}
		for (int r = 0; r < sc->nlocal; r++) {
			int stride = sc->stride[r] ? sc->stride[r] : 1;
			int64_t step =
				sc->restart_at && k >= sc->restart_at ? k - sc->restart_at : k;

			t[r] += sc->lockstep ? slowest : own[r];
			if (k % stride == 0)
				crun__straggler_beat(s, r, step, sc->work ? own[r] : -1,
						     (uint64_t)t[r]);
		}
		n = crun__straggler_check(s, ev, NR);
		for (int i = 0; i < n; i++) {
			assert_int_equal(ev[i].rank, sc->rank_offset + ev[i].local_rank);
			assert_int_equal(ev[i].work, sc->work);
			if (ev[i].kind == CRUN_STRAGGLER_SLOW) {
				slow[ev[i].local_rank]++;
				if (!first_slow)
					first_slow = k;
				assert_true(ev[i].step_ms >= sc->factor * ev[i].median_ms);
			} else {
				recovered[ev[i].local_rank]++;
			}
		}
	}
	for (int r = 0; r < sc->nlocal; r++) {
		if (slow[r] != sc->slow[r] || recovered[r] != sc->recovered[r])
			fail_msg("%s: local rank %d: %d SLOW, %d RECOVERED; expected %d, %d",
				 sc->name, r, slow[r], recovered[r], sc->slow[r], sc->recovered[r]);
	}
	if (sc->first_slow_by && first_slow > sc->first_slow_by)
		fail_msg("%s: first SLOW at step %d, expected by %d", sc->name, first_slow,
			 sc->first_slow_by);
	crun__straggler_destroy(s);
}

static void test_scenarios(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		run_scenario(&scenarios[i]);
}

/* A rank's window holds one kind of time: a beat of the other kind starts
 * it again, and a work time is taken once whatever the steps skipped. */
static void test_work_kinds(void **state)
{
	struct crun__straggler_conf conf = {1.5, 4};
	struct crun__straggler *s = crun__straggler_create(&conf, 2, 0);
	struct crun__straggler_event ev[2];

	(void)state;
	assert_non_null(s);
	for (int k = 1; k <= 5; k++)
		crun__straggler_beat(s, 0, k, -1, (uint64_t)k * 100);
	assert_true(crun__straggler_has_times(s));
	crun__straggler_beat(s, 0, 6, 50, 600); /* work now: a new window */
	assert_false(crun__straggler_has_times(s));
	for (int k = 7; k <= 9; k++)
		crun__straggler_beat(s, 0, k, 50, (uint64_t)k * 100);
	assert_true(crun__straggler_has_times(s));
	/* Rank 1 beats every 10 steps, 200 ms of work per beat. */
	for (int k = 10; k <= 40; k += 10)
		crun__straggler_beat(s, 1, k, 200, (uint64_t)k * 100);
	assert_int_equal(crun__straggler_check(s, ev, 2), 1);
	assert_int_equal(ev[0].rank, 1);
	assert_true(ev[0].work);
	assert_true(ev[0].step_ms == 200 && ev[0].median_ms == 50);
	crun__straggler_destroy(s);
}

static void test_bad_conf(void **state)
{
	static const struct {
		double factor;
		int window, nlocal;
	} bad[] = {
		{1, 20, 4}, {0.5, 20, 4}, {-1, 20, 4}, {1.5, 1, 4}, {1.5, 10001, 4}, {1.5, 20, 0},
	};
	struct crun__straggler_conf ok = {0, 2};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct crun__straggler_conf c = {bad[i].factor, bad[i].window};

		assert_null(crun__straggler_create(&c, bad[i].nlocal, 0));
	}
	crun__straggler_destroy(crun__straggler_create(&ok, 1, 0));
	crun__straggler_destroy(NULL);
}

/* A summary read back by another node gives it the same step times. */
static void test_summary_round_trip(void **state)
{
	struct crun__straggler_conf conf = {1.5, 4};
	struct crun__straggler *a = crun__straggler_create(&conf, 3, 10);
	struct crun__straggler *b = crun__straggler_create(&conf, 1, 0);
	struct crun__straggler_event ev[2];
	char buf[512], err[128];
	int n;

	(void)state;
	assert_false(crun__straggler_fresh(a));
	assert_false(crun__straggler_has_times(a));
	for (int k = 0; k <= 4; k++) {
		crun__straggler_beat(a, 0, k, -1, (uint64_t)k * 100);
		crun__straggler_beat(a, 1, k, -1, (uint64_t)k * 120);
		if (k < 4)
			crun__straggler_beat(a, 2, k, -1, (uint64_t)k * 100);
	}
	assert_true(crun__straggler_fresh(a));
	assert_true(crun__straggler_has_times(a));
	assert_int_equal(crun__straggler_summary(a, buf, 8), -ENOBUFS);
	n = crun__straggler_summary(a, buf, sizeof(buf));
	assert_string_equal(buf, "steps 1\n10 100000 4\n11 120000 4\n");
	assert_int_equal(n, (int)strlen(buf));
	assert_false(crun__straggler_fresh(a));

	/* b's one rank at 250 ms: 2.1x the median (120 ms) of 100, 120, 250. */
	for (int k = 0; k <= 4; k++)
		crun__straggler_beat(b, 0, k, -1, (uint64_t)k * 250);
	assert_int_equal(crun__straggler_check(b, ev, 2), 0); /* alone */
	assert_int_equal(crun__straggler_remote_add(b, buf, (size_t)n, err, sizeof(err)), 0);
	assert_int_equal(crun__straggler_check(b, ev, 2), 1);
	assert_int_equal(ev[0].kind, CRUN_STRAGGLER_SLOW);
	assert_int_equal(ev[0].rank, 0);
	assert_true(ev[0].median_ms == 120);
	assert_int_equal(crun__straggler_check(b, ev, 2), 0); /* once per episode */
	crun__straggler_remote_clear(b);
	crun__straggler_reset(b, 0);
	assert_int_equal(crun__straggler_check(b, ev, 2), 0);
	crun__straggler_destroy(a);
	crun__straggler_destroy(b);
}

static void test_remote_malformed(void **state)
{
	static const struct {
		const char *text, *err;
	} bad[] = {
		{"", "not a summary (no 'steps 1' line)"},
		{"steps 2\n", "not a summary (no 'steps 1' line)"},
		{"steps 1\n1 2\n", "line 2: not 'RANK STEP_US LAST_STEP'"},
		{"steps 1\n1 2 3", "line 2: not 'RANK STEP_US LAST_STEP'"},
		{"steps 1\n1 2 3\n-1 2 3\n", "line 3: not 'RANK STEP_US LAST_STEP'"},
		{"steps 1\n1  2 3\n", "line 2: not 'RANK STEP_US LAST_STEP'"},
		{"steps 1\n4294967296 2 3\n", "line 2: not 'RANK STEP_US LAST_STEP'"},
		{"steps 1\n1 99999999999999999999 3\n", "line 2: not 'RANK STEP_US LAST_STEP'"},
	};
	struct crun__straggler_conf conf = {1.5, 2};
	struct crun__straggler *s = crun__straggler_create(&conf, 1, 0);
	struct crun__straggler_event ev[1];
	char err[128];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(crun__straggler_remote_add(s, bad[i].text, strlen(bad[i].text),
							    err, sizeof(err)),
				 -EINVAL);
		assert_string_equal(err, bad[i].err);
	}
	/* Nothing of a refused summary is kept: one slow rank stays alone. */
	for (int k = 0; k <= 3; k++)
		crun__straggler_beat(s, 0, k, -1, (uint64_t)k * 500);
	assert_int_equal(crun__straggler_check(s, ev, 1), 0);
	assert_int_equal(crun__straggler_remote_add(s, "steps 1\n", 8, err, sizeof(err)), 0);
	assert_int_equal(crun__straggler_check(s, ev, 1), 0);
	crun__straggler_destroy(s);
}

static void test_format(void **state)
{
	struct crun__straggler_event slow = {CRUN_STRAGGLER_SLOW, 5, 1, 310, 160, 20, false};
	struct crun__straggler_event back = {CRUN_STRAGGLER_RECOVERED, 5, 1, 170, 160, 20, false};
	char buf[256];

	(void)state;
	crun__straggler_format(&slow, "host-b", buf, sizeof(buf));
	assert_string_equal(buf, "rank 5 on host-b is a straggler: 0.31 s/step, 1.9x the job's "
				 "median 0.16 s over the last 20 steps");
	crun__straggler_format(&back, "host-b", buf, sizeof(buf));
	assert_string_equal(buf, "rank 5 on host-b is no longer a straggler: 0.17 s/step, 1.1x "
				 "the job's median 0.16 s");
	slow = (struct crun__straggler_event){CRUN_STRAGGLER_SLOW, 2, 2, 62, 24, 20, true};
	crun__straggler_format(&slow, "host-b", buf, sizeof(buf));
	assert_string_equal(buf, "rank 2 on host-b is a straggler: 0.062 s of work/step, 2.6x the "
				 "job's median 0.024 s over the last 20 steps");
}

/* ---- the store exchange ---------------------------------------------------- */

/* A beat says whether it changed its rank's step time: only then is
 * there anything new to decide. */
static void test_beat_changes(void **state)
{
	static const struct {
		int local_rank;
		int64_t step;
		double work_ms;
		uint64_t now_ms;
		bool changed;
	} rows[] = {
		{0, 1, -1, 1000, false},  /* the first beat: no interval yet */
		{0, 2, -1, 1100, false},  /* one interval of a window of 3 */
		{0, 3, -1, 1200, false},  /* two */
		{0, 4, -1, 1300, true},	  /* full: 100 ms/step */
		{0, 5, -1, 1400, false},  /* 100 again: the same median */
		{0, 6, -1, 1400, false},  /* a 0 ms interval: the median stays */
		{0, 7, -1, 1800, false},  /* one 400 ms: the median of 0 100 400 is 100 */
		{0, 8, -1, 2200, true},	  /* 0 400 400: 400 */
		{0, 8, -1, 2300, true},	  /* not forward: the history starts again */
		{0, 7, -1, 2400, false},  /* again, but it had no time left to lose */
		{1, 1, 50, 1000, false},  /* work: one sample of 3 */
		{1, 2, 50, 1100, false},  /* two */
		{1, 3, 50, 1200, true},	  /* full: 50 ms of work */
		{1, 9, 50, 1300, false},  /* skipped steps: one more 50 */
		{1, 10, 80, 1400, false}, /* 50 50 80: 50 */
		{1, 11, -1, 1500, true},  /* an interval: the other kind starts again */
		{2, 1, -1, 1000, false},  /* no such local rank */
		{0, -1, -1, 1000, false}, /* a negative step */
	};
	struct crun__straggler_conf conf = {1.5, 3};
	struct crun__straggler *s = crun__straggler_create(&conf, 2, 0);

	(void)state;
	assert_non_null(s);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		bool got = crun__straggler_beat(s, rows[i].local_rank, rows[i].step,
						rows[i].work_ms, rows[i].now_ms);

		if (got != rows[i].changed)
			fail_msg("row %zu: beat of local rank %d, step %lld: changed %d, "
				 "expected %d",
				 i, rows[i].local_rank, (long long)rows[i].step, got,
				 rows[i].changed);
	}
	crun__straggler_destroy(s);
}

/* Beats every 1 ms of a window of 2: local rank r's step time is ms[r]. */
static void set_times(struct crun__straggler *s, const int *ms, int n, uint64_t *t)
{
	for (int r = 0; r < n; r++)
		for (int k = 0; k < 3; k++)
			crun__straggler_beat(s, r, (int64_t)(*t + (uint64_t)k), -1,
					     (uint64_t)(*t + (uint64_t)k * (uint64_t)ms[r]));
	*t += 1000000;
}

/* The job's median, kept between checks, is the lower median of every
 * time held, whatever the mix of local and remote ranks, and follows the
 * other nodes' summaries when they change. */
static void test_job_median(void **state)
{
	struct crun__straggler_conf conf = {1.5, 2};
	uint32_t seed = 7;
	char text[1024], err[128];

	(void)state;
	for (int trial = 0; trial < 300; trial++) {
		struct crun__straggler *s = crun__straggler_create(&conf, 3, 0);
		struct crun__straggler_event ev[3];
		int ms[3], all[16], n = 0, nremote, off, got;
		uint64_t t = 1;

		assert_non_null(s);
		seed = seed * 1103515245 + 12345;
		nremote = (int)((seed >> 16) % 12);
		ms[0] = 1000000; /* always the straggler: its event tells the median */
		for (int r = 1; r < 3; r++) {
			seed = seed * 1103515245 + 12345;
			ms[r] = 1 + (int)((seed >> 16) % 1000);
			all[n++] = ms[r];
		}
		all[n++] = ms[0];
		off = snprintf(text, sizeof(text), "steps 1\n");
		for (int i = 0; i < nremote; i++) {
			seed = seed * 1103515245 + 12345;
			all[n] = 1 + (int)((seed >> 16) % 1000);
			off += snprintf(text + off, sizeof(text) - (size_t)off, "%d %d 5\n", 10 + i,
					all[n] * 1000);
			n++;
		}
		for (int i = 1; i < n; i++)
			for (int j = i; j > 0 && all[j - 1] > all[j]; j--) {
				int x = all[j];

				all[j] = all[j - 1];
				all[j - 1] = x;
			}
		assert_int_equal(crun__straggler_remote_add(s, text, (size_t)off, err, sizeof(err)),
				 0);
		set_times(s, ms, 3, &t);
		got = crun__straggler_check(s, ev, 3);
		assert_true(got >= 1);
		assert_int_equal(ev[0].local_rank, 0);
		if (ev[0].median_ms != all[(n - 1) / 2])
			fail_msg("trial %d: median %g, expected %d", trial, ev[0].median_ms,
				 all[(n - 1) / 2]);
		crun__straggler_destroy(s);
	}
}

/* A checked median is not kept past a change of the other nodes'. */
static void test_median_follows_remote(void **state)
{
	static const char one[] = "steps 1\n5 100000 1\n";
	static const char three[] = "steps 1\n5 40000 1\n6 40000 1\n7 40000 1\n";
	struct crun__straggler_conf conf = {1.5, 2};
	struct crun__straggler *s = crun__straggler_create(&conf, 2, 0);
	struct crun__straggler_event ev[2];
	int ms[2] = {100, 100};
	uint64_t t = 1;
	char err[128];

	(void)state;
	assert_non_null(s);
	assert_int_equal(crun__straggler_remote_add(s, one, strlen(one), err, sizeof(err)), 0);
	set_times(s, ms, 2, &t);
	assert_int_equal(crun__straggler_check(s, ev, 2), 0);
	crun__straggler_remote_clear(s);
	assert_int_equal(crun__straggler_remote_add(s, three, strlen(three), err, sizeof(err)), 0);
	assert_int_equal(crun__straggler_check(s, ev, 2), 2);
	assert_true(ev[0].median_ms == 40 && ev[1].median_ms == 40);
	crun__straggler_remote_clear(s);
	ms[0] = 40;
	set_times(s, ms, 2, &t);
	/* 40 and 100 alone: the lower median is 40; rank 0 has recovered,
	 * rank 1 stays slow. */
	assert_int_equal(crun__straggler_check(s, ev, 2), 1);
	assert_int_equal(ev[0].kind, CRUN_STRAGGLER_RECOVERED);
	assert_int_equal(ev[0].local_rank, 0);
	assert_true(ev[0].median_ms == 40);
	crun__straggler_destroy(s);
}

struct node {
	struct crun__agent_spec spec;
	struct agent_rdzv r;
	struct crun__server *server;
	bool ready, failed;
	struct crun__placement place;
};

struct fetch {
	bool done;
	int status;
	uint32_t count;
	char text[3][256];
};

static void node_ready(void *arg, const struct crun__placement *place)
{
	struct node *n = arg;

	n->ready = true;
	n->place = *place;
}

static void node_ended(void *arg, const struct crun__round_end *end)
{
	(void)arg;
	(void)end;
}

static void node_done(void *arg)
{
	(void)arg;
}

static void node_failed(void *arg, bool lost, const char *message)
{
	struct node *n = arg;

	(void)lost;
	n->failed = true;
	fprintf(stderr, "rendezvous failed: %s\n", message);
}

static void got_fetch(void *arg, int status, const char *message,
		      const struct crun__wire_item *values, uint32_t count)
{
	struct fetch *f = arg;

	(void)message;
	f->done = true;
	f->status = status;
	f->count = count;
	for (uint32_t i = 0; i < count && i < 3; i++)
		snprintf(f->text[i], sizeof(f->text[i]), "%.*s", (int)values[i].len,
			 (const char *)values[i].data);
}

/* Runs the loop until *flag or 10 s. */
static void run_until(uv_loop_t *loop, const bool *flag)
{
	uint64_t end = uv_now(loop) + 10000;

	while (!*flag && uv_now(loop) < end)
		uv_run(loop, UV_RUN_ONCE);
	assert_true(*flag);
}

static void server_gone(void *arg)
{
	(void)arg;
}

static void node_setup(struct node *n, uv_loop_t *loop, int port, int is_host, int rank, int nnodes)
{
	struct crun__rdzv_hooks hooks = {node_ready, node_ended, node_done, node_failed, n};

	n->spec.nproc_per_node = 2;
	n->spec.node_rank = rank;
	n->spec.run_id = "steps-test";
	n->spec.rdzv.enabled = true;
	n->spec.rdzv.host = "127.0.0.1";
	n->spec.rdzv.port = port;
	n->spec.rdzv.is_host = is_host;
	n->spec.rdzv.min_nodes = n->spec.rdzv.max_nodes = nnodes;
	n->spec.rdzv.join_timeout_ms = 10000;
	n->spec.rdzv.last_call_timeout_ms = 0;
	n->spec.rdzv.keep_alive_interval_ms = 5000;
	n->spec.rdzv.keep_alive_max_attempt = 3;
	n->spec.rdzv.read_timeout_ms = 5000;
	assert_int_equal(crun__rdzv_setup(&n->r, loop, &n->spec, "localhost", &hooks, &n->server),
			 0);
	assert_int_equal(crun__rdzv_join(&n->r), 0);
}

static void test_store_exchange(void **state)
{
	static const char sa[] = "steps 1\n0 100000 30\n1 101000 30\n";
	static const char sb[] = "steps 1\n2 300000 12\n";
	struct node *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct fetch f = {0};
	uv_loop_t loop;
	int port = crun__free_port();

	(void)state;
	signal(SIGPIPE, SIG_IGN);
	crun__log_set_level(CRUN_LOG_WARN);
	assert_true(port > 0);
	assert_int_equal(uv_loop_init(&loop), 0);
	node_setup(a, &loop, port, 1, 0, 2);
	node_setup(b, &loop, port, 0, 1, 2);
	/* Not before the round is assigned. */
	assert_int_equal(crun__rdzv_publish_steps(&a->r, sa, strlen(sa)), -ENOTCONN);
	assert_int_equal(crun__rdzv_fetch_steps(&a->r, got_fetch, &f), -ENOTCONN);
	run_until(&loop, &a->ready);
	run_until(&loop, &b->ready);
	assert_false(a->failed || b->failed);
	assert_int_equal(a->place.nnodes, 2);

	/* b has not published: no summary from it, not a wait. */
	assert_int_equal(crun__rdzv_publish_steps(&a->r, sa, strlen(sa)), 0);
	assert_int_equal(crun__rdzv_fetch_steps(&a->r, got_fetch, &f), 0);
	run_until(&loop, &f.done);
	assert_int_equal(f.status, 0);
	assert_int_equal(f.count, 1);
	assert_string_equal(f.text[0], "");

	/* Each reads the other's, and only the other's. */
	assert_int_equal(crun__rdzv_publish_steps(&b->r, sb, strlen(sb)), 0);
	memset(&f, 0, sizeof(f));
	assert_int_equal(crun__rdzv_fetch_steps(&a->r, got_fetch, &f), 0);
	run_until(&loop, &f.done);
	assert_int_equal(f.status, 0);
	assert_int_equal(f.count, 1);
	assert_string_equal(f.text[0], sb);
	memset(&f, 0, sizeof(f));
	assert_int_equal(crun__rdzv_fetch_steps(&b->r, got_fetch, &f), 0);
	run_until(&loop, &f.done);
	assert_int_equal(f.status, 0);
	assert_int_equal(f.count, 1);
	assert_string_equal(f.text[0], sa);

	/* A newer summary replaces the older one. */
	assert_int_equal(crun__rdzv_publish_steps(&b->r, sa, strlen(sa)), 0);
	memset(&f, 0, sizeof(f));
	assert_int_equal(crun__rdzv_fetch_steps(&a->r, got_fetch, &f), 0);
	run_until(&loop, &f.done);
	assert_string_equal(f.text[0], sa);

	/* A reply of a round left behind says so. */
	memset(&f, 0, sizeof(f));
	assert_int_equal(crun__rdzv_fetch_steps(&a->r, got_fetch, &f), 0);
	a->r.gen++;
	run_until(&loop, &f.done);
	assert_int_equal(f.status, -ECANCELED);

	crun__rdzv_finish(&b->r);
	crun__rdzv_finish(&a->r);
	if (a->server)
		crun__server_destroy(a->server, server_gone, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
	free(a);
	free(b);
}

/* Three nodes, one of which never publishes (its workers beat without
 * steps): the others still read each other's summaries, every time. */
static void test_store_node_silent(void **state)
{
	static const char sa[] = "steps 1\n0 100000 30\n1 101000 30\n";
	static const char sc[] = "steps 1\n4 300000 12\n";
	struct node *n[3];
	struct fetch f = {0};
	uv_loop_t loop;
	int port = crun__free_port();

	(void)state;
	signal(SIGPIPE, SIG_IGN);
	crun__log_set_level(CRUN_LOG_WARN);
	assert_true(port > 0);
	assert_int_equal(uv_loop_init(&loop), 0);
	for (int i = 0; i < 3; i++) {
		n[i] = calloc(1, sizeof(*n[i]));
		node_setup(n[i], &loop, port, i == 0, i, 3);
	}
	for (int i = 0; i < 3; i++)
		run_until(&loop, &n[i]->ready);
	assert_int_equal(crun__rdzv_publish_steps(&n[0]->r, sa, strlen(sa)), 0);
	assert_int_equal(crun__rdzv_publish_steps(&n[2]->r, sc, strlen(sc)), 0);
	for (int k = 0; k < 3; k++) {
		memset(&f, 0, sizeof(f));
		assert_int_equal(crun__rdzv_fetch_steps(&n[0]->r, got_fetch, &f), 0);
		run_until(&loop, &f.done);
		assert_int_equal(f.status, 0);
		assert_int_equal(f.count, 2);
		assert_string_equal(f.text[0], "");
		assert_string_equal(f.text[1], sc);
		memset(&f, 0, sizeof(f));
		assert_int_equal(crun__rdzv_fetch_steps(&n[2]->r, got_fetch, &f), 0);
		run_until(&loop, &f.done);
		assert_int_equal(f.status, 0);
		assert_int_equal(f.count, 2);
		assert_string_equal(f.text[0], sa);
		assert_string_equal(f.text[1], "");
	}
	/* Once the silent node publishes, it is read too. */
	assert_int_equal(crun__rdzv_publish_steps(&n[1]->r, sc, strlen(sc)), 0);
	memset(&f, 0, sizeof(f));
	assert_int_equal(crun__rdzv_fetch_steps(&n[0]->r, got_fetch, &f), 0);
	run_until(&loop, &f.done);
	assert_int_equal(f.status, 0);
	assert_string_equal(f.text[0], sc);
	/* A reply of a round left behind says so. */
	memset(&f, 0, sizeof(f));
	assert_int_equal(crun__rdzv_fetch_steps(&n[0]->r, got_fetch, &f), 0);
	n[0]->r.gen++;
	run_until(&loop, &f.done);
	assert_int_equal(f.status, -ECANCELED);
	/* Finished with a read outstanding: no callback, nothing leaks. */
	memset(&f, 0, sizeof(f));
	assert_int_equal(crun__rdzv_fetch_steps(&n[2]->r, got_fetch, &f), 0);
	for (int i = 2; i >= 0; i--)
		crun__rdzv_finish(&n[i]->r);
	if (n[0]->server)
		crun__server_destroy(n[0]->server, server_gone, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_false(f.done);
	assert_int_equal(uv_loop_close(&loop), 0);
	for (int i = 0; i < 3; i++)
		free(n[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scenarios),
		cmocka_unit_test(test_work_kinds),
		cmocka_unit_test(test_bad_conf),
		cmocka_unit_test(test_summary_round_trip),
		cmocka_unit_test(test_remote_malformed),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_store_exchange),
		cmocka_unit_test(test_store_node_silent),
		cmocka_unit_test(test_beat_changes),
		cmocka_unit_test(test_job_median),
		cmocka_unit_test(test_median_follows_remote),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

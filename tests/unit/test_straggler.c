/* Unit tests of the straggler detector (src/agent/straggler.c), called
 * directly with made-up beats and times: no loop, no process.
 *
 * `scenarios` lists jobs: per local rank a step time (with an optional
 * phase in which one rank runs at another speed, a beat stride and
 * jitter), the other nodes' summary, and what the detector must say: how
 * many SLOW and RECOVERED events per rank, and by which step the first
 * SLOW came. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/straggler.h"

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
		int n;

		for (int r = 0; r < sc->nlocal; r++) {
			double ms = r == sc->p_rank && k >= sc->p_from && k < sc->p_to ? sc->p_ms
										       : sc->ms[r];
			int stride = sc->stride[r] ? sc->stride[r] : 1;
			int64_t step =
				sc->restart_at && k >= sc->restart_at ? k - sc->restart_at : k;

			if (sc->outlier_every && k % sc->outlier_every == 0)
				ms *= 10;
			t[r] += ms * (1 + sc->jitter * noise(&seed));
			if (k % stride == 0)
				crun__straggler_beat(s, r, step, (uint64_t)t[r]);
		}
		n = crun__straggler_check(s, ev, NR);
		for (int i = 0; i < n; i++) {
			assert_int_equal(ev[i].rank, sc->rank_offset + ev[i].local_rank);
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
	for (int k = 0; k <= 4; k++) {
		crun__straggler_beat(a, 0, k, (uint64_t)k * 100);
		crun__straggler_beat(a, 1, k, (uint64_t)k * 120);
		if (k < 4)
			crun__straggler_beat(a, 2, k, (uint64_t)k * 100);
	}
	assert_true(crun__straggler_fresh(a));
	assert_int_equal(crun__straggler_summary(a, buf, 8), -ENOBUFS);
	n = crun__straggler_summary(a, buf, sizeof(buf));
	assert_string_equal(buf, "steps 1\n10 100000 4\n11 120000 4\n");
	assert_int_equal(n, (int)strlen(buf));
	assert_false(crun__straggler_fresh(a));

	/* b's one rank at 250 ms: 2.1x the median (120 ms) of 100, 120, 250. */
	for (int k = 0; k <= 4; k++)
		crun__straggler_beat(b, 0, k, (uint64_t)k * 250);
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
		crun__straggler_beat(s, 0, k, (uint64_t)k * 500);
	assert_int_equal(crun__straggler_check(s, ev, 1), 0);
	assert_int_equal(crun__straggler_remote_add(s, "steps 1\n", 8, err, sizeof(err)), 0);
	assert_int_equal(crun__straggler_check(s, ev, 1), 0);
	crun__straggler_destroy(s);
}

static void test_format(void **state)
{
	struct crun__straggler_event slow = {CRUN_STRAGGLER_SLOW, 5, 1, 310, 160, 20};
	struct crun__straggler_event back = {CRUN_STRAGGLER_RECOVERED, 5, 1, 170, 160, 20};
	char buf[256];

	(void)state;
	crun__straggler_format(&slow, "host-b", buf, sizeof(buf));
	assert_string_equal(buf, "rank 5 on host-b is a straggler: 0.31 s/step, 1.9x the job's "
				 "median 0.16 s over the last 20 steps");
	crun__straggler_format(&back, "host-b", buf, sizeof(buf));
	assert_string_equal(buf, "rank 5 on host-b is no longer a straggler: 0.17 s/step, 1.1x "
				 "the job's median 0.16 s");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scenarios),
		cmocka_unit_test(test_bad_conf),
		cmocka_unit_test(test_summary_round_trip),
		cmocka_unit_test(test_remote_malformed),
		cmocka_unit_test(test_format),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

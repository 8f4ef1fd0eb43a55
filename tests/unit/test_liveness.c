/* Unit tests of the workers' liveness (src/agent/liveness.c), called
 * directly with made-up times: no loop, no process, no clock.
 *
 * Each case feeds a script of lines and FileTimer requests to two workers
 * and says when the next deadline is, then who is hung at a given time
 * and how crun describes it. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/liveness.h"
#include "common/util.h"

/* One thing a worker does at a time. */
struct op {
	uint64_t t;
	int w;
	const char *line;  /* a heartbeat line, or NULL */
	const char *scope; /* a FileTimer request when line is NULL */
	int64_t expires;   /* its deadline; -1: release */
};

struct lcase {
	const char *name;
	int64_t initial, steady; /* ms */
	double factor;
	const char *sections;
	struct op ops[12];
	uint64_t next;	   /* expected next deadline; 0: none */
	uint64_t at;	   /* check at this time */
	int hung;	   /* the worker found hung; -1: none */
	const char *about; /* its description */
};

#define NONE UINT64_MAX
#define L(t, w, line)               \
	{                           \
		t, w, line, NULL, 0 \
	}
#define T(t, w, scope, exp)            \
	{                              \
		t, w, NULL, scope, exp \
	}

static const struct lcase cases[] = {
	{"silent workers are not watched", 1000, 500, 0, "", {L(0, 0, NULL)}, 0, 100000, -1, NULL},
	{"unknown lines do not make a worker watched",
	 1000,
	 500,
	 0,
	 "",
	 {L(10, 0, "hello there"), L(20, 1, "step x"), L(30, 1, "step")},
	 0,
	 100000,
	 -1,
	 NULL},
	{"steady: no beat for the timeout",
	 10000,
	 2000,
	 0,
	 "",
	 {L(100, 0, "step 1"), L(300, 0, "step 2"), L(500, 1, "beat")},
	 2300,
	 2300,
	 0,
	 "no heartbeat for 2 s, last step 2"},
	{"steady: just before the deadline nobody is hung",
	 10000,
	 2000,
	 0,
	 "",
	 {L(100, 0, "step 1")},
	 2100,
	 2099,
	 -1,
	 NULL},
	{"the second worker, when the first beats",
	 10000,
	 2000,
	 0,
	 "",
	 {L(0, 0, "step 1"), L(0, 1, "step 1"), L(1500, 0, "step 2\r"), L(2100, 0, "step 3  ")},
	 2000,
	 2100,
	 1,
	 "no heartbeat for 2.1 s, last step 1"},
	{"initial: a section begin makes it watched until the first beat",
	 5000,
	 1000,
	 0,
	 "",
	 {L(100, 0, "section begin setup")},
	 5100,
	 5200,
	 0,
	 "no first heartbeat for 5.1 s (initial timeout), no step yet"},
	{"sections alone: the first end makes the worker steady",
	 1000,
	 500,
	 0,
	 "",
	 {L(0, 0, "section begin io"), L(100, 0, "section end io"), L(200, 0, "section begin io"),
	  L(300, 0, "section end io"), L(400, 0, "section begin io"), L(500, 0, "section end io"),
	  L(600, 0, "section begin io"), L(700, 0, "section end io"), L(800, 0, "section begin io"),
	  L(900, 0, "section end io"), L(1000, 0, "section begin io"),
	  L(1100, 0, "section end io")},
	 1600,
	 1599,
	 -1,
	 NULL},
	{"sections alone: the steady timeout from the last end",
	 5000,
	 500,
	 0,
	 "",
	 {L(0, 0, "section begin setup"), L(3000, 0, "section end setup")},
	 3500,
	 3500,
	 0,
	 "no heartbeat for 0.5 s, no step yet"},
	{"initial timeout 0: not watched before the first beat",
	 0,
	 1000,
	 0,
	 "",
	 {L(100, 0, "section begin setup")},
	 0,
	 100000,
	 -1,
	 NULL},
	{"steady timeout 0: beats are not watched",
	 1000,
	 0,
	 0,
	 "",
	 {L(100, 0, "step 5")},
	 0,
	 100000,
	 -1,
	 NULL},
	{"a section with a timeout replaces the steady deadline",
	 5000,
	 1000,
	 0,
	 "checkpoint=3s,eval=10",
	 {L(0, 0, "step 7"), L(500, 0, "section begin checkpoint")},
	 3500,
	 3600,
	 0,
	 "section 'checkpoint' open for 3.1 s (its timeout), last step 7"},
	{"a section that ends restarts the steady clock",
	 5000,
	 1000,
	 0,
	 "checkpoint=3s",
	 {L(0, 0, "step 7"), L(500, 0, "section begin checkpoint"),
	  L(2500, 0, "section end checkpoint")},
	 3500,
	 3400,
	 -1,
	 NULL},
	{"a section without a timeout changes nothing",
	 5000,
	 1000,
	 0,
	 "checkpoint=3s",
	 {L(0, 0, "step 7"), L(100, 0, "section begin data")},
	 1000,
	 1000,
	 0,
	 "no heartbeat for 1 s, last step 7"},
	{"the end of another section is ignored",
	 5000,
	 1000,
	 0,
	 "checkpoint=3s",
	 {L(0, 0, "step 1"), L(100, 0, "section begin checkpoint"), L(200, 0, "section end eval")},
	 3100,
	 3100,
	 0,
	 "section 'checkpoint' open"},
	{"auto: the steady timeout follows the beats",
	 5000,
	 60000,
	 3.0,
	 "",
	 {L(0, 0, "step 1"), L(100, 0, "step 2"), L(200, 0, "step 3"), L(400, 0, "step 4"),
	  L(500, 0, "step 5"), L(600, 0, "step 6")},
	 1600, /* the floor: 3 x 200 ms is below 1 s */
	 1600,
	 0,
	 "no heartbeat for 1 s, last step 6"},
	{"auto: before enough samples, the configured timeout",
	 5000,
	 60000,
	 3.0,
	 "",
	 {L(0, 0, "step 1"), L(100, 0, "step 2")},
	 60100,
	 60099,
	 -1,
	 NULL},
	{"auto: a factor of the longest interval",
	 5000,
	 60000,
	 2.0,
	 "",
	 {L(0, 0, "beat"), L(1000, 0, "beat"), L(3000, 0, "beat"), L(4000, 0, "beat"),
	  L(5000, 0, "beat"), L(6000, 0, "step 9")},
	 10000,
	 10000,
	 0,
	 "no heartbeat for 4 s, last step 9"},
	{"a FileTimer expires",
	 0,
	 0,
	 0,
	 "",
	 {T(0, 1, "train", 2500)},
	 2500,
	 2500,
	 1,
	 "FileTimer 'train' of pid 100 expired, no step yet"},
	{"a released FileTimer does not",
	 0,
	 0,
	 0,
	 "",
	 {T(0, 1, "train", 2500), T(1000, 1, "train", -1)},
	 0,
	 100000,
	 -1,
	 NULL},
	{"a FileTimer renewed later",
	 0,
	 0,
	 0,
	 "",
	 {T(0, 1, "train", 2500), T(1000, 1, "train", 4000), T(1000, 1, "io", 3000)},
	 3000,
	 3500,
	 1,
	 "FileTimer 'io'"},
};

static void run_case(const struct lcase *c)
{
	struct crun__liveness_config cfg = {
		.initial_timeout_ms = c->initial,
		.timeout_ms = c->steady,
		.auto_factor = c->factor,
	};
	struct crun__liveness lv = {0};
	struct crun__liveness_hang h;
	char err[256], about[256];
	uint64_t next;
	bool hung;

	if (crun__liveness_parse_sections(c->sections, &cfg, err, sizeof(err)) < 0)
		fail_msg("%s: sections: %s", c->name, err);
	assert_int_equal(crun__liveness_init(&lv, &cfg, 2), 0);
	crun__liveness_started(&lv, 0);
	crun__liveness_started(&lv, 1);
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(c->ops); i++) {
		const struct op *o = &c->ops[i];
		if (o->line)
			crun__liveness_line(&lv, o->w, o->line, strlen(o->line), o->t);
		else if (o->scope)
			assert_int_equal(crun__liveness_file_timer(&lv, o->w, o->scope, 100, 9,
								   o->expires < 0,
								   (uint64_t)o->expires),
					 0);
	}
	next = crun__liveness_next_deadline(&lv);
	if (next != (c->next ? c->next : NONE))
		fail_msg("%s: next deadline %llu, want %llu", c->name, (unsigned long long)next,
			 (unsigned long long)c->next);
	hung = crun__liveness_check(&lv, c->at, NULL, &h);
	if (hung != (c->hung >= 0) || (hung && h.worker != c->hung))
		fail_msg("%s: hung %d (worker %d), want worker %d", c->name, hung,
			 hung ? h.worker : -1, c->hung);
	if (hung) {
		crun__liveness_describe(&h, about, sizeof(about));
		if (strncmp(about, c->about, strlen(c->about)))
			fail_msg("%s: '%s', want '%s'", c->name, about, c->about);
		/* Declared once: not again, and no longer a deadline. */
		assert_false(crun__liveness_check(&lv, c->at, NULL, &h) && h.worker == c->hung);
	}
	crun__liveness_finish(&lv);
}

static void test_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(cases); i++)
		run_case(&cases[i]);
}

/* Ranks that wait for each other fall silent together: the one to blame
 * is stopped, else stuck in the kernel, else behind, else the first to
 * fall silent; running or asleep tells nothing. */
static void test_blame(void **state)
{
	static const struct {
		const char *name;
		uint64_t beat[3]; /* last beat of workers 0-2 (timeout 2 s) */
		int64_t step[3];
		const char *states;
		uint64_t at;
		int hung;
	} rows[] = {
		{"the earliest", {100, 150, 120}, {7, 7, 7}, NULL, 2100, 0},
		{"the stopped one", {100, 150, 120}, {7, 7, 7}, "SST", 2100, 2},
		{"the one stuck in the kernel", {100, 150, 120}, {7, 7, 7}, "SDS", 2100, 1},
		{"traced beats stuck", {100, 150, 120}, {7, 7, 7}, "tDR", 2100, 0},
		{"running is no more suspect than asleep",
		 {100, 150, 120},
		 {7, 7, 7},
		 "SSR",
		 2100,
		 0},
		{"asleep behind, not the spinning waiters",
		 {100, 150, 120},
		 {7, 6, 7},
		 "RSR",
		 2100,
		 1},
		{"stuck in the kernel beats one behind",
		 {100, 150, 120},
		 {7, 6, 7},
		 "DSR",
		 2100,
		 0},
		{"the one behind", {100, 150, 120}, {7, 6, 7}, "SSS", 2100, 1},
		{"a stopped one beats one behind", {100, 150, 120}, {7, 6, 7}, "SST", 2100, 2},
		{"not one that beat long after", {100, 1500, 120}, {7, 7, 7}, "STS", 2100, 0},
		{"no step: by deadline", {100, 150, 120}, {-1, 3, -1}, "SSS", 2100, 0},
	};
	(void)state;
	for (size_t r = 0; r < CRUN_ARRAY_SIZE(rows); r++) {
		struct crun__liveness_config cfg = {.initial_timeout_ms = 5000, .timeout_ms = 2000};
		struct crun__liveness lv = {0};
		struct crun__liveness_hang h;
		char line[32];

		assert_int_equal(crun__liveness_init(&lv, &cfg, 3), 0);
		for (int i = 0; i < 3; i++) {
			crun__liveness_started(&lv, i);
			if (rows[r].step[i] >= 0)
				snprintf(line, sizeof(line), "step %lld",
					 (long long)rows[r].step[i]);
			else
				snprintf(line, sizeof(line), "beat");
			crun__liveness_line(&lv, i, line, strlen(line), rows[r].beat[i]);
		}
		if (!crun__liveness_check(&lv, rows[r].at, rows[r].states, &h) ||
		    h.worker != rows[r].hung)
			fail_msg("%s: worker %d, want %d", rows[r].name, h.worker, rows[r].hung);
		crun__liveness_finish(&lv);
	}
}

/* An expired FileTimer is dropped, its worker still watched: only the
 * caller can tell whether its pid is still that worker's, and declares
 * the worker hung. */
static void test_file_timer_expiry(void **state)
{
	struct crun__liveness_config cfg = {.initial_timeout_ms = 5000, .timeout_ms = 2000};
	struct crun__liveness lv = {0};
	struct crun__liveness_hang h;

	(void)state;
	assert_int_equal(crun__liveness_init(&lv, &cfg, 2), 0);
	crun__liveness_started(&lv, 0);
	crun__liveness_line(&lv, 0, "step 3", 6, 0);
	assert_int_equal(crun__liveness_file_timer(&lv, 0, "child", 4242, 9, false, 1000), 0);
	assert_int_equal(crun__liveness_next_deadline(&lv), 1000);
	assert_true(crun__liveness_check(&lv, 1000, NULL, &h));
	assert_int_equal(h.worker, 0);
	assert_int_equal(h.why, CRUN__HUNG_FILE_TIMER);
	assert_int_equal(h.pid, 4242);
	assert_int_equal(h.signal, 9);
	/* The pid was gone: the worker goes on, its beats watched. */
	assert_int_equal(crun__liveness_next_deadline(&lv), 2000);
	assert_false(crun__liveness_check(&lv, 1500, NULL, &h));
	crun__liveness_line(&lv, 0, "step 4", 6, 1500);
	assert_int_equal(crun__liveness_next_deadline(&lv), 3500);
	/* A timer of a live process of the worker: declared hung. */
	assert_int_equal(crun__liveness_file_timer(&lv, 0, "step", 4243, 9, false, 2500), 0);
	assert_true(crun__liveness_check(&lv, 2600, NULL, &h));
	crun__liveness_hung(&lv, 0);
	assert_int_equal(crun__liveness_next_deadline(&lv), NONE);
	assert_false(crun__liveness_check(&lv, 100000, NULL, &h));
	crun__liveness_line(&lv, 0, "step 5", 6, 2700);
	assert_int_equal(crun__liveness_next_deadline(&lv), NONE);
	/* Out of range, or not watched: nothing. */
	crun__liveness_hung(&lv, -1);
	crun__liveness_hung(&lv, 2);
	crun__liveness_hung(&lv, 1);
	assert_int_equal(lv.w[1].phase, CRUN__PHASE_GONE);
	crun__liveness_finish(&lv);
}

static void test_parse(void **state)
{
	static const struct {
		const char *line;
		enum crun__liveness_line kind;
		int64_t step;
		const char *name;
		bool has_work; /* STEP: with a WORK of work seconds */
		double work;
	} lines[] = {
		{"step 0", CRUN__LINE_STEP, 0, NULL, false, 0},
		{"step 1184", CRUN__LINE_STEP, 1184, NULL, false, 0},
		{"step 9223372036854775807", CRUN__LINE_STEP, INT64_MAX, NULL, false, 0},
		{"step 9223372036854775808", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step -1", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12x", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 0.041", CRUN__LINE_STEP, 12, NULL, true, 0.041},
		{"step 12 0", CRUN__LINE_STEP, 12, NULL, true, 0},
		{"step 12 3.", CRUN__LINE_STEP, 12, NULL, true, 3},
		{"step 12 .5\r", CRUN__LINE_STEP, 12, NULL, true, 0.5},
		{"step 12 4.1e-2", CRUN__LINE_STEP, 12, NULL, true, 0.041},
		{"step 12 -0.5", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 +0.5", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 0x10", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 inf", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 nan", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 1e999", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 1..2", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 0.5s", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 0.5 1", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12  0.5", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 .", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step 12 e5", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step  0.5", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"step  12", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"beat", CRUN__LINE_BEAT, 0, NULL, false, 0},
		{"beat\r", CRUN__LINE_BEAT, 0, NULL, false, 0},
		{"beats", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"section begin checkpoint", CRUN__LINE_SECTION_BEGIN, 0, "checkpoint", false, 0},
		{"section end eval-1.x", CRUN__LINE_SECTION_END, 0, "eval-1.x", false, 0},
		{"section begin ", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"section begin a b", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"section begin "
		 "a123456789012345678901234567890123456789012345678901234567890123",
		 CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
		{"", CRUN__LINE_UNKNOWN, 0, NULL, false, 0},
	};
	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(lines); i++) {
		int64_t step = -7;
		double work = -7;
		char name[CRUN__LIVENESS_NAME_MAX] = "";
		enum crun__liveness_line k = crun__liveness_parse(
			lines[i].line, strlen(lines[i].line), &step, &work, name);
		double want = lines[i].has_work ? lines[i].work : -1;

		if (k != lines[i].kind)
			fail_msg("'%s': kind %d, want %d", lines[i].line, k, lines[i].kind);
		if (k == CRUN__LINE_STEP)
			assert_true(step == lines[i].step);
		if (k == CRUN__LINE_STEP && fabs(work - want) > 1e-12)
			fail_msg("'%s': work %g, want %g", lines[i].line, work, want);
		if (lines[i].name)
			assert_string_equal(name, lines[i].name);
	}
}

static void test_sections(void **state)
{
	static const struct {
		const char *s;
		int n; /* -1: refused */
	} specs[] = {
		{"", 0},
		{"none", 0},
		{"checkpoint=60", 1},
		{"checkpoint=60s,eval=2m,x.y-z_1=500ms", 3},
		{"checkpoint", -1},
		{"=5", -1},
		{"a=", -1},
		{"a=0", -1},
		{"a=-1", -1},
		{"a=1,a=2", -1},
		{"a b=1", -1},
		{"a=1;b=2", -1},
	};
	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(specs); i++) {
		struct crun__liveness_config cfg = {0};
		char err[256] = "";
		int rc = crun__liveness_parse_sections(specs[i].s, &cfg, err, sizeof(err));

		if (specs[i].n < 0) {
			if (rc != -EINVAL || !err[0])
				fail_msg("'%s' accepted", specs[i].s);
		} else if (rc || cfg.nsections != specs[i].n) {
			fail_msg("'%s': %d sections (%s)", specs[i].s, cfg.nsections, err);
		}
	}
}

static void test_gone_and_bounds(void **state)
{
	struct crun__liveness_config cfg = {.initial_timeout_ms = 100, .timeout_ms = 100};
	struct crun__liveness lv = {0};
	struct crun__liveness_hang h;
	char scope[16];

	(void)state;
	assert_int_equal(crun__liveness_init(&lv, &cfg, 1), 0);
	/* Not started: nothing counts. */
	crun__liveness_line(&lv, 0, "step 1", 6, 0);
	assert_true(crun__liveness_next_deadline(&lv) == NONE);
	crun__liveness_started(&lv, 0);
	assert_int_equal(crun__liveness_line(&lv, 0, "what", 4, 0), CRUN__LINE_UNKNOWN);
	assert_int_equal(lv.w[0].unknown_lines, 1);
	crun__liveness_line(&lv, 0, "step 1", 6, 0);
	assert_true(crun__liveness_next_deadline(&lv) == 100);
	/* Out of range is ignored. */
	crun__liveness_line(&lv, 5, "step 1", 6, 0);
	crun__liveness_line(&lv, -1, "step 1", 6, 0);
	/* Timers are bounded per worker. */
	for (int i = 0; i < CRUN__LIVENESS_MAX_TIMERS; i++) {
		snprintf(scope, sizeof(scope), "s%d", i);
		assert_int_equal(crun__liveness_file_timer(&lv, 0, scope, 1, 9, false, 1000), 0);
	}
	assert_int_equal(crun__liveness_file_timer(&lv, 0, "one more", 1, 9, false, 1000), -ENOSPC);
	/* A FileTimer without a signal: reported, dropped, still watched. */
	crun__liveness_file_timer(&lv, 0, "s0", 1, 0, false, 50);
	assert_true(crun__liveness_check(&lv, 60, NULL, &h));
	assert_int_equal(h.why, CRUN__HUNG_FILE_TIMER);
	assert_int_equal(h.signal, 0);
	assert_int_equal(lv.w[0].ntimers, CRUN__LIVENESS_MAX_TIMERS - 1);
	assert_int_equal(lv.w[0].phase, CRUN__PHASE_STEADY);
	crun__liveness_gone(&lv, 0);
	assert_true(crun__liveness_next_deadline(&lv) == NONE);
	assert_false(crun__liveness_check(&lv, 100000, NULL, &h));
	crun__liveness_finish(&lv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cases),		cmocka_unit_test(test_blame),
		cmocka_unit_test(test_parse),		cmocka_unit_test(test_sections),
		cmocka_unit_test(test_gone_and_bounds), cmocka_unit_test(test_file_timer_expiry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

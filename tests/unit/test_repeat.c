/* Unit tests of the repeat rule (src/agent/repeat.c), table-driven: each
 * row is the previous attempt (its failures and highest step), the
 * current attempt's first failure, step and length, the minimum attempt
 * time and the verdict. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "agent/repeat.h"
#include "common/util.h"

/* A failure of the worker's own, and one by the agent's signal after it
 * wrote its error file. */
#define F(r, code, sig, msg)                                                             \
	{                                                                                \
		.rank = (r), .exit_code = (code), .term_signal = (sig), .message = (msg) \
	}
#define A(r, msg)                                                                       \
	{                                                                               \
		.rank = (r), .term_signal = SIGTERM, .by_agent = true, .message = (msg) \
	}

#define GO CRUN__RESTART
#define CONFIG CRUN__NO_RESTART_CONFIG
#define REPEAT CRUN__NO_RESTART_REPEAT
#define MIN 60000

static const struct row {
	const char *what;
	struct crun__attempt_failure prev[3];
	size_t nprev;
	int64_t prev_step;
	struct crun__attempt_failure cur; /* the first failure */
	int64_t step, ms, min;
	enum crun__restart_verdict want;
} rows[] = {
	/* the first failure of a job is retried; exit 78 never */
	{"first failure", {{0}}, 0, -1, F(1, 1, 0, "boom"), -1, 50, MIN, GO},
	{"first failure, exit 78", {{0}}, 0, -1, F(1, 78, 0, NULL), -1, 50, MIN, CONFIG},
	{"exit 78 after progress",
	 {F(0, 1, 0, NULL)},
	 1,
	 -1,
	 F(0, 78, 0, NULL),
	 5,
	 99999,
	 MIN,
	 CONFIG},
	{"killed by signal 78 is no config error",
	 {{0}},
	 0,
	 -1,
	 F(1, 0, 78, NULL),
	 -1,
	 50,
	 MIN,
	 GO},
	/* the same failure again, quickly and without a beat: stop */
	{"same, no message", {F(0, 2, 0, NULL)}, 1, -1, F(0, 2, 0, NULL), -1, 45, MIN, REPEAT},
	{"same message",
	 {F(1, 1, 0, "disk full")},
	 1,
	 -1,
	 F(1, 1, 0, "disk full"),
	 -1,
	 800,
	 MIN,
	 REPEAT},
	{"same signal",
	 {F(2, 0, SIGSEGV, NULL)},
	 1,
	 -1,
	 F(2, 0, SIGSEGV, NULL),
	 -1,
	 10,
	 MIN,
	 REPEAT},
	{"same, steps did not advance",
	 {F(1, 1, 0, "x")},
	 1,
	 100,
	 F(1, 1, 0, "x"),
	 100,
	 5000,
	 MIN,
	 REPEAT},
	{"same, steps went back",
	 {F(1, 1, 0, "x")},
	 1,
	 100,
	 F(1, 1, 0, "x"),
	 40,
	 5000,
	 MIN,
	 REPEAT},
	/* another failure of the previous attempt than its first */
	{"the previous attempt's second failure",
	 {F(0, 1, 0, "disk full"), F(1, 1, 0, "disk full")},
	 2,
	 -1,
	 F(1, 1, 0, "disk full"),
	 -1,
	 10,
	 MIN,
	 REPEAT},
	{"a rank the agent killed after its error file",
	 {F(1, 1, 0, "disk full"), A(0, "disk full")},
	 2,
	 -1,
	 F(0, 1, 0, "disk full"),
	 -1,
	 10,
	 MIN,
	 REPEAT},
	{"killed by the agent, another message",
	 {F(1, 1, 0, "disk full"), A(0, "peer closed")},
	 2,
	 -1,
	 F(0, 1, 0, "disk full"),
	 -1,
	 10,
	 MIN,
	 GO},
	{"the first failure is never the agent's", {A(0, "x")}, 1, -1, A(0, "x"), -1, 10, MIN, GO},
	/* another way: retried */
	{"another rank", {F(0, 1, 0, "x")}, 1, -1, F(1, 1, 0, "x"), -1, 10, MIN, GO},
	{"another exit code", {F(0, 1, 0, "x")}, 1, -1, F(0, 3, 0, "x"), -1, 10, MIN, GO},
	{"another signal", {F(0, 0, SIGSEGV, NULL)}, 1, -1, F(0, 0, SIGBUS, NULL), -1, 10, MIN, GO},
	{"exit code vs signal", {F(0, 9, 0, NULL)}, 1, -1, F(0, 0, SIGKILL, NULL), -1, 10, MIN, GO},
	{"another message", {F(0, 1, 0, "a")}, 1, -1, F(0, 1, 0, "b"), -1, 10, MIN, GO},
	{"a message only now", {F(0, 1, 0, NULL)}, 1, -1, F(0, 1, 0, "b"), -1, 10, MIN, GO},
	{"the previous attempt ended otherwise", {{0}}, 0, -1, F(0, 1, 0, NULL), -1, 10, MIN, GO},
	/* the same, after progress: retried */
	{"steps advanced", {F(1, 1, 0, "x")}, 1, 100, F(1, 1, 0, "x"), 101, 5000, MIN, GO},
	{"first beats", {F(1, 1, 0, "x")}, 1, -1, F(1, 1, 0, "x"), 0, 5000, MIN, GO},
	{"as long as the minimum", {F(0, 2, 0, NULL)}, 1, -1, F(0, 2, 0, NULL), -1, MIN, MIN, GO},
	{"longer than the minimum, no step",
	 {F(1, 1, 0, "x")},
	 1,
	 7,
	 F(1, 1, 0, "x"),
	 7,
	 70000,
	 MIN,
	 GO},
	{"just short of the minimum",
	 {F(0, 2, 0, NULL)},
	 1,
	 -1,
	 F(0, 2, 0, NULL),
	 -1,
	 MIN - 1,
	 MIN,
	 REPEAT},
	/* a minimum of 0: the rule is off, every attempt is progress */
	{"minimum 0, short", {F(0, 2, 0, NULL)}, 1, -1, F(0, 2, 0, NULL), -1, 1, 0, GO},
	{"minimum 0, steps", {F(0, 2, 0, NULL)}, 1, 3, F(0, 2, 0, NULL), 4, 10, 0, GO},
};

static const char *name(enum crun__restart_verdict v)
{
	return v == GO ? "restart" : v == CONFIG ? "config" : "repeat";
}

static void test_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(rows); i++) {
		const struct row *r = &rows[i];
		struct crun__attempt_failure prev[3], cur = r->cur;
		struct crun__attempt p = {.v = prev, .n = r->nprev, .max_step = r->prev_step};
		struct crun__attempt c = {
			.v = &cur, .n = 1, .max_step = r->step, .duration_ms = r->ms};
		enum crun__restart_verdict got;

		for (size_t k = 0; k < 3; k++)
			prev[k] = r->prev[k];
		got = crun__restart_verdict(&p, &c, r->min);
		if (got != r->want)
			fail_msg("row %zu (%s): %s, want %s", i, r->what, name(got), name(r->want));
	}
}

/* No failure in this attempt: nothing to judge. The record copies
 * messages and empties itself. */
static void test_attempt(void **state)
{
	struct crun__attempt a = {.max_step = -1}, none = {.max_step = -1};
	char msg[] = "disk full";
	struct crun__attempt_failure f = F(3, 1, 0, msg);

	(void)state;
	assert_int_equal(crun__restart_verdict(&none, &none, MIN), GO);
	assert_int_equal(crun__attempt_add(&a, &f), 0);
	msg[0] = 'D';
	assert_string_equal(a.v[0].message, "disk full");
	assert_int_equal(crun__restart_verdict(&none, &a, MIN), GO);
	assert_int_equal(crun__restart_verdict(&a, &a, MIN), REPEAT);
	for (int i = 0; i < 20; i++)
		assert_int_equal(crun__attempt_add(&a, &f), 0);
	assert_int_equal(a.n, 21);
	crun__attempt_clear(&a);
	assert_int_equal(a.n, 0);
	assert_int_equal(a.max_step, -1);
	assert_int_equal(crun__restart_verdict(&a, &a, MIN), GO);
	crun__attempt_finish(&a);
	assert_null(a.v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_attempt),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

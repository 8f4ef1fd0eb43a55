/* Unit tests of the repeat rule (src/agent/repeat.c), table-driven: each
 * row is the previous attempt's first failure, the current one's, the
 * minimum attempt time and the verdict. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "agent/repeat.h"
#include "common/util.h"

#define FAIL(r, code, sig, msg, step, ms)                                               \
	{                                                                               \
		.failed = true, .rank = (r), .exit_code = (code), .term_signal = (sig), \
		.message = (msg), .max_step = (step), .duration_ms = (ms)               \
	}
#define NONE                                    \
	{                                       \
		.failed = false, .max_step = -1 \
	}

#define GO CRUN__RESTART
#define CONFIG CRUN__NO_RESTART_CONFIG
#define REPEAT CRUN__NO_RESTART_REPEAT

static const struct row {
	const char *what;
	struct crun__attempt_failure prev, cur;
	int64_t min_ms;
	enum crun__restart_verdict want;
} rows[] = {
	/* the first failure of a job is retried */
	{"first failure", NONE, FAIL(1, 1, 0, "boom", -1, 50), 60000, GO},
	{"first failure, exit 78", NONE, FAIL(1, 78, 0, NULL, -1, 50), 60000, CONFIG},
	{"exit 78 after a long run", FAIL(0, 1, 0, NULL, -1, 9), FAIL(0, 78, 0, NULL, 5, 99999),
	 60000, CONFIG},
	{"killed by signal 78 is no config error", NONE, FAIL(1, 0, 78, NULL, -1, 50), 60000, GO},
	{"no failure here", FAIL(1, 1, 0, NULL, -1, 50), NONE, 60000, GO},
	/* the same failure again, quickly and without a beat: stop */
	{"same, no message", FAIL(0, 2, 0, NULL, -1, 40), FAIL(0, 2, 0, NULL, -1, 45), 60000,
	 REPEAT},
	{"same message", FAIL(1, 1, 0, "disk full", -1, 900), FAIL(1, 1, 0, "disk full", -1, 800),
	 60000, REPEAT},
	{"same signal", FAIL(2, 0, SIGSEGV, NULL, -1, 10), FAIL(2, 0, SIGSEGV, NULL, -1, 10), 60000,
	 REPEAT},
	{"same, steps did not advance", FAIL(1, 1, 0, "x", 100, 5000),
	 FAIL(1, 1, 0, "x", 100, 5000), 60000, REPEAT},
	{"same, steps went back", FAIL(1, 1, 0, "x", 100, 5000), FAIL(1, 1, 0, "x", 40, 5000),
	 60000, REPEAT},
	/* another way: retried */
	{"another rank", FAIL(0, 1, 0, "x", -1, 10), FAIL(1, 1, 0, "x", -1, 10), 60000, GO},
	{"another exit code", FAIL(0, 1, 0, "x", -1, 10), FAIL(0, 3, 0, "x", -1, 10), 60000, GO},
	{"another signal", FAIL(0, 0, SIGSEGV, NULL, -1, 10), FAIL(0, 0, SIGBUS, NULL, -1, 10),
	 60000, GO},
	{"exit code vs signal", FAIL(0, 9, 0, NULL, -1, 10), FAIL(0, 0, SIGKILL, NULL, -1, 10),
	 60000, GO},
	{"another message", FAIL(0, 1, 0, "a", -1, 10), FAIL(0, 1, 0, "b", -1, 10), 60000, GO},
	{"a message only now", FAIL(0, 1, 0, NULL, -1, 10), FAIL(0, 1, 0, "b", -1, 10), 60000, GO},
	{"the previous attempt ended otherwise", NONE, FAIL(0, 1, 0, NULL, -1, 10), 60000, GO},
	/* the same, after progress: retried */
	{"steps advanced", FAIL(1, 1, 0, "x", 100, 5000), FAIL(1, 1, 0, "x", 101, 5000), 60000, GO},
	{"first beats", FAIL(1, 1, 0, "x", -1, 5000), FAIL(1, 1, 0, "x", 0, 5000), 60000, GO},
	{"as long as the minimum", FAIL(0, 2, 0, NULL, -1, 10), FAIL(0, 2, 0, NULL, -1, 60000),
	 60000, GO},
	{"longer than the minimum, no step", FAIL(1, 1, 0, "x", 7, 5000),
	 FAIL(1, 1, 0, "x", 7, 70000), 60000, GO},
	{"just short of the minimum", FAIL(0, 2, 0, NULL, -1, 10), FAIL(0, 2, 0, NULL, -1, 59999),
	 60000, REPEAT},
	/* a minimum of 0: time is no progress, only steps are */
	{"minimum 0, long", FAIL(0, 2, 0, NULL, -1, 10), FAIL(0, 2, 0, NULL, -1, 999999), 0,
	 REPEAT},
	{"minimum 0, steps", FAIL(0, 2, 0, NULL, 3, 10), FAIL(0, 2, 0, NULL, 4, 10), 0, GO},
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
		enum crun__restart_verdict got =
			crun__restart_verdict(&r->prev, &r->cur, r->min_ms);

		if (got != r->want)
			fail_msg("row %zu (%s): %s, want %s", i, r->what, name(got), name(r->want));
	}
}

static void test_edges(void **state)
{
	struct crun__attempt_failure a = FAIL(0, 1, 0, "x", -1, 10);

	(void)state;
	assert_int_equal(crun__restart_verdict(NULL, NULL, 1000), GO);
	assert_int_equal(crun__restart_verdict(NULL, &a, 1000), GO);
	assert_int_equal(crun__restart_verdict(&a, &a, 1000), REPEAT);
	/* a failure is never "the same" as no failure */
	{
		struct crun__attempt_failure none = NONE;

		assert_false(crun__failure_same(&none, &none));
		assert_false(crun__failure_same(&a, &none));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_edges),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

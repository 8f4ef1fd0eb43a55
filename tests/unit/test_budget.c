/* The store server's budgets and quotas (rendezvous/budget.h), called
 * directly: counts and times in, decisions out. The edge that carries
 * them out is test_server.c's and the attack tests'. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rendezvous/budget.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static void test_default(void **state)
{
	(void)state;
	/* a quarter of physical memory */
	assert_int_equal(crun__budget_default(16 * GiB, 0), 4 * GiB);
	/* the cgroup's limit when lower; "none" ignored */
	assert_int_equal(crun__budget_default(16 * GiB, 2 * GiB), 512 * MiB);
	assert_int_equal(crun__budget_default(16 * GiB, 64 * GiB), 4 * GiB);
	assert_int_equal(crun__budget_default(16 * GiB, UINT64_MAX), 4 * GiB);
	/* unknown memory counts as 4 GiB; never below the floor */
	assert_int_equal(crun__budget_default(0, 0), 1 * GiB);
	assert_int_equal(crun__budget_default(1 * MiB, 0), CRUN__BUDGET_MIN);
}

static void test_charge(void **state)
{
	struct crun__budget b = {.limit = 64 * MiB};

	(void)state;
	/* ten connections growing a 60 MiB frame: the first fits, the second
	 * only up to what is left */
	assert_true(crun__budget_fits(&b, 0, 60 * MiB));
	crun__budget_move(&b, 0, 60 * MiB);
	assert_false(crun__budget_fits(&b, 0, 60 * MiB));
	assert_true(crun__budget_fits(&b, 0, 4 * MiB));
	assert_false(crun__budget_fits(&b, 0, 4 * MiB + 1));
	assert_int_equal(crun__budget_room(&b, 0), 4 * MiB);
	/* a holder's own bytes are its room too; shrinking always fits */
	assert_int_equal(crun__budget_room(&b, 60 * MiB), 64 * MiB);
	assert_true(crun__budget_fits(&b, 60 * MiB, 64 * MiB));
	assert_true(crun__budget_fits(&b, 60 * MiB, 1));
	crun__budget_move(&b, 60 * MiB, 0);
	assert_int_equal(b.used, 0);
	/* over the limit (an error frame past it): nothing more fits, no
	 * wrap-around */
	crun__budget_move(&b, 0, 64 * MiB + 100);
	assert_false(crun__budget_fits(&b, 0, 1));
	assert_int_equal(crun__budget_room(&b, 0), 0);
}

static void test_admit(void **state)
{
	static const struct {
		struct crun__admit_counts in;
		enum crun__admit want;
	} cases[] = {
		/* room everywhere */
		{{0, 4096, 0, 256, 0, 32}, CRUN__ADMIT},
		{{100, 4096, 31, 256, 31, 32}, CRUN__ADMIT},
		/* its source is full: its own oldest goes, not another's */
		{{100, 4096, 32, 256, 32, 32}, CRUN__ADMIT_EVICT_SOURCE},
		/* all unauthenticated slots full: the oldest of any source */
		{{300, 4096, 256, 256, 3, 32}, CRUN__ADMIT_EVICT_OLDEST},
		/* max_connections full with some unauthenticated: one of them */
		{{4096, 4096, 1, 256, 0, 32}, CRUN__ADMIT_EVICT_OLDEST},
		/* every slot authenticated: refused, nobody evicted */
		{{4096, 4096, 0, 256, 0, 32}, CRUN__ADMIT_REFUSE},
		/* the smallest server */
		{{1, 1, 0, 1, 0, 1}, CRUN__ADMIT_REFUSE},
		{{1, 1, 1, 1, 1, 1}, CRUN__ADMIT_EVICT_SOURCE},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(crun__admit_preauth(&cases[i].in), cases[i].want);
}

static void test_clamp(void **state)
{
	uint32_t pre = 256, src = 32;

	(void)state;
	crun__admit_clamp(4096, 1ull << 30, 8460, &pre, &src);
	assert_int_equal(pre, 256);
	assert_int_equal(src, 32);
	/* never more than half of max_connections: the rest is for
	 * authenticated clients */
	crun__admit_clamp(100, 1ull << 30, 8460, &pre, &src);
	assert_int_equal(pre, 50);
	assert_int_equal(src, 32);
	crun__admit_clamp(10, 1ull << 30, 8460, &pre, &src);
	assert_int_equal(pre, 5);
	assert_int_equal(src, 5);
	pre = 0;
	src = 0;
	crun__admit_clamp(1, 1ull << 30, 8460, &pre, &src);
	assert_int_equal(pre, 1);
	assert_int_equal(src, 1);
	/* never more than a quarter of the budget: 2 MiB / 4 / 8460 = 61 */
	pre = 1024;
	src = 256;
	crun__admit_clamp(4096, 2u << 20, 8460, &pre, &src);
	assert_int_equal(pre, 61);
	assert_int_equal(src, 61);
	pre = 5;
	crun__admit_clamp(4096, 1000, 8460, &pre, &src);
	assert_int_equal(pre, 1);
	assert_int_equal(src, 1);
}

static void test_request_ms(void **state)
{
	(void)state;
	assert_int_equal(crun__budget_request_ms(30000, 0), 30000);
	assert_int_equal(crun__budget_request_ms(30000, 100), 30000);
	/* 64 MiB at 1 MiB/s at least */
	assert_int_equal(crun__budget_request_ms(30000, 64 * MiB), 30000 + 64000);
	assert_int_equal(crun__budget_request_ms(0, 64 * MiB), UINT64_MAX);
}

static void test_idle(void **state)
{
	struct crun__idle_state s = {.now_ms = 10000, .last_ms = 4000, .timeout_ms = 6000};

	(void)state;
	assert_true(crun__idle_expired(&s));
	s.now_ms = 9999;
	assert_false(crun__idle_expired(&s));
	s.now_ms = 10000;
	/* anything pending or owned keeps it */
	s.partial = true;
	assert_false(crun__idle_expired(&s));
	s.partial = false;
	s.output = true;
	assert_false(crun__idle_expired(&s));
	s.output = false;
	s.subscribed = true;
	assert_false(crun__idle_expired(&s));
	s.subscribed = false;
	s.owns_keys = true;
	assert_false(crun__idle_expired(&s));
	s.owns_keys = false;
	s.keepalive = true;
	assert_false(crun__idle_expired(&s));
	s.keepalive = false;
	s.timeout_ms = 0;
	assert_false(crun__idle_expired(&s));
	/* a clock behind the last frame is not idle */
	s.timeout_ms = 1;
	s.last_ms = 20000;
	assert_false(crun__idle_expired(&s));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default),	   cmocka_unit_test(test_charge),
		cmocka_unit_test(test_admit),	   cmocka_unit_test(test_clamp),
		cmocka_unit_test(test_request_ms), cmocka_unit_test(test_idle),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

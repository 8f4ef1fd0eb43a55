/* Unit tests of the Prometheus text writer (src/common/prom.c), the
 * process figures (src/common/procstat.c) and the store's metrics
 * (src/rendezvous/server_metrics.c): exact text where the format decides,
 * the format checker (prom_check.h) over whole renderings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "common/procstat.h"
#include "common/prom.h"
#include "rendezvous/server_metrics.h"

#include "prom_check.h"

static void test_double(void **state)
{
	static const struct {
		double v;
		const char *want;
	} rows[] = {
		{0, "0"},
		{1, "1"},
		{-2.5, "-2.5"},
		{0.1, "0.1"},
		{1e21, "1e+21"},
		{123456789012.0, "123456789012"},
		{1.0 / 3, "0.3333333333333333"},
		{NAN, "NaN"},
		{INFINITY, "+Inf"},
		{-INFINITY, "-Inf"},
	};
	char buf[40];

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		crun__prom_double(buf, sizeof(buf), rows[i].v);
		assert_string_equal(buf, rows[i].want);
	}
}

static void test_family_and_labels(void **state)
{
	struct crun__prom p;
	int n;

	(void)state;
	crun__prom_init(&p);
	crun__prom_family(&p, "crun_x_total", "counter", "a \\ back\nslash");
	crun__prom_sample(&p, "crun_x_total", 2, "a", "q\"uo\\te\nnl", "b", "", NULL);
	crun__prom_sample_u64(&p, "crun_x_total", UINT64_MAX, NULL);
	crun__prom_family(&p, "crun_y", "gauge", "with \"quotes\"");
	crun__prom_sample(&p, "crun_y", NAN, "k", "v", NULL);
	assert_false(crun__prom_failed(&p));
	assert_string_equal(p.buf, "# HELP crun_x_total a \\\\ back\\nslash\n"
				   "# TYPE crun_x_total counter\n"
				   "crun_x_total{a=\"q\\\"uo\\\\te\\nnl\",b=\"\"} 2\n"
				   "crun_x_total 18446744073709551615\n"
				   "# HELP crun_y with \"quotes\"\n"
				   "# TYPE crun_y gauge\n"
				   "crun_y{k=\"v\"} NaN\n");
	assert_null(prom_check(p.buf, &n));
	assert_int_equal(n, 3);
	assert_int_equal(p.len, strlen(p.buf));
	crun__prom_finish(&p);
}

static void test_histogram(void **state)
{
	static const double bounds[] = {0.5, 1, 5};
	static const uint64_t counts[] = {1, 0, 2};
	struct crun__prom p;
	int n;

	(void)state;
	crun__prom_init(&p);
	crun__prom_family(&p, "crun_h_seconds", "histogram", "h");
	crun__prom_histogram(&p, "crun_h_seconds", bounds, counts, 3, 9.25, 4);
	assert_string_equal(p.buf, "# HELP crun_h_seconds h\n"
				   "# TYPE crun_h_seconds histogram\n"
				   "crun_h_seconds_bucket{le=\"0.5\"} 1\n"
				   "crun_h_seconds_bucket{le=\"1\"} 1\n"
				   "crun_h_seconds_bucket{le=\"5\"} 3\n"
				   "crun_h_seconds_bucket{le=\"+Inf\"} 4\n"
				   "crun_h_seconds_sum 9.25\n"
				   "crun_h_seconds_count 4\n");
	assert_null(prom_check(p.buf, &n));
	crun__prom_finish(&p);
}

/* The checker itself must catch what it is there for. */
static void test_checker(void **state)
{
	static const char *const bad[] = {
		"crun_a 1\n",					      /* no family */
		"# HELP crun_a x\n# TYPE crun_a counter\ncrun_a 1\n", /* counter w/o _total */
		"# HELP crun_a x\n# TYPE crun_a gauge\ncrun_b 1\n",   /* another name */
		"# HELP crun_a x\n# TYPE crun_a gauge\ncrun_a{k=\"v} 1\n",
		"# HELP crun_a x\n# TYPE crun_a gauge\ncrun_a{k=\"\\x\"} 1\n",
		"# HELP crun_a x\n# TYPE crun_a gauge\ncrun_a one\n",
		"# HELP crun_a x\n# TYPE crun_a gauge\ncrun_a 1",
		"# HELP a x\n# TYPE a gauge\na 1\n", /* no prefix */
		"# HELP crun_a x\n# TYPE crun_a gauge\n# HELP crun_a x\n# TYPE crun_a gauge\n",
	};
	int n;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (!prom_check(bad[i], &n))
			fail_msg("the checker passed bad text %zu", i);
}

static void test_procstat(void **state)
{
	struct crun__procstat s = {.rss_bytes = 4096 * 3,
				   .open_fds = 7,
				   .max_fds = -1,
				   .cpu_seconds = 0.25,
				   .start_time_s = 1700000000.5};
	struct crun__prom p;
	int n;

	(void)state;
	assert_int_equal(crun__procstat_parse_statm("100 3 2 1 0 5 0\n", 4096), 4096 * 3);
	assert_int_equal(crun__procstat_parse_statm("garbage", 4096), -1);
	crun__prom_init(&p);
	crun__procstat_render(&p, &s);
	assert_null(prom_check(p.buf, &n));
	assert_int_equal(n, 4);
	assert_true(prom_value(p.buf, "process_resident_memory_bytes") == 12288);
	assert_true(prom_value(p.buf, "process_open_fds") == 7);
	assert_false(prom_has(p.buf, "process_max_fds"));
	assert_true(prom_value(p.buf, "process_start_time_seconds") == 1700000000.5);
	crun__prom_finish(&p);

	/* This process's own figures are there and plausible. */
	crun__procstat_read(&s, 1700000000000ull);
	assert_true(s.rss_bytes > 0);
	assert_true(s.open_fds >= 3);
	assert_true(s.start_time_s == 1700000000.0);
}

static void test_server_metrics(void **state)
{
	struct crun__server_stats st;
	struct crun__prom p;
	int n;

	(void)state;
	memset(&st, 0, sizeof(st));
	st.accepted = 12;
	st.requests[2] = 5;  /* SET */
	st.requests[17] = 2; /* RDZV_JOIN */
	st.tcpstore_requests[1] = 3;
	st.bytes_received = 1000;
	st.bytes_sent = 2000;
	st.refusals[CRUN_SRV_REF_AUTH] = 4;
	st.rounds_formed = 3;
	st.round_seconds_sum = 42.5;
	st.round_buckets[0] = 1; /* <= 0.1 s */
	st.round_buckets[5] = 1; /* <= 10 s */
	/* one over the last bound: +Inf only */

	crun__prom_init(&p);
	crun__metrics_build_info(&p, "1.2.3");
	crun__server_metrics_render(&p, &st, 7);
	assert_false(crun__prom_failed(&p));
	if (prom_check(p.buf, &n))
		fail_msg("%s", prom_check(p.buf, &n));
	assert_true(prom_value(p.buf, "crun_build_info{version=\"1.2.3\"}") == 1);
	assert_true(prom_value(p.buf, "crun_store_connections") == 7);
	assert_true(prom_value(p.buf, "crun_store_connections_accepted_total") == 12);
	assert_true(prom_value(p.buf, "crun_store_requests_total{protocol=\"crun\",op=\"set\"}") ==
		    5);
	assert_true(prom_value(p.buf,
			       "crun_store_requests_total{protocol=\"crun\",op=\"rdzv_join\"}") ==
		    2);
	assert_true(prom_value(p.buf, "crun_store_requests_total{protocol=\"crun\",op=\"get\"}") ==
		    0);
	assert_true(prom_value(p.buf,
			       "crun_store_requests_total{protocol=\"tcpstore\",op=\"set\"}") == 3);
	assert_true(prom_value(p.buf, "crun_store_received_bytes_total") == 1000);
	assert_true(prom_value(p.buf, "crun_store_sent_bytes_total") == 2000);
	assert_true(prom_value(p.buf, "crun_store_refusals_total{reason=\"auth\"}") == 4);
	assert_true(prom_value(p.buf, "crun_store_refusals_total{reason=\"out_of_fds\"}") == 0);
	assert_true(prom_value(p.buf, "crun_rdzv_rounds_formed_total") == 3);
	assert_true(prom_value(p.buf, "crun_rdzv_round_formation_seconds_bucket{le=\"0.1\"}") == 1);
	assert_true(prom_value(p.buf, "crun_rdzv_round_formation_seconds_bucket{le=\"5\"}") == 1);
	assert_true(prom_value(p.buf, "crun_rdzv_round_formation_seconds_bucket{le=\"10\"}") == 2);
	assert_true(prom_value(p.buf, "crun_rdzv_round_formation_seconds_bucket{le=\"1800\"}") ==
		    2);
	assert_true(prom_value(p.buf, "crun_rdzv_round_formation_seconds_bucket{le=\"+Inf\"}") ==
		    3);
	assert_true(prom_value(p.buf, "crun_rdzv_round_formation_seconds_sum") == 42.5);
	for (int r = 0; r < CRUN_SRV_NREFUSALS; r++)
		assert_string_not_equal(crun__server_refusal_name((enum crun__server_refusal)r),
					"unknown");
	crun__prom_finish(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_double),	  cmocka_unit_test(test_family_and_labels),
		cmocka_unit_test(test_histogram), cmocka_unit_test(test_checker),
		cmocka_unit_test(test_procstat),  cmocka_unit_test(test_server_metrics),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

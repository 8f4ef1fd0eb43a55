/* Unit tests of the agent's metrics (src/agent/metrics.c): a monitor
 * filled as a running job's would be, rendered and read back; unknown
 * figures left out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "agent/metrics.h"
#include "agent/monitor.h"
#include "common/prom.h"

#include "prom_check.h"

#define NOW 1700000100000ull

static void render(const struct crun__monitor *m, struct crun__prom *p)
{
	const char *why;
	int n;

	crun__prom_init(p);
	crun__agent_metrics_render(p, m, NOW);
	assert_false(crun__prom_failed(p));
	why = prom_check(p->buf, &n);
	if (why)
		fail_msg("%s\n%s", why, p->buf);
}

/* A fresh monitor: job-wide families, no per-rank or GPU one. */
static void test_empty(void **state)
{
	struct crun__monitor m;
	struct crun__prom p;

	(void)state;
	assert_int_equal(crun__monitor_init(&m, "job-1", "node\"a", 2, 3, NOW - 5000), 0);
	render(&m, &p);
	assert_true(prom_value(p.buf, "crun_job_info{run_id=\"job-1\",node=\"node\\\"a\"}") == 1);
	assert_true(prom_value(p.buf, "crun_restarts_total{cause=\"worker_failed\"}") == 0);
	assert_true(prom_value(p.buf, "crun_workers{state=\"none\"}") == 2);
	assert_true(prom_value(p.buf, "crun_max_restarts") == 3);
	assert_false(prom_has(p.buf, "crun_round"));
	assert_false(prom_has(p.buf, "crun_worker_heartbeat_age_seconds"));
	assert_false(prom_has(p.buf, "crun_worker_step"));
	assert_false(prom_has(p.buf, "crun_gpu_info"));
	assert_false(prom_has(p.buf, "crun_gpu_utilization_ratio"));
	crun__prom_finish(&p);
	crun__monitor_finish(&m);
}

static void test_filled(void **state)
{
	struct crun__mon_gpu g[2];
	struct crun__monitor m;
	struct crun__prom p;

	(void)state;
	assert_int_equal(crun__monitor_init(&m, "job-1", "node-a", 3, 5, NOW - 60000), 0);
	m.round = 4;
	m.nnodes = 2;
	m.world_size = 6;
	m.restart_count = 2;
	m.rounds = 4;
	m.rounds_seconds_sum = 10.5;
	m.restarts[CRUN_MON_CAUSE_WORKER_FAILED] = 2;
	m.restarts[CRUN_MON_CAUSE_NODE_JOINED] = 1;
	m.events[CRUN_MON_RESTART] = 3;
	m.worker_exits[CRUN_MON_W_FAILED] = 2;
	m.store_lost = true;
	m.gpu_wait_seconds_sum = 1.5;
	/* Rank 3 running, beat 2.5 s ago at step 120, paced; rank 4 running,
	 * never beat; rank 5 failed with its last step known. */
	m.workers[0] = (struct crun__mon_worker){.local_rank = 0,
						 .rank = 3,
						 .pid = 100,
						 .state = CRUN_MON_W_RUNNING,
						 .last_beat_ms = NOW - 2500,
						 .step = 120,
						 .step_s = 0.25,
						 .straggler_ratio = 1.6,
						 .gpu = 1};
	m.workers[1] = (struct crun__mon_worker){.local_rank = 1,
						 .rank = 4,
						 .pid = 101,
						 .state = CRUN_MON_W_RUNNING,
						 .step = -1,
						 .gpu = -1};
	m.workers[2] = (struct crun__mon_worker){.local_rank = 2,
						 .rank = 5,
						 .state = CRUN_MON_W_FAILED,
						 .last_beat_ms = NOW - 1000,
						 .step = 7,
						 .gpu = 0};
	memset(g, 0, sizeof(g));
	g[0] = (struct crun__mon_gpu){.index = 0,
				      .uuid = "GPU-aaaa",
				      .name = "NVIDIA H200",
				      .util = 0.75,
				      .mem_used = 1000,
				      .mem_total = 4000,
				      .temp_c = 61,
				      .power_w = 350.5,
				      .ecc_corrected = 2,
				      .ecc_uncorrected = 0,
				      .xid_total = 1,
				      .sampled_ms = NOW};
	/* The second: NVML gave its memory only. */
	g[1] = (struct crun__mon_gpu){.index = 3,
				      .uuid = "GPU-bbbb",
				      .name = "NVIDIA H200",
				      .util = -1,
				      .mem_used = 10,
				      .mem_total = 20,
				      .temp_c = -1,
				      .power_w = -1,
				      .ecc_corrected = UINT64_MAX,
				      .ecc_uncorrected = UINT64_MAX,
				      .xid_total = UINT64_MAX,
				      .sampled_ms = NOW};
	assert_int_equal(crun__monitor_set_gpus(&m, g, 2), 0);
	render(&m, &p);

	assert_true(prom_value(p.buf, "crun_round") == 4);
	assert_true(prom_value(p.buf, "crun_nodes") == 2);
	assert_true(prom_value(p.buf, "crun_world_size") == 6);
	assert_true(prom_value(p.buf, "crun_rounds_total") == 4);
	assert_true(prom_value(p.buf, "crun_round_join_seconds_sum") == 10.5);
	assert_true(prom_value(p.buf, "crun_round_join_seconds_count") == 4);
	assert_true(prom_value(p.buf, "crun_restarts_total{cause=\"worker_failed\"}") == 2);
	assert_true(prom_value(p.buf, "crun_restarts_total{cause=\"node_joined\"}") == 1);
	assert_true(prom_value(p.buf, "crun_restarts_total{cause=\"store_lost\"}") == 0);
	assert_true(prom_value(p.buf, "crun_job_restarts") == 2);
	assert_true(prom_value(p.buf, "crun_events_total{event=\"restart\"}") == 3);
	assert_true(prom_value(p.buf, "crun_worker_exits_total{state=\"failed\"}") == 2);
	assert_false(prom_has(p.buf, "crun_worker_exits_total{state=\"none\"}"));
	assert_true(prom_value(p.buf, "crun_store_lost") == 1);
	assert_true(prom_value(p.buf, "crun_gpu_wait_seconds_total") == 1.5);
	assert_true(prom_value(p.buf, "crun_workers{state=\"running\"}") == 2);
	assert_true(prom_value(p.buf, "crun_workers{state=\"failed\"}") == 1);
	assert_true(prom_value(p.buf, "crun_workers{state=\"none\"}") == 0);

	/* Per rank: only what is known. */
	assert_true(prom_value(p.buf, "crun_worker_heartbeat_age_seconds{rank=\"3\","
				      "local_rank=\"0\"}") == 2.5);
	assert_false(prom_has(p.buf, "crun_worker_heartbeat_age_seconds{rank=\"4\""));
	assert_false(prom_has(p.buf, "crun_worker_heartbeat_age_seconds{rank=\"5\""));
	assert_true(prom_value(p.buf, "crun_worker_step{rank=\"3\",local_rank=\"0\"}") == 120);
	assert_true(prom_value(p.buf, "crun_worker_step{rank=\"5\",local_rank=\"2\"}") == 7);
	assert_false(prom_has(p.buf, "crun_worker_step{rank=\"4\""));
	assert_true(prom_value(p.buf, "crun_worker_step_seconds{rank=\"3\",local_rank=\"0\"}") ==
		    0.25);
	assert_true(prom_value(p.buf, "crun_worker_straggler_ratio{rank=\"3\",local_rank=\"0\"}") ==
		    1.6);
	assert_false(prom_has(p.buf, "crun_worker_straggler_ratio{rank=\"4\""));
	assert_true(prom_value(p.buf, "crun_worker_gpu_info{rank=\"3\",local_rank=\"0\",gpu=\"3\","
				      "uuid=\"GPU-bbbb\"}") == 1);
	assert_true(prom_value(p.buf, "crun_worker_gpu_info{rank=\"5\",local_rank=\"2\",gpu=\"0\","
				      "uuid=\"GPU-aaaa\"}") == 1);

	/* Per GPU: every field of the first, the memory of the second. */
	assert_true(prom_value(p.buf, "crun_gpu_info{gpu=\"0\",uuid=\"GPU-aaaa\","
				      "name=\"NVIDIA H200\"}") == 1);
	assert_true(prom_value(p.buf, "crun_gpu_utilization_ratio{gpu=\"0\",uuid=\"GPU-aaaa\"}") ==
		    0.75);
	assert_false(prom_has(p.buf, "crun_gpu_utilization_ratio{gpu=\"3\""));
	assert_true(prom_value(p.buf, "crun_gpu_memory_used_bytes{gpu=\"3\",uuid=\"GPU-bbbb\"}") ==
		    10);
	assert_true(prom_value(p.buf, "crun_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-aaaa\"}") ==
		    4000);
	assert_true(prom_value(p.buf,
			       "crun_gpu_temperature_celsius{gpu=\"0\",uuid=\"GPU-aaaa\"}") == 61);
	assert_true(prom_value(p.buf, "crun_gpu_power_watts{gpu=\"0\",uuid=\"GPU-aaaa\"}") ==
		    350.5);
	assert_true(prom_value(p.buf, "crun_gpu_ecc_corrected_errors_total{gpu=\"0\","
				      "uuid=\"GPU-aaaa\"}") == 2);
	assert_true(prom_value(p.buf, "crun_gpu_ecc_uncorrected_errors_total{gpu=\"0\","
				      "uuid=\"GPU-aaaa\"}") == 0);
	assert_false(prom_has(p.buf, "crun_gpu_ecc_corrected_errors_total{gpu=\"3\""));
	assert_true(prom_value(p.buf, "crun_gpu_xid_errors_total{gpu=\"0\",uuid=\"GPU-aaaa\"}") ==
		    1);
	assert_false(prom_has(p.buf, "crun_gpu_xid_errors_total{gpu=\"3\""));
	crun__prom_finish(&p);

	/* A family none of whose GPUs know the field is left out whole. */
	g[0] = g[1];
	g[0].index = 1;
	assert_int_equal(crun__monitor_set_gpus(&m, g, 2), 0);
	render(&m, &p);
	assert_false(prom_has(p.buf, "crun_gpu_power_watts"));
	assert_true(prom_has(p.buf, "crun_gpu_memory_used_bytes"));
	crun__prom_finish(&p);
	crun__monitor_finish(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_filled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

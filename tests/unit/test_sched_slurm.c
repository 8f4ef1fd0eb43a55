/* Unit tests of Slurm's environment (src/launcher/sched_slurm.c),
 * table-driven: each row is the environment a task gets, as srun (or a
 * batch script) sets it, and what crun reads from it: the option texts
 * with their variables, the detail line, SLURM_RESTART_COUNT, or the one
 * line of a misconfiguration. Also the port formula, the requeue status
 * and the precedence of the user's flags through the option parser. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "launcher/options.h"
#include "launcher/scheduler.h"
#include "launcher/sched_slurm.h"

/* srun -N2 --ntasks-per-node=1 in job 77: what every task has. */
#define STEP2                                                                                 \
	"SLURM_JOB_ID=77", "SLURM_JOBID=77", "SLURM_STEP_ID=0", "SLURM_STEPID=0",             \
		"SLURM_NNODES=2", "SLURM_JOB_NUM_NODES=2", "SLURM_STEP_NUM_NODES=2",          \
		"SLURM_JOB_NODELIST=gpu[01-02]", "SLURM_NODELIST=gpu[01-02]",                 \
		"SLURM_STEP_NODELIST=gpu[01-02]", "SLURM_NTASKS=2", "SLURM_NPROCS=2",         \
		"SLURM_STEP_NUM_TASKS=2", "SLURM_TASKS_PER_NODE=1(x2)",                       \
		"SLURM_STEP_TASKS_PER_NODE=1(x2)", "SLURM_LOCALID=0", "SLURM_CPUS_ON_NODE=8", \
		"SLURM_LAUNCH_NODE_IPADDR=10.0.0.1", "SLURM_SRUN_COMM_HOST=10.0.0.1"

#define END                    \
	{                      \
		-1, NULL, NULL \
	}

struct want {
	int opt;
	const char *text, *origin;
};

static const struct row {
	const char *what;
	bool as_nodes;
	const char *env[40];
	int rc; /* 1 found, 0 none, -EINVAL */
	struct want want[6];
	const char *detail; /* or the error */
	int restart_count;
} rows[] = {
	{"no Slurm", false, {"HOME=/root", "CUDA_VISIBLE_DEVICES=0,1"}, 0, {END}, "", -1},
	{"one node",
	 false,
	 {"SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_NNODES=1", "SLURM_STEP_NUM_NODES=1",
	  "SLURM_JOB_NODELIST=cpu3", "SLURM_STEP_NODELIST=cpu3", "SLURM_NODEID=0", "SLURM_PROCID=0",
	  "SLURM_NTASKS=1", "SLURM_STEP_NUM_TASKS=1"},
	 1,
	 {{CRUN_OPT_NNODES, "1", "SLURM_STEP_NUM_NODES"},
	  {CRUN_OPT_NODE_RANK, "0", "SLURM_NODEID"},
	  {CRUN_OPT_RDZV_ID, "5.0", "SLURM_JOB_ID, SLURM_STEP_ID"},
	  {CRUN_OPT_RDZV_ENDPOINT, NULL, NULL},
	  {CRUN_OPT_NPROC_PER_NODE, NULL, NULL},
	  END},
	 "job 5 step 0 on cpu3 (1 node), node 0",
	 -1},
	{"two nodes, node 0",
	 false,
	 {STEP2, "SLURM_NODEID=0", "SLURM_PROCID=0"},
	 1,
	 {{CRUN_OPT_NNODES, "2", "SLURM_STEP_NUM_NODES"},
	  {CRUN_OPT_NODE_RANK, "0", "SLURM_NODEID"},
	  {CRUN_OPT_RDZV_ENDPOINT, "gpu01:20770", "SLURM_STEP_NODELIST, SLURM_JOB_ID"},
	  {CRUN_OPT_RDZV_ID, "77.0", "SLURM_JOB_ID, SLURM_STEP_ID"},
	  END},
	 "job 77 step 0 on gpu[01-02] (2 nodes), node 0",
	 -1},
	{"two nodes, node 1, four GPUs each, requeued twice",
	 false,
	 {STEP2, "SLURM_NODEID=1", "SLURM_PROCID=1", "SLURM_GPUS_ON_NODE=4",
	  "CUDA_VISIBLE_DEVICES=0,1,2,3", "SLURM_RESTART_COUNT=2"},
	 1,
	 {{CRUN_OPT_NODE_RANK, "1", "SLURM_NODEID"},
	  {CRUN_OPT_NPROC_PER_NODE, "4", "SLURM_GPUS_ON_NODE"},
	  {CRUN_OPT_RDZV_ENDPOINT, "gpu01:20770", "SLURM_STEP_NODELIST, SLURM_JOB_ID"},
	  {CRUN_OPT_RDZV_ID, "77.0.r2", "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_RESTART_COUNT"},
	  END},
	 "job 77 step 0 on gpu[01-02] (2 nodes), node 1, restart 2",
	 2},
	{"GPUs from CUDA_VISIBLE_DEVICES only",
	 false,
	 {STEP2, "SLURM_NODEID=1", "CUDA_VISIBLE_DEVICES=GPU-aa,GPU-bb"},
	 1,
	 {{CRUN_OPT_NPROC_PER_NODE, "2", "CUDA_VISIBLE_DEVICES"}, END},
	 "job 77 step 0 on gpu[01-02] (2 nodes), node 1",
	 -1},
	{"no GPUs on the node: no worker count",
	 false,
	 {STEP2, "SLURM_NODEID=1", "SLURM_GPUS_ON_NODE=0", "CUDA_VISIBLE_DEVICES=0"},
	 1,
	 {{CRUN_OPT_NPROC_PER_NODE, NULL, NULL}, END},
	 "job 77 step 0 on gpu[01-02] (2 nodes), node 1",
	 -1},
	{"a step on part of the job: the step's list and count",
	 false,
	 {"SLURM_JOB_ID=9", "SLURM_STEP_ID=3", "SLURM_NNODES=2", "SLURM_JOB_NUM_NODES=4",
	  "SLURM_STEP_NUM_NODES=2", "SLURM_JOB_NODELIST=r[1-2]n[1-2]",
	  "SLURM_STEP_NODELIST=r2n[1-2]", "SLURM_NODEID=1", "SLURM_NTASKS=2"},
	 1,
	 {{CRUN_OPT_NNODES, "2", "SLURM_STEP_NUM_NODES"},
	  {CRUN_OPT_RDZV_ENDPOINT, "r2n1:20093", "SLURM_STEP_NODELIST, SLURM_JOB_ID"},
	  {CRUN_OPT_RDZV_ID, "9.3", "SLURM_JOB_ID, SLURM_STEP_ID"},
	  END},
	 "job 9 step 3 on r2n[1-2] (2 nodes), node 1",
	 -1},
	{"older Slurm: SLURM_STEPID, the job's list and count",
	 false,
	 {"SLURM_JOB_ID=1234567", "SLURM_STEPID=12", "SLURM_JOB_NODELIST=n[08-11]",
	  "SLURM_JOB_NUM_NODES=4", "SLURM_NODEID=3"},
	 1,
	 {{CRUN_OPT_NNODES, "4", "SLURM_JOB_NUM_NODES"},
	  {CRUN_OPT_NODE_RANK, "3", "SLURM_NODEID"},
	  {CRUN_OPT_RDZV_ENDPOINT, "n08:25672", "SLURM_JOB_NODELIST, SLURM_JOB_ID"},
	  END},
	 "job 1234567 step 12 on n[08-11] (4 nodes), node 3",
	 -1},
	{"addresses as node names, IPv6 in brackets",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=::1,::2", "SLURM_NODEID=1"},
	 1,
	 {{CRUN_OPT_NNODES, "2", "SLURM_STEP_NODELIST"},
	  {CRUN_OPT_RDZV_ENDPOINT, "[::1]:20770", "SLURM_STEP_NODELIST, SLURM_JOB_ID"},
	  END},
	 "job 77 step 0 on ::1,::2 (2 nodes), node 1",
	 -1},
	{"tasks as nodes: each task a node, its own GPUs",
	 true,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=1", "SLURM_NNODES=2", "SLURM_STEP_NUM_NODES=2",
	  "SLURM_STEP_NODELIST=gpu[01-02]", "SLURM_NTASKS=8", "SLURM_STEP_NUM_TASKS=8",
	  "SLURM_STEP_TASKS_PER_NODE=4(x2)", "SLURM_NODEID=1", "SLURM_PROCID=6", "SLURM_LOCALID=2",
	  "SLURM_GPUS_ON_NODE=4", "CUDA_VISIBLE_DEVICES=2"},
	 1,
	 {{CRUN_OPT_NNODES, "8", "SLURM_STEP_NUM_TASKS"},
	  {CRUN_OPT_NODE_RANK, "6", "SLURM_PROCID"},
	  {CRUN_OPT_NPROC_PER_NODE, "1", "CUDA_VISIBLE_DEVICES"},
	  {CRUN_OPT_RDZV_ENDPOINT, "gpu01:20771", "SLURM_STEP_NODELIST, SLURM_JOB_ID"},
	  END},
	 "job 77 step 1 on gpu[01-02] (2 nodes), task 6 of 8 as a node",
	 -1},
	{"tasks as nodes: SLURM_GPUS_PER_TASK",
	 true,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=1", "SLURM_STEP_NUM_NODES=1",
	  "SLURM_STEP_NODELIST=gpu01", "SLURM_STEP_NUM_TASKS=2", "SLURM_PROCID=1",
	  "SLURM_GPUS_PER_TASK=a100:2"},
	 1,
	 {{CRUN_OPT_NNODES, "2", "SLURM_STEP_NUM_TASKS"},
	  {CRUN_OPT_NPROC_PER_NODE, "2", "SLURM_GPUS_PER_TASK"},
	  END},
	 "job 77 step 1 on gpu01 (1 node), task 1 of 2 as a node",
	 -1},
	{"batch script of one node",
	 false,
	 {"SLURM_JOB_ID=40", "SLURM_JOB_NODELIST=n1", "SLURM_JOB_NUM_NODES=1", "SLURM_NNODES=1",
	  "SLURM_NODEID=0", "SLURM_PROCID=0", "SLURM_GPUS_ON_NODE=2", "SLURM_RESTART_COUNT=1"},
	 1,
	 {{CRUN_OPT_NNODES, "1", "SLURM_NNODES"},
	  {CRUN_OPT_RDZV_ID, "40.batch", "SLURM_JOB_ID"},
	  {CRUN_OPT_NPROC_PER_NODE, "2", "SLURM_GPUS_ON_NODE"},
	  {CRUN_OPT_NODE_RANK, NULL, NULL},
	  END},
	 "job 40 batch script on n1 (1 node), restart 1",
	 1},
	{"batch script of two nodes",
	 false,
	 {"SLURM_JOB_ID=40", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_JOB_NUM_NODES=2", "SLURM_NNODES=2",
	  "SLURM_NODEID=0"},
	 -EINVAL,
	 {END},
	 "slurm: SLURM_JOB_ID 40 has no SLURM_STEP_ID: crun runs in the batch script, on one "
	 "of 2 nodes (SLURM_NNODES); start it with srun --ntasks-per-node=1 crun ..., or "
	 "--scheduler none for this node alone",
	 -1},
	{"the batch step's own id is no step",
	 false,
	 {"SLURM_JOB_ID=40", "SLURM_STEP_ID=4294967291", "SLURM_JOB_NODELIST=n[1-2]"},
	 -EINVAL,
	 {END},
	 "slurm: SLURM_JOB_ID 40 has no SLURM_STEP_ID: crun runs in the batch script, on one "
	 "of 2 nodes (SLURM_JOB_NODELIST); start it with srun --ntasks-per-node=1 crun ..., or "
	 "--scheduler none for this node alone",
	 -1},
	{"several tasks per node",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=2",
	  "SLURM_STEP_NODELIST=gpu[01-02]", "SLURM_STEP_NUM_TASKS=8", "SLURM_NODEID=0"},
	 -EINVAL,
	 {END},
	 "slurm: several tasks per node (SLURM_STEP_NUM_TASKS=8 on 2 nodes): crun wants one "
	 "per node (srun --ntasks-per-node=1), or --slurm-tasks-as-nodes to make each task a "
	 "node of the job",
	 -1},
	{"SLURM_STEP_TASKS_PER_NODE above 1 on one node",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=gpu[01-03]",
	  "SLURM_STEP_NUM_TASKS=3", "SLURM_STEP_TASKS_PER_NODE=1(x2),4", "SLURM_NODEID=0"},
	 -EINVAL,
	 {END},
	 "slurm: several tasks per node (SLURM_STEP_TASKS_PER_NODE=1(x2),4): crun wants one per "
	 "node (srun --ntasks-per-node=1), or --slurm-tasks-as-nodes to make each task a node of "
	 "the job",
	 -1},
	{"sbatch's SLURM_NTASKS_PER_NODE in a step of one task per node",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=2",
	  "SLURM_STEP_NODELIST=gpu[01-02]", "SLURM_NTASKS=16", "SLURM_STEP_NUM_TASKS=2",
	  "SLURM_NTASKS_PER_NODE=8", "SLURM_STEP_TASKS_PER_NODE=1(x2)", "SLURM_NODEID=1"},
	 1,
	 {{CRUN_OPT_NNODES, "2", "SLURM_STEP_NUM_NODES"},
	  {CRUN_OPT_NODE_RANK, "1", "SLURM_NODEID"},
	  END},
	 "job 77 step 0 on gpu[01-02] (2 nodes), node 1",
	 -1},
	{"sbatch's SLURM_NTASKS_PER_NODE, the step's tasks against its nodes",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=2",
	  "SLURM_STEP_NODELIST=gpu[01-02]", "SLURM_STEP_NUM_TASKS=2", "SLURM_NTASKS_PER_NODE=8",
	  "SLURM_NODEID=0"},
	 1,
	 {{CRUN_OPT_NNODES, "2", "SLURM_STEP_NUM_NODES"},
	  {CRUN_OPT_NODE_RANK, "0", "SLURM_NODEID"},
	  END},
	 "job 77 step 0 on gpu[01-02] (2 nodes), node 0",
	 -1},
	{"SLURM_STEP_TASKS_PER_NODE not a list of counts",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=gpu[01-02]",
	  "SLURM_STEP_TASKS_PER_NODE=1(x2", "SLURM_NODEID=0"},
	 -EINVAL,
	 {END},
	 "invalid value '1(x2' for SLURM_STEP_TASKS_PER_NODE: expected counts of tasks per node "
	 "such as '2(x3),1'",
	 -1},
	{"a count that disagrees with the list",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_NNODES=3", "SLURM_STEP_NODELIST=gpu[01-02]",
	  "SLURM_NODEID=0"},
	 -EINVAL,
	 {END},
	 "slurm: SLURM_NNODES=3 disagrees with SLURM_STEP_NODELIST 'gpu[01-02]' (2 hosts)",
	 -1},
	{"a bad node list",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=gpu[02-01]", "SLURM_NODEID=0"},
	 -EINVAL,
	 {END},
	 "invalid value 'gpu[02-01]' for SLURM_STEP_NODELIST: reversed range '02-01' at byte 4",
	 -1},
	{"no node list",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_NODEID=0"},
	 -EINVAL,
	 {END},
	 "slurm: SLURM_JOB_ID is set but no node list (SLURM_STEP_NODELIST or "
	 "SLURM_JOB_NODELIST)",
	 -1},
	{"no node id",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=gpu[01-02]"},
	 -EINVAL,
	 {END},
	 "slurm: SLURM_NODEID is not set in step 77.0",
	 -1},
	{"a node id outside the step",
	 false,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=gpu[01-02]", "SLURM_NODEID=2"},
	 -EINVAL,
	 {END},
	 "invalid value '2' for SLURM_NODEID: expected a number from 0 to 1",
	 -1},
	{"a job id that is no number",
	 false,
	 {"SLURM_JOB_ID=abc", "SLURM_STEP_ID=0"},
	 -EINVAL,
	 {END},
	 "invalid value 'abc' for SLURM_JOB_ID: expected a number from 0 to "
	 "9223372036854775807",
	 -1},
	{"a restart count that is no number",
	 false,
	 {STEP2, "SLURM_NODEID=0", "SLURM_RESTART_COUNT=-1"},
	 -EINVAL,
	 {END},
	 "invalid value '-1' for SLURM_RESTART_COUNT: expected a number from 0 to 1000000000",
	 -1},
	{"bad GPUs on the node",
	 false,
	 {STEP2, "SLURM_NODEID=0", "SLURM_GPUS_ON_NODE=four"},
	 -EINVAL,
	 {END},
	 "invalid value 'four' for SLURM_GPUS_ON_NODE: expected a number from 0 to 4096",
	 -1},
	{"tasks as nodes without a task count",
	 true,
	 {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=gpu01", "SLURM_NODEID=0"},
	 -EINVAL,
	 {END},
	 "slurm: --slurm-tasks-as-nodes needs SLURM_STEP_NUM_TASKS or SLURM_NTASKS, which srun "
	 "sets",
	 -1},
};

static void test_rows(void **state)
{
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		const struct row *row = &rows[r];
		struct crun__sched s;
		char err[512] = "", *env[40];
		size_t n = 0;
		int rc;

		print_message("%s\n", row->what);
		for (; row->env[n]; n++)
			env[n] = (char *)row->env[n];
		env[n] = NULL;
		crun__sched_init(&s);
		s.ask.slurm_tasks_as_nodes = row->as_nodes;
		rc = crun__sched_slurm(env, &s, err, sizeof(err));
		assert_int_equal(rc, row->rc);
		if (rc < 0) {
			assert_string_equal(err, row->detail);
			/* The dispatcher gives the same and leaves nothing. */
			crun__sched_init(&s);
			s.ask.slurm_tasks_as_nodes = row->as_nodes;
			err[0] = '\0';
			assert_int_equal(
				crun__sched_detect(env, CRUN_SCHED_MODE_AUTO, &s, err, sizeof(err)),
				-EINVAL);
			assert_string_equal(err, row->detail);
			assert_int_equal(s.kind, CRUN_SCHED_NONE);
			assert_int_equal(s.nvalues, 0);
			assert_true(s.ask.slurm_tasks_as_nodes == row->as_nodes);
			continue;
		}
		assert_string_equal(s.detail, row->detail);
		assert_int_equal(s.restart_count, row->restart_count);
		assert_int_equal(s.kind, rc ? CRUN_SCHED_SLURM : CRUN_SCHED_NONE);
		for (const struct want *w = row->want; w->opt >= 0; w++) {
			const struct crun__sched_value *v = crun__sched_find(&s, w->opt);

			if (!w->text) {
				assert_null(v);
				continue;
			}
			assert_non_null(v);
			assert_string_equal(v->text, w->text);
			assert_string_equal(v->origin, w->origin);
		}
		if (crun__sched_find(&s, CRUN_OPT_RDZV_ENDPOINT)) {
			assert_int_equal(s.resolve_opt, CRUN_OPT_RDZV_ENDPOINT);
			assert_non_null(strstr(crun__sched_find(&s, CRUN_OPT_RDZV_ENDPOINT)->text,
					       s.resolve_host));
		} else {
			assert_string_equal(s.resolve_host, "");
		}
	}
}

static void test_port(void **state)
{
	(void)state;
	assert_int_equal(crun__slurm_port(77, 0), 20770);
	assert_int_equal(crun__slurm_port(77, 3), 20773);
	assert_int_equal(crun__slurm_port(1077, 0), 20770); /* every 1000 jobs */
	assert_int_equal(crun__slurm_port(999, 9), CRUN_SLURM_PORT_LAST);
	assert_int_equal(crun__slurm_port(1000, 10), CRUN_SLURM_PORT_BASE);
	assert_int_equal(crun__slurm_port(UINT64_MAX, UINT64_MAX), 20000 + 615 * 10 + 5);
}

static void test_exit_status(void **state)
{
	(void)state;
	assert_int_equal(crun__slurm_exit_status(128 + SIGTERM, 0), 143);
	assert_int_equal(crun__slurm_exit_status(128 + SIGTERM, 85), 85);
	assert_int_equal(crun__slurm_exit_status(128 + SIGINT, 85), 128 + SIGINT);
	assert_int_equal(crun__slurm_exit_status(0, 85), 0);
	assert_int_equal(crun__slurm_exit_status(1, 85), 1);
}

/* Through the option parser: the user's flags and PET_ variables win,
 * --slurm-tasks-as-nodes reaches the detector from any source. */
static void test_parse(void **state)
{
	char *env[] = {"SLURM_JOB_ID=77",
		       "SLURM_STEP_ID=0",
		       "SLURM_STEP_NUM_NODES=2",
		       "SLURM_STEP_NODELIST=localhost,127.0.0.1",
		       "SLURM_STEP_NUM_TASKS=4",
		       "SLURM_NODEID=1",
		       "SLURM_PROCID=3",
		       "PET_RDZV_ENDPOINT=127.0.0.1:29999",
		       NULL,
		       NULL};
	char *argv[] = {"crun", "--slurm-tasks-as-nodes", "--node-rank=0", "true", NULL};
	char *argv2[] = {"crun", "true", NULL};
	char err[512] = "", origin[128];
	struct crun__launch_opts o;

	(void)state;
	crun__launch_opts_init(&o);
	assert_int_equal(crun__launch_opts_parse(&o, 4, argv, env, err, sizeof(err)), 0);
	assert_int_equal(o.nnodes_min, 4);
	assert_int_equal(o.node_rank, 0);
	assert_string_equal(o.rdzv_endpoint, "127.0.0.1:29999");
	crun__launch_opts_origin(&o, CRUN_OPT_NNODES, origin, sizeof(origin));
	assert_string_equal(origin, "slurm SLURM_STEP_NUM_TASKS");
	crun__launch_opts_origin(&o, CRUN_OPT_NODE_RANK, origin, sizeof(origin));
	assert_string_equal(origin, "--node-rank");
	crun__launch_opts_origin(&o, CRUN_OPT_RDZV_ENDPOINT, origin, sizeof(origin));
	assert_string_equal(origin, "PET_RDZV_ENDPOINT");
	crun__launch_opts_finish(&o);

	/* Without the flag, the four tasks are an error; with its PET_
	 * variable they are nodes. */
	crun__launch_opts_init(&o);
	assert_int_equal(crun__launch_opts_parse(&o, 2, argv2, env, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "several tasks per node"));
	crun__launch_opts_finish(&o);
	env[8] = "PET_SLURM_TASKS_AS_NODES=1";
	crun__launch_opts_init(&o);
	assert_int_equal(crun__launch_opts_parse(&o, 2, argv2, env, err, sizeof(err)), 0);
	assert_int_equal(o.node_rank, 3);
	crun__launch_opts_finish(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_port),
		cmocka_unit_test(test_exit_status),
		cmocka_unit_test(test_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

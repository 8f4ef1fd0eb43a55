/* sched_k8s: the Kubernetes detector over the exact variables each kind of
 * pod gets (Kubeflow training-operator v1 PyTorchJob, elastic or with a
 * Master, old and new operators; Trainer v2; an Indexed Job), a worker of
 * an agent in such a pod, and the misconfigurations. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "launcher/options.h"
#include "launcher/scheduler.h"

#define K8S "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443"

struct want {
	int opt;
	const char *text;
	const char *origin;
};

struct k8s_case {
	const char *name;
	const char *env[24];
	int rc;		    /* 1 found, 0 not, -EINVAL */
	const char *detail; /* prefix of s.detail, or of err for -EINVAL */
	struct want values[8];
};

static const struct k8s_case cases[] = {
	{"pytorchjob master pod, operator without PET_ variables",
	 {K8S, "HOSTNAME=mnist-master-0", "PYTHONUNBUFFERED=0", "MASTER_PORT=23456",
	  "MASTER_ADDR=mnist-master-0", "WORLD_SIZE=3", "RANK=0"},
	 1,
	 "PyTorchJob pod, rank 0 of 3, master mnist-master-0:23456",
	 {{CRUN_OPT_NNODES, "3", "WORLD_SIZE"},
	  {CRUN_OPT_NODE_RANK, "0", "RANK"},
	  {CRUN_OPT_MASTER_ADDR, "mnist-master-0", "MASTER_ADDR"},
	  {CRUN_OPT_MASTER_PORT, "23456", "MASTER_PORT"},
	  {CRUN_OPT_RDZV_ID, "mnist", "HOSTNAME"}}},
	{"pytorchjob worker pod (worker 1 is rank 2)",
	 {K8S, "HOSTNAME=mnist-worker-1", "PYTHONUNBUFFERED=0", "MASTER_PORT=23456",
	  "MASTER_ADDR=mnist-master-0", "WORLD_SIZE=3", "RANK=2"},
	 1,
	 "PyTorchJob pod, rank 2 of 3",
	 {{CRUN_OPT_NNODES, "3", "WORLD_SIZE"},
	  {CRUN_OPT_NODE_RANK, "2", "RANK"},
	  {CRUN_OPT_RDZV_ID, "mnist", "HOSTNAME"}}},
	/* Newer operators: WORLD_SIZE is pods x nprocPerNode, PET_NNODES the
	 * pods (options.c reads PET_NNODES; the detector offers no nnodes). */
	{"pytorchjob worker pod, newer operator, nprocPerNode 4",
	 {K8S, "HOSTNAME=mnist-worker-0", "PYTHONUNBUFFERED=0", "MASTER_PORT=23456",
	  "MASTER_ADDR=mnist-master-0", "WORLD_SIZE=8", "RANK=1", "PET_NPROC_PER_NODE=4",
	  "PET_NODE_RANK=1", "PET_NNODES=2"},
	 1,
	 "PyTorchJob pod, rank 1 of 2",
	 {{CRUN_OPT_NODE_RANK, "1", "RANK"},
	  {CRUN_OPT_MASTER_ADDR, "mnist-master-0", "MASTER_ADDR"}}},
	{"pytorchjob elastic worker pod, older operator",
	 {K8S, "HOSTNAME=elastic-worker-2", "PYTHONUNBUFFERED=0",
	  "PET_RDZV_ENDPOINT=elastic-worker-0:23456", "PET_RDZV_BACKEND=c10d", "PET_NNODES=1:3",
	  "PET_MAX_RESTARTS=100", "PET_N_PROC_PER_NODE=2"},
	 1,
	 "elastic PyTorchJob pod, rendezvous elastic-worker-0:23456 (c10d), nodes 1:3",
	 {{CRUN_OPT_NPROC_PER_NODE, "2", "PET_N_PROC_PER_NODE"},
	  {CRUN_OPT_RDZV_ID, "elastic", "HOSTNAME"}}},
	{"pytorchjob elastic worker pod, newer operator",
	 {K8S, "HOSTNAME=elastic-worker-0", "PYTHONUNBUFFERED=0",
	  "PET_RDZV_ENDPOINT=elastic-worker-0:29400", "PET_RDZV_BACKEND=c10d", "PET_NNODES=2",
	  "PET_NPROC_PER_NODE=1"},
	 1,
	 "elastic PyTorchJob pod",
	 {{CRUN_OPT_RDZV_ID, "elastic", "HOSTNAME"}}},
	{"trainer v2 pod",
	 {K8S, "HOSTNAME=tj-node-0-1", "JOB_COMPLETION_INDEX=1", "PET_NNODES=2",
	  "PET_NPROC_PER_NODE=auto", "PET_NODE_RANK=1", "PET_MASTER_ADDR=tj-node-0-0.tj",
	  "PET_MASTER_PORT=29400"},
	 1,
	 "Trainer v2 (JobSet) pod, node 1 of 2, master tj-node-0-0.tj:29400",
	 {{CRUN_OPT_RDZV_ID, "tj-node-0", "HOSTNAME"}}},
	{"indexed job pod",
	 {K8S, "HOSTNAME=train-1", "JOB_COMPLETION_INDEX=1", "PET_NNODES=2",
	  "PET_MASTER_ADDR=train-0.train", "PET_MASTER_PORT=29400"},
	 1,
	 "Indexed Job pod, index 1 of 2",
	 {{CRUN_OPT_NODE_RANK, "1", "JOB_COMPLETION_INDEX"},
	  {CRUN_OPT_RDZV_ID, "train", "HOSTNAME"}}},
	{"indexed job pod without a node count (options.c refuses it)",
	 {K8S, "HOSTNAME=train-0", "JOB_COMPLETION_INDEX=0"},
	 1,
	 "Indexed Job pod, index 0 of ? (PET_NNODES unset)",
	 {{CRUN_OPT_NODE_RANK, "0", "JOB_COMPLETION_INDEX"}}},
	{"a host name that is not the job's pattern gives no run id",
	 {K8S, "HOSTNAME=custom", "JOB_COMPLETION_INDEX=3", "PET_NNODES=4"},
	 1,
	 "Indexed Job pod, index 3 of 4",
	 {{CRUN_OPT_NODE_RANK, "3", "JOB_COMPLETION_INDEX"}, {CRUN_OPT_RDZV_ID, NULL, NULL}}},
	/* Not a pod, or not a job's pod. */
	{"no KUBERNETES_SERVICE_HOST",
	 {"MASTER_ADDR=a", "MASTER_PORT=1", "WORLD_SIZE=2", "RANK=1"},
	 0,
	 NULL,
	 {{0}}},
	{"a pod of no job", {K8S, "HOSTNAME=web-5d9f7", "MASTER_ADDR=db"}, 0, NULL, {{0}}},
	{"torch's variables without MASTER_PORT",
	 {K8S, "MASTER_ADDR=a", "WORLD_SIZE=2", "RANK=1"},
	 0,
	 NULL,
	 {{0}}},
	/* A worker crun started in a PyTorchJob pod: RANK, WORLD_SIZE,
	 * MASTER_ADDR and MASTER_PORT are the agent's (a global rank), and the
	 * pod's variables are inherited. */
	{"worker of an agent in a pytorchjob pod",
	 {K8S, "HOSTNAME=mnist-worker-0", "MASTER_ADDR=mnist-master-0", "MASTER_PORT=41234",
	  "WORLD_SIZE=8", "RANK=5", "LOCAL_RANK=1", "GROUP_RANK=1", "LOCAL_WORLD_SIZE=4",
	  "TORCHELASTIC_RUN_ID=mnist", "CRUN_STORE=mnist-master-0:23456"},
	 0,
	 NULL,
	 {{0}}},
	{"worker of torchrun in an indexed job pod",
	 {K8S, "HOSTNAME=train-1", "JOB_COMPLETION_INDEX=1", "PET_NNODES=2", "LOCAL_RANK=0",
	  "GROUP_RANK=1", "RANK=2", "WORLD_SIZE=4", "TORCHELASTIC_RUN_ID=none"},
	 0,
	 NULL,
	 {{0}}},
	/* Misconfigurations: one line naming the variable. */
	{"rank not below world size",
	 {K8S, "MASTER_ADDR=m-master-0", "MASTER_PORT=23456", "WORLD_SIZE=2", "RANK=2"},
	 -EINVAL,
	 "kubernetes: RANK=2 is not below WORLD_SIZE=2",
	 {{0}}},
	{"rank not below PET_NNODES",
	 {K8S, "MASTER_ADDR=m-master-0", "MASTER_PORT=23456", "WORLD_SIZE=8", "RANK=2",
	  "PET_NNODES=2"},
	 -EINVAL,
	 "kubernetes: RANK=2 is not below PET_NNODES=2",
	 {{0}}},
	{"rank not a number",
	 {K8S, "MASTER_ADDR=m-master-0", "MASTER_PORT=23456", "WORLD_SIZE=2", "RANK=one"},
	 -EINVAL,
	 "kubernetes: invalid RANK 'one'",
	 {{0}}},
	{"world size 0",
	 {K8S, "MASTER_ADDR=m-master-0", "MASTER_PORT=23456", "WORLD_SIZE=0", "RANK=0"},
	 -EINVAL,
	 "kubernetes: invalid WORLD_SIZE '0'",
	 {{0}}},
	{"completion index not a number",
	 {K8S, "JOB_COMPLETION_INDEX=-1", "PET_NNODES=2"},
	 -EINVAL,
	 "kubernetes: invalid JOB_COMPLETION_INDEX '-1'",
	 {{0}}},
};

static void test_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct k8s_case *c = &cases[i];
		struct crun__sched s;
		char err[256] = "";
		int rc;

		print_message("case: %s\n", c->name);
		crun__sched_init(&s);
		rc = crun__sched_kubernetes((char **)c->env, &s, err, sizeof(err));
		assert_int_equal(rc, c->rc);
		if (rc < 0) {
			assert_true(!strncmp(err, c->detail, strlen(c->detail)));
			assert_int_equal(s.kind, CRUN_SCHED_NONE);
			continue;
		}
		if (rc == 0) {
			assert_int_equal(s.kind, CRUN_SCHED_NONE);
			assert_int_equal(s.nvalues, 0);
			continue;
		}
		assert_int_equal(s.kind, CRUN_SCHED_KUBERNETES);
		if (strncmp(s.detail, c->detail, strlen(c->detail)))
			fail_msg("detail '%s', expected '%s'", s.detail, c->detail);
		/* No name is resolved at start: DNS records of pods come late. */
		assert_string_equal(s.resolve_host, "");
		for (size_t j = 0; j < 8 && c->values[j].opt; j++) {
			const struct want *w = &c->values[j];
			const struct crun__sched_value *v = crun__sched_find(&s, w->opt);

			if (!w->text) {
				assert_null(v);
				continue;
			}
			assert_non_null(v);
			assert_string_equal(v->text, w->text);
			assert_string_equal(v->origin, w->origin);
		}
	}
}

/* The newer operator's PyTorchJob offers no nnodes (PET_NNODES is read as
 * torchrun's); the elastic one no node rank (the rendezvous orders). */
static void test_offers_nothing_read_elsewhere(void **state)
{
	struct crun__sched s;
	char err[256];

	(void)state;
	crun__sched_init(&s);
	assert_int_equal(crun__sched_kubernetes((char **)cases[2].env, &s, err, sizeof(err)), 1);
	assert_null(crun__sched_find(&s, CRUN_OPT_NNODES));
	crun__sched_init(&s);
	assert_int_equal(crun__sched_kubernetes((char **)cases[3].env, &s, err, sizeof(err)), 1);
	assert_null(crun__sched_find(&s, CRUN_OPT_NODE_RANK));
	assert_null(crun__sched_find(&s, CRUN_OPT_MASTER_ADDR));
}

/* --scheduler kubernetes in a worker of an agent is an error, auto finds
 * nothing. */
static void test_detect_in_worker(void **state)
{
	const char *env[] = {K8S, "JOB_COMPLETION_INDEX=1", "PET_NNODES=2", "LOCAL_RANK=0", NULL};
	struct crun__sched s;
	char err[256] = "";

	(void)state;
	assert_int_equal(
		crun__sched_detect((char **)env, CRUN_SCHED_MODE_AUTO, &s, err, sizeof(err)), 0);
	assert_int_equal(s.kind, CRUN_SCHED_NONE);
	assert_int_equal(
		crun__sched_detect((char **)env, CRUN_SCHED_MODE_KUBERNETES, &s, err, sizeof(err)),
		-EINVAL);
	assert_non_null(strstr(err, "--scheduler kubernetes"));
}

static int parse(const char **env, int argc, const char **argv, struct crun__launch_opts *o,
		 char *err, size_t errlen)
{
	crun__launch_opts_init(o);
	return crun__launch_opts_parse(o, argc, (char **)argv, (char **)env, err, errlen);
}

/* An index without a node count is refused with one line; --nnodes or
 * PET_NNODES gives it; flags win over the pod's values. */
static void test_options(void **state)
{
	const char *bare[] = {K8S, "HOSTNAME=train-0", "JOB_COMPLETION_INDEX=0", NULL};
	const char *counted[] = {K8S, "HOSTNAME=train-1", "JOB_COMPLETION_INDEX=1", "PET_NNODES=2",
				 NULL};
	const char *cmd[] = {"crun", "true"};
	const char *flags[] = {"crun", "--nnodes=3", "--node-rank=2", "true"};
	const char *none[] = {"crun", "--scheduler=none", "true"};
	struct crun__launch_opts o;
	char err[256] = "";

	(void)state;
	assert_int_equal(parse(bare, 2, cmd, &o, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "node_rank from JOB_COMPLETION_INDEX (kubernetes) needs the "
				 "number of nodes: set PET_NNODES (or --nnodes, or nnodes in the "
				 "config file)");
	crun__launch_opts_finish(&o);

	assert_int_equal(parse(bare, 4, flags, &o, err, sizeof(err)), 0);
	assert_int_equal(o.nnodes_max, 3);
	assert_int_equal(o.node_rank, 2);
	crun__launch_opts_finish(&o);

	assert_int_equal(parse(counted, 2, cmd, &o, err, sizeof(err)), 0);
	assert_int_equal(o.nnodes_max, 2);
	assert_int_equal(o.node_rank, 1);
	assert_int_equal(o.source[CRUN_OPT_NODE_RANK], CRUN_SRC_SCHED);
	assert_string_equal(o.rdzv_id, "train");
	crun__launch_opts_finish(&o);

	assert_int_equal(parse(bare, 3, none, &o, err, sizeof(err)), 0);
	assert_int_equal(o.nnodes_max, 1);
	assert_int_equal(o.node_rank, 0);
	crun__launch_opts_finish(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_offers_nothing_read_elsewhere),
		cmocka_unit_test(test_detect_in_worker),
		cmocka_unit_test(test_options),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Slurm's environment under srun (scheduler.h, sched_slurm.h). Every value
 * keeps the variable it came from, so that --dry-run and the errors name
 * it; a variable that is there but wrong is an error, never skipped. */
#include "launcher/sched_slurm.h"
#include "launcher/scheduler.h"
#include "launcher/options.h"

#include "common/hostlist.h"
#include "common/util.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Step ids from here up are Slurm's own steps (batch, extern,
 * interactive, pending), not one srun started. */
#define SPECIAL_STEP 4294967290ULL

struct var {
	const char *name; /* NULL: absent */
	const char *value;
};

/* The first of names that envp has. */
static struct var first_of(char **envp, const char *const *names)
{
	struct var v = {NULL, NULL};

	for (; *names; names++) {
		v.value = crun__launch_env_lookup(envp, *names);
		if (v.value) {
			v.name = *names;
			break;
		}
	}
	return v;
}

static struct var one(char **envp, const char *name)
{
	const char *const names[] = {name, NULL};

	return first_of(envp, names);
}

/* A whole number of v in [min, max]. */
static int number(struct var v, int64_t min, int64_t max, int64_t *out, char *err, size_t errlen)
{
	if (*v.value < '0' || *v.value > '9' ||
	    crun__parse_int64(v.value, min, max, out, NULL, 0)) {
		crun__seterr(err, errlen,
			     "invalid value '%s' for %s: expected a number from %lld to %lld",
			     v.value, v.name, (long long)min, (long long)max);
		return -EINVAL;
	}
	return 0;
}

/* Devices in CUDA_VISIBLE_DEVICES: its comma-separated entries; 0 when
 * empty or Slurm's NoDevFiles. */
static int64_t visible_devices(const char *v)
{
	int64_t n = 1;

	if (!*v || !strcmp(v, "NoDevFiles"))
		return 0;
	for (; *v; v++)
		n += *v == ',';
	return n;
}

/* The workers per node from the GPUs Slurm gave: adds nproc_per_node, or
 * nothing when it gave none. In a step of one task per node the node's
 * GPUs count; with a task per node, the task's own. */
static int add_nproc(char **envp, struct crun__sched *s, bool per_task, int64_t *gpus, char *err,
		     size_t errlen)
{
	struct var on_node = one(envp, "SLURM_GPUS_ON_NODE");
	struct var visible = one(envp, "CUDA_VISIBLE_DEVICES");
	struct var per = one(envp, "SLURM_GPUS_PER_TASK");
	int rc;

	*gpus = 0;
	if (!per_task && on_node.name) {
		rc = number(on_node, 0, CRUN_LAUNCH_MAX_NPROC, gpus, err, errlen);
		if (rc || !*gpus)
			return rc;
		return crun__sched_add(s, CRUN_OPT_NPROC_PER_NODE, on_node.name, "%lld",
				       (long long)*gpus);
	}
	if (visible.name && visible_devices(visible.value)) {
		*gpus = visible_devices(visible.value);
		return crun__sched_add(s, CRUN_OPT_NPROC_PER_NODE, visible.name, "%lld",
				       (long long)*gpus);
	}
	if (per_task && per.name) {
		/* --gpus-per-task=[type:]N */
		const char *colon = strrchr(per.value, ':');

		per.value = colon ? colon + 1 : per.value;
		rc = number(per, 0, CRUN_LAUNCH_MAX_NPROC, gpus, err, errlen);
		if (rc || !*gpus)
			return rc;
		return crun__sched_add(s, CRUN_OPT_NPROC_PER_NODE, per.name, "%lld",
				       (long long)*gpus);
	}
	return 0;
}

/* The most tasks on one node in v, Slurm's list of tasks per node:
 * comma-separated counts, each followed by (xN) when N nodes in a row
 * have it ("2(x3),1"). */
static int most_per_node(struct var v, int64_t *most, char *err, size_t errlen)
{
	const char *p = v.value;

	*most = 0;
	for (;;) {
		char *end;
		long long n, times = 1;

		if (*p < '0' || *p > '9')
			break;
		errno = 0;
		n = strtoll(p, &end, 10);
		if (errno || n < 1)
			break;
		p = end;
		if (!strncmp(p, "(x", 2)) {
			if (p[2] < '0' || p[2] > '9')
				break;
			times = strtoll(p + 2, &end, 10);
			if (errno || times < 1 || *end != ')')
				break;
			p = end + 1;
		}
		*most = n > *most ? n : *most;
		if (!*p)
			return 0;
		if (*p++ != ',')
			break;
	}
	crun__seterr(err, errlen,
		     "invalid value '%.128s' for %s: expected counts of tasks per node such as "
		     "'2(x3),1'",
		     v.value, v.name);
	return -EINVAL;
}

int crun__slurm_port(uint64_t job_id, uint64_t step_id)
{
	return CRUN_SLURM_PORT_BASE + (int)(job_id % 1000) * 10 + (int)(step_id % 10);
}

int crun__slurm_exit_status(int status, int requeue_status)
{
	if (requeue_status > 0 && status == 128 + SIGTERM)
		return requeue_status;
	return status;
}

/* A batch script or salloc's shell: the allocation, no step. */
static int batch(char **envp, struct crun__sched *s, int64_t job, struct var list, struct var count,
		 int64_t nnodes, char *err, size_t errlen)
{
	int64_t gpus;
	int rc;

	if (nnodes > 1) {
		crun__seterr(
			err, errlen,
			"slurm: SLURM_JOB_ID %lld has no SLURM_STEP_ID: crun runs in the batch "
			"script, on one of %lld nodes (%s); start it with srun "
			"--ntasks-per-node=1 crun ..., or --scheduler none for this node alone",
			(long long)job, (long long)nnodes, count.name ? count.name : list.name);
		return -EINVAL;
	}
	rc = crun__sched_add(s, CRUN_OPT_NNODES, count.name ? count.name : list.name, "1");
	if (!rc)
		rc = crun__sched_add(s, CRUN_OPT_RDZV_ID, "SLURM_JOB_ID", "%lld.batch",
				     (long long)job);
	if (!rc)
		rc = add_nproc(envp, s, false, &gpus, err, errlen);
	if (rc)
		return rc;
	snprintf(s->detail, sizeof(s->detail), "job %lld batch script on %.64s (1 node)",
		 (long long)job, list.value ? list.value : "?");
	return 0;
}

static int detect(char **envp, struct crun__sched *s, char *err, size_t errlen)
{
	static const char *const step_names[] = {"SLURM_STEP_ID", "SLURM_STEPID", NULL};
	static const char *const list_names[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
						 "SLURM_NODELIST", NULL};
	static const char *const count_names[] = {"SLURM_STEP_NUM_NODES", "SLURM_NNODES",
						  "SLURM_JOB_NUM_NODES", NULL};
	static const char *const task_names[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", NULL};
	struct var job_v = one(envp, "SLURM_JOB_ID"), step_v = first_of(envp, step_names);
	struct var list = first_of(envp, list_names), count = first_of(envp, count_names);
	struct var tasks_v = first_of(envp, task_names);
	struct var per_node_v = one(envp, "SLURM_STEP_TASKS_PER_NODE");
	struct var restart_v = one(envp, "SLURM_RESTART_COUNT");
	struct var rank_v;
	bool as_nodes = s->ask.slurm_tasks_as_nodes;
	struct crun__hostlist *hl = NULL;
	char first[CRUN_HOSTLIST_NAME_MAX + 1], reason[160], restart[40] = "";
	int64_t job, step = -1, nnodes, nlisted, tasks = 0, per_node = 0, restarts = -1, rank;
	int64_t nodes, gpus;
	int rc;

	if (!job_v.name)
		return 0;
	rc = number(job_v, 0, INT64_MAX, &job, err, errlen);
	if (rc)
		return rc;
	if (step_v.name) {
		rc = number(step_v, 0, INT64_MAX, &step, err, errlen);
		if (rc)
			return rc;
		if ((uint64_t)step >= SPECIAL_STEP)
			step = -1;
	}
	if (restart_v.name) {
		rc = number(restart_v, 0, 1000000000, &restarts, err, errlen);
		if (rc)
			return rc;
	}
	if (!list.name) {
		crun__seterr(err, errlen,
			     "slurm: SLURM_JOB_ID is set but no node list (SLURM_STEP_NODELIST or "
			     "SLURM_JOB_NODELIST)");
		return -EINVAL;
	}
	hl = crun__hostlist_create(list.value, reason, sizeof(reason));
	if (!hl) {
		crun__seterr(err, errlen, "invalid value '%.128s' for %s: %s", list.value,
			     list.name, reason);
		return -EINVAL;
	}
	nlisted = (int64_t)crun__hostlist_count(hl);
	rc = crun__hostlist_nth(hl, 0, first, sizeof(first));
	crun__hostlist_destroy(hl);
	if (rc)
		return rc;
	nnodes = nlisted;
	if (count.name) {
		rc = number(count, 1, CRUN_LAUNCH_MAX_NNODES, &nnodes, err, errlen);
		if (rc)
			return rc;
		if (nnodes != nlisted) {
			crun__seterr(err, errlen,
				     "slurm: %s=%lld disagrees with %s '%.128s' (%lld hosts)",
				     count.name, (long long)nnodes, list.name, list.value,
				     (long long)nlisted);
			return -EINVAL;
		}
	}
	s->kind = CRUN_SCHED_SLURM;
	s->restart_count = (int)restarts;
	if (restarts > 0)
		snprintf(restart, sizeof(restart), ", restart %lld", (long long)restarts);
	if (step < 0) {
		rc = batch(envp, s, job, list, count, nnodes, err, errlen);
		if (!rc && restart[0])
			snprintf(s->detail + strlen(s->detail),
				 sizeof(s->detail) - strlen(s->detail), "%s", restart);
		return rc < 0 ? rc : 1;
	}

	if (tasks_v.name) {
		rc = number(tasks_v, 1, INT64_MAX, &tasks, err, errlen);
		if (rc)
			return rc;
	}
	/* The step's own tasks per node decide; without them, its tasks
	 * against its nodes. Never SLURM_NTASKS_PER_NODE: sbatch's
	 * --ntasks-per-node, which a step started with other counts inherits. */
	if (per_node_v.name) {
		rc = most_per_node(per_node_v, &per_node, err, errlen);
		if (rc)
			return rc;
	}
	if (!as_nodes && (per_node_v.name ? per_node > 1 : tasks > nnodes)) {
		if (per_node_v.name)
			snprintf(reason, sizeof(reason), "%s=%.64s", per_node_v.name,
				 per_node_v.value);
		else
			snprintf(reason, sizeof(reason), "%s=%lld on %lld nodes", tasks_v.name,
				 (long long)tasks, (long long)nnodes);
		crun__seterr(err, errlen,
			     "slurm: several tasks per node (%s): crun wants one per node (srun "
			     "--ntasks-per-node=1), or --slurm-tasks-as-nodes to make each task a "
			     "node of the job",
			     reason);
		return -EINVAL;
	}
	nodes = nnodes;
	if (as_nodes) {
		if (!tasks_v.name) {
			crun__seterr(err, errlen,
				     "slurm: --slurm-tasks-as-nodes needs SLURM_STEP_NUM_TASKS or "
				     "SLURM_NTASKS, which srun sets");
			return -EINVAL;
		}
		if (tasks > CRUN_LAUNCH_MAX_NNODES) {
			crun__seterr(err, errlen, "slurm: %s=%lld: more than %d nodes",
				     tasks_v.name, (long long)tasks, CRUN_LAUNCH_MAX_NNODES);
			return -EINVAL;
		}
		nodes = tasks;
		rank_v = one(envp, "SLURM_PROCID");
	} else {
		rank_v = one(envp, "SLURM_NODEID");
	}
	if (!rank_v.name) {
		crun__seterr(err, errlen, "slurm: %s is not set in step %lld.%lld",
			     as_nodes ? "SLURM_PROCID" : "SLURM_NODEID", (long long)job,
			     (long long)step);
		return -EINVAL;
	}
	rc = number(rank_v, 0, nodes - 1, &rank, err, errlen);
	if (rc)
		return rc;

	rc = crun__sched_add(s, CRUN_OPT_NNODES,
			     as_nodes	  ? tasks_v.name
			     : count.name ? count.name
					  : list.name,
			     "%lld", (long long)nodes);
	if (!rc)
		rc = crun__sched_add(s, CRUN_OPT_NODE_RANK, rank_v.name, "%lld", (long long)rank);
	if (!rc && nodes > 1) {
		char origin[64];

		snprintf(origin, sizeof(origin), "%s, SLURM_JOB_ID", list.name);
		/* An IPv6 address (NodeAddr as a name) takes brackets. */
		rc = crun__sched_add(s, CRUN_OPT_RDZV_ENDPOINT, origin,
				     strchr(first, ':') ? "[%s]:%d" : "%s:%d", first,
				     crun__slurm_port((uint64_t)job, (uint64_t)step));
		snprintf(s->resolve_host, sizeof(s->resolve_host), "%s", first);
		snprintf(s->resolve_origin, sizeof(s->resolve_origin), "%s", list.name);
		s->resolve_opt = CRUN_OPT_RDZV_ENDPOINT;
	}
	if (!rc)
		rc = crun__sched_add(s, CRUN_OPT_RDZV_ID,
				     restarts > 0
					     ? "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_RESTART_COUNT"
					     : "SLURM_JOB_ID, SLURM_STEP_ID",
				     restarts > 0 ? "%lld.%lld.r%lld" : "%lld.%lld", (long long)job,
				     (long long)step, (long long)restarts);
	if (!rc)
		rc = add_nproc(envp, s, as_nodes, &gpus, err, errlen);
	if (rc)
		return rc;
	if (as_nodes)
		snprintf(s->detail, sizeof(s->detail),
			 "job %lld step %lld on %.64s (%lld node%s), task %lld of %lld as a node%s",
			 (long long)job, (long long)step, list.value, (long long)nnodes,
			 nnodes == 1 ? "" : "s", (long long)rank, (long long)nodes, restart);
	else
		snprintf(s->detail, sizeof(s->detail),
			 "job %lld step %lld on %.64s (%lld node%s), node %lld%s", (long long)job,
			 (long long)step, list.value, (long long)nnodes, nnodes == 1 ? "" : "s",
			 (long long)rank, restart);
	return 1;
}

int crun__sched_slurm(char **envp, struct crun__sched *s, char *err, size_t errlen)
{
	int rc = detect(envp, s, err, errlen);

	if (rc == -ENOSPC) /* a value longer than the table's texts */
		crun__seterr(err, errlen, "slurm: a value is longer than %d bytes",
			     CRUN_SCHED_TEXT_MAX - 1);
	return rc == -ENOSPC ? -EINVAL : rc;
}

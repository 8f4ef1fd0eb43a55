/* Kubernetes' environment (scheduler.h): which kind of pod crun runs in, told
 * by the variables its controller gives the container.
 *
 * A pod is a container with KUBERNETES_SERVICE_HOST (the kubelet sets it
 * in every one) and none of the variables an agent gives its workers
 * (LOCAL_RANK, GROUP_RANK, TORCHELASTIC_RUN_ID, CRUN_STORE): in a worker,
 * RANK, WORLD_SIZE and MASTER_ADDR are the agent's, and the pod's own
 * variables it inherited describe the outer job, not a crun started
 * there. The kinds, the first that matches:
 *
 * - Kubeflow PyTorchJob, elastic (training-operator v1, elasticPolicy):
 *   PET_RDZV_ENDPOINT (<job>-worker-0:<port>), PET_RDZV_BACKEND (c10d),
 *   PET_NNODES (replicas, or MIN:MAX), PET_MAX_RESTARTS, PET_RDZV_ID,
 *   PET_RDZV_CONF and PET_NPROC_PER_NODE, which options.c reads as
 *   torchrun's own; older operators name the last PET_N_PROC_PER_NODE,
 *   which this reads. The agent whose host name is
 *   the endpoint's (<job>-worker-0, the pod's name) serves the store.
 * - Kubeflow PyTorchJob with a Master replica: MASTER_ADDR
 *   (<job>-master-0), MASTER_PORT (the master's "pytorchjob-port"), RANK
 *   (the pod's index: master 0, worker i is i+1) and WORLD_SIZE (the pods;
 *   in newer operators pods x nprocPerNode when that is a number, with
 *   PET_NNODES, PET_NODE_RANK and PET_NPROC_PER_NODE beside). As torchrun runs there
 *   (--nnodes=$WORLD_SIZE --node-rank=$RANK --master-addr --master-port):
 *   the static backend, the store on MASTER_ADDR:MASTER_PORT hosted by
 *   rank 0, which needs no name of its own to resolve.
 * - Kubeflow Trainer v2 (a JobSet): PET_NNODES, PET_NPROC_PER_NODE,
 *   PET_NODE_RANK (the completion index), PET_MASTER_ADDR
 *   (<trainjob>-node-0-0.<trainjob>), PET_MASTER_PORT (29400): all
 *   torchrun's, read by options.c; with --master-addr, a fixed node count
 *   and no endpoint crun runs static there, as torchrun does.
 * - A plain Indexed Job: JOB_COMPLETION_INDEX is the node rank. The
 *   manifest gives the rest as torchrun's variables: PET_NNODES (the
 *   completions), PET_MASTER_ADDR (<job>-0.<headless service>) and
 *   PET_MASTER_PORT (configs/k8s/indexed-job.yaml).
 *
 * The run id is the job's name, from HOSTNAME (the pod's host name:
 * <job>-master-0 or <job>-worker-I, <job>-INDEX), the same on every pod.
 * No name is resolved at start (resolve_host stays empty): a pod's DNS
 * record appears when the pod is up, and the agents retry until it does. */
#include "launcher/scheduler.h"
#include "launcher/options.h"
#include "common/util.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The value of name, NULL when unset or empty. */
static const char *var(char **envp, const char *name)
{
	const char *v = crun__launch_env_lookup(envp, name);

	return v && *v ? v : NULL;
}

/* name's value as an integer from min to INT32_MAX, or -EINVAL with one
 * line. */
static int var_int(char **envp, const char *name, int64_t min, int64_t *out, char *err,
		   size_t errlen)
{
	char reason[128];

	if (crun__parse_int64(var(envp, name), min, INT32_MAX, out, reason, sizeof(reason)) < 0) {
		crun__seterr(err, errlen, "kubernetes: invalid %s '%s': %s", name, var(envp, name),
			     reason);
		return -EINVAL;
	}
	return 0;
}

/* The job's name: host with the suffix that names the pod taken off
 * ("-master-0", "-worker-3" for a PyTorchJob, "-INDEX" otherwise). False
 * when host does not end so. */
static bool job_name(const char *host, bool pytorchjob, const char *index, char *out, size_t outlen)
{
	size_t len = host ? strlen(host) : 0, end = len;

	if (pytorchjob) {
		while (end > 0 && host[end - 1] >= '0' && host[end - 1] <= '9')
			end--;
		if (end == len)
			return false;
		if (end > 8 && !strncmp(host + end - 8, "-worker-", 8))
			end -= 8;
		else if (end > 8 && !strncmp(host + end - 8, "-master-", 8))
			end -= 8;
		else
			return false;
	} else {
		size_t n = index ? strlen(index) : 0;

		if (!n || len < n + 2 || strcmp(host + len - n, index) || host[len - n - 1] != '-')
			return false;
		end = len - n - 1;
	}
	if (end + 1 > outlen)
		return false;
	memcpy(out, host, end);
	out[end] = '\0';
	return true;
}

static int add_run_id(char **envp, struct crun__sched *s, bool pytorchjob, const char *index)
{
	char name[CRUN_SCHED_TEXT_MAX];

	if (!job_name(var(envp, "HOSTNAME"), pytorchjob, index, name, sizeof(name)))
		return 0;
	return crun__sched_add(s, CRUN_OPT_RDZV_ID, "HOSTNAME", "%s", name);
}

static int elastic(char **envp, struct crun__sched *s)
{
	const char *nproc = var(envp, "PET_N_PROC_PER_NODE");
	int rc = 0;

	snprintf(s->detail, sizeof(s->detail),
		 "elastic PyTorchJob pod, rendezvous %.96s (%.16s), nodes %.32s",
		 var(envp, "PET_RDZV_ENDPOINT"), var(envp, "PET_RDZV_BACKEND"),
		 var(envp, "PET_NNODES"));
	if (nproc)
		rc = crun__sched_add(s, CRUN_OPT_NPROC_PER_NODE, "PET_N_PROC_PER_NODE", "%s",
				     nproc);
	return rc ? rc : add_run_id(envp, s, true, NULL);
}

static int pytorchjob(char **envp, struct crun__sched *s, char *err, size_t errlen)
{
	const char *pet_nnodes = var(envp, "PET_NNODES");
	const char *count_var = "WORLD_SIZE";
	int64_t rank, world, nnodes;
	int rc;

	rc = var_int(envp, "RANK", 0, &rank, err, errlen);
	if (!rc)
		rc = var_int(envp, "WORLD_SIZE", 1, &world, err, errlen);
	if (rc)
		return rc;
	nnodes = world;
	/* Newer operators count processes in WORLD_SIZE, pods in PET_NNODES. */
	if (pet_nnodes) {
		rc = var_int(envp, "PET_NNODES", 1, &nnodes, err, errlen);
		if (rc)
			return rc;
		count_var = "PET_NNODES";
	}
	if (rank >= nnodes) {
		crun__seterr(err, errlen,
			     "kubernetes: RANK=%lld is not below %s=%lld (a PyTorchJob pod's "
			     "index is below the number of pods)",
			     (long long)rank, count_var, (long long)nnodes);
		return -EINVAL;
	}
	snprintf(s->detail, sizeof(s->detail),
		 "PyTorchJob pod, rank %lld of %lld, master %.64s:%.8s", (long long)rank,
		 (long long)nnodes, var(envp, "MASTER_ADDR"), var(envp, "MASTER_PORT"));
	rc = 0;
	if (!pet_nnodes)
		rc = crun__sched_add(s, CRUN_OPT_NNODES, "WORLD_SIZE", "%lld", (long long)world);
	if (!rc)
		rc = crun__sched_add(s, CRUN_OPT_NODE_RANK, "RANK", "%lld", (long long)rank);
	if (!rc)
		rc = crun__sched_add(s, CRUN_OPT_MASTER_ADDR, "MASTER_ADDR", "%s",
				     var(envp, "MASTER_ADDR"));
	if (!rc)
		rc = crun__sched_add(s, CRUN_OPT_MASTER_PORT, "MASTER_PORT", "%s",
				     var(envp, "MASTER_PORT"));
	return rc ? rc : add_run_id(envp, s, true, NULL);
}

static int trainer_v2(char **envp, struct crun__sched *s)
{
	const char *port = var(envp, "PET_MASTER_PORT");

	snprintf(s->detail, sizeof(s->detail),
		 "Trainer v2 (JobSet) pod, node %.16s of %.16s, master %.64s:%.8s",
		 var(envp, "PET_NODE_RANK"), var(envp, "PET_NNODES"), var(envp, "PET_MASTER_ADDR"),
		 port ? port : "29500");
	return add_run_id(envp, s, false, var(envp, "JOB_COMPLETION_INDEX"));
}

static int indexed_job(char **envp, struct crun__sched *s, char *err, size_t errlen)
{
	const char *nnodes = var(envp, "PET_NNODES");
	int64_t index;
	int rc;

	rc = var_int(envp, "JOB_COMPLETION_INDEX", 0, &index, err, errlen);
	if (rc)
		return rc;
	snprintf(s->detail, sizeof(s->detail), "Indexed Job pod, index %lld of %.32s",
		 (long long)index, nnodes ? nnodes : "? (PET_NNODES unset)");
	rc = crun__sched_add(s, CRUN_OPT_NODE_RANK, "JOB_COMPLETION_INDEX", "%lld",
			     (long long)index);
	return rc ? rc : add_run_id(envp, s, false, var(envp, "JOB_COMPLETION_INDEX"));
}

int crun__sched_kubernetes(char **envp, struct crun__sched *s, char *err, size_t errlen)
{
	struct crun__sched found;
	int rc;

	if (!var(envp, "KUBERNETES_SERVICE_HOST"))
		return 0;
	if (crun__sched_in_worker(envp, NULL))
		return 0; /* a worker's container, not a pod's agent */
	crun__sched_init(&found);
	found.kind = CRUN_SCHED_KUBERNETES;
	if (var(envp, "PET_RDZV_ENDPOINT") && var(envp, "PET_RDZV_BACKEND") &&
	    var(envp, "PET_NNODES"))
		rc = elastic(envp, &found);
	else if (var(envp, "MASTER_ADDR") && var(envp, "MASTER_PORT") && var(envp, "RANK") &&
		 var(envp, "WORLD_SIZE"))
		rc = pytorchjob(envp, &found, err, errlen);
	else if (var(envp, "PET_NODE_RANK") && var(envp, "PET_MASTER_ADDR") &&
		 var(envp, "PET_NNODES"))
		rc = trainer_v2(envp, &found);
	else if (var(envp, "JOB_COMPLETION_INDEX"))
		rc = indexed_job(envp, &found, err, errlen);
	else
		return 0; /* a pod, but of no job crun knows: one node */
	if (rc == -ENOSPC)
		crun__seterr(err, errlen, "kubernetes: a variable's value is too long");
	if (rc)
		return -EINVAL;
	*s = found;
	return 1;
}

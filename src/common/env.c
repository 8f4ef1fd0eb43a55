/* The one table of environment tunables (NCCL_PARAM style). The man pages'
 * ENVIRONMENT sections list the same names, defaults and meanings; a test
 * checks that they agree. */
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

static const struct crun__env_param params[] = {
	{"CRUN_STORE", "127.0.0.1:29400",
	 "endpoint HOST:PORT of the job's rendezvous store, set by crun for workers"},
	{"CRUN_RUN_ID", "default", "run id that scopes every key in the store"},
	{"CRUN_ROUND", "0", "rendezvous round of the current attempt, set by crun"},
	{"CRUN_TOKEN", NULL, "job token proving membership to the store (HMAC)"},
	{"CRUN_TOKEN_FILE", NULL, "file holding the job token, read when CRUN_TOKEN is unset"},
	{"CRUN_CONNECT_TIMEOUT", "30s", "how long libcrun retries connecting to the store"},
	{"CRUN_TIMEOUT", "300s", "default timeout of one libcrun store operation"},
	{"CRUN_LOG_LEVEL", "info", "error, warn, info or debug"},
	{"CRUN_COMM_BACKEND", "cpu", "crun-train's collective backend"},
	{"CRUN_COMM_TIMEOUT", "300s",
	 "longest wait for a peer in one collective (and in connecting) before it fails"},
	{"CRUN_COMM_ADDR", NULL,
	 "address a worker listens on for its peers; unset: the one that reaches the store"},
	{"CRUN_COMM_IFNAME", NULL,
	 "interface(s) whose address a worker listens on (eth0,ib0), when CRUN_COMM_ADDR is unset;"
	 " GLOO_SOCKET_IFNAME is read too"},
	{"CRUN_COMM_CHUNK", "1M", "pipelining chunk of the cpu backend's ring steps"},
	{"CRUN_COMM_SOCKBUF", "4M", "socket send and receive buffers of the cpu backend"},
	{"CRUN_COMM_SHM", "1",
	 "1: ranks on one host (and PID namespace) exchange data through shared memory; 0: always"
	 " TCP"},
	{"CRUN_COMM_SEND_THREAD", "0",
	 "1: a second thread per worker sends while the first receives and reduces"},
	{"CRUN_NVML_LIBRARY", "libnvidia-ml.so.1",
	 "the NVML library crun loads to watch the GPUs (a path, or a name the loader finds)"},
	{"CRUN_REMOTE_AGENT", NULL,
	 "1: crun runs on a host for crun --hostfile and takes signals from its stdin"},
};

const struct crun__env_param *crun__env_params(size_t *count)
{
	*count = CRUN_ARRAY_SIZE(params);
	return params;
}

const char *crun__env_get(const char *name)
{
	const char *v = getenv(name);

	if (v && *v)
		return v;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(params); i++)
		if (!strcmp(params[i].name, name))
			return params[i].default_value;
	return NULL;
}

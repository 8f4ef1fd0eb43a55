/* A test double of NVML for the agent's GPU tests (integration/gpu-nvml.sh):
 * a shared library exporting the NVML functions crun uses
 * (src/agent/nvml_abi.h), loaded by crun through CRUN_NVML_LIBRARY.
 *
 * What it reports comes from the text file named by CRUN_NVML_FAKE,
 * read again on every call, so that a test (and its workers) can change
 * it while crun runs. Lines, blank-separated, '#' a comment:
 *   init_fails                      nvmlInit_v2 fails (driver not loaded)
 *   no_processes                    the process listing is not supported
 *                                   (memory still counts the processes)
 *   gpu IDX UUID UTIL% USED TOTAL TEMP POWER_MW ECC_CORR ECC_UNCORR NAME...
 *                                   one device (IDX 0, 1, ... in order);
 *                                   USED: bytes besides the processes'
 *   proc IDX PID BYTES              a compute process on device IDX, listed
 *                                   while it lives and linger_ms after
 *                                   (a worker appends its own line, as a
 *                                   CUDA context would appear)
 *   linger_ms N                     how long a dead process stays listed;
 *                                   -1: forever (default 0)
 *   xid IDX XID                     an XID event on device IDX, delivered
 *                                   once by nvmlEventSetWait_v2
 * A process is first seen dead by whichever call looks; its linger
 * counts from then. When CRUN_NVML_FAKE_CALLS names a file, each process
 * listing that succeeds appends "IDX MS" to it (MS: CLOCK_MONOTONIC in
 * milliseconds), for a test of how often crun asks. Not installed; never
 * built into crun. */
#include "agent/nvml_abi.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GPUS 16
#define MAX_PROCS 256

#define EXPORT __attribute__((visibility("default")))

struct gpu {
	char uuid[96];
	char name[96];
	unsigned int util;
	unsigned long long used, total;
	unsigned int temp, power_mw;
	unsigned long long ecc_c, ecc_u;
};

struct proc {
	int gpu;
	unsigned int pid;
	unsigned long long bytes;
};

struct state {
	bool init_fails;
	bool no_processes;
	int ngpus;
	struct gpu gpus[MAX_GPUS];
	int nprocs;
	struct proc procs[MAX_PROCS];
	long long linger_ms;
	int nxids;
	int xid_gpu[MAX_PROCS];
	unsigned long long xid[MAX_PROCS];
};

/* When each pid was first seen dead (0: not yet). */
static struct {
	unsigned int pid;
	long long dead_ms;
} deaths[MAX_PROCS];
static int ndeaths;
static int xids_delivered;
static int set_token;

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Appends "IDX MS" to $CRUN_NVML_FAKE_CALLS, when set. */
static void note_listing(int idx)
{
	const char *path = getenv("CRUN_NVML_FAKE_CALLS");
	FILE *f;

	if (!path || !(f = fopen(path, "a")))
		return;
	fprintf(f, "%d %lld\n", idx, now_ms());
	fclose(f);
}

static void load(struct state *s)
{
	const char *path = getenv("CRUN_NVML_FAKE");
	char line[512];
	FILE *f;

	memset(s, 0, sizeof(*s));
	if (!path || !(f = fopen(path, "r")))
		return;
	while (fgets(line, sizeof(line), f)) {
		struct gpu g = {0};
		int idx, n = 0;
		unsigned int pid;
		unsigned long long v;
		long long ll;

		line[strcspn(line, "\n")] = '\0';
		if (!strcmp(line, "init_fails")) {
			s->init_fails = true;
		} else if (!strcmp(line, "no_processes")) {
			s->no_processes = true;
		} else if (sscanf(line, "gpu %d %95s %u %llu %llu %u %u %llu %llu %n", &idx, g.uuid,
				  &g.util, &g.used, &g.total, &g.temp, &g.power_mw, &g.ecc_c,
				  &g.ecc_u, &n) == 9 &&
			   n > 0 && idx == s->ngpus && s->ngpus < MAX_GPUS) {
			snprintf(g.name, sizeof(g.name), "%s", line + n);
			s->gpus[s->ngpus++] = g;
		} else if (sscanf(line, "proc %d %u %llu", &idx, &pid, &v) == 3 &&
			   s->nprocs < MAX_PROCS) {
			s->procs[s->nprocs++] = (struct proc){idx, pid, v};
		} else if (sscanf(line, "linger_ms %lld", &ll) == 1) {
			s->linger_ms = ll;
		} else if (sscanf(line, "xid %d %llu", &idx, &v) == 2 && s->nxids < MAX_PROCS) {
			s->xid_gpu[s->nxids] = idx;
			s->xid[s->nxids++] = v;
		}
	}
	fclose(f);
}

/* Whether pid is still listed: alive, or dead for less than linger. */
static bool listed(const struct state *s, unsigned int pid)
{
	int i;

	if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
		return true;
	for (i = 0; i < ndeaths && deaths[i].pid != pid; i++)
		;
	if (i == ndeaths) {
		if (ndeaths == MAX_PROCS)
			return false;
		deaths[ndeaths].pid = pid;
		deaths[ndeaths++].dead_ms = now_ms();
	}
	return s->linger_ms < 0 || now_ms() - deaths[i].dead_ms < s->linger_ms;
}

static int index_of(const struct state *s, nvmlDevice_t d)
{
	int i = (int)((uintptr_t)d - 1);

	return i >= 0 && i < s->ngpus ? i : -1;
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	struct state s;

	load(&s);
	return s.init_fails ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
	return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT:
		return "Timeout";
	default:
		return "Unknown Error";
	}
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	struct state s;

	load(&s);
	*count = (unsigned int)s.ngpus;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	struct state s;

	load(&s);
	if (index >= (unsigned int)s.ngpus)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = (nvmlDevice_t)(uintptr_t)(index + 1);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	struct state s;

	load(&s);
	for (int i = 0; i < s.ngpus; i++)
		if (!strcmp(s.gpus[i].uuid, uuid)) {
			*device = (nvmlDevice_t)(uintptr_t)(i + 1);
			return NVML_SUCCESS;
		}
	return NVML_ERROR_NOT_FOUND;
}

/* Loads the state; d's index, or -1 when d is no device of it. */
static int device(struct state *s, nvmlDevice_t d)
{
	load(s);
	return index_of(s, d);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
	struct state s;
	int i = device(&s, d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s.gpus[i].uuid) >= length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	snprintf(uuid, length, "%s", s.gpus[i].uuid);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
	struct state s;
	int i = device(&s, d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s.gpus[i].name) >= length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	snprintf(name, length, "%s", s.gpus[i].name);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	struct state s;
	int i = device(&s, d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	u->gpu = s.gpus[i].util;
	u->memory = 0;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	struct state s;
	int i = device(&s, d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = s.gpus[i].total;
	m->used = s.gpus[i].used;
	for (int p = 0; p < s.nprocs; p++)
		if (s.procs[p].gpu == i && listed(&s, s.procs[p].pid))
			m->used += s.procs[p].bytes;
	m->free = m->used < m->total ? m->total - m->used : 0;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t sensor,
					     unsigned int *temp)
{
	struct state s;
	int i = device(&s, d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (sensor != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_NOT_SUPPORTED;
	*temp = s.gpus[i].temp;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power)
{
	struct state s;
	int i = device(&s, d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	*power = s.gpus[i].power_mw;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, nvmlMemoryErrorType_t type,
						nvmlEccCounterType_t counter,
						unsigned long long *count)
{
	struct state s;
	int i = device(&s, d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (counter != NVML_VOLATILE_ECC)
		return NVML_ERROR_NOT_SUPPORTED;
	*count = type == NVML_MEMORY_ERROR_TYPE_CORRECTED ? s.gpus[i].ecc_c : s.gpus[i].ecc_u;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
							    nvmlProcessInfo_t *infos)
{
	unsigned int n = 0;
	struct state s;
	int i = device(&s, d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (s.no_processes)
		return NVML_ERROR_NOT_SUPPORTED;
	for (int p = 0; p < s.nprocs; p++) {
		if (s.procs[p].gpu != i || !listed(&s, s.procs[p].pid))
			continue;
		if (n < *count)
			infos[n] = (nvmlProcessInfo_t){.pid = s.procs[p].pid,
						       .usedGpuMemory = s.procs[p].bytes,
						       .gpuInstanceId = 0xFFFFFFFF,
						       .computeInstanceId = 0xFFFFFFFF};
		n++;
	}
	if (n > *count) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*count = n;
	note_listing(i);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	*set = (nvmlEventSet_t)&set_token;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	return set == (nvmlEventSet_t)&set_token ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
					     nvmlEventSet_t set)
{
	struct state s;
	int i = device(&s, d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (set != (nvmlEventSet_t)&set_token || !(types & nvmlEventTypeXidCriticalError))
		return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
					unsigned int timeoutms)
{
	struct state s;

	(void)timeoutms; /* never waits: crun polls with 0 */
	if (set != (nvmlEventSet_t)&set_token)
		return NVML_ERROR_INVALID_ARGUMENT;
	load(&s);
	if (xids_delivered >= s.nxids)
		return NVML_ERROR_TIMEOUT;
	memset(data, 0, sizeof(*data));
	data->device = (nvmlDevice_t)(uintptr_t)(s.xid_gpu[xids_delivered] + 1);
	data->eventType = nvmlEventTypeXidCriticalError;
	data->eventData = s.xid[xids_delivered];
	data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
	xids_delivered++;
	return NVML_SUCCESS;
}

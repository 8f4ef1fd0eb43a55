/* NVML through dlopen (nvml.h). The function pointers are looked up once;
 * a NULL pointer is a function this library lacks, and what it would
 * have read stays unknown. */
#include "agent/nvml.h"
#include "agent/nvml_abi.h"
#include "common/log.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_LIBRARY "libnvidia-ml.so.1"
/* Events taken per poll at most: a GPU that floods XIDs must not hold the
 * loop; the rest wait for the next sample. */
#define MAX_EVENTS_PER_POLL 256

struct crun__nvml {
	void *lib;
	nvmlInit_v2_fn init;
	nvmlShutdown_fn shutdown;
	nvmlErrorString_fn error_string;
	nvmlDeviceGetCount_v2_fn get_count;
	nvmlDeviceGetHandleByIndex_v2_fn get_handle;
	nvmlDeviceGetUUID_fn get_uuid;
	nvmlDeviceGetName_fn get_name;
	nvmlDeviceGetUtilizationRates_fn get_util;
	nvmlDeviceGetMemoryInfo_fn get_memory;
	nvmlDeviceGetTemperature_fn get_temperature;
	nvmlDeviceGetPowerUsage_fn get_power;
	nvmlDeviceGetTotalEccErrors_fn get_ecc;
	nvmlDeviceGetComputeRunningProcesses_v3_fn get_processes;
	nvmlEventSetCreate_fn event_set_create;
	nvmlEventSetFree_fn event_set_free;
	nvmlDeviceRegisterEvents_fn register_events;
	nvmlEventSetWait_v2_fn event_wait;

	int count;
	nvmlDevice_t *devices; /* by index; NULL: no handle */
	nvmlEventSet_t events; /* NULL: XIDs not watched */
	bool *xid_watched;
};

static const char *why(const struct crun__nvml *nv, nvmlReturn_t r)
{
	const char *s = nv->error_string ? nv->error_string(r) : NULL;

	return s ? s : "NVML error";
}

/* dlsym into a function pointer (ISO C has no conversion from void *). */
static void sym(void *lib, const char *name, void *fnp)
{
	void *p = dlsym(lib, name);

	memcpy(fnp, &p, sizeof(p));
}

static void watch_xids(struct crun__nvml *nv)
{
	nvmlReturn_t r;

	if (!nv->event_set_create || !nv->register_events || !nv->event_wait)
		return;
	r = nv->event_set_create(&nv->events);
	if (r != NVML_SUCCESS) {
		crun__debug("NVML: the GPUs' XID errors are not watched (no event set): %s",
			    why(nv, r));
		nv->events = NULL;
		return;
	}
	for (int i = 0; i < nv->count; i++) {
		if (!nv->devices[i])
			continue;
		r = nv->register_events(nv->devices[i], nvmlEventTypeXidCriticalError, nv->events);
		nv->xid_watched[i] = r == NVML_SUCCESS;
		if (r != NVML_SUCCESS)
			crun__debug("NVML: the XID errors of GPU %d are not watched: %s", i,
				    why(nv, r));
	}
}

struct crun__nvml *crun__nvml_open(const char *path)
{
	struct crun__nvml *nv;
	unsigned int count = 0;
	nvmlReturn_t r;

	if (!path || !*path)
		path = DEFAULT_LIBRARY;
	nv = calloc(1, sizeof(*nv));
	if (!nv)
		return NULL;
	nv->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!nv->lib) {
		crun__debug("no NVML, GPUs not monitored: %s", dlerror());
		free(nv);
		return NULL;
	}
	sym(nv->lib, "nvmlInit_v2", &nv->init);
	sym(nv->lib, "nvmlShutdown", &nv->shutdown);
	sym(nv->lib, "nvmlErrorString", &nv->error_string);
	sym(nv->lib, "nvmlDeviceGetCount_v2", &nv->get_count);
	sym(nv->lib, "nvmlDeviceGetHandleByIndex_v2", &nv->get_handle);
	sym(nv->lib, "nvmlDeviceGetUUID", &nv->get_uuid);
	sym(nv->lib, "nvmlDeviceGetName", &nv->get_name);
	sym(nv->lib, "nvmlDeviceGetUtilizationRates", &nv->get_util);
	sym(nv->lib, "nvmlDeviceGetMemoryInfo", &nv->get_memory);
	sym(nv->lib, "nvmlDeviceGetTemperature", &nv->get_temperature);
	sym(nv->lib, "nvmlDeviceGetPowerUsage", &nv->get_power);
	sym(nv->lib, "nvmlDeviceGetTotalEccErrors", &nv->get_ecc);
	sym(nv->lib, "nvmlDeviceGetComputeRunningProcesses_v3", &nv->get_processes);
	sym(nv->lib, "nvmlEventSetCreate", &nv->event_set_create);
	sym(nv->lib, "nvmlEventSetFree", &nv->event_set_free);
	sym(nv->lib, "nvmlDeviceRegisterEvents", &nv->register_events);
	sym(nv->lib, "nvmlEventSetWait_v2", &nv->event_wait);
	if (!nv->init || !nv->shutdown || !nv->get_count || !nv->get_handle) {
		crun__debug(
			"no NVML, GPUs not monitored: the NVML library '%s' is too old (it lacks "
			"nvmlInit_v2, nvmlShutdown, nvmlDeviceGetCount_v2 or "
			"nvmlDeviceGetHandleByIndex_v2)",
			path);
		goto out_close;
	}
	r = nv->init();
	if (r != NVML_SUCCESS) {
		crun__debug("no NVML, GPUs not monitored: nvmlInit: %s", why(nv, r));
		goto out_close;
	}
	r = nv->get_count(&count);
	if (r != NVML_SUCCESS || count > 4096) {
		crun__debug("no NVML, GPUs not monitored: it cannot count the GPUs: %s",
			    r != NVML_SUCCESS ? why(nv, r) : "it gave an implausible count");
		goto out_shutdown;
	}
	nv->count = (int)count;
	nv->devices = calloc(count ? count : 1, sizeof(*nv->devices));
	nv->xid_watched = calloc(count ? count : 1, sizeof(*nv->xid_watched));
	if (!nv->devices || !nv->xid_watched)
		goto out_shutdown;
	for (unsigned int i = 0; i < count; i++) {
		r = nv->get_handle(i, &nv->devices[i]);
		if (r != NVML_SUCCESS) {
			crun__debug("NVML: GPU %u is not monitored: %s", i, why(nv, r));
			nv->devices[i] = NULL;
		}
	}
	watch_xids(nv);
	crun__debug("monitoring %d GPU%s through NVML ('%s')", nv->count, nv->count == 1 ? "" : "s",
		    path);
	return nv;

out_shutdown:
	nv->shutdown();
out_close:
	dlclose(nv->lib);
	free(nv->devices);
	free(nv->xid_watched);
	free(nv);
	return NULL;
}

void crun__nvml_close(struct crun__nvml *nv)
{
	if (!nv)
		return;
	if (nv->events && nv->event_set_free)
		nv->event_set_free(nv->events);
	nv->shutdown();
	dlclose(nv->lib);
	free(nv->devices);
	free(nv->xid_watched);
	free(nv);
}

int crun__nvml_count(const struct crun__nvml *nv)
{
	return nv->count;
}

int crun__nvml_read(struct crun__nvml *nv, int index, struct crun__gpu_reading *r)
{
	nvmlDevice_t d;
	nvmlUtilization_t util;
	nvmlMemory_t mem;

	memset(r, 0, sizeof(*r));
	r->index = index;
	if (index < 0 || index >= nv->count || !nv->devices[index])
		return -ENODEV;
	d = nv->devices[index];
	if (nv->get_uuid && nv->get_uuid(d, r->uuid, sizeof(r->uuid)) == NVML_SUCCESS) {
		r->uuid[sizeof(r->uuid) - 1] = '\0';
		r->has_uuid = true;
	}
	if (nv->get_name && nv->get_name(d, r->name, sizeof(r->name)) == NVML_SUCCESS) {
		r->name[sizeof(r->name) - 1] = '\0';
		r->has_name = true;
	}
	if (nv->get_util && nv->get_util(d, &util) == NVML_SUCCESS) {
		r->util_percent = util.gpu;
		r->has_util = true;
	}
	if (nv->get_memory && nv->get_memory(d, &mem) == NVML_SUCCESS) {
		r->mem_used = mem.used;
		r->mem_total = mem.total;
		r->has_mem = true;
	}
	if (nv->get_temperature &&
	    nv->get_temperature(d, NVML_TEMPERATURE_GPU, &r->temp_c) == NVML_SUCCESS)
		r->has_temp = true;
	if (nv->get_power && nv->get_power(d, &r->power_mw) == NVML_SUCCESS)
		r->has_power = true;
	if (nv->get_ecc) {
		r->has_ecc_corrected =
			nv->get_ecc(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
				    &r->ecc_corrected) == NVML_SUCCESS;
		r->has_ecc_uncorrected =
			nv->get_ecc(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
				    &r->ecc_uncorrected) == NVML_SUCCESS;
	}
	return 0;
}

static int index_of(const struct crun__nvml *nv, nvmlDevice_t d)
{
	for (int i = 0; i < nv->count; i++)
		if (nv->devices[i] && nv->devices[i] == d)
			return i;
	return -1;
}

int crun__nvml_poll_xids(struct crun__nvml *nv, uint64_t *xids, unsigned long long *last_xid)
{
	int n = 0;

	if (!nv->events)
		return -ENOTSUP;
	while (n < MAX_EVENTS_PER_POLL) {
		nvmlEventData_t ev;
		int i;

		memset(&ev, 0, sizeof(ev));
		if (nv->event_wait(nv->events, &ev, 0) != NVML_SUCCESS)
			break; /* NVML_ERROR_TIMEOUT: none queued */
		n++;
		if (!(ev.eventType & (unsigned long long)nvmlEventTypeXidCriticalError))
			continue;
		i = index_of(nv, ev.device);
		if (i < 0)
			continue;
		xids[i]++;
		last_xid[i] = ev.eventData;
	}
	return n;
}

bool crun__nvml_watches_xids(const struct crun__nvml *nv, int index)
{
	return nv->events && index >= 0 && index < nv->count && nv->xid_watched[index];
}

int crun__nvml_processes(struct crun__nvml *nv, int index, pid_t *pids, unsigned long long *mem,
			 int max)
{
	nvmlProcessInfo_t *infos;
	unsigned int n;
	nvmlReturn_t r;

	if (!nv->get_processes)
		return -ENOTSUP;
	if (index < 0 || index >= nv->count || !nv->devices[index] || max < 0)
		return -EIO;
	/* Asked with room for max; NVML says how many there are when more. */
	n = (unsigned int)max;
	infos = calloc((size_t)max + 1, sizeof(*infos));
	if (!infos)
		return -ENOMEM;
	r = nv->get_processes(nv->devices[index], &n, infos);
	if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
		free(infos);
		return n > (unsigned int)max ? (int)n : max + 1;
	}
	if (r != NVML_SUCCESS) {
		free(infos);
		crun__debug("NVML: cannot list the processes of GPU %d: %s", index, why(nv, r));
		return r == NVML_ERROR_NOT_SUPPORTED ? -ENOTSUP : -EIO;
	}
	for (unsigned int i = 0; i < n && i < (unsigned int)max; i++) {
		pids[i] = (pid_t)infos[i].pid;
		if (mem)
			mem[i] = infos[i].usedGpuMemory;
	}
	free(infos);
	return (int)n;
}

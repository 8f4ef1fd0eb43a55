/* GPUs, the pure part (gpu.h). The mapping follows how the CUDA runtime
 * reads CUDA_VISIBLE_DEVICES and how spawn.c sets it for
 * --virtual-local-rank; MIG instances are left unknown because NVML
 * reports their parent GPU under another handle. */
#include "agent/gpu.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static const char *visible_devices(char *const *env, const char *found)
{
	static const char key[] = "CUDA_VISIBLE_DEVICES=";

	for (char *const *e = env; e && *e; e++)
		if (!strncmp(*e, key, sizeof(key) - 1))
			found = *e + sizeof(key) - 1;
	return found;
}

/* The lr-th comma-separated entry of list, trimmed of blanks; false
 * beyond the list. */
static bool entry(const char *list, int lr, char *out, size_t outlen)
{
	const char *p = list;

	for (int i = 0; p; i++) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);

		if (i == lr) {
			while (n && isspace((unsigned char)*p)) {
				p++;
				n--;
			}
			while (n && isspace((unsigned char)p[n - 1]))
				n--;
			if (!n || n >= outlen)
				return false;
			memcpy(out, p, n);
			out[n] = '\0';
			return true;
		}
		p = comma ? comma + 1 : NULL;
	}
	return false;
}

static void from_entry(const char *e, struct crun__gpu_ref *out)
{
	size_t i;

	for (i = 0; isdigit((unsigned char)e[i]); i++)
		;
	if (i > 0 && !e[i] && i < 7) {
		int v = 0;

		for (size_t k = 0; k < i; k++)
			v = v * 10 + (e[k] - '0');
		out->kind = CRUN__GPU_INDEX;
		out->index = v;
		return;
	}
	if (!strncmp(e, "GPU-", 4) && strlen(e) < sizeof(out->uuid)) {
		out->kind = CRUN__GPU_UUID;
		snprintf(out->uuid, sizeof(out->uuid), "%s", e);
	}
}

void crun__gpu_of_rank(char *const *env, char *const *extra_env, int lr, bool virtual_local_rank,
		       struct crun__gpu_ref *out)
{
	const char *list = visible_devices(extra_env, visible_devices(env, NULL));
	char e[96];

	*out = (struct crun__gpu_ref){.kind = CRUN__GPU_UNKNOWN, .index = -1};
	if (lr < 0)
		return;
	if (!list) {
		out->kind = CRUN__GPU_INDEX;
		out->index = lr;
		return;
	}
	if (entry(list, lr, e, sizeof(e))) {
		from_entry(e, out);
		return;
	}
	/* spawn.c: the worker's own device is lr when the list has none */
	if (virtual_local_rank) {
		out->kind = CRUN__GPU_INDEX;
		out->index = lr;
	}
}

int crun__gpu_find(const struct crun__mon_gpu *gpus, int ngpus, const struct crun__gpu_ref *ref)
{
	for (int i = 0; i < ngpus; i++) {
		if (ref->kind == CRUN__GPU_INDEX && gpus[i].index == ref->index)
			return i;
		if (ref->kind == CRUN__GPU_UUID && !strcmp(gpus[i].uuid, ref->uuid))
			return i;
	}
	return -1;
}

void crun__gpu_from_reading(const struct crun__gpu_reading *r, uint64_t xid_total, uint64_t now_ms,
			    struct crun__mon_gpu *out)
{
	*out = (struct crun__mon_gpu){
		.index = r->index,
		.util = r->has_util ? (double)r->util_percent / 100.0 : -1.0,
		.mem_used = -1,
		.mem_total = -1,
		.temp_c = r->has_temp ? (double)r->temp_c : -1.0,
		.power_w = r->has_power ? (double)r->power_mw / 1000.0 : -1.0,
		.ecc_corrected = r->has_ecc_corrected ? r->ecc_corrected : UINT64_MAX,
		.ecc_uncorrected = r->has_ecc_uncorrected ? r->ecc_uncorrected : UINT64_MAX,
		.xid_total = xid_total,
		.sampled_ms = now_ms,
	};
	if (r->has_uuid)
		snprintf(out->uuid, sizeof(out->uuid), "%s", r->uuid);
	if (r->has_name)
		snprintf(out->name, sizeof(out->name), "%s", r->name);
	/* NVML's counters are unsigned 64-bit; the monitor's are signed */
	if (r->has_mem && r->mem_used <= INT64_MAX && r->mem_total <= INT64_MAX) {
		out->mem_used = (int64_t)r->mem_used;
		out->mem_total = (int64_t)r->mem_total;
	}
	if (out->util > 1.0)
		out->util = 1.0;
}

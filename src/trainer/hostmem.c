/* Host memory: the numbers of a failed allocation, said in one line. */
#include "trainer/hostmem.h"
#include "common/procstat.h"
#include "common/util.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

/* The one number in a small file, or 0 (also for "max"). */
static uint64_t file_u64(const char *path)
{
	uint64_t v = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	if (fscanf(f, "%" SCNu64, &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

/* memory.max and memory.current of this process's cgroup v2 (the "0::"
 * line of /proc/self/cgroup under /sys/fs/cgroup); 0 when unknown. */
static void read_cgroup(struct crun__host_avail *out)
{
	char line[PATH_MAX], path[PATH_MAX + 64];
	FILE *f = fopen("/proc/self/cgroup", "re");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3))
			continue;
		line[strcspn(line, "\n")] = '\0';
		snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", line + 3);
		out->cgroup_max = file_u64(path);
		snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.current", line + 3);
		out->cgroup_current = file_u64(path);
		break;
	}
	fclose(f);
}

void crun__host_avail_read(struct crun__host_avail *out)
{
	memset(out, 0, sizeof(*out));
	out->mem_available = crun__procstat_kb("/proc/meminfo", "MemAvailable");
	out->as_limit = crun__procstat_rlimit(RLIMIT_AS);
	out->data_limit = crun__procstat_rlimit(RLIMIT_DATA);
	if (out->as_limit || out->data_limit) {
		out->as_used = crun__procstat_kb("/proc/self/status", "VmSize");
		out->data_used = crun__procstat_kb("/proc/self/status", "VmData");
	}
	out->overcommit_memory = (int)file_u64("/proc/sys/vm/overcommit_memory");
	if (out->overcommit_memory == 2) {
		out->commit_limit = crun__procstat_kb("/proc/meminfo", "CommitLimit");
		out->committed_as = crun__procstat_kb("/proc/meminfo", "Committed_AS");
	}
	read_cgroup(out);
}

/* A message built piece by piece; what does not fit is cut. */
struct line {
	char *buf;
	size_t len, used;
};

static void add(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(struct line *l, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (l->used + 1 >= l->len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(l->buf + l->used, l->len - l->used, fmt, ap);
	va_end(ap);
	if (n > 0)
		l->used += (size_t)n < l->len - l->used ? (size_t)n : l->len - l->used - 1;
}

/* What a limit leaves: the limit less what the process holds already. */
static uint64_t left(uint64_t limit, uint64_t used)
{
	return used < limit ? limit - used : 0;
}

void crun__host_oom_message(const struct crun__host_need *need,
			    const struct crun__host_avail *avail, char *buf, size_t len)
{
	const struct {
		const char *name;
		size_t bytes;
	} kinds[] = {
		{"parameters", need->param_bytes},	{"gradients", need->grad_bytes},
		{"optimizer state", need->optim_bytes}, {"gather buffer", need->gather_bytes},
		{"activations", need->act_bytes},	{"token batch", need->token_bytes},
	};
	struct line l = {buf, len, 0};
	uint64_t total = 0, have = avail->mem_available;
	const char *bound = have ? "MemAvailable" : NULL;
	char h[32], h2[32];
	bool first = true;

	if (len)
		buf[0] = '\0';
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		total += kinds[i].bytes;
	crun__format_bytes(total, h, sizeof(h));
	add(&l,
	    "out of host memory for the model and its buffers: they need %" PRIu64 " bytes (%s:",
	    total, h);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		if (!kinds[i].bytes)
			continue;
		crun__format_bytes(kinds[i].bytes, h, sizeof(h));
		add(&l, "%s %s %s", first ? "" : ",", kinds[i].name, h);
		first = false;
	}
	add(&l, ")");

	if (avail->as_limit && (!bound || left(avail->as_limit, avail->as_used) < have)) {
		have = left(avail->as_limit, avail->as_used);
		bound = "as";
	}
	if (avail->data_limit && (!bound || left(avail->data_limit, avail->data_used) < have)) {
		have = left(avail->data_limit, avail->data_used);
		bound = "data";
	}
	if (!bound) {
		add(&l, "; the memory available is unknown (no MemAvailable in /proc/meminfo)");
	} else {
		crun__format_bytes(have, h, sizeof(h));
		add(&l, ", %" PRIu64 " bytes (%s) available: ", have, h);
		if (!strcmp(bound, "MemAvailable")) {
			add(&l, "MemAvailable of /proc/meminfo");
		} else {
			bool as = !strcmp(bound, "as");

			crun__format_bytes(as ? avail->as_limit : avail->data_limit, h, sizeof(h));
			crun__format_bytes(as ? avail->as_used : avail->data_used, h2, sizeof(h2));
			add(&l, "%s (%s) %s less %s in use", as ? "RLIMIT_AS" : "RLIMIT_DATA",
			    as ? "ulimit -v" : "ulimit -d", h, h2);
			if (avail->mem_available) {
				crun__format_bytes(avail->mem_available, h, sizeof(h));
				add(&l, "; MemAvailable %s", h);
			}
		}
	}
	if (bound && have >= total) {
		bool named = false;

		add(&l, "; the allocator refused them all the same");
		if (avail->overcommit_memory == 2) {
			crun__format_bytes(left(avail->commit_limit, avail->committed_as), h,
					   sizeof(h));
			add(&l,
			    ": vm.overcommit_memory=2 leaves %s (CommitLimit less Committed_AS)",
			    h);
			named = true;
		}
		if (avail->cgroup_max) {
			crun__format_bytes(avail->cgroup_max, h, sizeof(h));
			crun__format_bytes(avail->cgroup_current, h2, sizeof(h2));
			add(&l, "%s cgroup memory.max %s, %s in use", named ? ";" : ":", h, h2);
			named = true;
		}
		if (!named)
			add(&l, ", by a limit not shown here (vm.overcommit_memory=2, a cgroup's "
				"memory.max, a sanitizer's allocation limit)");
	}
	add(&l, ": see OUT OF MEMORY in crun-train(1)");
}

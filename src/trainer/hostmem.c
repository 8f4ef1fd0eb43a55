/* Host memory: the numbers of a failed allocation, said in one line. */
#include "trainer/hostmem.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

/* "Name:   123 kB" of a /proc file, in bytes; 0 when absent. */
static uint64_t proc_kb(const char *path, const char *name)
{
	char line[256];
	size_t n = strlen(name);
	uint64_t kb = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, name, n) && line[n] == ':') {
			if (sscanf(line + n + 1, "%" SCNu64, &kb) != 1)
				kb = 0;
			break;
		}
	}
	fclose(f);
	return kb * 1024;
}

static uint64_t limit_of(int resource)
{
	struct rlimit rl;

	if (getrlimit(resource, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	return (uint64_t)rl.rlim_cur;
}

void crun__host_avail_read(struct crun__host_avail *out)
{
	memset(out, 0, sizeof(*out));
	out->mem_available = proc_kb("/proc/meminfo", "MemAvailable");
	out->as_limit = limit_of(RLIMIT_AS);
	out->data_limit = limit_of(RLIMIT_DATA);
	if (out->as_limit || out->data_limit) {
		out->as_used = proc_kb("/proc/self/status", "VmSize");
		out->data_used = proc_kb("/proc/self/status", "VmData");
	}
}

void crun__format_bytes(uint64_t b, char *buf, size_t len)
{
	if (b >= (UINT64_C(1) << 30))
		snprintf(buf, len, "%.2f GiB", (double)b / (double)(UINT64_C(1) << 30));
	else if (b >= (UINT64_C(1) << 20))
		snprintf(buf, len, "%.2f MiB", (double)b / (double)(UINT64_C(1) << 20));
	else
		snprintf(buf, len, "%.1f KiB", (double)b / 1024);
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
	add(&l, ": see OUT OF MEMORY in crun-train(1)");
}

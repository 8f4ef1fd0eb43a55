/* The standard process metrics of a Prometheus client
 * (process_resident_memory_bytes, process_open_fds, process_max_fds,
 * process_cpu_seconds_total, process_start_time_seconds), read from
 * /proc/self and rendered apart, so that the rendering is pure; and the
 * readers of single /proc fields and limits that other reports share. */
#ifndef CRUN_COMMON_PROCSTAT_H
#define CRUN_COMMON_PROCSTAT_H

#include <stdint.h>

struct crun__prom;

/* Negative: unknown (not rendered). */
struct crun__procstat {
	int64_t rss_bytes;
	int64_t open_fds;
	int64_t max_fds;     /* soft RLIMIT_NOFILE; unlimited: unknown */
	double cpu_seconds;  /* user + system */
	double start_time_s; /* since the epoch */
};

/* Reads this process's figures (/proc/self/statm, /proc/self/fd,
 * getrlimit, getrusage); what cannot be read is left unknown.
 * start_time_ms: when the process started, as it recorded it (wall ms;
 * 0: unknown). */
void crun__procstat_read(struct crun__procstat *s, uint64_t start_time_ms);

/* Resident bytes from the text of /proc/self/statm and the page size;
 * -1 when the text is not statm's. */
int64_t crun__procstat_parse_statm(const char *text, long page_size);

/* The "Name:   123 kB" field of a /proc file (/proc/meminfo,
 * /proc/self/status), in bytes; 0 when the file or the field is absent. */
uint64_t crun__procstat_kb(const char *path, const char *name);

/* The soft limit of an RLIMIT_* resource; 0 when unlimited or unknown. */
uint64_t crun__procstat_rlimit(int resource);

/* The known figures of s, one family each. */
void crun__procstat_render(struct crun__prom *p, const struct crun__procstat *s);

#endif

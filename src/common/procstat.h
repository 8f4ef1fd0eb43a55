/* The standard process metrics of a Prometheus client
 * (process_resident_memory_bytes, process_open_fds, process_max_fds,
 * process_cpu_seconds_total, process_start_time_seconds), read from
 * /proc/self and rendered apart, so that the rendering is pure. */
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

/* The known figures of s, one family each. */
void crun__procstat_render(struct crun__prom *p, const struct crun__procstat *s);

#endif

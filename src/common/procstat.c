#include "common/procstat.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/prom.h"

int64_t crun__procstat_parse_statm(const char *text, long page_size)
{
	unsigned long long size, resident;

	if (page_size <= 0 || sscanf(text, "%llu %llu", &size, &resident) != 2)
		return -1;
	return (int64_t)resident * page_size;
}

static int64_t read_rss(void)
{
	char buf[256];
	ssize_t n;
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return crun__procstat_parse_statm(buf, sysconf(_SC_PAGESIZE));
}

/* Entries of /proc/self/fd, less the one opendir holds. */
static int64_t count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int64_t n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n > 0 ? n - 1 : 0;
}

uint64_t crun__procstat_kb(const char *path, const char *name)
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

uint64_t crun__procstat_rlimit(int resource)
{
	struct rlimit rl;

	if (getrlimit(resource, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	return (uint64_t)rl.rlim_cur;
}

void crun__procstat_read(struct crun__procstat *s, uint64_t start_time_ms)
{
	uint64_t max_fds = crun__procstat_rlimit(RLIMIT_NOFILE);
	struct rusage ru;

	s->rss_bytes = read_rss();
	s->open_fds = count_fds();
	s->max_fds = max_fds ? (int64_t)max_fds : -1;
	s->cpu_seconds = -1;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		s->cpu_seconds = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
				 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	s->start_time_s = start_time_ms ? (double)start_time_ms / 1000.0 : -1;
}

void crun__procstat_render(struct crun__prom *p, const struct crun__procstat *s)
{
	if (s->cpu_seconds >= 0) {
		crun__prom_family(p, "process_cpu_seconds_total", "counter",
				  "Total user and system CPU time spent in seconds.");
		crun__prom_sample(p, "process_cpu_seconds_total", s->cpu_seconds, NULL);
	}
	if (s->open_fds >= 0) {
		crun__prom_family(p, "process_open_fds", "gauge",
				  "Number of open file descriptors.");
		crun__prom_sample_u64(p, "process_open_fds", (uint64_t)s->open_fds, NULL);
	}
	if (s->max_fds >= 0) {
		crun__prom_family(p, "process_max_fds", "gauge",
				  "Maximum number of open file descriptors.");
		crun__prom_sample_u64(p, "process_max_fds", (uint64_t)s->max_fds, NULL);
	}
	if (s->rss_bytes >= 0) {
		crun__prom_family(p, "process_resident_memory_bytes", "gauge",
				  "Resident memory size in bytes.");
		crun__prom_sample_u64(p, "process_resident_memory_bytes", (uint64_t)s->rss_bytes,
				      NULL);
	}
	if (s->start_time_s >= 0) {
		crun__prom_family(p, "process_start_time_seconds", "gauge",
				  "Start time of the process since unix epoch in seconds.");
		crun__prom_sample(p, "process_start_time_seconds", s->start_time_s, NULL);
	}
}

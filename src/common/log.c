#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *log_prog = "crun";
static enum crun__log_level log_level = CRUN_LOG_INFO;

void crun__log_init(const char *prog, enum crun__log_level level)
{
	if (prog) {
		const char *slash = strrchr(prog, '/');
		log_prog = slash ? slash + 1 : prog;
	}
	log_level = level;
}

void crun__log_set_level(enum crun__log_level level)
{
	log_level = level;
}

enum crun__log_level crun__log_get_level(void)
{
	return log_level;
}

const char *crun__log_prog(void)
{
	return log_prog;
}

int crun__log_enabled(enum crun__log_level level)
{
	return level <= log_level;
}

void crun__logv(enum crun__log_level level, const char *fmt, va_list ap)
{
	char line[4096];
	int n, m;

	if (!crun__log_enabled(level))
		return;
	n = snprintf(line, sizeof(line), "%s: %s", log_prog,
		     level == CRUN_LOG_WARN ? "warning: " : "");
	if (n < 0)
		return;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2; /* an absurdly long program name */
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	if (m < 0)
		return;
	n += m;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* One write per line; a short write to a pipe of < PIPE_BUF is atomic. */
	for (int off = 0; off < n;) {
		ssize_t w = write(STDERR_FILENO, line + off, (size_t)(n - off));
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		off += (int)w;
	}
}

void crun__log(enum crun__log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	crun__logv(level, fmt, ap);
	va_end(ap);
}

int crun__usage_error(const char *prog, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	crun__logv(CRUN_LOG_ERROR, fmt, ap);
	va_end(ap);
	crun__usage_hint(prog);
	return 2;
}

void crun__usage_hint(const char *prog)
{
	fprintf(stderr, "try '%s --help'\n", prog);
}

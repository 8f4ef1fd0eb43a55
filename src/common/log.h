/* Logging shared by every crun binary.
 *
 * Lines go to stderr as "<prog>: <message>" (errors), "<prog>: warning: ..."
 * and "<prog>: ..." for info and debug. Each call writes one whole line with
 * one write(2), so lines from several processes sharing a terminal never
 * interleave mid-line. The level is process-wide; set it once in main(). */
#ifndef CRUN_COMMON_LOG_H
#define CRUN_COMMON_LOG_H

#include <stdarg.h>

enum crun__log_level {
	CRUN_LOG_ERROR = 0,
	CRUN_LOG_WARN = 1,
	CRUN_LOG_INFO = 2,
	CRUN_LOG_DEBUG = 3,
};

/* Sets the program name used as prefix (not copied: pass a literal or
 * argv[0]'s basename) and the most verbose level that is printed. */
void crun__log_init(const char *prog, enum crun__log_level level);
void crun__log_set_level(enum crun__log_level level);
enum crun__log_level crun__log_get_level(void);
const char *crun__log_prog(void);

/* True when messages of this level would be printed; use it to skip
 * formatting costly debug lines. */
int crun__log_enabled(enum crun__log_level level);

void crun__log(enum crun__log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void crun__logv(enum crun__log_level level, const char *fmt, va_list ap);

/* A command line's error: the line as crun__error() prints it, then "try
 * 'PROG --help'". Returns 2, the usage error's exit status. */
int crun__usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The hint alone, after an error line printed elsewhere. */
void crun__usage_hint(const char *prog);

#define crun__error(...) crun__log(CRUN_LOG_ERROR, __VA_ARGS__)
#define crun__warn(...) crun__log(CRUN_LOG_WARN, __VA_ARGS__)
#define crun__info(...) crun__log(CRUN_LOG_INFO, __VA_ARGS__)
#define crun__debug(...) crun__log(CRUN_LOG_DEBUG, __VA_ARGS__)

#endif

/* Logging shared by every crun binary.
 *
 * Lines go to stderr as "<prog>: <message>" (errors), "<prog>: warning: ..."
 * and "<prog>: ..." for info and debug. Each call writes one whole line with
 * one write(2), so lines from several processes sharing a terminal never
 * interleave mid-line. The level is process-wide; set it once in main(). */
#ifndef CRUN_COMMON_LOG_H
#define CRUN_COMMON_LOG_H

#include <stdarg.h>

enum crun_log_level {
	CRUN_LOG_ERROR = 0,
	CRUN_LOG_WARN = 1,
	CRUN_LOG_INFO = 2,
	CRUN_LOG_DEBUG = 3,
};

/* Sets the program name used as prefix (not copied: pass a literal or
 * argv[0]'s basename) and the most verbose level that is printed. */
void crun_log_init(const char *prog, enum crun_log_level level);
void crun_log_set_level(enum crun_log_level level);
enum crun_log_level crun_log_get_level(void);
const char *crun_log_prog(void);

/* True when messages of this level would be printed; use it to skip
 * formatting costly debug lines. */
int crun_log_enabled(enum crun_log_level level);

void crun_log(enum crun_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void crun_logv(enum crun_log_level level, const char *fmt, va_list ap);

#define crun_error(...) crun_log(CRUN_LOG_ERROR, __VA_ARGS__)
#define crun_warn(...) crun_log(CRUN_LOG_WARN, __VA_ARGS__)
#define crun_info(...) crun_log(CRUN_LOG_INFO, __VA_ARGS__)
#define crun_debug(...) crun_log(CRUN_LOG_DEBUG, __VA_ARGS__)

#endif

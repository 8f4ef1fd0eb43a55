/* Prometheus's text exposition format (version 0.0.4), written into a
 * growing buffer: a family's # HELP and # TYPE lines, then its samples
 * with their labels. Pure: no I/O.
 *
 * Names follow Prometheus's conventions (crun_ prefix, base units,
 * _total for counters); the writer checks none of it, the unit tests of
 * each renderer do. A family's samples must follow its header without
 * another family between them. Out of memory is sticky: every later
 * call does nothing and crun__prom_failed says so. */
#ifndef CRUN_COMMON_PROM_H
#define CRUN_COMMON_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct crun__prom {
	char *buf; /* NUL-terminated text; owned */
	size_t len, cap;
	bool oom;
};

/* All zero is an empty writer too. */
void crun__prom_init(struct crun__prom *p);
void crun__prom_finish(struct crun__prom *p);
bool crun__prom_failed(const struct crun__prom *p);

/* "# HELP name help\n# TYPE name type\n"; type is "counter", "gauge",
 * "histogram", "summary" or "untyped"; help is escaped (\\ and \n). */
void crun__prom_family(struct crun__prom *p, const char *name, const char *type, const char *help);

/* One sample: name{k1="v1",...} value. The labels are pairs of strings
 * after value, ended by a NULL name; their values are escaped (\\, \",
 * \n). */
void crun__prom_sample(struct crun__prom *p, const char *name, double value, ...);
/* The same with an integer value, written exactly (counters past 2^53). */
void crun__prom_sample_u64(struct crun__prom *p, const char *name, uint64_t value, ...);

/* A histogram's samples (after crun__prom_family(.., "histogram", ..)):
 * name_bucket{le=...} for each of the n upper bounds (counts[i] counts
 * the observations in (bounds[i-1], bounds[i]], not cumulated) and
 * le="+Inf" (count), then name_sum and name_count. No other labels. */
void crun__prom_histogram(struct crun__prom *p, const char *name, const double *bounds,
			  const uint64_t *counts, size_t n, double sum, uint64_t count);

/* A float as the format writes it: "NaN", "+Inf", "-Inf", else the
 * shortest decimal that reads back the same (at most 17 digits). out
 * holds at least 32 bytes. */
void crun__prom_double(char *out, size_t outlen, double v);

/* Appends s escaped as a label value (\\, \", \n) or, when help, as a
 * HELP text (\\, \n). */
void crun__prom_escape(struct crun__prom *p, const char *s, bool help);

#endif

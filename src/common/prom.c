/* The text exposition format as Prometheus's expfmt reads it: one
 * sample per line, "name{labels} value", the value a Go float (NaN,
 * +Inf, -Inf spelled so). */
#include "common/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void crun__prom_init(struct crun__prom *p)
{
	memset(p, 0, sizeof(*p));
}

void crun__prom_finish(struct crun__prom *p)
{
	free(p->buf);
	memset(p, 0, sizeof(*p));
}

bool crun__prom_failed(const struct crun__prom *p)
{
	return p->oom;
}

static bool reserve(struct crun__prom *p, size_t n)
{
	size_t cap;
	char *b;

	if (p->oom)
		return false;
	if (p->len + n + 1 <= p->cap)
		return true;
	cap = p->cap ? p->cap : 4096;
	while (cap < p->len + n + 1)
		cap *= 2;
	b = realloc(p->buf, cap);
	if (!b) {
		p->oom = true;
		return false;
	}
	p->buf = b;
	p->cap = cap;
	return true;
}

static void put(struct crun__prom *p, const char *s, size_t n)
{
	if (!reserve(p, n))
		return;
	memcpy(p->buf + p->len, s, n);
	p->len += n;
	p->buf[p->len] = '\0';
}

static void puts_(struct crun__prom *p, const char *s)
{
	put(p, s, strlen(s));
}

void crun__prom_escape(struct crun__prom *p, const char *s, bool help)
{
	for (; *s; s++) {
		if (*s == '\\')
			put(p, "\\\\", 2);
		else if (*s == '\n')
			put(p, "\\n", 2);
		else if (*s == '"' && !help)
			put(p, "\\\"", 2);
		else
			put(p, s, 1);
	}
}

void crun__prom_family(struct crun__prom *p, const char *name, const char *type, const char *help)
{
	puts_(p, "# HELP ");
	puts_(p, name);
	put(p, " ", 1);
	crun__prom_escape(p, help, true);
	puts_(p, "\n# TYPE ");
	puts_(p, name);
	put(p, " ", 1);
	puts_(p, type);
	put(p, "\n", 1);
}

void crun__prom_double(char *out, size_t outlen, double v)
{
	if (isnan(v)) {
		snprintf(out, outlen, "NaN");
		return;
	}
	if (isinf(v)) {
		snprintf(out, outlen, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	for (int prec = 6; prec <= 17; prec++) {
		snprintf(out, outlen, "%.*g", prec, v);
		if (strtod(out, NULL) == v)
			return;
	}
}

static void labels(struct crun__prom *p, va_list ap)
{
	const char *k = va_arg(ap, const char *);
	bool any = false;

	for (; k; k = va_arg(ap, const char *)) {
		const char *v = va_arg(ap, const char *);

		put(p, any ? "," : "{", 1);
		any = true;
		puts_(p, k);
		put(p, "=\"", 2);
		crun__prom_escape(p, v ? v : "", false);
		put(p, "\"", 1);
	}
	if (any)
		put(p, "}", 1);
}

/* NAME{labels} NUM, the labels from ap. */
static void sample(struct crun__prom *p, const char *name, va_list ap, const char *num)
{
	puts_(p, name);
	labels(p, ap);
	put(p, " ", 1);
	puts_(p, num);
	put(p, "\n", 1);
}

void crun__prom_sample(struct crun__prom *p, const char *name, double value, ...)
{
	char num[40];
	va_list ap;

	crun__prom_double(num, sizeof(num), value);
	va_start(ap, value);
	sample(p, name, ap, num);
	va_end(ap);
}

void crun__prom_sample_u64(struct crun__prom *p, const char *name, uint64_t value, ...)
{
	char num[24];
	va_list ap;

	snprintf(num, sizeof(num), "%llu", (unsigned long long)value);
	va_start(ap, value);
	sample(p, name, ap, num);
	va_end(ap);
}

/* A sample with only an le label (a histogram's bucket). */
static void bucket(struct crun__prom *p, const char *name, const char *le, uint64_t cum)
{
	char num[24];

	puts_(p, name);
	puts_(p, "_bucket{le=\"");
	puts_(p, le);
	snprintf(num, sizeof(num), "\"} %llu\n", (unsigned long long)cum);
	puts_(p, num);
}

void crun__prom_histogram(struct crun__prom *p, const char *name, const double *bounds,
			  const uint64_t *counts, size_t n, double sum, uint64_t count)
{
	char le[40], num[40];
	uint64_t cum = 0;

	for (size_t i = 0; i < n; i++) {
		cum += counts[i];
		crun__prom_double(le, sizeof(le), bounds[i]);
		bucket(p, name, le, cum);
	}
	bucket(p, name, "+Inf", count);
	puts_(p, name);
	crun__prom_double(num, sizeof(num), sum);
	puts_(p, "_sum ");
	puts_(p, num);
	puts_(p, "\n");
	puts_(p, name);
	snprintf(num, sizeof(num), "_count %llu\n", (unsigned long long)count);
	puts_(p, num);
}

/* Liveness of the workers: the deadlines of liveness.h, kept per worker.
 * A deadline is always recomputed from the worker's state (never stored),
 * so that a new beat, a section or a timer changes it in one place. */
#include "agent/liveness.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int crun__liveness_init(struct crun__liveness *lv, const struct crun__liveness_config *cfg,
			int nworkers)
{
	lv->cfg = *cfg;
	lv->n = nworkers;
	lv->w = calloc((size_t)(nworkers > 0 ? nworkers : 1), sizeof(*lv->w));
	if (!lv->w)
		return -ENOMEM;
	for (int i = 0; i < nworkers; i++)
		crun__liveness_gone(lv, i);
	return 0;
}

void crun__liveness_finish(struct crun__liveness *lv)
{
	free(lv->w);
	lv->w = NULL;
	lv->n = 0;
}

void crun__liveness_started(struct crun__liveness *lv, int i)
{
	if (i < 0 || i >= lv->n)
		return;
	lv->w[i] = (struct crun__liveness_worker){.phase = CRUN__PHASE_SILENT, .last_step = -1};
}

void crun__liveness_gone(struct crun__liveness *lv, int i)
{
	if (i < 0 || i >= lv->n)
		return;
	lv->w[i] = (struct crun__liveness_worker){.phase = CRUN__PHASE_GONE, .last_step = -1};
}

static bool name_char(char c)
{
	return isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-';
}

/* A name of name_char()s filling [s, s+len) and shorter than the cap. */
static bool take_name(const char *s, size_t len, char *name)
{
	if (!len || len >= CRUN__LIVENESS_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!name_char(s[i]))
			return false;
	memcpy(name, s, len);
	name[len] = '\0';
	return true;
}

/* A decimal number >= 0 filling [s, s+len): digits, at most one '.',
 * an exponent; no sign in front, no "inf", "nan" or hexadecimal. */
static bool take_seconds(const char *s, size_t len, double *out)
{
	char buf[32], *end;
	double v;

	if (!len || len >= sizeof(buf) || !(isdigit((unsigned char)s[0]) || s[0] == '.'))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isdigit((unsigned char)s[i]) && (!s[i] || !strchr(".eE+-", s[i])))
			return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	errno = 0;
	v = strtod(buf, &end);
	if (*end || errno || !isfinite(v) || v < 0)
		return false;
	*out = v;
	return true;
}

enum crun__liveness_line crun__liveness_parse(const char *line, size_t len, int64_t *step,
					      double *work_s, char *name)
{
	static const char begin[] = "section begin ", end[] = "section end ";

	while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	if (len == 4 && !memcmp(line, "beat", 4))
		return CRUN__LINE_BEAT;
	if (len > 5 && !memcmp(line, "step ", 5)) {
		const char *sp = memchr(line + 5, ' ', len - 5);
		size_t nlen = sp ? (size_t)(sp - (line + 5)) : len - 5;
		char num[24];

		if (nlen >= sizeof(num))
			return CRUN__LINE_UNKNOWN;
		memcpy(num, line + 5, nlen);
		num[nlen] = '\0';
		if (!isdigit((unsigned char)num[0]) ||
		    crun__parse_int64(num, 0, INT64_MAX, step, NULL, 0) < 0)
			return CRUN__LINE_UNKNOWN;
		*work_s = -1;
		if (sp && !take_seconds(sp + 1, len - 5 - nlen - 1, work_s))
			return CRUN__LINE_UNKNOWN;
		return CRUN__LINE_STEP;
	}
	if (len > sizeof(begin) - 1 && !memcmp(line, begin, sizeof(begin) - 1))
		return take_name(line + sizeof(begin) - 1, len - (sizeof(begin) - 1), name)
			       ? CRUN__LINE_SECTION_BEGIN
			       : CRUN__LINE_UNKNOWN;
	if (len > sizeof(end) - 1 && !memcmp(line, end, sizeof(end) - 1))
		return take_name(line + sizeof(end) - 1, len - (sizeof(end) - 1), name)
			       ? CRUN__LINE_SECTION_END
			       : CRUN__LINE_UNKNOWN;
	return CRUN__LINE_UNKNOWN;
}

static bool watched(const struct crun__liveness_worker *w)
{
	return w->phase != CRUN__PHASE_GONE && w->phase != CRUN__PHASE_HUNG;
}

void crun__liveness_hung(struct crun__liveness *lv, int i)
{
	if (i < 0 || i >= lv->n || !watched(&lv->w[i]))
		return;
	lv->w[i].phase = CRUN__PHASE_HUNG;
}

static int64_t section_timeout(const struct crun__liveness_config *cfg, const char *name)
{
	for (int i = 0; i < cfg->nsections; i++)
		if (!strcmp(cfg->sections[i].name, name))
			return cfg->sections[i].timeout_ms;
	return 0;
}

/* The steady timeout of w: the configured one, or the observed one. */
static int64_t steady_timeout(const struct crun__liveness_config *cfg,
			      const struct crun__liveness_worker *w)
{
	double t;

	if (cfg->auto_factor <= 0 || w->intervals < CRUN__LIVENESS_AUTO_SAMPLES)
		return cfg->timeout_ms;
	t = (double)w->max_interval * cfg->auto_factor;
	if (t < CRUN__LIVENESS_AUTO_FLOOR_MS)
		t = CRUN__LIVENESS_AUTO_FLOOR_MS;
	return t > 1e15 ? INT64_MAX / 4 : (int64_t)t;
}

static void beat(struct crun__liveness_worker *w, uint64_t now)
{
	if (w->phase == CRUN__PHASE_STEADY) {
		uint64_t d = now > w->since_ms ? now - w->since_ms : 0;
		if (d > w->max_interval)
			w->max_interval = d;
		w->intervals++;
	}
	w->phase = CRUN__PHASE_STEADY;
	w->since_ms = now;
}

enum crun__liveness_line crun__liveness_line(struct crun__liveness *lv, int i, const char *line,
					     size_t len, uint64_t now_ms)
{
	struct crun__liveness_worker *w;
	char name[CRUN__LIVENESS_NAME_MAX];
	int64_t step = -1;
	double work_s;
	enum crun__liveness_line kind;

	if (i < 0 || i >= lv->n)
		return CRUN__LINE_UNKNOWN;
	w = &lv->w[i];
	kind = crun__liveness_parse(line, len, &step, &work_s, name);
	if (!watched(w))
		return kind;
	if (kind == CRUN__LINE_UNKNOWN) {
		w->unknown_lines++;
		return kind;
	}
	if (w->phase == CRUN__PHASE_SILENT) {
		w->phase = CRUN__PHASE_INITIAL;
		w->since_ms = now_ms;
	}
	switch (kind) {
	case CRUN__LINE_STEP:
		w->last_step = step;
		beat(w, now_ms);
		break;
	case CRUN__LINE_BEAT:
		beat(w, now_ms);
		break;
	case CRUN__LINE_SECTION_BEGIN:
		memcpy(w->section, name, sizeof(name));
		w->section_ms = now_ms;
		w->section_timeout_ms = section_timeout(&lv->cfg, name);
		break;
	case CRUN__LINE_SECTION_END:
		if (strcmp(w->section, name))
			break; /* not the open one */
		w->section[0] = '\0';
		w->section_timeout_ms = 0;
		/* A section is a sign of life, as ft_launcher takes it: a worker
		 * that only speaks in sections is steady from its first end, and
		 * the steady clock starts again at each. */
		w->phase = CRUN__PHASE_STEADY;
		w->since_ms = now_ms;
		break;
	case CRUN__LINE_UNKNOWN:
		break;
	}
	return kind;
}

int crun__liveness_file_timer(struct crun__liveness *lv, int i, const char *scope, int pid,
			      int signal, bool release, uint64_t deadline_ms)
{
	struct crun__liveness_worker *w;
	struct crun__liveness_timer *t = NULL;

	if (i < 0 || i >= lv->n || !watched(&lv->w[i]))
		return 0;
	w = &lv->w[i];
	for (int k = 0; k < w->ntimers; k++) {
		if (w->timers[k].pid == pid &&
		    !strncmp(w->timers[k].scope, scope, CRUN__LIVENESS_SCOPE_MAX - 1)) {
			t = &w->timers[k];
			break;
		}
	}
	if (release) {
		if (t)
			*t = w->timers[--w->ntimers];
		return 0;
	}
	if (!t) {
		if (w->ntimers == CRUN__LIVENESS_MAX_TIMERS)
			return -ENOSPC;
		t = &w->timers[w->ntimers++];
		snprintf(t->scope, sizeof(t->scope), "%s", scope);
		t->pid = pid;
	}
	t->signal = signal;
	t->deadline_ms = deadline_ms;
	return 0;
}

static uint64_t after(uint64_t t, int64_t ms)
{
	return (uint64_t)ms > UINT64_MAX - t ? UINT64_MAX : t + (uint64_t)ms;
}

/* w's heartbeat deadline (not its timers'); UINT64_MAX: none. */
static uint64_t beat_deadline(const struct crun__liveness_config *cfg,
			      const struct crun__liveness_worker *w, enum crun__liveness_why *why)
{
	int64_t t;

	if (w->section[0] && w->section_timeout_ms > 0) {
		*why = CRUN__HUNG_SECTION;
		return after(w->section_ms, w->section_timeout_ms);
	}
	switch (w->phase) {
	case CRUN__PHASE_INITIAL:
		*why = CRUN__HUNG_INITIAL;
		t = cfg->initial_timeout_ms;
		break;
	case CRUN__PHASE_STEADY:
		*why = CRUN__HUNG_STEADY;
		t = steady_timeout(cfg, w);
		break;
	default:
		return UINT64_MAX;
	}
	return t > 0 ? after(w->since_ms, t) : UINT64_MAX;
}

uint64_t crun__liveness_next_deadline(const struct crun__liveness *lv)
{
	uint64_t next = UINT64_MAX;

	for (int i = 0; i < lv->n; i++) {
		const struct crun__liveness_worker *w = &lv->w[i];
		enum crun__liveness_why why;
		uint64_t d;

		if (!watched(w))
			continue;
		d = beat_deadline(&lv->cfg, w, &why);
		if (d < next)
			next = d;
		for (int k = 0; k < w->ntimers; k++)
			if (w->timers[k].deadline_ms < next)
				next = w->timers[k].deadline_ms;
	}
	return next;
}

static void hang_of(const struct crun__liveness *lv, int i, enum crun__liveness_why why,
		    uint64_t now_ms, struct crun__liveness_hang *out)
{
	const struct crun__liveness_worker *w = &lv->w[i];

	*out = (struct crun__liveness_hang){.worker = i, .why = why, .last_step = w->last_step};
	if (why == CRUN__HUNG_SECTION) {
		out->waited_ms = (int64_t)(now_ms - w->section_ms);
		out->timeout_ms = w->section_timeout_ms;
		snprintf(out->name, sizeof(out->name), "%s", w->section);
	} else {
		out->waited_ms = (int64_t)(now_ms - w->since_ms);
		out->timeout_ms = why == CRUN__HUNG_INITIAL ? lv->cfg.initial_timeout_ms
							    : steady_timeout(&lv->cfg, w);
	}
}

/* Lower is more suspect: stopped or traced, then stuck in the kernel.
 * Running and sleeping say nothing: a rank asleep in a deadlock and ranks
 * spinning in a collective's wait (NCCL's) look the same from outside. */
static int state_rank(char state)
{
	switch (state) {
	case 'T':
	case 't':
		return 0;
	case 'D':
		return 1;
	default:
		return 2;
	}
}

/* Whether worker a (deadline da) is more suspect than b (deadline db). */
static bool more_suspect(const struct crun__liveness *lv, const char *states, int a, uint64_t da,
			 int b, uint64_t db)
{
	int sa = state_rank(states ? states[a] : 0), sb = state_rank(states ? states[b] : 0);

	if (sa != sb)
		return sa < sb;
	if (lv->w[a].last_step >= 0 && lv->w[b].last_step >= 0 &&
	    lv->w[a].last_step != lv->w[b].last_step)
		return lv->w[a].last_step < lv->w[b].last_step;
	if (da != db)
		return da < db;
	return a < b;
}

bool crun__liveness_check(struct crun__liveness *lv, uint64_t now_ms, const char *states,
			  struct crun__liveness_hang *out)
{
	enum crun__liveness_why why, best_why = 0;
	uint64_t best_d = UINT64_MAX;
	bool overdue = false;
	int best = -1;

	for (int i = 0; i < lv->n; i++) {
		struct crun__liveness_worker *w = &lv->w[i];

		if (!watched(w))
			continue;
		for (int k = 0; k < w->ntimers; k++) {
			const struct crun__liveness_timer *t = &w->timers[k];
			if (t->deadline_ms > now_ms)
				continue;
			*out = (struct crun__liveness_hang){
				.worker = i,
				.why = CRUN__HUNG_FILE_TIMER,
				.waited_ms = (int64_t)(now_ms - t->deadline_ms),
				.last_step = w->last_step,
				.pid = t->pid,
				.signal = t->signal,
			};
			snprintf(out->name, sizeof(out->name), "%s", t->scope);
			w->timers[k] = w->timers[--w->ntimers];
			return true;
		}
		if (beat_deadline(&lv->cfg, w, &why) <= now_ms)
			overdue = true;
	}
	if (!overdue)
		return false;
	for (int i = 0; i < lv->n; i++) {
		const struct crun__liveness_worker *w = &lv->w[i];
		uint64_t d, grace;
		int64_t timeout;

		if (!watched(w))
			continue;
		d = beat_deadline(&lv->cfg, w, &why);
		if (d == UINT64_MAX)
			continue;
		timeout = why == CRUN__HUNG_SECTION   ? w->section_timeout_ms
			  : why == CRUN__HUNG_INITIAL ? lv->cfg.initial_timeout_ms
						      : steady_timeout(&lv->cfg, w);
		grace = (uint64_t)(timeout / 2 < CRUN__LIVENESS_BLAME_MS ? timeout / 2
									 : CRUN__LIVENESS_BLAME_MS);
		if (d > after(now_ms, (int64_t)grace))
			continue;
		if (best < 0 || more_suspect(lv, states, i, d, best, best_d)) {
			best = i;
			best_d = d;
			best_why = why;
		}
	}
	if (best < 0)
		return false;
	hang_of(lv, best, best_why, now_ms, out);
	lv->w[best].phase = CRUN__PHASE_HUNG;
	return true;
}

/* "30 s", "2.5 s" */
static void seconds(char *buf, size_t len, int64_t ms)
{
	if (ms % 1000 == 0)
		snprintf(buf, len, "%" PRId64 " s", ms / 1000);
	else
		snprintf(buf, len, "%.1f s", (double)ms / 1000.0);
}

void crun__liveness_describe(const struct crun__liveness_hang *h, char *buf, size_t len)
{
	char waited[32], step[48];

	seconds(waited, sizeof(waited), h->waited_ms);
	if (h->last_step >= 0)
		snprintf(step, sizeof(step), "last step %" PRId64, h->last_step);
	else
		snprintf(step, sizeof(step), "no step yet");
	switch (h->why) {
	case CRUN__HUNG_INITIAL:
		snprintf(buf, len, "no first heartbeat for %s (initial timeout), %s", waited, step);
		return;
	case CRUN__HUNG_STEADY:
		snprintf(buf, len, "no heartbeat for %s, %s", waited, step);
		return;
	case CRUN__HUNG_SECTION:
		snprintf(buf, len, "section '%s' open for %s (its timeout), %s", h->name, waited,
			 step);
		return;
	case CRUN__HUNG_FILE_TIMER:
		snprintf(buf, len, "FileTimer '%s' of pid %d expired, %s", h->name, h->pid, step);
		return;
	}
	snprintf(buf, len, "hung");
}

int crun__liveness_parse_sections(const char *s, struct crun__liveness_config *cfg, char *err,
				  size_t errlen)
{
	const char *p = s;

	cfg->nsections = 0;
	if (!*s || !strcmp(s, "none"))
		return 0;
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		const char *eq = memchr(p, '=', n);
		struct crun__liveness_section *sec;
		char val[32];
		int64_t ms;

		if (cfg->nsections == CRUN__LIVENESS_MAX_SECTIONS) {
			crun__seterr(err, errlen, "at most %d sections",
				     CRUN__LIVENESS_MAX_SECTIONS);
			return -EINVAL;
		}
		sec = &cfg->sections[cfg->nsections];
		if (!eq || !take_name(p, (size_t)(eq - p), sec->name)) {
			crun__seterr(err, errlen,
				     "expected NAME=DURATION,... with names of letters, digits, "
				     "'.', '_' or '-' (at most %d characters)",
				     CRUN__LIVENESS_NAME_MAX - 1);
			return -EINVAL;
		}
		if ((size_t)(p + n - eq - 1) >= sizeof(val)) {
			crun__seterr(err, errlen, "duration of section '%s' too long", sec->name);
			return -EINVAL;
		}
		memcpy(val, eq + 1, (size_t)(p + n - eq - 1));
		val[p + n - eq - 1] = '\0';
		if (crun__parse_duration_ms(val, &ms, NULL, 0) < 0 || ms <= 0 ||
		    ms > 7 * 86400000LL) {
			crun__seterr(err, errlen,
				     "timeout of section '%s': expected a duration up to 7 days "
				     "like 30, 2.5s, 500ms or 5m",
				     sec->name);
			return -EINVAL;
		}
		for (int i = 0; i < cfg->nsections; i++) {
			if (!strcmp(cfg->sections[i].name, sec->name)) {
				crun__seterr(err, errlen, "section '%s' given twice", sec->name);
				return -EINVAL;
			}
		}
		sec->timeout_ms = ms;
		cfg->nsections++;
		p = comma ? comma + 1 : p + n;
	}
	return 0;
}

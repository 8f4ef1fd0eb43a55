/* Stragglers (straggler.h).
 *
 * Why it is shaped this way:
 * - Medians, not means: one checkpoint, one slow batch or the first
 *   step's compilation moves a mean but not a median of 20 intervals, and
 *   a rank that is slow on more than half of its last steps is slow
 *   persistently, which is what a warning should mean.
 * - The job's median is the lower one: with two ranks, one of them slow,
 *   the middle of the two would halve the ratio.
 * - A rank's median is computed when its window moves, and the job's
 *   when a step time changes: the other nodes' times are sorted once per
 *   summary read, this node's few are sorted and the two merged by a
 *   binary search, so a flood of beats costs no sort of the whole job. */
#include "agent/straggler.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lrank {
	bool seen;	   /* a beat arrived: last_* are set */
	bool work;	   /* ring holds work times (else intervals) */
	int64_t last_step; /* of the last beat */
	uint64_t last_ms;
	double *ring; /* per-step intervals, window of them */
	int n, head;
	double step_ms; /* median of ring once full, else < 0 */
	bool slow;	/* in a straggler episode */
};

struct remote {
	int rank;
	double step_ms;
};

struct crun__straggler {
	struct crun__straggler_conf conf;
	int nlocal;
	int rank_offset;
	bool fresh;
	struct lrank *ranks;
	double *rings; /* nlocal x window */
	double *scratch;
	size_t scratch_cap;
	struct remote *remote;
	size_t nremote, remote_cap;
	bool remote_sorted; /* remote[] in step_ms order */
	bool median_ok;	    /* median is the job's for the times held */
	double median;	    /* < 0: fewer than two ranks have a time */
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int cmp_remote(const void *a, const void *b)
{
	return cmp_double(&((const struct remote *)a)->step_ms,
			  &((const struct remote *)b)->step_ms);
}

/* The k-th smallest (from 0) of the union of sorted a[0..na-1] and the
 * sorted step times of b[0..nb-1], k < na + nb: a binary search on how
 * many come from a. */
static double kth_of_two(const double *a, size_t na, const struct remote *b, size_t nb, size_t k)
{
	size_t lo = k + 1 > nb ? k + 1 - nb : 0, hi = k + 1 < na ? k + 1 : na;

	for (;;) {
		size_t i = lo + (hi - lo) / 2, j = k + 1 - i;

		if (i > 0 && j < nb && a[i - 1] > b[j].step_ms) {
			hi = i - 1;
		} else if (j > 0 && i < na && b[j - 1].step_ms > a[i]) {
			lo = i + 1;
		} else {
			double x = i > 0 ? a[i - 1] : b[j - 1].step_ms;

			return j > 0 && b[j - 1].step_ms > x ? b[j - 1].step_ms : x;
		}
	}
}

/* The job's lower median: of this node's step times (sorted in scratch)
 * and the other nodes' (sorted once per change); < 0 with fewer than two. */
static double job_median(struct crun__straggler *s)
{
	size_t n = 0;

	if (!s->remote_sorted) {
		qsort(s->remote, s->nremote, sizeof(*s->remote), cmp_remote);
		s->remote_sorted = true;
	}
	for (int i = 0; i < s->nlocal; i++)
		if (s->ranks[i].step_ms >= 0)
			s->scratch[n++] = s->ranks[i].step_ms;
	if (n + s->nremote < 2)
		return -1;
	qsort(s->scratch, n, sizeof(*s->scratch), cmp_double);
	return kth_of_two(s->scratch, n, s->remote, s->nremote, (n + s->nremote - 1) / 2);
}

static int grow_scratch(struct crun__straggler *s, size_t n)
{
	double *p;

	if (n <= s->scratch_cap)
		return 0;
	p = realloc(s->scratch, n * sizeof(*p));
	if (!p)
		return -ENOMEM;
	s->scratch = p;
	s->scratch_cap = n;
	return 0;
}

static void lrank_clear(struct lrank *r)
{
	r->seen = false;
	r->work = false;
	r->n = 0;
	r->head = 0;
	r->step_ms = -1;
	r->slow = false;
}

struct crun__straggler *crun__straggler_create(const struct crun__straggler_conf *conf, int nlocal,
					       int rank_offset)
{
	struct crun__straggler *s;

	if (!(conf->factor == 0 || conf->factor > 1) || conf->window < 2 ||
	    conf->window > CRUN__STRAGGLER_WINDOW_MAX || nlocal < 1 ||
	    nlocal > CRUN__STRAGGLER_RANKS_MAX)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->conf = *conf;
	s->nlocal = nlocal;
	s->ranks = calloc((size_t)nlocal, sizeof(*s->ranks));
	s->rings = calloc((size_t)nlocal * (size_t)conf->window, sizeof(*s->rings));
	if (!s->ranks || !s->rings ||
	    grow_scratch(s, (size_t)(conf->window > nlocal ? conf->window : nlocal)) < 0) {
		crun__straggler_destroy(s);
		return NULL;
	}
	for (int i = 0; i < nlocal; i++)
		s->ranks[i].ring = s->rings + (size_t)i * (size_t)conf->window;
	crun__straggler_reset(s, rank_offset);
	return s;
}

void crun__straggler_destroy(struct crun__straggler *s)
{
	if (!s)
		return;
	free(s->ranks);
	free(s->rings);
	free(s->scratch);
	free(s->remote);
	free(s);
}

void crun__straggler_reset(struct crun__straggler *s, int rank_offset)
{
	s->rank_offset = rank_offset;
	s->fresh = false;
	for (int i = 0; i < s->nlocal; i++)
		lrank_clear(&s->ranks[i]);
	s->nremote = 0;
	s->remote_sorted = true;
	s->median_ok = false;
}

/* Adds count samples of v ms to r's window; its step time once full. */
static void take(struct crun__straggler *s, struct lrank *r, double v, int64_t count)
{
	int w = s->conf.window;

	for (int64_t i = 0; i < count && i < w; i++) {
		r->ring[r->head] = v;
		r->head = (r->head + 1) % w;
		if (r->n < w)
			r->n++;
	}
	if (r->n == w) {
		memcpy(s->scratch, r->ring, (size_t)w * sizeof(*r->ring));
		/* The middle of the window: its two middles averaged when even. */
		qsort(s->scratch, (size_t)w, sizeof(*s->scratch), cmp_double);
		r->step_ms = (s->scratch[(w - 1) / 2] + s->scratch[w / 2]) / 2;
	}
}

static void add_beat(struct crun__straggler *s, struct lrank *r, int64_t step, double work_ms,
		     uint64_t now_ms)
{
	bool work = work_ms >= 0;
	int64_t d;

	s->fresh = true;
	if (!r->seen || step <= r->last_step || work != r->work) {
		bool slow = r->slow;

		lrank_clear(r);
		r->slow = slow; /* a restart of the count is not a recovery */
		r->seen = true;
		r->work = work;
		r->last_step = step;
		r->last_ms = now_ms;
		if (work)
			take(s, r, work_ms, 1);
		return;
	}
	d = step - r->last_step;
	if (work)
		take(s, r, work_ms, 1);
	else
		take(s, r, now_ms > r->last_ms ? (double)(now_ms - r->last_ms) / (double)d : 0, d);
	r->last_step = step;
	r->last_ms = now_ms;
}

bool crun__straggler_beat(struct crun__straggler *s, int local_rank, int64_t step, double work_ms,
			  uint64_t now_ms)
{
	double before;

	if (local_rank < 0 || local_rank >= s->nlocal || step < 0)
		return false;
	before = s->ranks[local_rank].step_ms;
	add_beat(s, &s->ranks[local_rank], step, work_ms, now_ms);
	if (s->ranks[local_rank].step_ms == before)
		return false;
	s->median_ok = false;
	return true;
}

bool crun__straggler_fresh(const struct crun__straggler *s)
{
	return s->fresh;
}

bool crun__straggler_has_times(const struct crun__straggler *s)
{
	for (int i = 0; i < s->nlocal; i++)
		if (s->ranks[i].step_ms >= 0)
			return true;
	return false;
}

size_t crun__straggler_summary_max(const struct crun__straggler *s)
{
	return sizeof("steps 1\n") + (size_t)s->nlocal * CRUN__STRAGGLER_SUMMARY_LINE;
}

int crun__straggler_summary(struct crun__straggler *s, char *buf, size_t len)
{
	size_t off;

	if (len < crun__straggler_summary_max(s))
		return -ENOBUFS;
	off = (size_t)snprintf(buf, len, "steps 1\n");
	for (int i = 0; i < s->nlocal; i++) {
		const struct lrank *r = &s->ranks[i];

		if (r->step_ms < 0)
			continue;
		off += (size_t)snprintf(buf + off, len - off, "%d %" PRId64 " %" PRId64 "\n",
					s->rank_offset + i, (int64_t)(r->step_ms * 1000 + 0.5),
					r->last_step);
	}
	s->fresh = false;
	return (int)off;
}

void crun__straggler_remote_clear(struct crun__straggler *s)
{
	s->nremote = 0;
	s->remote_sorted = true;
	s->median_ok = false;
}

/* Parses a decimal int64 at *p (no sign), moving *p past it. */
static bool parse_num(const char **p, const char *end, int64_t *v)
{
	int64_t x = 0;
	const char *q = *p;

	if (q == end || *q < '0' || *q > '9')
		return false;
	for (; q < end && *q >= '0' && *q <= '9'; q++) {
		if (x > (INT64_MAX - 9) / 10)
			return false;
		x = x * 10 + (*q - '0');
	}
	*p = q;
	*v = x;
	return true;
}

int crun__straggler_remote_add(struct crun__straggler *s, const char *text, size_t len, char *err,
			       size_t errlen)
{
	static const char head[] = "steps 1\n";
	const char *p = text, *end = text + len;
	size_t keep = s->nremote;
	int line = 1;

	if (len < sizeof(head) - 1 || memcmp(text, head, sizeof(head) - 1)) {
		snprintf(err, errlen, "not a summary (no 'steps 1' line)");
		return -EINVAL;
	}
	p += sizeof(head) - 1;
	while (p < end) {
		int64_t rank, us, step;
		struct remote *rr;

		line++;
		if (!parse_num(&p, end, &rank) || p == end || *p++ != ' ' ||
		    !parse_num(&p, end, &us) || p == end || *p++ != ' ' ||
		    !parse_num(&p, end, &step) || p == end || *p++ != '\n' || rank > INT32_MAX) {
			snprintf(err, errlen, "line %d: not 'RANK STEP_US LAST_STEP'", line);
			s->nremote = keep;
			return -EINVAL;
		}
		if (rank >= s->rank_offset && rank < (int64_t)s->rank_offset + s->nlocal)
			continue;
		if (s->nremote == s->remote_cap) {
			size_t cap = s->remote_cap ? 2 * s->remote_cap : 64;

			rr = realloc(s->remote, cap * sizeof(*rr));
			if (!rr) {
				s->nremote = keep;
				return -ENOMEM;
			}
			s->remote = rr;
			s->remote_cap = cap;
		}
		s->remote[s->nremote++] = (struct remote){(int)rank, (double)us / 1000};
		s->remote_sorted = false;
		s->median_ok = false;
	}
	return 0;
}

int crun__straggler_check(struct crun__straggler *s, struct crun__straggler_event *ev, int max)
{
	double median, recover;
	int out = 0;

	if (s->conf.factor == 0)
		return 0;
	if (!s->median_ok) {
		s->median = job_median(s);
		s->median_ok = true;
	}
	median = s->median;
	if (median <= 0)
		return 0; /* steps below the clock's resolution */
	recover = 1 + (s->conf.factor - 1) / 2;
	for (int i = 0; i < s->nlocal && out < max; i++) {
		struct lrank *r = &s->ranks[i];
		enum crun__straggler_kind kind;

		if (r->step_ms < 0)
			continue;
		if (!r->slow && r->step_ms >= s->conf.factor * median)
			kind = CRUN_STRAGGLER_SLOW;
		else if (r->slow && r->step_ms < recover * median)
			kind = CRUN_STRAGGLER_RECOVERED;
		else
			continue;
		r->slow = kind == CRUN_STRAGGLER_SLOW;
		ev[out++] = (struct crun__straggler_event){
			.kind = kind,
			.rank = s->rank_offset + i,
			.local_rank = i,
			.step_ms = r->step_ms,
			.median_ms = median,
			.window = s->conf.window,
			.work = r->work,
		};
	}
	return out;
}

bool crun__straggler_pace(const struct crun__straggler *s, int local_rank, double *step_ms,
			  double *median_ms)
{
	if (local_rank < 0 || local_rank >= s->nlocal || s->ranks[local_rank].step_ms < 0 ||
	    !s->median_ok || s->median <= 0)
		return false;
	*step_ms = s->ranks[local_rank].step_ms;
	*median_ms = s->median;
	return true;
}

int crun__straggler_format(const struct crun__straggler_event *ev, const char *host, char *buf,
			   size_t len)
{
	double ratio = ev->median_ms > 0 ? ev->step_ms / ev->median_ms : 0;

	const char *per = ev->work ? "s of work/step" : "s/step";

	if (ev->kind == CRUN_STRAGGLER_SLOW)
		return snprintf(buf, len,
				"rank %d on %s is a straggler: %.3g %s, %.1fx the job's median "
				"%.3g s over the last %d steps",
				ev->rank, host, ev->step_ms / 1000, per, ratio,
				ev->median_ms / 1000, ev->window);
	return snprintf(buf, len,
			"rank %d on %s is no longer a straggler: %.3g %s, %.1fx the job's "
			"median %.3g s",
			ev->rank, host, ev->step_ms / 1000, per, ratio, ev->median_ms / 1000);
}

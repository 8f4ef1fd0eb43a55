/* The repeat rule (repeat.h). Time is the only sign of progress a worker
 * that never beats gives; a worker that beats is also judged by its steps,
 * so that a quick attempt that got further still counts. */
#include "agent/repeat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool crun__failure_same(const struct crun__attempt_failure *p,
			const struct crun__attempt_failure *cur)
{
	if (p->rank != cur->rank || cur->by_agent)
		return false;
	if (!p->by_agent) {
		if (p->term_signal != cur->term_signal)
			return false;
		if (!p->term_signal && p->exit_code != cur->exit_code)
			return false;
	}
	if (!p->message || !cur->message)
		return !p->message && !cur->message;
	return strcmp(p->message, cur->message) == 0;
}

bool crun__attempt_progressed(const struct crun__attempt *prev, const struct crun__attempt *cur,
			      int64_t min_attempt_ms)
{
	if (min_attempt_ms == 0 || (cur->max_step >= 0 && cur->max_step > prev->max_step))
		return true;
	return cur->duration_ms >= min_attempt_ms;
}

enum crun__restart_verdict crun__restart_verdict(const struct crun__attempt *prev,
						 const struct crun__attempt *cur,
						 int64_t min_attempt_ms)
{
	const struct crun__attempt_failure *first;

	if (!cur->n)
		return CRUN__RESTART;
	first = &cur->v[0];
	if (!first->term_signal && first->exit_code == CRUN__EXIT_CONFIG)
		return CRUN__NO_RESTART_CONFIG;
	if (crun__attempt_progressed(prev, cur, min_attempt_ms))
		return CRUN__RESTART;
	for (size_t i = 0; i < prev->n; i++)
		if (crun__failure_same(&prev->v[i], first))
			return CRUN__NO_RESTART_REPEAT;
	return CRUN__RESTART;
}

int crun__attempt_add(struct crun__attempt *a, const struct crun__attempt_failure *f)
{
	struct crun__attempt_failure *c;

	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 8;
		struct crun__attempt_failure *nv = realloc(a->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		a->v = nv;
		a->cap = cap;
	}
	c = &a->v[a->n];
	*c = *f;
	if (f->message) {
		c->message = strdup(f->message);
		if (!c->message)
			return -ENOMEM;
	}
	a->n++;
	return 0;
}

void crun__attempt_clear(struct crun__attempt *a)
{
	for (size_t i = 0; i < a->n; i++)
		free((char *)a->v[i].message);
	a->n = 0;
	a->max_step = -1;
	a->duration_ms = 0;
}

void crun__attempt_finish(struct crun__attempt *a)
{
	crun__attempt_clear(a);
	free(a->v);
	a->v = NULL;
	a->cap = 0;
}

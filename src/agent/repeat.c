/* The repeat rule (repeat.h). Time is the only sign of progress a worker
 * that never beats gives; a worker that beats is also judged by its steps,
 * so that a quick attempt that got further still counts. */
#include "agent/repeat.h"

#include <stddef.h>
#include <string.h>

bool crun__failure_same(const struct crun__attempt_failure *a,
			const struct crun__attempt_failure *b)
{
	if (!a->failed || !b->failed)
		return false;
	if (a->rank != b->rank || a->term_signal != b->term_signal)
		return false;
	if (!a->term_signal && a->exit_code != b->exit_code)
		return false;
	if (!a->message || !b->message)
		return !a->message && !b->message;
	return strcmp(a->message, b->message) == 0;
}

bool crun__attempt_progressed(const struct crun__attempt_failure *prev,
			      const struct crun__attempt_failure *cur, int64_t min_attempt_ms)
{
	if (cur->max_step >= 0 && cur->max_step > prev->max_step)
		return true;
	return min_attempt_ms > 0 && cur->duration_ms >= min_attempt_ms;
}

enum crun__restart_verdict crun__restart_verdict(const struct crun__attempt_failure *prev,
						 const struct crun__attempt_failure *cur,
						 int64_t min_attempt_ms)
{
	if (!cur || !cur->failed)
		return CRUN__RESTART;
	if (!cur->term_signal && cur->exit_code == CRUN__EXIT_CONFIG)
		return CRUN__NO_RESTART_CONFIG;
	if (prev && crun__failure_same(prev, cur) &&
	    !crun__attempt_progressed(prev, cur, min_attempt_ms))
		return CRUN__NO_RESTART_REPEAT;
	return CRUN__RESTART;
}

/* A log line rate limit: at most burst lines per period, the lines held
 * back counted so that the next line allowed can say how many there were.
 * Pure: the caller passes the time. */
#ifndef CRUN_COMMON_RATELIMIT_H
#define CRUN_COMMON_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

struct crun__ratelimit {
	uint64_t period_ms;  /* set by the owner */
	uint32_t burst;	     /* lines per period; set by the owner */
	uint64_t start_ms;   /* the current period's start */
	uint32_t in_period;  /* lines allowed in it */
	uint64_t suppressed; /* lines held back since the last allowed */
};

/* True when a line may be logged at now_ms; *held then receives the number
 * of lines held back since the last one allowed (0 when none), which the
 * line should mention. False (the line counted as held back) otherwise. */
static inline bool crun__ratelimit_allow(struct crun__ratelimit *rl, uint64_t now_ms,
					 uint64_t *held)
{
	if (rl->in_period == 0 || now_ms - rl->start_ms >= rl->period_ms) {
		rl->start_ms = now_ms;
		rl->in_period = 0;
	}
	if (rl->in_period >= rl->burst) {
		rl->suppressed++;
		return false;
	}
	rl->in_period++;
	*held = rl->suppressed;
	rl->suppressed = 0;
	return true;
}

#endif

/* Whether a failed attempt is worth another: the rule that keeps crun from
 * restarting a failure that will only happen again. A pure function of
 * two attempts' failures; the executor (group.c) gathers them (exit
 * status, the worker's error file, the attempt's heartbeat step and
 * length) and the state machine (group_step.c) acts on the verdict.
 *
 * The rule (crun(1), RESTARTS):
 *   - a worker that exits CRUN__EXIT_CONFIG says its configuration is
 *     bad: every attempt would fail the same way, so none follows;
 *   - an attempt whose first failure is the same as the previous
 *     attempt's (same rank, same exit code or signal, same message from
 *     the error file, or both without one) and that made no progress
 *     stops the job: the first failure is retried once, not
 *     --max-restarts times. Progress is a heartbeat step higher than the
 *     previous attempt's highest, or an attempt that lasted at least the
 *     minimum attempt time (--min-attempt-time): a worker that never
 *     beats is judged by time alone. */
#ifndef CRUN_AGENT_REPEAT_H
#define CRUN_AGENT_REPEAT_H

#include <stdbool.h>
#include <stdint.h>

/* The exit status of a worker that found its configuration bad (EX_CONFIG
 * of sysexits.h, as crun-train exits). */
#define CRUN__EXIT_CONFIG 78

/* The first failure of an attempt, as the repeat rule sees it. */
struct crun__attempt_failure {
	bool failed; /* false: the attempt had no failure of its own here */
	int rank;
	int exit_code;
	int term_signal;     /* 0: exited normally */
	const char *message; /* from the worker's error file; NULL: none */
	int64_t max_step;    /* highest heartbeat step of the attempt; -1: none */
	int64_t duration_ms; /* from the attempt's start to this failure */
};

enum crun__restart_verdict {
	CRUN__RESTART = 0,	 /* restart while restarts are left */
	CRUN__NO_RESTART_CONFIG, /* the worker exited CRUN__EXIT_CONFIG */
	CRUN__NO_RESTART_REPEAT, /* the previous attempt's failure again, without
				  * progress */
};

/* The verdict on cur, the first failure of the attempt that just failed,
 * given prev, the previous attempt's (prev->failed false: none, or the
 * attempt ended for another reason, such as another node's failure).
 * min_attempt_ms: the minimum attempt time (0: time never counts as
 * progress). Both may be NULL: RESTART. */
enum crun__restart_verdict crun__restart_verdict(const struct crun__attempt_failure *prev,
						 const struct crun__attempt_failure *cur,
						 int64_t min_attempt_ms);

/* True when a and b failed the same way: rank, exit code, signal and
 * message (two missing messages are the same). */
bool crun__failure_same(const struct crun__attempt_failure *a,
			const struct crun__attempt_failure *b);

/* True when cur made progress over prev: a heartbeat step above prev's
 * highest, or at least min_attempt_ms long. */
bool crun__attempt_progressed(const struct crun__attempt_failure *prev,
			      const struct crun__attempt_failure *cur, int64_t min_attempt_ms);

#endif

/* Whether a failed attempt is worth another: the rule that keeps crun from
 * restarting a failure that will only happen again. A pure function of
 * two attempts' failures; the executor (group.c) gathers them (exit
 * status, the worker's error file, the attempt's heartbeat step and
 * length) and the state machine (group_step.c) acts on the verdict.
 *
 * The rule (crun(1), RESTARTS):
 *   - a worker that exits CRUN__EXIT_CONFIG says its configuration is
 *     bad: every attempt would fail the same way, so none follows;
 *   - an attempt whose first failure is one of the previous attempt's
 *     failures again (same rank, same exit code or signal, same message
 *     from the error file, or both without one) and that made no progress
 *     stops the job: the failure is retried once, not --max-restarts
 *     times. Progress is a heartbeat step higher than the previous
 *     attempt's highest, or an attempt that lasted at least the minimum
 *     attempt time (--min-attempt-time): a worker that never beats is
 *     judged by time alone.
 *
 * The previous attempt's failures are its first one and every rank that
 * failed on its own after it, and also a rank that wrote its error file
 * and then died of the agent's signal (by_agent): when every rank meets
 * the same error (a full disk), which of them the agent reaps first is
 * chance, and the rule must not depend on it. */
#ifndef CRUN_AGENT_REPEAT_H
#define CRUN_AGENT_REPEAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The exit status of a worker that found its configuration bad (EX_CONFIG
 * of sysexits.h, as crun-train exits). */
#define CRUN__EXIT_CONFIG 78

/* One failed worker of an attempt. */
struct crun__attempt_failure {
	int rank;
	int exit_code;
	int term_signal;     /* 0: exited normally */
	bool by_agent;	     /* died of the agent's SIGTERM or SIGKILL after
			      * writing its error file: its exit status tells
			      * nothing, its message does */
	const char *message; /* from the worker's error file; NULL: none */
};

/* The failures of an attempt, in the order the agent saw them: v[0] is
 * the first (n == 0: none). max_step and duration_ms are the attempt's
 * when its first failure came: the highest heartbeat step (-1: none) and
 * the time since the attempt started. */
struct crun__attempt {
	struct crun__attempt_failure *v;
	size_t n, cap;
	int64_t max_step;
	int64_t duration_ms;
};

enum crun__restart_verdict {
	CRUN__RESTART = 0,	 /* restart while restarts are left */
	CRUN__NO_RESTART_CONFIG, /* the worker exited CRUN__EXIT_CONFIG */
	CRUN__NO_RESTART_REPEAT, /* the previous attempt's failure again, without
				  * progress */
};

/* The verdict on cur, the attempt that just failed, given prev, the
 * previous attempt (n == 0: none, or it ended for another reason, such as
 * another node's failure). min_attempt_ms: the minimum attempt time (0:
 * every attempt counts as progress, so that only CRUN__EXIT_CONFIG stops
 * restarts). */
enum crun__restart_verdict crun__restart_verdict(const struct crun__attempt *prev,
						 const struct crun__attempt *cur,
						 int64_t min_attempt_ms);

/* True when cur, a failure of the worker's own (not by_agent), is p
 * again: rank, message (two missing messages are the same) and, unless p
 * is by_agent, exit code or signal. */
bool crun__failure_same(const struct crun__attempt_failure *p,
			const struct crun__attempt_failure *cur);

/* True when cur made progress over prev: a heartbeat step above prev's
 * highest, or at least min_attempt_ms long (always when it is 0). */
bool crun__attempt_progressed(const struct crun__attempt *prev, const struct crun__attempt *cur,
			      int64_t min_attempt_ms);

/* Appends a copy of f (its message copied) to a. 0 or -ENOMEM. */
int crun__attempt_add(struct crun__attempt *a, const struct crun__attempt_failure *f);
/* Empties a (max_step -1, duration 0); keeps its array. */
void crun__attempt_clear(struct crun__attempt *a);
/* Empties a and frees its array. */
void crun__attempt_finish(struct crun__attempt *a);

#endif

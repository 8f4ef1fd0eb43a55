/* Liveness of the workers, as a pure function of what they said and when.
 *
 * Each worker may speak on its heartbeat channel (CRUN_HEARTBEAT_FD), one
 * line at a time:
 *   step N               a beat at training step N (N >= 0)
 *   step N WORK          the same, and step N took WORK seconds of this
 *                        worker's own work (computing, loading data: not
 *                        waiting for the others in collectives), a
 *                        decimal number >= 0 ("0.041", "4.1e-2")
 *   beat                 a beat without a step
 *   section begin NAME   NAME starts (a checkpoint, an evaluation)
 *   section end NAME     NAME is over
 * and through torch's FileTimer protocol, timers that expire at a time of
 * their own. A worker that never says anything is never watched.
 *
 * The deadlines, as NVIDIA's ft_launcher has them:
 *   - initial: from the first line until the first beat (`step` or `beat`)
 *     or the first section end (sections are signs of life too);
 *   - steady: from each beat (or section end) to the next; with an auto
 *     factor F > 0, once CRUN__LIVENESS_AUTO_SAMPLES intervals between
 *     beats were seen, the steady timeout becomes F times the longest of
 *     them (at least CRUN__LIVENESS_AUTO_FLOOR_MS);
 *   - a section with a timeout of its own: from its begin; it replaces the
 *     initial or steady deadline while it is open (a section without one
 *     changes nothing). One section is open at a time: a begin while one
 *     is open replaces it.
 *   - a FileTimer: its expiration time.
 * A timeout of 0 turns that kind off.
 *
 * Times are milliseconds of one monotonic clock, passed in by the caller.
 * Nothing here reads a clock, a file or a descriptor. */
#ifndef CRUN_AGENT_LIVENESS_H
#define CRUN_AGENT_LIVENESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRUN__LIVENESS_MAX_SECTIONS 16
#define CRUN__LIVENESS_NAME_MAX 64   /* a section name, NUL included */
#define CRUN__LIVENESS_SCOPE_MAX 128 /* a FileTimer scope id, NUL included */
#define CRUN__LIVENESS_MAX_TIMERS 32 /* FileTimers held per worker */
#define CRUN__LIVENESS_AUTO_SAMPLES 5
#define CRUN__LIVENESS_AUTO_FLOOR_MS 1000
/* Longest heartbeat line taken; a longer one is dropped as unknown. */
#define CRUN__LIVENESS_LINE_MAX 256

struct crun__liveness_section {
	char name[CRUN__LIVENESS_NAME_MAX];
	int64_t timeout_ms;
};

struct crun__liveness_config {
	int64_t initial_timeout_ms; /* 0: none */
	int64_t timeout_ms;	    /* steady; 0: none */
	double auto_factor;	    /* 0: off */
	struct crun__liveness_section sections[CRUN__LIVENESS_MAX_SECTIONS];
	int nsections;
};

enum crun__liveness_line {
	CRUN__LINE_UNKNOWN = 0,
	CRUN__LINE_STEP,
	CRUN__LINE_BEAT,
	CRUN__LINE_SECTION_BEGIN,
	CRUN__LINE_SECTION_END,
};

enum crun__liveness_phase {
	CRUN__PHASE_SILENT = 0, /* nothing heard: not watched */
	CRUN__PHASE_INITIAL,	/* heard, no beat yet */
	CRUN__PHASE_STEADY,	/* beating */
	CRUN__PHASE_HUNG,	/* declared hung: no longer watched */
	CRUN__PHASE_GONE,	/* exited or not started: not watched */
};

struct crun__liveness_timer {
	char scope[CRUN__LIVENESS_SCOPE_MAX];
	int pid;
	int signal;
	uint64_t deadline_ms;
};

struct crun__liveness_worker {
	enum crun__liveness_phase phase;
	uint64_t since_ms;		       /* first line (INITIAL), last beat (STEADY) */
	int64_t last_step;		       /* -1: none */
	uint64_t max_interval;		       /* longest interval between beats */
	int intervals;			       /* beats intervals seen */
	char section[CRUN__LIVENESS_NAME_MAX]; /* "" when none is open */
	uint64_t section_ms;		       /* its begin */
	int64_t section_timeout_ms;	       /* 0: none of its own */
	struct crun__liveness_timer timers[CRUN__LIVENESS_MAX_TIMERS];
	int ntimers;
	uint64_t unknown_lines;
};

enum crun__liveness_why {
	CRUN__HUNG_INITIAL = 1, /* no first beat within the initial timeout */
	CRUN__HUNG_STEADY,	/* no beat within the steady timeout */
	CRUN__HUNG_SECTION,	/* a section outlived its timeout */
	CRUN__HUNG_FILE_TIMER,	/* a FileTimer expired */
};

/* Who is hung and why; filled by crun__liveness_check(). */
struct crun__liveness_hang {
	int worker;
	enum crun__liveness_why why;
	int64_t waited_ms;		     /* since the reference (first line, beat, begin) */
	int64_t timeout_ms;		     /* the timeout that passed */
	int64_t last_step;		     /* -1: none */
	char name[CRUN__LIVENESS_SCOPE_MAX]; /* the section or the scope */
	int pid;			     /* FILE_TIMER: the request's pid */
	int signal;			     /* FILE_TIMER: the request's signal */
};

/* The workers of one attempt. Zero-initialised, then crun__liveness_init. */
struct crun__liveness {
	struct crun__liveness_config cfg;
	struct crun__liveness_worker *w;
	int n;
};

/* 0 or -ENOMEM; every worker GONE. */
int crun__liveness_init(struct crun__liveness *lv, const struct crun__liveness_config *cfg,
			int nworkers);
void crun__liveness_finish(struct crun__liveness *lv);

/* Worker i started (SILENT: not watched until it speaks) / is gone. */
void crun__liveness_started(struct crun__liveness *lv, int i);
void crun__liveness_gone(struct crun__liveness *lv, int i);
/* Worker i is declared hung (a FileTimer of a process of its own expired
 * and the caller found that process alive): not watched any more. A worker
 * not watched stays as it is. */
void crun__liveness_hung(struct crun__liveness *lv, int i);

/* Parses one heartbeat line (without its newline; a trailing '\r' or
 * spaces are allowed). STEP sets *step, and *work_s to its WORK seconds,
 * or -1 when the line has none; SECTION_* copy the name into name
 * (CRUN__LIVENESS_NAME_MAX bytes). Anything else, a WORK that is not a
 * finite decimal number >= 0 included, is UNKNOWN. */
enum crun__liveness_line crun__liveness_parse(const char *line, size_t len, int64_t *step,
					      double *work_s, char *name);

/* Worker i said line at now. Returns what it was (UNKNOWN lines are
 * counted in the worker's unknown_lines and change nothing else). A
 * worker that is GONE or HUNG ignores it. */
enum crun__liveness_line crun__liveness_line(struct crun__liveness *lv, int i, const char *line,
					     size_t len, uint64_t now_ms);

/* A FileTimer request of worker i: deadline_ms (on the caller's clock)
 * for scope, or, with release, the end of scope's timer. -ENOSPC when the
 * worker holds CRUN__LIVENESS_MAX_TIMERS already, else 0. A worker that is
 * GONE or HUNG ignores it. FileTimers are watched whatever the phase. */
int crun__liveness_file_timer(struct crun__liveness *lv, int i, const char *scope, int pid,
			      int signal, bool release, uint64_t deadline_ms);

/* The earliest deadline of any watched worker, UINT64_MAX when none. */
uint64_t crun__liveness_next_deadline(const struct crun__liveness *lv);

/* Who is hung at now: true, *out filled, and that worker is HUNG from now
 * on; false when no deadline has passed.
 *
 * A FileTimer that expired comes first: true, *out names its worker, the
 * pid and the signal, and the timer is dropped; its worker stays watched.
 * Only the caller can tell whether that pid is still a process of that
 * worker (it may have exited, its pid reused): it declares the worker
 * hung with crun__liveness_hung(), or goes on (as torch's server does
 * when the pid is gone, or when the signal is <= 0: nothing to kill).
 * Otherwise, once a deadline
 * has passed, the suspects are every worker whose heartbeat deadline
 * passes within CRUN__LIVENESS_BLAME_MS (at most half its timeout) of it:
 * ranks that wait for each other in a collective all fall silent when one
 * of them stops. The one blamed is, in this order, the one whose process
 * is stopped or traced (state 'T' or 't'), then one in uninterruptible
 * sleep ('D'), then any other (running and sleeping alike: a rank asleep
 * in a deadlock and ranks spinning in a collective's wait look the same);
 * then, of two that beat steps, the one with the lower last step (behind
 * the others); then the earliest deadline; then the lowest index. states[i] is worker i's process
 * state letter as /proc/PID/stat has it, 0 when unknown; states may be NULL. */
#define CRUN__LIVENESS_BLAME_MS 1000
bool crun__liveness_check(struct crun__liveness *lv, uint64_t now_ms, const char *states,
			  struct crun__liveness_hang *out);

/* "no heartbeat for 30 s, last step 1184" and the like. */
void crun__liveness_describe(const struct crun__liveness_hang *h, char *buf, size_t len);

/* Parses "NAME=DURATION,..." (durations as crun's: 30, 2.5s, 500ms, 1m;
 * names of letters, digits, '.', '_', '-'), "" or "none" for none. 0 or
 * -EINVAL with a reason in err. */
int crun__liveness_parse_sections(const char *s, struct crun__liveness_config *cfg, char *err,
				  size_t errlen);

#endif

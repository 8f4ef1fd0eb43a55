/* Stragglers: which of this node's ranks is persistently slower than the
 * job, from the workers' step beats.
 *
 * A pure core: no I/O, no clock. The edge (straggler_watch.h) hands it
 * every beat with the time it arrived, the other nodes' summaries it read
 * from the store, and asks it what to say.
 *
 * - A rank's step time is the median of its last `window` per-step
 *   intervals. A beat N after a beat M < N at t ms later counts as N - M
 *   steps of t / (N - M) ms each (skipped step numbers are fine); a beat
 *   that does not move forward (N <= M: the worker restarted, or resumed
 *   from an earlier checkpoint) starts the rank's history again. A rank has
 *   a step time only once its window is full.
 * - A beat that says how long the step's own work took (`step N WORK`:
 *   the time not spent waiting for the others in collectives) adds that
 *   instead, once, whatever the steps skipped. In lock-step training every
 *   rank waits for the slowest at each collective, so every rank's beat
 *   interval is the same and only the work names the slow one. A rank's
 *   window holds one kind: a beat of the other kind starts it again.
 * - The job's median is the lower median of the step times of every rank
 *   that has one: this node's and those in the other nodes' summaries.
 *   With fewer than two such ranks nothing is decided.
 * - A rank of this node is a straggler when its step time is at least
 *   factor x the job's median; it has recovered when it falls below
 *   1 + (factor - 1) / 2 times the median (so a rank near the line does not
 *   flap). One SLOW event per episode, one RECOVERED at its end.
 *
 * Not thread-safe; every function runs on the caller's thread. */
#ifndef CRUN_AGENT_STRAGGLER_H
#define CRUN_AGENT_STRAGGLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRUN__STRAGGLER_FACTOR 1.5
#define CRUN__STRAGGLER_WINDOW 20
/* The largest window accepted (steps). */
#define CRUN__STRAGGLER_WINDOW_MAX 10000
/* A summary's size cap, in bytes, for a node of at most this many ranks. */
#define CRUN__STRAGGLER_SUMMARY_LINE 64
#define CRUN__STRAGGLER_RANKS_MAX 4096

struct crun__straggler_conf {
	double factor; /* > 1; 0 disables the detector */
	int window;    /* steps, 2..CRUN__STRAGGLER_WINDOW_MAX */
};

enum crun__straggler_kind {
	CRUN_STRAGGLER_SLOW = 1,
	CRUN_STRAGGLER_RECOVERED = 2,
};

struct crun__straggler_event {
	enum crun__straggler_kind kind;
	int rank;	/* global */
	int local_rank; /* on this node */
	double step_ms;
	double median_ms; /* the job's */
	int window;
	bool work; /* step_ms is the rank's work per step, not its interval */
};

struct crun__straggler;

/* A detector for nlocal ranks (1..CRUN__STRAGGLER_RANKS_MAX) whose global
 * ranks start at rank_offset. NULL on a bad conf (factor not 0 and not
 * above 1, window outside 2..CRUN__STRAGGLER_WINDOW_MAX) or no memory. */
struct crun__straggler *crun__straggler_create(const struct crun__straggler_conf *conf, int nlocal,
					       int rank_offset);
/* NULL is allowed. */
void crun__straggler_destroy(struct crun__straggler *s);

/* A new attempt: forgets every beat, summary and episode; the ranks now
 * start at rank_offset. */
void crun__straggler_reset(struct crun__straggler *s, int rank_offset);

/* Local rank local_rank said it reached step at now_ms (any monotonic
 * clock in ms), having worked work_ms on it (< 0: not said). A local rank
 * outside 0..nlocal-1 or a negative step is ignored. True when the beat
 * changed that rank's step time (it got one, lost it or it moved): only
 * then can crun__straggler_check say something new. */
bool crun__straggler_beat(struct crun__straggler *s, int local_rank, int64_t step, double work_ms,
			  uint64_t now_ms);

/* True when beats arrived since the last crun__straggler_summary(): the
 * summary has something new to publish. */
bool crun__straggler_fresh(const struct crun__straggler *s);

/* True when some local rank has a step time (a full window): only then
 * is there anything to decide, and the other nodes' summaries worth
 * reading. */
bool crun__straggler_has_times(const struct crun__straggler *s);

/* This node's summary into buf: "steps 1\n", then one line
 * "RANK STEP_US LAST_STEP\n" per rank with a step time. Clears fresh.
 * Returns its length, or -ENOBUFS when len is smaller than
 * crun__straggler_summary_max(s) (nothing written then). */
int crun__straggler_summary(struct crun__straggler *s, char *buf, size_t len);
/* The longest summary this node writes, with its terminating NUL. */
size_t crun__straggler_summary_max(const struct crun__straggler *s);

/* The other nodes' summaries: remote_clear drops the ones held, then
 * remote_add parses one (text of len bytes, not NUL-terminated) and keeps
 * its ranks. A rank of this node's range is ignored. 0, -EINVAL for a
 * malformed summary (err says why; none of it is kept), -ENOMEM. */
void crun__straggler_remote_clear(struct crun__straggler *s);
int crun__straggler_remote_add(struct crun__straggler *s, const char *text, size_t len, char *err,
			       size_t errlen);

/* Decides: writes at most max events (at most one per local rank, in local
 * rank order) to ev and returns how many; each SLOW once per episode. The
 * job's median is kept between calls and found again only after a local
 * rank's step time changed or the other nodes' summaries did, without
 * sorting the whole job's step times: the other nodes' are sorted once
 * when they arrive, this node's on each change. */
int crun__straggler_check(struct crun__straggler *s, struct crun__straggler_event *ev, int max);
/* Local rank local_rank's step time (the median of its window, ms) and
 * the job's median as the last crun__straggler_check() found it; false
 * when either is unknown. */
bool crun__straggler_pace(const struct crun__straggler *s, int local_rank, double *step_ms,
			  double *median_ms);

/* The event's line, host naming this node:
 *   "rank 5 on host-b is a straggler: 0.31 s/step, 1.9x the job's median
 *    0.16 s over the last 20 steps"
 *   "rank 2 on host-b is a straggler: 0.062 s of work/step, 2.6x the
 *    job's median 0.024 s over the last 20 steps" (from work times)
 *   "rank 5 on host-b is no longer a straggler: 0.17 s/step, 1.1x the
 *    job's median 0.16 s"
 * Returns what snprintf does. */
int crun__straggler_format(const struct crun__straggler_event *ev, const char *host, char *buf,
			   size_t len);

#endif

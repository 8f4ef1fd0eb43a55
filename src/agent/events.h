/* The events file (`--events FILE`): every monitor event (monitor.h) as
 * one JSON object on one line, appended.
 *
 * The format is crun(1)'s EVENTS section: the fields below are stable
 * (new fields and events may be added; none is renamed or removed).
 * Every line has "time" (ISO-8601 UTC with milliseconds), "ts" (seconds
 * since the epoch, with milliseconds), "event" (crun__mon_event_name()),
 * "run", "round" (null before one), "node" (this host), "group_rank"
 * (null before a round) and "restart_count"; the others only where the
 * event says them: "rank", "local_rank", "pid", "exit_code", "signal",
 * "cause", "step", "ratio", "seconds", "member", "members", "nnodes",
 * "world_size", "message", and "node_id" (with rendezvous: this agent's
 * id in the store, which tells apart two agents of one host).
 *
 * crun__events_line() is pure; the rest is the file's thin edge: opened
 * once at the start, each line written with one write(2) on an O_APPEND
 * descriptor, so that the agents of several nodes may share one file on
 * a local file system without tearing each other's lines. */
#ifndef CRUN_AGENT_EVENTS_H
#define CRUN_AGENT_EVENTS_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/monitor.h"

struct crun__events {
	int fd;	     /* -1: closed */
	bool warned; /* a write failed and was reported */
	const char *path;
};

/* The event as one JSON object and a newline (malloc'd; the caller
 * frees it), NULL when out of memory. */
char *crun__events_line(const struct crun__monitor *m, const struct crun__mon_event *ev);

/* Opens path for appending (O_APPEND|O_CREAT|O_CLOEXEC, mode 0644 before
 * the umask); path is kept, not copied. 0 or a negative errno. */
int crun__events_open(struct crun__events *e, const char *path);
/* The observer (crun__monitor_observe) that appends each event; arg: the
 * open events. A line that cannot be written is dropped, the first
 * such failure reported; the job goes on. */
void crun__events_observe(void *arg, const struct crun__monitor *m,
			  const struct crun__mon_event *ev);
/* Closes the file; safe on a closed one. */
void crun__events_close(struct crun__events *e);

#endif

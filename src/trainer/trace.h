/* crun-train's step timeline: a bounded recorder of timed events, written
 * as a Chrome trace (the Trace Event Format that Perfetto and
 * chrome://tracing open).
 *
 * The file is one JSON object:
 *
 *   {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
 *
 * with "M" (metadata) events naming the process (pid = the rank: "rank N")
 * and its tracks (tid: enum crun__trace_track), then one "X" (complete)
 * event per recorded span: name, cat (the track's name), ts and dur in
 * microseconds, and args (step, unit, elements, bytes, text where set).
 * Timestamps are wall-clock microseconds (CLOCK_REALTIME), so the files of
 * ranks on one host line up exactly, and those of several hosts as well as
 * their clocks agree (NTP). otherData holds the rank, the world size, and
 * the number of events that did not fit (dropped).
 *
 * The recorder keeps at most `capacity` events; later ones are counted as
 * dropped, never stored. It reads no clock: callers give the times
 * (crun__trace_now_us is the clock they use). */
#ifndef CRUN_TRAINER_TRACE_H
#define CRUN_TRAINER_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The tracks of a rank, its tids in the file. */
enum crun__trace_track {
	CRUN__TRACK_STEP,	/* one span per step */
	CRUN__TRACK_COMPUTE,	/* forward and backward passes, per unit */
	CRUN__TRACK_COMM,	/* collectives */
	CRUN__TRACK_OPTIMIZER,	/* gradient norm and AdamW */
	CRUN__TRACK_CHECKPOINT, /* checkpoints */
	CRUN__TRACK_COUNT,
};

/* One span. name must outlive the recorder (a string literal); text is
 * copied. unit < 0, elements 0, bytes 0 and text NULL leave those args
 * out. */
struct crun__trace_event {
	const char *name;
	enum crun__trace_track track;
	int64_t ts_us, dur_us;
	int64_t step;
	int unit;
	uint64_t elements, bytes;
	char *text;
};

struct crun__trace;

/* A recorder of rank `rank` of `world` keeping at most capacity events;
 * NULL when out of memory. */
struct crun__trace *crun__trace_create(int rank, int world, size_t capacity);
/* Frees t; NULL is allowed. */
void crun__trace_destroy(struct crun__trace *t);

/* Records ev (its text copied). 0; -ENOSPC when the recorder is full, or
 * -ENOMEM when its memory could not grow (the event is counted as
 * dropped); -ENOMEM also when the text could not be copied (the event is
 * kept without it). Memory grows with the events, up to capacity. */
int crun__trace_add(struct crun__trace *t, const struct crun__trace_event *ev);

size_t crun__trace_count(const struct crun__trace *t);
uint64_t crun__trace_dropped(const struct crun__trace *t);

/* The name of a track ("step", "compute", "comm", "optimizer",
 * "checkpoint"). */
const char *crun__trace_track_name(enum crun__trace_track track);

/* Writes s as a JSON string (quotes included), made well-formed UTF-8 as
 * crun__record_text makes it (a Latin-1 byte becomes U+FFFD) and escaped
 * by jansson. 0, or -ENOMEM (nothing written). */
int crun__trace_json_string(FILE *out, const char *s);

/* Writes the whole trace to out. 0, -ENOMEM, or -EIO when a write
 * failed. */
int crun__trace_write(const struct crun__trace *t, FILE *out);

/* Replaces path with the trace atomically (common/fs.h), so that a reader
 * sees the old file or the new one. 0 or a negative errno. */
int crun__trace_save(const struct crun__trace *t, const char *path);

/* The file of rank `rank` of `world` for trace.path pattern: every
 * "{rank}" in it becomes the rank; a pattern without one is the file of a
 * job of one rank, and gets ".rank<N>" appended in a job of several. 0, or
 * -ENAMETOOLONG when it does not fit len. */
int crun__trace_path(const char *pattern, int rank, int world, char *out, size_t len);

/* The wall clock of the timestamps: CLOCK_REALTIME in microseconds. */
int64_t crun__trace_now_us(void);

#endif

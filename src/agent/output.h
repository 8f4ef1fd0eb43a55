/* Output pipes: one per stream (stdout, stderr) of each worker. A pipe
 * copies the raw bytes to its log file and writes whole lines, prefixed,
 * to one of crun's console streams (output.c says how lines stay whole).
 *
 * Owns: the pipe's uv_pipe_t, its line buffer and its log file
 * descriptor. Knows nothing of workers: its owner gives it a prefix, a
 * rank for messages and a callback for when the handle has closed. */
#ifndef CRUN_AGENT_OUTPUT_H
#define CRUN_AGENT_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

/* Lines up to this length reach the console whole, with one write(2). A
 * longer line is written as it comes, its prefix once, while the console
 * stream is held for it so that no other line lands inside it. */
#define CRUN__LINE_MAX (256 * 1024)
/* The last line of a stream that the failure summary may show: its first
 * CRUN__LAST_LINE_MAX - 1 bytes. */
#define CRUN__LAST_LINE_MAX 512

/* One of crun's console streams (stdout or stderr), shared by the pipes of
 * that stream of every worker. */
struct console {
	int fd;
	bool broken;		 /* a write failed (EPIPE...): output is dropped */
	struct outpipe *owner;	 /* pipe in the middle of a line > CRUN__LINE_MAX */
	struct outpipe *waiters; /* pipes holding output until owner is done */
};

struct outpipe {
	uv_pipe_t handle;
	const char *prefix; /* "[3]:", not owned; outlives the pipe */
	size_t prefix_len;
	int rank; /* for messages */
	/* Runs once the handle has closed (the pipe's memory may go then). */
	void (*closed)(struct outpipe *p);
	void *data;		 /* the owner's */
	struct console *console; /* NULL: not shown on the console */
	int file_fd;		 /* log file; -1: none */
	const char *file_path;
	char *buf; /* bytes of an unfinished line (and, while
		    * waiting for the console, more lines) */
	size_t len, cap;
	bool open;	/* initialised and not yet closed */
	bool eof;	/* EOF (or a read error) was seen */
	bool long_line; /* owns the console; prefix already written */
	bool after_cr;	/* the last segment ended with '\r' (a CRLF split
			 * between reads: its '\n' gets no prefix) */
	bool waiting;	/* on the console's waiters list */
	struct outpipe *next_waiter;
	/* The last line that held more than blanks, without its line end
	 * (cut at CRUN__LAST_LINE_MAX - 1 bytes), for the failure summary of a
	 * worker that left no error file; "" none. cur: the line being read. */
	char last_line[CRUN__LAST_LINE_MAX];
	char cur_line[CRUN__LAST_LINE_MAX];
	size_t cur_len;
};

void crun__console_init(struct console *c, int fd);

/* Initialises p (handle on loop). The pipe is ready to be passed to
 * uv_spawn as UV_CREATE_PIPE; the caller sets console and file_fd. On
 * success closed runs once the handle has closed, whatever happens next.
 * 0 or a negative errno (then the handle was never initialised). */
int crun__outpipe_init(struct outpipe *p, uv_loop_t *loop, const char *prefix, int rank,
		       void (*closed)(struct outpipe *p), void *data);
/* Starts reading after a successful uv_spawn. 0 or a negative errno. */
int crun__outpipe_start(struct outpipe *p);
/* Writes out what is buffered (an unfinished line gets a newline), closes
 * the log file and uv_closes the pipe. On EOF the pipe does this itself.
 * Does nothing when the pipe is closed already. */
void crun__outpipe_close(struct outpipe *p);

#endif

/* Stack dumps of hung workers: one child process (py-spy or gdb), its
 * output on one pipe, one timer that bounds it; or, without a tool, the
 * kernel's files, read at once and reported on the next turn of the loop.
 * The dump frees itself after done() once its handles have closed. */
#include "agent/stackdump.h"
#include "common/fs.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct crun__stackdump {
	pid_t pid;
	void (*done)(void *arg, const char *text, const char *tool);
	void *arg;
	const char *tool;
	uv_process_t proc;
	uv_pipe_t out;
	uv_timer_t timer;
	int handles; /* open handles */
	bool exited, eof, timed_out, failed, reported;
	char text[CRUN__STACKDUMP_MAX + 1];
	size_t len;
};

bool crun__find_program(const char *name, char *buf, size_t len)
{
	return crun__path_search(name, getenv("PATH"), buf, len) == 0;
}

static void append(struct crun__stackdump *d, const char *s, size_t n)
{
	if (n > CRUN__STACKDUMP_MAX - d->len)
		n = CRUN__STACKDUMP_MAX - d->len;
	memcpy(d->text + d->len, s, n);
	d->len += n;
	d->text[d->len] = '\0';
}

static void append_file(struct crun__stackdump *d, const char *what)
{
	char path[64], buf[8192];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)d->pid, what);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		n = snprintf(buf, sizeof(buf), "%s: %s\n", path, strerror(errno));
		append(d, buf, (size_t)n);
		return;
	}
	n = snprintf(buf, sizeof(buf), "%s:\n", path);
	append(d, buf, (size_t)n);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		append(d, buf, (size_t)n);
	if (d->len && d->text[d->len - 1] != '\n')
		append(d, "\n", 1);
	close(fd);
}

static void handle_closed(uv_handle_t *h)
{
	struct crun__stackdump *d = h->data;

	if (--d->handles == 0)
		free(d);
}

static void close_all(struct crun__stackdump *d)
{
	uv_handle_t *hs[] = {(uv_handle_t *)&d->proc, (uv_handle_t *)&d->out,
			     (uv_handle_t *)&d->timer};

	for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
		/* A killed tool is closed once reaped (on_exit_cb). */
		if (i == 0 && !d->exited)
			continue;
		if (hs[i]->data && !uv_is_closing(hs[i]))
			uv_close(hs[i], handle_closed);
	}
}

static void report(struct crun__stackdump *d)
{
	if (d->reported)
		return;
	d->reported = true;
	if (d->timed_out) {
		char note[96];
		int n = snprintf(note, sizeof(note), "(%s ran out of time)\n", d->tool);
		append(d, note, (size_t)n);
	}
	if (d->failed || d->timed_out || !strcmp(d->tool, "/proc")) {
		append_file(d, "wchan");
		if (d->text[d->len - 1] != '\n')
			append(d, "\n", 1);
		append_file(d, "stack");
	}
	d->done(d->arg, d->text, d->tool);
	close_all(d);
}

static void maybe_done(struct crun__stackdump *d)
{
	if ((d->exited && d->eof) || d->timed_out)
		report(d);
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig)
{
	struct crun__stackdump *d = p->data;

	d->exited = true;
	d->failed = status != 0 || sig != 0;
	if (d->reported)
		uv_close((uv_handle_t *)p, handle_closed);
	else
		maybe_done(d);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char scratch[8192];

	(void)h;
	(void)suggested;
	*buf = uv_buf_init(scratch, sizeof(scratch));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct crun__stackdump *d = s->data;

	if (nread < 0) {
		d->eof = true;
		uv_read_stop(s);
		maybe_done(d);
		return;
	}
	append(d, buf->base, (size_t)nread);
}

static void on_timer(uv_timer_t *t)
{
	struct crun__stackdump *d = t->data;

	if (d->reported)
		return;
	if (!d->exited && d->proc.data) {
		d->timed_out = true;
		uv_kill(d->proc.pid, SIGKILL);
	}
	if (!strcmp(d->tool, "/proc"))
		d->timed_out = false; /* the next turn, not a timeout */
	report(d);
}

int crun__stackdump_start(uv_loop_t *loop, pid_t pid, uint64_t timeout_ms,
			  void (*done)(void *arg, const char *text, const char *tool), void *arg)
{
	struct crun__stackdump *d = calloc(1, sizeof(*d));
	char prog[4096], pidtext[16];
	/* The tool's stderr joins its stdout (its errors say why it failed). */
	char sh[] = "/bin/sh", dash_c[] = "-c", join[] = "exec \"$0\" \"$@\" 2>&1";
	char *pyspy[] = {sh, dash_c, join, prog, "dump", "--pid", pidtext, NULL};
	char *gdb[] = {sh,	 dash_c,  join,	  prog,
		       "-batch", "-nx",	  "-iex", "set auto-load off",
		       "-p",	 pidtext, "-ex",  "thread apply all bt",
		       NULL};
	char **argv = NULL;
	uv_stdio_container_t stdio[3];
	uv_process_options_t opts;
	int err;

	if (!d)
		return -ENOMEM;
	d->pid = pid;
	d->done = done;
	d->arg = arg;
	snprintf(pidtext, sizeof(pidtext), "%d", (int)pid);
	if (crun__find_program("py-spy", prog, sizeof(prog))) {
		d->tool = "py-spy";
		argv = pyspy;
	} else if (crun__find_program("gdb", prog, sizeof(prog))) {
		d->tool = "gdb";
		argv = gdb;
	} else {
		d->tool = "/proc";
	}
	uv_timer_init(loop, &d->timer);
	d->timer.data = d;
	d->handles++;
	if (!argv) {
		uv_timer_start(&d->timer, on_timer, 0, 0);
		return 0;
	}
	uv_pipe_init(loop, &d->out, 0);
	d->out.data = d;
	d->handles++;
	memset(&opts, 0, sizeof(opts));
	opts.file = argv[0];
	opts.args = argv;
	opts.exit_cb = on_exit_cb;
	opts.flags = UV_PROCESS_DETACHED;
	stdio[0].flags = UV_IGNORE;
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&d->out;
	stdio[2].flags = UV_IGNORE;
	opts.stdio = stdio;
	opts.stdio_count = 3;
	d->proc.data = d;
	err = uv_spawn(loop, &d->proc, &opts);
	d->handles++;
	if (err < 0) {
		crun__debug("cannot run '%s' to take the hung worker's stack: %s", prog,
			    uv_strerror(err));
		uv_close((uv_handle_t *)&d->proc, handle_closed);
		d->failed = true;
		d->exited = d->eof = true;
		uv_timer_start(&d->timer, on_timer, 0, 0);
		return 0;
	}
	if (uv_read_start((uv_stream_t *)&d->out, on_alloc, on_read) < 0)
		d->eof = true;
	uv_timer_start(&d->timer, on_timer, timeout_ms, 0);
	return 0;
}

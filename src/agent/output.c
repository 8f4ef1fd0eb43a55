/* Worker output: each worker's stdout and stderr arrive on pipes; the
 * agent copies the raw bytes to the log files and prints whole lines on
 * its own stdout/stderr with the rank prefix.
 *
 * A line reaches the console with one writev(2) once its newline has
 * arrived, so lines of different workers never mix. A pipe keeps its
 * unfinished line in a buffer of its own, which grows up to CRUN__LINE_MAX;
 * a last line without a newline gets one at EOF. A line longer than that
 * is written as it comes, the prefix once; meanwhile the pipe owns the
 * console stream and other pipes of that stream hold their output (and
 * stop reading, so their workers feel the back-pressure of a full pipe)
 * until the long line has ended. Memory stays bounded either way. */
#include "agent/output.h"
#include "common/log.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define INITIAL_CAP 16384
#define READ_MIN 4096

void crun__console_init(struct console *c, int fd)
{
	memset(c, 0, sizeof(*c));
	c->fd = fd;
}

/* Writes all of iov to the console fd. A console left non-blocking by
 * someone else is waited on with poll(2) rather than dropped. */
static void console_writev(struct console *c, struct iovec *iov, int n)
{
	while (n > 0 && !c->broken) {
		ssize_t w = writev(c->fd, iov, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
				poll(&pfd, 1, -1);
				continue;
			}
			/* EPIPE and friends: nobody reads the console any more;
			 * keep draining the workers so they do not block. */
			c->broken = true;
			return;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
}

/* prefix (optional) + data + newline (optional), in one writev. */
static void emit(struct outpipe *p, bool prefix, const char *data, size_t len, bool newline)
{
	struct iovec iov[3];
	int n = 0;

	if (prefix) {
		iov[n].iov_base = (void *)p->prefix;
		iov[n++].iov_len = p->prefix_len;
	}
	if (len) {
		iov[n].iov_base = (void *)data;
		iov[n++].iov_len = len;
	}
	if (newline) {
		iov[n].iov_base = "\n";
		iov[n++].iov_len = 1;
	}
	console_writev(p->console, iov, n);
}

static void write_file(struct outpipe *p, const char *data, size_t len)
{
	int err = crun__write_all(p->file_fd, data, len);

	if (err < 0) {
		crun__warn("cannot write log file '%s': %s; no longer writing it", p->file_path,
			   strerror(-err));
		close(p->file_fd);
		p->file_fd = -1;
	}
}

static void wait_for_console(struct outpipe *p)
{
	struct console *c = p->console;

	if (p->waiting)
		return;
	uv_read_stop((uv_stream_t *)&p->handle);
	p->waiting = true;
	p->next_waiter = c->waiters;
	c->waiters = p;
}

static void pump(struct outpipe *p);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* The long line of the console's owner has ended: let the others go on. */
static void release_console(struct console *c)
{
	struct outpipe *list = c->waiters;

	c->owner = NULL;
	c->waiters = NULL;
	while (list) {
		struct outpipe *p = list;
		list = p->next_waiter;
		p->next_waiter = NULL;
		p->waiting = false;
		pump(p);
	}
}

/* The end of the first segment in [start, start + len): a '\n', a "\r\n",
 * or a lone '\r' (progress bars such as tqdm's redraw one line with '\r'
 * and never end it: each redraw is a segment of its own, so it reaches
 * the console at once, prefixed, and never holds other ranks' output
 * back). NULL when the segment is not finished yet. */
static const char *segment_end(const char *start, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (start[i] == '\n')
			return start + i;
		if (start[i] == '\r')
			return i + 1 < len && start[i + 1] == '\n' ? start + i + 1 : start + i;
	}
	return NULL;
}

/* Writes every whole line in the buffer, or stops when another pipe owns
 * the console (unless force: the pipe is being closed). */
static void drain(struct outpipe *p, bool force)
{
	struct console *c = p->console;
	size_t off = 0;

	while (off < p->len) {
		char *start = p->buf + off;
		size_t avail = p->len - off;
		char *nl;

		if (c->owner && c->owner != p && !force) {
			wait_for_console(p);
			break;
		}
		nl = (char *)segment_end(start, avail);
		if (p->long_line) {
			size_t n = nl ? (size_t)(nl - start) + 1 : avail;
			emit(p, false, start, n, false);
			off += n;
			if (nl) {
				p->long_line = false;
				p->after_cr = *nl == '\r';
				release_console(c);
			}
			continue;
		}
		if (nl) {
			size_t n = (size_t)(nl - start) + 1;
			/* The '\n' of a "\r\n" split between two reads. */
			bool bare = p->after_cr && n == 1 && *start == '\n';

			emit(p, !bare, start, n, false);
			p->after_cr = *nl == '\r';
			off += n;
			continue;
		}
		if (avail >= CRUN__LINE_MAX && (!c->owner || c->owner == p)) {
			c->owner = p;
			p->long_line = true;
			emit(p, true, start, avail, false);
			off += avail;
			continue;
		}
		break; /* an unfinished line waits for more */
	}
	if (off) {
		memmove(p->buf, p->buf + off, p->len - off);
		p->len -= off;
	}
}

static void pipe_closed(uv_handle_t *h)
{
	struct outpipe *p = h->data;

	free(p->buf);
	p->buf = NULL;
	p->closed(p);
}

/* Ends the stream: the rest of the buffer goes out, an open line gets its
 * newline, the console is released, the file closed, the handle closed. */
static void finish(struct outpipe *p)
{
	if (p->console) {
		if (p->len || p->long_line)
			emit(p, !p->long_line, p->buf, p->len, true);
		p->len = 0;
		if (p->long_line) {
			p->long_line = false;
			release_console(p->console);
		}
	}
	if (p->file_fd >= 0) {
		close(p->file_fd);
		p->file_fd = -1;
	}
	p->open = false;
	uv_close((uv_handle_t *)&p->handle, pipe_closed);
}

/* Moves buffered output along after EOF or after waiting for the console:
 * closes at EOF once everything is out, else reads on. */
static void pump(struct outpipe *p)
{
	if (!p->open)
		return;
	if (p->console) {
		drain(p, false);
		if (p->waiting)
			return;
	}
	if (p->eof)
		finish(p);
	else
		uv_read_start((uv_stream_t *)&p->handle, on_alloc, on_read);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct outpipe *p = h->data;
	size_t want = p->len + READ_MIN;

	(void)suggested;
	if (p->cap < want && p->cap < CRUN__LINE_MAX + READ_MIN) {
		size_t cap = p->cap ? p->cap : INITIAL_CAP;
		char *nb;
		while (cap < want)
			cap *= 2;
		if (cap > CRUN__LINE_MAX + READ_MIN)
			cap = CRUN__LINE_MAX + READ_MIN;
		nb = realloc(p->buf, cap);
		if (nb) {
			p->buf = nb;
			p->cap = cap;
		}
	}
	/* Out of memory with an empty buffer: libuv reports UV_ENOBUFS. */
	buf->base = p->buf ? p->buf + p->len : NULL;
	buf->len = p->buf ? p->cap - p->len : 0;
}

/* Makes line (its first CRUN__LAST_LINE_MAX - 1 bytes, without trailing
 * blanks) the last line, unless it is blank. True when it was not. */
static bool set_last(struct outpipe *p, const char *line, size_t n)
{
	if (n > sizeof(p->last_line) - 1)
		n = sizeof(p->last_line) - 1;
	while (n && isspace((unsigned char)line[n - 1]))
		n--;
	if (!n)
		return false;
	memmove(p->last_line, line, n);
	p->last_line[n] = '\0';
	return true;
}

/* Appends to the line being read, up to its cap. */
static void add_to_line(struct outpipe *p, const char *b, size_t n)
{
	size_t room = sizeof(p->cur_line) - 1 - p->cur_len;

	if (n > room)
		n = room;
	memcpy(p->cur_line + p->cur_len, b, n);
	p->cur_len += n;
}

/* Ends the line being read: it becomes the last line unless it is blank. */
static void end_line(struct outpipe *p)
{
	set_last(p, p->cur_line, p->cur_len);
	p->cur_len = 0;
}

/* Keeps the last line that is not blank: of the lines b ends, only the
 * last ones are looked at (from the end back to one that is not blank),
 * so a large read costs two memrchr, not a pass per byte. */
static void track_lines(struct outpipe *p, const char *b, size_t n)
{
	const char *last = memrchr(b, '\n', n);
	const char *end = last;

	if (!last) {
		add_to_line(p, b, n);
		return;
	}
	for (;;) {
		const char *prev = memrchr(b, '\n', (size_t)(end - b));

		if (!prev) {
			add_to_line(p, b, (size_t)(end - b));
			end_line(p);
			break;
		}
		if (set_last(p, prev + 1, (size_t)(end - prev - 1)))
			break;
		end = prev;
	}
	p->cur_len = 0;
	add_to_line(p, last + 1, n - (size_t)(last + 1 - b));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct outpipe *p = s->data;

	if (nread == 0)
		return;
	if (nread < 0) {
		if (nread != UV_EOF)
			crun__warn("cannot read output of rank %d: %s", p->rank,
				   uv_strerror((int)nread));
		uv_read_stop(s);
		p->eof = true;
		end_line(p);
		pump(p);
		return;
	}
	track_lines(p, buf->base, (size_t)nread);
	if (p->file_fd >= 0)
		write_file(p, buf->base, (size_t)nread);
	if (!p->console)
		return; /* the buffer is reused as it is */
	p->len += (size_t)nread;
	drain(p, false);
}

int crun__outpipe_init(struct outpipe *p, uv_loop_t *loop, const char *prefix, int rank,
		       void (*closed)(struct outpipe *p), void *data)
{
	int err;

	memset(p, 0, sizeof(*p));
	p->prefix = prefix;
	p->prefix_len = strlen(prefix);
	p->rank = rank;
	p->closed = closed;
	p->data = data;
	p->file_fd = -1;
	err = uv_pipe_init(loop, &p->handle, 0);
	if (err < 0)
		return err;
	p->handle.data = p;
	p->open = true;
	return 0;
}

int crun__outpipe_start(struct outpipe *p)
{
	return uv_read_start((uv_stream_t *)&p->handle, on_alloc, on_read);
}

void crun__outpipe_close(struct outpipe *p)
{
	struct console *c = p->console;

	if (!p->open)
		return;
	uv_read_stop((uv_stream_t *)&p->handle);
	if (c && p->waiting) {
		/* Closing while another pipe owns the console: take it out
		 * of the waiters and write what it has anyway. */
		for (struct outpipe **link = &c->waiters; *link; link = &(*link)->next_waiter) {
			if (*link == p) {
				*link = p->next_waiter;
				break;
			}
		}
		p->waiting = false;
		p->next_waiter = NULL;
	}
	if (c)
		drain(p, true);
	finish(p);
}

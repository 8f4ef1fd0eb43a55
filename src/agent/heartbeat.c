/* The heartbeat edge: channels, the FileTimer pipe and the one timer.
 *
 * Reading is bounded: a channel keeps at most CRUN__LIVENESS_LINE_MAX
 * bytes of an unfinished line (the rest of a longer one is dropped as
 * unknown), the FileTimer pipe one request of 4 KiB. Lines that are not
 * understood change nothing; the first one is said at debug level. */
#include "agent/heartbeat.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

struct beat_chan {
	struct crun__heartbeat *hb; /* NULL once the edge let go of it */
	int lr;
	uv_pipe_t pipe;
	bool closing;
	bool skip; /* dropping the rest of an overlong line */
	size_t len;
	char buf[CRUN__LIVENESS_LINE_MAX];
};

static void rearm(struct crun__heartbeat *hb);

static void unknown(struct crun__heartbeat *hb, const char *what, const char *line, size_t len)
{
	if (hb->unknown_lines++ == 0)
		crun__debug("ignoring a %s crun does not understand: '%.*s' (later ones are "
			    "ignored silently)",
			    what, (int)(len > 80 ? 80 : len), line);
}

/* ---- the timer ---- */

/* The state letter of /proc/PID/stat ('S', 'R', 'T', 'D', ...); 0 when
 * unknown. */
static char proc_state(pid_t pid)
{
	char path[64], buf[512], *paren;
	ssize_t n;
	int fd;

	if (pid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	paren = strrchr(buf, ')'); /* the command may hold spaces and parens */
	return paren && paren[1] == ' ' ? paren[2] : 0;
}

bool crun__heartbeat_owns(const struct crun__heartbeat *hb, int lr, pid_t pid)
{
	pid_t worker;
	char state;

	if (lr < 0 || lr >= hb->n || pid <= 0)
		return false;
	worker = hb->pids[lr];
	if (!worker)
		return false;
	/* A zombie has exited already: nothing of it left to stop. Without
	 * /proc to tell, whether the pid exists at all. */
	state = proc_state(pid);
	if (state == 'Z' || state == 'X' || (!state && kill(pid, 0) < 0 && errno == ESRCH))
		return false;
	return pid == worker || getsid(pid) == worker;
}

/* An expired FileTimer: a hang of its worker when its pid is still one of
 * that worker's processes; else dropped, as torch's server does when the
 * pid no longer exists. */
static bool file_timer_hang(struct crun__heartbeat *hb, const struct crun__liveness_hang *h)
{
	if (h->signal <= 0) {
		crun__warn("local rank %d: FileTimer '%s' of pid %d expired; its signal is "
			   "%d: nothing to kill",
			   h->worker, h->name, h->pid, h->signal);
		return false;
	}
	if (!crun__heartbeat_owns(hb, h->worker, h->pid)) {
		crun__info("local rank %d: FileTimer '%s' of pid %d expired, but that process "
			   "is gone (or no longer the worker's): dropped",
			   h->worker, h->name, h->pid);
		return false;
	}
	crun__liveness_hung(&hb->core, h->worker);
	return true;
}

static void on_timer(uv_timer_t *t)
{
	struct crun__heartbeat *hb = t->data;
	struct crun__liveness_hang h;

	if (hb->paused)
		return;
	for (int i = 0; i < hb->n; i++)
		hb->states[i] = proc_state(hb->pids[i]);
	/* Expired FileTimers that are dropped leave the others to check. */
	while (crun__liveness_check(&hb->core, uv_now(hb->loop), hb->states, &h)) {
		if (h.why == CRUN__HUNG_FILE_TIMER && !file_timer_hang(hb, &h))
			continue;
		hb->paused = true;
		hb->hung(hb->arg, &h);
		return;
	}
	rearm(hb);
}

static void rearm(struct crun__heartbeat *hb)
{
	uint64_t next, now;

	if (!hb->timer_open)
		return;
	next = hb->paused ? UINT64_MAX : crun__liveness_next_deadline(&hb->core);
	if (next == UINT64_MAX) {
		uv_timer_stop(&hb->timer);
		return;
	}
	now = uv_now(hb->loop);
	uv_timer_start(&hb->timer, on_timer, next > now ? next - now : 0, 0);
}

/* ---- channels ---- */

static void chan_closed(uv_handle_t *h)
{
	struct beat_chan *c = h->data;

	if (c->hb && c->hb->chans[c->lr] == c)
		c->hb->chans[c->lr] = NULL;
	free(c);
}

static void chan_close(struct beat_chan *c)
{
	if (c->closing)
		return;
	c->closing = true;
	uv_close((uv_handle_t *)&c->pipe, chan_closed);
}

static void chan_line(struct beat_chan *c, const char *line, size_t len)
{
	struct crun__heartbeat *hb = c->hb;
	uint64_t now = uv_now(hb->loop);
	int64_t step = -1;
	double work_s = -1;
	char name[CRUN__LIVENESS_NAME_MAX];

	switch (crun__liveness_line(&hb->core, c->lr, line, len, now)) {
	case CRUN__LINE_UNKNOWN:
		unknown(hb, "heartbeat line", line, len);
		return;
	case CRUN__LINE_STEP:
		if (hb->on_step &&
		    crun__liveness_parse(line, len, &step, &work_s, name) == CRUN__LINE_STEP)
			hb->on_step(hb->arg, c->lr, step, work_s, now);
		break;
	default:
		break;
	}
	crun__monitor_worker_beat(hb->monitor, crun__wall_ms(), c->lr, step);
}

static void chan_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char scratch[4096];

	(void)h;
	(void)suggested;
	*buf = uv_buf_init(scratch, sizeof(scratch));
}

static void chan_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct beat_chan *c = s->data;

	if (nread < 0) {
		chan_close(c);
		return;
	}
	for (ssize_t i = 0; i < nread && c->hb; i++) {
		char ch = buf->base[i];
		if (ch == '\n') {
			if (c->skip)
				unknown(c->hb, "overlong heartbeat line", c->buf, c->len);
			else
				chan_line(c, c->buf, c->len);
			c->len = 0;
			c->skip = false;
			continue;
		}
		if (c->len == sizeof(c->buf)) {
			c->skip = true;
			continue;
		}
		c->buf[c->len++] = ch;
	}
	if (c->hb)
		rearm(c->hb);
}

uv_pipe_t *crun__heartbeat_channel(struct crun__heartbeat *hb, int lr)
{
	struct beat_chan *c;

	if (lr < 0 || lr >= hb->n)
		return NULL;
	crun__heartbeat_gone(hb, lr);
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->hb = hb;
	c->lr = lr;
	if (uv_pipe_init(hb->loop, &c->pipe, 0) < 0) {
		free(c);
		return NULL;
	}
	c->pipe.data = c;
	hb->chans[lr] = c;
	return &c->pipe;
}

void crun__heartbeat_started(struct crun__heartbeat *hb, int lr, pid_t pid)
{
	struct beat_chan *c;

	if (lr < 0 || lr >= hb->n)
		return;
	hb->paused = false; /* a new attempt */
	hb->pids[lr] = pid;
	crun__liveness_started(&hb->core, lr);
	c = hb->chans[lr];
	if (c && uv_read_start((uv_stream_t *)&c->pipe, chan_alloc, chan_read) < 0)
		chan_close(c);
	rearm(hb);
}

void crun__heartbeat_gone(struct crun__heartbeat *hb, int lr)
{
	struct beat_chan *c;

	if (lr < 0 || lr >= hb->n)
		return;
	hb->pids[lr] = 0;
	crun__liveness_gone(&hb->core, lr);
	c = hb->chans[lr];
	if (c) {
		hb->chans[lr] = NULL;
		c->hb = NULL;
		chan_close(c);
	}
	rearm(hb);
}

/* ---- torch's FileTimer ---- */

/* The local rank of pid: a worker, or a process in a worker's session
 * (workers lead their own); -1 when none. */
static int rank_of_pid(const struct crun__heartbeat *hb, pid_t pid)
{
	pid_t sid;

	for (int i = 0; i < hb->n; i++)
		if (hb->pids[i] && hb->pids[i] == pid)
			return i;
	sid = getsid(pid);
	for (int i = 0; sid > 0 && i < hb->n; i++)
		if (hb->pids[i] && hb->pids[i] == sid)
			return i;
	return -1;
}

/* A request as JSON: the whole of text, else, when text is a fragment
 * glued to a request (see fifo_read), the request that ends it: the first
 * suffix from a '{' that parses as an object. Requests are flat objects,
 * so a suffix that starts inside the fragment does not parse (it holds
 * the seam); at most FIFO_SUFFIX_TRIES are tried. NULL: none. */
#define FIFO_SUFFIX_TRIES 64
static json_t *fifo_json(const char *text, size_t len)
{
	json_t *doc = json_loadb(text, len, 0, NULL);
	const char *p = text;

	for (int tries = 0; !json_is_object(doc) && tries < FIFO_SUFFIX_TRIES; tries++) {
		json_decref(doc);
		doc = NULL;
		p = memchr(p + 1, '{', len - (size_t)(p + 1 - text));
		if (!p)
			break;
		doc = json_loadb(p, len - (size_t)(p - text), 0, NULL);
	}
	return doc;
}

/* {"version": 1, "pid": 123, "scope_id": "x", "expiration_time": 1.7e9,
 * "signal": 9}: an expiration time below 0 releases the scope's timer. */
static void fifo_request(struct crun__heartbeat *hb, const char *text, size_t len)
{
	json_t *doc = fifo_json(text, len);
	json_t *pid = json_object_get(doc, "pid"), *scope = json_object_get(doc, "scope_id");
	json_t *exp = json_object_get(doc, "expiration_time");
	json_t *sig = json_object_get(doc, "signal");
	double when;
	int lr, err;
	uint64_t deadline = 0;

	if (!json_is_integer(pid) || !json_is_string(scope) || !json_is_number(exp) ||
	    (sig && !json_is_integer(sig))) {
		unknown(hb, "FileTimer request", text, len);
		goto out;
	}
	lr = rank_of_pid(hb, (pid_t)json_integer_value(pid));
	if (lr < 0) {
		crun__debug("ignoring a FileTimer request for pid %lld, which is not a worker",
			    (long long)json_integer_value(pid));
		goto out;
	}
	when = json_number_value(exp);
	if (when >= 0 && isfinite(when)) {
		double left_ms = when * 1000.0 - (double)crun__wall_ms();
		uint64_t now = uv_now(hb->loop);
		if (left_ms < 0)
			left_ms = 0;
		deadline = left_ms > 1e12 ? UINT64_MAX : now + (uint64_t)left_ms;
	}
	err = crun__liveness_file_timer(&hb->core, lr, json_string_value(scope),
					(int)json_integer_value(pid),
					sig ? (int)json_integer_value(sig) : 9, when < 0, deadline);
	if (err < 0)
		crun__warn("local rank %d holds too many FileTimers; ignoring scope '%s'", lr,
			   json_string_value(scope));
	rearm(hb);
out:
	json_decref(doc);
}

static void fifo_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char scratch[4096];

	(void)h;
	(void)suggested;
	*buf = uv_buf_init(scratch, sizeof(scratch));
}

/* The pipe is shared by every worker and its children. FileTimerClient
 * sends each request as one write(2) of a whole line, shorter than
 * PIPE_BUF, so writes never interleave and a line only spans two reads
 * when more than a read's worth was queued: its rest is already in the
 * pipe and is read at once, well within FIFO_FRAGMENT_MS. A fragment
 * without its newline (a writer that died mid-line, one that writes
 * otherwise) would be glued to the next request, which would be lost (a
 * lost release would later kill a healthy worker). Hence two rules: a fragment older
 * than FIFO_FRAGMENT_MS when more comes is dropped; and a line that does
 * not parse is searched for the request that ends it (fifo_json). */
#define FIFO_FRAGMENT_MS 50

static void fifo_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct crun__heartbeat *hb = s->data;
	uint64_t now = uv_now(hb->loop);

	if (nread < 0) {
		crun__warn("cannot read the FileTimer pipe '%s': %s", hb->timer_file,
			   uv_strerror((int)nread));
		uv_read_stop(s);
		return;
	}
	if (nread > 0 && (hb->fifo_len || hb->fifo_skip) && now - hb->fifo_at > FIFO_FRAGMENT_MS) {
		unknown(hb, "unfinished FileTimer request", hb->fifo_buf, hb->fifo_len);
		hb->fifo_len = 0;
		hb->fifo_skip = false;
	}
	if (nread > 0)
		hb->fifo_at = now;
	for (ssize_t i = 0; i < nread; i++) {
		char ch = buf->base[i];
		if (ch == '\n') {
			if (!hb->fifo_skip && hb->fifo_len)
				fifo_request(hb, hb->fifo_buf, hb->fifo_len);
			hb->fifo_len = 0;
			hb->fifo_skip = false;
			continue;
		}
		if (hb->fifo_len == sizeof(hb->fifo_buf)) {
			hb->fifo_skip = true;
			continue;
		}
		hb->fifo_buf[hb->fifo_len++] = ch;
	}
}

/* The pipe in dir, else in a directory of its own in $TMPDIR. */
static int fifo_setup(struct crun__heartbeat *hb, const char *dir)
{
	const char *tmp = getenv("TMPDIR");
	int fd, err;

	if (!dir) {
		if (!tmp || !*tmp)
			tmp = "/tmp";
		if (asprintf(&hb->timer_dir, "%s/crun-timer-XXXXXX", tmp) < 0) {
			hb->timer_dir = NULL;
			return -ENOMEM;
		}
		if (!mkdtemp(hb->timer_dir)) {
			err = -errno;
			crun__error("cannot create a directory in '%s': %s", tmp, strerror(-err));
			free(hb->timer_dir);
			hb->timer_dir = NULL;
			return err;
		}
		dir = hb->timer_dir;
	}
	if (asprintf(&hb->timer_file, "%s/timer.fifo", dir) < 0 ||
	    asprintf(&hb->timer_env, "TORCHELASTIC_TIMER_FILE=%s", hb->timer_file) < 0)
		return -ENOMEM;
	if (mkfifo(hb->timer_file, 0600) < 0) {
		err = -errno;
		crun__error("cannot create the FileTimer pipe '%s': %s", hb->timer_file,
			    strerror(-err));
		return err;
	}
	/* Read and write: the pipe never sees EOF when a client closes, and
	 * a client's non-blocking open always finds a reader. */
	fd = open(hb->timer_file, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		crun__error("cannot open the FileTimer pipe '%s': %s", hb->timer_file,
			    strerror(-err));
		return err;
	}
	err = uv_pipe_init(hb->loop, &hb->fifo, 0);
	if (err < 0) {
		close(fd);
		return err;
	}
	hb->fifo_open = true;
	hb->fifo.data = hb;
	err = uv_pipe_open(&hb->fifo, fd);
	if (err < 0) {
		close(fd);
		return err;
	}
	err = uv_read_start((uv_stream_t *)&hb->fifo, fifo_alloc, fifo_read);
	if (err < 0)
		return err;
	crun__debug("taking the workers' FileTimer requests (TORCHELASTIC_TIMER_FILE) on "
		    "'%s'",
		    hb->timer_file);
	return 0;
}

/* ---- lifecycle ---- */

int crun__heartbeat_init(struct crun__heartbeat *hb, const struct crun__liveness_config *cfg,
			 int nworkers, bool file_timer, const char *dir)
{
	int err;

	hb->n = nworkers;
	hb->chans = calloc((size_t)nworkers, sizeof(*hb->chans));
	hb->pids = calloc((size_t)nworkers, sizeof(*hb->pids));
	hb->states = calloc((size_t)nworkers, 1);
	if (!hb->chans || !hb->pids || !hb->states)
		return -ENOMEM;
	err = crun__liveness_init(&hb->core, cfg, nworkers);
	if (err < 0)
		return err;
	err = uv_timer_init(hb->loop, &hb->timer);
	if (err < 0)
		return err;
	hb->timer.data = hb;
	hb->timer_open = true;
	if (file_timer) {
		err = fifo_setup(hb, dir);
		if (err < 0) {
			crun__error("cannot serve torch's FileTimer: %s", strerror(-err));
			return err;
		}
	}
	return 0;
}

void crun__heartbeat_close(struct crun__heartbeat *hb)
{
	for (int i = 0; i < hb->n && hb->chans; i++)
		crun__heartbeat_gone(hb, i);
	if (hb->timer_open) {
		hb->timer_open = false;
		uv_close((uv_handle_t *)&hb->timer, NULL);
	}
	if (hb->fifo_open) {
		hb->fifo_open = false;
		uv_close((uv_handle_t *)&hb->fifo, NULL);
	}
}

void crun__heartbeat_finish(struct crun__heartbeat *hb)
{
	if (hb->timer_file)
		unlink(hb->timer_file);
	if (hb->timer_dir)
		rmdir(hb->timer_dir);
	free(hb->timer_file);
	free(hb->timer_env);
	free(hb->timer_dir);
	hb->timer_file = hb->timer_env = hb->timer_dir = NULL;
	crun__liveness_finish(&hb->core);
	free(hb->chans);
	free(hb->pids);
	free(hb->states);
	hb->chans = NULL;
	hb->pids = NULL;
	hb->states = NULL;
}

/* The events file (events.h). jansson writes the JSON, so that a message
 * (a worker's last line, a store's reason) is escaped whatever it holds;
 * reals are written with 13 significant digits, enough for "ts" to the
 * millisecond and short for ratios ("1.9", not "1.8999999999999999"). */
#include "agent/events.h"
#include "common/log.h"
#include "common/record.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void set(json_t *o, const char *key, json_t *v)
{
	json_object_set_new(o, key, v ? v : json_null());
}

static json_t *int_or_null(int64_t v)
{
	return v >= 0 ? json_integer(v) : json_null();
}

/* Text from outside (a host name, a worker's last line) may not be UTF-8:
 * crun__record_text makes it so, where json_string() would give NULL. */
static json_t *str_or_null(const char *s)
{
	return s ? crun__record_text(s) : json_null();
}

/* "2026-12-02T07:35:12.345Z" */
static void iso_time(uint64_t ms, char *buf, size_t len)
{
	time_t sec = (time_t)(ms / 1000);
	struct tm tm;
	size_t n;

	if (!gmtime_r(&sec, &tm) || !(n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm))) {
		snprintf(buf, len, "1970-01-01T00:00:00.000Z");
		return;
	}
	snprintf(buf + n, len - n, ".%03dZ", (int)(ms % 1000));
}

static void worker_fields(json_t *o, const struct crun__mon_event *ev)
{
	set(o, "rank", int_or_null(ev->rank));
	set(o, "local_rank", int_or_null(ev->local_rank));
	if (ev->pid > 0)
		set(o, "pid", json_integer(ev->pid));
	if (ev->step >= 0)
		set(o, "step", json_integer(ev->step));
}

static void members(json_t *o, const struct crun__monitor *m)
{
	json_t *a = json_array();

	for (int i = 0; a && i < m->nmembers; i++)
		json_array_append_new(a, str_or_null(m->members[i].host));
	set(o, "members", a);
}

/* What each kind of event says beyond the fields every line has. */
static void kind_fields(json_t *o, const struct crun__monitor *m, const struct crun__mon_event *ev)
{
	switch (ev->kind) {
	case CRUN_MON_ROUND_FORMED:
		set(o, "nnodes", json_integer(m->nnodes));
		set(o, "world_size", json_integer(m->world_size));
		set(o, "seconds", json_real(ev->value));
		if (m->nmembers > 0)
			members(o, m);
		break;
	case CRUN_MON_MEMBER_JOINED:
	case CRUN_MON_MEMBER_LEFT:
	case CRUN_MON_MEMBER_EVICTED:
		set(o, "member", str_or_null(ev->node ? ev->node : m->node));
		break;
	case CRUN_MON_WORKER_STARTED:
	case CRUN_MON_WORKER_HUNG:
		worker_fields(o, ev);
		break;
	case CRUN_MON_WORKER_EXITED:
		worker_fields(o, ev);
		if (ev->term_signal > 0)
			set(o, "signal", json_integer(ev->term_signal));
		else
			set(o, "exit_code", json_integer(ev->exit_code));
		break;
	case CRUN_MON_RESTART:
		set(o, "cause", json_string(crun__mon_cause_name(ev->cause)));
		if (ev->step >= 0)
			set(o, "step", json_integer(ev->step));
		break;
	case CRUN_MON_STRAGGLER:
		worker_fields(o, ev);
		set(o, "ratio", json_real(ev->value));
		if (ev->local_rank >= 0 && ev->local_rank < m->nproc)
			set(o, "seconds", json_real(m->workers[ev->local_rank].step_s));
		break;
	case CRUN_MON_GPU_WAIT:
		set(o, "seconds", json_real(ev->value));
		break;
	case CRUN_MON_JOB_FINISHED:
		set(o, "exit_code", json_integer(ev->exit_code));
		break;
	case CRUN_MON_JOB_STARTED:
	case CRUN_MON_ROUND_CLOSED:
	case CRUN_MON_STORE_LOST:
	case CRUN_MON_STORE_RECOVERED:
	case CRUN_MON_NEVENTS:
		break;
	}
	if (ev->message)
		set(o, "message", str_or_null(ev->message));
}

char *crun__events_line(const struct crun__monitor *m, const struct crun__mon_event *ev)
{
	char when[40], *text, *line = NULL;
	json_t *o = json_object();

	if (!o)
		return NULL;
	iso_time(ev->time_ms, when, sizeof(when));
	set(o, "time", json_string(when));
	set(o, "ts", json_real((double)ev->time_ms / 1000.0));
	set(o, "event", json_string(crun__mon_event_name(ev->kind)));
	set(o, "run", str_or_null(m->run_id));
	set(o, "round", int_or_null(ev->round));
	set(o, "node", str_or_null(m->node));
	if (m->node_id[0])
		set(o, "node_id", str_or_null(m->node_id));
	set(o, "group_rank", int_or_null(ev->group_rank));
	set(o, "restart_count", int_or_null(ev->restart_count));
	kind_fields(o, m, ev);
	text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(13));
	json_decref(o);
	if (text && asprintf(&line, "%s\n", text) < 0)
		line = NULL;
	free(text);
	return line;
}

int crun__events_open(struct crun__events *e, const char *path)
{
	e->path = path;
	e->warned = false;
	e->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	return e->fd < 0 ? -errno : 0;
}

void crun__events_observe(void *arg, const struct crun__monitor *m,
			  const struct crun__mon_event *ev)
{
	struct crun__events *e = arg;
	char *line;
	size_t len;
	ssize_t n;

	if (e->fd < 0)
		return;
	line = crun__events_line(m, ev);
	if (!line) {
		n = -1;
		errno = ENOMEM;
	} else {
		len = strlen(line);
		do
			n = write(e->fd, line, len);
		while (n < 0 && errno == EINTR);
		if (n >= 0 && (size_t)n != len) {
			n = -1;
			errno = EIO; /* a short append: a full disk */
		}
	}
	if (n < 0 && !e->warned) {
		e->warned = true;
		crun__warn("cannot write to the events file '%s': %s", e->path, strerror(errno));
	}
	free(line);
}

void crun__events_close(struct crun__events *e)
{
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
}

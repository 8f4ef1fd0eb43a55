/* Failure records and the failure summary.
 *
 * A failure is a worker that exited non-zero or by a signal before the
 * agent began to stop the group, or during that stop by any cause other
 * than the agent's own SIGTERM/SIGKILL. They are kept in the order the
 * agent saw them, so the first is the root cause. The summary follows
 * torchrun's ChildFailedError table, root cause first, and adds the
 * message and traceback that PyTorch's @record left in the worker's
 * TORCHELASTIC_ERROR_FILE. */
#include "agent/internal.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Largest error file read; a traceback is far smaller. */
#define ERROR_FILE_MAX (4 << 20)

int agent_failure_add(struct agent *a, const struct worker *w)
{
	struct failure *f;

	if (a->nfailures == a->cap_failures) {
		size_t cap = a->cap_failures ? a->cap_failures * 2 : 8;
		struct failure *nf = realloc(a->failures, cap * sizeof(*nf));
		if (!nf)
			return -ENOMEM;
		a->failures = nf;
		a->cap_failures = cap;
	}
	f = &a->failures[a->nfailures];
	memset(f, 0, sizeof(*f));
	f->rank = w->rank;
	f->local_rank = w->local_rank;
	f->pid = w->pid;
	f->exit_code = w->exit_code;
	f->term_signal = w->term_signal;
	f->wall_ms = w->exit_wall_ms;
	if (w->error_file)
		f->error_file = strdup(w->error_file);
	if (w->log_path[1] || w->log_path[0])
		f->log_file = strdup(w->log_path[1] ? w->log_path[1] : w->log_path[0]);
	a->nfailures++;
	return 0;
}

void agent_failures_clear(struct agent *a)
{
	for (size_t i = 0; i < a->nfailures; i++) {
		free(a->failures[i].error_file);
		free(a->failures[i].log_file);
	}
	a->nfailures = 0;
}

static void signal_name(char *buf, size_t len, int sig)
{
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev)
		snprintf(buf, len, "SIG%s", abbrev);
	else
		snprintf(buf, len, "signal %d", sig);
}

void agent_describe_exit(char *buf, size_t len, int exit_code, int term_signal)
{
	char name[32];

	if (term_signal) {
		signal_name(name, sizeof(name), term_signal);
		snprintf(buf, len, "was killed by %s", name);
	} else {
		snprintf(buf, len, "exited with code %d", exit_code);
	}
}

static int read_file(const char *path, char **out, size_t *outlen)
{
	struct stat st;
	char *buf;
	size_t have = 0;
	int fd, err = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > ERROR_FILE_MAX) {
		err = -EFBIG;
		goto out_close;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		err = -ENOMEM;
		goto out_close;
	}
	while (have < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + have, (size_t)st.st_size - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break; /* shrank meanwhile: take what is there */
		have += (size_t)r;
	}
	buf[have] = '\0';
	*out = buf;
	*outlen = have;
out_close:
	close(fd);
	return err;
}

static char *dup_string(const struct json *v)
{
	if (!v || v->type != JSON_STRING || !v->len)
		return NULL;
	return strdup(v->str);
}

int agent_error_file_read(const char *path, char **message, char **traceback)
{
	struct json *root, *m;
	char *text;
	size_t len;
	int err;

	*message = NULL;
	*traceback = NULL;
	err = read_file(path, &text, &len);
	if (err < 0)
		return err;
	root = agent_json_parse(text, len, NULL, 0);
	free(text);
	if (!root)
		return -EPROTO;
	m = agent_json_get(root, "message");
	if (m && m->type == JSON_STRING) {
		/* The newer format: {"message": "text"} */
		*message = dup_string(m);
	} else if (m && m->type == JSON_OBJECT) {
		struct json *extra = agent_json_get(m, "extraInfo");
		*message = dup_string(agent_json_get(m, "message"));
		*traceback = dup_string(agent_json_get(extra, "py_callstack"));
	}
	agent_json_free(root);
	return *message || *traceback ? 0 : -EPROTO;
}

static int write_atomic(const char *path, const char *data, size_t len)
{
	char *tmp;
	int fd, err;

	if (asprintf(&tmp, "%s.new.%d", path, (int)getpid()) < 0)
		return -ENOMEM;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		err = -errno;
		goto out_free;
	}
	err = crun_write_all(fd, data, len);
	if (!err && fsync(fd) < 0)
		err = -errno;
	if (close(fd) < 0 && !err)
		err = -errno;
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	if (err)
		unlink(tmp);
out_free:
	free(tmp);
	return err;
}

static int set_string(struct json *obj, const char *key, const char *s)
{
	struct json *v = agent_json_new_string(s, strlen(s));

	return v ? agent_json_set(obj, key, v) : -ENOMEM;
}

/* {"message": {"message": ..., "extraInfo": {"py_callstack": ...,
 * "timestamp": ...}, "errorCode": code}}, as @record writes it. */
static struct json *fallback_doc(const char *message, const char *detail, int code)
{
	struct json *root = agent_json_new(JSON_OBJECT);
	struct json *m = agent_json_new(JSON_OBJECT);
	struct json *extra = agent_json_new(JSON_OBJECT);
	struct json *num = agent_json_new_number(code);
	char stamp[32];
	int err;

	if (!root || !m || !extra || !num) {
		agent_json_free(root);
		agent_json_free(m);
		agent_json_free(extra);
		agent_json_free(num);
		return NULL;
	}
	snprintf(stamp, sizeof(stamp), "%llu", (unsigned long long)(crun_wall_ms() / 1000));
	err = set_string(extra, "py_callstack", detail);
	if (!err)
		err = set_string(extra, "timestamp", stamp);
	if (!err)
		err = set_string(m, "message", message);
	/* From here on the tree owns each part, also on failure. */
	if (err) {
		agent_json_free(num);
		agent_json_free(extra);
		goto out_free;
	}
	err = agent_json_set(m, "extraInfo", extra);
	if (err) {
		agent_json_free(num);
		goto out_free;
	}
	err = agent_json_set(m, "errorCode", num);
	if (err)
		goto out_free;
	err = agent_json_set(root, "message", m);
	m = NULL;
	if (err)
		goto out_free;
	return root;
out_free:
	agent_json_free(m);
	agent_json_free(root);
	return NULL;
}

int agent_error_file_write(const char *path, const char *err_text, size_t err_len,
			   const char *message, const char *detail, int code)
{
	struct json *doc = NULL, *m;
	char *out;
	int err;

	if (err_text) {
		doc = agent_json_parse(err_text, err_len, NULL, 0);
		m = agent_json_get(doc, "message");
		if (!m) {
			agent_json_free(doc);
			doc = NULL;
		} else if (m->type == JSON_OBJECT && code) {
			/* As torchrun: the worker cannot know it died by a
			 * signal, so the agent fills in the code. */
			struct json *c = agent_json_new_number(code);
			if (!c || agent_json_set(m, "errorCode", c) < 0) {
				agent_json_free(doc);
				return -ENOMEM;
			}
		}
	}
	if (!doc)
		doc = fallback_doc(message, detail, code);
	if (!doc)
		return -ENOMEM;
	out = agent_json_dump(doc);
	agent_json_free(doc);
	if (!out)
		return -ENOMEM;
	err = write_atomic(path, out, strlen(out));
	free(out);
	return err;
}

/* ---- the summary ---- */

struct text {
	char *p;
	size_t len, cap;
	bool oom;
};

static void tadd(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void tadd(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->oom = true;
			return;
		}
		if (t->p && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = t->cap ? t->cap : 1024;
		while (cap <= t->len + (size_t)n)
			cap *= 2;
		char *np = realloc(t->p, cap);
		if (!np) {
			t->oom = true;
			return;
		}
		t->p = np;
		t->cap = cap;
	}
}

/* Adds text under a label, continuation lines indented to the value. */
static void tadd_block(struct text *t, const char *label, const char *value)
{
	const char *line = value;
	bool first = true;

	while (*line) {
		const char *nl = strchr(line, '\n');
		int n = nl ? (int)(nl - line) : (int)strlen(line);
		if (first)
			tadd(t, "  %-10s: %.*s\n", label, n, line);
		else
			tadd(t, "              %.*s\n", n, line);
		first = false;
		if (!nl)
			break;
		line = nl + 1;
	}
	if (first)
		tadd(t, "  %-10s: <N/A>\n", label);
}

static void iso_time(char *buf, size_t len, uint64_t wall_ms)
{
	time_t secs = (time_t)(wall_ms / 1000);
	struct tm tm;
	char date[32];
	long off;

	if (!localtime_r(&secs, &tm)) {
		snprintf(buf, len, "<N/A>");
		return;
	}
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
	off = tm.tm_gmtoff / 60;
	if (off == 0)
		snprintf(buf, len, "%s.%03uZ", date, (unsigned)(wall_ms % 1000));
	else
		snprintf(buf, len, "%s.%03u%c%02ld:%02ld", date, (unsigned)(wall_ms % 1000),
			 off < 0 ? '-' : '+', labs(off) / 60, labs(off) % 60);
}

static bool keeps_files(const struct agent *a)
{
	return a->log_root != NULL;
}

static void add_failure(struct text *t, const struct agent *a, const struct failure *f,
			size_t index)
{
	char when[64], sig[32];
	char *message = NULL, *traceback = NULL;
	bool have_error_file = false;

	iso_time(when, sizeof(when), f->wall_ms);
	if (f->error_file)
		have_error_file = agent_error_file_read(f->error_file, &message, &traceback) == 0;
	tadd(t, "[%zu]:\n", index);
	tadd(t, "  %-10s: %s\n", "time", when);
	tadd(t, "  %-10s: %s\n", "host", a->hostname);
	tadd(t, "  %-10s: %d (local_rank: %d)\n", "rank", f->rank, f->local_rank);
	if (f->term_signal) {
		signal_name(sig, sizeof(sig), f->term_signal);
		tadd(t, "  %-10s: -%d (%s, pid: %d)\n", "exitcode", f->term_signal, sig,
		     (int)f->pid);
	} else {
		tadd(t, "  %-10s: %d (pid: %d)\n", "exitcode", f->exit_code, (int)f->pid);
	}
	tadd(t, "  %-10s: %s\n", "log_file", f->log_file ? f->log_file : "<N/A>");
	tadd(t, "  %-10s: %s\n", "error_file",
	     have_error_file && keeps_files(a) ? f->error_file : "<N/A>");
	tadd_block(t, "message", message ? message : "");
	if (traceback)
		tadd_block(t, "traceback", traceback);
	free(message);
	free(traceback);
}

static const char rule_heavy[] = "============================================================\n";
static const char rule_light[] = "------------------------------------------------------------\n";

/* With rendezvous, when no local rank failed in the last round: the root
 * cause as the store reported the round's end (the node that saw the
 * failure prints the full record). */
static void remote_report(struct agent *a)
{
	struct text t = {0};
	const char *why = a->rdzv.end_msg;

	tadd(&t, "%s", rule_heavy);
	tadd(&t, "%s FAILED", a->name);
	if (a->restart_count)
		tadd(&t, " (after %d restart%s)", a->restart_count,
		     a->restart_count == 1 ? "" : "s");
	tadd(&t, "\n%s", rule_light);
	tadd(&t, "Root Cause (as the rendezvous store reported it):\n");
	tadd(&t, "  %-10s: %lld\n", "round", (long long)a->rdzv.asg.round);
	tadd_block(&t, "message", why);
	tadd(&t, "  %-10s: %s\n", "this node", a->hostname);
	tadd(&t, "  (no rank on this node failed; the failing node prints its ranks)\n");
	tadd(&t, "%s", rule_heavy);
	if (!t.oom)
		crun_write_all(STDERR_FILENO, t.p, t.len);
	if (a->own_error_file) {
		char *message = NULL;
		int err;

		if (asprintf(&message, "%s FAILED: %s", a->name, why) < 0)
			message = NULL;
		err = agent_error_file_write(a->own_error_file, NULL, 0,
					     message ? message : "job failed", t.oom ? "" : t.p, 1);
		if (err < 0)
			crun_warn("cannot write error file '%s': %s", a->own_error_file,
				  strerror(-err));
		free(message);
	}
	free(t.p);
}

void agent_summary_report(struct agent *a)
{
	struct text t = {0};
	const struct failure *root;

	if (!a->nfailures) {
		if (a->spec->rdzv.enabled && a->rdzv.ended && a->rdzv.end_msg)
			remote_report(a);
		return;
	}
	root = &a->failures[0];
	tadd(&t, "%s", rule_heavy);
	tadd(&t, "%s FAILED", a->name);
	if (a->restart_count)
		tadd(&t, " (after %d restart%s)", a->restart_count,
		     a->restart_count == 1 ? "" : "s");
	tadd(&t, "\n%s", rule_light);
	tadd(&t, "Root Cause (first observed failure):\n");
	add_failure(&t, a, root, 0);
	tadd(&t, "%s", rule_light);
	tadd(&t, "Other Failures:\n");
	if (a->nfailures == 1)
		tadd(&t, "  <NO_OTHER_FAILURES>\n");
	for (size_t i = 1; i < a->nfailures; i++)
		add_failure(&t, a, &a->failures[i], i);
	tadd(&t, "%s", rule_heavy);
	if (!t.oom)
		crun_write_all(STDERR_FILENO, t.p, t.len);
	else
		crun_error("job failed (out of memory while writing the failure summary)");

	if (a->own_error_file) {
		char what[64];
		char *text = NULL, *message = NULL;
		size_t len = 0;
		int code = root->term_signal ? -root->term_signal : root->exit_code;
		int err;

		agent_describe_exit(what, sizeof(what), root->exit_code, root->term_signal);
		if (asprintf(&message, "%s FAILED: rank %d (local_rank %d) on %s %s", a->name,
			     root->rank, root->local_rank, a->hostname, what) < 0)
			message = NULL;
		if (root->error_file && read_file(root->error_file, &text, &len) < 0)
			text = NULL;
		err = agent_error_file_write(a->own_error_file, text, len,
					     message ? message : "job failed", t.oom ? "" : t.p,
					     code);
		if (err < 0)
			crun_warn("cannot write error file '%s': %s", a->own_error_file,
				  strerror(-err));
		free(text);
		free(message);
	}
	free(t.p);
}

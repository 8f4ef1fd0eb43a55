/* Failure records and the failure summary.
 *
 * A failure is a worker that exited non-zero or by a signal before the
 * agent began to stop the group, or during that stop by any cause other
 * than the agent's own SIGTERM/SIGKILL. They are kept in the order the
 * agent saw them, so the first is the root cause. The summary follows
 * torchrun's ChildFailedError table, root cause first, and adds the
 * message and traceback that PyTorch's @record left in the worker's
 * TORCHELASTIC_ERROR_FILE.
 *
 * Error files are JSON, read and written with jansson: strict RFC 8259
 * decoding (any defect gives NULL with the line and column, and the
 * summary then shows "<N/A>"), strings byte for byte, "\u0000" included
 * (JSON_ALLOW_NUL), and objects keep the order of their members, so a
 * worker's document comes back as it was with only errorCode set. */
#include "agent/summary.h"
#include "common/log.h"
#include "common/fs.h"
#include "common/record.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
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

int crun__failures_add(struct crun__failures *fl, const struct crun__failure *f)
{
	struct crun__failure *c;

	if (fl->n == fl->cap) {
		size_t cap = fl->cap ? fl->cap * 2 : 8;
		struct crun__failure *nv = realloc(fl->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		fl->v = nv;
		fl->cap = cap;
	}
	c = &fl->v[fl->n];
	*c = *f;
	c->error_file = f->error_file ? strdup(f->error_file) : NULL;
	c->log_file = f->log_file ? strdup(f->log_file) : NULL;
	c->hang = f->hang ? strdup(f->hang) : NULL;
	c->stack = f->stack ? strdup(f->stack) : NULL;
	c->last_line = f->last_line ? strdup(f->last_line) : NULL;
	fl->n++;
	return 0;
}

void crun__failures_clear(struct crun__failures *fl)
{
	for (size_t i = 0; i < fl->n; i++) {
		free(fl->v[i].error_file);
		free(fl->v[i].log_file);
		free(fl->v[i].hang);
		free(fl->v[i].stack);
		free(fl->v[i].last_line);
	}
	fl->n = 0;
}

void crun__failures_finish(struct crun__failures *fl)
{
	crun__failures_clear(fl);
	free(fl->v);
	fl->v = NULL;
	fl->cap = 0;
}

void crun__signal_format(char *buf, size_t len, int sig)
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
		crun__signal_format(name, sizeof(name), term_signal);
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

/* Python's json module writes a lone UTF-16 surrogate (a path that was
 * not UTF-8, decoded with surrogateescape) as a bare "\udcXX" escape,
 * which jansson refuses. Such an escape becomes "\ufffd", of the same
 * length, before parsing: the replacement character Python prints for
 * it. Only escapes inside strings are touched. */
static bool hex4(const char *s, size_t avail, unsigned *out)
{
	unsigned v = 0;

	if (avail < 4)
		return false;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		int h = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (h < 0)
			return false;
		v = v * 16 + (unsigned)h;
	}
	*out = v;
	return true;
}

static void mend_lone_surrogates(char *s, size_t len)
{
	bool in_string = false;
	unsigned cp, lo;

	for (size_t i = 0; i < len; i++) {
		if (s[i] == '"') {
			in_string = !in_string;
			continue;
		}
		if (!in_string || s[i] != '\\' || i + 1 >= len)
			continue;
		if (s[i + 1] != 'u' || !hex4(s + i + 2, len - i - 2, &cp)) {
			i++; /* an escaped character: never a quote that ends */
			continue;
		}
		if (cp >= 0xd800 && cp < 0xdc00 && len - i >= 12 && s[i + 6] == '\\' &&
		    s[i + 7] == 'u' && hex4(s + i + 8, len - i - 8, &lo) && lo >= 0xdc00 &&
		    lo < 0xe000) {
			i += 11; /* a pair */
			continue;
		}
		if (cp >= 0xd800 && cp < 0xe000)
			memcpy(s + i + 2, "fffd", 4);
		i += 5;
	}
}

/* Parses an error file's text (NUL-terminated, len bytes, changed in
 * place) as a JSON object; NULL when it is none (why, at debug level). */
static json_t *parse_doc(char *text, size_t len, const char *what)
{
	json_error_t e;
	json_t *doc;

	mend_lone_surrogates(text, len);
	doc = json_loadb(text, len, JSON_ALLOW_NUL, &e);
	if (!doc)
		crun__debug("%s is not JSON: line %d column %d: %s", what, e.line, e.column,
			    e.text);
	return doc;
}

static char *dup_string(const json_t *v)
{
	if (!json_is_string(v) || !json_string_length(v))
		return NULL;
	return strdup(json_string_value(v));
}

int agent_error_file_read(const char *path, char **message, char **traceback)
{
	json_t *root, *m;
	char *text;
	size_t len;
	int err;

	*message = NULL;
	*traceback = NULL;
	err = read_file(path, &text, &len);
	if (err < 0)
		return err;
	root = parse_doc(text, len, path);
	free(text);
	if (!root)
		return -EPROTO;
	m = json_object_get(root, "message");
	if (json_is_string(m)) {
		/* The newer format: {"message": "text"} */
		*message = dup_string(m);
	} else if (json_is_object(m)) {
		json_t *extra = json_object_get(m, "extraInfo");
		*message = dup_string(json_object_get(m, "message"));
		*traceback = dup_string(json_object_get(extra, "py_callstack"));
	}
	json_decref(root);
	return *message || *traceback ? 0 : -EPROTO;
}

/* crun's own document: @record's, with errorCode. */
static json_t *fallback_doc(const char *message, const char *detail, int code)
{
	json_t *doc = crun__record_doc(message, detail);

	if (doc &&
	    json_object_set_new(json_object_get(doc, "message"), "errorCode", json_integer(code))) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

/* The worker's own document, with errorCode set to code: NULL when
 * err_text is not an object with a "message". */
static json_t *worker_doc(const char *err_text, size_t err_len, int code)
{
	char *text = malloc(err_len + 1);
	json_t *doc, *m;

	if (!text)
		return NULL;
	memcpy(text, err_text, err_len);
	text[err_len] = '\0';
	doc = parse_doc(text, err_len, "the worker's error file");
	free(text);
	m = json_object_get(doc, "message");
	if (!m) {
		json_decref(doc);
		return NULL;
	}
	/* As torchrun: the worker cannot know it died by a signal, so the
	 * agent fills in the code. */
	if (json_is_object(m) && code && json_object_set_new(m, "errorCode", json_integer(code))) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

int agent_error_file_write(const char *path, const char *err_text, size_t err_len,
			   const char *message, const char *detail, int code)
{
	json_t *doc = NULL;
	int err;

	if (err_text)
		doc = worker_doc(err_text, err_len, code);
	if (!doc)
		doc = fallback_doc(message, detail, code);
	if (!doc)
		return -ENOMEM;
	err = crun__record_write(path, doc);
	json_decref(doc);
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

static void add_failure(struct text *t, const struct crun__summary_job *job,
			const struct crun__failure *f, size_t index)
{
	char when[64], sig[32];
	char *message = NULL, *traceback = NULL;
	bool have_error_file = false;

	iso_time(when, sizeof(when), f->wall_ms);
	if (f->error_file)
		have_error_file = agent_error_file_read(f->error_file, &message, &traceback) == 0;
	tadd(t, "[%zu]:\n", index);
	tadd(t, "  %-10s: %s\n", "time", when);
	tadd(t, "  %-10s: %s\n", "host", job->hostname);
	tadd(t, "  %-10s: %d (local_rank: %d)\n", "rank", f->rank, f->local_rank);
	if (f->hang) {
		tadd(t, "  %-10s: <N/A> (hung, pid: %d)\n", "exitcode", (int)f->pid);
	} else if (f->term_signal) {
		crun__signal_format(sig, sizeof(sig), f->term_signal);
		tadd(t, "  %-10s: -%d (%s, pid: %d)\n", "exitcode", f->term_signal, sig,
		     (int)f->pid);
	} else {
		tadd(t, "  %-10s: %d (pid: %d)\n", "exitcode", f->exit_code, (int)f->pid);
	}
	tadd(t, "  %-10s: %s\n", "log_file", f->log_file ? f->log_file : "<N/A>");
	if (!have_error_file)
		tadd(t, "  %-10s: <N/A>\n", "error_file");
	else if (job->keeps_files)
		tadd(t, "  %-10s: %s\n", "error_file", f->error_file);
	else
		tadd(t, "  %-10s: %s (removed when crun exits; --log-dir keeps it)\n", "error_file",
		     f->error_file);
	if (f->hang && !message)
		tadd_block(t, "message", f->hang);
	else if (!message && f->last_line)
		tadd_block(t, "message", f->last_line);
	else
		tadd_block(t, "message", message ? message : "");
	if (traceback)
		tadd_block(t, "traceback", traceback);
	if (f->stack)
		tadd_block(t, "stack", f->stack);
	free(message);
	free(traceback);
}

static const char rule_heavy[] = "============================================================\n";
static const char rule_light[] = "------------------------------------------------------------\n";

/* With rendezvous, when no local rank failed in the last round: the root
 * cause as the store reported the round's end (the node that saw the
 * failure prints the full record). */
static void remote_report(const struct crun__summary_job *job)
{
	struct text t = {0};
	const char *why = job->round_end;

	tadd(&t, "%s", rule_heavy);
	tadd(&t, "%s FAILED", job->name);
	if (job->restart_count)
		tadd(&t, " (after %d restart%s)", job->restart_count,
		     job->restart_count == 1 ? "" : "s");
	tadd(&t, "\n%s", rule_light);
	tadd(&t, "Root Cause (as the rendezvous store reported it):\n");
	tadd(&t, "  %-10s: %lld\n", "round", (long long)job->round);
	tadd_block(&t, "message", why);
	tadd(&t, "  %-10s: %s\n", "this node", job->hostname);
	tadd(&t, "  (no rank on this node failed; the failing node prints its ranks)\n");
	tadd(&t, "%s", rule_heavy);
	if (!t.oom)
		crun__write_all(STDERR_FILENO, t.p, t.len);
	if (job->own_error_file) {
		char *message = NULL;
		int err;

		if (asprintf(&message, "%s FAILED: %s", job->name, why) < 0)
			message = NULL;
		err = agent_error_file_write(job->own_error_file, NULL, 0,
					     message ? message : "job failed", t.oom ? "" : t.p, 1);
		if (err < 0)
			crun__warn("cannot write error file '%s': %s", job->own_error_file,
				   strerror(-err));
		free(message);
	}
	free(t.p);
}

void crun__failure_describe(const struct crun__failure *f, const char *hostname, char *buf,
			    size_t len)
{
	char what[320];

	if (f->hang)
		snprintf(what, sizeof(what), "%s", f->hang);
	else
		agent_describe_exit(what, sizeof(what), f->exit_code, f->term_signal);
	snprintf(buf, len, "rank %d (local_rank %d) on %s %s", f->rank, f->local_rank, hostname,
		 what);
}

void crun__summary_report(const struct crun__summary_job *job, const struct crun__failures *fl)
{
	struct text t = {0};
	const struct crun__failure *root;

	if (!fl->n) {
		if (job->round_end)
			remote_report(job);
		return;
	}
	root = &fl->v[0];
	tadd(&t, "%s", rule_heavy);
	tadd(&t, "%s FAILED", job->name);
	if (job->restart_count)
		tadd(&t, " (after %d restart%s)", job->restart_count,
		     job->restart_count == 1 ? "" : "s");
	tadd(&t, "\n");
	if (job->not_restarting && job->not_restarting[0])
		tadd(&t, "%s\n", job->not_restarting);
	tadd(&t, "%s", rule_light);
	tadd(&t, "Root Cause (first observed failure):\n");
	add_failure(&t, job, root, 0);
	tadd(&t, "%s", rule_light);
	tadd(&t, "Other Failures:\n");
	if (fl->n == 1)
		tadd(&t, "  <NO_OTHER_FAILURES>\n");
	for (size_t i = 1; i < fl->n; i++)
		add_failure(&t, job, &fl->v[i], i);
	tadd(&t, "%s", rule_heavy);
	if (!t.oom)
		crun__write_all(STDERR_FILENO, t.p, t.len);
	else
		crun__error("job failed (out of memory while writing the failure summary)");

	if (job->own_error_file) {
		char what[512];
		char *text = NULL, *message = NULL;
		size_t len = 0;
		int code = root->hang	       ? 1
			   : root->term_signal ? -root->term_signal
					       : root->exit_code;
		int err;

		crun__failure_describe(root, job->hostname, what, sizeof(what));
		if (asprintf(&message, "%s FAILED: %s", job->name, what) < 0)
			message = NULL;
		/* A hung worker wrote nothing that says why: crun's word. */
		if (root->error_file && !root->hang && read_file(root->error_file, &text, &len) < 0)
			text = NULL;
		err = agent_error_file_write(job->own_error_file, text, len,
					     message ? message : "job failed", t.oom ? "" : t.p,
					     code);
		if (err < 0)
			crun__warn("cannot write error file '%s': %s", job->own_error_file,
				   strerror(-err));
		free(text);
		free(message);
	}
	free(t.p);
}

/* Unit tests of the agent: error files (reading PyTorch's formats, writing
 * crun's own), the failure summary's parts, and whole runs of crun__agent_run() in a forked child
 * (its stdout and stderr in files) with the worker programs of
 * tests/helpers/, which are built next to this test. The runs cover what
 * needs the agent's insides: the environment, restarts, a worker that
 * survives SIGKILL (through the agent_kill hook), a pipe held open by a
 * process that left its group, and the guard after SIGKILL of the agent. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/group.h"
#include "agent/logdir.h"
#include "agent/prefix.h"
#include "agent/reaper.h"
#include "agent/spawn.h"
#include "agent/summary.h"
#include "common/fs.h"
#include "common/util.h"

static char helper_dir[PATH_MAX];
static char scratch[PATH_MAX];

static void helper(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", helper_dir, name);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (!f)
		return strdup("");
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	assert_non_null(buf);
	if (n > 0)
		assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

static void spit(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* ---- error files ---- */

static const char record_doc[] =
	"{\"message\": {\"message\": \"RuntimeError: boom\", \"extraInfo\": "
	"{\"py_callstack\": \"Traceback (most recent call last):\\n  File \\\"x.py\\\"\\n"
	"RuntimeError: boom\\n\", \"timestamp\": \"1700000000\"}}}";

/* Reads path after writing text there: 0 or the negative errno, message
 * and traceback in *msg and *tb (to free). */
static int read_doc(const char *text, char **msg, char **tb)
{
	char path[PATH_MAX + 32];

	snprintf(path, sizeof(path), "%s/doc.json", scratch);
	spit(path, text);
	return agent_error_file_read(path, msg, tb);
}

static void test_error_file_record(void **state)
{
	char *msg, *tb;

	(void)state;
	assert_int_equal(read_doc(record_doc, &msg, &tb), 0);
	assert_string_equal(msg, "RuntimeError: boom");
	assert_string_equal(
		tb, "Traceback (most recent call last):\n  File \"x.py\"\nRuntimeError: boom\n");
	free(msg);
	free(tb);
	/* Members of other kinds around the ones read; "message" not a
	 * string in "extraInfo": no traceback. */
	assert_int_equal(read_doc("{\"x\": [true, false, null, -12.5e3, 0, {}, []], \"message\": "
				  "{\"message\": \"m\", \"extraInfo\": {\"py_callstack\": 3}}}",
				  &msg, &tb),
			 0);
	assert_string_equal(msg, "m");
	assert_null(tb);
	free(msg);
}

static void test_error_file_strings(void **state)
{
	char *msg, *tb;

	(void)state;
	/* Escapes, a surrogate pair, an escaped slash. */
	assert_int_equal(read_doc("{\"message\": \"\\u00e9\\ud83d\\ude00\\/\\t\"}", &msg, &tb), 0);
	assert_string_equal(msg, "\xc3\xa9\xf0\x9f\x98\x80/\t");
	free(msg);
	/* A lone surrogate (Python's json writes one for a path that was not
	 * UTF-8) is U+FFFD, as Python prints it; the rest is kept. */
	assert_int_equal(read_doc("{\"message\": \"a\\ud800x\\udc80\\ud83d\\u0041\"}", &msg, &tb),
			 0);
	assert_string_equal(msg, "a\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbd\x41");
	free(msg);
	/* "\u0000" is a byte of the string: the message ends there. */
	assert_int_equal(read_doc("{\"message\": \"ab\\u0000cd\"}", &msg, &tb), 0);
	assert_string_equal(msg, "ab");
	free(msg);
	/* An escaped backslash before a quote does not end the mending. */
	assert_int_equal(read_doc("{\"message\": \"\\\\\", \"x\": \"\\ud800\"}", &msg, &tb), 0);
	assert_string_equal(msg, "\\");
	free(msg);
}

static void test_error_file_bad(void **state)
{
	static const char *const bad[] = {
		"",	      " ",	     "{",      "}",	      "[1,]",	  "[1 2]",
		"{\"a\":}",   "{\"a\" 1}",   "{1: 2}", "{\"a\": 1,}", "\"abc",	  "\"\\x\"",
		"\"\\u12\"",  "\"\\u12g4\"", "01",     "-",	      "1.",	  "1e",
		"1e+",	      "tru",	     "nul",    "falsy",	      "\"a\tb\"", "[] []",
		"{\"a\": [}", "\x01",	     "+1",     ".5",
	};
	/* Documents: cut off, a raw control character, trailing characters, a
	 * bad escape, not an object, nothing to show. */
	static const char *const bad_docs[] = {
		"{\"message\": {\"message\": \"cut off",
		"{\"message\": \"a\tb\"}",
		"{\"message\": \"m\"} {}",
		"{\"message\": \"\\u12\"}",
		"[\"message\", \"m\"]",
		"{\"message\": 1}",
		"{\"other\": 1}",
	};
	char *msg, *tb, *deep;
	size_t n = 3000;

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(bad) + CRUN_ARRAY_SIZE(bad_docs); i++) {
		const char *doc =
			i < CRUN_ARRAY_SIZE(bad) ? bad[i] : bad_docs[i - CRUN_ARRAY_SIZE(bad)];

		if (read_doc(doc, &msg, &tb) != -EPROTO)
			fail_msg("accepted bad error file '%s'", doc);
		assert_null(msg);
		assert_null(tb);
	}
	/* Nesting deeper than the parser's limit is refused, not a crash. */
	deep = malloc(2 * n + 64);
	assert_non_null(deep);
	strcpy(deep, "{\"message\": \"m\", \"x\": ");
	memset(deep + strlen(deep), '[', n);
	deep[strlen("{\"message\": \"m\", \"x\": ") + n] = '\0';
	memset(deep + strlen(deep), ']', n);
	deep[strlen("{\"message\": \"m\", \"x\": ") + 2 * n] = '\0';
	strcat(deep, "}");
	assert_int_equal(read_doc(deep, &msg, &tb), -EPROTO);
	free(deep);
}

static void test_error_file_large(void **state)
{
	char path[PATH_MAX + 32];
	size_t big = 1 << 20;
	char *text = malloc(big + 64), *msg, *tb;
	FILE *f;

	(void)state;
	assert_non_null(text);
	/* A megabyte of traceback is read whole. */
	strcpy(text, "{\"message\": \"");
	memset(text + strlen(text), 'x', big);
	strcpy(text + 13 + big, "\"}");
	assert_int_equal(read_doc(text, &msg, &tb), 0);
	assert_int_equal(strlen(msg), big);
	free(msg);
	free(text);
	/* A file over 4 MiB, or not a regular file, is not read at all. */
	snprintf(path, sizeof(path), "%s/big.json", scratch);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(ftruncate(fileno(f), (4 << 20) + 1), 0);
	fclose(f);
	assert_int_equal(agent_error_file_read(path, &msg, &tb), -EFBIG);
	assert_int_equal(agent_error_file_read(scratch, &msg, &tb), -EFBIG);
	unlink(path);
}

static void test_error_file_read(void **state)
{
	char path[PATH_MAX + 32];
	char *msg, *tb;

	(void)state;
	snprintf(path, sizeof(path), "%s/err.json", scratch);
	spit(path, record_doc);
	assert_int_equal(agent_error_file_read(path, &msg, &tb), 0);
	assert_string_equal(msg, "RuntimeError: boom");
	assert_non_null(strstr(tb, "Traceback"));
	free(msg);
	free(tb);

	spit(path, "{\"message\": \"plain text message\"}");
	assert_int_equal(agent_error_file_read(path, &msg, &tb), 0);
	assert_string_equal(msg, "plain text message");
	assert_null(tb);
	free(msg);

	spit(path, "{\"message\": {\"message\": \"cut off");
	assert_int_equal(agent_error_file_read(path, &msg, &tb), -EPROTO);
	assert_null(msg);
	spit(path, "{\"other\": 1}");
	assert_int_equal(agent_error_file_read(path, &msg, &tb), -EPROTO);
	spit(path, "");
	assert_int_equal(agent_error_file_read(path, &msg, &tb), -EPROTO);
	unlink(path);
	assert_int_equal(agent_error_file_read(path, &msg, &tb), -ENOENT);
}

static void expect_written(const char *path, const char *doc, int code, const char *want)
{
	char *text;

	assert_int_equal(agent_error_file_write(path, doc, strlen(doc), "unused", "unused", code),
			 0);
	text = slurp(path);
	assert_string_equal(text, want);
	free(text);
}

static void test_error_file_write(void **state)
{
	char path[PATH_MAX + 32];
	char *text, *msg, *tb;

	(void)state;
	snprintf(path, sizeof(path), "%s/own.json", scratch);
	/* The worker's document, with the agent's error code, on one line
	 * as Python's json.dumps writes it. */
	expect_written(path, record_doc, -11,
		       "{\"message\": {\"message\": \"RuntimeError: boom\", \"extraInfo\": "
		       "{\"py_callstack\": \"Traceback (most recent call last):\\n  File "
		       "\\\"x.py\\\"\\nRuntimeError: boom\\n\", \"timestamp\": \"1700000000\"}, "
		       "\"errorCode\": -11}}");
	/* Members keep their order; an errorCode there is replaced in place;
	 * strings come back byte for byte, "\u0000" too. */
	expect_written(path,
		       "{\"a\":[1,true,null],\"message\":{\"errorCode\":1,\"m\":\"q\\\"\\\\\\n"
		       "\\u0001\\u0000\\u00e9\"},\"d\":\"x\"}",
		       -7,
		       "{\"a\": [1, true, null], \"message\": {\"errorCode\": -7, \"m\": "
		       "\"q\\\"\\\\\\n\\u0001\\u0000\xc3\xa9\"}, \"d\": \"x\"}");
	/* A "message" that is a string, or code 0: the document as it was. */
	expect_written(path, "{\"message\": \"plain\"}", 9, "{\"message\": \"plain\"}");
	expect_written(path, "{\"message\": {\"message\": \"m\"}}", 0,
		       "{\"message\": {\"message\": \"m\"}}");

	/* No usable worker document: one of the agent's own. */
	assert_int_equal(
		agent_error_file_write(path, "not json", 8, "job FAILED", "line1\nline2", 3), 0);
	assert_int_equal(agent_error_file_read(path, &msg, &tb), 0);
	assert_string_equal(msg, "job FAILED");
	assert_string_equal(tb, "line1\nline2");
	free(msg);
	free(tb);
	text = slurp(path);
	assert_true(strstr(text,
			   "{\"message\": {\"message\": \"job FAILED\", \"extraInfo\": "
			   "{\"py_callstack\": \"line1\\nline2\", \"timestamp\": \"") == text);
	assert_non_null(strstr(text, "\"}, \"errorCode\": 3}}"));
	free(text);
	/* A document with no "message", or not an object: the agent's own. */
	assert_int_equal(agent_error_file_write(path, "{\"x\": 1}", 8, "m1", "d1", 1), 0);
	assert_int_equal(agent_error_file_read(path, &msg, &tb), 0);
	assert_string_equal(msg, "m1");
	free(msg);
	free(tb);
	/* Bytes that are not UTF-8 (a path in another encoding) become U+FFFD. */
	assert_int_equal(agent_error_file_write(path, NULL, 0, "job \xff FAILED", "at /a\xfe", 1),
			 0);
	assert_int_equal(agent_error_file_read(path, &msg, &tb), 0);
	assert_string_equal(msg, "job \xef\xbf\xbd FAILED");
	assert_string_equal(tb, "at /a\xef\xbf\xbd");
	free(msg);
	free(tb);
	unlink(path);
	/* An unwritable place is an error, not a crash. */
	assert_true(agent_error_file_write("/nonexistent-dir/x.json", NULL, 0, "m", "d", 1) < 0);
}

/* The summary crun__summary_report writes to stderr, into a buffer. */
static void summary_of(const struct crun__summary_job *job, const struct crun__failures *fl,
		       char *out, size_t len)
{
	char path[PATH_MAX + 32];
	int fd, saved;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/summary.txt", scratch);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	dup2(fd, STDERR_FILENO);
	crun__summary_report(job, fl);
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = pread(fd, out, len - 1, 0);
	assert_true(n >= 0);
	out[n] = '\0';
	close(fd);
	unlink(path);
}

/* The summary names the error file it read: kept under a log directory,
 * or said to go with crun's temporary directory; none read: <N/A>. */
static void test_summary_error_file(void **state)
{
	struct crun__summary_job job = {.name = "train.py", .hostname = "h"};
	struct crun__failures fl = {0};
	struct crun__failure f = {.rank = 1, .local_rank = 1, .pid = 42, .exit_code = 1};
	char path[PATH_MAX + 32], want[PATH_MAX + 128], out[8192];

	(void)state;
	snprintf(path, sizeof(path), "%s/error.json", scratch);
	spit(path, record_doc);
	f.error_file = path;
	assert_int_equal(crun__failures_add(&fl, &f), 0);

	job.keeps_files = true;
	summary_of(&job, &fl, out, sizeof(out));
	snprintf(want, sizeof(want), "  error_file: %s\n", path);
	if (!strstr(out, want))
		fail_msg("no '%s' in:\n%s", want, out);
	assert_non_null(strstr(out, "  message   : RuntimeError: boom\n"));

	job.keeps_files = false;
	summary_of(&job, &fl, out, sizeof(out));
	snprintf(want, sizeof(want),
		 "  error_file: %s (removed when crun exits; --log-dir keeps it)\n", path);
	if (!strstr(out, want))
		fail_msg("no '%s' in:\n%s", want, out);

	/* The worker named the file but never wrote it. */
	unlink(path);
	job.keeps_files = true;
	summary_of(&job, &fl, out, sizeof(out));
	assert_non_null(strstr(out, "  error_file: <N/A>\n"));
	crun__failures_finish(&fl);
}

/* Expected values are Python's string.Template(t).safe_substitute(
 * role_name="tr", rank=3, local_rank=1, hostname="h"), as torchrun
 * renders --log-line-prefix-template. */
static void test_prefix_render(void **state)
{
	static const struct {
		const char *tmpl, *want;
	} cases[] = {
		{CRUN__PREFIX_DEFAULT, "[3]:"},
		{CRUN__PREFIX_DEFAULT_ROLE, "[tr3]:"},
		{"${role_name}-${rank}:${local_rank}", "tr-3:1"},
		{"${hostname}:${rank}: ", "h:3: "},
		{"$role_name$rank", "tr3"},
		{"", ""},
		{"plain", "plain"},
		{"$$x", "$x"},
		{"$${rank}", "${rank}"},
		{"$rank0", "$rank0"}, /* the name is rank0 */
		{"${rank}0", "30"},
		{"${node}", "${node}"}, /* unknown: kept */
		{"$Rank", "$Rank"},	/* names are case-sensitive */
		{"a$", "a$"},		/* a '$' that starts nothing */
		{"${rank", "${rank"},
		{"${}", "${}"},
		{"$1", "$1"},
		{"${ rank}", "${ rank}"},
		{"$-${local_rank}", "$-1"},
	};
	struct crun__prefix_vars v = {
		.role_name = "tr", .rank = 3, .local_rank = 1, .hostname = "h"};
	char out[64], small[5];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = crun__prefix_render(cases[i].tmpl, &v, out, sizeof(out));

		if (strcmp(out, cases[i].want) || n != strlen(cases[i].want))
			fail_msg("'%s': '%s' (%zu), expected '%s'", cases[i].tmpl, out, n,
				 cases[i].want);
	}
	/* Cut to the buffer; the return value says how long it would be. */
	assert_int_equal(
		crun__prefix_render("${role_name}-${rank}:${local_rank}", &v, small, sizeof(small)),
		6);
	assert_string_equal(small, "tr-3");
	assert_int_equal(crun__prefix_render("$$$$$$", &v, small, 1), 3);
	assert_string_equal(small, "");
}

static void test_describe_exit(void **state)
{
	char buf[64];

	(void)state;
	agent_describe_exit(buf, sizeof(buf), 3, 0);
	assert_string_equal(buf, "exited with code 3");
	agent_describe_exit(buf, sizeof(buf), 0, SIGSEGV);
	assert_string_equal(buf, "was killed by SIGSEGV");
}

static void test_mkdir_p(void **state)
{
	char path[PATH_MAX + 32], file[PATH_MAX + 64];

	(void)state;
	snprintf(path, sizeof(path), "%s/a/b//c/", scratch);
	assert_int_equal(crun__mkdir_p(path, 0777), 0);
	assert_int_equal(crun__mkdir_p(path, 0777), 0);
	snprintf(file, sizeof(file), "%s/a/file", scratch);
	spit(file, "x");
	strcat(file, "/sub");
	assert_int_equal(crun__mkdir_p(file, 0777), -ENOTDIR);
}

/* A run's own log directory: the run id, or the UTC time for "none";
 * .1, .2, ... when taken; never a directory that exists already. */
static void test_logdir(void **state)
{
	const time_t t = 1796210553; /* 2026-12-02 11:22:33 UTC */
	char name[64], parent[PATH_MAX + 32], want[PATH_MAX + 64], what[PATH_MAX + 64];
	char *p1, *p2, *p3, *p4;
	struct stat st;

	(void)state;
	assert_int_equal(crun__logdir_name(name, sizeof(name), "job7", t, 0), 0);
	assert_string_equal(name, "job7");
	assert_int_equal(crun__logdir_name(name, sizeof(name), "job7", t, 2), 0);
	assert_string_equal(name, "job7.2");
	assert_int_equal(crun__logdir_name(name, sizeof(name), "none", t, 0), 0);
	assert_string_equal(name, "20261202T112233Z");
	assert_int_equal(crun__logdir_name(name, sizeof(name), "none", t, 11), 0);
	assert_string_equal(name, "20261202T112233Z.11");
	assert_int_equal(crun__logdir_name(name, 8, "none", t, 0), -ENAMETOOLONG);

	/* The parent is made; each run of the same id and time gets its own. */
	snprintf(parent, sizeof(parent), "%s/logs/deeper", scratch);
	assert_int_equal(crun__logdir_make(parent, "none", NULL, t, &p1, what, sizeof(what)), 0);
	assert_int_equal(crun__logdir_make(parent, "none", NULL, t, &p2, what, sizeof(what)), 0);
	snprintf(want, sizeof(want), "%s/20261202T112233Z", parent);
	assert_string_equal(p1, want);
	snprintf(want, sizeof(want), "%s/20261202T112233Z.1", parent);
	assert_string_equal(p2, want);
	assert_int_equal(stat(p2, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	/* A file of the name is taken as well. */
	snprintf(want, sizeof(want), "%s/job", parent);
	spit(want, "x");
	assert_int_equal(crun__logdir_make(parent, "job", NULL, t, &p3, what, sizeof(what)), 0);
	snprintf(want, sizeof(want), "%s/job.1", parent);
	assert_string_equal(p3, want);
	/* A parent that cannot be a directory: the error names it. */
	snprintf(want, sizeof(want), "%s/job/sub", parent);
	assert_int_equal(crun__logdir_make(want, "job", NULL, t, &p4, what, sizeof(what)),
			 -ENOTDIR);
	assert_null(p4);
	assert_string_equal(what, want);
	free(p1);
	free(p2);
	free(p3);

	/* Several nodes: one run directory, named alike on every node (the
	 * run id as it is, "none" too), a directory per host in it. */
	assert_int_equal(crun__logdir_make(parent, "mn", "h1", t, &p1, what, sizeof(what)), 0);
	assert_int_equal(crun__logdir_make(parent, "mn", "h2", t, &p2, what, sizeof(what)), 0);
	assert_int_equal(crun__logdir_make(parent, "mn", "h1", t, &p3, what, sizeof(what)), 0);
	snprintf(want, sizeof(want), "%s/mn/h1", parent);
	assert_string_equal(p1, want);
	snprintf(want, sizeof(want), "%s/mn/h2", parent);
	assert_string_equal(p2, want);
	snprintf(want, sizeof(want), "%s/mn/h1.1", parent);
	assert_string_equal(p3, want);
	free(p1);
	free(p2);
	free(p3);
	assert_int_equal(crun__logdir_make(parent, "none", "h1", t, &p1, what, sizeof(what)), 0);
	snprintf(want, sizeof(want), "%s/none/h1", parent);
	assert_string_equal(p1, want);
	free(p1);
	/* The run level taken by a file. */
	assert_int_equal(crun__logdir_make(parent, "job", "h1", t, &p4, what, sizeof(what)),
			 -ENOTDIR);
	assert_null(p4);

	/* Every name taken: the error names the bare one. */
	snprintf(parent, sizeof(parent), "%s/full", scratch);
	for (int n = 0; n < CRUN__LOGDIR_TRIES; n++) {
		char d[PATH_MAX + 128];

		assert_int_equal(crun__logdir_name(name, sizeof(name), "x", t, n), 0);
		snprintf(d, sizeof(d), "%s/%s", parent, name);
		assert_int_equal(crun__mkdir_p(d, 0777), 0);
	}
	assert_int_equal(crun__logdir_make(parent, "x", NULL, t, &p4, what, sizeof(what)), -EEXIST);
	assert_null(p4);
	snprintf(want, sizeof(want), "%s/x", parent);
	assert_string_equal(what, want);
}

/* ---- whole runs ---- */

struct run {
	int status;	 /* crun__agent_run()'s return, or -1 */
	char *out, *err; /* the agent's stdout and stderr */
	long ms;	 /* wall time */
};

static int (*child_kill)(pid_t, int);

static long now_ms(void)
{
	return (long)crun__now_ms();
}

/* Runs the agent in a child with env (KEY=VALUE..., NULL) added to its
 * environment. The child is killed after limit_ms. */
static void run_agent(struct run *r, struct crun__agent_spec *spec, char **env, long limit_ms)
{
	char out[PATH_MAX + 16], err[PATH_MAX + 16];
	long start = now_ms();
	int status;
	pid_t pid;

	snprintf(out, sizeof(out), "%s/out", scratch);
	snprintf(err, sizeof(err), "%s/err", scratch);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fo < 0 || fe < 0)
			_exit(99);
		dup2(fo, 1);
		dup2(fe, 2);
		for (char **e = env; e && *e; e++)
			putenv(*e);
		if (child_kill)
			agent_kill = child_kill;
		_exit(crun__agent_run(spec));
	}
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (now_ms() - start > limit_ms) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("agent did not finish within %ld ms", limit_ms);
		}
		usleep(5000);
	}
	r->ms = now_ms() - start;
	r->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	r->out = slurp(out);
	r->err = slurp(err);
}

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; (p = strstr(p, line)); p++)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
			return true;
	return false;
}

static void expect_line(const char *text, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void expect_line(const char *text, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (!has_line(text, line))
		fail_msg("missing line '%s' in:\n%s", line, text);
}

static pid_t pid_after(const char *text, const char *tag)
{
	const char *p = strstr(text, tag);

	return p ? (pid_t)atoi(p + strlen(tag)) : 0;
}

static void test_run_env(void **state)
{
	char prog[PATH_MAX + 32];
	char *argv[] = {prog, "x${local_rank}y${local_rank}", "plain", NULL};
	char *extra[] = {"EXTRA_ONE=1", "RANK=99", "EXTRA_ONE=2", "OMP_NUM_THREADS=4", NULL};
	char *env[] = {"CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", "TORCHELASTIC_USE_AGENT_STORE=True",
		       "INHERITED_X=yes", NULL};
	struct crun__agent_spec spec;
	struct run r;

	(void)state;
	helper(prog, sizeof(prog), "crun-test-env");
	crun__agent_spec_init(&spec);
	spec.argv = argv;
	spec.argc = 3;
	spec.nproc_per_node = 3;
	spec.nnodes = 2;
	spec.node_rank = 1;
	spec.role = "trainer";
	spec.run_id = "job7";
	spec.max_restarts = 5;
	spec.master_addr = "10.1.2.3";
	spec.master_port = 29511;
	spec.virtual_local_rank = true;
	spec.host_store = true;
	spec.token = "sekrit";
	spec.token_len = 6;
	spec.extra_env = extra;
	run_agent(&r, &spec, env, 10000);
	assert_int_equal(r.status, 0);
	for (int lr = 0; lr < 3; lr++) {
		int rank = 3 + lr;
		const char *dev[] = {"GPU-a", "GPU-b", "2"};
		expect_line(r.out, "[trainer%d]:ARG1=x%dy%d", rank, lr, lr);
		expect_line(r.out, "[trainer%d]:ARG2=plain", rank);
		expect_line(r.out, "[trainer%d]:STDIN_IS_DEVNULL=1", rank);
		expect_line(r.out, "[trainer%d]:LOCAL_RANK=0", rank);
		expect_line(r.out, "[trainer%d]:RANK=%d", rank, rank);
		expect_line(r.out, "[trainer%d]:ROLE_RANK=%d", rank, rank);
		expect_line(r.out, "[trainer%d]:GROUP_RANK=1", rank);
		expect_line(r.out, "[trainer%d]:ROLE_NAME=trainer", rank);
		expect_line(r.out, "[trainer%d]:LOCAL_WORLD_SIZE=3", rank);
		expect_line(r.out, "[trainer%d]:WORLD_SIZE=6", rank);
		expect_line(r.out, "[trainer%d]:ROLE_WORLD_SIZE=6", rank);
		expect_line(r.out, "[trainer%d]:GROUP_WORLD_SIZE=2", rank);
		expect_line(r.out, "[trainer%d]:MASTER_ADDR=10.1.2.3", rank);
		expect_line(r.out, "[trainer%d]:MASTER_PORT=29511", rank);
		expect_line(r.out, "[trainer%d]:TORCHELASTIC_RESTART_COUNT=0", rank);
		expect_line(r.out, "[trainer%d]:TORCHELASTIC_MAX_RESTARTS=5", rank);
		expect_line(r.out, "[trainer%d]:TORCHELASTIC_RUN_ID=job7", rank);
		expect_line(r.out, "[trainer%d]:TORCHELASTIC_USE_AGENT_STORE=False", rank);
		expect_line(r.out, "[trainer%d]:TORCH_NCCL_ASYNC_ERROR_HANDLING=1", rank);
		expect_line(r.out, "[trainer%d]:OMP_NUM_THREADS=4", rank);
		expect_line(r.out, "[trainer%d]:CUDA_VISIBLE_DEVICES=%s", rank, dev[lr]);
		expect_line(r.out, "[trainer%d]:EXTRA_ONE=2", rank);
		expect_line(r.out, "[trainer%d]:INHERITED_X=yes", rank);
		expect_line(r.out, "[trainer%d]:CRUN_RUN_ID=job7", rank);
		expect_line(r.out, "[trainer%d]:CRUN_ROUND=0", rank);
		expect_line(r.out, "[trainer%d]:CRUN_TOKEN=sekrit", rank);
	}
	assert_non_null(strstr(r.out, "]:CRUN_STORE=127.0.0.1:"));
	assert_non_null(strstr(r.out, "]:TORCHELASTIC_ERROR_FILE=/"));
	assert_null(strstr(r.out, "EXTRA_ONE=1\n"));
	assert_null(strstr(r.out, "RANK=99"));
	/* OMP_NUM_THREADS was given: no notice. */
	assert_null(strstr(r.err, "OMP_NUM_THREADS"));
	run_free(&r);
}

static void test_run_restarts(void **state)
{
	char prog[PATH_MAX + 32];
	char *argv[] = {prog, "--fail-rank", "1",    "--fail-below", "2",   "--code",
			"5",  "--others-ms", "1500", "--delay-ms",   "100", NULL};
	struct crun__agent_spec spec;
	struct run r;

	(void)state;
	helper(prog, sizeof(prog), "crun-test-exit");
	crun__agent_spec_init(&spec);
	spec.argv = argv;
	spec.argc = 11;
	spec.nproc_per_node = 3;
	spec.max_restarts = 3;
	/* Rank 1 fails the same way each time, but after 100 ms: longer than
	 * the minimum attempt time, which is progress for the repeat rule. */
	spec.min_attempt_ms = 50;
	run_agent(&r, &spec, NULL, 10000);
	/* Attempts 0 and 1 fail, attempt 2 runs to the end. */
	assert_int_equal(r.status, 0);
	for (int attempt = 0; attempt < 3; attempt++) {
		char tag[64];
		snprintf(tag, sizeof(tag), "[1]:start rank=1 restart=%d pid=", attempt);
		assert_true(pid_after(r.out, tag) > 0);
	}
	assert_non_null(strstr(r.out, "[0]:start rank=0 restart=2"));
	assert_non_null(strstr(r.out, "[2]:start rank=2 restart=2"));
	assert_null(strstr(r.out, "restart=3"));
	assert_non_null(strstr(r.err, "worker group failed: rank 1 (local rank 1, pid "));
	assert_non_null(strstr(r.err, "exited with code 5; restarting (restart 2 of 3)"));
	assert_null(strstr(r.err, "FAILED"));
	/* The others were stopped at once, not after their 1.5 s. */
	assert_true(r.ms < 3500);
	run_free(&r);

	/* Restarts exhausted: exit 1 and the summary, root cause first. */
	argv[4] = "-1";
	argv[8] = "0";
	spec.max_restarts = 1;
	spec.name = "train.py";
	run_agent(&r, &spec, NULL, 10000);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.out, "[1]:start rank=1 restart=1"));
	assert_null(strstr(r.out, "restart=2"));
	assert_non_null(strstr(r.err, "train.py FAILED (after 1 restart)\n"));
	assert_non_null(strstr(r.err, "Root Cause (first observed failure):\n[0]:\n"));
	assert_non_null(strstr(r.err, "  rank      : 1 (local_rank: 1)\n"));
	assert_non_null(strstr(r.err, "  exitcode  : 5 (pid: "));
	assert_non_null(strstr(r.err, "  <NO_OTHER_FAILURES>\n"));
	run_free(&r);

	/* The same failure twice, each shorter than the minimum attempt
	 * time: one restart, not three, and the summary says why. */
	spec.max_restarts = 3;
	spec.min_attempt_ms = 60000;
	run_agent(&r, &spec, NULL, 10000);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.out, "[1]:start rank=1 restart=1"));
	assert_null(strstr(r.out, "restart=2"));
	assert_non_null(strstr(r.err, "train.py FAILED (after 1 restart)\nnot restarting: rank 1 "
				      "failed the same way twice without progress: exited with "
				      "code 5 after "));
	run_free(&r);

	/* Exit 78, a configuration error: no restart at all. */
	argv[6] = "78";
	run_agent(&r, &spec, NULL, 10000);
	assert_int_equal(r.status, 1);
	assert_null(strstr(r.out, "restart=1"));
	assert_non_null(strstr(r.err, "train.py FAILED\nnot restarting: rank 1 exited with code "
				      "78: a configuration error"));
	run_free(&r);
}

static void test_run_signal_failure(void **state)
{
	char prog[PATH_MAX + 32], own[PATH_MAX + 48], envbuf[PATH_MAX + 80];
	/* Rank 0 crashes after 300 ms; rank 1 ignores the agent's SIGTERM
	 * and crashes 200 ms later on its own. */
	char *argv[] = {prog,	      "--signal", "11", "--stagger-ms", "200", "--ignore-term", "1",
			"--delay-ms", "300",	  NULL};
	char *env[] = {envbuf, NULL};
	struct crun__agent_spec spec;
	struct run r;
	char *text;

	(void)state;
	helper(prog, sizeof(prog), "crun-test-exit");
	snprintf(own, sizeof(own), "%s/crun__error.json", scratch);
	snprintf(envbuf, sizeof(envbuf), "TORCHELASTIC_ERROR_FILE=%s", own);
	crun__agent_spec_init(&spec);
	spec.argv = argv;
	spec.argc = 9;
	spec.nproc_per_node = 2;
	spec.max_restarts = 0;
	run_agent(&r, &spec, env, 10000);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "  exitcode  : -11 (SIGSEGV, pid: "));
	/* Both crashed on their own: the second is among the others. */
	assert_non_null(strstr(r.err, "Root Cause (first observed failure):\n[0]:\n"));
	assert_true(strstr(r.err, "rank      : 0 (local_rank: 0)") <
		    strstr(r.err, "Other Failures:\n[1]:\n"));
	assert_non_null(strstr(r.err, "rank      : 1 (local_rank: 1)"));
	text = slurp(own);
	assert_non_null(strstr(text, "\"errorCode\": -11"));
	assert_non_null(strstr(text, "was killed by SIGSEGV"));
	free(text);
	run_free(&r);
}

static void test_run_exec_errors(void **state)
{
	char *missing[] = {"crun-no-such-command-xyz", NULL};
	char path[PATH_MAX + 32];
	char *noexec[] = {path, NULL};
	struct crun__agent_spec spec;
	struct run r;
	char *expect;

	(void)state;
	snprintf(path, sizeof(path), "%s/not-executable", scratch);
	spit(path, "#!/bin/sh\n");
	chmod(path, 0644);
	crun__agent_spec_init(&spec);
	spec.argv = missing;
	spec.argc = 1;
	spec.nproc_per_node = 2;
	run_agent(&r, &spec, NULL, 5000);
	assert_int_equal(r.status, 127);
	assert_non_null(strstr(r.err, "crun: cannot execute 'crun-no-such-command-xyz': no such "
				      "file or directory\n"));
	assert_null(strstr(r.err, "restarting"));
	run_free(&r);

	spec.argv = noexec;
	run_agent(&r, &spec, NULL, 5000);
	assert_int_equal(r.status, 126);
	assert_true(asprintf(&expect, "crun: cannot execute '%s': permission denied\n", path) > 0);
	assert_non_null(strstr(r.err, expect));
	free(expect);
	run_free(&r);
}

/* Signals to worker groups go nowhere: a worker that survives SIGKILL. */
static int fake_kill(pid_t pid, int sig)
{
	if (pid < 0 && (sig == SIGTERM || sig == SIGKILL))
		return 0;
	return kill(pid, sig);
}

static void test_run_stuck_worker(void **state)
{
	char prog[PATH_MAX + 32];
	char *argv[] = {prog, "--fail-rank", "0", "--others-ms", "20000", NULL};
	struct crun__agent_spec spec;
	struct run r;
	pid_t stuck;

	(void)state;
	helper(prog, sizeof(prog), "crun-test-exit");
	crun__agent_spec_init(&spec);
	spec.argv = argv;
	spec.argc = 5;
	spec.nproc_per_node = 2;
	spec.max_restarts = 3;
	spec.shutdown_timeout_ms = 100;
	spec.kill_timeout_ms = 200;
	child_kill = fake_kill;
	run_agent(&r, &spec, NULL, 5000);
	child_kill = NULL;
	stuck = pid_after(r.out, "[1]:start rank=1 restart=0 pid=");
	assert_true(stuck > 0);
	kill(-stuck, SIGKILL);
	/* Reported, not restarted, and crun did not hang. */
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "1 worker still running after the shutdown timeout"));
	assert_non_null(strstr(r.err, "rank 1 (local rank 1, pid "));
	assert_non_null(strstr(r.err, "did not exit 200 ms after SIGKILL"));
	assert_null(strstr(r.out, "restart=1"));
	assert_non_null(strstr(r.err, "Root Cause"));
	assert_true(r.ms < 3000);
	run_free(&r);
}

static bool process_gone(pid_t pid)
{
	char path[64], buf[512];
	FILE *f;
	char *p;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return true;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	p = p ? strrchr(buf, ')') : NULL;
	return p && (p[2] == 'Z' || p[2] == 'X'); /* a zombie is dead */
}

static bool wait_gone(pid_t pid, long ms)
{
	for (long t = 0; t < ms; t += 10) {
		if (process_gone(pid))
			return true;
		usleep(10000);
	}
	return process_gone(pid);
}

static void test_run_escaped_pipe(void **state)
{
	char prog[PATH_MAX + 32];
	char *argv[] = {prog, "escaped-marker", "--exit", "0", "--escape", NULL};
	struct crun__agent_spec spec;
	struct run r;
	pid_t gc;

	(void)state;
	helper(prog, sizeof(prog), "crun-test-fork");
	crun__agent_spec_init(&spec);
	spec.argv = argv;
	spec.argc = 5;
	spec.kill_timeout_ms = 300;
	run_agent(&r, &spec, NULL, 5000);
	gc = pid_after(r.out, "[0]:grandchild ");
	assert_true(gc > 0);
	kill(gc, SIGKILL);
	/* Every worker exited 0; their output pipe stayed open in a process
	 * of another session, which the agent waits for only so long. */
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.err, "output of rank 0 is still open in a process outside its "
				      "process group; not waiting for it"));
	assert_true(r.ms < 3000);
	run_free(&r);
}

static void test_run_guard(void **state)
{
	char prog[PATH_MAX + 32], out[PATH_MAX + 16];
	char *argv[] = {prog, "guard-marker", NULL};
	struct crun__agent_spec spec;
	pid_t pid, gc[2] = {0, 0}, worker[2] = {0, 0};
	char *text = NULL;
	int status;

	(void)state;
	helper(prog, sizeof(prog), "crun-test-fork");
	snprintf(out, sizeof(out), "%s/guard-out", scratch);
	crun__agent_spec_init(&spec);
	spec.argv = argv;
	spec.argc = 2;
	spec.nproc_per_node = 2;
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			_exit(99);
		dup2(fd, 1);
		dup2(fd, 2);
		_exit(crun__agent_run(&spec));
	}
	for (int t = 0; t < 500 && !(gc[0] && gc[1]); t++) {
		usleep(10000);
		free(text);
		text = slurp(out);
		gc[0] = pid_after(text, "[0]:grandchild ");
		gc[1] = pid_after(text, "[1]:grandchild ");
	}
	free(text);
	assert_true(gc[0] > 0 && gc[1] > 0);
	for (int i = 0; i < 2; i++) {
		char path[64];
		FILE *f;
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)gc[i]);
		f = fopen(path, "r");
		assert_non_null(f);
		assert_int_equal(fscanf(f, "%*d (%*[^)]) %*c %d", &worker[i]), 1);
		fclose(f);
		assert_false(process_gone(worker[i]));
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	for (int i = 0; i < 2; i++) {
		bool gone = wait_gone(gc[i], 3000) && wait_gone(worker[i], 3000);
		if (!gone) {
			kill(-worker[i], SIGKILL);
			fail_msg("worker %d or its grandchild outlived the agent", i);
		}
	}
	/* The guard says so after killing: wait for its line too. */
	for (int t = 0; t < 300; t++) {
		text = slurp(out);
		if (strstr(text,
			   "crun: agent exited unexpectedly; killed 2 worker process groups\n"))
			break;
		free(text);
		text = NULL;
		usleep(10000);
	}
	assert_non_null(text);
	free(text);
}

static int setup(void **state)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *tmp = getenv("TMPDIR");

	(void)state;
	if (n <= 0)
		return -1;
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	snprintf(helper_dir, sizeof(helper_dir), "%s", exe);
	snprintf(scratch, sizeof(scratch), "%s/test-agent-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	return mkdtemp(scratch) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
	return system(cmd) == 0 ? 0 : -1;
}

/* A child in a process group of its own that sleeps until killed. */
static pid_t sleeper(void)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		setpgid(0, 0);
		for (;;)
			pause();
	}
	setpgid(pid, pid);
	return pid;
}

/* True when pid has ended within ms (then it is reaped). */
static bool ended_within(pid_t pid, int ms, int *status)
{
	for (int i = 0; i < ms / 10; i++) {
		if (waitpid(pid, status, WNOHANG) == pid)
			return true;
		usleep(10000);
	}
	return false;
}

/* The guard as a watchdog: it kills the watched groups when crun has not
 * said "alive" within the window, never while it keeps saying it, and not
 * once the watchdog is off. */
static void test_guard_watchdog(void **state)
{
	struct reaper r;
	pid_t a, b;
	int status;

	(void)state;
	assert_int_equal(agent_reaper_start(&r, 4, NULL), 0);
	a = sleeper();
	agent_reaper_watch(&r, a);
	for (int i = 0; i < 10; i++) {
		agent_reaper_alive(&r, 150);
		usleep(30000);
	}
	assert_false(ended_within(a, 50, &status));
	/* Silent for the window: killed. */
	assert_true(ended_within(a, 2000, &status));
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* Off: a new group outlives a silence. */
	b = sleeper();
	agent_reaper_watch(&r, b);
	agent_reaper_alive(&r, 100);
	agent_reaper_alive(&r, 0);
	assert_false(ended_within(b, 300, &status));
	agent_reaper_forget(&r, b);
	agent_reaper_stop(&r);
	kill(b, SIGKILL);
	assert_true(ended_within(b, 2000, &status));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_guard_watchdog),
		cmocka_unit_test(test_logdir),
		cmocka_unit_test(test_error_file_record),
		cmocka_unit_test(test_error_file_strings),
		cmocka_unit_test(test_error_file_bad),
		cmocka_unit_test(test_error_file_large),
		cmocka_unit_test(test_error_file_read),
		cmocka_unit_test(test_error_file_write),
		cmocka_unit_test(test_summary_error_file),
		cmocka_unit_test(test_prefix_render),
		cmocka_unit_test(test_describe_exit),
		cmocka_unit_test(test_mkdir_p),
		cmocka_unit_test(test_run_env),
		cmocka_unit_test(test_run_restarts),
		cmocka_unit_test(test_run_signal_failure),
		cmocka_unit_test(test_run_exec_errors),
		cmocka_unit_test(test_run_stuck_worker),
		cmocka_unit_test(test_run_escaped_pipe),
		cmocka_unit_test(test_run_guard),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}

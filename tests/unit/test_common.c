/* Common helpers: number, duration, size and endpoint parsers, secret files,
 * loopback detection, the environment table and log lines. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <ftw.h>
#include <stdbool.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fnv.h"
#include "common/fs.h"
#include "common/htable.h"
#include "common/list.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/ratelimit.h"
#include "common/suggest.h"
#include "common/util.h"
#include "common/yaml.h"

static void test_format_endpoint(void **state)
{
	char out[64];

	(void)state;
	crun__format_endpoint(out, sizeof(out), "10.0.0.1", 29400);
	assert_string_equal(out, "10.0.0.1:29400");
	crun__format_endpoint(out, sizeof(out), "node0", 1);
	assert_string_equal(out, "node0:1");
	crun__format_endpoint(out, sizeof(out), "::1", 29400);
	assert_string_equal(out, "[::1]:29400");
	crun__format_endpoint(out, 8, "10.0.0.1", 29400);
	assert_string_equal(out, "10.0.0.");
}

static void test_parse_int64(void **state)
{
	char err[256];
	int64_t v = 0;
	static const char *bad[] = {"",
				    " 1",
				    "1 ",
				    "1x",
				    "0x10",
				    "abc",
				    "--1",
				    "1.0",
				    "9223372036854775808",
				    "-9223372036854775809"};

	(void)state;
	assert_int_equal(crun__parse_int64("42", 0, 100, &v, err, sizeof(err)), 0);
	assert_true(v == 42);
	assert_int_equal(crun__parse_int64("-7", -10, 10, &v, err, sizeof(err)), 0);
	assert_true(v == -7);
	assert_int_equal(crun__parse_int64("0", 0, 0, &v, err, sizeof(err)), 0);
	assert_true(v == 0);
	assert_int_equal(crun__parse_int64("9223372036854775807", INT64_MIN, INT64_MAX, &v, err,
					   sizeof(err)),
			 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(crun__parse_int64("-9223372036854775808", INT64_MIN, INT64_MAX, &v, err,
					   sizeof(err)),
			 0);
	assert_true(v == INT64_MIN);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 123;
		err[0] = '\0';
		if (crun__parse_int64(bad[i], INT64_MIN, INT64_MAX, &v, err, sizeof(err)) !=
		    -EINVAL)
			fail_msg("'%s' was accepted as %lld", bad[i], (long long)v);
		assert_true(v == 123);
		assert_true(err[0] != '\0');
	}
	assert_int_equal(crun__parse_int64(NULL, 0, 1, &v, err, sizeof(err)), -EINVAL);
	/* Out of range: the reason names the range. */
	assert_int_equal(crun__parse_int64("5", 0, 4, &v, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "[0, 4]"));
	assert_int_equal(crun__parse_int64("-1", 0, 4, &v, err, sizeof(err)), -EINVAL);
	/* A NULL error buffer is fine. */
	assert_int_equal(crun__parse_int64("x", 0, 4, &v, NULL, 0), -EINVAL);
}

static void test_parse_duration(void **state)
{
	static const struct {
		const char *s;
		int64_t ms;
	} good[] = {
		{"30", 30000},	  {"0", 0},	   {"2.5s", 2500},  {"500ms", 500},
		{"1m", 60000},	  {"1min", 60000}, {"1h", 3600000}, {".5", 500},
		{"0.25m", 15000}, {"10s", 10000},  {"1.5ms", 2},    {"007", 7000},
	};
	static const char *bad[] = {
		"",
		"-1",
		"+1",
		" 1",
		"1 ",
		"1x",
		"ms",
		"s",
		"1e3",
		"inf",
		"nan",
		"0x10",
		"1..5",
		"1.5.2",
		"1d",
		"1 s",
		"1S",
		".",
		"10000000000000h",
	};
	char err[256];
	int64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = -1;
		if (crun__parse_duration_ms(good[i].s, &v, err, sizeof(err)) != 0)
			fail_msg("'%s' refused: %s", good[i].s, err);
		if (v != good[i].ms)
			fail_msg("'%s' gave %lld ms, want %lld", good[i].s, (long long)v,
				 (long long)good[i].ms);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = -1;
		err[0] = '\0';
		if (crun__parse_duration_ms(bad[i], &v, err, sizeof(err)) != -EINVAL)
			fail_msg("'%s' was accepted as %lld ms", bad[i], (long long)v);
		assert_true(v == -1);
		assert_non_null(strstr(err, "duration"));
	}
	assert_int_equal(crun__parse_duration_ms(NULL, &v, err, sizeof(err)), -EINVAL);
	assert_int_equal(crun__parse_duration_ms("1x", &v, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'1x'"));
}

static void test_parse_size(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{"4096", 4096},
		{"0", 0},
		{"12B", 12},
		{"64K", 64 << 10},
		{"64KiB", 64 << 10},
		{"64k", 64 << 10},
		{"16M", 16 << 20},
		{"16MiB", 16 << 20},
		{"1G", 1ull << 30},
		{"3GiB", 3ull << 30},
		{"18446744073709551615", UINT64_MAX},
	};
	static const char *bad[] = {
		"",
		"-1",
		"+1",
		"1T",
		"1.5M",
		"16 M",
		" 16",
		"16 ",
		"K",
		"0x10",
		"16m",
		"16MB",
		"18446744073709551616",
		"17179869184G",
	};
	char err[256];
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 1;
		if (crun__parse_size(good[i].s, &v, err, sizeof(err)) != 0)
			fail_msg("'%s' refused: %s", good[i].s, err);
		if (v != good[i].v)
			fail_msg("'%s' gave %llu", good[i].s, (unsigned long long)v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 1;
		err[0] = '\0';
		if (crun__parse_size(bad[i], &v, err, sizeof(err)) != -EINVAL)
			fail_msg("'%s' was accepted as %llu", bad[i], (unsigned long long)v);
		assert_true(v == 1);
		assert_non_null(strstr(err, "size"));
	}
	assert_int_equal(crun__parse_size(NULL, &v, err, sizeof(err)), -EINVAL);
}

static void test_parse_endpoint(void **state)
{
	static const struct {
		const char *s, *host;
		int port;
	} good[] = {
		{"host:29500", "host", 29500},
		{"node-1.example.com:1", "node-1.example.com", 1},
		{"127.0.0.1:0", "127.0.0.1", 0},
		{"h:65535", "h", 65535},
		{"[::1]:29400", "::1", 29400},
		{"[fe80::1%eth0]:80", "fe80::1%eth0", 80},
		{"host", "host", 29400},
		{"::1", "::1", 29400},
		{"fe80::2:3", "fe80::2:3", 29400},
		{"[::1]", "::1", 29400},
	};
	static const char *bad[] = {
		"",
		"host:",
		"host:65536",
		"host:-1",
		"host:+80",
		"host:80x",
		"host: 80",
		"host:0x50",
		":80",
		"[]:80",
		"[::1",
		"[::1]x",
		"[::1]:",
		"[::1]:99999",
		"ho]st:80",
		"[a]b]:1",
		"]:1",
		"[::1]:-1",
		"host:99999999999999999999",
	};
	char host[64], err[256];
	int port;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		port = -1;
		if (crun__parse_endpoint(good[i].s, 29400, host, sizeof(host), &port, err,
					 sizeof(err)) != 0)
			fail_msg("'%s' refused: %s", good[i].s, err);
		assert_string_equal(host, good[i].host);
		assert_int_equal(port, good[i].port);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		port = -1;
		err[0] = '\0';
		if (crun__parse_endpoint(bad[i], 29400, host, sizeof(host), &port, err,
					 sizeof(err)) != -EINVAL)
			fail_msg("'%s' was accepted as '%s' port %d", bad[i], host, port);
		assert_int_equal(port, -1);
		assert_true(err[0] != '\0');
	}
	assert_int_equal(crun__parse_endpoint(NULL, 1, host, sizeof(host), &port, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(
		crun__parse_endpoint("host:99999", 1, host, sizeof(host), &port, err, sizeof(err)),
		-EINVAL);
	assert_non_null(strstr(err, "port"));
	/* The host buffer's size is respected: "host" needs 5 bytes. */
	assert_int_equal(crun__parse_endpoint("host:1", 1, host, 5, &port, err, sizeof(err)), 0);
	assert_string_equal(host, "host");
	assert_int_equal(crun__parse_endpoint("hosts:1", 1, host, 5, &port, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(crun__parse_endpoint("[::1]:1", 1, host, 3, &port, err, sizeof(err)),
			 -EINVAL);
}

struct tmpdir {
	char path[64];
};

static int tmpdir_setup(void **state)
{
	struct tmpdir *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	snprintf(t->path, sizeof(t->path), "/tmp/crun-test-common-XXXXXX");
	if (!mkdtemp(t->path)) {
		free(t);
		return -1;
	}
	*state = t;
	return 0;
}

static int tmpdir_teardown(void **state)
{
	struct tmpdir *t = *state;
	static const char *names[] = {"tok", "empty", "blank", "long", "exact"};
	char p[128];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", t->path, names[i]);
		unlink(p);
	}
	rmdir(t->path);
	free(t);
	return 0;
}

static const char *write_file(struct tmpdir *t, const char *name, const void *data, size_t len)
{
	static char p[128];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", t->path, name);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(crun__write_all(fd, data, len), 0);
	close(fd);
	return p;
}

static void test_read_secret_file(void **state)
{
	struct tmpdir *t = *state;
	char err[256], *out = NULL, path[160];
	size_t len = 0;
	const char *p;

	p = write_file(t, "tok", "s3cret\n", 7);
	assert_int_equal(crun__read_secret_file(p, 64, &out, &len, err, sizeof(err)), 0);
	assert_string_equal(out, "s3cret");
	assert_int_equal(len, 6);
	free(out);

	/* Only trailing newlines and spaces go; inner bytes, NUL included, stay. */
	p = write_file(t, "tok", "a b\n\0c \r\n \n", 11);
	assert_int_equal(crun__read_secret_file(p, 64, &out, &len, err, sizeof(err)), 0);
	assert_int_equal(len, 6);
	assert_memory_equal(out, "a b\n\0c", 7);
	free(out);

	p = write_file(t, "exact", "12345678", 8);
	assert_int_equal(crun__read_secret_file(p, 8, &out, &len, err, sizeof(err)), 0);
	assert_string_equal(out, "12345678");
	free(out);

	out = NULL;
	p = write_file(t, "long", "123456789", 9);
	assert_int_equal(crun__read_secret_file(p, 8, &out, &len, err, sizeof(err)), -EFBIG);
	assert_null(out);
	assert_non_null(strstr(err, "longer than 8 bytes"));

	p = write_file(t, "empty", "", 0);
	assert_int_equal(crun__read_secret_file(p, 64, &out, &len, err, sizeof(err)), -EINVAL);
	assert_null(out);
	assert_non_null(strstr(err, "empty"));

	p = write_file(t, "blank", "\n  \n", 4);
	assert_int_equal(crun__read_secret_file(p, 64, &out, &len, err, sizeof(err)), -EINVAL);
	assert_null(out);

	snprintf(path, sizeof(path), "%s/missing", t->path);
	assert_int_equal(crun__read_secret_file(path, 64, &out, &len, err, sizeof(err)), -ENOENT);
	assert_null(out);
	assert_non_null(strstr(err, path));

	/* A directory is not a secret. */
	assert_true(crun__read_secret_file(t->path, 64, &out, &len, err, sizeof(err)) < 0);
	assert_null(out);
}

static void test_loopback(void **state)
{
	static const char *yes[] = {"127.0.0.1",       "127.1.2.3", "127.255.255.255", "::1",
				    "0:0:0:0:0:0:0:1", "localhost", "::ffff:127.0.0.1"};
	static const char *no[] = {"127.example.com",
				   "127.",
				   "10.0.0.1",
				   "0.0.0.0",
				   "::",
				   "",
				   "128.0.0.1",
				   "1.127.0.0",
				   "localhost.evil.com",
				   "::2",
				   "::ffff:10.0.0.1",
				   "fe80::1",
				   "host"};

	(void)state;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!crun__addr_is_loopback(yes[i]))
			fail_msg("'%s' is loopback", yes[i]);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (crun__addr_is_loopback(no[i]))
			fail_msg("'%s' is not loopback", no[i]);
	assert_false(crun__addr_is_loopback(NULL));
}

static void test_env(void **state)
{
	const struct crun__env_param *p;
	size_t n = 0;

	(void)state;
	unsetenv("CRUN_STORE");
	assert_string_equal(crun__env_get("CRUN_STORE"), "127.0.0.1:29400");
	setenv("CRUN_STORE", "10.1.1.1:1234", 1);
	assert_string_equal(crun__env_get("CRUN_STORE"), "10.1.1.1:1234");
	/* Set but empty counts as unset. */
	setenv("CRUN_STORE", "", 1);
	assert_string_equal(crun__env_get("CRUN_STORE"), "127.0.0.1:29400");
	unsetenv("CRUN_STORE");
	unsetenv("CRUN_TOKEN");
	assert_null(crun__env_get("CRUN_TOKEN"));
	unsetenv("CRUN_RUN_ID");
	assert_string_equal(crun__env_get("CRUN_RUN_ID"), "default");
	unsetenv("CRUN_NO_SUCH_TUNABLE");
	assert_null(crun__env_get("CRUN_NO_SUCH_TUNABLE"));

	p = crun__env_params(&n);
	assert_true(n > 0);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(strncmp(p[i].name, "CRUN_", 5), 0);
		assert_non_null(p[i].meaning);
		assert_true(p[i].meaning[0] != '\0');
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(p[i].name, p[j].name);
	}
}

/* Runs fn with stderr redirected into a pipe and returns what it wrote. */
static size_t capture_stderr(void (*fn)(void), char *buf, size_t cap)
{
	int fds[2], saved;
	ssize_t r;
	size_t len = 0;

	assert_int_equal(pipe(fds), 0);
	saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	assert_true(dup2(fds[1], STDERR_FILENO) >= 0);
	close(fds[1]);
	fn();
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	while (len < cap && (r = read(fds[0], buf + len, cap - len)) > 0)
		len += (size_t)r;
	close(fds[0]);
	return len;
}

static void log_levels(void)
{
	crun__log_init("/usr/bin/crun-x", CRUN_LOG_INFO);
	crun__error("cannot open '%s': %s", "f", "no such file");
	crun__warn("careful");
	crun__info("hello %d", 1);
	crun__debug("not shown");
}

static void log_long(void)
{
	char big[6000];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	crun__log_init("p", CRUN_LOG_DEBUG);
	crun__debug("%s", big);
}

static void test_log(void **state)
{
	char buf[8192];
	size_t n;

	(void)state;
	n = capture_stderr(log_levels, buf, sizeof(buf) - 1);
	buf[n] = '\0';
	assert_string_equal(buf, "crun-x: cannot open 'f': no such file\n"
				 "crun-x: warning: careful\n"
				 "crun-x: hello 1\n");
	assert_string_equal(crun__log_prog(), "crun-x");
	assert_true(crun__log_enabled(CRUN_LOG_INFO));
	assert_false(crun__log_enabled(CRUN_LOG_DEBUG));

	/* An over-long line is cut, still one line ending in a newline. */
	n = capture_stderr(log_long, buf, sizeof(buf) - 1);
	assert_true(n > 1000 && n <= 4096);
	assert_int_equal(buf[n - 1], '\n');
	assert_null(memchr(buf, '\n', n - 1));
	assert_memory_equal(buf, "p: xxx", 6);
	crun__log_set_level(CRUN_LOG_WARN);
	assert_int_equal(crun__log_get_level(), CRUN_LOG_WARN);
}

/* ---- fs, fnv, yaml ---------------------------------------------------- */

/* A scratch directory for the fs and yaml cases, removed with its
 * contents afterwards. */
static char scratch[64];

static int scratch_setup(void **state)
{
	(void)state;
	snprintf(scratch, sizeof(scratch), "/tmp/crun-test-fs-XXXXXX");
	return mkdtemp(scratch) ? 0 : -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		chmod(path, 0700);
	return remove(path);
}

static int scratch_teardown(void **state)
{
	(void)state;
	chmod(scratch, 0700);
	return nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *in_scratch(const char *name)
{
	static char p[4][256];
	static int next;
	char *out = p[next++ % 4];

	snprintf(out, sizeof(p[0]), "%s/%s", scratch, name);
	return out;
}

/* Reads at most len bytes of the file at path; returns how many. */
static size_t read_back(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	assert_true(fd >= 0);
	n = read(fd, buf, len);
	close(fd);
	assert_true(n >= 0);
	return (size_t)n;
}

static bool is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The names in a directory, sorted and joined with spaces. */
static void list_dir(const char *path, char *out, size_t len)
{
	struct dirent **names;
	int n = scandir(path, &names, NULL, alphasort);

	assert_true(n >= 0);
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
			if (out[0])
				strncat(out, " ", len - strlen(out) - 1);
			strncat(out, names[i]->d_name, len - strlen(out) - 1);
		}
		free(names[i]);
	}
	free(names);
}

static void test_mkdir_p(void **state)
{
	mode_t old = umask(022);
	struct stat st;

	(void)state;
	assert_int_equal(crun__mkdir_p(in_scratch("a/b/c"), 0777), 0);
	assert_true(is_dir(in_scratch("a/b/c")));
	assert_int_equal(stat(in_scratch("a/b"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0755);
	/* what exists is fine, also through extra slashes and a link */
	assert_int_equal(crun__mkdir_p(in_scratch("a/b/c"), 0777), 0);
	assert_int_equal(crun__mkdir_p(in_scratch("a//b/c/"), 0777), 0);
	assert_int_equal(crun__mkdir_p(in_scratch("a/b"), 0777), 0);
	assert_int_equal(crun__mkdir_p("/", 0777), 0);
	assert_int_equal(symlink(in_scratch("a"), in_scratch("link")), 0);
	assert_int_equal(crun__mkdir_p(in_scratch("link/b/d"), 0700), 0);
	assert_int_equal(stat(in_scratch("a/b/d"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);

	/* a file in the way, at the end or in the middle */
	assert_int_equal(crun__write_atomic(in_scratch("f"), "x", 1, 0644), 0);
	assert_int_equal(crun__mkdir_p(in_scratch("f"), 0777), -ENOTDIR);
	assert_int_equal(crun__mkdir_p(in_scratch("f/g/h"), 0777), -ENOTDIR);
	assert_int_equal(crun__mkdir_p(in_scratch("a/b/c/f/"), 0777), 0);
	assert_int_equal(crun__mkdir_p("", 0777), -ENOENT);

	if (geteuid() != 0) { /* root may write anywhere */
		assert_int_equal(crun__mkdir_p(in_scratch("ro"), 0555), 0);
		assert_int_equal(crun__mkdir_p(in_scratch("ro/x/y"), 0777), -EACCES);
		assert_false(is_dir(in_scratch("ro/x")));
		assert_int_equal(crun__mkdir_p(in_scratch("ro"), 0777), 0);
	}
	umask(old);
}

/* Empty documents: nothing, only comments, a bare "---"; a null value
 * written out is not empty. One wording for all. */
static void test_yaml_empty(void **state)
{
	static const char *const empty[] = {"", "# a\n\n# b\n", "---\n", "# x\n---\n# y\n",
					    "--- # c\n"};
	static const char *const full[] = {"null\n", "~\n",    "--- null\n",
					   "a: 1\n", "\"\"\n", "x\n"};
	struct crun__yaml_error e;
	struct crun__yaml_doc *doc;
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
		assert_int_equal(crun__yaml_load_string(empty[i], strlen(empty[i]), &doc, &e), 0);
		assert_true(crun__yaml_is_empty(doc));
		crun__yaml_destroy(doc);
	}
	for (size_t i = 0; i < sizeof(full) / sizeof(full[0]); i++) {
		assert_int_equal(crun__yaml_load_string(full[i], strlen(full[i]), &doc, &e), 0);
		assert_false(crun__yaml_is_empty(doc));
		crun__yaml_destroy(doc);
	}
	crun__yaml_format_empty("config", "c.yaml", err, sizeof(err));
	assert_string_equal(
		err, "config 'c.yaml' is empty: it sets nothing (no content, only comments)");
}

static void make_file(const char *path, mode_t mode)
{
	assert_int_equal(crun__write_atomic(path, "#!/bin/sh\n", 10, 0644), 0);
	assert_int_equal(chmod(path, mode), 0);
}

/* PATH as execvp(3) reads it: entries in order, an empty one the current
 * directory, unset the system's default; only regular executable files. */
static void test_path_join_lexical(void **state)
{
	char buf[64];

	(void)state;
	assert_int_equal(
		crun__path_join_lexical("/opt/crun/bin", "../share/crun", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/opt/crun/share/crun");
	assert_int_equal(crun__path_join_lexical("/opt/crun/bin/", "./../sbin", buf, sizeof(buf)),
			 0);
	assert_string_equal(buf, "/opt/crun/sbin");
	assert_int_equal(crun__path_join_lexical("/bin", "../../sbin", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/sbin");
	assert_int_equal(crun__path_join_lexical("/usr/bin", "", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/usr/bin");
	assert_int_equal(crun__path_join_lexical("/usr/bin", "../share/crun", buf, 12),
			 -ENAMETOOLONG);
	assert_int_equal(crun__path_join_lexical("/usr/bin", "x", buf, 8), -ENAMETOOLONG);
}

static void test_path_search(void **state)
{
	char buf[512], path[600], cwd[512], dflt[256], want[600];

	(void)state;
	assert_int_equal(crun__mkdir_p(in_scratch("a/prog"), 0777), 0); /* a directory */
	assert_int_equal(crun__mkdir_p(in_scratch("b"), 0777), 0);
	assert_int_equal(crun__mkdir_p(in_scratch("c"), 0777), 0);
	make_file(in_scratch("b/prog"), 0644); /* not executable */
	make_file(in_scratch("c/prog"), 0755);
	make_file(in_scratch("b/other"), 0755);
	snprintf(path, sizeof(path), "%s/a:%s/b:%s/c", scratch, scratch, scratch);
	assert_int_equal(crun__path_search("prog", path, buf, sizeof(buf)), 0);
	assert_string_equal(buf, in_scratch("c/prog"));
	assert_int_equal(crun__path_search("other", path, buf, sizeof(buf)), 0);
	assert_string_equal(buf, in_scratch("b/other"));
	assert_int_equal(crun__path_search("none", path, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(crun__path_search("", path, buf, sizeof(buf)), -ENOENT);
	/* A name with a slash is itself. */
	assert_int_equal(crun__path_search(in_scratch("c/prog"), "/nonexistent", buf, sizeof(buf)),
			 0);
	assert_string_equal(buf, in_scratch("c/prog"));
	assert_int_equal(crun__path_search(in_scratch("b/prog"), path, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(crun__path_search("prog", path, buf, 4), -ENAMETOOLONG);

	/* Empty entries (leading, inside, trailing, all of "") are the
	 * current directory. */
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(in_scratch("c")), 0);
	assert_int_equal(crun__path_search("prog", "", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "./prog");
	assert_int_equal(crun__path_search("prog", "/nonexistent:", buf, sizeof(buf)), 0);
	assert_int_equal(crun__path_search("prog", ":/nonexistent", buf, sizeof(buf)), 0);
	assert_int_equal(crun__path_search("prog", "/nonexistent::/x", buf, sizeof(buf)), 0);
	assert_int_equal(crun__path_search("prog", "/nonexistent", buf, sizeof(buf)), -ENOENT);
	assert_int_equal(chdir(cwd), 0);

	/* Unset: the system's default, which has sh. */
	assert_true(confstr(_CS_PATH, dflt, sizeof(dflt)) > 0);
	assert_int_equal(crun__path_search("sh", NULL, buf, sizeof(buf)), 0);
	assert_int_equal(crun__path_search("sh", dflt, want, sizeof(want)), 0);
	assert_string_equal(buf, want);
}

/* The running program's directory: the test binary's own. */
static void test_self_dir(void **state)
{
	char dir[512], exe[512], small[4];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	(void)state;
	assert_true(n > 0);
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	assert_int_equal(crun__self_dir(dir, sizeof(dir)), 0);
	assert_string_equal(dir, exe);
	/* Too small: an error, never a cut path. */
	assert_int_equal(crun__self_dir(small, sizeof(small)), -ENAMETOOLONG);
	assert_int_equal(crun__self_dir(dir, strlen(exe) + 1), -ENAMETOOLONG);
}

static void test_write_atomic(void **state)
{
	struct crun__atomic_file f;
	mode_t old = umask(022);
	char buf[256], names[256];
	struct stat st;

	(void)state;
	assert_int_equal(crun__write_atomic(in_scratch("w"), "hello\n", 6, 0640), 0);
	assert_int_equal(read_back(in_scratch("w"), buf, sizeof(buf)), 6);
	assert_memory_equal(buf, "hello\n", 6);
	assert_int_equal(stat(in_scratch("w"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
	/* replaced whole, shorter; the umask applies */
	assert_int_equal(crun__write_atomic(in_scratch("w"), "hi", 2, 0666), 0);
	assert_int_equal(read_back(in_scratch("w"), buf, sizeof(buf)), 2);
	assert_memory_equal(buf, "hi", 2);
	assert_int_equal(crun__write_atomic(in_scratch("empty"), "", 0, 0666), 0);
	assert_int_equal(stat(in_scratch("empty"), &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	list_dir(scratch, names, sizeof(names));
	assert_string_equal(names, "empty w");

	/* streamed in pieces; an abort leaves the old file alone */
	assert_int_equal(crun__atomic_open(&f, in_scratch("w"), 0666), 0);
	assert_int_equal(crun__atomic_write(&f, "new ", 4), 0);
	assert_int_equal(crun__atomic_write(&f, "text", 4), 0);
	crun__atomic_abort(&f);
	assert_int_equal(read_back(in_scratch("w"), buf, sizeof(buf)), 2);
	assert_int_equal(crun__atomic_open(&f, in_scratch("w"), 0666), 0);
	assert_int_equal(crun__atomic_write(&f, "new ", 4), 0);
	assert_int_equal(crun__atomic_write(&f, "text", 4), 0);
	assert_int_equal(crun__atomic_commit(&f), 0);
	assert_int_equal(read_back(in_scratch("w"), buf, sizeof(buf)), 8);
	assert_memory_equal(buf, "new text", 8);
	list_dir(scratch, names, sizeof(names));
	assert_string_equal(names, "empty w");

	/* failures leave no temporary file: no directory, a file for a
	 * directory, a directory where the file should go (the rename
	 * fails after the write) */
	assert_int_equal(crun__write_atomic(in_scratch("none/w"), "x", 1, 0666), -ENOENT);
	assert_int_equal(crun__write_atomic(in_scratch("w/x"), "x", 1, 0666), -ENOTDIR);
	assert_int_equal(crun__mkdir_p(in_scratch("d"), 0777), 0);
	assert_int_equal(crun__write_atomic(in_scratch("d"), "x", 1, 0666), -EISDIR);
	list_dir(scratch, names, sizeof(names));
	assert_string_equal(names, "d empty w");
	if (geteuid() != 0) {
		assert_int_equal(chmod(in_scratch("d"), 0555), 0);
		assert_int_equal(crun__write_atomic(in_scratch("d/x"), "x", 1, 0666), -EACCES);
		list_dir(in_scratch("d"), names, sizeof(names));
		assert_string_equal(names, "");
	}
	umask(old);
}

static void test_fnv(void **state)
{
	static const struct {
		const char *in;
		uint64_t sum;
		uint32_t sum32;
	} vectors[] = {
		{"", 0xcbf29ce484222325ULL, 0x811c9dc5u},
		{"a", 0xaf63dc4c8601ec8cULL, 0xe40c292cu},
		{"b", 0xaf63df4c8601f1a5ULL, 0xe70c2de5u},
		{"foobar", 0x85944171f73967e8ULL, 0xbf9cf968u},
		{"chongo was here!\n", 0x46810940eff5f915ULL, 0xd49930d5u},
	};

	(void)state;
	assert_true(CRUN__FNV1A_INIT == 0xcbf29ce484222325ULL);
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(vectors); i++) {
		const char *s = vectors[i].in;
		size_t n = strlen(s);

		assert_true(crun__fnv1a(CRUN__FNV1A_INIT, s, n) == vectors[i].sum);
		/* in two pieces, the same */
		assert_true(crun__fnv1a(crun__fnv1a(CRUN__FNV1A_INIT, s, n / 2), s + n / 2,
					n - n / 2) == vectors[i].sum);
		assert_true(crun__fnv1a32(CRUN__FNV1A32_INIT, s, n) == vectors[i].sum32);
	}
}

static struct crun__yaml_doc *yaml(const char *text)
{
	struct crun__yaml_error e;
	struct crun__yaml_doc *doc = NULL;
	int rc = crun__yaml_load_string(text, strlen(text), &doc, &e);

	if (rc)
		fail_msg("'%s': %d, line %d column %d: %s", text, rc, e.line, e.column, e.msg);
	return doc;
}

/* The scalars of "k: VALUE": how the one value is resolved. */
static void test_yaml_scalars(void **state)
{
	static const struct {
		const char *doc;
		enum crun__yaml_kind kind;
		const char *text;
		bool quoted;
	} cases[] = {
		{"k:", CRUN__YAML_NULL, "", false},
		{"k: ~", CRUN__YAML_NULL, "~", false},
		{"k: null", CRUN__YAML_NULL, "null", false},
		{"k: Null", CRUN__YAML_NULL, "Null", false},
		{"k: NULL", CRUN__YAML_NULL, "NULL", false},
		{"k: nULL", CRUN__YAML_SCALAR, "nULL", false},
		{"k: nil", CRUN__YAML_SCALAR, "nil", false},
		{"k: 'null'", CRUN__YAML_SCALAR, "null", true},
		{"k: \"~\"", CRUN__YAML_SCALAR, "~", true},
		{"k: ''", CRUN__YAML_SCALAR, "", true},
		{"k: !!str null", CRUN__YAML_SCALAR, "null", false},
		/* booleans and numbers stay text as written */
		{"k: true", CRUN__YAML_SCALAR, "true", false},
		{"k: True", CRUN__YAML_SCALAR, "True", false},
		{"k: FALSE", CRUN__YAML_SCALAR, "FALSE", false},
		{"k: yes", CRUN__YAML_SCALAR, "yes", false},
		{"k: 010", CRUN__YAML_SCALAR, "010", false},
		{"k: 0x1F", CRUN__YAML_SCALAR, "0x1F", false},
		{"k: -2.5e3", CRUN__YAML_SCALAR, "-2.5e3", false},
		{"k: .inf", CRUN__YAML_SCALAR, ".inf", false},
		/* quotes, escapes, blocks, comments */
		{"k: \"a\\tb\"", CRUN__YAML_SCALAR, "a\tb", true},
		{"k: 'it''s'", CRUN__YAML_SCALAR, "it's", true},
		{"k: a b   # note", CRUN__YAML_SCALAR, "a b", false},
		{"k: a#b", CRUN__YAML_SCALAR, "a#b", false},
		{"k: |\n  one\n  two\n", CRUN__YAML_SCALAR, "one\ntwo\n", true},
		{"k: >-\n  one\n  two\n", CRUN__YAML_SCALAR, "one two", true},
		{"k: /tmp/with space", CRUN__YAML_SCALAR, "/tmp/with space", false},
	};

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(cases); i++) {
		struct crun__yaml_doc *doc = yaml(cases[i].doc);
		const struct crun__yaml_node *root = crun__yaml_root(doc), *v;

		assert_int_equal(root->kind, CRUN__YAML_MAPPING);
		assert_int_equal(root->n, 1);
		assert_string_equal(root->items[0]->text, "k");
		v = root->items[1];
		if (v->kind != cases[i].kind || strcmp(v->text, cases[i].text) ||
		    v->quoted != cases[i].quoted)
			fail_msg("'%s': kind %d text '%s' quoted %d", cases[i].doc, v->kind,
				 v->text, v->quoted);
		assert_int_equal(v->line, 1);
		assert_int_equal(v->column, cases[i].doc[2] ? 4 : 3);
		crun__yaml_destroy(doc);
	}
}

/* Documents as a whole: what the root is, and nesting with places. */
static void test_yaml_tree(void **state)
{
	static const char *empty[] = {"",      "\n\n",	  "# only a comment\n",
				      "---\n", "--- ~\n", "Null\n"};
	const struct crun__yaml_node *root, *a, *list, *m;
	struct crun__yaml_doc *doc;

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(empty); i++) {
		doc = yaml(empty[i]);
		if (crun__yaml_root(doc)->kind != CRUN__YAML_NULL)
			fail_msg("'%s' is not an empty document", empty[i]);
		crun__yaml_destroy(doc);
	}
	crun__yaml_destroy(NULL);

	doc = yaml("# top\n"
		   "a:\n"
		   "  b: [1, {c: d}]\n"
		   "  e: &x v\n"
		   "  f: *x\n"
		   "  e: again\n"
		   "g:\n"
		   "  - x\n"
		   "  -\n"
		   "? [k]\n"
		   ": v\n");
	root = crun__yaml_root(doc);
	assert_int_equal(root->kind, CRUN__YAML_MAPPING);
	assert_int_equal(root->n, 3);
	assert_int_equal(root->line, 2);
	assert_int_equal(root->column, 1);

	a = root->items[1];
	assert_int_equal(a->kind, CRUN__YAML_MAPPING);
	assert_int_equal(a->n, 4); /* a key given twice stays twice */
	assert_int_equal(a->line, 3);
	assert_int_equal(a->column, 3);
	list = a->items[1];
	assert_int_equal(list->kind, CRUN__YAML_SEQUENCE);
	assert_int_equal(list->n, 2);
	assert_int_equal(list->line, 3);
	assert_int_equal(list->column, 6);
	assert_string_equal(list->items[0]->text, "1");
	m = list->items[1];
	assert_int_equal(m->kind, CRUN__YAML_MAPPING);
	assert_int_equal(m->column, 10);
	assert_string_equal(m->items[0]->text, "c");
	assert_string_equal(m->items[1]->text, "d");
	assert_int_equal(m->items[1]->column, 14);
	/* an alias points at its anchored node */
	assert_int_equal(a->items[5]->kind, CRUN__YAML_ALIAS);
	assert_string_equal(a->items[5]->text, "x");
	assert_ptr_equal(crun__yaml_deref(a->items[5]), a->items[3]);
	assert_ptr_equal(crun__yaml_deref(a->items[3]), a->items[3]);
	assert_int_equal(a->items[5]->line, 5);
	assert_string_equal(a->items[6]->text, "e");
	assert_string_equal(a->items[7]->text, "again");

	list = root->items[3];
	assert_int_equal(list->kind, CRUN__YAML_SEQUENCE);
	assert_int_equal(list->n, 2);
	assert_int_equal(list->items[1]->kind, CRUN__YAML_NULL);
	/* keys may be of any kind */
	assert_int_equal(root->items[4]->kind, CRUN__YAML_SEQUENCE);
	assert_int_equal(root->items[4]->line, 10);
	assert_string_equal(root->items[5]->text, "v");
	crun__yaml_destroy(doc);
}

/* What is not loaded, and where the error is. */
static void test_yaml_errors(void **state)
{
	static const struct {
		const char *doc;
		int line, column;
		const char *msg;
	} cases[] = {
		{"a: b: c\n", 1, 5, "mapping values are not allowed in this context"},
		{"a: [1\n", 2, 1, "did not find expected ',' or ']' while parsing a flow sequence"},
		{"a: 1\n b: 2\n", 2, 3, "mapping values are not allowed in this context"},
		{"a: 1\n---\nb: 2\n", 2, 1, "only one YAML document is allowed"},
		{"--- a\n--- b\n", 2, 1, "only one YAML document is allowed"},
		{"a: *nope\n", 1, 4, "undefined alias 'nope'"},
		{"a: &x [*x]\n", 1, 8, "undefined alias 'x'"},
		{"a: \"open\n", 2, 1,
		 "found unexpected end of stream while scanning a quoted scalar"},
		{"a:\tb\n\t- c\n", 2, 1,
		 "found a tab character that violates indentation while scanning a plain scalar"},
	};
	struct crun__yaml_error e;
	struct crun__yaml_doc *doc;
	char deep[2 * CRUN__YAML_MAX_DEPTH + 3];

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(cases); i++) {
		doc = NULL;
		assert_int_equal(
			crun__yaml_load_string(cases[i].doc, strlen(cases[i].doc), &doc, &e),
			-EINVAL);
		assert_null(doc);
		if (e.line != cases[i].line || e.column != cases[i].column ||
		    strcmp(e.msg, cases[i].msg))
			fail_msg("'%s': line %d column %d: %s", cases[i].doc, e.line, e.column,
				 e.msg);
	}

	/* nesting as deep as allowed, and one deeper */
	memset(deep, 0, sizeof(deep));
	memset(deep, '[', CRUN__YAML_MAX_DEPTH);
	memset(deep + CRUN__YAML_MAX_DEPTH, ']', CRUN__YAML_MAX_DEPTH);
	doc = yaml(deep);
	crun__yaml_destroy(doc);
	memset(deep, '[', CRUN__YAML_MAX_DEPTH + 1);
	memset(deep + CRUN__YAML_MAX_DEPTH + 1, ']', CRUN__YAML_MAX_DEPTH + 1);
	assert_int_equal(crun__yaml_load_string(deep, strlen(deep), &doc, &e), -EINVAL);
	assert_int_equal(e.line, 1);
	assert_int_equal(e.column, CRUN__YAML_MAX_DEPTH + 1);
	assert_string_equal(e.msg, "collections nest deeper than 64 levels");
}

static void test_yaml_files(void **state)
{
	struct crun__yaml_error e;
	struct crun__yaml_doc *doc = NULL;
	char err[512], want[512];
	const char *p = in_scratch("c.yaml");

	(void)state;
	assert_int_equal(crun__write_atomic(p, "a: 1\nb: [x, y]\n", 15, 0644), 0);
	assert_int_equal(crun__yaml_load_file(p, 15, &doc, &e), 0);
	assert_int_equal(crun__yaml_root(doc)->n, 2);
	crun__yaml_destroy(doc);
	assert_int_equal(crun__yaml_load_file(p, SIZE_MAX, &doc, &e), 0);
	crun__yaml_destroy(doc);
	assert_int_equal(crun__yaml_load_file(p, 14, &doc, &e), -EFBIG);
	assert_string_equal(e.msg, "larger than 14 bytes");
	assert_int_equal(e.line, 0);

	assert_int_equal(crun__yaml_load_file(in_scratch("none.yaml"), 100, &doc, &e), -ENOENT);
	crun__yaml_format_error(&e, "config", "x.yaml", err, sizeof(err));
	assert_string_equal(err, "cannot read config 'x.yaml': No such file or directory");
	assert_int_equal(crun__yaml_load_file(scratch, 100, &doc, &e), -EISDIR);
	assert_string_equal(e.msg, "is a directory");
	crun__yaml_format_error(&e, "config", "d", err, sizeof(err));
	assert_string_equal(err, "config 'd' is a directory, not a file");
	assert_int_equal(crun__yaml_load_file("/dev/null", 100, &doc, &e), -EINVAL);
	assert_string_equal(e.msg, "not a regular file");
	if (geteuid() != 0) {
		assert_int_equal(chmod(p, 0), 0);
		assert_int_equal(crun__yaml_load_file(p, 100, &doc, &e), -EACCES);
		assert_string_equal(e.msg, "Permission denied");
	}

	assert_int_equal(crun__write_atomic(p, "a: 1\n\nb: [x\n", 12, 0644), 0);
	assert_int_equal(crun__yaml_load_file(p, 100, &doc, &e), -EINVAL);
	assert_int_equal(e.line, 4);
	crun__yaml_format_error(&e, "config", p, err, sizeof(err));
	snprintf(want, sizeof(want), "config '%s' line 4: did not find expected ',' or ']'", p);
	assert_memory_equal(err, want, strlen(want));
}

/* ---- list and hash table --------------------------------------------------- */

struct litem {
	int v;
	struct crun__list link;
};

static void test_list(void **state)
{
	struct litem items[4] = {{.v = 0}, {.v = 1}, {.v = 2}, {.v = 3}};
	struct crun__list head, *l;
	int seen[4], n = 0;

	(void)state;
	crun__list_init(&head);
	assert_true(crun__list_empty(&head));
	for (int i = 0; i < 4; i++)
		crun__list_add_tail(&head, &items[i].link);
	assert_false(crun__list_empty(&head));
	crun__list_del(&items[1].link);
	assert_true(crun__list_empty(&items[1].link)); /* re-initialised */
	crun__list_del(&items[1].link);		       /* and safe to delete again */
	for (l = head.next; l != &head; l = l->next)
		seen[n++] = crun__container_of(l, struct litem, link)->v;
	assert_int_equal(n, 3);
	assert_int_equal(seen[0], 0);
	assert_int_equal(seen[1], 2);
	assert_int_equal(seen[2], 3);
	assert_ptr_equal(head.prev, &items[3].link);
	while (!crun__list_empty(&head))
		crun__list_del(head.next);
	assert_true(crun__list_empty(&head));
}

static void test_hash_bytes(void **state)
{
	static const struct {
		uint32_t seed;
		const char *s;
		uint32_t want;
	} cases[] = {
		/* FNV-1a's published values with seed 0 */
		{0, "", 0x811c9dc5u},
		{0, "a", 0xe40c292cu},
		{0, "foobar", 0xbf9cf968u},
	};

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(cases); i++)
		assert_int_equal(crun__hash_bytes(cases[i].seed, (const uint8_t *)cases[i].s,
						  strlen(cases[i].s)),
				 cases[i].want);
	/* another seed moves the hash */
	assert_int_not_equal(crun__hash_bytes(1, (const uint8_t *)"a", 1), 0xe40c292cu);
}

struct hitem {
	struct crun__hnode hn;
	char key[16];
	bool freed;
};

static void hitem_key(struct hitem *it, uint32_t seed, int i)
{
	snprintf(it->key, sizeof(it->key), "key%d", i);
	it->hn.key = (const uint8_t *)it->key;
	it->hn.klen = (uint32_t)strlen(it->key);
	it->hn.hash = crun__hash_bytes(seed, it->hn.key, it->hn.klen);
}

static void hitem_mark(struct crun__hnode *n, void *arg)
{
	(*(int *)arg)++;
	((struct hitem *)n)->freed = true;
}

static void test_htable(void **state)
{
	enum { N = 1000 };
	static struct hitem items[N];
	struct crun__htable t;
	struct crun__hnode *n;
	uint32_t seed = 0x5eed;
	size_t b, walked = 0;
	int cleared = 0;

	(void)state;
	crun__htable_init(&t);
	assert_null(crun__htable_find(&t, (const uint8_t *)"key1", 4, 1));
	assert_null(crun__htable_first(&t, &b));
	for (int i = 0; i < N; i++) {
		hitem_key(&items[i], seed, i);
		assert_int_equal(crun__htable_insert(&t, &items[i].hn), 0);
	}
	assert_int_equal(t.count, N);
	assert_true(t.mask + 1 >= N); /* grew: no more nodes than buckets */
	for (int i = 0; i < N; i++) {
		struct hitem probe;

		hitem_key(&probe, seed, i);
		assert_ptr_equal(crun__htable_find(&t, probe.hn.key, probe.hn.klen, probe.hn.hash),
				 &items[i].hn);
	}
	/* same hash, other key; same key, other hash: not found */
	assert_null(crun__htable_find(&t, (const uint8_t *)"nope", 4, items[0].hn.hash));
	assert_null(crun__htable_find(&t, items[0].hn.key, items[0].hn.klen, items[0].hn.hash + 1));
	/* unlink through a link, remove by node */
	assert_non_null(crun__htable_link(&t, items[5].hn.key, items[5].hn.klen, items[5].hn.hash));
	crun__htable_unlink(
		&t, crun__htable_link(&t, items[5].hn.key, items[5].hn.klen, items[5].hn.hash));
	crun__htable_remove(&t, &items[6].hn);
	assert_int_equal(t.count, N - 2);
	assert_null(crun__htable_find(&t, items[5].hn.key, items[5].hn.klen, items[5].hn.hash));
	assert_null(crun__htable_find(&t, items[6].hn.key, items[6].hn.klen, items[6].hn.hash));
	assert_non_null(crun__htable_find(&t, items[7].hn.key, items[7].hn.klen, items[7].hn.hash));
	/* a walk sees every node once */
	for (n = crun__htable_first(&t, &b); n; n = crun__htable_next(&t, n, &b)) {
		assert_false(((struct hitem *)n)->freed);
		((struct hitem *)n)->freed = true;
		walked++;
	}
	assert_int_equal(walked, N - 2);
	for (int i = 0; i < N; i++)
		items[i].freed = false;
	crun__htable_clear(&t, hitem_mark, &cleared);
	assert_int_equal(cleared, N - 2);
	assert_false(items[5].freed);
	assert_true(items[7].freed);
	assert_int_equal(t.count, 0);
	assert_null(t.buckets);
	crun__htable_clear(&t, NULL, NULL); /* an empty table clears too */
}

/* The log rate limit: burst lines per period, then held back and counted
 * until a new period, whose first line gets the count. */
static void test_ratelimit(void **state)
{
	static const struct {
		uint64_t now;
		bool allow;
		uint64_t held; /* when allowed */
	} steps[] = {
		{0, true, 0},	  {1, true, 0},	   {2, true, 0},    /* the burst of 3 */
		{3, false, 0},	  {999, false, 0},		    /* held back */
		{1000, true, 2},  {1000, true, 0}, {1001, true, 0}, /* a new period */
		{1500, false, 0},				    /* held back */
		{5000, true, 1},				    /* long after */
	};
	struct crun__ratelimit rl = {.period_ms = 1000, .burst = 3};

	(void)state;
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		uint64_t held = 99;

		assert_int_equal(crun__ratelimit_allow(&rl, steps[i].now, &held), steps[i].allow);
		if (steps[i].allow)
			assert_int_equal(held, steps[i].held);
	}
}

static void test_edit_distance(void **state)
{
	static const struct {
		const char *a, *b;
		size_t d;
	} cases[] = {
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"join_timeout", "join_timeout", 0},
		{"join_timout", "join_timeout", 1},   /* a deletion */
		{"join_timeoutt", "join_timeout", 1}, /* an insertion */
		{"jion_timeout", "join_timeout", 1},  /* a swap */
		{"read_timeuot", "read_timeout", 1},
		{"kitten", "sitting", 3},
		{"ca", "abc", 3}, /* OSA: no edit of a swapped pair */
		{"timeout", "read_timeout", 5},
	};
	char longw[CRUN__EDIT_MAX_LEN + 2];

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(cases); i++) {
		if (crun__edit_distance(cases[i].a, cases[i].b) != cases[i].d)
			fail_msg("'%s' '%s': %zu, expected %zu", cases[i].a, cases[i].b,
				 crun__edit_distance(cases[i].a, cases[i].b), cases[i].d);
		assert_true(crun__edit_distance(cases[i].b, cases[i].a) == cases[i].d);
	}
	memset(longw, 'a', sizeof(longw) - 1);
	longw[sizeof(longw) - 1] = '\0';
	assert_true(crun__edit_distance(longw, "a") == CRUN__EDIT_FAR);
	longw[CRUN__EDIT_MAX_LEN] = '\0';
	assert_true(crun__edit_distance(longw, "") == CRUN__EDIT_MAX_LEN);
}

/* Well-formed text is copied as it is; a sequence cut by the end is
 * dropped; every other stray byte becomes U+FFFD. */
static void test_utf8(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"", ""},
		{"plain ascii\n\t", "plain ascii\n\t"},
		{"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
		 "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
		{"caf\xc3", "caf"},		      /* cut inside a 2-byte sequence */
		{"euro \xe2\x82", "euro "},	      /* cut inside a 3-byte one */
		{"face \xf0\x9f\x98", "face "},	      /* cut inside a 4-byte one */
		{"caf\xe9 ok", "caf\xef\xbf\xbd ok"}, /* Latin-1 */
		{"\xe9", ""},			      /* a lone lead byte at the end */
		{"a\x80"
		 "b",
		 "a\xef\xbf\xbd"
		 "b"},					  /* a stray continuation byte */
		{"\xc3(x", "\xef\xbf\xbd(x"},		  /* a lead byte without its continuation */
		{"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"}, /* overlong "/" */
		{"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate */
		{"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
		{"\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd"},
	};

	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(cases); i++) {
		char *got = crun__utf8_dup(cases[i].in);

		assert_non_null(got);
		if (strcmp(got, cases[i].out))
			fail_msg("case %zu: got '%s', want '%s'", i, got, cases[i].out);
		assert_true(crun__utf8_valid(got, strlen(got)));
		assert_int_equal(crun__utf8_valid(cases[i].in, strlen(cases[i].in)),
				 !strcmp(cases[i].in, cases[i].out));
		free(got);
	}
}

static void test_closest_word(void **state)
{
	static const char *const keys[] = {"join_timeout", "last_call_timeout", "close_timeout",
					   "read_timeout", "timeout",		"is_host",
					   "rank"};
	size_t n = CRUN_ARRAY_SIZE(keys);

	(void)state;
	assert_string_equal(crun__closest_word("join_timout", keys, n), "join_timeout");
	assert_string_equal(crun__closest_word("lastcall_timeout", keys, n), "last_call_timeout");
	assert_string_equal(crun__closest_word("is-host", keys, n), "is_host");
	assert_string_equal(crun__closest_word("timeuot", keys, n), "timeout");
	assert_string_equal(crun__closest_word("rnak", keys, n), "rank");
	assert_string_equal(crun__closest_word("clad_timeout", keys, n), "read_timeout");
	{
		static const char *const two[] = {"ab", "ba"};

		/* both 1 away: the first wins */
		assert_string_equal(crun__closest_word("aa", two, 2), "ab");
		assert_string_equal(crun__closest_word("bb", two, 2), "ab");
	}
	assert_null(crun__closest_word("bogus", keys, n));
	assert_null(crun__closest_word("heartbeat", keys, n));
	assert_null(crun__closest_word("x", keys, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_endpoint),
		cmocka_unit_test(test_ratelimit),
		cmocka_unit_test(test_parse_int64),
		cmocka_unit_test(test_parse_duration),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_parse_endpoint),
		cmocka_unit_test_setup_teardown(test_read_secret_file, tmpdir_setup,
						tmpdir_teardown),
		cmocka_unit_test(test_loopback),
		cmocka_unit_test(test_env),
		cmocka_unit_test(test_log),
		cmocka_unit_test_setup_teardown(test_mkdir_p, scratch_setup, scratch_teardown),
		cmocka_unit_test_setup_teardown(test_write_atomic, scratch_setup, scratch_teardown),
		cmocka_unit_test_setup_teardown(test_path_search, scratch_setup, scratch_teardown),
		cmocka_unit_test(test_path_join_lexical),
		cmocka_unit_test(test_self_dir),
		cmocka_unit_test(test_yaml_empty),
		cmocka_unit_test(test_fnv),
		cmocka_unit_test(test_yaml_scalars),
		cmocka_unit_test(test_yaml_tree),
		cmocka_unit_test(test_yaml_errors),
		cmocka_unit_test_setup_teardown(test_yaml_files, scratch_setup, scratch_teardown),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_hash_bytes),
		cmocka_unit_test(test_htable),
		cmocka_unit_test(test_edit_distance),
		cmocka_unit_test(test_closest_word),
		cmocka_unit_test(test_utf8),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

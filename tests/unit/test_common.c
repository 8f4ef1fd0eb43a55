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
#include <unistd.h>

#include <cmocka.h>

#include "common/htable.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"

static void test_parse_int64(void **state)
{
	char err[256];
	int64_t v = 0;
	static const char *bad[] = { "", " 1", "1 ", "1x", "0x10", "abc", "--1", "1.0",
				     "9223372036854775808", "-9223372036854775809" };

	(void)state;
	assert_int_equal(crun_parse_int64("42", 0, 100, &v, err, sizeof(err)), 0);
	assert_true(v == 42);
	assert_int_equal(crun_parse_int64("-7", -10, 10, &v, err, sizeof(err)), 0);
	assert_true(v == -7);
	assert_int_equal(crun_parse_int64("0", 0, 0, &v, err, sizeof(err)), 0);
	assert_true(v == 0);
	assert_int_equal(crun_parse_int64("9223372036854775807", INT64_MIN, INT64_MAX, &v, err,
					  sizeof(err)),
			 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(crun_parse_int64("-9223372036854775808", INT64_MIN, INT64_MAX, &v, err,
					  sizeof(err)),
			 0);
	assert_true(v == INT64_MIN);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 123;
		err[0] = '\0';
		if (crun_parse_int64(bad[i], INT64_MIN, INT64_MAX, &v, err, sizeof(err)) != -EINVAL)
			fail_msg("'%s' was accepted as %lld", bad[i], (long long)v);
		assert_true(v == 123);
		assert_true(err[0] != '\0');
	}
	assert_int_equal(crun_parse_int64(NULL, 0, 1, &v, err, sizeof(err)), -EINVAL);
	/* Out of range: the reason names the range. */
	assert_int_equal(crun_parse_int64("5", 0, 4, &v, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "[0, 4]"));
	assert_int_equal(crun_parse_int64("-1", 0, 4, &v, err, sizeof(err)), -EINVAL);
	/* A NULL error buffer is fine. */
	assert_int_equal(crun_parse_int64("x", 0, 4, &v, NULL, 0), -EINVAL);
}

static void test_parse_duration(void **state)
{
	static const struct {
		const char *s;
		int64_t ms;
	} good[] = {
		{ "30", 30000 },  { "0", 0 },	      { "2.5s", 2500 },	 { "500ms", 500 },
		{ "1m", 60000 },  { "1min", 60000 },  { "1h", 3600000 }, { ".5", 500 },
		{ "0.25m", 15000 }, { "10s", 10000 }, { "1.5ms", 2 },	 { "007", 7000 },
	};
	static const char *bad[] = {
		"",    "-1",  "+1",   " 1",   "1 ",  "1x",	"ms",  "s",   "1e3",
		"inf", "nan", "0x10", "1..5", "1.5.2", "1d",	"1 s", "1S",  ".",
		"10000000000000h",
	};
	char err[256];
	int64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = -1;
		if (crun_parse_duration_ms(good[i].s, &v, err, sizeof(err)) != 0)
			fail_msg("'%s' refused: %s", good[i].s, err);
		if (v != good[i].ms)
			fail_msg("'%s' gave %lld ms, want %lld", good[i].s, (long long)v,
				 (long long)good[i].ms);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = -1;
		err[0] = '\0';
		if (crun_parse_duration_ms(bad[i], &v, err, sizeof(err)) != -EINVAL)
			fail_msg("'%s' was accepted as %lld ms", bad[i], (long long)v);
		assert_true(v == -1);
		assert_non_null(strstr(err, "duration"));
	}
	assert_int_equal(crun_parse_duration_ms(NULL, &v, err, sizeof(err)), -EINVAL);
	assert_int_equal(crun_parse_duration_ms("1x", &v, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'1x'"));
}

static void test_parse_size(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "4096", 4096 },	   { "0", 0 },		     { "12B", 12 },
		{ "64K", 64 << 10 },	   { "64KiB", 64 << 10 },    { "64k", 64 << 10 },
		{ "16M", 16 << 20 },	   { "16MiB", 16 << 20 },    { "1G", 1ull << 30 },
		{ "3GiB", 3ull << 30 },	   { "18446744073709551615", UINT64_MAX },
	};
	static const char *bad[] = {
		"", "-1", "+1", "1T", "1.5M", "16 M", " 16", "16 ", "K", "0x10", "16m", "16MB",
		"18446744073709551616", "17179869184G",
	};
	char err[256];
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 1;
		if (crun_parse_size(good[i].s, &v, err, sizeof(err)) != 0)
			fail_msg("'%s' refused: %s", good[i].s, err);
		if (v != good[i].v)
			fail_msg("'%s' gave %llu", good[i].s, (unsigned long long)v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 1;
		err[0] = '\0';
		if (crun_parse_size(bad[i], &v, err, sizeof(err)) != -EINVAL)
			fail_msg("'%s' was accepted as %llu", bad[i], (unsigned long long)v);
		assert_true(v == 1);
		assert_non_null(strstr(err, "size"));
	}
	assert_int_equal(crun_parse_size(NULL, &v, err, sizeof(err)), -EINVAL);
}

static void test_parse_endpoint(void **state)
{
	static const struct {
		const char *s, *host;
		int port;
	} good[] = {
		{ "host:29500", "host", 29500 },
		{ "node-1.example.com:1", "node-1.example.com", 1 },
		{ "127.0.0.1:0", "127.0.0.1", 0 },
		{ "h:65535", "h", 65535 },
		{ "[::1]:29400", "::1", 29400 },
		{ "[fe80::1%eth0]:80", "fe80::1%eth0", 80 },
		{ "host", "host", 29400 },
		{ "::1", "::1", 29400 },
		{ "fe80::2:3", "fe80::2:3", 29400 },
		{ "[::1]", "::1", 29400 },
	};
	static const char *bad[] = {
		"",	     "host:",	     "host:65536",  "host:-1", "host:+80", "host:80x",
		"host: 80",  "host:0x50",    ":80",	    "[]:80",   "[::1",	   "[::1]x",
		"[::1]:",    "[::1]:99999", "ho]st:80",   "[a]b]:1", "]:1",	   "[::1]:-1",
		"host:99999999999999999999",
	};
	char host[64], err[256];
	int port;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		port = -1;
		if (crun_parse_endpoint(good[i].s, 29400, host, sizeof(host), &port, err,
					sizeof(err)) != 0)
			fail_msg("'%s' refused: %s", good[i].s, err);
		assert_string_equal(host, good[i].host);
		assert_int_equal(port, good[i].port);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		port = -1;
		err[0] = '\0';
		if (crun_parse_endpoint(bad[i], 29400, host, sizeof(host), &port, err,
					sizeof(err)) != -EINVAL)
			fail_msg("'%s' was accepted as '%s' port %d", bad[i], host, port);
		assert_int_equal(port, -1);
		assert_true(err[0] != '\0');
	}
	assert_int_equal(crun_parse_endpoint(NULL, 1, host, sizeof(host), &port, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(crun_parse_endpoint("host:99999", 1, host, sizeof(host), &port, err,
					     sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "port"));
	/* The host buffer's size is respected: "host" needs 5 bytes. */
	assert_int_equal(crun_parse_endpoint("host:1", 1, host, 5, &port, err, sizeof(err)), 0);
	assert_string_equal(host, "host");
	assert_int_equal(crun_parse_endpoint("hosts:1", 1, host, 5, &port, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(crun_parse_endpoint("[::1]:1", 1, host, 3, &port, err, sizeof(err)),
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
	static const char *names[] = { "tok", "empty", "blank", "long", "exact" };
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
	assert_int_equal(crun_write_all(fd, data, len), 0);
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
	assert_int_equal(crun_read_secret_file(p, 64, &out, &len, err, sizeof(err)), 0);
	assert_string_equal(out, "s3cret");
	assert_int_equal(len, 6);
	free(out);

	/* Only trailing newlines and spaces go; inner bytes, NUL included, stay. */
	p = write_file(t, "tok", "a b\n\0c \r\n \n", 11);
	assert_int_equal(crun_read_secret_file(p, 64, &out, &len, err, sizeof(err)), 0);
	assert_int_equal(len, 6);
	assert_memory_equal(out, "a b\n\0c", 7);
	free(out);

	p = write_file(t, "exact", "12345678", 8);
	assert_int_equal(crun_read_secret_file(p, 8, &out, &len, err, sizeof(err)), 0);
	assert_string_equal(out, "12345678");
	free(out);

	out = NULL;
	p = write_file(t, "long", "123456789", 9);
	assert_int_equal(crun_read_secret_file(p, 8, &out, &len, err, sizeof(err)), -EFBIG);
	assert_null(out);
	assert_non_null(strstr(err, "longer than 8 bytes"));

	p = write_file(t, "empty", "", 0);
	assert_int_equal(crun_read_secret_file(p, 64, &out, &len, err, sizeof(err)), -EINVAL);
	assert_null(out);
	assert_non_null(strstr(err, "empty"));

	p = write_file(t, "blank", "\n  \n", 4);
	assert_int_equal(crun_read_secret_file(p, 64, &out, &len, err, sizeof(err)), -EINVAL);
	assert_null(out);

	snprintf(path, sizeof(path), "%s/missing", t->path);
	assert_int_equal(crun_read_secret_file(path, 64, &out, &len, err, sizeof(err)), -ENOENT);
	assert_null(out);
	assert_non_null(strstr(err, path));

	/* A directory is not a secret. */
	assert_true(crun_read_secret_file(t->path, 64, &out, &len, err, sizeof(err)) < 0);
	assert_null(out);
}

static void test_loopback(void **state)
{
	static const char *yes[] = { "127.0.0.1", "127.1.2.3", "127.255.255.255", "::1",
				     "0:0:0:0:0:0:0:1", "localhost", "::ffff:127.0.0.1" };
	static const char *no[] = { "127.example.com", "127.", "10.0.0.1", "0.0.0.0", "::",
				    "", "128.0.0.1", "1.127.0.0", "localhost.evil.com",
				    "::2", "::ffff:10.0.0.1", "fe80::1", "host" };

	(void)state;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!crun_addr_is_loopback(yes[i]))
			fail_msg("'%s' is loopback", yes[i]);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (crun_addr_is_loopback(no[i]))
			fail_msg("'%s' is not loopback", no[i]);
	assert_false(crun_addr_is_loopback(NULL));
}

static void test_env(void **state)
{
	const struct crun_env_param *p;
	size_t n = 0;

	(void)state;
	unsetenv("CRUN_STORE");
	assert_string_equal(crun_env_get("CRUN_STORE"), "127.0.0.1:29400");
	setenv("CRUN_STORE", "10.1.1.1:1234", 1);
	assert_string_equal(crun_env_get("CRUN_STORE"), "10.1.1.1:1234");
	/* Set but empty counts as unset. */
	setenv("CRUN_STORE", "", 1);
	assert_string_equal(crun_env_get("CRUN_STORE"), "127.0.0.1:29400");
	unsetenv("CRUN_STORE");
	unsetenv("CRUN_TOKEN");
	assert_null(crun_env_get("CRUN_TOKEN"));
	unsetenv("CRUN_RUN_ID");
	assert_string_equal(crun_env_get("CRUN_RUN_ID"), "default");
	unsetenv("CRUN_NO_SUCH_TUNABLE");
	assert_null(crun_env_get("CRUN_NO_SUCH_TUNABLE"));

	p = crun_env_params(&n);
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
	crun_log_init("/usr/bin/crun-x", CRUN_LOG_INFO);
	crun_error("cannot open '%s': %s", "f", "no such file");
	crun_warn("careful");
	crun_info("hello %d", 1);
	crun_debug("not shown");
}

static void log_long(void)
{
	char big[6000];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	crun_log_init("p", CRUN_LOG_DEBUG);
	crun_debug("%s", big);
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
	assert_string_equal(crun_log_prog(), "crun-x");
	assert_true(crun_log_enabled(CRUN_LOG_INFO));
	assert_false(crun_log_enabled(CRUN_LOG_DEBUG));

	/* An over-long line is cut, still one line ending in a newline. */
	n = capture_stderr(log_long, buf, sizeof(buf) - 1);
	assert_true(n > 1000 && n <= 4096);
	assert_int_equal(buf[n - 1], '\n');
	assert_null(memchr(buf, '\n', n - 1));
	assert_memory_equal(buf, "p: xxx", 6);
	crun_log_set_level(CRUN_LOG_WARN);
	assert_int_equal(crun_log_get_level(), CRUN_LOG_WARN);
}

/* ---- list and hash table --------------------------------------------------- */

struct litem {
	int v;
	struct crun__list link;
};

static void test_list(void **state)
{
	struct litem items[4] = { { .v = 0 }, { .v = 1 }, { .v = 2 }, { .v = 3 } };
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
	crun__list_del(&items[1].link);                /* and safe to delete again */
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
		{ 0, "", 0x811c9dc5u },
		{ 0, "a", 0xe40c292cu },
		{ 0, "foobar", 0xbf9cf968u },
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
	assert_null(crun__htable_find(&t, items[0].hn.key, items[0].hn.klen,
				      items[0].hn.hash + 1));
	/* unlink through a link, remove by node */
	assert_non_null(crun__htable_link(&t, items[5].hn.key, items[5].hn.klen,
					  items[5].hn.hash));
	crun__htable_unlink(&t, crun__htable_link(&t, items[5].hn.key, items[5].hn.klen,
						  items[5].hn.hash));
	crun__htable_remove(&t, &items[6].hn);
	assert_int_equal(t.count, N - 2);
	assert_null(crun__htable_find(&t, items[5].hn.key, items[5].hn.klen, items[5].hn.hash));
	assert_null(crun__htable_find(&t, items[6].hn.key, items[6].hn.klen, items[6].hn.hash));
	assert_non_null(crun__htable_find(&t, items[7].hn.key, items[7].hn.klen,
					  items[7].hn.hash));
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_int64),
		cmocka_unit_test(test_parse_duration),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_parse_endpoint),
		cmocka_unit_test_setup_teardown(test_read_secret_file, tmpdir_setup,
						tmpdir_teardown),
		cmocka_unit_test(test_loopback),
		cmocka_unit_test(test_env),
		cmocka_unit_test(test_log),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_hash_bytes),
		cmocka_unit_test(test_htable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

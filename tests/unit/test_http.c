/* Unit tests of the metrics endpoint's HTTP core (src/common/http.c):
 * request heads whole, split at every byte, pipelined, malformed and over
 * the limits, table-driven; the routes and the reply heads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>

#include "common/http.h"

static const struct row {
	const char *text;
	int want;	  /* > 0: the whole text is one head; else the result */
	int method;	  /* when want > 0 */
	const char *path; /* when want > 0 */
	int keep_alive;	  /* when want > 0 */
} rows[] = {
	{"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 1, CRUN_HTTP_GET, "/metrics", 1},
	{"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 1, CRUN_HTTP_HEAD, "/metrics", 1},
	{"GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n", 1, CRUN_HTTP_GET, "/metrics", 1},
	{"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 1, CRUN_HTTP_GET, "/", 0},
	{"GET / HTTP/1.1\r\nHost: x\r\nconnection: Upgrade, CLOSE\r\n\r\n", 1, CRUN_HTTP_GET, "/",
	 0},
	{"GET / HTTP/1.0\r\n\r\n", 1, CRUN_HTTP_GET, "/", 0},
	{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 1, CRUN_HTTP_GET, "/", 1},
	{"GET /metrics HTTP/1.1\nHost: x\n\n", 1, CRUN_HTTP_GET, "/metrics", 1},
	{"\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 1, CRUN_HTTP_GET, "/metrics", 1},
	{"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 1, CRUN_HTTP_OTHER, "/metrics", 1},
	{"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 1, CRUN_HTTP_GET,
	 "/metrics", 1},
	{"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Empty:\r\n\r\n", 1, CRUN_HTTP_GET, "/metrics", 1},
	/* Malformed. */
	{"GET /metrics\r\n\r\n", -400, 0, NULL, 0},
	{"GET  /metrics HTTP/1.1\r\nHost: x\r\n\r\n", -400, 0, NULL, 0},
	{"GET metrics HTTP/1.1\r\nHost: x\r\n\r\n", -400, 0, NULL, 0},
	{"GET http://x/metrics HTTP/1.1\r\nHost: x\r\n\r\n", -400, 0, NULL, 0},
	{"GET /metrics HTTP/1.1 \r\nHost: x\r\n\r\n", -400, 0, NULL, 0},
	{"GET /metrics HTTX/1.1\r\nHost: x\r\n\r\n", -400, 0, NULL, 0},
	{"G(T /metrics HTTP/1.1\r\nHost: x\r\n\r\n", -400, 0, NULL, 0},
	{" GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", -400, 0, NULL, 0},
	{"GET /met\x01rics HTTP/1.1\r\nHost: x\r\n\r\n", -400, 0, NULL, 0},
	{"GET /metrics HTTP/1.1\r\n\r\n", -400, 0, NULL, 0}, /* no Host */
	{"GET /metrics HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", -400, 0, NULL, 0},
	{"GET /metrics HTTP/1.1\r\nHost : x\r\n\r\n", -400, 0, NULL, 0},
	{"GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", -400, 0, NULL, 0},
	{"GET /metrics HTTP/1.1\r\nHost x\r\n\r\n", -400, 0, NULL, 0},
	{"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", -400, 0, NULL, 0},
	{"GET /metrics HTTP/1.1\r\nHost: x\r\nX: a\x7f\r\n\r\n", -400, 0, NULL, 0},
	/* A body, another version. */
	{"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", -413, 0, NULL, 0},
	{"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", -413, 0, NULL,
	 0},
	{"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", -505, 0, NULL, 0},
	{"GET /metrics HTTP/1.2\r\nHost: x\r\n\r\n", -505, 0, NULL, 0},
	/* Not complete yet. */
	{"GET /metrics HTTP/1.1\r\nHost: x\r\n", 0, 0, NULL, 0},
	{"GET /metr", 0, 0, NULL, 0},
	{"", 0, 0, NULL, 0},
};

static void test_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		struct crun__http_request req;
		int rc = crun__http_parse(r->text, strlen(r->text), &req);

		if (r->want > 0) {
			if (rc != (int)strlen(r->text))
				fail_msg("row %zu: %d, want %zu", i, rc, strlen(r->text));
			assert_int_equal(req.method, r->method);
			assert_string_equal(req.path, r->path);
			assert_int_equal(req.keep_alive, r->keep_alive);
		} else if (rc != r->want) {
			fail_msg("row %zu ('%s'): %d, want %d", i, r->text, rc, r->want);
		}
	}
}

/* Every prefix of a whole head is "not yet" (0); the error rows give
 * their error as soon as the bad byte is in, never a success. */
static void test_split(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		size_t n = strlen(r->text);

		for (size_t k = 0; k < n; k++) {
			struct crun__http_request req;
			int rc = crun__http_parse(r->text, k, &req);

			if (r->want > 0 && rc != 0)
				fail_msg("row %zu cut at %zu: %d, want 0", i, k, rc);
			if (r->want <= 0 && rc != 0 && rc != r->want)
				fail_msg("row %zu cut at %zu: %d, want 0 or %d", i, k, rc, r->want);
		}
	}
}

/* Two requests in one read: the first takes exactly its bytes, the rest
 * parses as the second. */
static void test_pipelined(void **state)
{
	const char *two = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"
			  "HEAD /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET";
	struct crun__http_request req;
	int rc;

	(void)state;
	rc = crun__http_parse(two, strlen(two), &req);
	assert_int_equal(rc, strlen("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"));
	assert_int_equal(req.method, CRUN_HTTP_GET);
	assert_true(req.keep_alive);
	two += rc;
	rc = crun__http_parse(two, strlen(two), &req);
	assert_int_equal(rc, (int)strlen(two) - 3);
	assert_int_equal(req.method, CRUN_HTTP_HEAD);
	assert_string_equal(req.path, "/x");
	assert_false(req.keep_alive);
	two += rc;
	assert_int_equal(crun__http_parse(two, strlen(two), &req), 0);
}

static void test_limits(void **state)
{
	char *buf = malloc(CRUN_HTTP_MAX_HEAD + 512);
	struct crun__http_request req;
	size_t n;

	(void)state;
	/* A head that never ends: 431 once the buffer is full. */
	n = (size_t)snprintf(buf, 64, "GET /metrics HTTP/1.1\r\nHost: x\r\nX: ");
	memset(buf + n, 'a', CRUN_HTTP_MAX_HEAD - n);
	assert_int_equal(crun__http_parse(buf, CRUN_HTTP_MAX_HEAD - 1, &req), 0);
	assert_int_equal(crun__http_parse(buf, CRUN_HTTP_MAX_HEAD, &req), -431);
	/* One field line past the limit, ended. */
	memcpy(buf + CRUN_HTTP_MAX_HEAD, "\r\n\r\n", 4);
	assert_int_equal(crun__http_parse(buf, CRUN_HTTP_MAX_HEAD + 4, &req), -431);
	/* Too many fields. */
	n = (size_t)snprintf(buf, 64, "GET / HTTP/1.1\r\nHost: x\r\n");
	for (int i = 0; i < CRUN_HTTP_MAX_FIELDS; i++)
		n += (size_t)snprintf(buf + n, 16, "A: b\r\n");
	memcpy(buf + n, "\r\n", 3);
	assert_int_equal(crun__http_parse(buf, n + 2, &req), -431);
	/* One field fewer is fine. */
	memcpy(buf + n - 6, "\r\n", 3);
	assert_int_equal(crun__http_parse(buf, n - 4, &req), (int)(n - 4));
	/* A target longer than a path may be. */
	n = (size_t)snprintf(buf, 16, "GET /");
	memset(buf + n, 'p', 300);
	n += 300;
	n += (size_t)snprintf(buf + n, 64, " HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_int_equal(crun__http_parse(buf, n, &req), -414);
	/* Empty lines alone, as many as the limit: 400, not a wait forever. */
	memset(buf, '\n', CRUN_HTTP_MAX_HEAD);
	assert_int_equal(crun__http_parse(buf, CRUN_HTTP_MAX_HEAD, &req), -400);
	free(buf);
}

static void test_route(void **state)
{
	struct crun__http_request req;
	struct crun__http_reply rep;
	const char *get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

	(void)state;
	crun__http_route(crun__http_parse(get, strlen(get), &req), &req, "/metrics", &rep);
	assert_int_equal(rep.status, 200);
	assert_true(rep.metrics);
	assert_false(rep.close);
	assert_false(rep.head_only);

	get = "HEAD /metrics HTTP/1.0\r\n\r\n";
	crun__http_route(crun__http_parse(get, strlen(get), &req), &req, "/metrics", &rep);
	assert_int_equal(rep.status, 200);
	assert_true(rep.head_only);
	assert_true(rep.close);

	/* HTTP/1.0 asking to keep the connection: the reply must say it does */
	get = "GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
	crun__http_route(crun__http_parse(get, strlen(get), &req), &req, "/metrics", &rep);
	assert_int_equal(rep.status, 200);
	assert_false(rep.close);
	assert_true(rep.keep_alive);
	get = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n";
	crun__http_route(crun__http_parse(get, strlen(get), &req), &req, "/metrics", &rep);
	assert_false(rep.close);
	assert_false(rep.keep_alive); /* HTTP/1.1 keeps it without a word */

	get = "GET /other HTTP/1.1\r\nHost: x\r\n\r\n";
	crun__http_route(crun__http_parse(get, strlen(get), &req), &req, "/metrics", &rep);
	assert_int_equal(rep.status, 404);
	assert_false(rep.metrics);
	assert_false(rep.close); /* a 404 keeps the connection */

	get = "DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	crun__http_route(crun__http_parse(get, strlen(get), &req), &req, "/metrics", &rep);
	assert_int_equal(rep.status, 405);
	assert_true(rep.close);

	crun__http_route(-431, &req, "/metrics", &rep);
	assert_int_equal(rep.status, 431);
	assert_true(rep.close);
	assert_string_equal(rep.body, "Request Header Fields Too Large");
}

static void test_head(void **state)
{
	struct crun__http_reply rep = {.status = 200, .metrics = true};
	char buf[512];
	int n;

	(void)state;
	n = crun__http_head(buf, sizeof(buf), &rep, CRUN_HTTP_PROM_TYPE, 1234);
	assert_int_equal(n, strlen(buf));
	assert_string_equal(buf, "HTTP/1.1 200 OK\r\n"
				 "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
				 "Content-Length: 1234\r\n"
				 "\r\n");
	rep.status = 405;
	rep.close = true;
	n = crun__http_head(buf, sizeof(buf), &rep, "text/plain; charset=utf-8", 19);
	assert_true(n > 0);
	assert_non_null(strstr(buf, "HTTP/1.1 405 Method Not Allowed\r\n"));
	assert_non_null(strstr(buf, "Allow: GET, HEAD\r\n"));
	assert_non_null(strstr(buf, "Connection: close\r\n\r\n"));
	assert_int_equal(crun__http_head(buf, 20, &rep, "text/plain", 19), -ENOSPC);

	rep = (struct crun__http_reply){.status = 200, .metrics = true, .keep_alive = true};
	n = crun__http_head(buf, sizeof(buf), &rep, CRUN_HTTP_PROM_TYPE, 5);
	assert_int_equal(n, strlen(buf));
	assert_non_null(strstr(buf, "\r\nConnection: keep-alive\r\n\r\n"));
	rep.close = true; /* closing wins */
	n = crun__http_head(buf, sizeof(buf), &rep, CRUN_HTTP_PROM_TYPE, 5);
	assert_null(strstr(buf, "keep-alive"));
	assert_non_null(strstr(buf, "Connection: close\r\n"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),	  cmocka_unit_test(test_split),
		cmocka_unit_test(test_pipelined), cmocka_unit_test(test_limits),
		cmocka_unit_test(test_route),	  cmocka_unit_test(test_head),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Authentication between libcrun and the store: the right token works, a
 * wrong or missing one fails quickly with -EACCES and "authentication
 * failed" (never retried), a server that cannot prove it knows the token
 * is refused by the client, and the token reaches the client from the
 * environment or a file. */
#include <crun/store.h>

#include "common/log.h"
#include "rendezvous/wire.h"
#include "store_harness.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define TOKEN "s3cret-job-token"

static int start_with_token(struct harness *h, const char *token)
{
	struct crun__server_opts so;

	memset(&so, 0, sizeof(so));
	crun__server_limits_default(&so.limits);
	so.token = token;
	so.token_len = token ? strlen(token) : 0;
	return harness_start(h, 0, &so);
}

static struct crun_store *client(int port, const char *token, int connect_ms)
{
	struct crun_store_opts o = {
		.host = "127.0.0.1",
		.port = port,
		.run_id = "auth",
		.token = token,
		.token_len = token ? strlen(token) : 0,
		.connect_timeout_ms = connect_ms,
		.timeout_ms = 5000,
	};
	struct crun_store *s = crun_store_create(&o);

	assert_non_null(s);
	return s;
}

static void test_right_token(void **state)
{
	struct harness h;
	struct crun_store *s;
	struct crun_store_buf b;

	(void)state;
	assert_int_equal(start_with_token(&h, TOKEN), 0);
	s = client(h.port, TOKEN, 5000);
	assert_int_equal(crun_store_connect(s), 0);
	assert_int_equal(crun_store_set(s, "k", "v", 1, -1), 0);
	assert_int_equal(crun_store_get(s, "k", &b, 0), 0);
	assert_string_equal((char *)b.data, "v");
	crun_store_buf_finish(&b);
	crun_store_destroy(s);
	harness_stop(&h);
}

static void test_wrong_token(void **state)
{
	struct harness h;
	struct crun_store *s;
	uint64_t t0;

	(void)state;
	assert_int_equal(start_with_token(&h, TOKEN), 0);
	/* A long connect timeout: the refusal must still come at once. */
	s = client(h.port, "not-the-token", 10000);
	t0 = crun__now_ms();
	assert_int_equal(crun_store_connect(s), -EACCES);
	assert_true(elapsed_ms(t0) < 1000);
	assert_string_equal(crun_store_errmsg(s), "authentication failed");
	assert_int_equal(crun_store_fd(s), -1);
	/* Calls fail the same way, without hanging either. */
	t0 = crun__now_ms();
	assert_int_equal(crun_store_set(s, "k", "v", 1, -1), -EACCES);
	assert_true(elapsed_ms(t0) < 1000);
	crun_store_destroy(s);
	harness_stop(&h);
}

static void test_no_token_against_token_server(void **state)
{
	struct harness h;
	struct crun_store *s;
	uint64_t t0;

	(void)state;
	assert_int_equal(start_with_token(&h, TOKEN), 0);
	s = client(h.port, NULL, 10000);
	t0 = crun__now_ms();
	assert_int_equal(crun_store_connect(s), -EACCES);
	assert_true(elapsed_ms(t0) < 1000);
	assert_non_null(strstr(crun_store_errmsg(s), "authentication failed"));
	crun_store_destroy(s);
	harness_stop(&h);
}

/* A client with a token refuses a server that asks for none: it cannot
 * prove it knows the token (a downgrade, or an impostor), at once and
 * without retries. */
static void test_token_against_open_server(void **state)
{
	struct harness h;
	struct crun_store *s;
	uint64_t t0;

	(void)state;
	assert_int_equal(start_with_token(&h, NULL), 0);
	s = client(h.port, TOKEN, 5000);
	t0 = crun__now_ms();
	assert_int_equal(crun_store_connect(s), -EACCES);
	assert_true(elapsed_ms(t0) < 1000);
	assert_non_null(strstr(crun_store_errmsg(s), "did not prove it knows the token: "
						     "refusing it (a store without a token, or "
						     "an impostor)"));
	crun_store_destroy(s);
	harness_stop(&h);
}

/* A fake store that asks for a token, accepts any mac and answers with a
 * mac it made up: the client must refuse it (mutual authentication). */
struct impostor {
	int lfd;
	int port;
	bool replied;
};

static int read_full(int fd, uint8_t *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = read(fd, buf + off, len - off);

		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	return 0;
}

static void impostor_main(void *arg)
{
	struct impostor *im = arg;
	uint8_t pre[CRUN_WIRE_SERVER_PREAMBLE], nonce[CRUN_WIRE_NONCE_LEN], hdr[12], *payload;
	uint8_t fake_mac[CRUN_WIRE_MAC_LEN], out[256];
	struct crun__wire_item it = {fake_mac, sizeof(fake_mac)};
	struct crun__wire_msg reply = {.type = CRUN_WIRE_OK, .count = 1, .items = &it};
	uint32_t plen;
	int fd;

	fd = accept(im->lfd, NULL, NULL);
	if (fd < 0)
		return;
	memset(nonce, 7, sizeof(nonce));
	memset(fake_mac, 9, sizeof(fake_mac));
	crun__wire_server_preamble(pre, CRUN_WIRE_F_AUTH | CRUN_WIRE_F_AUTH_RUN, nonce);
	if (read_full(fd, out, CRUN_WIRE_CLIENT_PREAMBLE) < 0 ||
	    crun__write_all(fd, pre, sizeof(pre)) < 0 || read_full(fd, hdr, sizeof(hdr)) < 0)
		goto out_close;
	plen = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (plen > 4096)
		goto out_close;
	payload = malloc(plen);
	if (!payload || read_full(fd, payload, plen) < 0) {
		free(payload);
		goto out_close;
	}
	free(payload);
	reply.id =
		(uint32_t)hdr[8] << 24 | (uint32_t)hdr[9] << 16 | (uint32_t)hdr[10] << 8 | hdr[11];
	crun__write_all(fd, out, crun__wire_encode(&reply, out));
	im->replied = true;
	/* Wait for the client to hang up. */
	if (read(fd, out, sizeof(out)) < 0)
		im->replied = im->replied && errno == ECONNRESET;
out_close:
	close(fd);
}

static void test_impostor_server(void **state)
{
	struct impostor im = {0};
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	struct crun_store *s;
	uv_thread_t t;

	(void)state;
	im.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(im.lfd >= 0);
	assert_int_equal(bind(im.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(im.lfd, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(listen(im.lfd, 4), 0);
	im.port = ntohs(a.sin_port);
	uv_thread_create(&t, impostor_main, &im);

	s = client(im.port, TOKEN, 3000);
	assert_int_equal(crun_store_connect(s), -EACCES);
	assert_non_null(strstr(crun_store_errmsg(s), "did not prove"));
	crun_store_destroy(s);
	uv_thread_join(&t);
	assert_true(im.replied);
	close(im.lfd);
}

static void clear_env(void)
{
	unsetenv("CRUN_STORE");
	unsetenv("CRUN_RUN_ID");
	unsetenv("CRUN_TOKEN");
	unsetenv("CRUN_TOKEN_FILE");
	unsetenv("CRUN_CONNECT_TIMEOUT");
	unsetenv("CRUN_TIMEOUT");
}

static void connect_from_env(int expect)
{
	struct crun_store_opts o;
	struct crun_store *s;
	char err[256];

	assert_int_equal(crun_store_opts_from_env_err(&o, err, sizeof(err)), 0);
	s = crun_store_create(&o);
	assert_non_null(s);
	assert_int_equal(crun_store_connect(s), expect);
	if (expect == 0)
		assert_int_equal(crun_store_set(s, "env", "ok", 2, -1), 0);
	crun_store_destroy(s);
}

static void test_token_from_env_and_file(void **state)
{
	struct crun_store_opts o;
	struct harness h;
	char ep[64], path[] = "/tmp/crun-test-token-XXXXXX", err[256];
	int fd;

	(void)state;
	assert_int_equal(start_with_token(&h, TOKEN), 0);
	clear_env();

	/* defaults */
	assert_int_equal(crun_store_opts_from_env(&o), 0);
	assert_string_equal(o.host, "127.0.0.1");
	assert_int_equal(o.port, 29400);
	assert_string_equal(o.run_id, "default");
	assert_null(o.token);

	snprintf(ep, sizeof(ep), "127.0.0.1:%d", h.port);
	setenv("CRUN_STORE", ep, 1);
	setenv("CRUN_RUN_ID", "envrun", 1);
	setenv("CRUN_CONNECT_TIMEOUT", "2s", 1);
	setenv("CRUN_TIMEOUT", "1500ms", 1);
	assert_int_equal(crun_store_opts_from_env(&o), 0);
	assert_int_equal(o.port, h.port);
	assert_string_equal(o.run_id, "envrun");
	assert_int_equal(o.connect_timeout_ms, 2000);
	assert_int_equal(o.timeout_ms, 1500);
	connect_from_env(-EACCES); /* no token yet */

	setenv("CRUN_TOKEN", TOKEN, 1);
	connect_from_env(0);
	setenv("CRUN_TOKEN", "wrong", 1);
	connect_from_env(-EACCES);

	/* CRUN_TOKEN_FILE, read when CRUN_TOKEN is unset; a trailing
	 * newline is not part of the token */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(crun__write_all(fd, TOKEN "\n", strlen(TOKEN) + 1), 0);
	close(fd);
	unsetenv("CRUN_TOKEN");
	setenv("CRUN_TOKEN_FILE", path, 1);
	connect_from_env(0);
	assert_int_equal(crun_store_opts_from_env(&o), 0);
	assert_int_equal(o.token_len, strlen(TOKEN));
	assert_memory_equal(o.token, TOKEN, strlen(TOKEN));
	unlink(path);

	/* bad variables are named */
	assert_true(crun_store_opts_from_env_err(&o, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "CRUN_TOKEN_FILE"));
	unsetenv("CRUN_TOKEN_FILE");
	setenv("CRUN_STORE", "[::1", 1);
	assert_int_equal(crun_store_opts_from_env_err(&o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "CRUN_STORE"));
	setenv("CRUN_STORE", "[::1]:1234", 1);
	assert_int_equal(crun_store_opts_from_env(&o), 0);
	assert_string_equal(o.host, "::1");
	assert_int_equal(o.port, 1234);
	setenv("CRUN_TIMEOUT", "soon", 1);
	assert_int_equal(crun_store_opts_from_env_err(&o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "CRUN_TIMEOUT"));

	clear_env();
	harness_stop(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_right_token),
		cmocka_unit_test(test_wrong_token),
		cmocka_unit_test(test_no_token_against_token_server),
		cmocka_unit_test(test_token_against_open_server),
		cmocka_unit_test(test_impostor_server),
		cmocka_unit_test(test_token_from_env_and_file),
	};

	crun__log_init("test_auth", CRUN_LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The agent's asynchronous store client (src/rendezvous/aclient.h) against
 * the real server, on the same libuv loop (as when the agent hosts the
 * store) or on its own thread (store_harness.h), and against a fake server
 * on a raw socket for what a real one never does (go silent, fail to prove
 * the token, not be a store at all). */
#include "common/log.h"
#include "common/util.h"
#include "rendezvous/aclient.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/server.h"
#include "rendezvous/wire.h"
#include "store_harness.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#define TOKEN "aclient-test-token"
#define RUN "aclient"

/* ---- fixture: a loop, optionally with a server on it -------------------- */

struct fx {
	uv_loop_t loop;
	uv_timer_t tick; /* wakes uv_run(ONCE) so that waits stay bounded */
	struct crun__server *srv;
	int port;
};

static void on_tick(uv_timer_t *t)
{
	(void)t;
}

static void fx_init(struct fx *f)
{
	memset(f, 0, sizeof(*f));
	assert_int_equal(uv_loop_init(&f->loop), 0);
	uv_timer_init(&f->loop, &f->tick);
	uv_timer_start(&f->tick, on_tick, 10, 10);
}

/* Adds a server on the fixture's loop, listening on host:0. */
static int fx_serve(struct fx *f, const char *host, const struct crun__server_opts *opts)
{
	struct crun__server_opts def;
	char err[256];
	int rc;

	if (!opts) {
		harness_opts(&def, NULL);
		opts = &def;
	}
	f->srv = crun__server_create(&f->loop, opts);
	assert_non_null(f->srv);
	rc = crun__server_listen(f->srv, host, 0, err, sizeof(err));
	if (rc < 0) {
		crun__server_destroy(f->srv, NULL, NULL);
		f->srv = NULL;
		return rc;
	}
	f->port = crun__server_port(f->srv);
	return 0;
}

/* Runs the loop until *flag or ms pass; returns *flag. */
static bool run_until(struct fx *f, const bool *flag, int ms)
{
	uint64_t deadline = crun__now_ms() + (uint64_t)ms;

	while (!*flag && crun__now_ms() < deadline)
		uv_run(&f->loop, UV_RUN_ONCE);
	return *flag;
}

static void run_for(struct fx *f, int ms)
{
	bool never = false;

	run_until(f, &never, ms);
}

static void fx_finish(struct fx *f)
{
	uint64_t deadline = crun__now_ms() + 2000;

	if (f->srv)
		crun__server_destroy(f->srv, NULL, NULL);
	f->srv = NULL;
	uv_close((uv_handle_t *)&f->tick, NULL);
	while (uv_loop_alive(&f->loop) && crun__now_ms() < deadline)
		uv_run(&f->loop, UV_RUN_NOWAIT);
	/* Every handle of the client is closed and freed. */
	assert_int_equal(uv_loop_close(&f->loop), 0);
}

/* ---- recording callbacks ------------------------------------------------ */

static int seq;

struct conn_res {
	bool done;
	int calls;
	int status;
	char msg[512];
	bool destroy; /* destroy the client inside the callback */
};

static void on_connect(struct crun__aclient *c, int status, const char *message, void *arg)
{
	struct conn_res *r = arg;

	r->done = true;
	r->calls++;
	r->status = status;
	snprintf(r->msg, sizeof(r->msg), "%s", message ? message : "");
	if (status != 0)
		assert_non_null(message);
	if (r->destroy)
		crun__aclient_destroy(c);
}

struct rep {
	bool done;
	int calls;
	int seq;
	int status;
	char msg[512];
	bool has_reply;
	uint8_t type;
	int64_t num;
	uint32_t id, count;
	char item[4][64];
	struct crun__aclient **destroy; /* destroy *destroy inside the callback */
};

static void copy_item(char *out, size_t outlen, const struct crun__wire_item *it)
{
	size_t n = it->len < outlen - 1 ? it->len : outlen - 1;

	memcpy(out, it->data, n);
	out[n] = '\0';
}

static void on_reply(struct crun__aclient *c, int status, const char *message,
		     const struct crun__wire_msg *reply, void *arg)
{
	struct rep *r = arg;

	r->done = true;
	r->calls++;
	r->seq = ++seq;
	r->status = status;
	snprintf(r->msg, sizeof(r->msg), "%s", message ? message : "");
	r->has_reply = reply != NULL;
	if (reply) {
		r->type = reply->type;
		r->num = reply->num;
		r->id = reply->id;
		r->count = reply->count;
		for (uint32_t i = 0; i < reply->count && i < 4; i++)
			copy_item(r->item[i], sizeof(r->item[i]), &reply->items[i]);
	}
	if (r->destroy && *r->destroy) {
		assert_ptr_equal(*r->destroy, c);
		crun__aclient_destroy(c);
		*r->destroy = NULL;
	}
}

struct evs {
	bool lost_done;
	int lost;
	int lost_err;
	int lost_seq;
	char lost_msg[512];
	bool destroy_on_lost;
	bool notify_done;
	int notify;
	uint32_t notify_id;
	int64_t notify_num;
	char nkey[64], nval[64];
	bool rdzv_done;
	int rdzv;
	uint32_t rdzv_id;
	int64_t rdzv_num;
	char rdzv_reason[64], rdzv_msg[64];
};

static void on_event(struct crun__aclient *c, enum crun__aclient_event_type type, int err,
		     const char *message, const struct crun__wire_msg *msg, void *arg)
{
	struct evs *e = arg;

	switch (type) {
	case CRUN_ACLIENT_EV_LOST:
		assert_null(msg);
		assert_non_null(message);
		e->lost++;
		e->lost_done = true;
		e->lost_err = err;
		e->lost_seq = ++seq;
		snprintf(e->lost_msg, sizeof(e->lost_msg), "%s", message);
		if (e->destroy_on_lost)
			crun__aclient_destroy(c);
		break;
	case CRUN_ACLIENT_EV_NOTIFY:
		assert_non_null(msg);
		assert_int_equal(msg->type, CRUN_WIRE_NOTIFY);
		e->notify++;
		e->notify_done = true;
		e->notify_id = msg->id;
		e->notify_num = msg->num;
		copy_item(e->nkey, sizeof(e->nkey), &msg->items[0]);
		copy_item(e->nval, sizeof(e->nval), &msg->items[1]);
		break;
	case CRUN_ACLIENT_EV_RDZV:
		assert_non_null(msg);
		assert_int_equal(msg->type, CRUN_WIRE_RDZV_EVENT);
		e->rdzv++;
		e->rdzv_done = true;
		e->rdzv_id = msg->id;
		e->rdzv_num = msg->num;
		copy_item(e->rdzv_reason, sizeof(e->rdzv_reason), &msg->items[0]);
		copy_item(e->rdzv_msg, sizeof(e->rdzv_msg), &msg->items[1]);
		break;
	}
}

static struct crun__aclient *client_opts(struct fx *f, const char *host, int port,
					 const char *token, int64_t connect_ms, int64_t ka_ms,
					 int ka_attempts, struct evs *e)
{
	struct crun__aclient_opts o = {
		.host = host,
		.port = port,
		.run_id = RUN,
		.token = token,
		.token_len = token ? strlen(token) : 0,
		.connect_timeout_ms = connect_ms,
		.keepalive_interval_ms = ka_ms,
		.keepalive_max_attempt = ka_attempts,
	};
	struct crun__aclient *c = crun__aclient_create(&f->loop, &o, on_event, e);

	assert_non_null(c);
	return c;
}

static struct crun__aclient *client(struct fx *f, int port, struct evs *e)
{
	return client_opts(f, "127.0.0.1", port, NULL, 2000, 0, 0, e);
}

/* Connects and returns the status. */
static int connect_now(struct fx *f, struct crun__aclient *c, struct conn_res *r)
{
	memset(r, 0, sizeof(*r));
	assert_int_equal(crun__aclient_connect(c, on_connect, r), 0);
	assert_true(run_until(f, &r->done, 5000));
	assert_int_equal(r->calls, 1);
	return r->status;
}

/* Request helpers: items are C strings. */
static int send_req(struct crun__aclient *c, uint8_t type, int64_t num, int64_t timeout_ms,
		    struct rep *r, uint32_t *id, int nitems, ...)
{
	struct crun__wire_item items[4];
	struct crun__wire_msg m = {.type = type, .num = num, .items = items};
	va_list ap;

	va_start(ap, nitems);
	for (int i = 0; i < nitems; i++) {
		const char *s = va_arg(ap, const char *);

		items[i] = (struct crun__wire_item){(const uint8_t *)s, (uint32_t)strlen(s)};
	}
	va_end(ap);
	m.count = (uint32_t)nitems;
	memset(r, 0, sizeof(*r));
	return crun__aclient_request(c, &m, timeout_ms, on_reply, r, id);
}

static void wait_rep(struct fx *f, struct rep *r)
{
	assert_true(run_until(f, &r->done, 5000));
	assert_int_equal(r->calls, 1);
}

/* ---- a fake server on a raw socket --------------------------------------- */

enum fake_mode {
	FAKE_SILENT,	/* handshake, then never another byte */
	FAKE_BAD_MAC,	/* asks for a token, answers HELLO with a wrong mac */
	FAKE_NOT_STORE, /* answers with 40 bytes that are no preamble */
};

struct fake {
	enum fake_mode mode;
	int lfd, port;
	int stop[2];
	uv_thread_t thread;
};

static int wait_in(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1 ? 0 : -ETIMEDOUT;
}

static int read_full(int fd, uint8_t *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k;

		if (wait_in(fd, 5000) < 0)
			return -ETIMEDOUT;
		k = read(fd, buf + got, n - got);
		if (k <= 0)
			return -EIO;
		got += (size_t)k;
	}
	return 0;
}

static void fake_main(void *arg)
{
	struct fake *fk = arg;
	uint8_t pre[CRUN_WIRE_SERVER_PREAMBLE], nonce[CRUN_WIRE_NONCE_LEN] = {7};
	uint8_t buf[1024], out[256], zero_mac[CRUN_WIRE_MAC_LEN] = {0};
	struct crun__wire_item items[8], it;
	struct crun__wire_msg m, ok = {.type = CRUN_WIRE_OK};
	uint32_t cap = 8, plen;
	int fd;

	if (wait_in(fk->lfd, 5000) < 0)
		return;
	fd = accept(fk->lfd, NULL, NULL);
	if (fd < 0)
		return;
	if (fk->mode == FAKE_NOT_STORE) {
		memset(pre, 'x', sizeof(pre));
		crun__write_all(fd, pre, sizeof(pre));
		goto out_wait;
	}
	crun__wire_server_preamble(
		pre, fk->mode == FAKE_BAD_MAC ? CRUN_WIRE_F_AUTH | CRUN_WIRE_F_AUTH_RUN : 0, nonce);
	if (crun__write_all(fd, pre, sizeof(pre)) < 0 ||
	    read_full(fd, buf, CRUN_WIRE_CLIENT_PREAMBLE) < 0 ||
	    read_full(fd, buf, CRUN_WIRE_HEADER_LEN) < 0 ||
	    crun__wire_check_header(buf, sizeof(buf), &plen, NULL, 0) < 0 ||
	    plen > sizeof(buf) - CRUN_WIRE_HEADER_LEN ||
	    read_full(fd, buf + CRUN_WIRE_HEADER_LEN, plen) < 0 ||
	    crun__wire_decode(buf, CRUN_WIRE_HEADER_LEN + plen, sizeof(buf), &m, items, &cap, NULL,
			      0) <= 0)
		goto out_wait;
	ok.id = m.id;
	if (fk->mode == FAKE_BAD_MAC) {
		it = (struct crun__wire_item){zero_mac, sizeof(zero_mac)};
		ok.items = &it;
		ok.count = 1;
	}
	crun__write_all(fd, out, crun__wire_encode(&ok, out));
out_wait:
	/* Silent: reads nothing, answers nothing, until told to stop. */
	wait_in(fk->stop[0], 5000);
	close(fd);
}

static void fake_start(struct fake *fk, enum fake_mode mode)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);

	memset(fk, 0, sizeof(*fk));
	fk->mode = mode;
	fk->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fk->lfd >= 0);
	assert_int_equal(bind(fk->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fk->lfd, 4), 0);
	assert_int_equal(getsockname(fk->lfd, (struct sockaddr *)&a, &len), 0);
	fk->port = ntohs(a.sin_port);
	assert_int_equal(pipe(fk->stop), 0);
	assert_int_equal(uv_thread_create(&fk->thread, fake_main, fk), 0);
}

static void fake_stop(struct fake *fk)
{
	assert_int_equal(write(fk->stop[1], "x", 1), 1);
	uv_thread_join(&fk->thread);
	close(fk->stop[0]);
	close(fk->stop[1]);
	close(fk->lfd);
}

/* ---- tests ---------------------------------------------------------------- */

/* Every reply type, requests pipelined on one connection. */
static void test_replies(void **state)
{
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep set, get, miss, add, chk, list, ping, bad;
	struct crun__aclient *c;
	char peer[64];
	uint32_t id1 = 0, id2 = 0;

	(void)state;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	c = client(&f, f.port, &e);
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", f.port);
	assert_string_equal(crun__aclient_peer(c), peer);
	/* Not connected yet. */
	assert_int_equal(send_req(c, CRUN_WIRE_PING, 0, 0, &bad, NULL, 0), -ENOTCONN);
	assert_false(crun__aclient_store_has(c, CRUN_WIRE_F_RDZV_EXCL));
	assert_int_equal(connect_now(&f, c, &cr), 0);
	assert_true(crun__aclient_store_has(c, CRUN_WIRE_F_RDZV_EXCL));
	assert_string_equal(crun__aclient_peer(c), peer);
	assert_int_equal(crun__aclient_connect(c, on_connect, &cr), -EALREADY);

	assert_int_equal(send_req(c, CRUN_WIRE_SET, 0, 1000, &set, &id1, 2, "k", "v"), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 0, 1000, &get, &id2, 1, "k"), 0);
	assert_true(id1 != 0 && id2 != 0 && id1 != id2);
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 0, 0, &miss, NULL, 1, "missing"), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_ADD, 5, 0, &add, NULL, 1, "n"), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_CHECK, 0, 0, &chk, NULL, 1, "k"), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_LIST, 0, 0, &list, NULL, 0), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_PING, 0, 0, &ping, NULL, 1, "hi"), 0);
	/* Frames that break wire.h's rules are refused before sending. */
	assert_int_equal(send_req(c, CRUN_WIRE_SET, 0, 0, &bad, NULL, 2, "", "v"), -EINVAL);
	assert_int_equal(send_req(c, CRUN_WIRE_HELLO, 0, 0, &bad, NULL, 0), -EINVAL);
	assert_int_equal(send_req(c, CRUN_WIRE_OK, 0, 0, &bad, NULL, 0), -EINVAL);
	wait_rep(&f, &ping);

	assert_int_equal(set.status, 0);
	assert_int_equal(set.type, CRUN_WIRE_OK);
	assert_int_equal(set.id, id1);
	assert_int_equal(get.status, 0);
	assert_int_equal(get.type, CRUN_WIRE_VALUE);
	assert_string_equal(get.item[0], "v");
	assert_int_equal(miss.status, -ENOENT);
	assert_true(miss.has_reply);
	assert_int_equal(miss.type, CRUN_WIRE_ERROR);
	assert_true(miss.msg[0] != '\0');
	assert_int_equal(add.status, 0);
	assert_int_equal(add.type, CRUN_WIRE_INT);
	assert_int_equal(add.num, 5);
	assert_int_equal(chk.type, CRUN_WIRE_INT);
	assert_int_equal(chk.num, 1);
	assert_int_equal(list.type, CRUN_WIRE_VALUES);
	assert_int_equal(list.count, 2);
	assert_string_equal(list.item[0], "k");
	assert_string_equal(list.item[1], "n");
	assert_int_equal(ping.type, CRUN_WIRE_VALUE);
	assert_string_equal(ping.item[0], "hi");
	assert_int_equal(bad.calls, 0);
	assert_int_equal(e.lost, 0);

	crun__aclient_destroy(c);
	crun__aclient_destroy(NULL);
	fx_finish(&f);
}

struct late_set {
	struct crun__aclient *b;
	struct rep *r;
};

static void on_late_set(uv_timer_t *t)
{
	struct late_set *ls = t->data;

	assert_int_equal(send_req(ls->b, CRUN_WIRE_SET, 0, 1000, ls->r, NULL, 2, "late", "x"), 0);
}

/* A GET that waits is answered when a second client sets the key. */
static void test_get_wait_answered_by_set(void **state)
{
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep get, set;
	struct crun__aclient *a, *b;
	struct late_set ls;
	uv_timer_t t;
	uint64_t t0;

	(void)state;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	a = client(&f, f.port, &e);
	b = client(&f, f.port, &e);
	assert_int_equal(connect_now(&f, a, &cr), 0);
	assert_int_equal(connect_now(&f, b, &cr), 0);
	t0 = crun__now_ms();
	assert_int_equal(send_req(a, CRUN_WIRE_GET, 5000, 6000, &get, NULL, 1, "late"), 0);
	ls = (struct late_set){b, &set};
	uv_timer_init(&f.loop, &t);
	t.data = &ls;
	uv_timer_start(&t, on_late_set, 50, 0);
	wait_rep(&f, &get);
	assert_int_equal(get.status, 0);
	assert_int_equal(get.type, CRUN_WIRE_VALUE);
	assert_string_equal(get.item[0], "x");
	assert_true(elapsed_ms(t0) >= 40);
	assert_true(elapsed_ms(t0) < 2000);
	wait_rep(&f, &set);
	assert_int_equal(set.status, 0);
	uv_close((uv_handle_t *)&t, NULL);
	crun__aclient_destroy(a);
	crun__aclient_destroy(b);
	fx_finish(&f);
}

/* The client's own timeout fails the request; the connection stays up and
 * the late answer is dropped. */
static void test_request_timeout(void **state)
{
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep get, get2, ping;
	struct crun__aclient *c;
	uint64_t t0;

	(void)state;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	c = client(&f, f.port, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	t0 = crun__now_ms();
	/* The server would wait 300 ms, the client gives up after 100. */
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 300, 100, &get, NULL, 1, "never"), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 10000, 250, &get2, NULL, 1, "never2"), 0);
	wait_rep(&f, &get);
	assert_int_equal(get.status, -ETIMEDOUT);
	assert_false(get.has_reply);
	assert_true(elapsed_ms(t0) >= 90);
	assert_true(elapsed_ms(t0) < 1000);
	assert_non_null(strstr(get.msg, "to GET within 100ms"));
	assert_false(get2.done);
	wait_rep(&f, &get2);
	assert_int_equal(get2.status, -ETIMEDOUT);
	assert_true(elapsed_ms(t0) >= 240);
	/* The server's ETIMEDOUT for the first GET arrives and is dropped. */
	run_for(&f, 150);
	assert_int_equal(get.calls, 1);
	assert_int_equal(send_req(c, CRUN_WIRE_PING, 0, 1000, &ping, NULL, 0), 0);
	wait_rep(&f, &ping);
	assert_int_equal(ping.status, 0);
	assert_int_equal(e.lost, 0);
	crun__aclient_destroy(c);
	fx_finish(&f);
}

/* Mutual authentication against a server on its own thread. */
static void test_auth(void **state)
{
	struct crun__server_opts so;
	struct harness h;
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep set;
	struct crun__aclient *c;
	uint64_t t0;

	(void)state;
	harness_opts(&so, TOKEN);
	assert_int_equal(harness_start(&h, 0, &so), 0);
	fx_init(&f);

	c = client_opts(&f, "127.0.0.1", h.port, TOKEN, 5000, 0, 0, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	assert_true(crun__aclient_store_has(c, CRUN_WIRE_F_AUTH | CRUN_WIRE_F_RDZV_EXCL));
	assert_int_equal(send_req(c, CRUN_WIRE_SET, 0, 1000, &set, NULL, 2, "k", "v"), 0);
	wait_rep(&f, &set);
	assert_int_equal(set.status, 0);
	crun__aclient_destroy(c);

	/* A wrong token: refused at once although retries would be allowed. */
	c = client_opts(&f, "127.0.0.1", h.port, "wrong", 10000, 0, 0, &e);
	t0 = crun__now_ms();
	assert_int_equal(connect_now(&f, c, &cr), -EACCES);
	assert_true(elapsed_ms(t0) < 1000);
	assert_string_equal(cr.msg, "authentication failed");
	assert_int_equal(send_req(c, CRUN_WIRE_PING, 0, 0, &set, NULL, 0), -ENOTCONN);
	crun__aclient_destroy(c);

	/* No token for a server that wants one. */
	c = client_opts(&f, "127.0.0.1", h.port, NULL, 10000, 0, 0, &e);
	t0 = crun__now_ms();
	assert_int_equal(connect_now(&f, c, &cr), -EACCES);
	assert_true(elapsed_ms(t0) < 1000);
	assert_non_null(strstr(cr.msg, "authentication failed"));
	crun__aclient_destroy(c);
	assert_int_equal(e.lost, 0);

	fx_finish(&f);
	harness_stop(&h);
}

/* A store older than the exclusion items (the server's test hook) does
 * not advertise them: the agent then sends the forms every store takes. */
static void test_old_store_capability(void **state)
{
	struct harness h;
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct crun__aclient *c;

	(void)state;
	assert_int_equal(setenv("CRUN_TEST_RDZV_OLD_STORE", "1", 1), 0);
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	assert_int_equal(unsetenv("CRUN_TEST_RDZV_OLD_STORE"), 0);
	fx_init(&f);
	c = client_opts(&f, "127.0.0.1", h.port, NULL, 5000, 0, 0, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	assert_false(crun__aclient_store_has(c, CRUN_WIRE_F_RDZV_EXCL));
	crun__aclient_destroy(c);
	fx_finish(&f);
	harness_stop(&h);
}

/* A server that cannot prove it knows the token, and one that is no store
 * at all, are refused without retries. */
static void test_fake_servers(void **state)
{
	struct fake fk;
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct crun__aclient *c;
	uint64_t t0;

	(void)state;
	fx_init(&f);
	fake_start(&fk, FAKE_BAD_MAC);
	c = client_opts(&f, "127.0.0.1", fk.port, TOKEN, 10000, 0, 0, &e);
	t0 = crun__now_ms();
	assert_int_equal(connect_now(&f, c, &cr), -EACCES);
	assert_true(elapsed_ms(t0) < 2000);
	assert_non_null(strstr(cr.msg, "did not prove it knows the token"));
	crun__aclient_destroy(c);
	fake_stop(&fk);

	fake_start(&fk, FAKE_NOT_STORE);
	c = client_opts(&f, "127.0.0.1", fk.port, NULL, 10000, 0, 0, &e);
	t0 = crun__now_ms();
	assert_int_equal(connect_now(&f, c, &cr), -EPROTO);
	assert_true(elapsed_ms(t0) < 2000);
	assert_non_null(strstr(cr.msg, "is not a crun store"));
	crun__aclient_destroy(c);
	fake_stop(&fk);
	fx_finish(&f);
}

struct later_server {
	struct harness *h;
	int port;
	int *fd;
	bool started;
};

static void on_start_server(uv_timer_t *t)
{
	struct later_server *ls = t->data;

	assert_int_equal(harness_start(ls->h, ls->port, NULL), 0);
	close(*ls->fd);
	*ls->fd = -1;
	ls->started = true;
}

/* Connection refused is retried until a server appears on the port. */
static void test_connect_retry(void **state)
{
	struct harness h;
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep ping;
	struct crun__aclient *c;
	struct later_server ls;
	uv_timer_t t;
	int fd, port;
	uint64_t t0;

	(void)state;
	port = reserve_port(&fd);
	assert_true(port > 0);
	fx_init(&f);
	ls = (struct later_server){&h, port, &fd, false};
	uv_timer_init(&f.loop, &t);
	t.data = &ls;
	uv_timer_start(&t, on_start_server, 200, 0);
	c = client_opts(&f, "127.0.0.1", port, NULL, 5000, 0, 0, &e);
	t0 = crun__now_ms();
	assert_int_equal(connect_now(&f, c, &cr), 0);
	assert_true(ls.started);
	assert_true(elapsed_ms(t0) >= 190);
	/* Backoff caps at 1 s: the server is found well within that. */
	assert_true(elapsed_ms(t0) < 1500);
	assert_int_equal(send_req(c, CRUN_WIRE_PING, 0, 1000, &ping, NULL, 0), 0);
	wait_rep(&f, &ping);
	assert_int_equal(ping.status, 0);
	crun__aclient_destroy(c);
	uv_close((uv_handle_t *)&t, NULL);
	fx_finish(&f);
	harness_stop(&h);
}

/* Nobody ever listens: -ETIMEDOUT after connect_timeout_ms; with 0, one
 * try and the refusal itself. */
static void test_connect_timeout(void **state)
{
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct crun__aclient *c;
	char want[128];
	int fd, port;
	uint64_t t0;

	(void)state;
	port = reserve_port(&fd);
	assert_true(port > 0);
	fx_init(&f);
	c = client_opts(&f, "127.0.0.1", port, NULL, 300, 0, 0, &e);
	t0 = crun__now_ms();
	assert_int_equal(connect_now(&f, c, &cr), -ETIMEDOUT);
	assert_true(elapsed_ms(t0) >= 290);
	assert_true(elapsed_ms(t0) < 1500);
	snprintf(want, sizeof(want),
		 "cannot connect to the store at '127.0.0.1:%d' within 300ms: connection refused",
		 port);
	assert_string_equal(cr.msg, want);
	crun__aclient_destroy(c);

	c = client_opts(&f, "127.0.0.1", port, NULL, 0, 0, 0, &e);
	t0 = crun__now_ms();
	assert_int_equal(connect_now(&f, c, &cr), -ECONNREFUSED);
	assert_true(elapsed_ms(t0) < 500);
	snprintf(want, sizeof(want),
		 "cannot connect to the store at '127.0.0.1:%d': connection refused", port);
	assert_string_equal(cr.msg, want);
	crun__aclient_destroy(c);
	fx_finish(&f);
	close(fd);
}

/* The server goes away: pending requests fail, then LOST, once. */
static void test_server_destroyed(void **state)
{
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep get, wait, ping;
	struct crun__aclient *c;
	char want[128];

	(void)state;
	seq = 0;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	c = client(&f, f.port, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 10000, 0, &get, NULL, 1, "a"), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_WAIT, 10000, 20000, &wait, NULL, 1, "b"), 0);
	run_for(&f, 30);
	assert_false(get.done);
	crun__server_destroy(f.srv, NULL, NULL);
	f.srv = NULL;
	assert_true(run_until(&f, &e.lost_done, 2000));
	assert_int_equal(e.lost_err, -ECONNRESET);
	snprintf(want, sizeof(want), "connection to the store at '127.0.0.1:%d' ", f.port);
	assert_ptr_equal(strstr(e.lost_msg, want), e.lost_msg);
	assert_int_equal(get.calls, 1);
	assert_int_equal(get.status, -ECONNRESET);
	assert_false(get.has_reply);
	assert_string_equal(get.msg, e.lost_msg);
	assert_int_equal(wait.calls, 1);
	assert_int_equal(wait.status, -ECONNRESET);
	/* Requests first, in the order sent, then LOST. */
	assert_true(get.seq < wait.seq && wait.seq < e.lost_seq);
	assert_int_equal(send_req(c, CRUN_WIRE_PING, 0, 0, &ping, NULL, 0), -ENOTCONN);
	run_for(&f, 100);
	assert_int_equal(e.lost, 1);
	crun__aclient_destroy(c);
	fx_finish(&f);
}

/* A store that stops answering is lost after interval x attempts. */
static void test_keepalive_loss(void **state)
{
	struct fake fk;
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep ping;
	struct crun__aclient *c;
	char want[128];
	uint64_t t0;

	(void)state;
	fx_init(&f);
	fake_start(&fk, FAKE_SILENT);
	c = client_opts(&f, "127.0.0.1", fk.port, NULL, 2000, 100, 3, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	t0 = crun__now_ms();
	assert_int_equal(send_req(c, CRUN_WIRE_PING, 0, 0, &ping, NULL, 0), 0);
	assert_true(run_until(&f, &e.lost_done, 3000));
	assert_true(elapsed_ms(t0) >= 280);
	assert_true(elapsed_ms(t0) < 800);
	assert_int_equal(e.lost_err, -ETIMEDOUT);
	snprintf(want, sizeof(want), "no reply from the store at '127.0.0.1:%d' for 300ms",
		 fk.port);
	assert_string_equal(e.lost_msg, want);
	assert_int_equal(ping.calls, 1);
	assert_int_equal(ping.status, -ETIMEDOUT);
	run_for(&f, 50);
	assert_int_equal(e.lost, 1);
	crun__aclient_destroy(c);
	fx_finish(&f);
	fake_stop(&fk);
}

/* A store that answers its PINGs is never lost, though nothing else is
 * said for many windows. */
static void test_keepalive_alive(void **state)
{
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep get;
	struct crun__aclient *c;

	(void)state;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	c = client_opts(&f, "127.0.0.1", f.port, NULL, 2000, 30, 2, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	/* A GET that waits, as a JOIN does, answered by its own timeout. */
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 400, 0, &get, NULL, 1, "k"), 0);
	wait_rep(&f, &get);
	assert_int_equal(get.status, -ETIMEDOUT);
	assert_true(get.has_reply); /* the server's ERROR, not the client */
	run_for(&f, 100);
	assert_int_equal(e.lost, 0);
	crun__aclient_destroy(c);
	fx_finish(&f);
}

/* Destroy from inside callbacks: a reply, LOST, connect; and while
 * connecting or resolving. ASan and uv_loop_close check the rest. */
static void test_destroy_in_callbacks(void **state)
{
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep r[4];
	struct crun__aclient *c, *victim;
	int fd, port;

	(void)state;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);

	/* A reply callback destroys the client: no other callback runs. */
	c = client(&f, f.port, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	victim = c;
	for (int i = 0; i < 3; i++)
		assert_int_equal(send_req(c, CRUN_WIRE_PING, 0, 1000, &r[i], NULL, 0), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 10000, 50, &r[3], NULL, 1, "x"), 0);
	r[0].destroy = &victim;
	r[1].destroy = &victim;
	assert_true(run_until(&f, &r[0].done, 2000));
	assert_null(victim);
	run_for(&f, 150);
	assert_int_equal(r[0].calls, 1);
	assert_int_equal(r[1].calls + r[2].calls + r[3].calls, 0);

	/* The LOST callback destroys it. */
	e = (struct evs){.destroy_on_lost = true};
	c = client(&f, f.port, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	crun__server_destroy(f.srv, NULL, NULL);
	f.srv = NULL;
	assert_true(run_until(&f, &e.lost_done, 2000));
	run_for(&f, 50);
	assert_int_equal(e.lost, 1);

	/* A request's timeout destroys it; then a request failed by the lost
	 * connection does: no LOST, no later request's callback. */
	e = (struct evs){0};
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	c = client(&f, f.port, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	victim = c;
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 10000, 30, &r[0], NULL, 1, "x"), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 10000, 30, &r[1], NULL, 1, "y"), 0);
	r[0].destroy = &victim;
	assert_true(run_until(&f, &r[0].done, 2000));
	assert_int_equal(r[0].status, -ETIMEDOUT);
	run_for(&f, 50);
	assert_int_equal(r[1].calls, 0);
	c = client(&f, f.port, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	victim = c;
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 10000, 0, &r[0], NULL, 1, "x"), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_GET, 10000, 0, &r[1], NULL, 1, "y"), 0);
	r[0].destroy = &victim;
	run_for(&f, 20);
	crun__server_destroy(f.srv, NULL, NULL);
	f.srv = NULL;
	assert_true(run_until(&f, &r[0].done, 2000));
	assert_int_equal(r[0].status, -ECONNRESET);
	run_for(&f, 50);
	assert_int_equal(r[1].calls, 0);
	assert_int_equal(e.lost, 0);

	/* The connect callback destroys it, on failure and on success. */
	port = reserve_port(&fd);
	assert_true(port > 0);
	c = client_opts(&f, "127.0.0.1", port, NULL, 0, 0, 0, &e);
	memset(&cr, 0, sizeof(cr));
	cr.destroy = true;
	assert_int_equal(crun__aclient_connect(c, on_connect, &cr), 0);
	assert_true(run_until(&f, &cr.done, 2000));
	assert_int_equal(cr.status, -ECONNREFUSED);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	c = client(&f, f.port, &e);
	memset(&cr, 0, sizeof(cr));
	cr.destroy = true;
	assert_int_equal(crun__aclient_connect(c, on_connect, &cr), 0);
	assert_true(run_until(&f, &cr.done, 2000));
	assert_int_equal(cr.status, 0);

	/* Destroyed while retrying, mid-handshake, and while resolving: the
	 * connect callback never runs. */
	c = client_opts(&f, "127.0.0.1", port, NULL, 5000, 0, 0, &e);
	memset(&cr, 0, sizeof(cr));
	assert_int_equal(crun__aclient_connect(c, on_connect, &cr), 0);
	run_for(&f, 40);
	crun__aclient_destroy(c);
	c = client(&f, f.port, &e);
	assert_int_equal(crun__aclient_connect(c, on_connect, &cr), 0);
	uv_run(&f.loop, UV_RUN_NOWAIT);
	crun__aclient_destroy(c);
	c = client_opts(&f, "localhost", f.port, NULL, 5000, 0, 0, &e);
	assert_int_equal(crun__aclient_connect(c, on_connect, &cr), 0);
	crun__aclient_destroy(c);
	run_for(&f, 100);
	assert_int_equal(cr.calls, 0);
	close(fd);
	fx_finish(&f);
}

/* WATCH, then NOTIFY events carrying the WATCH's id. */
static void test_watch_notify(void **state)
{
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep w, set, del;
	struct crun__aclient *c;
	uint32_t wid = 0;

	(void)state;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	c = client(&f, f.port, &e);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	assert_int_equal(send_req(c, CRUN_WIRE_WATCH, 0, 1000, &w, &wid, 1, "w"), 0);
	wait_rep(&f, &w);
	assert_int_equal(w.status, 0);
	assert_int_equal(send_req(c, CRUN_WIRE_SET, 0, 1000, &set, NULL, 2, "w", "1"), 0);
	assert_true(run_until(&f, &e.notify_done, 2000));
	assert_int_equal(e.notify_id, wid);
	assert_int_equal(e.notify_num, CRUN_WIRE_EV_SET);
	assert_string_equal(e.nkey, "w");
	assert_string_equal(e.nval, "1");
	e.notify_done = false;
	assert_int_equal(send_req(c, CRUN_WIRE_DELETE, 0, 1000, &del, NULL, 1, "w"), 0);
	assert_true(run_until(&f, &e.notify_done, 2000));
	assert_int_equal(e.notify, 2);
	assert_int_equal(e.notify_num, CRUN_WIRE_EV_DELETE);
	assert_string_equal(e.nval, "");
	wait_rep(&f, &del);
	assert_int_equal(del.num, 1);
	crun__aclient_destroy(c);
	fx_finish(&f);
}

/* Names through uv_getaddrinfo (every address tried) and IPv6 literals. */
static void test_names_and_ipv6(void **state)
{
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct rep ping;
	struct crun__aclient *c;
	char want[64];

	(void)state;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	c = client_opts(&f, "localhost", f.port, NULL, 2000, 0, 0, &e);
	snprintf(want, sizeof(want), "localhost:%d", f.port);
	assert_string_equal(crun__aclient_peer(c), want);
	assert_int_equal(connect_now(&f, c, &cr), 0);
	snprintf(want, sizeof(want), "127.0.0.1:%d", f.port);
	assert_string_equal(crun__aclient_peer(c), want);
	crun__aclient_destroy(c);

	c = client_opts(&f, "no-such-host.invalid", f.port, NULL, 0, 0, 0, &e);
	assert_int_equal(connect_now(&f, c, &cr), -EHOSTUNREACH);
	assert_non_null(strstr(cr.msg, "cannot resolve 'no-such-host.invalid'"));
	crun__aclient_destroy(c);

	crun__server_destroy(f.srv, NULL, NULL);
	f.srv = NULL;
	if (fx_serve(&f, "::1", NULL) < 0) {
		fprintf(stderr, "no IPv6 loopback here: IPv6 part skipped\n");
	} else {
		c = client_opts(&f, "::1", f.port, NULL, 2000, 0, 0, &e);
		assert_int_equal(connect_now(&f, c, &cr), 0);
		snprintf(want, sizeof(want), "[::1]:%d", f.port);
		assert_string_equal(crun__aclient_peer(c), want);
		assert_int_equal(send_req(c, CRUN_WIRE_PING, 0, 1000, &ping, NULL, 0), 0);
		wait_rep(&f, &ping);
		assert_int_equal(ping.status, 0);
		crun__aclient_destroy(c);
	}
	fx_finish(&f);
}

/* A store at its connection limit says so before HELLO; not retried. */
static void test_connection_limit(void **state)
{
	struct crun__server_opts so;
	struct fx f;
	struct evs e = {0};
	struct conn_res cr;
	struct crun__aclient *a, *b;
	uint64_t t0;

	(void)state;
	harness_opts(&so, NULL);
	so.limits.max_connections = 1;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", &so), 0);
	a = client(&f, f.port, &e);
	assert_int_equal(connect_now(&f, a, &cr), 0);
	b = client_opts(&f, "127.0.0.1", f.port, NULL, 5000, 0, 0, &e);
	t0 = crun__now_ms();
	assert_int_equal(connect_now(&f, b, &cr), -EMFILE);
	assert_true(elapsed_ms(t0) < 1000);
	assert_string_equal(cr.msg, "too many connections");
	crun__aclient_destroy(a);
	crun__aclient_destroy(b);
	fx_finish(&f);
}

/* A rendezvous round through the client: two nodes JOIN, both get their
 * assignment; a FAIL ends the round and each gets an RDZV_EVENT carrying
 * its own JOIN's id. */
static void join(struct crun__aclient *c, const char *node_id, struct rep *r, uint32_t *id)
{
	struct crun__rdzv_node self = {.node_id = (char *)node_id,
				       .host = "host",
				       .addr = "",
				       .nproc = 2,
				       .node_rank = -1};
	struct crun__rdzv_conf conf = {
		.min_nodes = 2, .max_nodes = 2, .join_timeout_ms = 5000, .max_restarts = 3};
	struct crun__wire_item items[CRUN_RDZV_JOIN_ITEMS];
	struct crun__wire_msg m;
	char scratch[CRUN_RDZV_JOIN_SCRATCH];

	crun__rdzv_join_msg(&self, &conf, &m, items, scratch);
	memset(r, 0, sizeof(*r));
	assert_int_equal(crun__aclient_request(c, &m, 0, on_reply, r, id), 0);
}

static void test_rdzv_round(void **state)
{
	struct fx f;
	struct evs ea = {0}, eb = {0};
	struct conn_res cr;
	struct rep ja, jb, fail = {0};
	struct crun__aclient *a, *b;
	struct crun__wire_item it = {(const uint8_t *)"rank 1 exited with status 1", 27};
	struct crun__wire_msg m;
	uint32_t ida = 0, idb = 0;
	uint64_t t0;

	(void)state;
	fx_init(&f);
	assert_int_equal(fx_serve(&f, "127.0.0.1", NULL), 0);
	a = client_opts(&f, "127.0.0.1", f.port, NULL, 2000, 100, 3, &ea);
	b = client_opts(&f, "127.0.0.1", f.port, NULL, 2000, 100, 3, &eb);
	assert_int_equal(connect_now(&f, a, &cr), 0);
	assert_int_equal(connect_now(&f, b, &cr), 0);
	join(a, "node-a", &ja, &ida);
	/* The JOIN waits for the second node (keep-alives meanwhile). */
	run_for(&f, 350);
	assert_false(ja.done);
	t0 = crun__now_ms();
	join(b, "node-b", &jb, &idb);
	wait_rep(&f, &ja);
	wait_rep(&f, &jb);
	assert_true(elapsed_ms(t0) < 1000);
	assert_int_equal(ja.status, 0);
	assert_int_equal(ja.type, CRUN_WIRE_VALUES);
	assert_int_equal(ja.count, 4 + 4 * 2);
	assert_string_equal(ja.item[0], "1"); /* round */
	assert_string_equal(ja.item[2], "0"); /* node-a joined first */
	assert_string_equal(jb.item[2], "1");

	/* A worker on node b failed: the round ends for both. */
	m = (struct crun__wire_msg){
		.type = CRUN_WIRE_RDZV_FAIL, .num = atoi(ja.item[0]), .count = 1, .items = &it};
	assert_int_equal(crun__aclient_request(b, &m, 1000, on_reply, &fail, NULL), 0);
	assert_true(run_until(&f, &ea.rdzv_done, 2000));
	assert_true(run_until(&f, &eb.rdzv_done, 2000));
	wait_rep(&f, &fail);
	assert_int_equal(fail.status, 0);
	assert_int_equal(ea.rdzv_id, ida);
	assert_int_equal(eb.rdzv_id, idb);
	assert_int_equal(ea.rdzv_num, 1);
	assert_string_equal(ea.rdzv_reason, "failure");
	assert_string_equal(eb.rdzv_reason, "failure");
	assert_non_null(strstr(ea.rdzv_msg, "rank 1 exited"));
	run_for(&f, 50);
	assert_int_equal(ea.rdzv + eb.rdzv, 2);
	assert_int_equal(ea.lost + eb.lost, 0);
	crun__aclient_destroy(a);
	crun__aclient_destroy(b);
	fx_finish(&f);
}

static void test_bad_options(void **state)
{
	struct fx f;
	struct crun__aclient_opts o = {.host = "127.0.0.1", .port = 1, .run_id = "r"};
	struct crun__aclient *c;

	(void)state;
	fx_init(&f);
	o.port = 0;
	assert_null(crun__aclient_create(&f.loop, &o, NULL, NULL));
	o.port = 70000;
	assert_null(crun__aclient_create(&f.loop, &o, NULL, NULL));
	o.port = 1;
	o.run_id = "";
	assert_null(crun__aclient_create(&f.loop, &o, NULL, NULL));
	o.run_id = "r";
	o.keepalive_interval_ms = 100;
	assert_null(crun__aclient_create(&f.loop, &o, NULL, NULL));
	o.keepalive_interval_ms = 0;
	o.token = "t";
	assert_null(crun__aclient_create(&f.loop, &o, NULL, NULL));
	o.token = NULL;
	o.host = NULL;
	assert_null(crun__aclient_create(&f.loop, &o, NULL, NULL));
	o.host = "::1";
	c = crun__aclient_create(&f.loop, &o, NULL, NULL);
	assert_non_null(c);
	assert_string_equal(crun__aclient_peer(c), "[::1]:1");
	assert_int_equal(crun__aclient_connect(c, NULL, NULL), -EINVAL);
	crun__aclient_destroy(c);
	fx_finish(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_replies),
		cmocka_unit_test(test_get_wait_answered_by_set),
		cmocka_unit_test(test_request_timeout),
		cmocka_unit_test(test_auth),
		cmocka_unit_test(test_old_store_capability),
		cmocka_unit_test(test_fake_servers),
		cmocka_unit_test(test_connect_retry),
		cmocka_unit_test(test_connect_timeout),
		cmocka_unit_test(test_server_destroyed),
		cmocka_unit_test(test_keepalive_loss),
		cmocka_unit_test(test_keepalive_alive),
		cmocka_unit_test(test_destroy_in_callbacks),
		cmocka_unit_test(test_watch_notify),
		cmocka_unit_test(test_names_and_ipv6),
		cmocka_unit_test(test_connection_limit),
		cmocka_unit_test(test_rdzv_round),
		cmocka_unit_test(test_bad_options),
	};

	signal(SIGPIPE, SIG_IGN);
	crun__log_init("test_aclient", CRUN_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Rendezvous rounds (rdzv.h) through a real store server: the server runs
 * on its own libuv loop in a thread (store_harness.h; 127.0.0.1, port 0),
 * and every node is a blocking socket that speaks the protocol with
 * crun__wire_* and the rdzv.h helpers, so nothing here depends on the
 * agent's client. Every receive has a 5 s timeout and every "nothing
 * arrives" check a short poll, so no test can hang; the timeouts under
 * test are 100-300 ms. Each server is destroyed at the end of its test and
 * its loop must close with no handle left. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "common/log.h"
#include "common/util.h"
#include "rendezvous/journal_file.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/server.h"
#include "rendezvous/wire.h"
#include "store_harness.h"
#include "wire_peer.h"

/* ---- a blocking node ------------------------------------------------------ */

static void send_msg(int fd, const struct crun__wire_msg *m)
{
	size_t n = crun__wire_encoded_size(m);
	uint8_t *buf = malloc(n);

	assert_non_null(buf);
	assert_int_equal(crun__wire_encode(m, buf), n);
	assert_int_equal(crun__write_all(fd, buf, n), 0);
	free(buf);
}

static void send_frame(int fd, uint8_t type, uint32_t id, int64_t num,
		       const struct crun__wire_item *items, uint32_t count)
{
	struct crun__wire_msg m = {type, 0, id, num, count, (struct crun__wire_item *)items};

	send_msg(fd, &m);
}

static void text(const struct crun__wire_item *it, char *out, size_t len)
{
	snprintf(out, len, "%.*s", (int)it->len, (const char *)it->data);
}

/* True when nothing arrives on fd within ms. */
static bool quiet(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 0;
}

/* A connection that has done the handshake in run. */
/* The flags of the latest server preamble connect_run read. */
static uint16_t last_flags;

static int connect_run(int port, const char *run)
{
	uint8_t pre[CRUN_WIRE_SERVER_PREAMBLE], nonce[32] = {0}, snonce[32];
	struct crun__wire_item hello[3] = {its(run), {nonce, 32}, {NULL, 0}};
	uint16_t version, flags;
	struct rmsg r;
	int fd = tconnect(port);

	crun__wire_client_preamble(pre);
	assert_int_equal(crun__write_all(fd, pre, CRUN_WIRE_CLIENT_PREAMBLE), 0);
	assert_int_equal(recv_all(fd, pre, sizeof(pre)), 0);
	assert_int_equal(crun__wire_parse_server_preamble(pre, &version, &flags, snonce), 0);
	last_flags = flags;
	send_frame(fd, CRUN_WIRE_HELLO, 1, 0, hello, 3);
	assert_int_equal(trecv(fd, &r), 0);
	assert_int_equal(r.m.type, CRUN_WIRE_OK);
	rmsg_finish(&r);
	return fd;
}

static uint32_t next_id = 100;

/* A node of a test: its connection and what its JOINs say. */
struct tnode {
	int fd;
	struct crun__rdzv_node self;
	struct crun__rdzv_conf conf;
	uint32_t join_id;
};

static struct crun__rdzv_conf conf_of(int min, int max, int64_t last_call_ms,
				      int64_t join_timeout_ms)
{
	struct crun__rdzv_conf c = {
		.min_nodes = min,
		.max_nodes = max,
		.join_timeout_ms = join_timeout_ms,
		.last_call_ms = last_call_ms,
		.keepalive_ms = 0,
		.max_restarts = 3,
	};

	return c;
}

static void node_init(struct tnode *n, int port, const char *run, const char *id, const char *host,
		      int nproc, const struct crun__rdzv_conf *conf)
{
	memset(n, 0, sizeof(*n));
	n->fd = connect_run(port, run);
	n->self.node_id = (char *)id;
	n->self.host = (char *)host;
	n->self.addr = (char *)"";
	n->self.nproc = nproc;
	n->self.node_rank = -1;
	n->conf = *conf;
}

static void node_close(struct tnode *n)
{
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
}

/* Sends a JOIN; its id is remembered (the id of the round's events). */
static void join(struct tnode *n)
{
	struct crun__wire_item items[CRUN_RDZV_JOIN_ITEMS];
	struct crun__wire_msg m;
	char scratch[CRUN_RDZV_JOIN_SCRATCH];

	crun__rdzv_join_msg(&n->self, &n->conf, &m, items, scratch);
	m.id = n->join_id = next_id++;
	send_msg(n->fd, &m);
}

/* A JOIN that does not complete a round, followed by a PING whose reply
 * proves the server has taken the JOIN: joins from several sockets then
 * reach the server in a known order (group ranks follow it). */
static void join_sync(struct tnode *n)
{
	uint32_t id = next_id++;
	struct rmsg r;

	join(n);
	send_frame(n->fd, CRUN_WIRE_PING, id, 0, NULL, 0);
	assert_int_equal(trecv(n->fd, &r), 0);
	assert_int_equal(r.m.type, CRUN_WIRE_VALUE);
	assert_int_equal(r.m.id, id);
	rmsg_finish(&r);
}

static uint32_t send_round_msg(struct tnode *n, uint8_t type, int64_t round, const char *msg)
{
	struct crun__wire_item it = its(msg ? msg : "");
	uint32_t id = next_id++;

	send_frame(n->fd, type, id, round, &it, type == CRUN_WIRE_RDZV_FAIL ? 1 : 0);
	return id;
}

/* Expects the assignment for n's JOIN. */
static void want_assignment(struct tnode *n, struct crun__rdzv_assignment *a)
{
	struct rmsg r;
	char err[256];

	assert_int_equal(trecv(n->fd, &r), 0);
	if (r.m.type == CRUN_WIRE_ERROR) {
		text(&r.m.items[0], err, sizeof(err));
		fail_msg("%s: JOIN refused (%lld): %s", n->self.host, (long long)r.m.num, err);
	}
	assert_int_equal(r.m.id, n->join_id);
	if (crun__rdzv_parse_assignment(&r.m, a, err, sizeof(err)) < 0)
		fail_msg("%s: bad assignment: %s", n->self.host, err);
	rmsg_finish(&r);
}

/* Expects an RDZV_EVENT for n's JOIN; returns its restart count. */
static int64_t want_event(struct tnode *n, int64_t round, const char *reason, const char *has)
{
	struct rmsg r;
	char buf[1024];
	int64_t count;

	assert_int_equal(trecv(n->fd, &r), 0);
	if (r.m.type != CRUN_WIRE_RDZV_EVENT)
		fail_msg("%s: expected RDZV_EVENT, got %s", n->self.host,
			 crun__wire_type_name(r.m.type));
	assert_int_equal(r.m.id, n->join_id);
	assert_int_equal(r.m.num, round);
	text(&r.m.items[0], buf, sizeof(buf));
	assert_string_equal(buf, reason);
	text(&r.m.items[1], buf, sizeof(buf));
	if (has && !strstr(buf, has))
		fail_msg("%s: event message '%s' does not say '%s'", n->self.host, buf, has);
	text(&r.m.items[2], buf, sizeof(buf));
	count = strtoll(buf, NULL, 10);
	rmsg_finish(&r);
	return count;
}

static void want_error(struct tnode *n, uint32_t id, int errnum, const char *has)
{
	struct rmsg r;
	char buf[1024];

	assert_int_equal(trecv(n->fd, &r), 0);
	assert_int_equal(r.m.type, CRUN_WIRE_ERROR);
	assert_int_equal(r.m.id, id);
	text(&r.m.items[0], buf, sizeof(buf));
	if (r.m.num != errnum)
		fail_msg("%s: expected errno %d, got %lld: %s", n->self.host, errnum,
			 (long long)r.m.num, buf);
	if (has && !strstr(buf, has))
		fail_msg("%s: error '%s' does not say '%s'", n->self.host, buf, has);
	rmsg_finish(&r);
}

static void want_ok(struct tnode *n, uint32_t id)
{
	struct rmsg r;

	assert_int_equal(trecv(n->fd, &r), 0);
	if (r.m.type != CRUN_WIRE_OK)
		fail_msg("%s: expected OK, got %s", n->self.host, crun__wire_type_name(r.m.type));
	assert_int_equal(r.m.id, id);
	rmsg_finish(&r);
}

/* SET then GET of a key in n's run. */
static void key_roundtrip(struct tnode *n, const char *k, const char *v)
{
	struct crun__wire_item kv[2] = {its(k), its(v)};
	uint32_t id = next_id++;
	struct rmsg r;

	send_frame(n->fd, CRUN_WIRE_SET, id, 0, kv, 2);
	want_ok(n, id);
	id = next_id++;
	send_frame(n->fd, CRUN_WIRE_GET, id, 0, kv, 1);
	assert_int_equal(trecv(n->fd, &r), 0);
	assert_int_equal(r.m.type, CRUN_WIRE_VALUE);
	assert_int_equal(r.m.items[0].len, strlen(v));
	assert_memory_equal(r.m.items[0].data, v, strlen(v));
	rmsg_finish(&r);
}

static void assert_same_nodes(const struct crun__rdzv_assignment *a,
			      const struct crun__rdzv_assignment *b)
{
	assert_int_equal(a->round, b->round);
	assert_int_equal(a->restart_count, b->restart_count);
	assert_int_equal(a->nnodes, b->nnodes);
	assert_int_equal(a->world_size, b->world_size);
	for (int i = 0; i < a->nnodes; i++) {
		assert_string_equal(a->nodes[i].node_id, b->nodes[i].node_id);
		assert_string_equal(a->nodes[i].host, b->nodes[i].host);
		assert_string_equal(a->nodes[i].addr, b->nodes[i].addr);
		assert_int_equal(a->nodes[i].nproc, b->nodes[i].nproc);
	}
}

/* ---- tests --------------------------------------------------------------- */

/* Two nodes of different sizes: the round closes as soon as max nodes are
 * in, both get the same member list, ranks in join order, the world size
 * is the sum, an empty addr becomes the peer's address. Keys still work. */
static void test_two_nodes(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 10000, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode na, nb;
	uint64_t t0;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "host-a:1:aa", "host-a", 8, &c);
	node_init(&nb, h.port, "job", "host-b:2:bb", "host-b", 4, &c);
	na.self.addr = (char *)"10.1.2.3";
	join_sync(&na);
	t0 = crun__now_ms();
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	/* max reached: no last call (10 s) */
	assert_true(crun__now_ms() - t0 < 2000);
	assert_same_nodes(&a, &b);
	assert_int_equal(a.round, 1);
	assert_int_equal(a.restart_count, 0);
	assert_int_equal(a.nnodes, 2);
	assert_int_equal(a.group_rank, 0);
	assert_int_equal(b.group_rank, 1);
	assert_int_equal(a.world_size, 12);
	assert_int_equal(a.rank_offset, 0);
	assert_int_equal(b.rank_offset, 8);
	assert_string_equal(a.nodes[0].node_id, "host-a:1:aa");
	assert_string_equal(a.nodes[0].addr, "10.1.2.3");
	assert_string_equal(a.nodes[1].host, "host-b");
	assert_string_equal(a.nodes[1].addr, "127.0.0.1");
	assert_int_equal(a.nodes[1].nproc, 4);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	/* The run's keys are shared with its rounds' members. */
	key_roundtrip(&na, "rdzv/1/master", "10.1.2.3:29500");
	key_roundtrip(&nb, "rdzv/1/master", "10.1.2.3:29501");
	node_close(&na);
	node_close(&nb);
	assert_int_equal(harness_stop(&h), 0);
}

/* Between min and max: the round closes last_call after min nodes. */
static void test_last_call(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 3, 200, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode na, nb;
	uint64_t t0, dt;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 2, &c);
	join_sync(&nb);
	t0 = crun__now_ms();
	join(&na);
	assert_true(quiet(na.fd, 100));
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	dt = crun__now_ms() - t0;
	if (dt < 180 || dt > 2000)
		fail_msg("round closed after %llu ms, expected about 200", (unsigned long long)dt);
	assert_int_equal(a.nnodes, 2);
	assert_int_equal(b.group_rank, 0); /* first to join */
	assert_int_equal(a.group_rank, 1);
	assert_int_equal(a.rank_offset, 2);
	assert_int_equal(a.world_size, 3);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	node_close(&na);
	node_close(&nb);
	assert_int_equal(harness_stop(&h), 0);
}

/* A member's connection drops: the other gets "left" (counted); alone
 * below min it then times out naming the node that did not come back.
 * Before any round the message says how many came. */
static void test_left_and_join_timeout(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode na, nb, nc;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&nc, h.port, "other", "c", "host-c", 1, &c);
	nc.conf.join_timeout_ms = 150;
	join(&nc);
	want_error(&nc, nc.join_id, ETIMEDOUT, "only 1 of at least 2 nodes joined within 150ms");
	node_close(&nc);

	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	join_sync(&na);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	node_close(&nb);
	assert_int_equal(want_event(&na, 1, "left", "node 1 (host-b) left: connection closed"), 1);
	na.conf.join_timeout_ms = 150;
	join(&na);
	want_error(&na, na.join_id, ETIMEDOUT,
		   "only 1 of at least 2 nodes joined within 150ms; missing from round 1: "
		   "node 1 (host-b)");
	/* The connection stays usable. */
	key_roundtrip(&na, "k", "v");
	node_close(&na);
	assert_int_equal(harness_stop(&h), 0);
}

/* A member whose keep-alives stop is dropped after keepalive_ms; a member
 * that keeps sending frames is not. */
static void test_keepalive(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode na, nb;
	bool got_event = false;
	int pongs = 0, pings = 0;
	uint64_t t0;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	c.keepalive_ms = 200;
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	join_sync(&na);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	/* a pings every 50 ms; b says nothing. */
	t0 = crun__now_ms();
	while (crun__now_ms() - t0 < 600) {
		struct rmsg r;

		send_frame(na.fd, CRUN_WIRE_PING, next_id++, 0, NULL, 0);
		pings++;
		while (!quiet(na.fd, 50)) {
			assert_int_equal(trecv(na.fd, &r), 0);
			if (r.m.type == CRUN_WIRE_VALUE) {
				pongs++;
			} else {
				char msg[256];

				assert_int_equal(r.m.type, CRUN_WIRE_RDZV_EVENT);
				assert_false(got_event);
				got_event = true;
				text(&r.m.items[1], msg, sizeof(msg));
				assert_string_equal(msg, "node 1 (host-b) left: no keep-alive for "
							 "200ms");
				text(&r.m.items[0], msg, sizeof(msg));
				assert_string_equal(msg, "left");
			}
			rmsg_finish(&r);
		}
	}
	assert_true(got_event);
	assert_int_equal(pongs, pings);
	/* b is told why before the close: an agent must be able to tell a
	 * store that dropped it from one that died. */
	want_error(&nb, 0, ETIMEDOUT, "no keep-alive for 200ms");
	assert_true(closed_by_server(nb.fd));
	node_close(&na);
	node_close(&nb);
	assert_int_equal(harness_stop(&h), 0);
}

/* A refused JOIN leaves the connection as it was: a member that sends a
 * second JOIN asking for a 100 ms keep-alive gets EALREADY and stays a
 * member although it then says nothing for 400 ms. */
static void test_refused_join_keeps_keepalive(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode na, nb;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	join_sync(&na);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	na.conf.keepalive_ms = 100;
	join(&na);
	want_error(&na, na.join_id, EALREADY, NULL);
	assert_true(quiet(nb.fd, 400));
	{
		uint32_t id = next_id++;
		struct rmsg r;

		send_frame(na.fd, CRUN_WIRE_PING, id, 0, NULL, 0);
		assert_int_equal(trecv(na.fd, &r), 0);
		assert_int_equal(r.m.type, CRUN_WIRE_VALUE);
		assert_int_equal(r.m.id, id);
		rmsg_finish(&r);
	}
	node_close(&na);
	node_close(&nb);
	assert_int_equal(harness_stop(&h), 0);
}

/* FAIL ends the round for every member with "failure" (counted); a FAIL
 * for an old round is a no-op; group ranks stay in first-join order
 * whatever the order of the rejoins. */
static void test_fail(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(3, 3, 0, 5000);
	struct crun__rdzv_assignment as[3];
	struct tnode n[3];
	const char *why = "rank 5 (local 1) on host-b exited with status 1";
	uint32_t id;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 2, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 2, &c);
	node_init(&n[2], h.port, "job", "c", "host-c", 2, &c);
	join_sync(&n[0]);
	join_sync(&n[1]);
	join(&n[2]);
	for (int i = 0; i < 3; i++) {
		want_assignment(&n[i], &as[i]);
		assert_int_equal(as[i].group_rank, i);
		crun__rdzv_assignment_finish(&as[i]);
	}
	id = send_round_msg(&n[1], CRUN_WIRE_RDZV_FAIL, 1, why);
	want_ok(&n[1], id);
	for (int i = 0; i < 3; i++)
		assert_int_equal(want_event(&n[i], 1, "failure", why), 1);
	/* Rejoin in reverse order: same ranks, round 2, one restart. */
	join_sync(&n[2]);
	join_sync(&n[1]);
	join(&n[0]);
	for (int i = 0; i < 3; i++) {
		want_assignment(&n[i], &as[i]);
		assert_int_equal(as[i].round, 2);
		assert_int_equal(as[i].restart_count, 1);
		assert_int_equal(as[i].group_rank, i);
		assert_int_equal(as[i].rank_offset, 2 * i);
		crun__rdzv_assignment_finish(&as[i]);
	}
	/* A late FAIL for round 1 changes nothing. */
	id = send_round_msg(&n[0], CRUN_WIRE_RDZV_FAIL, 1, "stale");
	want_ok(&n[0], id);
	for (int i = 0; i < 3; i++)
		assert_true(quiet(n[i].fd, 30));
	for (int i = 0; i < 3; i++)
		node_close(&n[i]);
	assert_int_equal(harness_stop(&h), 0);
}

/* A node that arrives while a round runs below max ends it with "join"
 * (not counted); the next round includes it and closes as soon as the
 * old members are back, without waiting for the last call. */
static void test_late_joiner(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 4, 300, 5000);
	struct crun__rdzv_assignment a, b, x;
	struct tnode na, nb, nx;
	uint64_t t0, dt;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	node_init(&nx, h.port, "job", "x", "host-x", 4, &c);
	join_sync(&na);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	join(&nx);
	assert_int_equal(want_event(&na, 1, "join", "node 'x' (host-x) is joining"), 0);
	assert_int_equal(want_event(&nb, 1, "join", NULL), 0);
	t0 = crun__now_ms();
	join_sync(&nb);
	join(&na);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	want_assignment(&nx, &x);
	dt = crun__now_ms() - t0;
	if (dt >= 250)
		fail_msg("round 2 took %llu ms: it waited for the last call",
			 (unsigned long long)dt);
	assert_same_nodes(&a, &x);
	assert_int_equal(a.round, 2);
	assert_int_equal(a.restart_count, 0);
	assert_int_equal(a.nnodes, 3);
	assert_int_equal(a.group_rank, 0);
	assert_int_equal(b.group_rank, 1);
	assert_int_equal(x.group_rank, 2);
	assert_int_equal(x.world_size, 6);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	crun__rdzv_assignment_finish(&x);
	node_close(&na);
	node_close(&nb);
	node_close(&nx);
	assert_int_equal(harness_stop(&h), 0);
}

/* At max, a new node waits (standby) and is in the next round; a node
 * that then finds the run at max again times out. */
static void test_standby(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b, s;
	struct tnode na, nb, ns;
	uint32_t id;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	node_init(&ns, h.port, "job", "s", "host-s", 1, &c);
	join_sync(&na);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	assert_int_equal(a.nnodes, 2);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	join_sync(&ns);
	assert_true(quiet(ns.fd, 50));
	assert_true(quiet(na.fd, 0));
	assert_true(quiet(nb.fd, 0));
	id = send_round_msg(&na, CRUN_WIRE_RDZV_FAIL, 1, "boom");
	want_ok(&na, id);
	assert_int_equal(want_event(&na, 1, "failure", "boom"), 1);
	assert_int_equal(want_event(&nb, 1, "failure", "boom"), 1);
	/* s is in round 2 already; a makes it full. */
	join(&na);
	want_assignment(&na, &a);
	want_assignment(&ns, &s);
	assert_same_nodes(&a, &s);
	assert_int_equal(a.round, 2);
	assert_int_equal(a.group_rank, 0);
	assert_int_equal(s.group_rank, 1);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&s);
	nb.conf.join_timeout_ms = 150;
	join(&nb);
	want_error(&nb, nb.join_id, ETIMEDOUT, "no round of run 'job' opened within 150ms");
	node_close(&na);
	node_close(&nb);
	node_close(&ns);
	assert_int_equal(harness_stop(&h), 0);
}

/* Restarts above max_restarts: "exhausted", the run is closed as failed. */
static void test_exhausted(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode na, nb, nc;
	uint32_t id;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	c.max_restarts = 1;
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	for (int round = 1; round <= 2; round++) {
		join(&na);
		join(&nb);
		want_assignment(&na, &a);
		want_assignment(&nb, &b);
		assert_int_equal(a.round, round);
		assert_int_equal(a.restart_count, round - 1);
		crun__rdzv_assignment_finish(&a);
		crun__rdzv_assignment_finish(&b);
		id = send_round_msg(&nb, CRUN_WIRE_RDZV_FAIL, round, "worker died");
		want_ok(&nb, id);
		if (round == 1) {
			assert_int_equal(want_event(&na, 1, "failure", "worker died"), 1);
			assert_int_equal(want_event(&nb, 1, "failure", "worker died"), 1);
		}
	}
	assert_int_equal(want_event(&na, 2, "exhausted", "--max-restarts 1"), 2);
	assert_int_equal(want_event(&nb, 2, "exhausted", "worker died"), 2);
	node_init(&nc, h.port, "job", "c", "host-c", 1, &c);
	join(&nc);
	want_error(&nc, nc.join_id, ESHUTDOWN, "run 'job' is closed: the job failed");
	join(&na);
	want_error(&na, na.join_id, ESHUTDOWN, "the job failed");
	node_close(&na);
	node_close(&nb);
	node_close(&nc);
	assert_int_equal(harness_stop(&h), 0);
}

/* A FAIL with "stop" (a failure that would only repeat) closes the run as
 * failed at once, with restarts left: every member hears "exhausted", the
 * message as the node sent it. */
static void test_fail_stop(void **state)
{
	static const char why[] = "rank 1 (local rank 0) on host-b exited with code 78; not "
				  "restarting: a configuration error";
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b;
	struct crun__wire_item it[2] = {its(why), its(CRUN_RDZV_FAIL_STOP)};
	struct tnode na, nb;
	uint32_t id = next_id++;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	join(&na);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	send_frame(nb.fd, CRUN_WIRE_RDZV_FAIL, id, 1, it, 2);
	want_ok(&nb, id);
	assert_int_equal(want_event(&na, 1, "exhausted", why), 1);
	assert_int_equal(want_event(&nb, 1, "exhausted", why), 1);
	join(&na);
	want_error(&na, na.join_id, ESHUTDOWN, "the job failed");
	node_close(&na);
	node_close(&nb);
	assert_int_equal(harness_stop(&h), 0);
}

/* DONE is a barrier: OK once every member sent it, then the run is
 * closed. A round that ends first cancels the DONE. */
static void test_done(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode na, nb, nc;
	uint32_t ida, idb;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	join(&na);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	/* a is done first, then b fails: a's DONE is cancelled. */
	ida = send_round_msg(&na, CRUN_WIRE_RDZV_DONE, 1, NULL);
	assert_true(quiet(na.fd, 50));
	idb = send_round_msg(&nb, CRUN_WIRE_RDZV_FAIL, 1, "rank 1 exited with status 3");
	want_ok(&nb, idb);
	assert_int_equal(want_event(&na, 1, "failure", NULL), 1);
	want_error(&na, ida, ECANCELED, "round 1 ended: failure: rank 1 exited with status 3");
	assert_int_equal(want_event(&nb, 1, "failure", NULL), 1);
	/* Round 2 finishes. */
	join(&na);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	assert_int_equal(a.round, 2);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	ida = send_round_msg(&na, CRUN_WIRE_RDZV_DONE, 1, NULL);
	want_error(&na, ida, ECANCELED, "round 1 ended");
	ida = send_round_msg(&na, CRUN_WIRE_RDZV_DONE, 2, NULL);
	assert_true(quiet(na.fd, 50));
	idb = send_round_msg(&nb, CRUN_WIRE_RDZV_DONE, 2, NULL);
	want_ok(&na, ida);
	want_ok(&nb, idb);
	/* The run is closed for everyone, but its keys still work. */
	node_init(&nc, h.port, "job", "c", "host-c", 1, &c);
	join(&nc);
	want_error(&nc, nc.join_id, ESHUTDOWN, "run 'job' is closed: the job has finished");
	key_roundtrip(&nc, "after", "close");
	/* Once no connection and no key is left, the run is forgotten. */
	node_close(&na);
	node_close(&nb);
	{
		struct crun__wire_item k = its("after");
		uint32_t id = next_id++;
		struct rmsg r;

		send_frame(nc.fd, CRUN_WIRE_DELETE, id, 0, &k, 1);
		assert_int_equal(trecv(nc.fd, &r), 0);
		assert_int_equal(r.m.type, CRUN_WIRE_INT);
		rmsg_finish(&r);
	}
	node_close(&nc);
	sleep_ms(50);
	c = conf_of(1, 1, 0, 5000);
	node_init(&nc, h.port, "job", "c", "host-c", 1, &c);
	join(&nc);
	want_assignment(&nc, &a);
	assert_int_equal(a.round, 1);
	crun__rdzv_assignment_finish(&a);
	node_close(&nc);
	assert_int_equal(harness_stop(&h), 0);
}

/* A node that sent DONE and then went is no failure: the barrier goes on
 * without it. DONE twice, or from a non-member, is refused. */
static void test_done_then_gone(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode na, nb, nd;
	uint32_t id;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	node_init(&nd, h.port, "job", "d", "host-d", 1, &c);
	join(&na);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	id = send_round_msg(&nd, CRUN_WIRE_RDZV_DONE, 1, NULL);
	want_error(&nd, id, EINVAL, "not a member of round 1");
	id = send_round_msg(&nd, CRUN_WIRE_RDZV_FAIL, 1, "not mine");
	want_error(&nd, id, EINVAL, "not a member of round 1");
	send_round_msg(&na, CRUN_WIRE_RDZV_DONE, 1, NULL);
	id = send_round_msg(&na, CRUN_WIRE_RDZV_DONE, 1, NULL);
	want_error(&na, id, EALREADY, "already sent DONE");
	node_close(&na);
	assert_true(quiet(nb.fd, 50));
	id = send_round_msg(&nb, CRUN_WIRE_RDZV_DONE, 1, NULL);
	want_ok(&nb, id);
	join(&nd);
	want_error(&nd, nd.join_id, ESHUTDOWN, "the job has finished");
	node_close(&nb);
	node_close(&nd);
	assert_int_equal(harness_stop(&h), 0);
}

/* Static ranks: group rank = node_rank whatever the join order; a rank
 * taken twice, a rank >= max and a dynamic node are refused. */
static void test_static_ranks(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode na, nb, nd, ne;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 3, &c);
	node_init(&nd, h.port, "job", "d", "host-d", 1, &c);
	node_init(&ne, h.port, "job", "e", "host-e", 1, &c);
	na.self.node_rank = 0;
	nb.self.node_rank = 1;
	nd.self.node_rank = 1;
	join(&nb);
	/* Rank 1 is b's. */
	join(&nd);
	want_error(&nd, nd.join_id, EINVAL, "node rank 1 is already taken by node 'b' (host-b)");
	/* Out of range: refused by the parser. */
	nd.self.node_rank = 2;
	join(&nd);
	want_error(&nd, nd.join_id, EINVAL, "node_rank 2 is out of range");
	/* A dynamic node in a static run. */
	join(&ne);
	want_error(&ne, ne.join_id, EINVAL, "no --node-rank given");
	join(&na);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	assert_int_equal(a.group_rank, 0);
	assert_int_equal(b.group_rank, 1);
	assert_int_equal(a.world_size, 4);
	assert_int_equal(b.rank_offset, 1);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	node_close(&na);
	node_close(&nb);
	node_close(&nd);
	node_close(&ne);
	assert_int_equal(harness_stop(&h), 0);
}

/* The first JOIN fixes the run's configuration; a JOIN that differs, a
 * malformed JOIN and a second JOIN on one connection are refused, and the
 * connection stays usable. */
static void test_config_errors(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 4, 1000, 5000);
	struct crun__wire_item items[CRUN_RDZV_JOIN_ITEMS];
	struct crun__wire_msg m;
	struct tnode na, nb;
	char scratch[CRUN_RDZV_JOIN_SCRATCH];

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	node_init(&nb, h.port, "job", "b", "host-b", 1, &c);
	join_sync(&na);
	nb.conf.max_nodes = 2;
	join(&nb);
	want_error(&nb, nb.join_id, EINVAL, "--nnodes 2 differs from the run's 2:4");
	nb.conf = c;
	nb.conf.max_restarts = 0;
	join(&nb);
	want_error(&nb, nb.join_id, EINVAL, "--max-restarts 0 differs from the run's 3");
	nb.conf = c;
	nb.conf.last_call_ms = 1500;
	join(&nb);
	want_error(&nb, nb.join_id, EINVAL, "last_call_timeout 1500ms differs from the run's 1s");
	nb.conf = c;
	/* nproc "x" */
	crun__rdzv_join_msg(&nb.self, &nb.conf, &m, items, scratch);
	items[3] = its("x");
	m.id = next_id++;
	send_msg(nb.fd, &m);
	want_error(&nb, m.id, EINVAL, "bad RDZV_JOIN: nproc is not a decimal integer");
	join(&na);
	want_error(&na, na.join_id, EALREADY, "already joined round 1");
	key_roundtrip(&nb, "still", "here");
	node_close(&na);
	node_close(&nb);
	assert_int_equal(harness_stop(&h), 0);
}

/* A JOIN with a node id that another connection holds is the same agent
 * reconnected: the old connection's joiner is told and dropped, the new
 * one takes its place. */
static void test_same_node_replaces(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a, b;
	struct tnode old, now, other;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&old, h.port, "job", "a", "host-a", 1, &c);
	node_init(&now, h.port, "job", "a", "host-a", 1, &c);
	node_init(&other, h.port, "job", "b", "host-b", 1, &c);
	join_sync(&old);
	join_sync(&now);
	want_error(&old, old.join_id, EEXIST, "node 'a' joined again on another connection");
	join(&other);
	want_assignment(&now, &a);
	want_assignment(&other, &b);
	assert_int_equal(a.nnodes, 2);
	assert_string_equal(a.nodes[a.group_rank].node_id, "a");
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	node_close(&old);
	node_close(&now);
	node_close(&other);
	assert_int_equal(harness_stop(&h), 0);
}

/* A JOIN has the exclusion items only when its conf says so; parsing
 * tells which form came. */
static void test_join_items(void **state)
{
	struct crun__rdzv_node self = {(char *)"a", (char *)"host-a", (char *)"", 2, -1}, node;
	struct crun__rdzv_conf c = conf_of(1, 2, 0, 5000), got;
	struct crun__wire_item items[CRUN_RDZV_JOIN_ITEMS];
	struct crun__wire_msg m;
	char scratch[CRUN_RDZV_JOIN_SCRATCH], err[160], why[160];

	(void)state;
	c.blacklist_failures = 3;
	c.blacklist_window_ms = 60000;
	c.cooldown_min_ms = 1000;
	c.cooldown_max_ms = 8000;
	crun__rdzv_join_msg(&self, &c, &m, items, scratch);
	assert_int_equal(m.count, CRUN_RDZV_JOIN_ITEMS_BASE);
	assert_int_equal(crun__wire_validate(&m, why, sizeof(why)), 0);
	assert_int_equal(crun__rdzv_parse_join(&m, &node, &got, err, sizeof(err)), 0);
	assert_false(got.has_exclusion);
	assert_int_equal(got.blacklist_failures, 0);
	assert_int_equal(got.max_restarts, 3);
	crun__rdzv_node_finish(&node);
	c.has_exclusion = true;
	crun__rdzv_join_msg(&self, &c, &m, items, scratch);
	assert_int_equal(m.count, CRUN_RDZV_JOIN_ITEMS);
	assert_int_equal(crun__wire_validate(&m, why, sizeof(why)), 0);
	assert_int_equal(crun__rdzv_parse_join(&m, &node, &got, err, sizeof(err)), 0);
	assert_true(got.has_exclusion);
	assert_int_equal(got.blacklist_failures, 3);
	assert_int_equal(got.blacklist_window_ms, 60000);
	assert_int_equal(got.cooldown_min_ms, 1000);
	assert_int_equal(got.cooldown_max_ms, 8000);
	crun__rdzv_node_finish(&node);
}

/* A RESUME carries the 14-item JOIN and the assignment the resumer
 * holds; the parser takes both back and refuses a resumer that is not the
 * member at the assignment's group rank. */
static void test_resume_items(void **state)
{
	struct crun__rdzv_node nodes[2] = {
		{(char *)"a", (char *)"host-a", (char *)"10.0.0.1", 2, 0},
		{(char *)"b", (char *)"host-b", (char *)"10.0.0.2", 3, 1}};
	struct crun__rdzv_assignment a = {
		.round = 4, .restart_count = 2, .group_rank = 1, .nnodes = 2, .nodes = nodes};
	struct crun__rdzv_node self = nodes[1], node;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000), got;
	struct crun__rdzv_assignment back;
	struct crun__wire_item items[CRUN_RDZV_RESUME_ITEMS(2)];
	struct crun__wire_msg m;
	char scratch[CRUN_RDZV_RESUME_SCRATCH(2)], err[200], why[160];

	(void)state;
	self.node_rank = -1;
	crun__rdzv_resume_msg(&self, &c, &a, 15000, &m, items, scratch);
	assert_int_equal(m.type, CRUN_WIRE_RDZV_RESUME);
	assert_int_equal(m.count, CRUN_RDZV_RESUME_ITEMS(2));
	assert_int_equal(crun__wire_validate(&m, why, sizeof(why)), 0);
	assert_int_equal(crun__rdzv_parse_resume(&m, &node, &got, &back, err, sizeof(err)), 0);
	assert_string_equal(node.node_id, "b");
	assert_int_equal(node.nproc, 3);
	assert_true(got.has_exclusion);
	assert_int_equal(got.join_timeout_ms, 15000);
	assert_int_equal(got.min_nodes, 2);
	assert_int_equal(back.round, 4);
	assert_int_equal(back.restart_count, 2);
	assert_int_equal(back.group_rank, 1);
	assert_int_equal(back.world_size, 5);
	assert_int_equal(back.rank_offset, 2);
	assert_string_equal(back.nodes[0].addr, "10.0.0.1");
	crun__rdzv_node_finish(&node);
	crun__rdzv_assignment_finish(&back);

	/* Not the member it names. */
	a.group_rank = 0;
	crun__rdzv_resume_msg(&self, &c, &a, 15000, &m, items, scratch);
	assert_int_equal(crun__rdzv_parse_resume(&m, &node, &got, &back, err, sizeof(err)),
			 -EPROTO);
	assert_non_null(strstr(err, "is not member 0 of round 4"));
	/* No wait. */
	a.group_rank = 1;
	crun__rdzv_resume_msg(&self, &c, &a, 0, &m, items, scratch);
	assert_int_equal(crun__wire_validate(&m, why, sizeof(why)), -EPROTO);
	/* An assignment cut short. */
	crun__rdzv_resume_msg(&self, &c, &a, 15000, &m, items, scratch);
	m.count -= 1;
	assert_int_equal(crun__rdzv_parse_resume(&m, &node, &got, &back, err, sizeof(err)),
			 -EPROTO);
}

/* ---- RDZV_RESUME --------------------------------------------------------- */

/* Sends a RESUME of the round n holds (a, n's own assignment) with
 * wait_ms; its id becomes n's JOIN id (the id of the round's events). */
static void resume(struct tnode *n, const struct crun__rdzv_assignment *a, int64_t wait_ms)
{
	struct crun__wire_item items[CRUN_RDZV_RESUME_ITEMS(4)];
	char scratch[CRUN_RDZV_RESUME_SCRATCH(4)];
	struct crun__wire_msg m;

	assert_true(a->nnodes <= 4);
	crun__rdzv_resume_msg(&n->self, &n->conf, a, wait_ms, &m, items, scratch);
	m.id = n->join_id = next_id++;
	send_msg(n->fd, &m);
}

/* n on a new connection to port (its old one closed). */
static void reconnect(struct tnode *n, int port, const char *run)
{
	node_close(n);
	n->fd = connect_run(port, run);
}

/* A round of the nodes in n (joined in that order) on a fresh store;
 * as[i] is node i's assignment. */
static void first_round(struct tnode *n, int count, struct crun__rdzv_assignment *as)
{
	for (int i = 0; i < count - 1; i++)
		join_sync(&n[i]);
	join(&n[count - 1]);
	for (int i = 0; i < count; i++) {
		want_assignment(&n[i], &as[i]);
		assert_int_equal(as[i].group_rank, i);
	}
}

static void finish_all(struct crun__rdzv_assignment *as, int count)
{
	for (int i = 0; i < count; i++)
		crun__rdzv_assignment_finish(&as[i]);
}

/* A store that restarted knows nothing of the run: the members' resumes
 * rebuild it; each is held until all are back, then every one gets the
 * assignment it holds (same round, same restart count) as the answer to
 * its RESUME, and the round goes on: its events carry the RESUME's id,
 * and the DONE barrier closes the run. */
static void test_resume_after_restart(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment as[2], back[2];
	struct tnode n[2];
	uint32_t ids[2];

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 2, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 3, &c);
	assert_true(last_flags & CRUN_WIRE_F_RDZV_RESUME);
	assert_false(last_flags & CRUN_WIRE_F_EMBEDDED);
	first_round(n, 2, as);
	assert_int_equal(harness_stop(&h), 0);

	assert_int_equal(harness_start(&h, 0, NULL), 0);
	reconnect(&n[1], h.port, "job");
	resume(&n[1], &as[1], 5000);
	assert_true(quiet(n[1].fd, 100));
	ids[1] = n[1].join_id;
	resume(&n[1], &as[1], 5000);
	want_error(&n[1], n[1].join_id, EALREADY, "this connection already resumed round 1");
	n[1].join_id = ids[1];
	reconnect(&n[0], h.port, "job");
	resume(&n[0], &as[0], 5000);
	for (int i = 0; i < 2; i++) {
		want_assignment(&n[i], &back[i]);
		assert_same_nodes(&back[i], &as[i]);
		assert_int_equal(back[i].group_rank, i);
		assert_int_equal(back[i].rank_offset, as[i].rank_offset);
	}
	finish_all(back, 2);
	/* The keys are the store's own business: they start empty. */
	key_roundtrip(&n[0], "rdzv/1/master", "10.0.0.1:29500");
	ids[1] = send_round_msg(&n[1], CRUN_WIRE_RDZV_DONE, 1, NULL);
	assert_true(quiet(n[1].fd, 50));
	ids[0] = send_round_msg(&n[0], CRUN_WIRE_RDZV_DONE, 1, NULL);
	want_ok(&n[0], ids[0]);
	want_ok(&n[1], ids[1]);
	/* Closed: a resume now gets ESHUTDOWN. */
	resume(&n[0], &as[0], 5000);
	want_error(&n[0], n[0].join_id, ESHUTDOWN, "run 'job' is closed: the job has finished");
	finish_all(as, 2);
	node_close(&n[0]);
	node_close(&n[1]);
	assert_int_equal(harness_stop(&h), 0);
}

/* A member that does not come back within the first resume's wait: the
 * round ends as if it had left (counted), the held resume gets ECANCELED
 * naming it, and the next JOINs make round 2 with one restart more. A
 * failure in a resumed round is a failure as in a running one. */
static void test_resume_missing(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment as[2], a, b;
	struct tnode n[2];
	uint64_t t0, dt;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	first_round(n, 2, as);
	assert_int_equal(harness_stop(&h), 0);

	assert_int_equal(harness_start(&h, 0, NULL), 0);
	reconnect(&n[0], h.port, "job");
	t0 = crun__now_ms();
	resume(&n[0], &as[0], 200);
	want_error(&n[0], n[0].join_id, ECANCELED,
		   "round 1 ended: node 1 (host-b) did not come back within 200ms after the store "
		   "restarted");
	dt = crun__now_ms() - t0;
	if (dt < 180 || dt > 3000)
		fail_msg("the resume was cancelled after %llu ms, expected about 200",
			 (unsigned long long)dt);
	/* Too late: the round is over. */
	reconnect(&n[1], h.port, "job");
	resume(&n[1], &as[1], 200);
	want_error(&n[1], n[1].join_id, ECANCELED, "round 1 ended: left: node 1 (host-b)");
	join(&n[0]);
	join(&n[1]);
	want_assignment(&n[0], &a);
	want_assignment(&n[1], &b);
	assert_int_equal(a.round, 2);
	assert_int_equal(a.restart_count, 1);
	assert_same_nodes(&a, &b);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	finish_all(as, 2);
	node_close(&n[0]);
	node_close(&n[1]);
	assert_int_equal(harness_stop(&h), 0);
}

/* Resumes that do not match the recovering round get ECANCELED saying
 * what differs; one of a higher round replaces it (the held resumes of
 * the lower one get ECANCELED); one whose sender is not the member it
 * names is malformed (EINVAL). */
static void test_resume_mismatch(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment as[2], a;
	struct tnode n[2], x;
	char *id;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	first_round(n, 2, as);
	assert_int_equal(harness_stop(&h), 0);

	assert_int_equal(harness_start(&h, 0, NULL), 0);
	reconnect(&n[0], h.port, "job");
	resume(&n[0], &as[0], 5000);
	reconnect(&n[1], h.port, "job");
	/* Another restart count. */
	as[1].restart_count = 4;
	resume(&n[1], &as[1], 5000);
	want_error(&n[1], n[1].join_id, ECANCELED,
		   "round 1 of run 'job' cannot be resumed: restart count 4 differs from the "
		   "run's 0");
	as[1].restart_count = 0;
	/* Another configuration. */
	n[1].conf.max_restarts = 7;
	resume(&n[1], &as[1], 5000);
	want_error(&n[1], n[1].join_id, ECANCELED, "--max-restarts 7 differs from the run's 3");
	n[1].conf.max_restarts = 3;
	/* Other members. */
	id = as[1].nodes[0].node_id;
	as[1].nodes[0].node_id = (char *)"z";
	resume(&n[1], &as[1], 5000);
	want_error(&n[1], n[1].join_id, ECANCELED, "node 0 is 'z'");
	as[1].nodes[0].node_id = id;
	/* Not the member it names. */
	as[1].group_rank = 0;
	resume(&n[1], &as[1], 5000);
	want_error(&n[1], n[1].join_id, EINVAL, "bad RDZV_RESUME: the resumer 'b'");
	as[1].group_rank = 1;
	/* A higher round replaces the recovering one. */
	as[1].round = 3;
	resume(&n[1], &as[1], 5000);
	want_error(&n[0], n[0].join_id, ECANCELED,
		   "round 1 ended: node 'b' (host-b) resumed round 3");
	/* A lower round than the recovering one is over. */
	resume(&n[0], &as[0], 5000);
	want_error(&n[0], n[0].join_id, ECANCELED, "the run is in round 3");
	as[0].round = 3;
	resume(&n[0], &as[0], 5000);
	want_assignment(&n[0], &a);
	assert_int_equal(a.round, 3);
	crun__rdzv_assignment_finish(&a);
	want_assignment(&n[1], &a);
	assert_int_equal(a.round, 3);
	crun__rdzv_assignment_finish(&a);
	/* A resume into a run whose first round is open with a joiner: the
	 * round it names is over. */
	node_init(&x, h.port, "other", "x", "host-x", 1, &c);
	join_sync(&x);
	node_close(&n[0]);
	n[0].fd = connect_run(h.port, "other");
	resume(&n[0], &as[0], 5000);
	want_error(&n[0], n[0].join_id, ECANCELED,
		   "round 3 ended: run 'other' is in round 1 (open)");
	finish_all(as, 2);
	node_close(&x);
	node_close(&n[0]);
	node_close(&n[1]);
	assert_int_equal(harness_stop(&h), 0);
}

/* A DONE held in a RECOVERING round belongs to the connection that sent
 * it: a member that resumes again on a new connection sends DONE again
 * (the barrier does not count the old one, and no answer goes to the new
 * connection under the old DONE's id); a round dropped for a higher one
 * answers held DONEs with ECANCELED, as it does held resumes. */
static void test_resume_held_done(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment as[2], a;
	struct tnode n[2];
	uint32_t old_done, old_join, ids[2];
	int old;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	first_round(n, 2, as);
	assert_int_equal(harness_stop(&h), 0);

	assert_int_equal(harness_start(&h, 0, NULL), 0);
	reconnect(&n[0], h.port, "job");
	resume(&n[0], &as[0], 5000);
	old_done = send_round_msg(&n[0], CRUN_WIRE_RDZV_DONE, 1, NULL);
	assert_true(quiet(n[0].fd, 50));
	old = n[0].fd;
	old_join = n[0].join_id;
	n[0].fd = connect_run(h.port, "job");
	resume(&n[0], &as[0], 5000);
	/* The old connection's resume is replaced; its DONE gets nothing. */
	{
		struct tnode o = n[0];

		o.fd = old;
		want_error(&o, old_join, EEXIST, "node 'a' resumed again on another connection");
		assert_true(quiet(old, 50));
	}
	close(old);
	reconnect(&n[1], h.port, "job");
	resume(&n[1], &as[1], 5000);
	for (int i = 0; i < 2; i++) {
		want_assignment(&n[i], &a);
		crun__rdzv_assignment_finish(&a);
	}
	/* Only b's DONE counts: the barrier waits for a's new one. */
	ids[1] = send_round_msg(&n[1], CRUN_WIRE_RDZV_DONE, 1, NULL);
	assert_true(quiet(n[0].fd, 100));
	assert_true(quiet(n[1].fd, 0));
	ids[0] = send_round_msg(&n[0], CRUN_WIRE_RDZV_DONE, 1, NULL);
	want_ok(&n[0], ids[0]);
	want_ok(&n[1], ids[1]);
	assert_int_equal(harness_stop(&h), 0);

	/* Another restart: a's resume and DONE are held when b resumes a
	 * higher round; both get ECANCELED. */
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	reconnect(&n[0], h.port, "job");
	resume(&n[0], &as[0], 5000);
	old_done = send_round_msg(&n[0], CRUN_WIRE_RDZV_DONE, 1, NULL);
	assert_true(quiet(n[0].fd, 50));
	reconnect(&n[1], h.port, "job");
	as[1].round = 3;
	resume(&n[1], &as[1], 5000);
	want_error(&n[0], n[0].join_id, ECANCELED,
		   "round 1 ended: node 'b' (host-b) resumed round 3");
	want_error(&n[0], old_done, ECANCELED, "round 1 ended: node 'b' (host-b) resumed round 3");
	assert_true(quiet(n[1].fd, 50));
	finish_all(as, 2);
	node_close(&n[0]);
	node_close(&n[1]);
	assert_int_equal(harness_stop(&h), 0);
}

/* The store did not restart: a member that lost its connection and
 * resumes on a new one takes its place and gets its assignment; the old
 * connection closing then ends nothing; events go to the RESUME's id. A
 * resume of a round that has ended, or into an OPEN round, is cancelled;
 * a DONE the member sent before it resumed counts no more. */
static void test_resume_live(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment as[2], a;
	struct tnode n[2];
	int old;
	uint32_t id, ida;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	first_round(n, 2, as);
	send_round_msg(&n[1], CRUN_WIRE_RDZV_DONE, 1, NULL);
	old = n[1].fd;
	n[1].fd = connect_run(h.port, "job");
	resume(&n[1], &as[1], 5000);
	want_assignment(&n[1], &a);
	assert_same_nodes(&a, &as[1]);
	assert_int_equal(a.group_rank, 1);
	crun__rdzv_assignment_finish(&a);
	close(old);
	assert_true(quiet(n[0].fd, 100));
	/* The old DONE was on the old connection: a fresh one is needed. */
	ida = send_round_msg(&n[0], CRUN_WIRE_RDZV_DONE, 1, NULL);
	assert_true(quiet(n[0].fd, 50));
	id = send_round_msg(&n[1], CRUN_WIRE_RDZV_FAIL, 1, "rank 1 failed");
	want_ok(&n[1], id);
	assert_int_equal(want_event(&n[0], 1, "failure", "rank 1 failed"), 1);
	want_error(&n[0], ida, ECANCELED, "round 1 ended: failure: rank 1 failed");
	assert_int_equal(want_event(&n[1], 1, "failure", "rank 1 failed"), 1);
	/* Round 1 is over. */
	resume(&n[0], &as[0], 5000);
	want_error(&n[0], n[0].join_id, ECANCELED, "round 1 ended: failure: rank 1 failed");
	finish_all(as, 2);
	node_close(&n[0]);
	node_close(&n[1]);
	assert_int_equal(harness_stop(&h), 0);
}

/* Members missing after the restart with no restarts left: the run closes
 * as failed; the held resume gets ESHUTDOWN saying why, later JOINs
 * too. */
static void test_resume_exhausted(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment as[2];
	struct tnode n[2];

	(void)state;
	c.max_restarts = 0;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	first_round(n, 2, as);
	assert_int_equal(harness_stop(&h), 0);

	assert_int_equal(harness_start(&h, 0, NULL), 0);
	reconnect(&n[0], h.port, "job");
	resume(&n[0], &as[0], 150);
	want_error(&n[0], n[0].join_id, ESHUTDOWN,
		   "run 'job' is closed: the job failed: node 1 (host-b) did not come back "
		   "within 150ms after the store restarted; no restarts left (--max-restarts 0)");
	join(&n[0]);
	want_error(&n[0], n[0].join_id, ESHUTDOWN, "the job failed");
	finish_all(as, 2);
	node_close(&n[0]);
	node_close(&n[1]);
	assert_int_equal(harness_stop(&h), 0);
}

/* JOINs while a round is being resumed: a node that is not a member waits
 * until the round runs again and then ends it with "join" (there is room
 * below max); the JOIN of a member (it gave up resuming) ends the round
 * at once, counted, and is in the next one. DONE and FAIL need a resume
 * first; a DONE sent by a held member counts once the round runs. */
static void test_resume_joins(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 3, 300, 5000);
	struct crun__rdzv_assignment as[2], a;
	struct tnode n[2], s;
	uint32_t id;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	first_round(n, 2, as);
	assert_int_equal(harness_stop(&h), 0);

	assert_int_equal(harness_start(&h, 0, NULL), 0);
	reconnect(&n[0], h.port, "job");
	resume(&n[0], &as[0], 5000);
	node_init(&s, h.port, "job", "s", "host-s", 1, &c);
	join_sync(&s);
	reconnect(&n[1], h.port, "job");
	id = send_round_msg(&n[1], CRUN_WIRE_RDZV_DONE, 1, NULL);
	want_error(&n[1], id, EINVAL, "send RDZV_RESUME first");
	resume(&n[1], &as[1], 5000);
	for (int i = 0; i < 2; i++) {
		want_assignment(&n[i], &a);
		assert_int_equal(a.round, 1);
		crun__rdzv_assignment_finish(&a);
		assert_int_equal(want_event(&n[i], 1, "join", "node 's' (host-s) is joining"), 0);
	}
	join(&n[0]);
	join(&n[1]);
	for (int i = 0; i < 2; i++) {
		want_assignment(&n[i], &a);
		assert_int_equal(a.round, 2);
		assert_int_equal(a.nnodes, 3);
		assert_int_equal(a.group_rank, i);
		crun__rdzv_assignment_finish(&a);
	}
	want_assignment(&s, &a);
	crun__rdzv_assignment_finish(&a);
	node_close(&s);
	assert_int_equal(harness_stop(&h), 0);

	/* A member joins instead of resuming. */
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	reconnect(&n[0], h.port, "job");
	resume(&n[0], &as[0], 5000);
	reconnect(&n[1], h.port, "job");
	join(&n[1]);
	want_error(&n[0], n[0].join_id, ECANCELED,
		   "round 1 ended: node 1 (host-b) joined again instead of resuming the round");
	join(&n[0]);
	want_assignment(&n[0], &a);
	assert_int_equal(a.round, 2);
	assert_int_equal(a.restart_count, 1);
	crun__rdzv_assignment_finish(&a);
	want_assignment(&n[1], &a);
	crun__rdzv_assignment_finish(&a);
	assert_int_equal(harness_stop(&h), 0);

	/* A held member's DONE counts once every member is back. */
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	reconnect(&n[0], h.port, "job");
	resume(&n[0], &as[0], 5000);
	id = send_round_msg(&n[0], CRUN_WIRE_RDZV_DONE, 1, NULL);
	assert_true(quiet(n[0].fd, 50));
	reconnect(&n[1], h.port, "job");
	resume(&n[1], &as[1], 5000);
	want_assignment(&n[0], &a);
	crun__rdzv_assignment_finish(&a);
	want_assignment(&n[1], &a);
	crun__rdzv_assignment_finish(&a);
	assert_true(quiet(n[0].fd, 50));
	send_round_msg(&n[1], CRUN_WIRE_RDZV_DONE, 1, NULL);
	want_ok(&n[0], id);
	want_ok(&n[1], next_id - 1);
	finish_all(as, 2);
	node_close(&n[0]);
	node_close(&n[1]);
	assert_int_equal(harness_stop(&h), 0);
}

/* The preamble: an embedded store says so; a store without the RESUME
 * capability (the old-store hook) refuses a RESUME as a protocol error. */
static void test_resume_flags(void **state)
{
	struct crun__rdzv_conf c = conf_of(1, 1, 0, 5000);
	struct crun__rdzv_node nodes[1] = {{(char *)"a", (char *)"host-a", (char *)"h", 1, 0}};
	struct crun__rdzv_assignment a = {.round = 1, .nnodes = 1, .nodes = nodes};
	struct crun__server_opts opts;
	struct harness h;
	struct tnode n;

	(void)state;
	harness_opts(&opts, NULL);
	opts.embedded = true;
	assert_int_equal(harness_start(&h, 0, &opts), 0);
	node_init(&n, h.port, "job", "a", "host-a", 1, &c);
	assert_true(last_flags & CRUN_WIRE_F_EMBEDDED);
	assert_true(last_flags & CRUN_WIRE_F_RDZV_RESUME);
	node_close(&n);
	assert_int_equal(harness_stop(&h), 0);

	assert_int_equal(setenv("CRUN_TEST_RDZV_OLD_STORE", "1", 1), 0);
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	assert_int_equal(unsetenv("CRUN_TEST_RDZV_OLD_STORE"), 0);
	node_init(&n, h.port, "job", "a", "host-a", 1, &c);
	assert_false(last_flags & CRUN_WIRE_F_RDZV_RESUME);
	resume(&n, &a, 5000);
	want_error(&n, n.join_id, EPROTO, "unexpected RDZV_RESUME");
	node_close(&n);
	assert_int_equal(harness_stop(&h), 0);
}

/* ---- a store with a journal ------------------------------------------------ */

/* A record for crun__journal_file_put: run id, state, round 4 with one
 * restart, --nnodes 2, members a and b (the nodes of these tests) when
 * running. */
static struct crun__journal_run record(const char *id, enum crun__journal_state st, int64_t wait_ms)
{
	struct crun__journal_run r = {
		.run_id = (uint8_t *)strdup(id),
		.run_id_len = strlen(id),
		.state = st,
		.round = 4,
		.restart_count = 1,
		.conf = conf_of(2, 2, 0, 0),
		.wait_ms = wait_ms,
	};
	const char *ids[2] = {"a", "b"}, *hosts[2] = {"host-a", "host-b"};

	r.conf.join_timeout_ms = 0;
	if (st != CRUN_JOURNAL_RUNNING)
		return r;
	r.members = calloc(2, sizeof(*r.members));
	assert_non_null(r.members);
	r.nmembers = 2;
	for (int i = 0; i < 2; i++) {
		r.members[i].node_id = strdup(ids[i]);
		r.members[i].host = strdup(hosts[i]);
		r.members[i].addr = strdup("127.0.0.1");
		r.members[i].nproc = 1;
		r.members[i].node_rank = -1;
	}
	return r;
}

/* The assignment node i of a record holds. */
static void held(const struct crun__journal_run *rec, int i, struct crun__rdzv_assignment *a)
{
	memset(a, 0, sizeof(*a));
	a->round = rec->round;
	a->restart_count = rec->restart_count;
	a->group_rank = i;
	a->nnodes = rec->nmembers;
	a->nodes = rec->members;
}

/* Whether the journal file in dir says this of run id now (read only:
 * the server's thread writes it); st -1: whether it has the run at all. */
static bool journal_says(const char *dir, const char *id, int st, int64_t round, int64_t restarts)
{
	struct crun__journal_run *runs;
	char path[128], err[512], text[65536];
	size_t n, len;
	bool yes = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, CRUN_JOURNAL_FILE);
	f = fopen(path, "r");
	assert_non_null(f);
	len = fread(text, 1, sizeof(text), f);
	fclose(f);
	if (crun__journal_decode(text, len, path, &runs, &n, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	for (size_t i = 0; i < n; i++) {
		const struct crun__journal_run *r = &runs[i];

		if (r->run_id_len == strlen(id) && !memcmp(r->run_id, id, r->run_id_len))
			yes = st < 0 || ((int)r->state == st && r->round == round &&
					 r->restart_count == restarts);
		crun__journal_run_finish(&runs[i]);
	}
	free(runs);
	return yes;
}

/* The journal's directory of test_journal_restore, removed by its
 * teardown whether the test passed or not. */
static char journal_dir[64];

static int remove_journal_dir(void **state)
{
	const char *names[2] = {CRUN_JOURNAL_FILE, CRUN_JOURNAL_LOCK};
	char path[128];

	(void)state;
	if (!journal_dir[0])
		return 0;
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", journal_dir, names[i]);
		unlink(path);
	}
	rmdir(journal_dir);
	journal_dir[0] = '\0';
	return 0;
}

/* A store restored from its journal: a run recorded running is resumed by
 * its members and goes on in the same round; a run recorded closed
 * refuses JOINs and resumes with ESHUTDOWN and answers a DONE of its last
 * round with OK; a run recorded running that no member resumes starts
 * afresh in round 1, nothing counted, when another node joins (with its
 * own settings) or when the recorded window passes (then the journal
 * forgets it); new rounds are recorded; a run the store forgets leaves the
 * journal. */
static void test_journal_restore(void **state)
{
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000), c1 = conf_of(1, 1, 0, 5000);
	static const char *const names[4] = {"job", "done", "lost", "gone"};
	struct crun__journal_run rec[4];
	struct crun__rdzv_assignment a[2], got;
	struct crun__journal_file *j;
	struct tnode n[2], x;
	struct harness h;
	const char *dir = journal_dir;
	char err[512];
	uint32_t id;
	int tries;

	(void)state;
	snprintf(journal_dir, sizeof(journal_dir), "/tmp/crun-round-XXXXXX");
	assert_non_null(mkdtemp(journal_dir));
	assert_int_equal(crun__journal_file_open(dir, &j, err, sizeof(err)), 0);
	rec[0] = record("job", CRUN_JOURNAL_RUNNING, 5000);
	rec[1] = record("done", CRUN_JOURNAL_FINISHED, 0);
	rec[2] = record("lost", CRUN_JOURNAL_RUNNING, 5000);
	rec[3] = record("gone", CRUN_JOURNAL_RUNNING, 200);
	for (int i = 0; i < 4; i++) {
		/* The journal takes its own copy; rec keeps the test's. */
		struct crun__journal_run copy = record(names[i], rec[i].state, rec[i].wait_ms);

		/* "gone": a job that allowed no restart. */
		if (i == 3)
			copy.conf.max_restarts = 0;
		crun__journal_file_put(j, &copy);
	}
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	crun__server_set_journal(h.srv, j);

	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	for (int i = 0; i < 2; i++) {
		held(&rec[0], i, &a[i]);
		resume(&n[i], &a[i], 5000);
	}
	for (int i = 0; i < 2; i++) {
		want_assignment(&n[i], &got);
		assert_int_equal(got.round, 4);
		assert_int_equal(got.restart_count, 1);
		assert_int_equal(got.group_rank, i);
		crun__rdzv_assignment_finish(&got);
	}
	/* A failure in the resumed round ends it: the journal has the run
	 * between rounds, in round 5 with two restarts. (That the store
	 * writes it before the events go out is not seen from here.) */
	id = send_round_msg(&n[0], CRUN_WIRE_RDZV_FAIL, 4, "boom");
	want_ok(&n[0], id);
	assert_int_equal(want_event(&n[0], 4, "failure", "boom"), 2);
	assert_int_equal(want_event(&n[1], 4, "failure", "boom"), 2);
	assert_true(journal_says(dir, "job", CRUN_JOURNAL_OPEN, 5, 2));
	join(&n[0]);
	join(&n[1]);
	for (int i = 0; i < 2; i++) {
		want_assignment(&n[i], &got);
		assert_int_equal(got.round, 5);
		crun__rdzv_assignment_finish(&got);
	}
	assert_true(journal_says(dir, "job", CRUN_JOURNAL_RUNNING, 5, 2));
	/* Both leave: the round ends, and the run, between rounds with no
	 * connection and no key, is forgotten by the store and the journal. */
	node_close(&n[0]);
	node_close(&n[1]);
	for (tries = 0; tries < 150 && journal_says(dir, "job", -1, 0, 0); tries++)
		sleep_ms(20);
	assert_int_equal(tries < 150, true);

	node_init(&x, h.port, "done", "x", "host-x", 1, &c);
	join(&x);
	want_error(&x, x.join_id, ESHUTDOWN, "run 'done' is closed: the job has finished");
	id = send_round_msg(&x, CRUN_WIRE_RDZV_DONE, 4, NULL);
	want_ok(&x, id);
	held(&rec[0], 0, &a[0]);
	x.self.node_id = (char *)"a";
	resume(&x, &a[0], 5000);
	want_error(&x, x.join_id, ESHUTDOWN, "the job has finished");
	node_close(&x);
	/* A closed run stays closed, in memory or not. */
	node_init(&x, h.port, "done", "y", "host-y", 1, &c);
	join(&x);
	want_error(&x, x.join_id, ESHUTDOWN, "run 'done' is closed: the job has finished");
	node_close(&x);
	assert_true(journal_says(dir, "done", CRUN_JOURNAL_FINISHED, 4, 1));

	/* A new job reuses the run id "lost" before any member resumed: its
	 * JOIN, with its own --nnodes, starts the run afresh (round 1, no
	 * restart); a member of the old job that resumes late is told its
	 * round is over. */
	node_init(&x, h.port, "lost", "x", "host-x", 1, &c1);
	join(&x);
	want_assignment(&x, &got);
	assert_int_equal(got.round, 1);
	assert_int_equal(got.restart_count, 0);
	assert_int_equal(got.nnodes, 1);
	crun__rdzv_assignment_finish(&got);
	assert_true(journal_says(dir, "lost", CRUN_JOURNAL_RUNNING, 1, 0));
	node_init(&n[0], h.port, "lost", "a", "host-a", 1, &c);
	held(&rec[2], 0, &a[0]);
	resume(&n[0], &a[0], 5000);
	want_error(&n[0], n[0].join_id, ECANCELED, "round 4 ended: run 'lost' is in round 1");
	node_close(&x);
	node_close(&n[0]);

	/* Nobody resumes "gone" (its job ended while the store was down):
	 * after the recorded 200 ms the journal forgets it, nothing is
	 * counted (the old job allowed no restart), and a new job's JOINs
	 * make round 1. */
	node_init(&x, h.port, "gone", "x", "host-x", 1, &c);
	id = send_round_msg(&x, CRUN_WIRE_RDZV_DONE, 4, NULL);
	want_error(&x, id, EINVAL, "send RDZV_RESUME first");
	for (tries = 0; tries < 150 && journal_says(dir, "gone", -1, 0, 0); tries++)
		sleep_ms(20);
	assert_int_equal(tries < 150, true);
	node_init(&n[0], h.port, "gone", "y", "host-y", 1, &c);
	n[0].conf.max_restarts = 0;
	x.conf.max_restarts = 0;
	join_sync(&x);
	join(&n[0]);
	want_assignment(&x, &got);
	assert_int_equal(got.round, 1);
	assert_int_equal(got.restart_count, 0);
	crun__rdzv_assignment_finish(&got);
	want_assignment(&n[0], &got);
	crun__rdzv_assignment_finish(&got);
	node_close(&x);
	node_close(&n[0]);

	/* A run in a round when the server stops, as crun-rdzvd stops it:
	 * the server's end forgets nothing. */
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	first_round(n, 2, a);
	finish_all(a, 2);
	assert_true(journal_says(dir, "job", CRUN_JOURNAL_RUNNING, 1, 0));
	crun__journal_file_stop(j);
	assert_int_equal(harness_stop(&h), 0);
	node_close(&n[0]);
	node_close(&n[1]);
	crun__journal_file_destroy(j);
	assert_true(journal_says(dir, "job", CRUN_JOURNAL_RUNNING, 1, 0));
	assert_true(journal_says(dir, "done", CRUN_JOURNAL_FINISHED, 4, 1));
	for (int i = 0; i < 4; i++)
		crun__journal_run_finish(&rec[i]);
}

/* Old (10-item JOIN) and new (14-item) agents share a run, whichever
 * comes first; only two JOINs that both carry exclusion settings are
 * compared on them. */
static void test_mixed_exclusion(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 3, 10000, 5000), old = c;
	struct crun__rdzv_assignment a;
	struct tnode n[3];

	(void)state;
	c.has_exclusion = true;
	c.blacklist_failures = 2;
	c.blacklist_window_ms = 60000;
	c.cooldown_min_ms = 300;
	c.cooldown_max_ms = 300;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	/* new first, then old: admitted; a new one that differs is not */
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &old);
	node_init(&n[2], h.port, "job", "c", "host-c", 1, &c);
	join_sync(&n[0]);
	join_sync(&n[1]);
	n[2].conf.blacklist_failures = 5;
	join(&n[2]);
	want_error(&n[2], n[2].join_id, EINVAL, "blacklist settings");
	n[2].conf = c;
	join(&n[2]);
	for (int i = 0; i < 3; i++) {
		want_assignment(&n[i], &a);
		assert_int_equal(a.nnodes, 3);
		crun__rdzv_assignment_finish(&a);
		node_close(&n[i]);
	}
	/* old first, then new: the new one's settings become the run's */
	node_init(&n[0], h.port, "job2", "a", "host-a", 1, &old);
	node_init(&n[1], h.port, "job2", "b", "host-b", 1, &c);
	node_init(&n[2], h.port, "job2", "c", "host-c", 1, &c);
	join_sync(&n[0]);
	join_sync(&n[1]);
	n[2].conf.cooldown_max_ms = 600;
	join(&n[2]);
	want_error(&n[2], n[2].join_id, EINVAL, "blacklist settings");
	n[2].conf = c;
	join(&n[2]);
	for (int i = 0; i < 3; i++) {
		want_assignment(&n[i], &a);
		assert_int_equal(a.nnodes, 3);
		crun__rdzv_assignment_finish(&a);
		node_close(&n[i]);
	}
	assert_int_equal(harness_stop(&h), 0);
}

/* A store advertises the exclusion capability in its preamble. Its test
 * hook CRUN_TEST_RDZV_OLD_STORE makes it a store that predates it: no
 * flag, and a 14-item JOIN or a 2-item FAIL is a protocol error, as an
 * older crun-rdzvd answers them; the 10-item forms work. */
static void test_old_store_hook(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 2, 0, 5000);
	struct crun__rdzv_assignment a;
	struct crun__wire_item it[2] = {its("b failed"), its(CRUN_RDZV_FAIL_STOP)};
	struct tnode n[2];
	uint32_t id = next_id++;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	assert_true(last_flags & CRUN_WIRE_F_RDZV_EXCL);
	node_close(&n[0]);
	assert_int_equal(harness_stop(&h), 0);

	assert_int_equal(setenv("CRUN_TEST_RDZV_OLD_STORE", "1", 1), 0);
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	assert_int_equal(unsetenv("CRUN_TEST_RDZV_OLD_STORE"), 0);
	c.has_exclusion = true;
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	assert_false(last_flags & CRUN_WIRE_F_RDZV_EXCL);
	join(&n[0]);
	want_error(&n[0], n[0].join_id, EPROTO, "RDZV_JOIN takes 10 to 10 items, got 14");
	node_close(&n[0]);
	c.has_exclusion = false;
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	join(&n[0]);
	join(&n[1]);
	for (int i = 0; i < 2; i++) {
		want_assignment(&n[i], &a);
		crun__rdzv_assignment_finish(&a);
	}
	send_frame(n[1].fd, CRUN_WIRE_RDZV_FAIL, id, 1, it, 2);
	want_error(&n[1], id, EPROTO, "RDZV_FAIL takes 1 to 1 items, got 2");
	node_close(&n[0]);
	node_close(&n[1]);
	assert_int_equal(harness_stop(&h), 0);
}

/* A node that fails twice (the limit) within the window is excluded: its
 * JOIN is held with an "excluded" event while the others run without it
 * (--nnodes 1:2), then, after the cool-down, it ends the running round as
 * a joining node and is in the next one. A failure of the other node
 * alone excludes nobody. */
static void test_excluded_node(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(1, 2, 10000, 5000);
	struct crun__rdzv_assignment as[2];
	struct tnode n[2];
	struct timespec t0, t1;
	uint32_t id;
	long ms;

	(void)state;
	c.blacklist_failures = 2;
	c.blacklist_window_ms = 60000;
	c.cooldown_min_ms = 300;
	c.cooldown_max_ms = 300;
	c.has_exclusion = true;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&n[0], h.port, "job", "a", "host-a", 1, &c);
	node_init(&n[1], h.port, "job", "b", "host-b", 1, &c);
	join_sync(&n[0]);
	join(&n[1]);
	for (int round = 1; round <= 2; round++) {
		for (int i = 0; i < 2; i++) {
			want_assignment(&n[i], &as[i]);
			assert_int_equal(as[i].round, round);
			assert_int_equal(as[i].nnodes, 2);
			crun__rdzv_assignment_finish(&as[i]);
		}
		id = send_round_msg(&n[1], CRUN_WIRE_RDZV_FAIL, round, "b failed");
		want_ok(&n[1], id);
		for (int i = 0; i < 2; i++)
			want_event(&n[i], round, "failure", "b failed");
		join_sync(&n[0]);
		join(&n[1]);
	}
	/* b failed twice: held; a runs round 3 alone. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	want_event(&n[1], 0, "excluded", "node 'b' (host-b) is excluded from run 'job' for");
	want_assignment(&n[0], &as[0]);
	assert_int_equal(as[0].round, 3);
	assert_int_equal(as[0].nnodes, 1);
	crun__rdzv_assignment_finish(&as[0]);
	/* After the cool-down b ends round 3 as a joining node. */
	want_event(&n[0], 3, "join", "node 'b' (host-b) is joining");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms >= 200 && ms < 3000);
	join(&n[0]);
	for (int i = 0; i < 2; i++) {
		want_assignment(&n[i], &as[i]);
		assert_int_equal(as[i].round, 4);
		assert_int_equal(as[i].nnodes, 2);
		crun__rdzv_assignment_finish(&as[i]);
	}
	/* One failure of a: not excluded. */
	id = send_round_msg(&n[0], CRUN_WIRE_RDZV_FAIL, 4, "a failed");
	want_ok(&n[0], id);
	for (int i = 0; i < 2; i++)
		want_event(&n[i], 4, "failure", "a failed");
	join_sync(&n[1]);
	join(&n[0]);
	for (int i = 0; i < 2; i++) {
		want_assignment(&n[i], &as[i]);
		assert_int_equal(as[i].round, 5);
		assert_int_equal(as[i].nnodes, 2);
		crun__rdzv_assignment_finish(&as[i]);
	}
	for (int i = 0; i < 2; i++)
		node_close(&n[i]);
	assert_int_equal(harness_stop(&h), 0);
}

/* Two runs on one server never see each other's rounds. */
static void test_two_runs(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c2 = conf_of(2, 2, 0, 5000), c1 = conf_of(1, 1, 0, 5000);
	struct crun__rdzv_assignment a, b, x;
	struct tnode na, nb, nx;
	uint32_t id;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job-1", "a", "host-a", 1, &c2);
	node_init(&nx, h.port, "job-2", "a", "host-a", 1, &c1); /* same id, other run */
	join(&na);
	join(&nx);
	want_assignment(&nx, &x);
	assert_int_equal(x.nnodes, 1);
	crun__rdzv_assignment_finish(&x);
	assert_true(quiet(na.fd, 30));
	node_init(&nb, h.port, "job-1", "b", "host-b", 1, &c2);
	join(&nb);
	want_assignment(&na, &a);
	want_assignment(&nb, &b);
	assert_int_equal(a.nnodes, 2);
	crun__rdzv_assignment_finish(&a);
	crun__rdzv_assignment_finish(&b);
	id = send_round_msg(&nx, CRUN_WIRE_RDZV_FAIL, 1, "job-2 only");
	want_ok(&nx, id);
	want_event(&nx, 1, "failure", "job-2 only");
	assert_true(quiet(na.fd, 30));
	assert_true(quiet(nb.fd, 0));
	node_close(&na);
	node_close(&nb);
	node_close(&nx);
	assert_int_equal(harness_stop(&h), 0);
}

/* Destroying the server with joiners waiting and timers armed frees
 * everything and closes every handle. */
static void test_destroy_busy(void **state)
{
	struct harness h;
	struct crun__rdzv_conf c = conf_of(2, 3, 5000, 5000);
	struct tnode na;

	(void)state;
	assert_int_equal(harness_start(&h, 0, NULL), 0);
	node_init(&na, h.port, "job", "a", "host-a", 1, &c);
	join(&na);
	assert_true(quiet(na.fd, 30));
	assert_int_equal(harness_stop(&h), 0);
	node_close(&na);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_nodes),
		cmocka_unit_test(test_last_call),
		cmocka_unit_test(test_left_and_join_timeout),
		cmocka_unit_test(test_keepalive),
		cmocka_unit_test(test_refused_join_keeps_keepalive),
		cmocka_unit_test(test_fail),
		cmocka_unit_test(test_late_joiner),
		cmocka_unit_test(test_standby),
		cmocka_unit_test(test_exhausted),
		cmocka_unit_test(test_fail_stop),
		cmocka_unit_test(test_done),
		cmocka_unit_test(test_done_then_gone),
		cmocka_unit_test(test_static_ranks),
		cmocka_unit_test(test_config_errors),
		cmocka_unit_test(test_same_node_replaces),
		cmocka_unit_test(test_excluded_node),
		cmocka_unit_test(test_join_items),
		cmocka_unit_test(test_resume_items),
		cmocka_unit_test(test_mixed_exclusion),
		cmocka_unit_test(test_old_store_hook),
		cmocka_unit_test(test_resume_after_restart),
		cmocka_unit_test(test_resume_missing),
		cmocka_unit_test(test_resume_mismatch),
		cmocka_unit_test(test_resume_live),
		cmocka_unit_test(test_resume_held_done),
		cmocka_unit_test(test_resume_exhausted),
		cmocka_unit_test(test_resume_joins),
		cmocka_unit_test(test_resume_flags),
		cmocka_unit_test_teardown(test_journal_restore, remove_journal_dir),
		cmocka_unit_test(test_two_runs),
		cmocka_unit_test(test_destroy_busy),
	};

	signal(SIGPIPE, SIG_IGN);
	crun__log_init("test_round", getenv("TEST_VERBOSE") ? CRUN_LOG_DEBUG : CRUN_LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

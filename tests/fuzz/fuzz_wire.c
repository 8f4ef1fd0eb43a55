/* Fuzz target for the wire codec. The input is what a peer sends on one
 * connection: when it starts with "CRUN" the first 8 bytes are the client
 * preamble, then frames. Frames are decoded as a stream, the way the server
 * reads them, and every property that must hold for hostile input is
 * checked; a violation aborts, which libFuzzer reports as a crash:
 *  - a decoded frame's size is within the input and within the cap;
 *  - one byte less than a whole frame is NEED_MORE (incremental decoding);
 *  - -ENOBUFS asks for more room than given, at most CRUN_WIRE_MAX_ITEMS,
 *    and after growing the store the frame decodes;
 *  - every refusal says why (err is set);
 *  - re-encoding a decoded frame gives the same bytes, which decode to the
 *    same message and validate the same way;
 *  - the handshake's steps (hello.h) answer every preamble and every valid
 *    frame, as the server's first frame and as the reply to a client's
 *    HELLO, with success or an error that says why;
 *  - a valid RDZV_JOIN or VALUES frame goes through the rendezvous parsers
 *    (rdzv.h): they accept or refuse with a reason, what they accept is
 *    within the documented ranges, and a parsed JOIN encodes back to a
 *    JOIN that parses to the same node and configuration. */
#include "fuzz.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/hello.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/wire.h"

#define MAX_PAYLOAD (1u << 20)

#define CHECK(cond)                                                                       \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "fuzz_wire: %s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                                         \
			abort();                                                          \
		}                                                                         \
	} while (0)

static void same_msg(const struct crun__wire_msg *a, const struct crun__wire_msg *b)
{
	CHECK(a->type == b->type);
	CHECK(a->flags == b->flags);
	CHECK(a->id == b->id);
	CHECK(a->num == b->num);
	CHECK(a->count == b->count);
	for (uint32_t i = 0; i < a->count; i++) {
		CHECK(a->items[i].len == b->items[i].len);
		CHECK(!a->items[i].len ||
		      !memcmp(a->items[i].data, b->items[i].data, a->items[i].len));
	}
}

static void preambles(const uint8_t *data, size_t size)
{
	uint8_t nonce[CRUN_WIRE_NONCE_LEN], out[CRUN_WIRE_SERVER_PREAMBLE];
	uint16_t version = 0, flags = 0;
	int rc;

	{
		char why[128] = "";
		long n = crun__hello_server_preamble(data, size, why, sizeof(why));

		CHECK(n == (size < CRUN_WIRE_CLIENT_PREAMBLE ? 0 : n < 0 ? n : 8));
		CHECK(n >= 0 || why[0]);
	}
	if (size >= CRUN_WIRE_CLIENT_PREAMBLE) {
		rc = crun__wire_parse_client_preamble(data, &version);
		CHECK(rc == 0 || rc == -EPROTO || rc == -EPROTONOSUPPORT);
		CHECK((rc == 0) == !memcmp(data, "CRUN\0\1\0\0", 8));
		if (rc == 0) {
			crun__wire_client_preamble(out);
			CHECK(!memcmp(out, data, CRUN_WIRE_CLIENT_PREAMBLE));
		}
	}
	if (size >= CRUN_WIRE_SERVER_PREAMBLE) {
		rc = crun__wire_parse_server_preamble(data, &version, &flags, nonce);
		CHECK(rc == 0 || rc == -EPROTO || rc == -EPROTONOSUPPORT);
		if (rc == 0) {
			crun__wire_server_preamble(out, flags, nonce);
			CHECK(!memcmp(out, data, CRUN_WIRE_SERVER_PREAMBLE));
		}
	}
}

/* A valid frame as the first one a server reads, and as the reply to a
 * client's HELLO: each step accepts or says why. */
static void handshake(const struct crun__wire_msg *msg)
{
	static const uint8_t snonce[CRUN_WIRE_NONCE_LEN] = {7};
	static const uint8_t cnonce[CRUN_WIRE_NONCE_LEN] = {9};
	const struct crun__hello_server hs = {"token", 5, snonce, 4096};
	uint8_t pre[CRUN_WIRE_SERVER_PREAMBLE], mac[CRUN_WIRE_MAC_LEN];
	struct crun__hello_client h;
	struct crun__wire_msg hello;
	struct crun__wire_item reply;
	char why[256] = "";
	int rc;

	if (crun__wire_is_request(msg->type)) {
		rc = crun__hello_server_hello(&hs, msg, mac, &reply, why, sizeof(why));
		CHECK(rc == 0 || why[0]);
		CHECK(rc < 0 || msg->type == CRUN_WIRE_HELLO);
		CHECK(reply.len == (rc == 0 ? CRUN_WIRE_MAC_LEN : 0));
		return;
	}
	if (crun__hello_client_init(&h, "run", "token", 5) < 0)
		return;
	crun__hello_client_begin(&h, "peer");
	crun__wire_server_preamble(pre, CRUN_WIRE_F_AUTH | CRUN_WIRE_F_AUTH_RUN, snonce);
	CHECK(crun__hello_client_preamble(&h, pre, sizeof(pre), cnonce, msg->id, &hello, why,
					  sizeof(why)) == CRUN_WIRE_SERVER_PREAMBLE);
	why[0] = '\0';
	rc = crun__hello_client_reply(&h, msg, why, sizeof(why));
	/* Only an OK with this token's mac gets through; an ERROR may say
	 * nothing. */
	if (rc == 0) {
		CHECK(crun__wire_mac_run("token", 5, "server", cnonce, snonce, "run", 3, mac) == 0);
		CHECK(msg->type == CRUN_WIRE_OK && msg->count >= 1);
		CHECK(msg->items[0].len == CRUN_WIRE_MAC_LEN &&
		      !memcmp(msg->items[0].data, mac, CRUN_WIRE_MAC_LEN));
	}
	CHECK(rc == 0 || why[0] || msg->type == CRUN_WIRE_ERROR);
	crun__hello_client_finish(&h);
}

/* Re-encodes a decoded frame and checks it is the same frame. */
static void reencode(const struct crun__wire_msg *msg, const uint8_t *frame, size_t frame_len,
		     int vrc)
{
	struct crun__wire_item *store = NULL;
	struct crun__wire_msg again;
	uint32_t cap = msg->count;
	char err[256];
	size_t n = crun__wire_encoded_size(msg);
	uint8_t *buf;
	long rc;

	CHECK(n == frame_len);
	buf = malloc(n);
	CHECK(buf);
	CHECK(crun__wire_encode(msg, buf) == n);
	CHECK(!memcmp(buf, frame, n));
	if (cap) {
		store = calloc(cap, sizeof(*store));
		CHECK(store);
	}
	rc = crun__wire_decode(buf, n, MAX_PAYLOAD, &again, store, &cap, err, sizeof(err));
	CHECK(rc == (long)n);
	same_msg(msg, &again);
	CHECK(crun__wire_validate(&again, err, sizeof(err)) == vrc);
	free(store);
	free(buf);
}

static void rdzv_join(const struct crun__wire_msg *msg)
{
	struct crun__wire_item items[CRUN_RDZV_JOIN_ITEMS];
	struct crun__rdzv_node node, node2;
	struct crun__rdzv_conf conf, conf2;
	struct crun__wire_msg again;
	char err[256] = "", scratch[160];
	int rc = crun__rdzv_parse_join(msg, &node, &conf, err, sizeof(err));

	CHECK(rc == 0 || rc == -EPROTO);
	if (rc < 0) {
		CHECK(err[0]);
		return;
	}
	CHECK(node.node_id[0] && node.host[0]);
	CHECK(node.nproc >= 1 && node.nproc <= CRUN_RDZV_MAX_NPROC);
	CHECK(conf.min_nodes >= 1 && conf.min_nodes <= conf.max_nodes);
	CHECK(conf.max_nodes <= CRUN_RDZV_MAX_NODES);
	CHECK(node.node_rank >= -1 && node.node_rank < conf.max_nodes);
	CHECK(conf.join_timeout_ms > 0 && conf.last_call_ms >= 0 && conf.keepalive_ms >= 0);
	CHECK(conf.max_restarts >= 0);
	crun__rdzv_join_msg(&node, &conf, &again, items, scratch);
	CHECK(crun__rdzv_parse_join(&again, &node2, &conf2, err, sizeof(err)) == 0);
	CHECK(!strcmp(node.node_id, node2.node_id) && !strcmp(node.host, node2.host) &&
	      !strcmp(node.addr, node2.addr));
	CHECK(node.nproc == node2.nproc && node.node_rank == node2.node_rank);
	CHECK(!memcmp(&conf, &conf2, sizeof(conf)));
	crun__rdzv_node_finish(&node2);
	crun__rdzv_node_finish(&node);
}

static void rdzv_assignment(const struct crun__wire_msg *msg)
{
	struct crun__rdzv_assignment a;
	char err[256] = "";
	int rc = crun__rdzv_parse_assignment(msg, &a, err, sizeof(err));
	int sum = 0;

	CHECK(rc == 0 || rc == -EPROTO);
	if (rc < 0) {
		CHECK(err[0]);
		CHECK(!a.nodes);
		return;
	}
	CHECK(a.nnodes >= 1 && a.group_rank >= 0 && a.group_rank < a.nnodes);
	for (int i = 0; i < a.nnodes; i++) {
		CHECK(a.nodes[i].nproc >= 1 && a.nodes[i].node_rank == i);
		CHECK(a.nodes[i].node_id[0] && a.nodes[i].host[0] && a.nodes[i].addr[0]);
		if (i == a.group_rank)
			CHECK(sum == a.rank_offset);
		sum += a.nodes[i].nproc;
	}
	CHECK(sum == a.world_size);
	crun__rdzv_assignment_finish(&a);
}

static void frames(const uint8_t *data, size_t size)
{
	struct crun__wire_item *store;
	struct crun__wire_msg msg;
	uint32_t cap = 4;
	size_t off = 0;
	char err[256];

	store = calloc(cap, sizeof(*store));
	CHECK(store);
	while (off < size) {
		const uint8_t *p = data + off;
		size_t left = size - off;
		uint32_t want = cap;
		long rc;
		int vrc;

		err[0] = '\0';
		rc = crun__wire_decode(p, left, MAX_PAYLOAD, &msg, store, &want, err, sizeof(err));
		if (rc == -ENOBUFS) {
			struct crun__wire_item *grown;

			CHECK(err[0]);
			CHECK(want > cap && want <= CRUN_WIRE_MAX_ITEMS);
			grown = realloc(store, want * sizeof(*store));
			CHECK(grown);
			store = grown;
			cap = want;
			rc = crun__wire_decode(p, left, MAX_PAYLOAD, &msg, store, &want, err,
					       sizeof(err));
			CHECK(rc != -ENOBUFS);
		}
		if (rc == CRUN_WIRE_NEED_MORE)
			break;
		if (rc < 0) {
			CHECK(rc == -EPROTO || rc == -EMSGSIZE);
			CHECK(err[0]);
			break;
		}
		CHECK((size_t)rc <= left);
		CHECK((size_t)rc >= CRUN_WIRE_HEADER_LEN + CRUN_WIRE_PAYLOAD_MIN);
		CHECK((size_t)rc - CRUN_WIRE_HEADER_LEN <= MAX_PAYLOAD);
		CHECK(msg.count <= cap);
		CHECK(msg.count == 0 || msg.items == store);
		/* A frame is never decoded from fewer bytes than it has. */
		{
			struct crun__wire_msg part;
			uint32_t pcap = cap;

			CHECK(crun__wire_decode(p, (size_t)rc - 1, MAX_PAYLOAD, &part, store, &pcap,
						err, sizeof(err)) == CRUN_WIRE_NEED_MORE);
		}
		(void)crun__wire_type_name(msg.type);
		CHECK(crun__wire_is_request(msg.type) != crun__wire_is_reply(msg.type));
		err[0] = '\0';
		vrc = crun__wire_validate(&msg, err, sizeof(err));
		CHECK(vrc == 0 || vrc == -EPROTO);
		CHECK(vrc == 0 || err[0]);
		reencode(&msg, p, (size_t)rc, vrc);
		if (vrc == 0)
			handshake(&msg);
		if (vrc == 0 && msg.type == CRUN_WIRE_RDZV_JOIN)
			rdzv_join(&msg);
		if (vrc == 0 && msg.type == CRUN_WIRE_VALUES)
			rdzv_assignment(&msg);
		off += (size_t)rc;
	}
	free(store);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	preambles(data, size);
	if (size >= CRUN_WIRE_CLIENT_PREAMBLE && !memcmp(data, CRUN_WIRE_MAGIC, 4))
		frames(data + CRUN_WIRE_CLIENT_PREAMBLE, size - CRUN_WIRE_CLIENT_PREAMBLE);
	else
		frames(data, size);
	return 0;
}

/* The agent's side of the multi-node rendezvous (rendezvous/rdzv.h).
 *
 * Why it is shaped this way:
 * - One store client (aclient.h) on the agent's loop carries everything:
 *   JOIN, the MASTER_ADDR key, FAIL, DONE, the nodes' step summaries,
 *   keep-alives and the pushed RDZV_EVENTs. When this agent hosts the store, the server runs on the
 *   same loop and the client connects to it over TCP like every other
 *   agent, so that every node takes one code path.
 * - Every request remembers the generation (one per join) it belongs to; a
 *   reply of an earlier generation, such as the MASTER_ADDR of a round
 *   that ended meanwhile, is dropped, so a stale answer never moves the
 *   group.
 * - A request that fails because the connection was lost is ignored here:
 *   the client reports LOST right after failing its requests, and that one
 *   event says what happened.
 * - A member of a running round that loses a standalone store by a
 *   closed connection resumes the round on a new connection (RDZV_RESUME)
 *   while its workers run on; store_loss.h decides which loss is which.
 *   Its FAIL and DONE of the round are kept until the next join and sent
 *   again after a resume: a store that restarted without a journal knows
 *   neither, and one that had them ended the round (the resume is then
 *   refused) or answers the DONE again.
 * - This file only talks to the store and hands what it hears to its
 *   owner's hooks; group.c decides what it means for the workers. */
#include "agent/rendezvous.h"
#include "agent/agent_store.h"
#include "agent/store_loss.h"
#include "common/log.h"
#include "common/util.h"
#include "rendezvous/aclient.h"
#include "rendezvous/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

enum req_kind {
	REQ_JOIN,
	REQ_SET_MASTER,
	REQ_GET_MASTER,
	REQ_FAIL,
	REQ_DONE,
	REQ_SET_STEPS,
	REQ_DEL_STEPS,
	REQ_GET_STEPS,
	REQ_GET_ONE_STEPS,
	REQ_RESUME,
	REQ_SET_STATUS,
};

/* The GETs of one crun__rdzv_fetch_steps, one per other node: cb runs
 * when the last reply is in. Freed then, or with the last of them. */
struct steps_fetch {
	crun__rdzv_steps_cb cb;
	void *arg;
	uint32_t n, pending;
	int status; /* the first error */
	char message[160];
	struct crun__wire_item *vals; /* n, data malloc'd; empty: none */
};

struct rdzv_req {
	struct rdzv_req *next, *prev;
	struct agent_rdzv *r;
	enum req_kind kind;
	uint64_t gen;
	int64_t round;
	crun__rdzv_steps_cb steps_cb; /* REQ_GET_STEPS */
	void *steps_arg;
	struct steps_fetch *fetch; /* REQ_GET_ONE_STEPS, for value index */
	uint32_t index;
};

static void set_error(struct agent_rdzv *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void set_error(struct agent_rdzv *r, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	free(r->error_msg);
	r->error_msg = s ? s : strdup("rendezvous failed (out of memory)");
}

static void item_str(const struct crun__wire_item *it, char *buf, size_t len)
{
	size_t n = it->len < len - 1 ? it->len : len - 1;

	for (size_t i = 0; i < n; i++) {
		uint8_t b = it->data[i];
		buf[i] = b >= 0x20 && b < 0x7f ? (char)b : '?';
	}
	buf[n] = '\0';
}

static struct crun__wire_item str_item(const char *s)
{
	struct crun__wire_item it = {(const uint8_t *)s, (uint32_t)strlen(s)};

	return it;
}

/* ---- local addresses and hosting ---------------------------------------- */

static bool sockaddr_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

static bool same_addr(const struct sockaddr *x, const struct sockaddr *y)
{
	if (x->sa_family != y->sa_family)
		return false;
	if (x->sa_family == AF_INET)
		return ((const struct sockaddr_in *)x)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)y)->sin_addr.s_addr;
	if (x->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)x)->sin6_addr,
			       &((const struct sockaddr_in6 *)y)->sin6_addr,
			       sizeof(struct in6_addr));
	return false;
}

/* True when host names this machine: localhost or a loopback address, its
 * host name, or a name or address that is one of its interfaces'. */
static bool host_is_local(const char *host, const char *hostname)
{
	struct addrinfo hints, *res = NULL;
	uv_interface_address_t *ifs = NULL;
	size_t short_len = strcspn(hostname, ".");
	int nifs = 0;
	bool local = false;

	if (crun__addr_is_loopback(host) || !strcasecmp(host, hostname))
		return true;
	/* "node0" (as scontrol show hostnames prints it) on "node0.cluster" */
	if (!strncasecmp(host, hostname, short_len) && host[short_len] == '\0')
		return true;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(host, NULL, &hints, &res) != 0)
		return false;
	if (uv_interface_addresses(&ifs, &nifs) < 0)
		nifs = 0;
	for (struct addrinfo *ai = res; ai && !local; ai = ai->ai_next) {
		if (sockaddr_loopback(ai->ai_addr)) {
			local = true;
			break;
		}
		for (int i = 0; i < nifs && !local; i++)
			local = same_addr(ai->ai_addr, (const struct sockaddr *)&ifs[i].address);
	}
	if (ifs)
		uv_free_interface_addresses(ifs, nifs);
	freeaddrinfo(res);
	return local;
}

static void server_freed(void *arg)
{
	(void)arg;
}

/* Binds the endpoint: an address as given, localhost as 127.0.0.1, a name
 * on the wildcard address (a host's name may resolve to another of its
 * addresses, such as Debian's 127.0.1.1, than the one other nodes reach);
 * with is_host=1 an address that is not this machine's (a floating
 * address, NAT) on the wildcard too. Returns 0, -EADDRINUSE (someone
 * serves it already) or another error (printed). */
static int host_store(struct agent_rdzv *r, bool forced, struct crun__server **server)
{
	const struct crun__agent_spec *spec = r->spec;
	const char *host = spec->rdzv.host;
	const char *cand[3];
	struct crun__server_opts opts;
	char err[256] = "";
	int n = 0, rc = -EINVAL;

	if (!strcasecmp(host, "localhost"))
		cand[n++] = "127.0.0.1";
	else if (crun__addr_is_literal(host))
		cand[n++] = host;
	if (!n || (forced && strcmp(cand[0], "127.0.0.1"))) {
		cand[n++] = "::";
		cand[n++] = "0.0.0.0";
	}
	memset(&opts, 0, sizeof(opts));
	crun__server_limits_default(&opts.limits);
	opts.token = spec->token;
	opts.token_len = spec->token_len;
	opts.quiet = true;
	opts.embedded = true;
	opts.token_hint = "--rdzv-conf token_file=FILE";
	/* Group rank 0's workers may use it as their agent store. */
	opts.tcpstore = spec->agent_store;
	if (spec->agent_store)
		crun__agent_store_limits(&opts.limits, spec->nnodes * spec->nproc_per_node);
	for (int i = 0; i < n; i++) {
		*server = crun__server_create(r->loop, &opts);
		if (!*server) {
			crun__error("cannot create the store server: %s", strerror(ENOMEM));
			return -ENOMEM;
		}
		rc = crun__server_listen(*server, cand[i], spec->rdzv.port, err, sizeof(err));
		if (rc == 0) {
			crun__info("hosting the rendezvous store of run '%s' on '%s'", spec->run_id,
				   r->endpoint);
			r->hosting = true;
			r->hosted = *server;
			return 0;
		}
		crun__server_destroy(*server, server_freed, NULL);
		*server = NULL;
		if (rc == -EADDRINUSE)
			return rc;
		if (rc != -EADDRNOTAVAIL && rc != -EAFNOSUPPORT)
			break;
	}
	crun__error("cannot host the rendezvous store on '%s': %s", r->endpoint,
		    err[0] ? err : strerror(-rc));
	return rc;
}

/* ---- requests ----------------------------------------------------------- */

static void on_reply(struct crun__aclient *c, int status, const char *message,
		     const struct crun__wire_msg *reply, void *arg);
static void got_steps(struct agent_rdzv *r, const struct rdzv_req *q, bool stale, int status,
		      const char *message, const struct crun__wire_msg *reply);
static void got_one_steps(const struct rdzv_req *q, bool stale, int status, const char *message,
			  const struct crun__wire_msg *reply);
static void fetch_free(struct steps_fetch *f);

static void req_unlink(struct agent_rdzv *r, struct rdzv_req *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else
		r->reqs = q->next;
	if (q->next)
		q->next->prev = q->prev;
}

static int send_req_cb(struct agent_rdzv *r, enum req_kind kind, const struct crun__wire_msg *m,
		       uint32_t *id, crun__rdzv_steps_cb cb, void *cb_arg)
{
	struct rdzv_req *q = calloc(1, sizeof(*q));
	int rc;

	if (!q)
		return -ENOMEM;
	q->r = r;
	q->steps_cb = cb;
	q->steps_arg = cb_arg;
	q->kind = kind;
	q->gen = r->gen;
	q->round = r->assigned ? r->asg.round : 0;
	rc = crun__aclient_request(r->client, m, 0, on_reply, q, id);
	if (rc < 0) {
		free(q);
		return rc;
	}
	q->next = r->reqs;
	if (q->next)
		q->next->prev = q;
	r->reqs = q;
	return 0;
}

static int send_req(struct agent_rdzv *r, enum req_kind kind, const struct crun__wire_msg *m,
		    uint32_t *id)
{
	return send_req_cb(r, kind, m, id, NULL, NULL);
}

/* This node and its settings, as a JOIN and a RESUME carry them. */
static void join_parts(struct agent_rdzv *r, struct crun__rdzv_node *self,
		       struct crun__rdzv_conf *conf)
{
	const struct crun__agent_spec *spec = r->spec;

	*self = (struct crun__rdzv_node){
		.node_id = r->node_id,
		.host = r->hostname,
		.addr = r->self_addr,
		.nproc = spec->nproc_per_node,
		.node_rank = spec->node_rank,
	};
	*conf = (struct crun__rdzv_conf){
		.min_nodes = spec->rdzv.min_nodes,
		.max_nodes = spec->rdzv.max_nodes,
		.join_timeout_ms = spec->rdzv.join_timeout_ms,
		.last_call_ms = spec->rdzv.last_call_timeout_ms,
		.keepalive_ms =
			spec->rdzv.keep_alive_interval_ms * spec->rdzv.keep_alive_max_attempt,
		.max_restarts = spec->max_restarts,
		.blacklist_failures = spec->rdzv.blacklist_failures,
		.blacklist_window_ms = spec->rdzv.blacklist_window_ms,
		.cooldown_min_ms = spec->rdzv.cooldown_min_ms,
		.cooldown_max_ms = spec->rdzv.cooldown_max_ms,
		/* An older store refuses the exclusion items: it has none. */
		.has_exclusion = (r->store_flags & CRUN_WIRE_F_RDZV_EXCL) != 0,
	};
}

static int send_join(struct agent_rdzv *r)
{
	const struct crun__agent_spec *spec = r->spec;
	struct crun__rdzv_node self;
	struct crun__rdzv_conf conf;
	struct crun__wire_item items[CRUN_RDZV_JOIN_ITEMS];
	struct crun__wire_msg m;
	char scratch[CRUN_RDZV_JOIN_SCRATCH];
	int rc;

	r->join_wanted = false;
	join_parts(r, &self, &conf);
	crun__rdzv_join_msg(&self, &conf, &m, items, scratch);
	rc = send_req(r, REQ_JOIN, &m, &r->join_id);
	if (rc == -ENOTCONN)
		return 0; /* the store is lost: LOST says so */
	if (rc < 0)
		set_error(r, "cannot join run '%s' at '%s': %s", spec->run_id, r->endpoint,
			  strerror(-rc));
	return rc;
}

static int start_client(struct agent_rdzv *r, int64_t connect_timeout_ms);

/* After a loss: a new client, connecting for what is left of the rejoin
 * timeout. The node id stays: a store that has not noticed the old
 * connection's end yet drops it when the JOIN comes on the new one. */
static int reconnect(struct agent_rdzv *r)
{
	uint64_t now = uv_now(r->loop);
	char t[24];
	int rc;

	if (now >= r->rejoin_by) {
		set_error(r, "cannot rejoin run '%s' at '%s' within %s; giving up", r->spec->run_id,
			  r->endpoint,
			  crun__rdzv_format_ms(r->spec->rdzv.rejoin_timeout_ms, t, sizeof(t)));
		return -ETIMEDOUT;
	}
	crun__aclient_destroy(r->client);
	r->client = NULL;
	r->lost = false;
	/* The rejoin timer, not the connect timeout, says when to give up. */
	rc = start_client(r, (int64_t)(r->rejoin_by - now) + 1000);
	if (rc < 0)
		set_error(r, "cannot rejoin run '%s' at '%s': %s", r->spec->run_id, r->endpoint,
			  strerror(-rc));
	return rc;
}

int crun__rdzv_join(struct agent_rdzv *r)
{
	int rc;

	r->gen++;
	r->join_ms = crun__wall_ms();
	if (r->assigned) {
		crun__rdzv_assignment_finish(&r->asg);
		r->assigned = false;
	}
	r->ended = false;
	r->placed = false;
	free(r->fail_msg);
	r->fail_msg = NULL;
	r->done_sent = false;
	r->done_closed = false;
	if (r->lost) {
		rc = reconnect(r);
		if (rc < 0)
			return rc;
	}
	if (!r->connected) {
		r->join_wanted = true;
		return 0;
	}
	return send_join(r);
}

static void send_fail(struct agent_rdzv *r)
{
	struct crun__wire_item it[2] = {str_item(r->fail_msg), str_item(CRUN_RDZV_FAIL_STOP)};
	struct crun__wire_msg m = {.type = CRUN_WIRE_RDZV_FAIL, .count = 1, .items = it};
	int rc;

	/* An older store refuses "stop": it gets a plain failure. */
	if (r->fail_stop && (r->store_flags & CRUN_WIRE_F_RDZV_EXCL))
		m.count = 2;
	m.num = r->asg.round;
	rc = send_req(r, REQ_FAIL, &m, NULL);
	if (rc < 0)
		crun__debug("cannot report the failure to the store: %s", strerror(-rc));
}

void crun__rdzv_fail(struct agent_rdzv *r, const char *message, bool stop)
{
	char *copy;

	if (!r->assigned)
		return;
	copy = strdup(message);
	if (copy) {
		free(r->fail_msg);
		r->fail_msg = copy;
		r->fail_stop = stop;
	} else if (!r->fail_msg) {
		crun__debug("cannot report the failure to the store: %s", strerror(ENOMEM));
		return;
	}
	if (r->resuming)
		return; /* sent once the round is resumed */
	send_fail(r);
}

static int send_done(struct agent_rdzv *r)
{
	struct crun__wire_msg m = {.type = CRUN_WIRE_RDZV_DONE};
	int rc;

	m.num = r->asg.round;
	rc = send_req(r, REQ_DONE, &m, NULL);
	if (rc == -ENOTCONN)
		return 0; /* LOST follows */
	if (rc < 0)
		set_error(r, "cannot enter the exit barrier of round %" PRId64 ": %s", r->asg.round,
			  strerror(-rc));
	return rc;
}

int crun__rdzv_done(struct agent_rdzv *r)
{
	if (!r->assigned)
		return -EINVAL;
	r->done_sent = true;
	if (r->resuming)
		return 0; /* sent once the round is resumed */
	return send_done(r);
}

/* Group rank 0 publishes MASTER_ADDR:MASTER_PORT for the round. */
static int publish_master(struct agent_rdzv *r)
{
	const struct crun__rdzv_assignment *asg = &r->asg;
	struct crun__wire_item items[2];
	struct crun__wire_msg m = {.type = CRUN_WIRE_SET, .count = 2, .items = items};
	char key[64], value[320];
	int port;

	if (r->spec->agent_store) {
		/* The store this agent hosts for the rendezvous, as torchrun's
		 * agent shares its own (the workers need no other port), else
		 * one of its own, opened once. The round's workers expect a
		 * fresh store. */
		struct crun__server *store;

		if (!r->hosted && !r->worker_store) {
			port = crun__agent_store_open(r->loop, r->spec, asg->nodes[0].addr,
						      &r->worker_store);
			if (port < 0) {
				set_error(r, "cannot open the agent store: %s", strerror(-port));
				return port;
			}
		}
		store = r->hosted ? r->hosted : r->worker_store;
		port = crun__server_port(store);
		crun__server_tcpstore_clear(store);
	} else {
		port = crun__free_port();
	}
	if (port < 0) {
		set_error(r, "cannot find a free port for MASTER_PORT: %s", strerror(-port));
		return port;
	}
	snprintf(r->master_addr, sizeof(r->master_addr), "%s", asg->nodes[0].addr);
	r->master_port = port;
	r->master_agent_store = r->spec->agent_store;
	snprintf(key, sizeof(key), "rdzv/%" PRId64 "/master", asg->round);
	/* "HOST:PORT", and " rank0" when rank 0's worker hosts the TCPStore:
	 * every node's workers must agree on it, whatever each node's
	 * --agent-store found. */
	crun__format_endpoint(value, sizeof(value) - 8, asg->nodes[0].addr, port);
	if (!r->spec->agent_store)
		strcat(value, " rank0");
	items[0] = str_item(key);
	items[1] = str_item(value);
	return send_req(r, REQ_SET_MASTER, &m, NULL);
}

static int fetch_master(struct agent_rdzv *r)
{
	struct crun__wire_item it;
	struct crun__wire_msg m = {.type = CRUN_WIRE_GET, .count = 1, .items = &it};
	char key[64];

	snprintf(key, sizeof(key), "rdzv/%" PRId64 "/master", r->asg.round);
	it = str_item(key);
	/* The store waits for the key (and answers ETIMEDOUT). */
	m.num = r->spec->rdzv.read_timeout_ms;
	return send_req(r, REQ_GET_MASTER, &m, NULL);
}

static void fail_event(struct agent_rdzv *r)
{
	r->hooks.failed(r->hooks.arg, false, r->error_msg);
}

/* The assigned round's members, for the monitor. */
static void record_round(struct agent_rdzv *r)
{
	const struct crun__rdzv_assignment *asg = &r->asg;
	struct crun__mon_member *m = calloc((size_t)asg->nnodes, sizeof(*m));

	for (int i = 0; m && i < asg->nnodes; i++) {
		m[i].group_rank = i;
		snprintf(m[i].node_id, sizeof(m[i].node_id), "%s", asg->nodes[i].node_id);
		snprintf(m[i].host, sizeof(m[i].host), "%s", asg->nodes[i].host);
		snprintf(m[i].addr, sizeof(m[i].addr), "%s", asg->nodes[i].addr);
		m[i].local_world_size = asg->nodes[i].nproc;
	}
	crun__monitor_round_formed(r->monitor, crun__wall_ms(), asg->round, asg->group_rank,
				   asg->nnodes, asg->world_size, asg->restart_count, m,
				   m ? asg->nnodes : 0, r->join_ms);
	free(m);
}

/* The round is assigned and MASTER_ADDR/PORT known: the attempt's place. */
static void ready(struct agent_rdzv *r)
{
	const struct crun__rdzv_assignment *asg = &r->asg;
	struct crun__placement place = {
		.group_rank = asg->group_rank,
		.nnodes = asg->nnodes,
		.world_size = asg->world_size,
		.rank_offset = asg->rank_offset,
		.round = asg->round,
		.restart_count = (int)asg->restart_count,
		.master_addr = r->master_addr,
		.master_port = r->master_port,
		.agent_store = r->master_agent_store,
	};

	crun__debug("round %" PRId64 ": this is node %d of %d; its workers are ranks %d to %d "
		    "of %d (restart %d); MASTER_ADDR %s, MASTER_PORT %d",
		    asg->round, asg->group_rank, asg->nnodes, asg->rank_offset,
		    asg->rank_offset + r->spec->nproc_per_node - 1, asg->world_size,
		    place.restart_count, place.master_addr, place.master_port);
	r->placed = true;
	record_round(r);
	crun__monitor_store_recovered(r->monitor, crun__wall_ms());
	if (r->rejoining) {
		r->rejoining = false;
		uv_timer_stop(&r->rejoin_timer);
		crun__info("rejoined run '%s': round %" PRId64 ", group rank %d of %d",
			   r->spec->run_id, asg->round, asg->group_rank, asg->nnodes);
	}
	r->hooks.ready(r->hooks.arg, &place);
}

static void got_assignment(struct agent_rdzv *r, const struct crun__wire_msg *reply)
{
	const struct crun__agent_spec *spec = r->spec;
	char err[256];
	int rc;

	if (reply->type != CRUN_WIRE_VALUES ||
	    crun__rdzv_parse_assignment(reply, &r->asg, err, sizeof(err)) < 0) {
		if (reply->type != CRUN_WIRE_VALUES)
			snprintf(err, sizeof(err), "a %s frame", crun__wire_type_name(reply->type));
		set_error(r, "bad assignment from the store at '%s': %s", r->endpoint, err);
		fail_event(r);
		return;
	}
	r->assigned = true;
	if (strcmp(r->asg.nodes[r->asg.group_rank].node_id, r->node_id) ||
	    r->asg.nodes[r->asg.group_rank].nproc != spec->nproc_per_node) {
		set_error(r,
			  "bad assignment from the store at '%s': group rank %d is not this node",
			  r->endpoint, r->asg.group_rank);
		fail_event(r);
		return;
	}
	rc = r->asg.group_rank == 0 ? publish_master(r) : fetch_master(r);
	if (rc < 0 && rc != -ENOTCONN) {
		if (!r->error_msg)
			set_error(r, "cannot share MASTER_ADDR through the store: %s",
				  strerror(-rc));
		fail_event(r);
	}
}

static void got_master(struct agent_rdzv *r, const struct crun__wire_msg *reply)
{
	char value[320], host[300], err[128];
	int port;

	if (reply->type != CRUN_WIRE_VALUE || reply->count != 1) {
		set_error(r, "bad MASTER_ADDR from the store: a %s frame",
			  crun__wire_type_name(reply->type));
		fail_event(r);
		return;
	}
	item_str(&reply->items[0], value, sizeof(value));
	r->master_agent_store = true;
	if (strlen(value) > 6 && !strcmp(value + strlen(value) - 6, " rank0")) {
		value[strlen(value) - 6] = '\0';
		r->master_agent_store = false;
	}
	if (crun__parse_endpoint(value, 0, host, sizeof(host), &port, err, sizeof(err)) < 0 ||
	    port < 1) {
		set_error(r, "bad MASTER_ADDR '%s' from the store: %s", value,
			  port < 1 ? "no port" : err);
		fail_event(r);
		return;
	}
	snprintf(r->master_addr, sizeof(r->master_addr), "%s", host);
	r->master_port = port;
	ready(r);
}

static void got_resume(struct agent_rdzv *r, int status, const char *message,
		       const struct crun__wire_msg *reply);

static void on_reply(struct crun__aclient *c, int status, const char *message,
		     const struct crun__wire_msg *reply, void *arg)
{
	struct rdzv_req *q = arg;
	struct agent_rdzv *r = q->r;
	enum req_kind kind = q->kind;
	bool stale = q->gen != r->gen;
	int64_t round = q->round;

	(void)c;
	req_unlink(r, q);
	if (kind == REQ_GET_STEPS) {
		got_steps(r, q, stale, status, message, reply);
		free(q);
		return;
	}
	if (kind == REQ_GET_ONE_STEPS) {
		got_one_steps(q, stale, status, message, reply);
		free(q);
		return;
	}
	free(q);
	if (status < 0 && !reply)
		return; /* the connection is lost: LOST follows */
	switch (kind) {
	case REQ_JOIN:
		if (stale)
			return;
		if (status < 0) {
			set_error(r, "cannot join run '%s' at '%s': %s", r->spec->run_id,
				  r->endpoint, message ? message : strerror(-status));
			fail_event(r);
			return;
		}
		got_assignment(r, reply);
		return;
	case REQ_SET_MASTER:
		if (stale)
			return;
		if (status < 0) {
			set_error(r, "cannot publish MASTER_ADDR in the store: %s",
				  message ? message : strerror(-status));
			fail_event(r);
			return;
		}
		ready(r);
		return;
	case REQ_GET_MASTER:
		if (stale || r->ended)
			return;
		if (status == -ETIMEDOUT) {
			char msg[512], t[24];

			/* Group rank 0 never published it: end the round, so
			 * that every node joins the next one. */
			snprintf(msg, sizeof(msg),
				 "node %d (%s) got no MASTER_ADDR from group rank 0 (%s) within %s",
				 r->asg.group_rank, r->hostname, r->asg.nodes[0].host,
				 crun__rdzv_format_ms(r->spec->rdzv.read_timeout_ms, t, sizeof(t)));
			crun__warn("%s", msg);
			crun__rdzv_fail(r, msg, false);
			return;
		}
		if (status < 0) {
			set_error(r, "cannot read MASTER_ADDR from the store: %s",
				  message ? message : strerror(-status));
			fail_event(r);
			return;
		}
		got_master(r, reply);
		return;
	case REQ_FAIL:
		if (status < 0)
			crun__debug("the store refused the failure report of round %" PRId64 ": %s",
				    round, message ? message : strerror(-status));
		return;
	case REQ_DONE:
		if (stale)
			return;
		if (status == 0) {
			r->hooks.done(r->hooks.arg);
			return;
		}
		if (status == -ECANCELED && !r->done_closed) {
			/* The round ended first; its RDZV_EVENT came before this
			 * reply and moved the group already. */
			crun__debug("round %" PRId64 " ended while this node waited for the "
				    "others to finish: %s",
				    round, message ? message : "the store canceled the wait");
			return;
		}
		set_error(r, "the exit barrier of round %" PRId64 " failed: %s", round,
			  message ? message : strerror(-status));
		fail_event(r);
		return;
	case REQ_SET_STATUS:
		if (status < 0)
			crun__debug("the store refused this node's status: %s",
				    message ? message : strerror(-status));
		return;
	case REQ_SET_STEPS:
	case REQ_DEL_STEPS:
		if (status < 0)
			crun__debug("the store refused the step summary of round %" PRId64 ": %s",
				    round, message ? message : strerror(-status));
		return;
	case REQ_GET_STEPS:
	case REQ_GET_ONE_STEPS:
		return;
	case REQ_RESUME:
		if (!stale && r->resuming)
			got_resume(r, status, message, reply);
		return;
	}
}

/* ---- this node's status ----------------------------------------------------- */

int crun__rdzv_publish_status(struct agent_rdzv *r, const char *key, const char *doc, size_t len)
{
	struct crun__wire_item items[2] = {str_item(key), {(const uint8_t *)doc, (uint32_t)len}};
	struct crun__wire_msg m = {
		.type = CRUN_WIRE_SET, .flags = CRUN_WIRE_FL_EPHEMERAL, .count = 2, .items = items};

	if (!r->client || !r->connected || r->lost)
		return -ENOTCONN;
	return send_req(r, REQ_SET_STATUS, &m, NULL);
}

/* ---- step summaries ---------------------------------------------------------- */

/* The key of group rank node's step summary in round. */
static void steps_key(char *key, size_t len, int64_t round, int node)
{
	snprintf(key, len, "rdzv/%" PRId64 "/steps/%d", round, node);
}

int crun__rdzv_publish_steps(struct agent_rdzv *r, const char *summary, size_t len)
{
	struct crun__wire_item items[2];
	struct crun__wire_msg m = {
		.type = CRUN_WIRE_SET, .flags = CRUN_WIRE_FL_EPHEMERAL, .count = 2, .items = items};
	char key[64];
	int rc;

	if (!r->assigned || !r->connected)
		return -ENOTCONN;
	if (r->steps_round && r->steps_round != r->asg.round) {
		/* This node's summary of an earlier round goes. */
		struct crun__wire_msg del = {.type = CRUN_WIRE_DELETE, .count = 1, .items = items};

		steps_key(key, sizeof(key), r->steps_round, r->steps_node);
		items[0] = str_item(key);
		if (send_req(r, REQ_DEL_STEPS, &del, NULL) < 0)
			crun__debug("cannot delete the step summary '%s'", key);
	}
	steps_key(key, sizeof(key), r->asg.round, r->asg.group_rank);
	items[0] = str_item(key);
	items[1] = (struct crun__wire_item){(const uint8_t *)summary, (uint32_t)len};
	rc = send_req(r, REQ_SET_STEPS, &m, NULL);
	if (rc == 0) {
		r->steps_round = r->asg.round;
		r->steps_node = r->asg.group_rank;
	}
	return rc;
}

static void fetch_free(struct steps_fetch *f)
{
	for (uint32_t i = 0; i < f->n; i++)
		free((void *)f->vals[i].data);
	free(f->vals);
	free(f);
}

/* One GET per other node, without a wait, gathered into one callback. */
static int fetch_each(struct agent_rdzv *r, crun__rdzv_steps_cb cb, void *arg)
{
	struct crun__wire_item item;
	struct crun__wire_msg m = {.type = CRUN_WIRE_GET, .count = 1, .items = &item};
	struct steps_fetch *f = calloc(1, sizeof(*f));
	char key[64];
	int rc = 0;

	if (!f)
		return -ENOMEM;
	f->cb = cb;
	f->arg = arg;
	f->n = (uint32_t)r->asg.nnodes - 1;
	f->vals = calloc(f->n, sizeof(*f->vals));
	if (!f->vals) {
		free(f);
		return -ENOMEM;
	}
	for (int i = 0, j = 0; i < r->asg.nnodes && rc == 0; i++) {
		if (i == r->asg.group_rank)
			continue;
		steps_key(key, sizeof(key), r->asg.round, i);
		item = str_item(key);
		rc = send_req_cb(r, REQ_GET_ONE_STEPS, &m, NULL, NULL, NULL);
		if (rc == 0) {
			/* send_req_cb put it first in r->reqs */
			r->reqs->fetch = f;
			r->reqs->index = (uint32_t)j++;
			f->pending++;
		}
	}
	if (rc < 0) {
		if (!f->pending) {
			fetch_free(f);
			return rc;
		}
		f->status = rc; /* the ones sent still answer: cb then */
		snprintf(f->message, sizeof(f->message), "%s", strerror(-rc));
	}
	return 0;
}

int crun__rdzv_fetch_steps(struct agent_rdzv *r, crun__rdzv_steps_cb cb, void *arg)
{
	struct crun__wire_item *items;
	struct crun__wire_msg m = {.type = CRUN_WIRE_MGET};
	char *keys;
	int n = 0, rc;

	if (!r->assigned || !r->connected)
		return -ENOTCONN;
	if (r->asg.nnodes < 2)
		return -EINVAL;
	if (r->steps_each_round == r->asg.round)
		return fetch_each(r, cb, arg);
	items = calloc((size_t)r->asg.nnodes, sizeof(*items));
	keys = calloc((size_t)r->asg.nnodes, 64);
	if (!items || !keys) {
		free(items);
		free(keys);
		return -ENOMEM;
	}
	for (int i = 0; i < r->asg.nnodes; i++) {
		if (i == r->asg.group_rank)
			continue;
		steps_key(keys + (size_t)n * 64, 64, r->asg.round, i);
		items[n] = str_item(keys + (size_t)n * 64);
		n++;
	}
	m.count = (uint32_t)n;
	m.items = items;
	m.num = 0; /* a node that has not published yet: ENOENT, not a wait */
	rc = send_req_cb(r, REQ_GET_STEPS, &m, NULL, cb, arg);
	free(items);
	free(keys);
	return rc;
}

static void got_steps(struct agent_rdzv *r, const struct rdzv_req *q, bool stale, int status,
		      const char *message, const struct crun__wire_msg *reply)
{
	int rc;

	if (stale) {
		q->steps_cb(q->steps_arg, -ECANCELED, "the round ended", NULL, 0);
		return;
	}
	if (status == -ENOENT && reply) {
		/* Some node has no summary: read each, now and for the rest
		 * of the round. */
		r->steps_each_round = q->round;
		rc = fetch_each(r, q->steps_cb, q->steps_arg);
		if (rc < 0)
			q->steps_cb(q->steps_arg, rc, strerror(-rc), NULL, 0);
		return;
	}
	if (status == 0 && reply->type != CRUN_WIRE_VALUES) {
		q->steps_cb(q->steps_arg, -EPROTO, "not a VALUES frame", NULL, 0);
		return;
	}
	if (status < 0) {
		q->steps_cb(q->steps_arg, status, message ? message : strerror(-status), NULL, 0);
		return;
	}
	q->steps_cb(q->steps_arg, 0, NULL, reply->items, reply->count);
}

/* A reply to one of fetch_each's GETs: a node without a summary (ENOENT)
 * stays empty. */
static void got_one_steps(const struct rdzv_req *q, bool stale, int status, const char *message,
			  const struct crun__wire_msg *reply)
{
	struct steps_fetch *f = q->fetch;
	struct crun__wire_item *v = &f->vals[q->index];

	if (f->status < 0) {
		/* an error is kept already */
	} else if (stale) {
		f->status = -ECANCELED;
		snprintf(f->message, sizeof(f->message), "the round ended");
	} else if (status == 0 && (reply->type != CRUN_WIRE_VALUE || reply->count != 1)) {
		f->status = -EPROTO;
		snprintf(f->message, sizeof(f->message), "not a VALUE frame");
	} else if (status == 0 && reply->items[0].len) {
		uint8_t *data = malloc(reply->items[0].len);

		if (!data) {
			f->status = -ENOMEM;
			snprintf(f->message, sizeof(f->message), "out of memory");
		} else {
			memcpy(data, reply->items[0].data, reply->items[0].len);
			*v = (struct crun__wire_item){data, reply->items[0].len};
		}
	} else if (status < 0 && status != -ENOENT) {
		f->status = status;
		snprintf(f->message, sizeof(f->message), "%s",
			 message ? message : strerror(-status));
	}
	if (--f->pending)
		return;
	if (f->status < 0)
		f->cb(f->arg, f->status, f->message, NULL, 0);
	else
		f->cb(f->arg, 0, NULL, f->vals, f->n);
	fetch_free(f);
}

/* ---- connection and pushed events ----------------------------------------- */

static void resume_connected(struct agent_rdzv *r, int status, const char *message);

/* The flags of the store c reached that say how to take its loss. */
static uint16_t store_flags(const struct crun__aclient *c)
{
	static const uint16_t known[] = {CRUN_WIRE_F_RDZV_EXCL, CRUN_WIRE_F_RDZV_RESUME,
					 CRUN_WIRE_F_EMBEDDED};
	uint16_t flags = 0;

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (crun__aclient_store_has(c, known[i]))
			flags |= known[i];
	return flags;
}

static void on_connect(struct crun__aclient *c, int status, const char *message, void *arg)
{
	struct agent_rdzv *r = arg;

	if (status == 0)
		r->store_flags = store_flags(c);
	if (r->resuming) {
		resume_connected(r, status, message);
		return;
	}
	if (status < 0) {
		if (status == -EACCES)
			set_error(r,
				  "the rendezvous store at '%s' refused this node: %s (every node "
				  "needs the store's job token: --rdzv-conf token_file)",
				  r->endpoint, message ? message : "authentication failed");
		else if (status == -ETIMEDOUT || status == -ECONNREFUSED)
			set_error(r, "%s", message ? message : strerror(-status));
		else
			set_error(r, "cannot join the rendezvous store at '%s': %s", r->endpoint,
				  message ? message : strerror(-status));
		if (r->rejoining) {
			char *why = r->error_msg;

			r->error_msg = NULL;
			set_error(r, "cannot rejoin run '%s': %s", r->spec->run_id, why);
			free(why);
		}
		fail_event(r);
		return;
	}
	r->connected = true;
	if (r->rejoining)
		crun__info(
			"reached the rendezvous store at '%s' again; rejoining run '%s' as a new "
			"node",
			crun__aclient_peer(c), r->spec->run_id);
	else
		crun__debug("connected to the rendezvous store at '%s'", crun__aclient_peer(c));
	if (r->join_wanted && send_join(r) < 0)
		fail_event(r);
}

static void round_event(struct agent_rdzv *r, const struct crun__wire_msg *msg)
{
	char reason[16], text[1100], count[24];
	struct crun__round_end end;
	int64_t n;

	if (!r->assigned && msg->id == r->join_id && msg->num == 0 && msg->count == 3) {
		item_str(&msg->items[0], reason, sizeof(reason));
		item_str(&msg->items[1], text, sizeof(text));
		if (!strcmp(reason, "excluded"))
			crun__warn("%s; waiting for the cool-down", text);
		return;
	}
	if (!r->assigned || r->ended || msg->id != r->join_id || msg->num != r->asg.round ||
	    msg->count != 3)
		return; /* an earlier round's, or not ours */
	item_str(&msg->items[0], reason, sizeof(reason));
	item_str(&msg->items[1], text, sizeof(text));
	item_str(&msg->items[2], count, sizeof(count));
	if (crun__parse_int64(count, 0, INT32_MAX, &n, NULL, 0) < 0)
		n = r->asg.restart_count;
	r->ended = true;
	end = (struct crun__round_end){
		.round = r->asg.round,
		.exhausted = !strcmp(reason, "exhausted"),
		.node_joined = !strcmp(reason, "join"),
		.node_left = !strcmp(reason, "left"),
		.restart_count = n,
		.message = text,
	};
	r->hooks.ended(r->hooks.arg, &end);
}

/* No round assigned within the rejoin timeout of the loss: the client
 * goes (no more hooks from it), and the job ends. A join after this
 * fails at once. */
static void rejoin_expired(uv_timer_t *t)
{
	struct agent_rdzv *r = t->data;
	char d[24];

	if (!r->rejoining)
		return;
	r->rejoining = false;
	crun__aclient_destroy(r->client);
	r->client = NULL;
	r->connected = false;
	r->lost = true;
	r->rejoin_by = uv_now(r->loop);
	set_error(r, "cannot rejoin run '%s' at '%s' within %s; giving up", r->spec->run_id,
		  r->endpoint, crun__rdzv_format_ms(r->spec->rdzv.rejoin_timeout_ms, d, sizeof(d)));
	fail_event(r);
}

/* The connection is lost (why: what ended it): the next join connects
 * again, within the rejoin timeout. */
static void report_lost(struct agent_rdzv *r, const char *why)
{
	char t[24];

	r->connected = false;
	r->lost = true;
	r->resuming = false;
	if (!r->rejoining) {
		uint64_t ms = (uint64_t)r->spec->rdzv.rejoin_timeout_ms;

		r->rejoining = true;
		r->rejoin_by = uv_now(r->loop) + ms;
		uv_timer_start(&r->rejoin_timer, rejoin_expired, ms, 0);
	}
	set_error(r, "lost the rendezvous store at '%s' (%s); rejoining within %s", r->endpoint,
		  why, crun__rdzv_format_ms(r->spec->rdzv.rejoin_timeout_ms, t, sizeof(t)));
	crun__monitor_store_lost(r->monitor, crun__wall_ms(), r->error_msg);
	r->hooks.failed(r->hooks.arg, true, r->error_msg);
}

/* Closes the client from this side and fails its requests, as the client
 * does when it loses the connection (before LOST says what happened). */
static void drop_client(struct agent_rdzv *r)
{
	crun__aclient_destroy(r->client);
	r->client = NULL;
	r->connected = false;
	while (r->reqs) {
		struct rdzv_req *q = r->reqs;

		req_unlink(r, q);
		if (q->steps_cb)
			q->steps_cb(q->steps_arg, -ENOTCONN, "the connection to the store is lost",
				    NULL, 0);
		if (q->fetch && --q->fetch->pending == 0) {
			q->fetch->cb(q->fetch->arg, -ENOTCONN,
				     "the connection to the store is lost", NULL, 0);
			fetch_free(q->fetch);
		}
		free(q);
	}
}

void crun__rdzv_lose(struct agent_rdzv *r, const char *why)
{
	if (!r->client || r->lost)
		return;
	drop_client(r);
	report_lost(r, why);
}

/* ---- resuming the round after losing the store ---------------------------- */

/* The store is not back in time, or would not resume the round: the loss
 * is taken as any other (the workers are killed, the agent joins again
 * as a new node). detail: why the resume did not happen. */
static void resume_failed(struct agent_rdzv *r, const char *detail)
{
	char why[1500];

	snprintf(why, sizeof(why), "%s; no resume: %s", r->resume_why, detail);
	drop_client(r);
	report_lost(r, why);
}

/* A new client, connecting for what is left of the reconnect window
 * (with the client's backoff: the store may be restarting). */
static void resume_connect(struct agent_rdzv *r)
{
	uint64_t now = uv_now(r->loop);
	char t[24], detail[96];
	int rc;

	drop_client(r);
	if (now >= r->resume_by) {
		snprintf(detail, sizeof(detail), "the store was not back within %s",
			 crun__rdzv_format_ms(r->spec->rdzv.reconnect_timeout_ms, t, sizeof(t)));
		resume_failed(r, detail);
		return;
	}
	rc = start_client(r, (int64_t)(r->resume_by - now));
	if (rc < 0)
		resume_failed(r, strerror(-rc));
}

/* The store of this member's running round is lost by a closed
 * connection: the workers keep running (store_loss.h). */
static void begin_resume(struct agent_rdzv *r, const char *why)
{
	char t[24];

	if (!r->resuming) {
		r->resuming = true;
		r->resume_since = uv_now(r->loop);
		r->resume_by = r->resume_since + (uint64_t)r->spec->rdzv.reconnect_timeout_ms;
		snprintf(r->resume_why, sizeof(r->resume_why), "%s", why);
		crun__monitor_store_lost(r->monitor, crun__wall_ms(), why);
		crun__warn("lost the rendezvous store at '%s' (%s); the workers keep running; "
			   "reconnecting for up to %s",
			   r->endpoint, why,
			   crun__rdzv_format_ms(r->spec->rdzv.reconnect_timeout_ms, t, sizeof(t)));
	} else {
		crun__debug("lost the rendezvous store at '%s' again (%s) while resuming",
			    r->endpoint, why);
	}
	resume_connect(r);
}

static void resume_connected(struct agent_rdzv *r, int status, const char *message)
{
	const struct crun__rdzv_assignment *a = &r->asg;
	struct crun__rdzv_node self;
	struct crun__rdzv_conf conf;
	struct crun__wire_item *items;
	struct crun__wire_msg m;
	int64_t wait_ms =
		r->spec->rdzv.keep_alive_interval_ms * r->spec->rdzv.keep_alive_max_attempt;
	char *scratch;
	int rc;

	if (status < 0) {
		resume_failed(r, message ? message : strerror(-status));
		return;
	}
	if (!(r->store_flags & CRUN_WIRE_F_RDZV_RESUME) ||
	    (r->store_flags & CRUN_WIRE_F_EMBEDDED)) {
		resume_failed(r, "the store there now does not resume rounds");
		return;
	}
	items = calloc(CRUN_RDZV_RESUME_ITEMS(a->nnodes), sizeof(*items));
	scratch = malloc(CRUN_RDZV_RESUME_SCRATCH(a->nnodes));
	if (!items || !scratch) {
		free(items);
		free(scratch);
		resume_failed(r, strerror(ENOMEM));
		return;
	}
	join_parts(r, &self, &conf);
	crun__rdzv_resume_msg(&self, &conf, a, wait_ms, &m, items, scratch);
	/* The store pushes the round's RDZV_EVENTs with this request's id. */
	rc = send_req(r, REQ_RESUME, &m, &r->join_id);
	free(items);
	free(scratch);
	if (rc < 0 && rc != -ENOTCONN)
		resume_failed(r, strerror(-rc));
}

/* The store ended the resumed round (message: the ERROR's, "round N ended:
 * REASON"): as an RDZV_EVENT would, without its restart count. */
static void resumed_round_over(struct agent_rdzv *r, const char *message)
{
	struct crun__round_end end;
	char prefix[48];
	const char *text = message ? message : "the store ended it";
	size_t n;

	snprintf(prefix, sizeof(prefix), "round %" PRId64 " ended: ", r->asg.round);
	n = strlen(prefix);
	if (!strncmp(text, prefix, n))
		text += n;
	r->ended = true;
	end = (struct crun__round_end){
		.round = r->asg.round,
		.node_left = crun__mon_round_end_gone(text, NULL, 0) > 0,
		.restart_count = -1,
		.message = text,
	};
	r->hooks.ended(r->hooks.arg, &end);
}

static void got_resume(struct agent_rdzv *r, int status, const char *message,
		       const struct crun__wire_msg *reply)
{
	struct crun__rdzv_assignment a;
	int64_t round = -1;
	char err[256], detail[1200];
	double away = (double)(uv_now(r->loop) - r->resume_since) / 1000.0;

	if (status == 0 && reply->type == CRUN_WIRE_VALUES &&
	    crun__rdzv_parse_assignment(reply, &a, err, sizeof(err)) == 0) {
		if (a.group_rank == r->asg.group_rank && a.nnodes == r->asg.nnodes &&
		    !strcmp(a.nodes[a.group_rank].node_id, r->node_id))
			round = a.round;
		crun__rdzv_assignment_finish(&a);
	}
	switch (crun__resume_outcome(status, reply->type, round, r->asg.round)) {
	case CRUN__RESUME_SAME_ROUND:
		r->resuming = false;
		r->connected = true;
		crun__info("resumed round %" PRId64 " with the store at '%s' after %.1fs",
			   r->asg.round, r->endpoint, away);
		crun__monitor_store_recovered(r->monitor, crun__wall_ms());
		if (r->fail_msg)
			send_fail(r);
		if (r->done_sent && send_done(r) < 0)
			fail_event(r);
		return;
	case CRUN__RESUME_ROUND_OVER:
		r->resuming = false;
		r->connected = true;
		crun__info("reached the rendezvous store at '%s' again after %.1fs; round %" PRId64
			   " is over",
			   r->endpoint, away, r->asg.round);
		resumed_round_over(r, message);
		return;
	case CRUN__RESUME_CLOSED:
		r->resuming = false;
		r->connected = true;
		if (r->done_sent) {
			/* A run that finished answers the DONE of its last
			 * round; one that failed refuses it. */
			r->done_closed = true;
			if (send_done(r) < 0)
				fail_event(r);
			return;
		}
		set_error(r, "cannot resume round %" PRId64 " of run '%s' at '%s': %s",
			  r->asg.round, r->spec->run_id, r->endpoint,
			  message ? message : strerror(ESHUTDOWN));
		fail_event(r);
		return;
	case CRUN__RESUME_REFUSED:
		break;
	}
	if (status < 0)
		snprintf(detail, sizeof(detail), "the store refused round %" PRId64 ": %s",
			 r->asg.round, message ? message : strerror(-status));
	else
		snprintf(detail, sizeof(detail),
			 "the store answered with another assignment than round %" PRId64,
			 r->asg.round);
	resume_failed(r, detail);
}

/* Node 0's agent, which hosted the store, is gone: so is the job. */
static void store_gone(struct agent_rdzv *r, const char *why)
{
	r->connected = false;
	set_error(r,
		  "the rendezvous store hosted by node 0's agent at '%s' is gone (%s): the job "
		  "cannot go on without it; a job that must survive the loss of node 0 uses a "
		  "standalone crun-rdzvd (crun-rdzvd(8))",
		  r->endpoint, why);
	crun__monitor_store_lost(r->monitor, crun__wall_ms(), r->error_msg);
	fail_event(r);
}

/* The connection ended (err, why: how): resume, end, or lose. */
static void store_lost(struct agent_rdzv *r, int err, const char *why)
{
	struct crun__store_loss_facts f = {
		.err = err,
		.store_flags = r->store_flags,
		.hosting = r->hosting,
		.member = r->assigned && r->placed && !r->ended,
		.nnodes = r->assigned ? r->asg.nnodes : 0,
	};

	r->connected = false;
	switch (crun__store_loss_classify(&f)) {
	case CRUN__LOSS_GONE:
		store_gone(r, why);
		return;
	case CRUN__LOSS_RESUME:
		begin_resume(r, why);
		return;
	case CRUN__LOSS_REJOIN:
		break;
	}
	if (r->resuming) {
		resume_failed(r, why);
		return;
	}
	report_lost(r, why);
}

static void on_event(struct crun__aclient *c, enum crun__aclient_event_type type, int err,
		     const char *message, const struct crun__wire_msg *msg, void *arg)
{
	struct agent_rdzv *r = arg;
	char why[160], t[24];

	(void)c;
	switch (type) {
	case CRUN_ACLIENT_EV_LOST:
		switch (-err) {
		case ECONNRESET:
			snprintf(why, sizeof(why), "connection closed");
			break;
		case EPIPE:
			snprintf(why, sizeof(why), "broken pipe");
			break;
		case ETIMEDOUT:
			snprintf(why, sizeof(why), "no reply for %s",
				 crun__rdzv_format_ms(r->spec->rdzv.keep_alive_interval_ms *
							      r->spec->rdzv.keep_alive_max_attempt,
						      t, sizeof(t)));
			break;
		default:
			snprintf(why, sizeof(why), "%s", message ? message : strerror(-err));
			break;
		}
		store_lost(r, err, why);
		return;
	case CRUN_ACLIENT_EV_RDZV:
		round_event(r, msg);
		return;
	case CRUN_ACLIENT_EV_NOTIFY:
		return;
	}
}

/* ---- setup and teardown ------------------------------------------------------ */

/* "<hostname>:<pid>:<8 hex>": unique per agent. */
static void make_node_id(struct agent_rdzv *r)
{
	unsigned char rnd[4];

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		memset(rnd, 0, sizeof(rnd));
	snprintf(r->node_id, sizeof(r->node_id), "%s:%d:%02x%02x%02x%02x", r->hostname,
		 (int)getpid(), rnd[0], rnd[1], rnd[2], rnd[3]);
}

/* Creates the store client and starts connecting. 0 or a negative errno. */
static int start_client(struct agent_rdzv *r, int64_t connect_timeout_ms)
{
	const struct crun__agent_spec *spec = r->spec;
	struct crun__aclient_opts o;
	int rc;

	memset(&o, 0, sizeof(o));
	o.host = spec->rdzv.host;
	o.port = spec->rdzv.port;
	o.run_id = spec->run_id;
	o.token = spec->token;
	o.token_len = spec->token_len;
	o.connect_timeout_ms = connect_timeout_ms;
	o.keepalive_interval_ms = spec->rdzv.keep_alive_interval_ms;
	o.keepalive_max_attempt = spec->rdzv.keep_alive_max_attempt;
	r->connected = false;
	r->client = crun__aclient_create(r->loop, &o, on_event, r);
	if (!r->client)
		return -ENOMEM;
	rc = crun__aclient_connect(r->client, on_connect, r);
	if (rc < 0) {
		crun__aclient_destroy(r->client);
		r->client = NULL;
	}
	return rc;
}

int crun__rdzv_setup(struct agent_rdzv *r, uv_loop_t *loop, const struct crun__agent_spec *spec,
		     const char *hostname, const struct crun__rdzv_hooks *hooks,
		     struct crun__server **server)
{
	int host = spec->rdzv.is_host, rc;

	r->loop = loop;
	r->spec = spec;
	snprintf(r->hostname, sizeof(r->hostname), "%s", hostname);
	r->hooks = *hooks;
	*server = NULL;
	crun__format_endpoint(r->endpoint, sizeof(r->endpoint), spec->rdzv.host, spec->rdzv.port);
	make_node_id(r);
	rc = uv_timer_init(loop, &r->rejoin_timer);
	if (rc < 0) {
		crun__error("cannot set up the rejoin timer: %s", uv_strerror(rc));
		return rc;
	}
	r->rejoin_timer.data = r;
	r->timer_open = true;

	if (host < 0)
		host = host_is_local(spec->rdzv.host, r->hostname);
	if (host) {
		rc = host_store(r, spec->rdzv.is_host == 1, server);
		if (rc == -EADDRINUSE)
			crun__debug("'%s' is served already (by another agent on this host or "
				    "crun-rdzvd): joining it as a client",
				    r->endpoint);
		else if (rc < 0)
			return rc;
	}
	if (spec->local_addr)
		snprintf(r->self_addr, sizeof(r->self_addr), "%s", spec->local_addr);
	else if (r->hosting && !crun__addr_is_loopback(spec->rdzv.host))
		snprintf(r->self_addr, sizeof(r->self_addr), "%s", spec->rdzv.host);

	rc = start_client(r, spec->rdzv.join_timeout_ms);
	if (rc < 0)
		crun__error("cannot connect to the rendezvous store at '%s': %s", r->endpoint,
			    strerror(-rc));
	return rc;
}

const char *crun__rdzv_error(const struct agent_rdzv *r)
{
	return r->error_msg;
}

void crun__rdzv_finish(struct agent_rdzv *r)
{
	if (r->worker_store) {
		crun__server_destroy(r->worker_store, server_freed, NULL);
		r->worker_store = NULL;
	}
	if (r->timer_open) {
		r->timer_open = false;
		uv_close((uv_handle_t *)&r->rejoin_timer, NULL);
	}
	if (r->client) {
		crun__aclient_destroy(r->client);
		r->client = NULL;
	}
	r->connected = false;
	while (r->reqs) {
		struct rdzv_req *q = r->reqs;

		r->reqs = q->next;
		if (q->fetch && --q->fetch->pending == 0)
			fetch_free(q->fetch);
		free(q);
	}
	if (r->assigned) {
		crun__rdzv_assignment_finish(&r->asg);
		r->assigned = false;
	}
	free(r->error_msg);
	r->error_msg = NULL;
	free(r->fail_msg);
	r->fail_msg = NULL;
	r->resuming = false;
}

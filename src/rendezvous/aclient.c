/* Asynchronous store client (aclient.h): a libuv transport. What the
 * handshake sends and accepts is hello.c's, the frames are wire.c's; this
 * file resolves, connects, retries, reads, writes and times out.
 *
 * State machine (enum state; one transition per event):
 *
 *   IDLE --connect--> RESOLVING (a name) or CONNECTING (a literal)
 *   RESOLVING --addresses--> CONNECTING(addr 0); --failure--> BACKOFF/DEAD
 *   CONNECTING --connected--> PREAMBLE (client preamble sent)
 *   PREAMBLE --server preamble--> HELLO (HELLO sent)
 *   HELLO --OK, server mac verified--> READY (connect_cb(0))
 *   CONNECTING/PREAMBLE/HELLO --error--> RETRY_CLOSE or FAIL_CLOSE
 *   RETRY_CLOSE --socket closed--> CONNECTING(next addr), BACKOFF or DEAD
 *   BACKOFF --timer--> RESOLVING/CONNECTING(addr 0)
 *   FAIL_CLOSE --socket closed--> DEAD (connect_cb(error))
 *   FAIL_LATER (no socket to close) --timer, 0 ms--> DEAD (connect_cb)
 *   any connecting state --deadline--> FAIL_CLOSE or DEAD
 *   READY --EOF, error, keep-alive silence--> LOST_CLOSE
 *   LOST_CLOSE --socket closed--> DEAD (pending requests failed, LOST)
 *   any --destroy--> DESTROYED (memory freed when the last handle closed)
 *
 * Outcomes are reported from the socket's close callback (or a timer),
 * never from inside a call into this file, so a caller never sees its own
 * callback run before its call returns; and the socket is always fully
 * closed before a new attempt re-initialises it.
 *
 * Memory: the struct lives until every handle it embeds has closed and
 * any getaddrinfo request has come back (c->refs counts them). A callback
 * that destroys the client therefore leaves the struct valid until the
 * loop reaches the close callbacks; every place that runs a user callback
 * checks for DESTROYED (or a state change) right after it.
 *
 * Pending requests sit in a list in send order (replies mostly come in
 * that order, so lookups stop early). Timeouts share one timer armed for
 * the earliest deadline; the agent has a handful of requests in flight, so
 * the scans this costs are cheaper than a timer handle per request. */
#include "rendezvous/aclient.h"

#include "common/log.h"
#include "common/util.h"
#include "rendezvous/hello.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* connect_timeout_ms 0 tries once; this bounds that one try. */
#define TRY_ONCE_TIMEOUT_MS 10000
#define RBUF_MIN (16 * 1024)
/* A read buffer grown for a large frame shrinks back above this size. */
#define RBUF_KEEP (1024 * 1024)
#define ITEMS_MIN 16
#define MAX_ADDRS 16
#define DEFAULT_MAX_FRAME (64u << 20)
#define MSG_LEN 512
#define PEER_LEN 300

enum state {
	ST_IDLE,
	ST_RESOLVING,
	ST_CONNECTING,
	ST_PREAMBLE,
	ST_HELLO,
	ST_RETRY_CLOSE,
	ST_BACKOFF,
	ST_FAIL_CLOSE,
	ST_FAIL_LATER,
	ST_READY,
	ST_LOST_CLOSE,
	ST_DEAD,
	ST_DESTROYED,
};

struct pending {
	struct pending *prev, *next;
	uint32_t id;
	uint8_t type;
	uint64_t deadline; /* loop time in ms; 0: none */
	int64_t timeout_ms;
	crun__aclient_reply_cb cb;
	void *arg;
};

struct resolve {
	uv_getaddrinfo_t req;
	struct crun__aclient *c;
};

/* One uv_write: the request and a private copy of the bytes. */
struct wreq {
	uv_write_t req;
	struct crun__aclient *c;
	size_t len;
	uint8_t data[];
};

struct crun__aclient {
	uv_loop_t *loop;
	enum state state;
	int refs; /* open handles + getaddrinfo in flight */

	char *host;
	int port;
	struct crun__hello_client hello; /* run id, token, handshake */
	int64_t connect_timeout_ms;
	int64_t ka_interval_ms;
	int ka_max_attempt;
	uint32_t max_frame;
	bool literal; /* host is a numeric address: no resolving */
	bool once;    /* connect_timeout_ms 0 */

	crun__aclient_event_cb event_cb;
	void *event_arg;
	crun__aclient_connect_cb connect_cb;
	void *connect_arg;

	/* Connecting. */
	struct sockaddr_storage addrs[MAX_ADDRS];
	int naddrs, cur;
	struct resolve *resolving;
	uint64_t deadline;
	int backoff_ms;
	uv_connect_t creq;
	/* The failure being reported: err, and msg either complete (plain)
	 * or a reason that finish_connect prefixes. */
	int err;
	bool msg_plain;
	char msg[MSG_LEN];

	uv_tcp_t tcp;
	bool tcp_live;	       /* initialised and its close callback not yet run */
	uv_timer_t conn_timer; /* connect deadline and backoff */
	uv_timer_t ka_timer;
	uv_timer_t req_timer;
	uint64_t req_due; /* what req_timer is armed for; 0: not armed */
	uint64_t last_rx, next_ping;

	uint32_t last_id;
	struct pending *head, *tail;

	/* Received bytes not yet decoded: rbuf[0, rlen). */
	uint8_t *rbuf;
	size_t rcap, rlen;
	struct crun__wire_item *items;
	uint32_t items_cap;

	char target[PEER_LEN]; /* host:port as given */
	char peer[PEER_LEN];
};

static void on_tcp_close(uv_handle_t *h);
static void try_connect(struct crun__aclient *c);
static void lose(struct crun__aclient *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void attempt_failed(struct crun__aclient *c, int err, bool plain, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- small helpers ----------------------------------------------------- */

static void set_msg(struct crun__aclient *c, int err, bool plain, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void set_msg(struct crun__aclient *c, int err, bool plain, const char *fmt, ...)
{
	va_list ap;

	c->err = err;
	c->msg_plain = plain;
	va_start(ap, fmt);
	vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
	va_end(ap);
}

/* "15s", "1.5s", "300ms". */
static void fmt_duration(char *out, size_t len, int64_t ms)
{
	if (ms >= 1000 && ms % 1000 == 0)
		snprintf(out, len, "%" PRId64 "s", ms / 1000);
	else if (ms >= 1000)
		snprintf(out, len, "%.1fs", (double)ms / 1000.0);
	else
		snprintf(out, len, "%" PRId64 "ms", ms);
}

static const char *reason(int err)
{
	switch (err) {
	case -ECONNREFUSED:
		return "connection refused";
	case -ECONNRESET:
		return "connection reset during the handshake";
	case -EPIPE:
		return "connection closed during the handshake";
	default:
		return uv_strerror(err);
	}
}

static uint32_t next_id(struct crun__aclient *c)
{
	return crun__wire_next_id(&c->last_id);
}

static void maybe_free(struct crun__aclient *c)
{
	if (c->state != ST_DESTROYED || c->refs > 0)
		return;
	free(c->rbuf);
	free(c->items);
	free(c->host);
	crun__hello_client_finish(&c->hello);
	free(c);
}

static void on_handle_close(uv_handle_t *h)
{
	struct crun__aclient *c = h->data;

	c->refs--;
	maybe_free(c);
}

/* ---- writing ----------------------------------------------------------- */

static void on_written(uv_write_t *req, int status)
{
	struct wreq *w = (struct wreq *)req;
	struct crun__aclient *c = w->c;

	free(w);
	if (status >= 0 || status == UV_ECANCELED)
		return;
	if (c->state == ST_READY)
		lose(c, status == UV_EPIPE ? -EPIPE : status,
		     "connection to the store at '%s' failed: %s", c->peer, uv_strerror(status));
	else if (c->state == ST_PREAMBLE || c->state == ST_HELLO)
		attempt_failed(c, status, false, "%s", reason(status));
}

static struct wreq *wreq_new(struct crun__aclient *c, size_t len)
{
	struct wreq *w = malloc(sizeof(*w) + len);

	if (w) {
		w->c = c;
		w->len = len;
	}
	return w;
}

static int wreq_send(struct crun__aclient *c, struct wreq *w)
{
	uv_buf_t b = uv_buf_init((char *)w->data, (unsigned int)w->len);
	int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written);

	if (rc < 0)
		free(w);
	return rc;
}

/* Encodes msg (already valid) and queues it. 0 or a negative errno. */
static int send_msg(struct crun__aclient *c, const struct crun__wire_msg *msg)
{
	struct wreq *w;
	size_t size;

	if (crun__wire_sendable_size(msg, &size) < 0)
		return -E2BIG;
	w = wreq_new(c, size);
	if (!w)
		return -ENOMEM;
	crun__wire_encode(msg, w->data);
	return wreq_send(c, w);
}

/* ---- pending requests -------------------------------------------------- */

static void pending_unlink(struct crun__aclient *c, struct pending *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		c->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		c->tail = p->prev;
	p->prev = p->next = NULL;
}

static struct pending *pending_find(struct crun__aclient *c, uint32_t id)
{
	for (struct pending *p = c->head; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

static void on_req_timer(uv_timer_t *t);

/* Arms the request timer for the earliest deadline, or stops it. */
static void arm_req_timer(struct crun__aclient *c)
{
	uint64_t due = 0, now = uv_now(c->loop);

	for (struct pending *p = c->head; p; p = p->next)
		if (p->deadline && (!due || p->deadline < due))
			due = p->deadline;
	c->req_due = due;
	if (!due) {
		uv_timer_stop(&c->req_timer);
		return;
	}
	uv_timer_start(&c->req_timer, on_req_timer, due > now ? due - now : 0, 0);
}

static void on_req_timer(uv_timer_t *t)
{
	struct crun__aclient *c = t->data;

	c->req_due = 0;
	while (c->state == ST_READY) {
		uint64_t now = uv_now(c->loop);
		struct pending *p = c->head;
		char msg[MSG_LEN], d[32];

		while (p && !(p->deadline && p->deadline <= now))
			p = p->next;
		if (!p)
			break;
		pending_unlink(c, p);
		fmt_duration(d, sizeof(d), p->timeout_ms);
		snprintf(msg, sizeof(msg), "no reply from the store at '%s' to %s within %s",
			 c->peer, crun__wire_type_name(p->type), d);
		p->cb(c, -ETIMEDOUT, msg, NULL, p->arg);
		free(p);
	}
	/* A lost connection fails the rest from its close callback. */
	if (c->state == ST_READY)
		arm_req_timer(c);
}

/* ---- losing the connection --------------------------------------------- */

static void lose(struct crun__aclient *c, int err, const char *fmt, ...)
{
	va_list ap;

	if (c->state != ST_READY)
		return;
	c->err = err;
	va_start(ap, fmt);
	vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
	va_end(ap);
	crun__debug("%s", c->msg);
	c->state = ST_LOST_CLOSE;
	uv_timer_stop(&c->ka_timer);
	uv_timer_stop(&c->req_timer);
	uv_close((uv_handle_t *)&c->tcp, on_tcp_close);
}

/* From the socket's close callback: fails every pending request, then
 * reports LOST, unless a callback destroys the client on the way. */
static void report_lost(struct crun__aclient *c)
{
	struct pending *p;

	c->state = ST_DEAD;
	while ((p = c->head)) {
		pending_unlink(c, p);
		p->cb(c, c->err, c->msg, NULL, p->arg);
		free(p);
		if (c->state == ST_DESTROYED)
			return;
	}
	if (c->event_cb)
		c->event_cb(c, CRUN_ACLIENT_EV_LOST, c->err, c->msg, NULL, c->event_arg);
}

/* ---- keep-alive -------------------------------------------------------- */

static void on_ka_timer(uv_timer_t *t);

static void arm_ka(struct crun__aclient *c)
{
	uint64_t now = uv_now(c->loop);
	uint64_t window = (uint64_t)c->ka_interval_ms * (uint64_t)c->ka_max_attempt;
	uint64_t due = c->next_ping;

	if (c->last_rx + window < due)
		due = c->last_rx + window;
	/* At least 1 ms: a timer re-armed for 0 inside its callback would
	 * run again in the same loop iteration. */
	uv_timer_start(&c->ka_timer, on_ka_timer, due > now ? due - now : 1, 0);
}

/* True when bytes wait in the socket: a loop that was busy for a while
 * runs its timers before it reads, and those bytes prove the store alive. */
static bool bytes_waiting(struct crun__aclient *c)
{
	uv_os_fd_t fd;
	char b;

	if (uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0)
		return false;
	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

static void on_ka_timer(uv_timer_t *t)
{
	struct crun__aclient *c = t->data;
	uint64_t now = uv_now(c->loop);
	uint64_t window = (uint64_t)c->ka_interval_ms * (uint64_t)c->ka_max_attempt;

	if (c->state != ST_READY)
		return;
	if (now - c->last_rx >= window) {
		char d[32];

		if (!bytes_waiting(c)) {
			fmt_duration(d, sizeof(d), (int64_t)window);
			lose(c, -ETIMEDOUT, "no reply from the store at '%s' for %s", c->peer, d);
			return;
		}
		/* Read them before writing: they may be the store's last
		 * word (it dropped this client for the same silence), which
		 * a ping into the closed connection would hide behind EPIPE. */
		c->last_rx = now;
		arm_ka(c);
		return;
	}
	if (now >= c->next_ping) {
		struct crun__wire_msg ping = {.type = CRUN_WIRE_PING, .id = next_id(c)};
		int rc = send_msg(c, &ping);

		if (rc < 0) {
			lose(c, rc, "connection to the store at '%s' failed: %s", c->peer,
			     uv_strerror(rc));
			return;
		}
		c->next_ping = now + (uint64_t)c->ka_interval_ms;
	}
	arm_ka(c);
}

/* ---- connecting -------------------------------------------------------- */

static void finish_connect(struct crun__aclient *c, int status)
{
	char msg[MSG_LEN + PEER_LEN + 96], d[32];
	const char *m = NULL;

	uv_timer_stop(&c->conn_timer);
	if (status == 0) {
		c->state = ST_READY;
		if (c->ka_interval_ms > 0) {
			c->last_rx = uv_now(c->loop);
			c->next_ping = c->last_rx + (uint64_t)c->ka_interval_ms;
			arm_ka(c);
		}
	} else {
		c->state = ST_DEAD;
		if (c->msg_plain) {
			m = c->msg;
		} else if (status == -ETIMEDOUT && !c->once) {
			fmt_duration(d, sizeof(d), c->connect_timeout_ms);
			snprintf(msg, sizeof(msg),
				 "cannot connect to the store at '%s' within %s: %s", c->target, d,
				 c->msg);
			m = msg;
		} else {
			snprintf(msg, sizeof(msg), "cannot connect to the store at '%s': %s",
				 c->target, c->msg);
			m = msg;
		}
		crun__debug("%s", m);
	}
	c->connect_cb(c, status, m, c->connect_arg);
}

static void on_conn_timer(uv_timer_t *t);

/* The last attempt failed with c->err: retry, or give up. */
static void attempt_again_or_fail(struct crun__aclient *c)
{
	uint64_t now = uv_now(c->loop);
	uint64_t left = c->deadline > now ? c->deadline - now : 0, wait;

	if (!crun__hello_retryable(c->err) || c->once) {
		finish_connect(c, c->err);
		return;
	}
	if (left == 0) {
		finish_connect(c, -ETIMEDOUT);
		return;
	}
	c->state = ST_BACKOFF;
	wait = (uint64_t)crun__hello_jitter(c->backoff_ms, crun__hello_random());
	uv_timer_start(&c->conn_timer, on_conn_timer, wait < left ? wait : left, 0);
	c->backoff_ms = crun__hello_next_backoff(c->backoff_ms);
}

/* An attempt failed after the socket was set up: close it; the close
 * callback moves on. Before TCP connected, any error moves to the next
 * address; after, only the retryable ones do. */
static void attempt_failed(struct crun__aclient *c, int err, bool plain, const char *fmt, ...)
{
	bool connected = c->state != ST_CONNECTING;
	va_list ap;

	c->err = err;
	c->msg_plain = plain;
	va_start(ap, fmt);
	vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
	va_end(ap);
	c->state = (!connected || crun__hello_retryable(err)) ? ST_RETRY_CLOSE : ST_FAIL_CLOSE;
	if (c->state == ST_FAIL_CLOSE)
		uv_timer_stop(&c->conn_timer);
	uv_close((uv_handle_t *)&c->tcp, on_tcp_close);
}

static void on_tcp_close(uv_handle_t *h)
{
	struct crun__aclient *c = h->data;

	c->tcp_live = false;
	c->refs--;
	switch (c->state) {
	case ST_RETRY_CLOSE:
		if (++c->cur < c->naddrs)
			try_connect(c);
		else
			attempt_again_or_fail(c);
		break;
	case ST_FAIL_CLOSE:
		finish_connect(c, c->err);
		break;
	case ST_LOST_CLOSE:
		report_lost(c);
		break;
	default:
		maybe_free(c);
		break;
	}
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res);

/* Starts resolving host. 0 or a negative errno (nothing started). */
static int resolve(struct crun__aclient *c)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct resolve *r = malloc(sizeof(*r));
	char port[8];
	int rc;

	if (!r)
		return -ENOMEM;
	r->c = c;
	snprintf(port, sizeof(port), "%d", c->port);
	rc = uv_getaddrinfo(c->loop, &r->req, on_resolved, c->host, port, &hints);
	if (rc < 0) {
		free(r);
		return rc;
	}
	c->resolving = r;
	c->refs++;
	c->state = ST_RESOLVING;
	return 0;
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct resolve *r = (struct resolve *)req;
	struct crun__aclient *c = r->c;

	free(r);
	c->refs--;
	if (c->resolving == r)
		c->resolving = NULL;
	if (c->state != ST_RESOLVING) {
		/* Destroyed, or the deadline passed meanwhile. */
		uv_freeaddrinfo(res);
		maybe_free(c);
		return;
	}
	c->naddrs = 0;
	for (struct addrinfo *ai = status == 0 ? res : NULL; ai && c->naddrs < MAX_ADDRS;
	     ai = ai->ai_next) {
		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
		    ai->ai_addrlen > sizeof(c->addrs[0]))
			continue;
		memcpy(&c->addrs[c->naddrs++], ai->ai_addr, ai->ai_addrlen);
	}
	uv_freeaddrinfo(res);
	if (c->naddrs == 0) {
		/* A name may appear later (a container that is not up yet). */
		set_msg(c, -EHOSTUNREACH, false, "cannot resolve '%s': %s", c->host,
			status < 0 ? uv_strerror(status) : "no IPv4 or IPv6 address");
		attempt_again_or_fail(c);
		return;
	}
	c->cur = 0;
	try_connect(c);
}

static void on_connected(uv_connect_t *req, int status);

/* Connects to addrs[cur]. Failures go through the close callback. */
static void try_connect(struct crun__aclient *c)
{
	int rc = uv_tcp_init(c->loop, &c->tcp);

	if (rc < 0) {
		set_msg(c, rc, false, "%s", uv_strerror(rc));
		c->state = ST_FAIL_LATER;
		uv_timer_start(&c->conn_timer, on_conn_timer, 0, 0);
		return;
	}
	c->tcp.data = c;
	c->tcp_live = true;
	c->refs++;
	c->state = ST_CONNECTING;
	c->rlen = 0;
	c->creq.data = c;
	rc = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&c->addrs[c->cur],
			    on_connected);
	if (rc < 0)
		attempt_failed(c, rc, false, "%s", reason(rc));
}

/* Starts one round over every address (resolving a name again). */
static void start_attempt(struct crun__aclient *c)
{
	int rc;

	c->cur = 0;
	if (c->literal) {
		try_connect(c);
		return;
	}
	rc = resolve(c);
	if (rc < 0) {
		set_msg(c, rc, false, "cannot resolve '%s': %s", c->host, uv_strerror(rc));
		attempt_again_or_fail(c);
	}
}

static void on_conn_timer(uv_timer_t *t)
{
	struct crun__aclient *c = t->data;
	uint64_t now = uv_now(c->loop);

	switch (c->state) {
	case ST_BACKOFF:
		if (now >= c->deadline) {
			finish_connect(c, -ETIMEDOUT);
			return;
		}
		start_attempt(c);
		/* Still connecting: the timer now guards the deadline. */
		if (c->state == ST_RESOLVING || c->state == ST_CONNECTING)
			uv_timer_start(&c->conn_timer, on_conn_timer, c->deadline - now, 0);
		break;
	case ST_FAIL_LATER:
		finish_connect(c, c->err);
		break;
	case ST_RETRY_CLOSE:
		/* Out of time while the failed socket closes: its close
		 * callback reports, with the failure as the reason. */
		c->err = -ETIMEDOUT;
		c->state = ST_FAIL_CLOSE;
		break;
	case ST_RESOLVING:
		/* on_resolved will find the state changed and just free. */
		uv_cancel((uv_req_t *)&c->resolving->req);
		set_msg(c, -ETIMEDOUT, false, "cannot resolve '%s' in time", c->host);
		finish_connect(c, -ETIMEDOUT);
		break;
	case ST_CONNECTING:
	case ST_PREAMBLE:
	case ST_HELLO:
		set_msg(c, -ETIMEDOUT, false, "%s",
			c->state == ST_CONNECTING ? "no answer" : "no answer to the handshake");
		c->state = ST_FAIL_CLOSE;
		uv_close((uv_handle_t *)&c->tcp, on_tcp_close);
		break;
	default:
		break;
	}
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_connected(uv_connect_t *req, int status)
{
	struct crun__aclient *c = req->data;
	struct sockaddr_storage ss;
	int len = sizeof(ss), rc;
	struct wreq *w;

	if (c->state != ST_CONNECTING)
		return; /* closing: status is UV_ECANCELED */
	if (status < 0) {
		attempt_failed(c, status, false, "%s", reason(status));
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
		crun__format_addr((struct sockaddr *)&ss, c->peer, sizeof(c->peer), NULL);
	else
		crun__format_addr((struct sockaddr *)&c->addrs[c->cur], c->peer, sizeof(c->peer),
				  NULL);
	crun__hello_client_begin(&c->hello, c->peer);
	c->state = ST_PREAMBLE;
	w = wreq_new(c, CRUN_WIRE_CLIENT_PREAMBLE);
	if (!w) {
		attempt_failed(c, -ENOMEM, false, "out of memory");
		return;
	}
	crun__wire_client_preamble(w->data);
	rc = wreq_send(c, w);
	if (rc == 0)
		rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
	if (rc < 0)
		attempt_failed(c, rc, false, "%s", reason(rc));
}

/* Answers the server's preamble with HELLO (hello.c's step). The bytes
 * consumed, 0 while the preamble is incomplete, or < 0 when the attempt
 * failed. */
static long send_hello(struct crun__aclient *c)
{
	uint8_t cnonce[CRUN_WIRE_NONCE_LEN];
	struct crun__wire_msg hello;
	char err[MSG_LEN];
	long n;
	int rc;

	if (c->rlen < CRUN_WIRE_SERVER_PREAMBLE)
		return 0;
	rc = crun__wire_random(cnonce, sizeof(cnonce));
	if (rc < 0) {
		attempt_failed(c, rc, true, "cannot compute the handshake: %s", strerror(-rc));
		return rc;
	}
	n = crun__hello_client_preamble(&c->hello, c->rbuf, c->rlen, cnonce, next_id(c), &hello,
					err, sizeof(err));
	if (n < 0) {
		attempt_failed(c, (int)n, true, "%s", err);
		return n;
	}
	c->state = ST_HELLO;
	rc = send_msg(c, &hello);
	crun__hello_client_sent(&c->hello);
	if (rc < 0) {
		attempt_failed(c, rc, false, "%s", reason(rc));
		return rc;
	}
	return n;
}

/* A frame while HELLO waits for its answer. */
static void handshake_frame(struct crun__aclient *c, const struct crun__wire_msg *m)
{
	char err[MSG_LEN];
	int rc = crun__hello_client_reply(&c->hello, m, err, sizeof(err));

	if (rc < 0)
		attempt_failed(c, rc, true, "%s", err);
	else
		finish_connect(c, 0);
}

/* A frame on a ready connection. May run user callbacks. */
static void ready_frame(struct crun__aclient *c, const struct crun__wire_msg *m)
{
	char buf[MSG_LEN], *heap = NULL;
	const char *text = NULL;
	struct pending *p;
	int status = 0;

	switch (m->type) {
	case CRUN_WIRE_NOTIFY:
	case CRUN_WIRE_RDZV_EVENT:
		if (c->event_cb)
			c->event_cb(c,
				    m->type == CRUN_WIRE_NOTIFY ? CRUN_ACLIENT_EV_NOTIFY
								: CRUN_ACLIENT_EV_RDZV,
				    0, NULL, m, c->event_arg);
		return;
	case CRUN_WIRE_ERROR:
		text = crun__wire_error_text(m, buf, sizeof(buf), &heap);
		status = crun__wire_frame_errno(m);
		if (m->id == 0) {
			/* Said before the server closes this connection. */
			lose(c, status, "the store at '%s' closed the connection: %s", c->peer,
			     text);
			free(heap);
			return;
		}
		break;
	default:
		break;
	}
	p = pending_find(c, m->id);
	if (p) {
		/* Otherwise a keep-alive PING's answer, or a request that timed
		 * out: dropped. */
		pending_unlink(c, p);
		p->cb(c, status, text, m, p->arg);
		free(p);
	}
	free(heap);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct crun__aclient *c = h->data;
	size_t need = RBUF_MIN, frame;

	(void)suggested;
	/* Room for the whole frame whose header is in, no more. */
	frame = c->state == ST_PREAMBLE ? 0 : crun__wire_frame_size(c->rbuf, c->rlen, c->max_frame);
	if (frame > need)
		need = frame;
	if (need > c->rcap) {
		uint8_t *p = realloc(c->rbuf, need);

		if (!p) {
			*buf = uv_buf_init(NULL, 0); /* on_read gets UV_ENOBUFS */
			return;
		}
		c->rbuf = p;
		c->rcap = need;
	}
	*buf = uv_buf_init((char *)c->rbuf + c->rlen, (unsigned int)(c->rcap - c->rlen));
}

static bool reading(const struct crun__aclient *c)
{
	return c->state == ST_PREAMBLE || c->state == ST_HELLO || c->state == ST_READY;
}

/* A read error or EOF. */
static void conn_error(struct crun__aclient *c, int err)
{
	int e = err == UV_EOF ? -ECONNRESET : err == UV_ENOBUFS ? -ENOMEM : err;

	if (c->state == ST_READY) {
		if (err == UV_EOF)
			lose(c, e, "connection to the store at '%s' closed", c->peer);
		else if (err == UV_ECONNRESET)
			lose(c, e, "connection to the store at '%s' reset", c->peer);
		else
			lose(c, e, "connection to the store at '%s' failed: %s", c->peer,
			     uv_strerror(e));
		return;
	}
	attempt_failed(c, e, false, "%s", reason(e));
}

/* Decodes and handles every whole frame buffered. */
static void process(struct crun__aclient *c)
{
	struct crun__wire_msg m;
	size_t pos = 0;
	char err[160];

	if (c->state == ST_PREAMBLE) {
		long n = send_hello(c);

		if (n <= 0)
			return;
		pos = (size_t)n;
	}
	while (c->state == ST_HELLO || c->state == ST_READY) {
		long n = crun__wire_decode_grow(c->rbuf + pos, c->rlen - pos, c->max_frame, &m,
						&c->items, &c->items_cap, err, sizeof(err));

		if (n == -ENOMEM) {
			conn_error(c, UV_ENOBUFS);
			return;
		}
		if (n == 0)
			break;
		if (n > 0 && crun__wire_check_reply(&m, err, sizeof(err)) < 0)
			n = -EPROTO;
		if (n < 0) {
			if (c->state == ST_READY)
				lose(c, -EPROTO, "bad frame from the store at '%s': %s", c->peer,
				     err);
			else
				attempt_failed(c, -EPROTO, true,
					       "bad frame from the store at '%s': %s", c->peer,
					       err);
			return;
		}
		pos += (size_t)n;
		if (c->state == ST_HELLO)
			handshake_frame(c, &m);
		else
			ready_frame(c, &m);
	}
	if (!reading(c))
		return; /* closing (or destroyed): the buffer is not read again */
	if (pos) {
		memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
		c->rlen -= pos;
	}
	if (c->rlen == 0 && c->rcap > RBUF_KEEP) {
		free(c->rbuf);
		c->rbuf = NULL;
		c->rcap = 0;
	}
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct crun__aclient *c = s->data;

	(void)buf;
	if (!reading(c) || nread == 0)
		return;
	if (nread < 0) {
		conn_error(c, (int)nread);
		return;
	}
	c->rlen += (size_t)nread;
	c->last_rx = uv_now(c->loop);
	process(c);
}

/* ---- public API -------------------------------------------------------- */

struct crun__aclient *crun__aclient_create(uv_loop_t *loop, const struct crun__aclient_opts *opts,
					   crun__aclient_event_cb event_cb, void *arg)
{
	struct crun__aclient *c;
	struct in6_addr a6;
	struct in_addr a4;

	if (!loop || !opts || !opts->host || !*opts->host || opts->port < 1 || opts->port > 65535 ||
	    !opts->run_id || !*opts->run_id || opts->connect_timeout_ms < 0 ||
	    opts->keepalive_interval_ms < 0 ||
	    (opts->keepalive_interval_ms > 0 && opts->keepalive_max_attempt < 1) ||
	    (opts->token && !opts->token_len))
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->loop = loop;
	c->port = opts->port;
	c->host = strdup(opts->host);
	c->items = calloc(ITEMS_MIN, sizeof(*c->items));
	if (!c->host || !c->items ||
	    crun__hello_client_init(&c->hello, opts->run_id, opts->token, opts->token_len) < 0)
		goto out_free;
	c->items_cap = ITEMS_MIN;
	c->connect_timeout_ms = opts->connect_timeout_ms;
	c->once = opts->connect_timeout_ms == 0;
	c->ka_interval_ms = opts->keepalive_interval_ms;
	c->ka_max_attempt = opts->keepalive_max_attempt;
	c->max_frame = opts->max_frame ? opts->max_frame : DEFAULT_MAX_FRAME;
	if (c->max_frame > CRUN_WIRE_MAX_PAYLOAD)
		c->max_frame = CRUN_WIRE_MAX_PAYLOAD;
	c->event_cb = event_cb;
	c->event_arg = arg;

	if (uv_inet_pton(AF_INET, c->host, &a4) == 0) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&c->addrs[0];

		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)c->port);
		s4->sin_addr = a4;
		c->literal = true;
	} else if (uv_inet_pton(AF_INET6, c->host, &a6) == 0) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&c->addrs[0];

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)c->port);
		s6->sin6_addr = a6;
		c->literal = true;
	}
	if (c->literal)
		c->naddrs = 1;
	crun__format_endpoint(c->target, sizeof(c->target), c->host, c->port);
	memcpy(c->peer, c->target, sizeof(c->peer));

	uv_timer_init(loop, &c->conn_timer);
	uv_timer_init(loop, &c->ka_timer);
	uv_timer_init(loop, &c->req_timer);
	c->conn_timer.data = c->ka_timer.data = c->req_timer.data = c;
	c->refs = 3;
	return c;
out_free:
	crun__hello_client_finish(&c->hello);
	free(c->items);
	free(c->host);
	free(c);
	return NULL;
}

int crun__aclient_connect(struct crun__aclient *c, crun__aclient_connect_cb cb, void *arg)
{
	uint64_t now;
	int rc = 0;

	if (!c || !cb)
		return -EINVAL;
	if (c->state != ST_IDLE)
		return -EALREADY;
	c->connect_cb = cb;
	c->connect_arg = arg;
	now = uv_now(c->loop);
	c->deadline = now + (uint64_t)(c->once ? TRY_ONCE_TIMEOUT_MS : c->connect_timeout_ms);
	c->backoff_ms = CRUN__HELLO_BACKOFF_FIRST_MS;
	c->cur = 0;
	if (!c->literal) {
		rc = resolve(c);
		if (rc < 0)
			return rc;
	}
	uv_timer_start(&c->conn_timer, on_conn_timer, c->deadline - now, 0);
	if (c->literal)
		try_connect(c);
	return 0;
}

int crun__aclient_request(struct crun__aclient *c, const struct crun__wire_msg *msg,
			  int64_t timeout_ms, crun__aclient_reply_cb cb, void *arg, uint32_t *id)
{
	struct crun__wire_msg m;
	struct pending *p;
	char why[160];
	int rc;

	if (!c || !msg || !cb)
		return -EINVAL;
	if (c->state != ST_READY)
		return -ENOTCONN;
	m = *msg;
	if (!crun__wire_is_request(m.type) || m.type == CRUN_WIRE_HELLO)
		return -EINVAL;
	m.id = next_id(c);
	if (crun__wire_validate(&m, why, sizeof(why)) < 0) {
		crun__debug("not sending a malformed %s request to the store: %s",
			    crun__wire_type_name(m.type), why);
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	rc = send_msg(c, &m);
	if (rc == -E2BIG || rc == -ENOMEM) {
		free(p);
		return rc;
	}
	if (rc < 0) {
		free(p);
		lose(c, rc, "connection to the store at '%s' failed: %s", c->peer, uv_strerror(rc));
		return rc;
	}
	p->id = m.id;
	p->type = m.type;
	p->cb = cb;
	p->arg = arg;
	p->timeout_ms = timeout_ms;
	p->prev = c->tail;
	if (c->tail)
		c->tail->next = p;
	else
		c->head = p;
	c->tail = p;
	if (timeout_ms > 0) {
		p->deadline = uv_now(c->loop) + (uint64_t)timeout_ms;
		if (!c->req_due || p->deadline < c->req_due)
			arm_req_timer(c);
	}
	if (id)
		*id = m.id;
	return 0;
}

bool crun__aclient_store_has(const struct crun__aclient *c, uint16_t flag)
{
	return (c->hello.flags & flag) == flag;
}

const char *crun__aclient_peer(const struct crun__aclient *c)
{
	return c ? c->peer : "";
}

void crun__aclient_destroy(struct crun__aclient *c)
{
	struct pending *p;

	if (!c || c->state == ST_DESTROYED)
		return;
	if (c->state == ST_RESOLVING && c->resolving)
		uv_cancel((uv_req_t *)&c->resolving->req);
	if (c->tcp_live && !uv_is_closing((uv_handle_t *)&c->tcp))
		uv_close((uv_handle_t *)&c->tcp, on_tcp_close);
	c->state = ST_DESTROYED;
	while ((p = c->head)) {
		pending_unlink(c, p);
		free(p);
	}
	crun__hello_client_finish(&c->hello);
	uv_close((uv_handle_t *)&c->conn_timer, on_handle_close);
	uv_close((uv_handle_t *)&c->ka_timer, on_handle_close);
	uv_close((uv_handle_t *)&c->req_timer, on_handle_close);
}

/* One reply in flight per connection: a request is parsed from the
 * bytes read so far, answered with one uv_write of head and body, and the
 * connection is read again (or its next pipelined request parsed) only
 * when that write completes, so that a client that does not read its
 * replies holds one reply's memory at most. */
#include "rendezvous/metrics_http.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/http.h"
#include "common/log.h"
#include "common/prom.h"
#include "rendezvous/netio.h"

struct mconn {
	uv_tcp_t tcp;
	uv_timer_t timer;
	struct crun__metrics_http *m;
	struct mconn *prev, *next;
	uv_write_t wreq;
	uv_shutdown_t sreq;
	char *out;	  /* the reply being written */
	size_t len, took; /* bytes in buf; of them, the request answered */
	int open_handles;
	bool reading, writing, close_after, closing;
	bool draining; /* replied and shut down: reading to discard until EOF */
	char buf[CRUN_HTTP_MAX_HEAD];
};

struct crun__metrics_http {
	uv_loop_t *loop;
	uv_tcp_t listener;
	crun__metrics_render_cb render;
	void *arg;
	struct mconn *conns;
	int nconns;
	int port;
	int open_handles;
	bool destroying;
	/* A connection refused for want of memory is accepted into spare and
	 * closed at once (refuse()); pending: another waits until it is. */
	uv_tcp_t spare;
	bool spare_busy, pending;
};

static void maybe_free(struct crun__metrics_http *m)
{
	if (m->destroying && m->open_handles == 0)
		free(m);
}

static void on_listener_closed(uv_handle_t *h)
{
	struct crun__metrics_http *m = h->data;

	m->open_handles--;
	maybe_free(m);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
	struct mconn *c = h->data;
	struct crun__metrics_http *m = c->m;

	if (--c->open_handles > 0)
		return;
	free(c->out);
	free(c);
	m->open_handles--;
	maybe_free(m);
}

static void close_conn(struct mconn *c)
{
	struct crun__metrics_http *m = c->m;

	if (c->closing)
		return;
	c->closing = true;
	if (c->prev)
		c->prev->next = c->next;
	else
		m->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	m->nconns--;
	uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
	uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

static void on_idle(uv_timer_t *t)
{
	close_conn(t->data);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct mconn *c = h->data;

	(void)suggested;
	buf->base = c->buf + c->len;
	buf->len = sizeof(c->buf) - c->len;
}

static void process(struct mconn *c);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_shutdown(uv_shutdown_t *req, int status)
{
	struct mconn *c = req->data;

	if (status < 0 && !c->closing)
		close_conn(c);
}

/* After the last reply: a close with unread bytes in the kernel (the
 * rest of a refused request, pipelined ones after a close) would reset
 * the connection and could destroy the reply before the client reads it
 * (RFC 9112 9.6). So the write side is shut down and what comes is read
 * and dropped until the client closes, for CRUN_METRICS_LINGER_MS at
 * most. */
static void linger(struct mconn *c)
{
	c->draining = true;
	c->len = c->took = 0;
	c->sreq.data = c;
	if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
		close_conn(c);
		return;
	}
	uv_timer_start(&c->timer, on_idle, CRUN_METRICS_LINGER_MS, 0);
	if (!c->reading && uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, on_read) == 0)
		c->reading = true;
}

static void on_written(uv_write_t *w, int status)
{
	struct mconn *c = w->data;

	free(c->out);
	c->out = NULL;
	c->writing = false;
	if (c->closing)
		return;
	if (status < 0) {
		close_conn(c);
		return;
	}
	if (c->close_after) {
		linger(c);
		return;
	}
	memmove(c->buf, c->buf + c->took, c->len - c->took);
	c->len -= c->took;
	c->took = 0;
	uv_timer_start(&c->timer, on_idle, CRUN_METRICS_IDLE_MS, 0);
	process(c);
	if (!c->closing && !c->writing && !c->reading &&
	    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, on_read) == 0)
		c->reading = true;
}

/* Writes reply (and, for the metrics, the text), then closes or reads on
 * as reply->close says. */
static void respond(struct mconn *c, struct crun__http_reply *reply)
{
	struct crun__prom text;
	const char *body;
	size_t body_len;
	char head[512], err_body[64];
	int hn;
	uv_buf_t b;

	crun__prom_init(&text);
	if (reply->metrics) {
		if (c->m->render(c->m->arg, &text) < 0 || crun__prom_failed(&text)) {
			reply->status = 500;
			reply->metrics = false;
			reply->close = true;
			reply->body = "Internal Server Error";
		}
	}
	if (reply->metrics) {
		body = text.buf ? text.buf : "";
		body_len = text.len;
	} else {
		snprintf(err_body, sizeof(err_body), "%s\n", reply->body);
		body = err_body;
		body_len = strlen(err_body);
	}
	hn = crun__http_head(head, sizeof(head), reply,
			     reply->metrics ? CRUN_HTTP_PROM_TYPE : "text/plain; charset=utf-8",
			     body_len);
	if (reply->head_only)
		body_len = 0;
	c->out = hn < 0 ? NULL : malloc((size_t)hn + body_len);
	if (!c->out) {
		crun__prom_finish(&text);
		close_conn(c);
		return;
	}
	memcpy(c->out, head, (size_t)hn);
	memcpy(c->out + hn, body, body_len);
	crun__prom_finish(&text);
	b = uv_buf_init(c->out, (unsigned)((size_t)hn + body_len));
	c->close_after = reply->close;
	c->wreq.data = c;
	if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
		free(c->out);
		c->out = NULL;
		close_conn(c);
		return;
	}
	c->writing = true;
	if (c->reading) {
		uv_read_stop((uv_stream_t *)&c->tcp);
		c->reading = false;
	}
}

/* Answers the request at the start of c->buf when it is whole. */
static void process(struct mconn *c)
{
	struct crun__http_request req;
	struct crun__http_reply reply;
	int rc;

	if (c->writing || c->closing || c->len == 0)
		return;
	rc = crun__http_parse(c->buf, c->len, &req);
	if (rc == 0)
		return;
	crun__http_route(rc, &req, "/metrics", &reply);
	c->took = rc > 0 ? (size_t)rc : c->len;
	if (rc < 0)
		crun__debug("metrics: answered a request it cannot serve with HTTP %d (%s)", -rc,
			    crun__http_reason(-rc));
	respond(c, &reply);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct mconn *c = s->data;

	(void)buf;
	if (c->draining) {
		c->len = 0;
		if (nread < 0)
			close_conn(c);
		return;
	}
	if (nread < 0) {
		/* The peer is done sending: answer what is whole, then close. */
		if (c->reading) {
			uv_read_stop(s);
			c->reading = false;
		}
		if (c->writing)
			c->close_after = true;
		else
			close_conn(c);
		return;
	}
	c->len += (size_t)nread;
	process(c);
}

static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
			   "Content-Type: text/plain; charset=utf-8\r\n"
			   "Content-Length: 20\r\n"
			   "Connection: close\r\n"
			   "\r\n"
			   "Service Unavailable\n";

static void on_connection(uv_stream_t *server, int status);

static void on_spare_closed(uv_handle_t *h)
{
	struct crun__metrics_http *m = h->data;

	m->spare_busy = false;
	m->open_handles--;
	if (m->pending && !m->destroying) {
		m->pending = false;
		on_connection((uv_stream_t *)&m->listener, 0);
	}
	maybe_free(m);
}

/* No memory for the connection: it is accepted into the spare handle and
 * closed, because libuv stops watching the listener while a connection
 * it announced is left unaccepted, which would end every later scrape.
 * While the spare is still closing, the connection waits for it. */
static void refuse(struct crun__metrics_http *m)
{
	if (m->spare_busy) {
		m->pending = true;
		return;
	}
	uv_tcp_init(m->loop, &m->spare);
	m->spare.data = m;
	m->spare_busy = true;
	m->open_handles++;
	uv_accept((uv_stream_t *)&m->listener, (uv_stream_t *)&m->spare);
	uv_close((uv_handle_t *)&m->spare, on_spare_closed);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct crun__metrics_http *m = server->data;
	struct mconn *c;

	if (status < 0 || m->destroying)
		return;
	c = calloc(1, sizeof(*c));
	if (!c) {
		refuse(m);
		return;
	}
	c->m = m;
	uv_tcp_init(m->loop, &c->tcp);
	uv_timer_init(m->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	c->open_handles = 2;
	m->open_handles++;
	c->next = m->conns;
	if (m->conns)
		m->conns->prev = c;
	m->conns = c;
	m->nconns++;
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
		close_conn(c);
		return;
	}
	if (m->nconns > CRUN_METRICS_MAX_CONNS) {
		uv_buf_t b = uv_buf_init((char *)busy, sizeof(busy) - 1);

		uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
		close_conn(c);
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	uv_timer_start(&c->timer, on_idle, CRUN_METRICS_IDLE_MS, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, on_read) < 0) {
		close_conn(c);
		return;
	}
	c->reading = true;
}

struct crun__metrics_http *crun__metrics_http_create(uv_loop_t *loop, crun__metrics_render_cb cb,
						     void *arg)
{
	struct crun__metrics_http *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->loop = loop;
	m->render = cb;
	m->arg = arg;
	uv_tcp_init(loop, &m->listener);
	m->listener.data = m;
	m->open_handles = 1;
	return m;
}

int crun__metrics_http_listen(struct crun__metrics_http *m, const char *host, int port, char *err,
			      size_t errlen)
{
	bool loopback, used;

	return crun__net_listen(&m->listener, host, port, on_connection, &m->port, &loopback, &used,
				err, errlen);
}

int crun__metrics_http_port(const struct crun__metrics_http *m)
{
	return m ? m->port : 0;
}

void crun__metrics_http_destroy(struct crun__metrics_http *m)
{
	if (!m)
		return;
	m->destroying = true;
	while (m->conns)
		close_conn(m->conns);
	uv_close((uv_handle_t *)&m->listener, on_listener_closed);
}

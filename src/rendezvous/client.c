/* libcrun's store client: blocking calls over one TCP connection. What the
 * handshake sends and accepts is hello.c's, the frames are wire.c's; this
 * file carries them over a socket and maps them to store.h's calls.
 *
 * Plain POSIX sockets and poll() rather than libuv, so that a native worker
 * linking libcrun needs nothing but libc and libcrypto. The socket is
 * non-blocking and every wait goes through poll() with the call's
 * deadline, which is how each call stays bounded.
 *
 * Requests and replies are matched by id. While a call waits for its
 * reply, NOTIFY frames are copied into the event queue and replies to
 * earlier requests that timed out are dropped, so a late answer can never
 * be mistaken for the current one and the handle stays usable after a
 * timeout.
 *
 * Speed: a request is encoded into one reusable buffer and written with
 * one send(); replies are decoded in place in a reusable read buffer and
 * consumed lazily (the reply stays valid until the next read), so a small
 * operation costs send + poll + recv and no allocation beyond the result. */
#include <crun/store.h>

#include "common/util.h"
#include "rendezvous/hello.h"
#include "rendezvous/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_PORT 29400
#define DEFAULT_RUN_ID "default"
#define DEFAULT_CONNECT_TIMEOUT_MS 30000
#define DEFAULT_MAX_EVENT_BYTES ((size_t)64 << 20)
/* A server-side wait is also enforced here, this much later, in case the
 * server never answers. */
#define WAIT_GRACE_MS 500
/* How many times one call reconnects and resends a request that is safe
 * to repeat before it gives up (each bounded by the call's deadline). */
#define MAX_ATTEMPTS 4
#define RBUF_MIN (64 * 1024)
/* A read buffer grown for a large value shrinks back above this size. */
#define RBUF_KEEP (1024 * 1024)
#define ITEMS_MIN 16
#define ERRMSG_LEN 256
#define PEER_LEN 300

struct event_node {
	struct event_node *next;
	struct crun_store_event ev;
	size_t bytes; /* counted against max_event_bytes */
};

/* fd >= 0 exactly when a connection is up and HELLO has succeeded; every
 * failure that leaves the stream in an unknown state closes it, and the
 * next call connects again (see ensure_connected). */
struct crun_store {
	char *host;
	int port;
	char peer[PEER_LEN];		 /* "host:port", for messages */
	struct crun__hello_client hello; /* run id, token, handshake */
	int connect_timeout_ms;
	int timeout_ms;

	int fd;
	uint32_t last_id;

	uint8_t *wbuf;
	size_t wcap;

	/* Received bytes live in rbuf[rpos, rlen); the frame last returned by
	 * scan() occupies rconsume bytes at rpos until the next read. */
	uint8_t *rbuf;
	size_t rcap, rpos, rlen, rconsume;
	struct crun__wire_item *items;
	uint32_t items_cap;
	struct crun__wire_msg msg;

	/* An ERROR the server sent outside any request (id 0), reported when
	 * the connection then closes. */
	int conn_err;

	struct event_node *ev_head, *ev_tail;
	size_t ev_bytes, max_event_bytes;

	char **watches;
	size_t nwatches, watches_cap;

	char errmsg[ERRMSG_LEN];
};

static void seterr(struct crun_store *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void seterr(struct crun_store *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->errmsg, sizeof(s->errmsg), fmt, ap);
	va_end(ap);
}

const char *crun_store_strerror(int code)
{
	switch (code) {
	case 0:
		return "success";
	case -ENOENT:
		return "key not found";
	case -ETIMEDOUT:
		return "timed out";
	case -ECONNREFUSED:
		return "connection refused";
	case -EHOSTUNREACH:
		return "host unreachable";
	case -ENETUNREACH:
		return "network unreachable";
	case -ECONNRESET:
		return "connection lost";
	case -EPIPE:
		return "connection closed";
	case -ENOTCONN:
		return "not connected";
	case -EACCES:
		return "authentication failed";
	case -EPROTO:
		return "protocol error";
	case -EPROTONOSUPPORT:
		return "protocol version not supported";
	case -E2BIG:
		return "key or value too large";
	case -EMSGSIZE:
		return "message too large";
	case -ENOSPC:
		return "too many keys in the run";
	case -EMFILE:
		return "the store is at its connection limit";
	case -ENOBUFS:
		return "the store's buffer for this connection is full";
	case -EINVAL:
		return "invalid argument";
	case -ERANGE:
		return "number out of range";
	case -ENOMEM:
		return "out of memory";
	case -EIO:
		return "input/output error";
	default:
		return code < 0 ? strerror(-code) : "unknown error";
	}
}

const char *crun_store_errmsg(const struct crun_store *s)
{
	return s ? s->errmsg : "";
}

int crun_store_fd(const struct crun_store *s)
{
	return s ? s->fd : -1;
}

void crun_store_buf_finish(struct crun_store_buf *buf)
{
	if (!buf)
		return;
	free(buf->data);
	buf->data = NULL;
	buf->len = 0;
}

void crun_store_event_finish(struct crun_store_event *ev)
{
	if (!ev)
		return;
	free(ev->key);
	ev->key = NULL;
	crun_store_buf_finish(&ev->value);
}

void crun_store_list_free(char **keys, size_t n)
{
	if (!keys)
		return;
	for (size_t i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
}

static int buf_from_item(struct crun_store_buf *out, const struct crun__wire_item *it)
{
	out->data = malloc((size_t)it->len + 1);
	if (!out->data) {
		out->len = 0;
		return -ENOMEM;
	}
	if (it->len)
		memcpy(out->data, it->data, it->len);
	out->data[it->len] = '\0';
	out->len = it->len;
	return 0;
}

static uint64_t deadline_after(int ms)
{
	return crun__now_ms() + (uint64_t)(ms > 0 ? ms : 0);
}

/* Remaining milliseconds until deadline for poll(), 0 when it passed. */
static int remaining_ms(uint64_t deadline)
{
	uint64_t now = crun__now_ms();

	if (now >= deadline)
		return 0;
	return deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
}

/* Waits until fd has one of events. 0, -ETIMEDOUT, or a negative errno. */
static int wait_fd(int fd, short events, uint64_t deadline, short *revents)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		int ms = remaining_ms(deadline), rc;

		if (ms == 0)
			return -ETIMEDOUT;
		rc = poll(&p, 1, ms);
		if (rc < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (rc > 0) {
			if (revents)
				*revents = p.revents;
			return 0;
		}
	}
}

static void sleep_ms(int ms)
{
	uint64_t deadline = deadline_after(ms);
	int left;

	while ((left = remaining_ms(deadline)) > 0)
		poll(NULL, 0, left);
}

static bool is_conn_error(int rc)
{
	return rc == -ECONNRESET || rc == -EPIPE || rc == -ECONNREFUSED || rc == -ENOTCONN ||
	       rc == -ECONNABORTED || rc == -ENETUNREACH || rc == -EHOSTUNREACH ||
	       rc == -ENETDOWN || rc == -ENETRESET;
}

static void free_events(struct crun_store *s)
{
	struct event_node *n = s->ev_head, *next;

	for (; n; n = next) {
		next = n->next;
		crun_store_event_finish(&n->ev);
		free(n);
	}
	s->ev_head = s->ev_tail = NULL;
	s->ev_bytes = 0;
}

static void append_event(struct crun_store *s, struct event_node *n)
{
	if (s->ev_tail)
		s->ev_tail->next = n;
	else
		s->ev_head = n;
	s->ev_tail = n;
	s->ev_bytes += n->bytes;
}

/* Closes the connection; watches and queued events are kept so that the
 * next connection can restore the watches. */
static void drop_conn(struct crun_store *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	s->rpos = s->rlen = s->rconsume = 0;
	s->conn_err = 0;
}

static uint32_t next_id(struct crun_store *s)
{
	return crun__wire_next_id(&s->last_id);
}

/* ---- reading ---------------------------------------------------------- */

static void consume_pending(struct crun_store *s)
{
	s->rpos += s->rconsume;
	s->rconsume = 0;
	if (s->rpos == s->rlen) {
		s->rpos = s->rlen = 0;
		if (s->rcap > RBUF_KEEP) {
			uint8_t *p = realloc(s->rbuf, RBUF_MIN);

			if (p) {
				s->rbuf = p;
				s->rcap = RBUF_MIN;
			}
		}
	}
}

/* Makes room after rlen for the rest of the frame at rpos (its header,
 * when complete, says how long it is). */
static int make_room(struct crun_store *s)
{
	size_t avail, frame, need = RBUF_MIN;

	consume_pending(s);
	avail = s->rlen - s->rpos;
	frame = crun__wire_frame_size(s->rbuf + s->rpos, avail, CRUN_WIRE_MAX_PAYLOAD);
	if (frame > need)
		need = frame;
	if (s->rpos && s->rpos + need > s->rcap) {
		memmove(s->rbuf, s->rbuf + s->rpos, avail);
		s->rpos = 0;
		s->rlen = avail;
	}
	if (need > s->rcap) {
		uint8_t *p = realloc(s->rbuf, need);

		if (!p)
			return -ENOMEM;
		s->rbuf = p;
		s->rcap = need;
	}
	return 0;
}

/* One recv() into the read buffer. 0 when bytes came, -EAGAIN when none
 * were ready, -ECONNRESET at end of stream, or a negative errno. */
static int read_some(struct crun_store *s)
{
	int rc = make_room(s);

	if (rc < 0)
		return rc;
	for (;;) {
		ssize_t n = recv(s->fd, s->rbuf + s->rlen, s->rcap - s->rlen, 0);

		if (n > 0) {
			s->rlen += (size_t)n;
			return 0;
		}
		if (n == 0) {
			if (s->conn_err)
				return s->conn_err;
			seterr(s, "the store closed the connection");
			return -ECONNRESET;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -EAGAIN;
		if (s->conn_err)
			return s->conn_err;
		rc = -errno;
		seterr(s, "connection to the store failed: %s", strerror(errno));
		return rc;
	}
}

/* Waits for bytes until deadline and reads them. */
static int fill(struct crun_store *s, uint64_t deadline)
{
	for (;;) {
		int rc = wait_fd(s->fd, POLLIN, deadline, NULL);

		if (rc < 0)
			return rc;
		rc = read_some(s);
		if (rc != -EAGAIN)
			return rc;
		/* The store's last word is in (it is closing): no reply
		 * follows, even if that word's errno is EAGAIN itself. */
		if (s->conn_err)
			return s->conn_err;
	}
}

static int queue_event(struct crun_store *s, const struct crun__wire_msg *m)
{
	size_t bytes = sizeof(struct event_node) + m->items[0].len + m->items[1].len;
	struct event_node *n;

	/* an OVERFLOW is queued, and nothing after it until it is read: it is
	 * then the queue's last event */
	if (s->ev_tail && s->ev_tail->ev.type == CRUN_STORE_EV_OVERFLOW)
		return 0;
	if (s->ev_bytes + bytes > s->max_event_bytes) {
		/* full: one OVERFLOW stands for this event and those after it */
		n = calloc(1, sizeof(*n));
		if (!n)
			return -ENOMEM;
		n->ev.type = CRUN_STORE_EV_OVERFLOW;
		n->ev.key = strdup("");
		n->ev.value.data = calloc(1, 1); /* "", as every value */
		if (!n->ev.key || !n->ev.value.data) {
			free(n->ev.key);
			free(n->ev.value.data);
			free(n);
			return -ENOMEM;
		}
		n->bytes = sizeof(*n);
		append_event(s, n);
		return 0;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->ev.type = m->num == CRUN_WIRE_EV_SET ? CRUN_STORE_EV_SET : CRUN_STORE_EV_DELETE;
	n->ev.key = malloc((size_t)m->items[0].len + 1);
	if (!n->ev.key)
		goto out_free_node;
	memcpy(n->ev.key, m->items[0].data, m->items[0].len);
	n->ev.key[m->items[0].len] = '\0';
	if (buf_from_item(&n->ev.value, &m->items[1]) < 0)
		goto out_free_key;
	n->bytes = bytes;
	append_event(s, n);
	return 0;
out_free_key:
	free(n->ev.key);
out_free_node:
	free(n);
	return -ENOMEM;
}

/* The server's text of an ERROR as the call's message; the errno's own
 * words when the server sent none. Returns the errno. */
static int save_server_error(struct crun_store *s, const struct crun__wire_msg *m)
{
	crun__wire_error_text(m, s->errmsg, sizeof(s->errmsg), NULL);
	if (!s->errmsg[0])
		seterr(s, "%s", crun_store_strerror(crun__wire_frame_errno(m)));
	return crun__wire_frame_errno(m);
}

/* Decodes the frames already buffered: NOTIFY frames are queued, stale
 * replies dropped. Returns 1 with s->msg holding the reply to want (valid
 * until the next read), 0 when more bytes are needed, or a negative errno
 * when the server broke the protocol. */
static int scan(struct crun_store *s, uint32_t want)
{
	char err[160];

	for (;;) {
		long n;
		int rc;

		consume_pending(s);
		n = crun__wire_decode_grow(s->rbuf + s->rpos, s->rlen - s->rpos,
					   CRUN_WIRE_MAX_PAYLOAD, &s->msg, &s->items, &s->items_cap,
					   err, sizeof(err));
		if (n == -ENOMEM)
			return -ENOMEM;
		if (n == 0)
			return 0;
		if (n > 0) {
			s->rconsume = (size_t)n;
			n = crun__wire_check_reply(&s->msg, err, sizeof(err));
		}
		if (n < 0) {
			seterr(s, "bad frame from the store: %s", err);
			return -EPROTO;
		}
		if (s->msg.type == CRUN_WIRE_NOTIFY) {
			rc = queue_event(s, &s->msg);
			if (rc < 0)
				return rc;
			continue;
		}
		if (want && s->msg.id == want)
			return 1;
		if (s->msg.id == 0 && s->msg.type == CRUN_WIRE_ERROR)
			s->conn_err = save_server_error(s, &s->msg);
		/* Anything else answers a request that already timed out. */
	}
}

/* Reads until the reply to id arrives (in s->msg) or deadline passes. */
static int await_reply(struct crun_store *s, uint32_t id, uint64_t deadline)
{
	for (;;) {
		int rc = scan(s, id);

		if (rc != 0)
			return rc < 0 ? rc : 0;
		rc = fill(s, deadline);
		if (rc < 0)
			return rc;
	}
}

/* ---- writing ---------------------------------------------------------- */

/* Encodes req into the reusable buffer and sends it whole. Bytes that
 * arrive meanwhile are read (and NOTIFY frames queued), so neither side
 * can block the other with a full socket buffer. *sent_any tells whether
 * the server may have seen part of the request. */
static int send_frame(struct crun_store *s, const struct crun__wire_msg *req, uint64_t deadline,
		      bool *sent_any)
{
	size_t size, off = 0;

	*sent_any = false;
	if (crun__wire_sendable_size(req, &size) < 0) {
		seterr(s, "request of %zu bytes exceeds the protocol limit", size);
		return -E2BIG;
	}
	if (size > s->wcap) {
		uint8_t *p = realloc(s->wbuf, size);

		if (!p)
			return -ENOMEM;
		s->wbuf = p;
		s->wcap = size;
	}
	crun__wire_encode(req, s->wbuf);
	while (off < size) {
		ssize_t n = send(s->fd, s->wbuf + off, size - off, MSG_NOSIGNAL);
		short rev = 0;
		int rc;

		if (n > 0) {
			off += (size_t)n;
			*sent_any = true;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			rc = -errno;
			seterr(s, "connection to the store failed: %s", strerror(errno));
			return rc;
		}
		rc = wait_fd(s->fd, POLLOUT | POLLIN, deadline, &rev);
		if (rc < 0) {
			if (rc == -ETIMEDOUT)
				seterr(s, "timed out sending a request");
			return rc;
		}
		if (rev & POLLIN) {
			rc = read_some(s);
			if (rc < 0 && rc != -EAGAIN)
				return rc;
			rc = scan(s, 0);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* ---- connecting ------------------------------------------------------- */

/* One TCP connection attempt to every address of host, in order. */
static int tcp_connect(struct crun_store *s, uint64_t deadline)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	char port[8];
	int rc, last = -ECONNREFUSED;

	snprintf(port, sizeof(port), "%d", s->port);
	rc = getaddrinfo(s->host, port, &hints, &res);
	if (rc) {
		seterr(s, "cannot resolve '%s': %s", s->host,
		       rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return rc == EAI_AGAIN ? -EAGAIN : -EHOSTUNREACH;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
				ai->ai_protocol);
		int one = 1, soerr = 0;
		socklen_t len = sizeof(soerr);

		if (fd < 0) {
			last = -errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			if (errno != EINPROGRESS && errno != EINTR) {
				last = -errno;
				close(fd);
				continue;
			}
			rc = wait_fd(fd, POLLOUT, deadline, NULL);
			if (rc < 0) {
				last = rc;
				close(fd);
				if (rc == -ETIMEDOUT)
					break;
				continue;
			}
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
				soerr = errno;
			if (soerr) {
				last = -soerr;
				close(fd);
				continue;
			}
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		freeaddrinfo(res);
		s->fd = fd;
		return 0;
	}
	freeaddrinfo(res);
	seterr(s, "cannot connect to '%s': %s", s->peer, crun_store_strerror(last));
	return last;
}

/* A server that refuses a connection (at its connection limit, say) sends
 * an ERROR and closes, possibly before our HELLO reaches it; that ERROR,
 * when it can still be read, says more than the broken pipe. */
static int salvage_error(struct crun_store *s, int rc)
{
	while (!s->conn_err && read_some(s) == 0)
		if (scan(s, 0) < 0)
			break;
	if (!s->conn_err)
		scan(s, 0);
	return s->conn_err ? s->conn_err : rc;
}

/* Exchanges preambles and HELLO on the fresh connection in s->fd; the
 * steps are hello.c's, this carries their bytes. */
static int handshake(struct crun_store *s, uint64_t deadline)
{
	uint8_t pre[CRUN_WIRE_CLIENT_PREAMBLE], cnonce[CRUN_WIRE_NONCE_LEN];
	struct crun__wire_msg hello;
	uint32_t id = next_id(s);
	bool sent;
	long n;
	int rc;

	crun__hello_client_begin(&s->hello, s->peer);
	crun__wire_client_preamble(pre);
	rc = crun__write_all(s->fd, pre, CRUN_WIRE_CLIENT_PREAMBLE);
	if (rc == -EAGAIN) /* 8 bytes into an empty socket buffer */
		rc = -EPIPE;
	if (rc < 0) {
		seterr(s, "cannot connect to '%s': %s", s->peer, strerror(-rc));
		return rc;
	}
	rc = crun__wire_random(cnonce, sizeof(cnonce));
	if (rc < 0) {
		seterr(s, "cannot compute the handshake: %s", strerror(-rc));
		return rc;
	}
	while ((n = crun__hello_client_preamble(&s->hello, s->rbuf, s->rlen, cnonce, id, &hello,
						s->errmsg, sizeof(s->errmsg))) == 0) {
		rc = fill(s, deadline);
		if (rc < 0) {
			if (rc == -ETIMEDOUT)
				seterr(s, "cannot connect to '%s': no answer to the handshake",
				       s->peer);
			return rc;
		}
	}
	if (n < 0)
		return (int)n;
	s->rpos = (size_t)n;
	rc = send_frame(s, &hello, deadline, &sent);
	crun__hello_client_sent(&s->hello);
	if (rc == 0)
		rc = await_reply(s, hello.id, deadline);
	if (rc < 0 && is_conn_error(rc))
		rc = salvage_error(s, rc);
	if (rc < 0) {
		if (rc == -ETIMEDOUT)
			seterr(s, "cannot connect to '%s': no answer to the handshake", s->peer);
		return rc;
	}
	rc = crun__hello_client_reply(&s->hello, &s->msg, s->errmsg, sizeof(s->errmsg));
	if (rc < 0 && !s->errmsg[0])
		seterr(s, "%s", crun_store_strerror(rc));
	return rc;
}

/* Sends WATCH again for every key after a reconnect. */
static int rewatch(struct crun_store *s, uint64_t deadline)
{
	for (size_t i = 0; i < s->nwatches; i++) {
		struct crun__wire_item it = {(const uint8_t *)s->watches[i],
					     (uint32_t)strlen(s->watches[i])};
		struct crun__wire_msg req = {.type = CRUN_WIRE_WATCH, .count = 1, .items = &it};
		bool sent;
		int rc;

		req.id = next_id(s);
		rc = send_frame(s, &req, deadline, &sent);
		if (rc == 0)
			rc = await_reply(s, req.id, deadline);
		if (rc < 0)
			return rc;
		if (s->msg.type == CRUN_WIRE_ERROR)
			return save_server_error(s, &s->msg);
	}
	return 0;
}

/* Connects, authenticates and restores watches, retrying what a server
 * that is not up yet (or restarting) answers, with exponential backoff,
 * until deadline. */
static int do_connect(struct crun_store *s, uint64_t deadline)
{
	int backoff = CRUN__HELLO_BACKOFF_FIRST_MS, wait, rc;

	for (;;) {
		s->rpos = s->rlen = s->rconsume = 0;
		s->conn_err = 0;
		rc = tcp_connect(s, deadline);
		if (rc == 0) {
			rc = handshake(s, deadline);
			if (rc == 0)
				rc = rewatch(s, deadline);
			if (rc == 0)
				return 0;
			drop_conn(s);
		}
		if (!crun__hello_retryable(rc) || remaining_ms(deadline) == 0)
			break;
		wait = crun__hello_jitter(backoff, crun__hello_random());
		sleep_ms(wait < remaining_ms(deadline) ? wait : remaining_ms(deadline));
		backoff = crun__hello_next_backoff(backoff);
		if (remaining_ms(deadline) == 0)
			break;
	}
	if (rc == -ECONNRESET || rc == -EPIPE || rc == -ETIMEDOUT)
		seterr(s, "cannot connect to '%s': %s", s->peer, crun_store_strerror(rc));
	return rc;
}

static int ensure_connected(struct crun_store *s, uint64_t deadline)
{
	uint64_t cdl;

	if (s->fd >= 0)
		return 0;
	cdl = deadline_after(s->connect_timeout_ms);
	return do_connect(s, cdl < deadline ? cdl : deadline);
}

int crun_store_connect(struct crun_store *s)
{
	if (!s)
		return -EINVAL;
	if (s->fd >= 0)
		return 0;
	return do_connect(s, deadline_after(s->connect_timeout_ms));
}

/* A request that must not be sent twice goes out only on a connection
 * that is still open: a close the server already sent is noticed here,
 * before sending, so that a restarted server does not cost the caller a
 * -ECONNRESET. */
static int check_alive(struct crun_store *s)
{
	for (;;) {
		int rc = read_some(s);

		if (rc == -EAGAIN)
			return 0;
		if (rc < 0)
			return rc;
		rc = scan(s, 0);
		if (rc < 0)
			return rc;
	}
}

/* ---- requests --------------------------------------------------------- */

struct call {
	struct crun__wire_msg *req;
	bool repeatable;   /* safe to send again after a lost reply */
	uint64_t deadline; /* of the whole call */
	uint64_t wait_end; /* server-side wait ends here (0: no wait) */
};

static int reply_error(struct crun_store *s)
{
	if (s->msg.type != CRUN_WIRE_ERROR)
		return 0;
	return save_server_error(s, &s->msg);
}

/* Sends c->req and waits for its reply, left in s->msg. Reconnects and
 * resends as store.h promises. Returns 0 (the reply is not an ERROR) or
 * a negative errno. */
static int transact(struct crun_store *s, struct call *c)
{
	int rc;

	for (int attempt = 1;; attempt++) {
		bool sent = false;

		rc = ensure_connected(s, c->deadline);
		if (rc < 0)
			return rc;
		if (!c->repeatable) {
			rc = check_alive(s);
			if (rc < 0) {
				drop_conn(s);
				if (!is_conn_error(rc) || attempt >= MAX_ATTEMPTS)
					return rc;
				continue;
			}
		}
		if (c->wait_end) {
			int left = remaining_ms(c->wait_end);

			if (left == 0) {
				seterr(s, "timed out");
				return -ETIMEDOUT;
			}
			c->req->num = left;
		}
		c->req->id = next_id(s);
		rc = send_frame(s, c->req, c->deadline, &sent);
		if (rc == 0) {
			rc = await_reply(s, c->req->id, c->deadline);
			if (rc == 0)
				return reply_error(s);
			if (rc == -ETIMEDOUT) {
				/* The handle stays usable: the late reply is
				 * dropped by its id. */
				seterr(s, "timed out waiting for the store");
				return rc;
			}
		} else if (rc == -ETIMEDOUT && !sent) {
			return rc;
		}
		/* Half a frame sent, a broken stream or a protocol error: this
		 * connection cannot be trusted any more. */
		drop_conn(s);
		if (rc == -ETIMEDOUT || !is_conn_error(rc))
			return rc;
		if (sent && !c->repeatable) {
			seterr(s,
			       "connection lost before the store answered; the %s may have "
			       "been applied",
			       crun__wire_type_name(c->req->type));
			return -ECONNRESET;
		}
		if (attempt >= MAX_ATTEMPTS || remaining_ms(c->deadline) == 0)
			return rc;
	}
}

static int call_timeout(const struct crun_store *s, int timeout_ms)
{
	return timeout_ms > 0 ? timeout_ms : s->timeout_ms;
}

static int simple_call(struct crun_store *s, struct crun__wire_msg *req, bool repeatable,
		       int timeout_ms)
{
	struct call c = {req, repeatable, deadline_after(call_timeout(s, timeout_ms)), 0};

	return transact(s, &c);
}

static int expect_type(struct crun_store *s, uint8_t type, uint32_t min_items)
{
	if (s->msg.type == type && s->msg.count >= min_items)
		return 0;
	seterr(s, "unexpected %s reply to a request", crun__wire_type_name(s->msg.type));
	drop_conn(s);
	return -EPROTO;
}

static int key_item(struct crun_store *s, struct crun__wire_item *it, const char *key)
{
	size_t n;

	if (!key || !*key) {
		seterr(s, "empty key");
		return -EINVAL;
	}
	n = strlen(key);
	if (n > CRUN_WIRE_MAX_PAYLOAD) {
		seterr(s, "key of %zu bytes is too large", n);
		return -E2BIG;
	}
	it->data = (const uint8_t *)key;
	it->len = (uint32_t)n;
	return 0;
}

static int val_item(struct crun_store *s, struct crun__wire_item *it, const void *val, size_t len)
{
	if (len && !val) {
		seterr(s, "value is NULL");
		return -EINVAL;
	}
	if (len > CRUN_WIRE_MAX_PAYLOAD) {
		seterr(s, "value of %zu bytes is too large", len);
		return -E2BIG;
	}
	it->data = val;
	it->len = (uint32_t)len;
	return 0;
}

/* Items for n keys: the caller's stack array when it is big enough. */
static struct crun__wire_item *keys_items(struct crun_store *s, const char *const *keys, size_t n,
					  struct crun__wire_item *stack, size_t stack_n, int *rc)
{
	struct crun__wire_item *items = stack;

	*rc = 0;
	if (!keys || n > CRUN_WIRE_MAX_ITEMS) {
		seterr(s, "%s", keys ? "too many keys" : "keys is NULL");
		*rc = -EINVAL;
		return NULL;
	}
	if (n > stack_n) {
		items = calloc(n, sizeof(*items));
		if (!items) {
			*rc = -ENOMEM;
			return NULL;
		}
	}
	for (size_t i = 0; i < n; i++) {
		*rc = key_item(s, &items[i], keys[i]);
		if (*rc < 0) {
			if (items != stack)
				free(items);
			return NULL;
		}
	}
	return items;
}

int crun_store_set_flags(struct crun_store *s, const char *key, const void *val, size_t len,
			 int flags, int timeout_ms)
{
	struct crun__wire_item items[2];
	struct crun__wire_msg req = {.type = CRUN_WIRE_SET, .count = 2, .items = items};
	int rc;

	if (!s)
		return -EINVAL;
	if (flags & ~CRUN_STORE_EPHEMERAL) {
		seterr(s, "set takes only CRUN_STORE_EPHEMERAL, got flags 0x%x", flags);
		return -EINVAL;
	}
	rc = key_item(s, &items[0], key);
	if (rc == 0)
		rc = val_item(s, &items[1], val, len);
	if (rc < 0)
		return rc;
	req.flags = flags & CRUN_STORE_EPHEMERAL ? CRUN_WIRE_FL_EPHEMERAL : 0;
	rc = simple_call(s, &req, true, timeout_ms);
	return rc < 0 ? rc : expect_type(s, CRUN_WIRE_OK, 0);
}

int crun_store_set(struct crun_store *s, const char *key, const void *val, size_t len,
		   int timeout_ms)
{
	return crun_store_set_flags(s, key, val, len, 0, timeout_ms);
}

/* Deadlines of a call that may wait on the server: the server is told
 * how long to wait; the call itself gives it WAIT_GRACE_MS more. */
static void wait_call(struct crun_store *s, struct call *c, int wait_ms)
{
	if (wait_ms == 0) {
		c->deadline = deadline_after(s->timeout_ms);
		c->wait_end = 0;
		return;
	}
	if (wait_ms < 0)
		wait_ms = s->timeout_ms;
	c->wait_end = deadline_after(wait_ms);
	c->deadline = c->wait_end + WAIT_GRACE_MS;
}

int crun_store_get(struct crun_store *s, const char *key, struct crun_store_buf *out, int wait_ms)
{
	struct crun__wire_item it;
	struct crun__wire_msg req = {.type = CRUN_WIRE_GET, .count = 1, .items = &it};
	struct call c = {.req = &req, .repeatable = true};
	int rc;

	if (out)
		*out = (struct crun_store_buf){NULL, 0};
	if (!s || !out)
		return -EINVAL;
	rc = key_item(s, &it, key);
	if (rc < 0)
		return rc;
	wait_call(s, &c, wait_ms);
	rc = transact(s, &c);
	if (rc == 0)
		rc = expect_type(s, CRUN_WIRE_VALUE, 1);
	if (rc == 0)
		rc = buf_from_item(out, &s->msg.items[0]);
	return rc;
}

int crun_store_check(struct crun_store *s, const char *const *keys, size_t n, int timeout_ms)
{
	struct crun__wire_item stack[8], *items;
	struct crun__wire_msg req = {.type = CRUN_WIRE_CHECK};
	int rc;

	if (!s)
		return -EINVAL;
	if (n == 0)
		return 1;
	items = keys_items(s, keys, n, stack, CRUN_ARRAY_SIZE(stack), &rc);
	if (!items)
		return rc;
	req.items = items;
	req.count = (uint32_t)n;
	rc = simple_call(s, &req, true, timeout_ms);
	if (rc == 0)
		rc = expect_type(s, CRUN_WIRE_INT, 0);
	if (rc == 0)
		rc = s->msg.num ? 1 : 0;
	if (items != stack)
		free(items);
	return rc;
}

int crun_store_wait(struct crun_store *s, const char *const *keys, size_t n, int timeout_ms)
{
	struct crun__wire_item stack[8], *items;
	struct crun__wire_msg req = {.type = CRUN_WIRE_WAIT};
	struct call c = {.req = &req, .repeatable = true};
	int rc;

	if (!s)
		return -EINVAL;
	if (n == 0)
		return 0;
	if (timeout_ms == 0) {
		rc = crun_store_check(s, keys, n, -1);
		if (rc == 0)
			seterr(s, "timed out");
		return rc < 0 ? rc : rc ? 0 : -ETIMEDOUT;
	}
	items = keys_items(s, keys, n, stack, CRUN_ARRAY_SIZE(stack), &rc);
	if (!items)
		return rc;
	req.items = items;
	req.count = (uint32_t)n;
	wait_call(s, &c, timeout_ms);
	rc = transact(s, &c);
	if (rc == 0)
		rc = expect_type(s, CRUN_WIRE_OK, 0);
	if (items != stack)
		free(items);
	return rc;
}

int crun_store_add(struct crun_store *s, const char *key, int64_t delta, int64_t *out,
		   int timeout_ms)
{
	struct crun__wire_item it;
	struct crun__wire_msg req = {.type = CRUN_WIRE_ADD, .count = 1, .items = &it};
	int rc;

	if (!s)
		return -EINVAL;
	rc = key_item(s, &it, key);
	if (rc < 0)
		return rc;
	req.num = delta;
	rc = simple_call(s, &req, false, timeout_ms);
	if (rc == 0)
		rc = expect_type(s, CRUN_WIRE_INT, 0);
	if (rc == 0 && out)
		*out = s->msg.num;
	return rc;
}

int crun_store_cas(struct crun_store *s, const char *key, const void *expected, size_t elen,
		   const void *desired, size_t dlen, int flags, struct crun_store_buf *current,
		   int timeout_ms)
{
	struct crun__wire_item items[3];
	struct crun__wire_msg req = {.type = CRUN_WIRE_CAS, .count = 3, .items = items};
	int rc;

	if (current)
		*current = (struct crun_store_buf){NULL, 0};
	if (!s)
		return -EINVAL;
	if (flags & ~CRUN_STORE_EXPECT_ABSENT) {
		seterr(s, "cas takes only CRUN_STORE_EXPECT_ABSENT, got flags 0x%x", flags);
		return -EINVAL;
	}
	if (flags & CRUN_STORE_EXPECT_ABSENT)
		elen = 0;
	rc = key_item(s, &items[0], key);
	if (rc == 0)
		rc = val_item(s, &items[1], expected, elen);
	if (rc == 0)
		rc = val_item(s, &items[2], desired, dlen);
	if (rc < 0)
		return rc;
	req.flags = flags & CRUN_STORE_EXPECT_ABSENT ? CRUN_WIRE_FL_EXPECT_ABSENT : 0;
	rc = simple_call(s, &req, false, timeout_ms);
	if (rc == 0)
		rc = expect_type(s, CRUN_WIRE_VALUE, 1);
	if (rc == 0 && current)
		rc = buf_from_item(current, &s->msg.items[0]);
	return rc < 0 ? rc : s->msg.num == 1;
}

int crun_store_delete(struct crun_store *s, const char *key, int timeout_ms)
{
	struct crun__wire_item it;
	struct crun__wire_msg req = {.type = CRUN_WIRE_DELETE, .count = 1, .items = &it};
	int rc;

	if (!s)
		return -EINVAL;
	rc = key_item(s, &it, key);
	if (rc < 0)
		return rc;
	rc = simple_call(s, &req, true, timeout_ms);
	if (rc == 0)
		rc = expect_type(s, CRUN_WIRE_INT, 0);
	return rc < 0 ? rc : s->msg.num ? 1 : 0;
}

int crun_store_append(struct crun_store *s, const char *key, const void *val, size_t len,
		      int timeout_ms)
{
	struct crun__wire_item items[2];
	struct crun__wire_msg req = {.type = CRUN_WIRE_APPEND, .count = 2, .items = items};
	int rc;

	if (!s)
		return -EINVAL;
	rc = key_item(s, &items[0], key);
	if (rc == 0)
		rc = val_item(s, &items[1], val, len);
	if (rc < 0)
		return rc;
	rc = simple_call(s, &req, false, timeout_ms);
	return rc < 0 ? rc : expect_type(s, CRUN_WIRE_OK, 0);
}

int crun_store_count(struct crun_store *s, int64_t *out, int timeout_ms)
{
	struct crun__wire_msg req = {.type = CRUN_WIRE_COUNT};
	int rc;

	if (!s)
		return -EINVAL;
	rc = simple_call(s, &req, true, timeout_ms);
	if (rc == 0)
		rc = expect_type(s, CRUN_WIRE_INT, 0);
	if (rc == 0 && out)
		*out = s->msg.num;
	return rc;
}

int crun_store_mget(struct crun_store *s, const char *const *keys, size_t n,
		    struct crun_store_buf *vals, int wait_ms)
{
	struct crun__wire_item stack[8], *items;
	struct crun__wire_msg req = {.type = CRUN_WIRE_MGET};
	struct call c = {.req = &req, .repeatable = true};
	size_t i = 0;
	int rc;

	if (!s || (n && !vals))
		return -EINVAL;
	for (size_t j = 0; j < n; j++)
		vals[j] = (struct crun_store_buf){NULL, 0};
	if (n == 0)
		return 0;
	items = keys_items(s, keys, n, stack, CRUN_ARRAY_SIZE(stack), &rc);
	if (!items)
		return rc;
	req.items = items;
	req.count = (uint32_t)n;
	wait_call(s, &c, wait_ms);
	rc = transact(s, &c);
	if (rc == 0)
		rc = expect_type(s, CRUN_WIRE_VALUES, (uint32_t)n);
	if (rc == 0 && s->msg.count != n) {
		seterr(s, "MGET of %zu keys answered with %u values", n, s->msg.count);
		drop_conn(s);
		rc = -EPROTO;
	}
	for (i = 0; rc == 0 && i < n; i++)
		rc = buf_from_item(&vals[i], &s->msg.items[i]);
	if (rc < 0)
		while (i-- > 0)
			crun_store_buf_finish(&vals[i]);
	if (items != stack)
		free(items);
	return rc;
}

int crun_store_mset(struct crun_store *s, const char *const *keys, const void *const *vals,
		    const size_t *lens, size_t n, int timeout_ms)
{
	struct crun__wire_item stack[16], *items = stack;
	struct crun__wire_msg req = {.type = CRUN_WIRE_MSET};
	int rc = 0;

	if (!s || (n && (!keys || !vals || !lens)))
		return -EINVAL;
	if (n == 0)
		return 0;
	if (n > CRUN_WIRE_MAX_ITEMS / 2) {
		seterr(s, "too many keys");
		return -EINVAL;
	}
	if (2 * n > CRUN_ARRAY_SIZE(stack)) {
		items = calloc(2 * n, sizeof(*items));
		if (!items)
			return -ENOMEM;
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = key_item(s, &items[2 * i], keys[i]);
		if (rc == 0)
			rc = val_item(s, &items[2 * i + 1], vals[i], lens[i]);
	}
	if (rc == 0) {
		req.items = items;
		req.count = (uint32_t)(2 * n);
		rc = simple_call(s, &req, true, timeout_ms);
		if (rc == 0)
			rc = expect_type(s, CRUN_WIRE_OK, 0);
	}
	if (items != stack)
		free(items);
	return rc;
}

/* Appends the keys of the reply in s->msg to *out (*n of *cap used). */
static int list_take(struct crun_store *s, char ***out, size_t *n, size_t *cap)
{
	for (uint32_t i = 0; i < s->msg.count; i++) {
		const struct crun__wire_item *it = &s->msg.items[i];

		if (*n == *cap) {
			size_t ncap = *cap ? *cap * 2 : 1024;
			char **grown = realloc(*out, ncap * sizeof(**out));

			if (!grown)
				return -ENOMEM;
			*out = grown;
			*cap = ncap;
		}
		(*out)[*n] = malloc((size_t)it->len + 1);
		if (!(*out)[*n])
			return -ENOMEM;
		memcpy((*out)[*n], it->data, it->len);
		(*out)[*n][it->len] = '\0';
		(*n)++;
	}
	return 0;
}

/* Every key, one LIST (a store without CRUN_WIRE_F_LIST_PAGED) or a LIST
 * per page, each after the last key of the one before (wire.h). */
int crun_store_list(struct crun_store *s, char ***keys, size_t *n, int timeout_ms)
{
	struct crun__wire_msg req = {.type = CRUN_WIRE_LIST};
	struct crun__wire_item after = {0};
	uint8_t *last = NULL;
	char **out = NULL;
	size_t got = 0, cap = 0;
	bool more;
	int rc;

	if (keys)
		*keys = NULL;
	if (n)
		*n = 0;
	if (!s || !keys || !n)
		return -EINVAL;
	do {
		bool paged = s->hello.flags & CRUN_WIRE_F_LIST_PAGED;

		req.num = paged ? CRUN_WIRE_MAX_ITEMS : 0;
		req.items = &after;
		req.count = paged && after.len ? 1 : 0;
		rc = simple_call(s, &req, true, timeout_ms);
		if (rc == 0)
			rc = expect_type(s, CRUN_WIRE_VALUES, 0);
		if (rc == -ENOBUFS && !paged && (s->hello.flags & CRUN_WIRE_F_LIST_PAGED)) {
			more = true; /* connected meanwhile to a store that pages */
			rc = 0;
			continue;
		}
		if (rc == 0)
			rc = list_take(s, &out, &got, &cap);
		more = rc == 0 && s->msg.num == 1 && req.num > 0;
		if (more && s->msg.count == 0)
			rc = -EPROTO; /* "more" with an empty page would never end */
		if (more && rc == 0) {
			const struct crun__wire_item *it = &s->msg.items[s->msg.count - 1];
			uint8_t *copy = malloc(it->len ? it->len : 1);

			if (!copy) {
				rc = -ENOMEM;
			} else {
				memcpy(copy, it->data, it->len);
				free(last);
				last = copy;
				after.data = last;
				after.len = it->len;
			}
		}
	} while (more && rc == 0);
	free(last);
	if (rc < 0) {
		crun_store_list_free(out, got);
		return rc;
	}
	if (!out && !(out = calloc(1, sizeof(*out))))
		return -ENOMEM;
	*keys = out;
	*n = got;
	return 0;
}

int64_t crun_store_ping(struct crun_store *s, int timeout_ms)
{
	struct crun__wire_msg req = {.type = CRUN_WIRE_PING};
	uint64_t t0;
	int rc;

	if (!s)
		return -EINVAL;
	/* Connect first, so that the round trip does not include it. */
	rc = ensure_connected(s, deadline_after(call_timeout(s, timeout_ms)));
	if (rc < 0)
		return rc;
	t0 = crun__now_ns();
	rc = simple_call(s, &req, true, timeout_ms);
	if (rc < 0)
		return rc;
	if (s->msg.type != CRUN_WIRE_VALUE && s->msg.type != CRUN_WIRE_OK)
		return expect_type(s, CRUN_WIRE_VALUE, 0);
	return (int64_t)((crun__now_ns() - t0) / 1000);
}

/* ---- watches ---------------------------------------------------------- */

static ssize_t find_watch(const struct crun_store *s, const char *key)
{
	for (size_t i = 0; i < s->nwatches; i++)
		if (!strcmp(s->watches[i], key))
			return (ssize_t)i;
	return -1;
}

int crun_store_watch(struct crun_store *s, const char *key, int timeout_ms)
{
	struct crun__wire_item it;
	struct crun__wire_msg req = {.type = CRUN_WIRE_WATCH, .count = 1, .items = &it};
	char *copy;
	int rc;

	if (!s)
		return -EINVAL;
	rc = key_item(s, &it, key);
	if (rc < 0)
		return rc;
	if (find_watch(s, key) >= 0) {
		/* Registered already (or to be on the next connect). */
		return ensure_connected(s, deadline_after(call_timeout(s, timeout_ms)));
	}
	if (s->nwatches == s->watches_cap) {
		size_t cap = s->watches_cap ? 2 * s->watches_cap : 8;
		char **p = realloc(s->watches, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->watches = p;
		s->watches_cap = cap;
	}
	copy = strdup(key);
	if (!copy)
		return -ENOMEM;
	rc = simple_call(s, &req, true, timeout_ms);
	if (rc == 0)
		rc = expect_type(s, CRUN_WIRE_OK, 0);
	if (rc < 0) {
		free(copy);
		return rc;
	}
	s->watches[s->nwatches++] = copy;
	return 0;
}

int crun_store_unwatch(struct crun_store *s, const char *key, int timeout_ms)
{
	struct crun__wire_item it;
	struct crun__wire_msg req = {.type = CRUN_WIRE_UNWATCH, .count = 1, .items = &it};
	ssize_t i;
	int rc;

	if (!s)
		return -EINVAL;
	rc = key_item(s, &it, key);
	if (rc < 0)
		return rc;
	i = find_watch(s, key);
	if (i < 0)
		return 0;
	/* Forget it first: should the connection drop, the next one must not
	 * watch the key again. */
	free(s->watches[i]);
	s->watches[i] = s->watches[--s->nwatches];
	if (s->fd < 0)
		return 0;
	rc = simple_call(s, &req, true, timeout_ms);
	return rc < 0 ? rc : expect_type(s, CRUN_WIRE_OK, 0);
}

static int pop_event(struct crun_store *s, struct crun_store_event *ev)
{
	struct event_node *n = s->ev_head;

	s->ev_head = n->next;
	if (!s->ev_head)
		s->ev_tail = NULL;
	s->ev_bytes -= n->bytes;
	*ev = n->ev;
	free(n);
	return 0;
}

int crun_store_next_event(struct crun_store *s, struct crun_store_event *ev, int timeout_ms)
{
	uint64_t deadline;
	int rc, reconnects = 0;

	if (ev)
		*ev = (struct crun_store_event){0};
	if (!s || !ev)
		return -EINVAL;
	if (s->ev_head)
		return pop_event(s, ev);
	if (timeout_ms == 0) {
		if (s->fd < 0) {
			seterr(s, "not connected");
			return -ENOTCONN;
		}
		rc = check_alive(s);
		if (rc < 0) {
			drop_conn(s);
			return is_conn_error(rc) ? -ECONNRESET : rc;
		}
		if (s->ev_head)
			return pop_event(s, ev);
		return -ETIMEDOUT;
	}
	deadline = deadline_after(call_timeout(s, timeout_ms));
	for (;;) {
		rc = ensure_connected(s, deadline);
		if (rc < 0)
			return rc;
		rc = scan(s, 0);
		if (rc == 0 && s->ev_head)
			return pop_event(s, ev);
		if (rc == 0)
			rc = fill(s, deadline);
		if (rc == -ETIMEDOUT) {
			seterr(s, "no event before the timeout");
			return rc;
		}
		if (rc < 0) {
			drop_conn(s);
			if (!is_conn_error(rc) || ++reconnects >= MAX_ATTEMPTS)
				return rc;
		}
	}
}

/* ---- lifecycle -------------------------------------------------------- */

struct crun_store *crun_store_create(const struct crun_store_opts *opts)
{
	struct crun_store *s;

	if (!opts || opts->port < 0 || opts->port > 65535 || opts->connect_timeout_ms < 0 ||
	    opts->timeout_ms < 0 || (opts->token && !opts->token_len) ||
	    (opts->host && !*opts->host) || (opts->run_id && !*opts->run_id))
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->fd = -1;
	s->port = opts->port ? opts->port : DEFAULT_PORT;
	s->connect_timeout_ms =
		opts->connect_timeout_ms ? opts->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
	s->timeout_ms = opts->timeout_ms ? opts->timeout_ms : CRUN_WIRE_DEFAULT_TIMEOUT_MS;
	s->max_event_bytes =
		opts->max_event_bytes ? opts->max_event_bytes : DEFAULT_MAX_EVENT_BYTES;
	s->host = strdup(opts->host ? opts->host : DEFAULT_HOST);
	if (!s->host ||
	    crun__hello_client_init(&s->hello, opts->run_id ? opts->run_id : DEFAULT_RUN_ID,
				    opts->token, opts->token_len) < 0)
		goto out_destroy;
	snprintf(s->peer, sizeof(s->peer), "%s:%d", s->host, s->port);
	s->rbuf = malloc(RBUF_MIN);
	s->items = calloc(ITEMS_MIN, sizeof(*s->items));
	if (!s->rbuf || !s->items)
		goto out_destroy;
	s->rcap = RBUF_MIN;
	s->items_cap = ITEMS_MIN;
	return s;
out_destroy:
	crun_store_destroy(s);
	return NULL;
}

void crun_store_destroy(struct crun_store *s)
{
	if (!s)
		return;
	drop_conn(s);
	crun__hello_client_finish(&s->hello);
	free_events(s);
	for (size_t i = 0; i < s->nwatches; i++)
		free(s->watches[i]);
	free(s->watches);
	free(s->wbuf);
	free(s->rbuf);
	free(s->items);
	free(s->host);
	free(s);
}

/* ---- environment ------------------------------------------------------ */

int crun_store_opts_from_env_err(struct crun_store_opts *opts, char *err, size_t errlen)
{
	/* The strings handed out live here until the next call. */
	static char host[256];
	static char *file_token;
	static size_t file_token_len;
	const char *store = crun__env_get("CRUN_STORE"), *v;
	char why[160];
	int64_t ms = 0;
	int port, rc;

	if (!opts)
		return -EINVAL;
	if (file_token) {
		OPENSSL_cleanse(file_token, file_token_len);
		free(file_token);
		file_token = NULL;
	}
	*opts = (struct crun_store_opts){0};
	if (crun__parse_endpoint(store ? store : DEFAULT_HOST, DEFAULT_PORT, host, sizeof(host),
				 &port, why, sizeof(why)) < 0) {
		if (err)
			snprintf(err, errlen, "bad CRUN_STORE: %s", why);
		return -EINVAL;
	}
	opts->host = host;
	opts->port = port;
	opts->run_id = crun__env_get("CRUN_RUN_ID");
	v = getenv("CRUN_TOKEN");
	if (v && *v) {
		opts->token = v;
		opts->token_len = strlen(v);
	} else if ((v = getenv("CRUN_TOKEN_FILE")) && *v) {
		rc = crun__read_secret_file(v, CRUN_WIRE_TOKEN_MAX, &file_token, &file_token_len,
					    why, sizeof(why));
		if (rc < 0) {
			if (err)
				snprintf(err, errlen, "bad CRUN_TOKEN_FILE: %s", why);
			return rc;
		}
		opts->token = file_token;
		opts->token_len = file_token_len;
	}
	v = crun__env_get("CRUN_CONNECT_TIMEOUT");
	if (v) {
		ms = 0;
		if (crun__parse_duration_ms(v, &ms, why, sizeof(why)) < 0 || ms > INT_MAX) {
			if (ms > INT_MAX)
				snprintf(why, sizeof(why), "'%s' is too long", v);
			if (err)
				snprintf(err, errlen, "bad CRUN_CONNECT_TIMEOUT: %s", why);
			return -EINVAL;
		}
		opts->connect_timeout_ms = (int)ms;
	}
	v = crun__env_get("CRUN_TIMEOUT");
	if (v) {
		ms = 0;
		if (crun__parse_duration_ms(v, &ms, why, sizeof(why)) < 0 || ms > INT_MAX) {
			if (ms > INT_MAX)
				snprintf(why, sizeof(why), "'%s' is too long", v);
			if (err)
				snprintf(err, errlen, "bad CRUN_TIMEOUT: %s", why);
			return -EINVAL;
		}
		opts->timeout_ms = (int)ms;
	}
	if (err && errlen)
		err[0] = '\0';
	return 0;
}

int crun_store_opts_from_env(struct crun_store_opts *opts)
{
	return crun_store_opts_from_env_err(opts, NULL, 0);
}

/* Byte mechanics of the store server's connections (netio.h). */
#include "rendezvous/netio.h"

#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netdb.h>
#include <netinet/in.h>

#include "rendezvous/wire.h"

struct write_req {
	uv_write_t req;
	struct crun__outq *q;
	void (*done)(struct crun__outq *q, int status);
	uint8_t *mem;
	size_t len, cap;
};

void crun__inbuf_alloc(struct crun__inbuf *in, uint8_t *scratch, size_t scratch_size, uint64_t cap,
		       bool framed, uv_buf_t *buf)
{
	uint64_t want;

	if (!in->len) {
		*buf = uv_buf_init((char *)scratch, (unsigned int)scratch_size);
		return;
	}
	/* Grow towards the frame's announced size (already checked against
	 * the cap), but no faster than the data arrives, so an announced
	 * size alone allocates little. */
	want = in->len + CRUN__NETIO_RBUF_MIN;
	if (in->len >= CRUN_WIRE_HEADER_LEN && framed) {
		uint64_t total = CRUN_WIRE_HEADER_LEN + (((uint64_t)in->buf[0] << 24) |
							 ((uint64_t)in->buf[1] << 16) |
							 ((uint64_t)in->buf[2] << 8) | in->buf[3]);
		uint64_t step = 2 * (uint64_t)in->len + scratch_size;

		if (total > want)
			want = total < step ? total : step;
	}
	if (want > cap)
		want = cap;
	if (want > in->cap) {
		uint8_t *p = realloc(in->buf, want);

		if (!p) {
			*buf = uv_buf_init(NULL, 0);
			return;
		}
		in->buf = p;
		in->cap = want;
	}
	*buf = uv_buf_init((char *)in->buf + in->len, (unsigned int)(in->cap - in->len));
}

int crun__inbuf_keep(struct crun__inbuf *in, const uint8_t *p, size_t n)
{
	if (n > in->cap) {
		size_t cap = n < CRUN__NETIO_RBUF_MIN ? CRUN__NETIO_RBUF_MIN : n;
		uint8_t *q = malloc(cap);

		if (!q)
			return -ENOMEM;
		free(in->buf);
		in->buf = q;
		in->cap = cap;
	}
	memcpy(in->buf, p, n);
	in->len = n;
	return 0;
}

void crun__inbuf_consume(struct crun__inbuf *in, size_t used)
{
	if (used) {
		memmove(in->buf, in->buf + used, in->len - used);
		in->len -= used;
	}
	if (!in->len && in->cap > CRUN__NETIO_BUF_KEEP)
		crun__inbuf_finish(in);
}

void crun__inbuf_finish(struct crun__inbuf *in)
{
	free(in->buf);
	in->buf = NULL;
	in->len = in->cap = 0;
}

size_t crun__outq_grown_cap(const struct crun__outq *q, size_t len)
{
	size_t cap;

	if (q->cap - q->len >= len)
		return q->cap;
	cap = q->cap ? q->cap : 256;
	while (cap - q->len < len)
		cap *= 2;
	return cap;
}

static int reserve(struct crun__outq *q, size_t n, uint64_t max)
{
	size_t cap;
	uint8_t *p;

	if (n > max)
		return -ENOBUFS;
	if (q->len + q->inflight + n > max)
		return -EAGAIN;
	if (q->cap - q->len >= n)
		return 0;
	cap = crun__outq_grown_cap(q, n);
	p = realloc(q->buf, cap);
	if (!p)
		return -ENOMEM;
	q->buf = p;
	q->cap = cap;
	return 0;
}

int crun__outq_put(struct crun__outq *q, uint64_t max, const struct crun__wire_msg *m,
		   const void *raw, size_t len)
{
	int rc = reserve(q, len, max);

	if (rc < 0)
		return rc;
	if (m) {
		q->len += crun__wire_encode(m, q->buf + q->len);
	} else {
		memcpy(q->buf + q->len, raw, len);
		q->len += len;
	}
	return 0;
}

static void on_write(uv_write_t *req, int status)
{
	struct write_req *w = (struct write_req *)req;
	struct crun__outq *q = w->q;
	void (*done)(struct crun__outq *, int) = w->done;

	q->inflight -= w->len;
	q->inflight_mem -= w->cap;
	free(w->mem);
	free(w);
	done(q, status);
}

int crun__outq_flush(struct crun__outq *q, uv_stream_t *s,
		     void (*done)(struct crun__outq *q, int status))
{
	struct write_req *w;
	uv_buf_t b;
	size_t off = 0;
	int n;

	if (!q->len)
		return 0;
	if (!q->inflight) {
		b = uv_buf_init((char *)q->buf, (unsigned int)q->len);
		n = uv_try_write(s, &b, 1);
		if (n >= 0 && (size_t)n == q->len) {
			q->len = 0;
			if (q->cap > CRUN__NETIO_BUF_KEEP)
				crun__outq_finish(q);
			return 0;
		}
		if (n < 0 && n != UV_EAGAIN)
			return n;
		if (n > 0)
			off = (size_t)n;
	}
	w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->q = q;
	w->done = done;
	w->mem = q->buf;
	w->len = q->len - off;
	w->cap = q->cap;
	b = uv_buf_init((char *)q->buf + off, (unsigned int)w->len);
	n = uv_write(&w->req, s, &b, 1, on_write);
	if (n < 0) {
		free(w);
		return n;
	}
	q->inflight += w->len;
	q->inflight_mem += w->cap;
	q->buf = NULL;
	q->len = q->cap = 0;
	return 0;
}

void crun__outq_finish(struct crun__outq *q)
{
	free(q->buf);
	q->buf = NULL;
	q->len = q->cap = 0;
}

static bool is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)sa;

		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)sa;
		const uint8_t *a = s6->sin6_addr.s6_addr;
		static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

		if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
			return true;
		return !memcmp(a, mapped, sizeof(mapped)) && a[12] == 127;
	}
	return false;
}

static int resolve(uv_loop_t *loop, const char *host, int port, struct sockaddr_storage *ss)
{
	struct addrinfo hints, *res;
	uv_getaddrinfo_t req;
	int rc;

	memset(ss, 0, sizeof(*ss));
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
		return 0;
	if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
		return 0;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	rc = uv_getaddrinfo(loop, &req, NULL, host, NULL, &hints);
	if (rc < 0)
		return rc;
	res = req.addrinfo;
	if (!res) {
		rc = UV_EAI_NONAME;
	} else {
		memcpy(ss, res->ai_addr, res->ai_addrlen);
		if (ss->ss_family == AF_INET)
			((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		else
			((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
	}
	uv_freeaddrinfo(res);
	return rc;
}

int crun__net_listen(uv_tcp_t *tcp, const char *host, int port, uv_connection_cb cb, int *bound,
		     bool *loopback, bool *used, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	char shown[320];
	int rc;

	*used = false;
	crun__format_endpoint(shown, sizeof(shown), host, port);
	if (port < 0 || port > 65535) {
		snprintf(err, errlen, "cannot listen on '%s': port out of range 0-65535", shown);
		return -EINVAL;
	}
	rc = resolve(tcp->loop, host, port, &ss);
	if (rc < 0) {
		snprintf(err, errlen, "cannot resolve '%s': %s", host, uv_strerror(rc));
		/* getaddrinfo's codes are not errnos */
		return rc > -4000 ? rc : -EADDRNOTAVAIL;
	}
	*used = true;
	rc = uv_tcp_bind(tcp, (const struct sockaddr *)&ss, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)tcp, 4096, cb);
	if (rc == 0)
		rc = uv_tcp_getsockname(tcp, (struct sockaddr *)&ss, &len);
	if (rc < 0) {
		snprintf(err, errlen, "cannot listen on '%s': %s", shown, uv_strerror(rc));
		return rc;
	}
	*bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						: ((struct sockaddr_in *)&ss)->sin_port);
	*loopback = is_loopback((const struct sockaddr *)&ss);
	return 0;
}

/* Byte mechanics of the store server's connections, on libuv streams: the
 * input buffer that assembles frames arriving in pieces, the output queue
 * that hands replies to the kernel, and the listening address. Nothing
 * here knows what a frame means; server.c decides when to read, write and
 * close. */
#ifndef CRUN_RENDEZVOUS_NETIO_H
#define CRUN_RENDEZVOUS_NETIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>
#include <uv.h>

#include "rendezvous/wire.h"

/* Buffers above this size are freed when they become empty, so a burst
 * does not leave a big allocation behind on an idle connection. */
#define CRUN__NETIO_BUF_KEEP (64 * 1024)
/* The smallest input buffer, and the growth step of one still arriving. */
#define CRUN__NETIO_RBUF_MIN 4096

/* Input of one connection. Reads land in a scratch buffer shared by every
 * connection while nothing is pending; only the tail of a frame that is
 * still arriving is kept here, so an idle connection holds no buffer. All
 * zero is an empty one. */
struct crun__inbuf {
	uint8_t *buf; /* tail of a frame still arriving */
	size_t len, cap;
};

/* Chooses where the next read lands: scratch (scratch_size bytes) when in
 * holds nothing, else the room after in's tail, grown towards the frame's
 * announced size (when framed and a 12-byte header is in: its big-endian
 * u32 length plus 12) but no faster than the data arrives, and never
 * beyond cap. On no memory *buf is empty (libuv then reports UV_ENOBUFS). */
void crun__inbuf_alloc(struct crun__inbuf *in, uint8_t *scratch, size_t scratch_size, uint64_t cap,
		       bool framed, uv_buf_t *buf);

/* Keeps the n bytes at p (an unfinished frame read into scratch) as in's
 * tail, which must be empty. 0 or -ENOMEM. */
int crun__inbuf_keep(struct crun__inbuf *in, const uint8_t *p, size_t n);

/* Drops the first used bytes of in's tail (the frames handled). */
void crun__inbuf_consume(struct crun__inbuf *in, size_t used);

void crun__inbuf_finish(struct crun__inbuf *in);

/* Output of one connection: bytes not yet handed to the kernel, and a
 * count of those handed to libuv whose write has not completed (and of
 * the memory their buffers hold). All zero is an empty one. */
struct crun__outq {
	uint8_t *buf;
	size_t len, cap;
	size_t inflight;
	size_t inflight_mem; /* bytes allocated by the writes in flight */
};

/* Appends m encoded, whose encoded size is len (or, when m is NULL, the
 * len bytes at raw), so that queued plus in-flight bytes stay within max.
 * 0; -ENOBUFS when len alone exceeds max; -EAGAIN when the bytes already
 * queued leave no room (flush, then try again or give up); -ENOMEM. */
int crun__outq_put(struct crun__outq *q, uint64_t max, const struct crun__wire_msg *m,
		   const void *raw, size_t len);

/* The capacity q's buffer would have after a put of len bytes (its
 * capacity now when they fit), for the caller's budget. */
size_t crun__outq_grown_cap(const struct crun__outq *q, size_t len);

/* Hands q's bytes to s: uv_try_write first, so that the usual case needs
 * no write request, and uv_write for what the kernel did not take. When
 * such a write completes, its bytes leave inflight and done(q, status)
 * runs (status < 0: it failed or was cancelled). 0, -ENOMEM, or a
 * negative libuv error: the stream is broken, and q may still hold bytes
 * the kernel already took, so the stream must be closed, never flushed
 * again. */
int crun__outq_flush(struct crun__outq *q, uv_stream_t *s,
		     void (*done)(struct crun__outq *q, int status));

/* Frees q's buffer (writes in flight free their own). */
void crun__outq_finish(struct crun__outq *q);

/* Binds tcp to host (an IPv4 or IPv6 literal, or a name resolved on
 * tcp's loop) and port (0: a free one), and listens with cb. 0, with the
 * port bound in *bound and in *loopback whether the address is a loopback
 * one (127.0.0.0/8, ::1, IPv4-mapped 127/8). Else a negative errno
 * (-EINVAL for a port out of 0-65535, -EADDRNOTAVAIL for a name that does
 * not resolve, the bind's or listen's error) with a message in err, and
 * *used says whether tcp was bound or listened on (it is spent then). */
int crun__net_listen(uv_tcp_t *tcp, const char *host, int port, uv_connection_cb cb, int *bound,
		     bool *loopback, bool *used, char *err, size_t errlen);

#endif

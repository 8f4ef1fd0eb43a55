/* A peer of the store server that speaks the wire protocol by hand over a
 * blocking loopback socket, for the server and round tests (so that they
 * depend on crun__wire_* only, not on libcrun). Every socket has a 5 s
 * receive and send timeout, so no test can hang. Everything is static:
 * each test binary includes this once. */
#ifndef CRUN_TESTS_WIRE_PEER_H
#define CRUN_TESTS_WIRE_PEER_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "rendezvous/wire.h"

static inline void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static inline struct crun__wire_item its(const char *s)
{
	struct crun__wire_item i = {(const uint8_t *)s, (uint32_t)strlen(s)};

	return i;
}

/* A connection to 127.0.0.1:port with the timeouts and TCP_NODELAY. */
static inline int tconnect(int port)
{
	struct sockaddr_in sa = {0};
	struct timeval tv = {5, 0};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* Reads exactly n bytes: 0, or -1 on EOF, reset or timeout. */
static inline int recv_all(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t r = recv(fd, b, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* A received frame; items point into buf. */
struct rmsg {
	struct crun__wire_msg m;
	struct crun__wire_item items[256];
	uint8_t *buf;
};

static inline void rmsg_finish(struct rmsg *r)
{
	free(r->buf);
	r->buf = NULL;
}

/* Reads one frame, which must decode and be valid: 0, or -1 when the
 * connection ended (or the receive timeout passed). */
static inline int trecv(int fd, struct rmsg *r)
{
	uint8_t hdr[CRUN_WIRE_HEADER_LEN];
	uint32_t len, cap = 256;
	char err[160];

	r->buf = NULL;
	if (recv_all(fd, hdr, sizeof(hdr)) < 0)
		return -1;
	assert_int_equal(
		crun__wire_check_header(hdr, CRUN_WIRE_MAX_PAYLOAD, &len, err, sizeof(err)), 0);
	r->buf = malloc(sizeof(hdr) + len);
	assert_non_null(r->buf);
	memcpy(r->buf, hdr, sizeof(hdr));
	if (recv_all(fd, r->buf + sizeof(hdr), len) < 0) {
		rmsg_finish(r);
		return -1;
	}
	assert_int_equal(crun__wire_decode(r->buf, sizeof(hdr) + len, CRUN_WIRE_MAX_PAYLOAD, &r->m,
					   r->items, &cap, err, sizeof(err)),
			 (long)(sizeof(hdr) + len));
	if (crun__wire_validate(&r->m, err, sizeof(err)) < 0)
		fail_msg("invalid frame from the server: %s", err);
	return 0;
}

/* True when the server has closed fd: reads (and ignores) what is left
 * and then sees EOF or a reset within the receive timeout. */
static inline bool closed_by_server(int fd)
{
	uint8_t b[4096];

	for (;;) {
		ssize_t r = recv(fd, b, sizeof(b), 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return true;
		if (r < 0)
			return false; /* timeout: still open */
	}
}

#endif

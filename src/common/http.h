/* The HTTP/1.1 that a metrics endpoint needs: requests without a body,
 * GET and HEAD, answered in order (pipelined requests included) on a
 * connection kept alive as RFC 9112 says, or closed.
 *
 * Pure: bytes in, a parsed request or an HTTP status out; a reply's
 * head built into a caller's buffer. The libuv edge is
 * rendezvous/metrics_http.h. */
#ifndef CRUN_COMMON_HTTP_H
#define CRUN_COMMON_HTTP_H

#include <stdbool.h>
#include <stddef.h>

/* The most bytes a request head (request line and header fields) may
 * take; a longer one is answered 431. */
#define CRUN_HTTP_MAX_HEAD 8192
/* The most header fields in one request (431 past it). */
#define CRUN_HTTP_MAX_FIELDS 64

enum crun__http_method {
	CRUN_HTTP_GET,
	CRUN_HTTP_HEAD,
	CRUN_HTTP_OTHER, /* a well-formed method this server does not serve */
};

struct crun__http_request {
	enum crun__http_method method;
	char path[256];	 /* the target's path, without its query */
	int minor;	 /* HTTP/1.<minor>: 0 or 1 */
	bool keep_alive; /* the connection may serve another request */
};

/* Parses the request head at the start of buf (len bytes; a client may
 * send empty lines before it, which are skipped). Returns the bytes it
 * took (> 0) with *req filled; 0 when the head is not complete yet and
 * may still be (len < CRUN_HTTP_MAX_HEAD); else minus an HTTP status
 * for the reply, after which the connection must close:
 *   -400 malformed (request line, a field, a missing Host in HTTP/1.1,
 *        a target that is not an origin-form path),
 *   -413 a body (Content-Length other than 0, or Transfer-Encoding),
 *   -414 a target longer than req->path holds,
 *   -431 a head over CRUN_HTTP_MAX_HEAD or CRUN_HTTP_MAX_FIELDS fields,
 *   -505 an HTTP version other than 1.0 and 1.1.
 * Lines end in CRLF or a bare LF. */
int crun__http_parse(const char *buf, size_t len, struct crun__http_request *req);

/* What a metrics endpoint answers. */
struct crun__http_reply {
	int status;	  /* 200, 404, 405, ... */
	bool metrics;	  /* the body is the metrics text */
	bool close;	  /* close the connection after this reply */
	bool keep_alive;  /* say "Connection: keep-alive": an HTTP/1.0 client
			   * that asked for it assumes close without it */
	const char *body; /* when !metrics: a one-line text */
	bool head_only;	  /* HEAD: the head without the body */
};

/* The reply to a parse's result (crun__http_parse's return; req is read
 * only when it is > 0): GET or HEAD of path (exactly, e.g. "/metrics")
 * is the metrics, another path 404, another method 405, a parse error
 * its status. A parse error and a 405 close the connection (the rest of
 * the bytes cannot be trusted to start a request); 200 and 404 keep it as
 * the request asked, and say so to an HTTP/1.0 client (keep_alive). */
void crun__http_route(int parsed, const struct crun__http_request *req, const char *path,
		      struct crun__http_reply *reply);

/* The reason phrase of status ("Not Found"); "Unknown" for others. */
const char *crun__http_reason(int status);

/* The Content-Type of Prometheus's text exposition format. */
#define CRUN_HTTP_PROM_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Writes the head of reply (status line; Content-Type, Content-Length
 * body_len, Connection: close when reply->close, else Connection:
 * keep-alive when reply->keep_alive, Allow for 405) into buf
 * (cap bytes, NUL-terminated). Returns its length, or -ENOSPC when cap is
 * too small. */
int crun__http_head(char *buf, size_t cap, const struct crun__http_reply *reply,
		    const char *content_type, size_t body_len);

#endif

/* The metrics endpoint: HTTP/1.1 GET /metrics on a caller's libuv loop
 * (common/http.h decides; this is its edge), shared by crun's agent and
 * crun-rdzvd.
 *
 * Each request renders the text afresh through the caller's callback, on
 * the loop's thread. Bounds: CRUN_METRICS_MAX_CONNS connections (one
 * more gets a 503 and is closed), a request head of CRUN_HTTP_MAX_HEAD
 * bytes, one reply in flight per connection (pipelined requests wait
 * their turn, and the connection is not read meanwhile), and
 * CRUN_METRICS_IDLE_MS without a complete request closes a connection.
 * A reply that ends the connection is followed by a shutdown of the write
 * side, and the connection closes when the client closes its side or
 * CRUN_METRICS_LINGER_MS later. */
#ifndef CRUN_RENDEZVOUS_METRICS_HTTP_H
#define CRUN_RENDEZVOUS_METRICS_HTTP_H

#include <stddef.h>
#include <uv.h>

#define CRUN_METRICS_MAX_CONNS 64
#define CRUN_METRICS_IDLE_MS 15000
/* After a reply that closes the connection, how long the endpoint waits
 * for the client to close first. */
#define CRUN_METRICS_LINGER_MS 2000

struct crun__prom;
struct crun__metrics_http;

/* Appends the metrics text to out. 0, or a negative errno (the request
 * is answered 500). */
typedef int (*crun__metrics_render_cb)(void *arg, struct crun__prom *out);

/* An endpoint on loop that renders with cb(arg). NULL when out of
 * memory. */
struct crun__metrics_http *crun__metrics_http_create(uv_loop_t *loop, crun__metrics_render_cb cb,
						     void *arg);

/* Listens on host:port (0: a free port; crun__metrics_http_port tells
 * which). 0, or a negative errno with a message in err. Call once. */
int crun__metrics_http_listen(struct crun__metrics_http *m, const char *host, int port, char *err,
			      size_t errlen);

/* The port bound, else 0. */
int crun__metrics_http_port(const struct crun__metrics_http *m);

/* Stops listening, closes every connection; the memory goes once the
 * handles have closed (the loop must run on). NULL is allowed. */
void crun__metrics_http_destroy(struct crun__metrics_http *m);

#endif

/* A real store server on its own libuv loop in a background thread, for
 * the server, round, client and authentication tests. Everything is
 * static: each test binary includes this once.
 *
 * The loop thread owns the server; the test thread talks to it only
 * through an async handle (stop, freeze) and reads what the loop records
 * (disconnects) under the mutex. */
#ifndef CRUN_TESTS_STORE_HARNESS_H
#define CRUN_TESTS_STORE_HARNESS_H

#include "common/util.h"
#include "rendezvous/server.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

struct harness {
	uv_loop_t loop;
	uv_async_t wake;
	uv_thread_t thread;
	uv_mutex_t mu;
	uv_sem_t frozen;
	struct crun__server *srv;
	int port;
	bool stop;
	int freeze_ms;
	int disconnects;   /* connections past HELLO that closed */
	char last_run[64]; /* run id of the last of them */
	bool done;	   /* the server's destroy finished */
	int close_rc;	   /* uv_loop_close's, after the thread ended */
};

/* Fills opts with the server's defaults and, unless token is NULL, the
 * token it demands. The token is copied when the server is created. */
static inline void harness_opts(struct crun__server_opts *opts, const char *token)
{
	memset(opts, 0, sizeof(*opts));
	crun__server_limits_default(&opts->limits);
	opts->token = token;
	opts->token_len = token ? strlen(token) : 0;
}

static inline void harness_on_disconnect(struct crun__server *srv, const char *run_id,
					 const char *peer, void *arg)
{
	struct harness *h = arg;

	(void)srv;
	(void)peer;
	uv_mutex_lock(&h->mu);
	h->disconnects++;
	snprintf(h->last_run, sizeof(h->last_run), "%s", run_id);
	uv_mutex_unlock(&h->mu);
}

static inline void harness_on_done(void *arg)
{
	struct harness *h = arg;

	h->done = true;
}

static inline void harness_on_wake(uv_async_t *a)
{
	struct harness *h = a->data;
	bool stop;
	int freeze;

	uv_mutex_lock(&h->mu);
	stop = h->stop;
	freeze = h->freeze_ms;
	h->freeze_ms = 0;
	uv_mutex_unlock(&h->mu);
	if (freeze) {
		/* Blocks the server's loop: nothing is read or answered. */
		uv_sem_post(&h->frozen);
		usleep((useconds_t)freeze * 1000);
	}
	if (stop) {
		crun__server_destroy(h->srv, harness_on_done, h);
		h->srv = NULL;
		uv_close((uv_handle_t *)&h->wake, NULL);
	}
}

static inline void harness_loop_main(void *arg)
{
	struct harness *h = arg;

	uv_run(&h->loop, UV_RUN_DEFAULT);
}

/* Starts a server on 127.0.0.1:port (0: any free port, see h->port) with
 * opts (NULL: defaults, no token). 0 or a negative errno. */
static inline int harness_start(struct harness *h, int port, const struct crun__server_opts *opts)
{
	struct crun__server_opts def;
	char err[256];
	int rc;

	memset(h, 0, sizeof(*h));
	if (!opts) {
		harness_opts(&def, NULL);
		opts = &def;
	}
	if (uv_loop_init(&h->loop) < 0)
		return -ENOMEM;
	h->srv = crun__server_create(&h->loop, opts);
	if (!h->srv) {
		rc = -ENOMEM;
		goto out_close_loop;
	}
	rc = crun__server_listen(h->srv, "127.0.0.1", port, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "harness: listen on port %d: %s\n", port, err);
		goto out_destroy;
	}
	h->port = crun__server_port(h->srv);
	if (h->port <= 0) {
		rc = -EADDRNOTAVAIL;
		goto out_destroy;
	}
	uv_mutex_init(&h->mu);
	uv_sem_init(&h->frozen, 0);
	crun__server_set_disconnect_cb(h->srv, harness_on_disconnect, h);
	uv_async_init(&h->loop, &h->wake, harness_on_wake);
	h->wake.data = h;
	uv_thread_create(&h->thread, harness_loop_main, h);
	return 0;

out_destroy:
	crun__server_destroy(h->srv, NULL, NULL);
	uv_run(&h->loop, UV_RUN_DEFAULT);
out_close_loop:
	uv_loop_close(&h->loop);
	return rc;
}

/* Destroys the server (closing every connection), joins the thread and
 * closes the loop. 0, or -EBUSY when the destroy never finished or a
 * handle was left open on the loop (h->done, h->close_rc say which). */
static inline int harness_stop(struct harness *h)
{
	uv_mutex_lock(&h->mu);
	h->stop = true;
	uv_mutex_unlock(&h->mu);
	uv_async_send(&h->wake);
	uv_thread_join(&h->thread);
	h->close_rc = uv_loop_close(&h->loop);
	uv_mutex_destroy(&h->mu);
	uv_sem_destroy(&h->frozen);
	return h->done && h->close_rc == 0 ? 0 : -EBUSY;
}

/* How many connections past HELLO have closed so far; with run, also the
 * run id of the last one. */
static inline int harness_disconnects(struct harness *h, char *run, size_t runlen)
{
	int n;

	uv_mutex_lock(&h->mu);
	n = h->disconnects;
	if (run)
		snprintf(run, runlen, "%s", h->last_run);
	uv_mutex_unlock(&h->mu);
	return n;
}

/* Freezes the server's loop for ms; returns once the freeze has begun. */
static inline void harness_freeze(struct harness *h, int ms)
{
	uv_mutex_lock(&h->mu);
	h->freeze_ms = ms;
	uv_mutex_unlock(&h->mu);
	uv_async_send(&h->wake);
	uv_sem_wait(&h->frozen);
}

/* A port that nobody listens on and nobody else gets while *fd is open:
 * a socket bound to it with SO_REUSEADDR but not listening (connections
 * are refused; a server with SO_REUSEADDR, as libuv sets it, can still
 * bind and listen there). Returns the port, or -1. */
static inline int reserve_port(int *fd)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int one = 1;

	*fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*fd < 0)
		return -1;
	setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(*fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(*fd, (struct sockaddr *)&a, &len) < 0) {
		close(*fd);
		*fd = -1;
		return -1;
	}
	return ntohs(a.sin_port);
}

static inline uint64_t elapsed_ms(uint64_t t0)
{
	return crun__now_ms() - t0;
}

#endif

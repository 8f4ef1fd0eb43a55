/* The connection handshake of the store protocol (wire.h, "Connection
 * start"), as pure steps: each takes the bytes or the decoded frame that
 * arrived and the handshake's state, and says what to send next, that the
 * handshake is done, or why it failed. Nothing here touches a socket, a
 * clock or an event loop; libcrun's blocking client (client.c), the
 * agent's libuv client (aclient.c) and the server (server.c) carry the
 * bytes.
 *
 * Client:  send crun__wire_client_preamble()
 *          crun__hello_client_preamble(server's 40 bytes) -> HELLO to send
 *          crun__hello_client_sent() once HELLO is encoded
 *          crun__hello_client_reply(the reply to HELLO) -> done or error
 * Server:  send crun__wire_server_preamble(flags, nonce)
 *          crun__hello_server_preamble(client's 8 bytes) -> ok or error
 *          crun__hello_server_hello(first frame) -> OK's item or error
 *
 * Error messages are whole lines for the user ("authentication failed: the
 * store requires a token and none was given"); the client's messages name
 * the store by the peer string given to crun__hello_client_begin. Both
 * clients also share the retry rule and backoff below. */
#ifndef CRUN_RENDEZVOUS_HELLO_H
#define CRUN_RENDEZVOUS_HELLO_H

#include "rendezvous/wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A client retries a connection attempt that failed this way (the store is
 * not up yet, or restarting), waiting CRUN__HELLO_BACKOFF_FIRST_MS first
 * and twice as long each time after, up to CRUN__HELLO_BACKOFF_MAX_MS. */
#define CRUN__HELLO_BACKOFF_FIRST_MS 10
#define CRUN__HELLO_BACKOFF_MAX_MS 1000
bool crun__hello_retryable(int err);
/* The wait after one of backoff_ms. */
int crun__hello_next_backoff(int backoff_ms);
/* The time to actually wait for a backoff of backoff_ms: between half of
 * it and all of it, as rnd (any 32 random bits) picks, so that many
 * clients that lost the same store do not all knock at the same instant. */
int crun__hello_jitter(int backoff_ms, uint32_t rnd);
/* 32 random bits for crun__hello_jitter (not for secrets; never blocks and
 * leaves the program's own random() sequence alone). */
uint32_t crun__hello_random(void);

/* One client's credentials and the progress of its current handshake. */
struct crun__hello_client {
	char *run_id;	/* owned */
	uint8_t *token; /* owned; NULL: none */
	size_t token_len;
	const char *peer; /* the store's name in messages; not owned */
	bool auth;	  /* the store asked for the token */
	uint16_t flags;	  /* the store's preamble flags (CRUN_WIRE_F_*) */
	uint32_t id;	  /* of the HELLO sent */
	uint8_t cnonce[CRUN_WIRE_NONCE_LEN];
	uint8_t snonce[CRUN_WIRE_NONCE_LEN];
	uint8_t mac[CRUN_WIRE_MAC_LEN];
	struct crun__wire_item items[3];
};

/* Copies run_id (not empty) and token (NULL or token_len > 0 bytes).
 * 0 or -ENOMEM (then nothing is held). */
int crun__hello_client_init(struct crun__hello_client *h, const char *run_id, const void *token,
			    size_t token_len);
/* Wipes the token and frees what init copied. NULL-safe; idempotent. */
void crun__hello_client_finish(struct crun__hello_client *h);

/* Starts a handshake on a new connection to peer (a string that outlives
 * the handshake, e.g. "10.0.0.1:29400"). */
void crun__hello_client_begin(struct crun__hello_client *h, const char *peer);

/* The server's preamble: buf holds the len bytes read after the client's
 * preamble went out. Returns 0 when fewer than CRUN_WIRE_SERVER_PREAMBLE
 * bytes are in (read more); CRUN_WIRE_SERVER_PREAMBLE (the bytes consumed)
 * when *hello is the HELLO to send, with id as its id, cnonce (fresh random
 * bytes, CRUN_WIRE_NONCE_LEN of them) as its nonce; its items point into h
 * until crun__hello_client_sent; h->flags holds the store's preamble flags
 * (a capability such as CRUN_WIRE_F_RDZV_EXCL) from then until the next
 * crun__hello_client_begin, which clears them. Or a negative errno with err set:
 *   -EPROTO           "'PEER' is not a crun store"
 *   -EPROTONOSUPPORT  "the store at 'PEER' speaks protocol version 2, this
 *                     client 1"
 *   -EACCES           "authentication failed: the store requires a token
 *                     and none was given"; or, with a token, "store at
 *                     'PEER' did not prove it knows the token: refusing it
 *                     (a store without a token, or an impostor)" when the
 *                     store asks for no token (a downgrade), or "the store
 *                     at 'PEER' speaks an older handshake ..." when its
 *                     proof would not cover the run id
 *   -EIO              "cannot compute the handshake: ..." */
long crun__hello_client_preamble(struct crun__hello_client *h, const uint8_t *buf, size_t len,
				 const uint8_t *cnonce, uint32_t id, struct crun__wire_msg *hello,
				 char *err, size_t errlen);

/* HELLO has been encoded: its mac is wiped. */
void crun__hello_client_sent(struct crun__hello_client *h);

/* The first frame after HELLO, a reply that crun__wire_check_reply passed.
 * 0: the handshake is done (with a token: the store proved it knows the
 * token and the run id). Otherwise a negative errno with err set:
 *   the ERROR's errno  (to HELLO or with id 0) err = its printable text,
 *                      possibly empty
 *   -EACCES  "store at 'PEER' did not prove it knows the token: refusing
 *            it (a store without a token, or an impostor)"
 *   -EPROTO  "bad frame from the store at 'PEER': VALUE with id 7 during
 *            the handshake" (any other frame) */
int crun__hello_client_reply(struct crun__hello_client *h, const struct crun__wire_msg *m,
			     char *err, size_t errlen);

/* The client's preamble, len bytes of it in buf. Returns 0 when fewer than
 * CRUN_WIRE_CLIENT_PREAMBLE bytes are in; CRUN_WIRE_CLIENT_PREAMBLE when
 * it is fine; or, with why set (for the ERROR the server sends before
 * closing):
 *   -EPROTONOSUPPORT  "protocol version 2 is not supported (this server
 *                     speaks 1)"
 *   -EPROTO           "bad magic: not a crun store client" */
long crun__hello_server_preamble(const uint8_t *buf, size_t len, char *why, size_t whylen);

/* What the server knows when the first frame arrives. */
struct crun__hello_server {
	const void *token; /* NULL: no authentication */
	size_t token_len;
	const uint8_t *nonce; /* the one in our preamble (with a token) */
	uint32_t max_run_id;  /* longest run id accepted, in bytes */
};

/* The first frame of a connection, a request crun__wire_validate passed.
 * 0 when it is a HELLO to accept: the client is in run m->items[0], and
 * *reply is the OK's one item (the server's mac in mac_out, which must
 * hold CRUN_WIRE_MAC_LEN bytes, or empty without a token; with one, both
 * macs cover the run id, wire.h). Otherwise a
 * negative errno and why (the text of the ERROR to send, then close):
 *   -EPROTO  "expected HELLO, got SET"
 *   -E2BIG   "run id of 9000 bytes exceeds the limit of 8192 bytes"
 *   -EINVAL  "run id contains a NUL byte"
 *   -EACCES  "authentication failed" (a missing or wrong mac, or one for
 *            another run id); "authentication failed: the client speaks an
 *            older handshake ..." (a right mac without the run id)
 *   -EIO     "cannot compute the server mac" */
int crun__hello_server_hello(const struct crun__hello_server *hs, const struct crun__wire_msg *m,
			     uint8_t *mac_out, struct crun__wire_item *reply, char *why,
			     size_t whylen);

#endif

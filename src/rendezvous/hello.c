/* The handshake's steps (hello.h). Every mac computed here is wiped as soon
 * as it has been sent or compared, and the token when the client is done
 * with it: a core dump or a reused buffer then holds no proof. */
#include "rendezvous/hello.h"

#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <openssl/crypto.h>

bool crun__hello_retryable(int err)
{
	return err == -ECONNREFUSED || err == -ENETUNREACH || err == -EHOSTUNREACH ||
	       err == -ETIMEDOUT || err == -ECONNRESET || err == -EPIPE || err == -ECONNABORTED ||
	       err == -EAGAIN || err == -ENETDOWN;
}

int crun__hello_next_backoff(int backoff_ms)
{
	return backoff_ms * 2 > CRUN__HELLO_BACKOFF_MAX_MS ? CRUN__HELLO_BACKOFF_MAX_MS
							   : backoff_ms * 2;
}

int crun__hello_jitter(int backoff_ms, uint32_t rnd)
{
	int half = backoff_ms / 2;

	if (backoff_ms <= 1)
		return backoff_ms;
	return half + (int)(rnd % (uint32_t)(backoff_ms - half + 1));
}

uint32_t crun__hello_random(void)
{
	static uint32_t state;
	uint32_t x;

	if (getrandom(&x, sizeof(x), GRND_NONBLOCK) == (ssize_t)sizeof(x))
		return x;
	/* No entropy yet (early boot): a xorshift of the clock is enough
	 * to spread retries. */
	x = state ^ (uint32_t)crun__now_ms() ^ (uint32_t)getpid() << 16;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	state = x;
	return x;
}

/* ---- client --------------------------------------------------------------- */

int crun__hello_client_init(struct crun__hello_client *h, const char *run_id, const void *token,
			    size_t token_len)
{
	*h = (struct crun__hello_client){0};
	h->run_id = strdup(run_id);
	if (!h->run_id)
		return -ENOMEM;
	if (token) {
		h->token = malloc(token_len);
		if (!h->token) {
			free(h->run_id);
			h->run_id = NULL;
			return -ENOMEM;
		}
		memcpy(h->token, token, token_len);
		h->token_len = token_len;
	}
	return 0;
}

void crun__hello_client_finish(struct crun__hello_client *h)
{
	if (!h)
		return;
	if (h->token) {
		OPENSSL_cleanse(h->token, h->token_len);
		free(h->token);
	}
	free(h->run_id);
	OPENSSL_cleanse(h, sizeof(*h));
}

void crun__hello_client_begin(struct crun__hello_client *h, const char *peer)
{
	h->peer = peer;
	h->auth = false;
	h->flags = 0;
	h->id = 0;
	OPENSSL_cleanse(h->mac, sizeof(h->mac));
}

/* The one line for a store that did not prove it knows our token. */
static void refuse_unproven(const struct crun__hello_client *h, char *err, size_t errlen)
{
	crun__seterr(err, errlen,
		     "store at '%s' did not prove it knows the token: refusing it (a store "
		     "without a token, or an impostor)",
		     h->peer);
}

long crun__hello_client_preamble(struct crun__hello_client *h, const uint8_t *buf, size_t len,
				 const uint8_t *cnonce, uint32_t id, struct crun__wire_msg *hello,
				 char *err, size_t errlen)
{
	uint16_t version, flags;
	int rc;

	if (len < CRUN_WIRE_SERVER_PREAMBLE)
		return 0;
	rc = crun__wire_parse_server_preamble(buf, &version, &flags, h->snonce);
	if (rc == -EPROTONOSUPPORT) {
		crun__seterr(err, errlen,
			     "the store at '%s' speaks protocol version %u, this client %u",
			     h->peer, version, CRUN_WIRE_VERSION);
		return rc;
	}
	if (rc < 0) {
		crun__seterr(err, errlen, "'%s' is not a crun store", h->peer);
		return -EPROTO;
	}
	h->flags = flags;
	h->auth = flags & CRUN_WIRE_F_AUTH;
	if (h->auth && !h->token) {
		crun__seterr(
			err, errlen,
			"authentication failed: the store requires a token and none was given");
		return -EACCES;
	}
	if (h->token && !h->auth) {
		refuse_unproven(h, err, errlen);
		return -EACCES;
	}
	if (h->auth && !(flags & CRUN_WIRE_F_AUTH_RUN)) {
		crun__seterr(err, errlen,
			     "the store at '%s' speaks an older handshake whose proof does not "
			     "cover the run id: refusing it (upgrade it)",
			     h->peer);
		return -EACCES;
	}
	memcpy(h->cnonce, cnonce, CRUN_WIRE_NONCE_LEN);
	if (h->auth) {
		rc = crun__wire_mac_run(h->token, h->token_len, "client", h->snonce, h->cnonce,
					h->run_id, (uint32_t)strlen(h->run_id), h->mac);
		if (rc < 0) {
			crun__seterr(err, errlen, "cannot compute the handshake: %s",
				     strerror(-rc));
			return rc;
		}
	}
	h->id = id;
	h->items[0] =
		(struct crun__wire_item){(const uint8_t *)h->run_id, (uint32_t)strlen(h->run_id)};
	h->items[1] = (struct crun__wire_item){h->cnonce, CRUN_WIRE_NONCE_LEN};
	h->items[2] = (struct crun__wire_item){h->mac, h->auth ? CRUN_WIRE_MAC_LEN : 0};
	*hello = (struct crun__wire_msg){
		.type = CRUN_WIRE_HELLO, .id = id, .count = 3, .items = h->items};
	return CRUN_WIRE_SERVER_PREAMBLE;
}

void crun__hello_client_sent(struct crun__hello_client *h)
{
	OPENSSL_cleanse(h->mac, sizeof(h->mac));
}

int crun__hello_client_reply(struct crun__hello_client *h, const struct crun__wire_msg *m,
			     char *err, size_t errlen)
{
	uint8_t want[CRUN_WIRE_MAC_LEN];
	bool proved;

	crun__hello_client_sent(h);
	if (m->type == CRUN_WIRE_ERROR && m->count >= 1 && (m->id == h->id || m->id == 0)) {
		crun__wire_error_text(m, err, errlen, NULL);
		return crun__wire_frame_errno(m);
	}
	if (m->id != h->id || m->type != CRUN_WIRE_OK) {
		crun__seterr(err, errlen,
			     "bad frame from the store at '%s': %s with id %u during the handshake",
			     h->peer, crun__wire_type_name(m->type), m->id);
		return -EPROTO;
	}
	if (!h->token)
		return 0; /* nothing to verify: see store.h on tokens */
	proved = h->auth &&
		 crun__wire_mac_run(h->token, h->token_len, "server", h->cnonce, h->snonce,
				    h->run_id, (uint32_t)strlen(h->run_id), want) == 0 &&
		 m->count >= 1 && m->items[0].len == CRUN_WIRE_MAC_LEN &&
		 crun__wire_mac_equal(m->items[0].data, want);
	OPENSSL_cleanse(want, sizeof(want));
	if (!proved) {
		refuse_unproven(h, err, errlen);
		return -EACCES;
	}
	return 0;
}

/* ---- server --------------------------------------------------------------- */

long crun__hello_server_preamble(const uint8_t *buf, size_t len, char *why, size_t whylen)
{
	uint16_t version = 0;
	int rc;

	if (len < CRUN_WIRE_CLIENT_PREAMBLE)
		return 0;
	rc = crun__wire_parse_client_preamble(buf, &version);
	if (rc == -EPROTONOSUPPORT) {
		crun__seterr(why, whylen,
			     "protocol version %u is not supported (this server speaks %d)",
			     version, CRUN_WIRE_VERSION);
		return rc;
	}
	if (rc < 0) {
		crun__seterr(why, whylen, "bad magic: not a crun store client");
		return -EPROTO;
	}
	return CRUN_WIRE_CLIENT_PREAMBLE;
}

int crun__hello_server_hello(const struct crun__hello_server *hs, const struct crun__wire_msg *m,
			     uint8_t *mac_out, struct crun__wire_item *reply, char *why,
			     size_t whylen)
{
	const struct crun__wire_item *run_id, *cnonce, *mac;
	uint8_t want[CRUN_WIRE_MAC_LEN];
	bool proved;

	*reply = (struct crun__wire_item){NULL, 0};
	if (m->type != CRUN_WIRE_HELLO || m->count != 3) {
		crun__seterr(why, whylen, "expected HELLO, got %s", crun__wire_type_name(m->type));
		return -EPROTO;
	}
	run_id = &m->items[0];
	cnonce = &m->items[1];
	mac = &m->items[2];
	if (run_id->len > hs->max_run_id) {
		crun__seterr(why, whylen, "run id of %u bytes exceeds the limit of %u bytes",
			     run_id->len, hs->max_run_id);
		return -E2BIG;
	}
	if (memchr(run_id->data, '\0', run_id->len)) {
		crun__seterr(why, whylen, "run id contains a NUL byte");
		return -EINVAL;
	}
	if (!hs->token)
		return 0;
	proved = mac->len == CRUN_WIRE_MAC_LEN && cnonce->len == CRUN_WIRE_NONCE_LEN &&
		 crun__wire_mac_run(hs->token, hs->token_len, "client", hs->nonce, cnonce->data,
				    run_id->data, run_id->len, want) == 0 &&
		 crun__wire_mac_equal(want, mac->data);
	if (!proved) {
		/* A client of an older crun proves the token without the run id:
		 * still refused, but told why. */
		bool old = mac->len == CRUN_WIRE_MAC_LEN && cnonce->len == CRUN_WIRE_NONCE_LEN &&
			   crun__wire_mac(hs->token, hs->token_len, "client", hs->nonce,
					  cnonce->data, want) == 0 &&
			   crun__wire_mac_equal(want, mac->data);

		OPENSSL_cleanse(want, sizeof(want));
		crun__seterr(why, whylen, "%s",
			     old ? "authentication failed: the client speaks an older handshake "
				   "whose proof does not cover the run id (upgrade it)"
				 : "authentication failed");
		return -EACCES;
	}
	OPENSSL_cleanse(want, sizeof(want));
	if (crun__wire_mac_run(hs->token, hs->token_len, "server", cnonce->data, hs->nonce,
			       run_id->data, run_id->len, mac_out) < 0) {
		crun__seterr(why, whylen, "cannot compute the server mac");
		return -EIO;
	}
	*reply = (struct crun__wire_item){mac_out, CRUN_WIRE_MAC_LEN};
	return 0;
}

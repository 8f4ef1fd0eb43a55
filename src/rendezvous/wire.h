/* crun store wire protocol, version 1.
 *
 * All integers are big-endian (network byte order).
 *
 * Connection start
 *   client -> server  preamble, 8 bytes:  "CRUN" u16 version u16 zero
 *   server -> client  preamble, 40 bytes: "CRUN" u16 version u16 flags
 *                                         u8 nonce[32]
 *   flags bit 0 (CRUN_WIRE_F_AUTH): the server requires the job token.
 *   flags bit 1 (CRUN_WIRE_F_RDZV_EXCL): the server takes a RDZV_JOIN of
 *     14 items (with the node-exclusion settings) and a RDZV_FAIL of 2
 *     items ("stop"); clients send those only to a server that sets it,
 *     else the 10-item JOIN and 1-item FAIL every server takes (rdzv.h).
 *   flags bit 2 (CRUN_WIRE_F_AUTH_RUN): with bit 0, both macs of HELLO
 *     cover the run id (the "crun-auth-v2" macs below). A client with a
 *     token refuses a server that does not set bits 0 and 2: a server
 *     without a token, one that predates bit 2, or an impostor.
 *   flags bit 3 (CRUN_WIRE_F_LIST_PAGED): the server takes a paged LIST
 *     (an item and a page size, below); clients page only with a server
 *     that sets it, else they send the plain LIST every server takes.
 *   flags bit 4 (CRUN_WIRE_F_RDZV_RESUME): the server takes RDZV_RESUME
 *     (rdzv.h): an agent that lost the store while a member of a running
 *     round resumes that round with it; with another server it joins
 *     again as a new node.
 *   flags bit 5 (CRUN_WIRE_F_EMBEDDED): the server runs inside a crun
 *     agent (node 0's, --rdzv-backend c10d): it goes when that agent goes
 *     and never comes back, so an agent that loses it does not wait for
 *     it (a standalone crun-rdzvd does not set it).
 *   Clients ignore flag bits they do not know.
 *   The nonce is fresh random bytes per connection (zeros without auth).
 *   A server that does not speak the client's version answers with its own
 *   preamble and an ERROR frame (EPROTONOSUPPORT), then closes.
 *   After the preambles everything is frames, both ways. The first frame a
 *   client sends must be HELLO; anything else is refused and the connection
 *   closed.
 *
 * Frame
 *   header, 12 bytes:  u32 len   payload length in bytes (<= the cap)
 *                      u8  type  enum crun__wire_type
 *                      u8  flags enum crun__wire_flag (request-specific)
 *                      u16 zero  must be 0
 *                      u32 id    request id; a reply carries the id of its
 *                                request; NOTIFY carries the WATCH's id
 *   payload, len bytes: i64 num      timeout_ms, delta, result or errno
 *                       u32 count    number of items
 *                       count x { u32 n, n bytes }  keys, values, messages
 *   Every payload has this one shape, so the decoder is one function. The
 *   minimum payload is 12 bytes (num and count). The decoder rejects a len
 *   above the cap before allocating anything, a count above
 *   CRUN_WIRE_MAX_ITEMS or above what len can hold, an item running past
 *   len, and trailing bytes after the last item.
 *
 * Requests (items; num; reply)
 *   HELLO   [run_id, client_nonce(32), mac(32 or empty)]; 0; OK [server_mac]
 *           mac = HMAC-SHA256(token, "crun-auth-v2 client" | server_nonce |
 *           client_nonce | u32 len | run_id); server_mac =
 *           HMAC-SHA256(token, "crun-auth-v2 server" | client_nonce |
 *           server_nonce | u32 len | run_id), empty without auth. A wrong
 *           mac: ERROR EACCES "authentication failed" and the server
 *           closes the connection. A client of an older crun sends the
 *           "crun-auth-v1" mac (the same without the run id); the server
 *           refuses it with ERROR EACCES saying so.
 *   SET     [key, value]; 0; OK.  flag EPHEMERAL: the key is deleted when
 *           this connection closes (agents use it for liveness).
 *   GET     [key]; timeout_ms (0: do not wait, ENOENT when missing;
 *           > 0: wait up to that long, ETIMEDOUT); VALUE [value]
 *   CHECK   [key...]; 0; INT num = 1 when every key exists, else 0
 *   WAIT    [key...]; timeout_ms (> 0); OK when all exist, else ETIMEDOUT
 *   ADD     [key]; delta; INT num = new value. Values are decimal ASCII
 *           (as torch's TCPStore); a missing key counts as 0; a value that
 *           is not a decimal int64 or an overflow is EINVAL / ERANGE.
 *   CAS     [key, expected, desired]; 0; VALUE [value now stored].
 *           num = 1 when the swap happened, else 0 (a missing key with a
 *           non-empty expected replies expected, as torch's TCPStore).
 *           Swaps when the current value equals expected; flag
 *           EXPECT_ABSENT: swaps only when the key is missing (expected is
 *           then empty and ignored).
 *   DELETE  [key]; 0; INT num = 1 if it existed, else 0
 *   APPEND  [key, value]; 0; OK (creates the key when missing)
 *   COUNT   []; 0; INT num = number of keys in the run
 *   MGET    [key...]; timeout_ms as for GET; VALUES [value...]
 *   MSET    [key, value, key, value...]; 0; OK (all or nothing)
 *   LIST    []; 0; VALUES [key...] (every key, sorted; ENOBUFS when they
 *           are more than CRUN_WIRE_MAX_ITEMS or do not fit one frame).
 *           Paged (CRUN_WIRE_F_LIST_PAGED): [after (optional)]; page size
 *           > 0; VALUES [key...], num = 1 when keys follow the last one
 *           listed, else 0. Lists the sorted keys above after (all keys
 *           when after is missing or empty), at most the page size
 *           (clamped to CRUN_WIRE_MAX_ITEMS) and at most
 *           CRUN_WIRE_LIST_PAGE_BYTES of items (at least one key). The
 *           next page starts after the last key listed: a key present
 *           through a whole listing is listed exactly once; one added or
 *           deleted meanwhile may or may not be.
 *   PING    [payload (optional)]; 0; VALUE [the same payload]
 *   WATCH   [key]; 0; OK, then NOTIFY frames with this request's id
 *   UNWATCH [key]; 0; OK
 * Replies
 *   OK      [optional items]
 *   ERROR   [message]; num = errno in 1..4095 (EACCES, ENOENT, ETIMEDOUT,
 *           EINVAL, ERANGE, E2BIG, ENOSPC, EMFILE, ENOBUFS, EPROTO, ...)
 *   VALUE   [value]
 *   INT     []; num
 *   VALUES  [value...]
 *   NOTIFY  [key, value]; num = CRUN_WIRE_EV_SET or CRUN_WIRE_EV_DELETE
 *           (value empty on delete). Sent unsolicited after WATCH.
 *
 *   RDZV_JOIN, RDZV_FAIL, RDZV_DONE, RDZV_RESUME requests and the pushed
 *           RDZV_EVENT reply: rendezvous rounds, specified in rdzv.h.
 *           Generic rules (crun__wire_validate): JOIN 10 or 14 items, the
 *           first (node id) not empty, num = join timeout > 0; FAIL 1 or 2
 *           items, DONE none, num = a round >= 0; RESUME at least 22 items,
 *           the first (node id) not empty, num = its wait > 0; RDZV_EVENT 3
 *           items, the first (reason) not empty, num = a round >= 0.
 *
 *   QUEUE_PUSH, QUEUE_POP, QUEUE_LEN: internal requests of the store's
 *           TCPStore clients (store.h has their semantics); no frame of
 *           these types is valid: the decoder refuses them as unknown.
 *
 * Requests on one connection are answered in any order (a waiting GET does
 * not hold up a later SET); clients match replies by id. */
#ifndef CRUN_RENDEZVOUS_WIRE_H
#define CRUN_RENDEZVOUS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRUN_WIRE_MAGIC "CRUN"
#define CRUN_WIRE_VERSION 1
#define CRUN_WIRE_CLIENT_PREAMBLE 8
#define CRUN_WIRE_SERVER_PREAMBLE 40
#define CRUN_WIRE_NONCE_LEN 32
#define CRUN_WIRE_MAC_LEN 32
/* The longest job token (bytes of a token file or CRUN_TOKEN) that
 * clients, servers and crun accept. */
#define CRUN_WIRE_TOKEN_MAX 4096
#define CRUN_WIRE_F_AUTH 0x0001
#define CRUN_WIRE_F_RDZV_EXCL 0x0002
#define CRUN_WIRE_F_AUTH_RUN 0x0004
#define CRUN_WIRE_F_LIST_PAGED 0x0008
#define CRUN_WIRE_F_RDZV_RESUME 0x0010
#define CRUN_WIRE_F_EMBEDDED 0x0020
/* The most item bytes (4 + key length each) one page of a paged LIST
 * carries, below every frame cap a server accepts. */
#define CRUN_WIRE_LIST_PAGE_BYTES (1u << 20)

#define CRUN_WIRE_HEADER_LEN 12
#define CRUN_WIRE_PAYLOAD_MIN 12
#define CRUN_WIRE_MAX_ITEMS 65536
/* Absolute cap on one frame's payload whatever the server's limits say. */
#define CRUN_WIRE_MAX_PAYLOAD (1u << 30)
/* An ERROR frame's num is a positive errno no larger than this. */
#define CRUN_WIRE_ERRNO_MAX 4095
/* A client's timeout of one call when the caller gives none (libcrun's
 * crun_store_opts.timeout_ms 0, crunctl without --timeout). */
#define CRUN_WIRE_DEFAULT_TIMEOUT_MS 300000

enum crun__wire_type {
	CRUN_WIRE_HELLO = 1,
	CRUN_WIRE_SET = 2,
	CRUN_WIRE_GET = 3,
	CRUN_WIRE_CHECK = 4,
	CRUN_WIRE_WAIT = 5,
	CRUN_WIRE_ADD = 6,
	CRUN_WIRE_CAS = 7,
	CRUN_WIRE_DELETE = 8,
	CRUN_WIRE_APPEND = 9,
	CRUN_WIRE_COUNT = 10,
	CRUN_WIRE_MGET = 11,
	CRUN_WIRE_MSET = 12,
	CRUN_WIRE_LIST = 13,
	CRUN_WIRE_PING = 14,
	CRUN_WIRE_WATCH = 15,
	CRUN_WIRE_UNWATCH = 16,
	/* Rendezvous rounds: see rdzv.h for their items and semantics. */
	CRUN_WIRE_RDZV_JOIN = 17,
	CRUN_WIRE_RDZV_FAIL = 18,
	CRUN_WIRE_RDZV_DONE = 19,
	CRUN_WIRE_RDZV_RESUME = 20,
	/* Queues, for the store's TCPStore clients only (tcpstore.h): never
	 * on the wire. crun__wire_check_header refuses these types as
	 * unknown, so a crun client cannot send them. */
	CRUN_WIRE_QUEUE_PUSH = 0x40,
	CRUN_WIRE_QUEUE_POP = 0x41,
	CRUN_WIRE_QUEUE_LEN = 0x42,

	CRUN_WIRE_OK = 0x80,
	CRUN_WIRE_ERROR = 0x81,
	CRUN_WIRE_VALUE = 0x82,
	CRUN_WIRE_INT = 0x83,
	CRUN_WIRE_VALUES = 0x84,
	CRUN_WIRE_NOTIFY = 0x85,
	CRUN_WIRE_RDZV_EVENT = 0x86, /* pushed; see rdzv.h */
};

enum crun__wire_flag {
	CRUN_WIRE_FL_EPHEMERAL = 0x01,	   /* SET */
	CRUN_WIRE_FL_EXPECT_ABSENT = 0x02, /* CAS */
};

enum crun__wire_event {
	CRUN_WIRE_EV_SET = 1,
	CRUN_WIRE_EV_DELETE = 2,
};

/* A byte string inside a decoded frame: points into the caller's buffer,
 * not NUL-terminated, valid as long as that buffer is. */
struct crun__wire_item {
	const uint8_t *data;
	uint32_t len;
};

/* One decoded frame. items points to storage the caller provides (see
 * crun__wire_decode); data points into the input buffer. */
struct crun__wire_msg {
	uint8_t type;
	uint8_t flags;
	uint32_t id;
	int64_t num;
	uint32_t count;
	struct crun__wire_item *items;
};

/* Result of crun__wire_decode beyond 0 / >0. */
enum crun__wire_status {
	CRUN_WIRE_NEED_MORE = 0,
};

/* Human-readable name of a type ("SET"), or "unknown". */
const char *crun__wire_type_name(uint8_t type);
/* True for the request types (HELLO..UNWATCH, RDZV_JOIN..RDZV_DONE). */
bool crun__wire_is_request(uint8_t type);
/* True for the reply types (OK..NOTIFY, RDZV_EVENT). */
bool crun__wire_is_reply(uint8_t type);

/* Checks a 12-byte header without looking at the payload. On success
 * stores the payload length in *payload_len and returns 0. Returns
 * -EMSGSIZE when len exceeds max_payload, -EPROTO for an unknown type,
 * non-zero reserved field or a payload shorter than the minimum, and
 * writes a one-line reason to err. */
int crun__wire_check_header(const uint8_t *hdr, uint32_t max_payload, uint32_t *payload_len,
			    char *err, size_t errlen);

/* Incremental decoder. buf holds len bytes received so far, starting at a
 * frame boundary. Returns:
 *   0            not a whole frame yet (nothing consumed; read more)
 *   > 0          the frame's total size; *msg is filled, its items point
 *                into buf and into items_store (which must have room for
 *                *items_cap items; when the frame has more, *items_cap is
 *                set to the count needed and -ENOBUFS returned so the
 *                caller can grow its store and call again)
 *   < 0          a malformed frame (-EMSGSIZE, -EPROTO): the connection
 *                must be dropped; err says why.
 * Header errors are reported as soon as the 12 header bytes are in, before
 * the payload arrives, so a peer announcing 2^31 bytes is refused at once.
 * Checks the generic shape only; crun__wire_validate checks per-type rules. */
long crun__wire_decode(const uint8_t *buf, size_t len, uint32_t max_payload,
		       struct crun__wire_msg *msg, struct crun__wire_item *items_store,
		       uint32_t *items_cap, char *err, size_t errlen);

/* Per-type rules of a decoded request or reply: item counts, HELLO's
 * nonce and mac lengths, WAIT's positive timeout, MSET's even count,
 * no empty keys, flags only where defined, ERROR's errno range, NOTIFY's
 * event. 0 or -EPROTO with a reason. */
int crun__wire_validate(const struct crun__wire_msg *msg, char *err, size_t errlen);

/* Size in bytes that encoding msg takes (header included). */
size_t crun__wire_encoded_size(const struct crun__wire_msg *msg);

/* Encodes msg into out, which must hold crun__wire_encoded_size(msg)
 * bytes. Returns the number of bytes written. */
size_t crun__wire_encode(const struct crun__wire_msg *msg, uint8_t *out);

/* The size encoding msg takes in *size; 0, or -E2BIG when the payload is
 * above CRUN_WIRE_MAX_PAYLOAD, which every peer refuses. */
int crun__wire_sendable_size(const struct crun__wire_msg *msg, size_t *size);

/* Decodes as crun__wire_decode, growing *items (malloc'd, *items_cap
 * entries) when the frame has more items than it holds. Returns what
 * crun__wire_decode does, or -ENOMEM. */
long crun__wire_decode_grow(const uint8_t *buf, size_t len, uint32_t max_payload,
			    struct crun__wire_msg *msg, struct crun__wire_item **items,
			    uint32_t *items_cap, char *err, size_t errlen);

/* Total size (header and payload) of the frame whose header starts buf,
 * when its len bytes hold a header that crun__wire_check_header accepts
 * with max_payload; else 0. Tells a reader how much room the frame needs. */
size_t crun__wire_frame_size(const uint8_t *buf, size_t len, uint32_t max_payload);

/* A decoded frame as a client must see it from the server: a reply (a
 * request is "unexpected SET") that crun__wire_validate accepts. 0 or
 * -EPROTO with a reason. */
int crun__wire_check_reply(const struct crun__wire_msg *msg, char *err, size_t errlen);

/* The negative errno a validated ERROR frame carries. */
int crun__wire_frame_errno(const struct crun__wire_msg *msg);

/* An ERROR frame's message as a printable C string (bytes outside ASCII
 * 0x20..0x7e become '?'): in buf, cut to buflen - 1 bytes, unless heap is
 * not NULL and the text does not fit; then it is malloc'd, *heap points to
 * it and the caller frees it (*heap is NULL otherwise). */
const char *crun__wire_error_text(const struct crun__wire_msg *msg, char *buf, size_t buflen,
				  char **heap);

/* The id after *last_id for a client's next request (never 0, which
 * frames about no request carry); stores it in *last_id. */
uint32_t crun__wire_next_id(uint32_t *last_id);

/* Preambles. encode writes exactly CRUN_WIRE_CLIENT_PREAMBLE /
 * CRUN_WIRE_SERVER_PREAMBLE bytes. parse returns 0, or -EPROTO for a bad
 * magic (or, in the client's version 1 preamble, a non-zero reserved
 * field), or -EPROTONOSUPPORT for another version (*version is set). */
void crun__wire_client_preamble(uint8_t *out);
int crun__wire_parse_client_preamble(const uint8_t *in, uint16_t *version);
void crun__wire_server_preamble(uint8_t *out, uint16_t flags, const uint8_t *nonce);
int crun__wire_parse_server_preamble(const uint8_t *in, uint16_t *version, uint16_t *flags,
				     uint8_t *nonce);

/* HMAC-SHA256 for the HELLO exchange (OpenSSL's libcrypto underneath).
 * role is "client" or "server"; a and b are the two nonces in the order
 * the protocol above gives. out receives CRUN_WIRE_MAC_LEN bytes.
 * Returns 0 or -EIO. */
int crun__wire_mac(const void *token, size_t token_len, const char *role, const uint8_t *a,
		   const uint8_t *b, uint8_t *out);
/* The same with the run id (run_len bytes) after the nonces, "crun-auth-v2"
 * (see HELLO above). Returns 0, -EIO or -ENOMEM. */
int crun__wire_mac_run(const void *token, size_t token_len, const char *role, const uint8_t *a,
		       const uint8_t *b, const void *run_id, uint32_t run_len, uint8_t *out);
/* Constant-time comparison of two macs. */
bool crun__wire_mac_equal(const uint8_t *a, const uint8_t *b);
/* Fills buf with cryptographically random bytes. 0 or -EIO. */
int crun__wire_random(uint8_t *buf, size_t len);

#endif

/* PyTorch's c10d TCPStore wire protocol, as crun's store server speaks it
 * beside its own (server.c tells the two apart from a connection's first
 * byte: crun's preamble starts with 'C', a TCPStore request with an opcode
 * below 0x20).
 *
 * What PyTorch sends: observed on the wire between torch's own client and
 * server for 1.13.1 (legacy) and 2.15.0 (modern); the enums of the
 * releases between read from PyTorch's sources, so the release where each
 * opcode appeared (in parentheses) is approximate:
 *
 *   Integers are host byte order (little-endian on every platform torch
 *   ships). A string or byte vector is u64 length + bytes; a list is u64
 *   count + that many strings. A request is u8 opcode + arguments, with no
 *   length in front: a server must parse incrementally. Keys reach the
 *   wire with the client's prefix "/" ("/" + the user's key) except the
 *   client's own "init/" counter. No request carries an id: replies come
 *   in request order, and requests without a reply are pipelined
 *   (observed: SET, WAIT and GET in one write).
 *
 *   Dialects (opcode numbers):
 *     request       legacy (1.13 .. 2.1)   modern (2.2 .. 2.15)
 *     VALIDATE      -                      0  u32 magic 0x3C85F7CE; no reply
 *     SET           0                      1  key, value; no reply
 *     COMPARE_SET   1                      2  key, expected, desired;
 *                                             reply value
 *     GET           2                      3  key; reply value
 *     ADD           3                      4  key, i64 delta; reply i64
 *     CHECK         4                      5  list of keys; reply u8
 *                                             0 READY, 1 NOT_READY
 *     WAIT          5                      6  list of keys; reply u8
 *                                             0 STOP_WAITING when all exist
 *     GETNUMKEYS    6                      7  -; reply i64
 *     WATCH_KEY     7                      -  (1.13 .. 2.1 only; unused by
 *                                             torchrun; not served)
 *     DELETE_KEY    8                      8  key; reply i64 (1 or 0)
 *     APPEND        9 (2.1)                9  key, value; no reply
 *     MULTI_GET     10 (2.1)               10 list of keys; reply that many
 *                                             values
 *     MULTI_SET     11 (2.1)               11 u64 count, then count x
 *                                             (key, value); no reply
 *     CANCEL_WAIT   12 (2.1)               12 -; reply u8 1 WAIT_CANCELED
 *     PING          -                      13 u32 nonce; reply the nonce
 *                                             (2.4 ..)
 *     QUEUE_PUSH    -                      14 key, value; no reply
 *     QUEUE_POP     -                      15 key; reply i64 0 when
 *                                             empty, else i64 the length
 *                                             before the pop + value
 *     QUEUE_LEN     -                      16 key; reply i64
 *   (the queues, of recent releases: FIFO queues of values in a map apart from the
 *   keys; CHECK and WAIT count a non-empty queue as a present key; GET,
 *   GETNUMKEYS and DELETE_KEY do not see queues. A blocking queue_pop is
 *   WAIT on the key, then QUEUE_POP; a push wakes one WAIT on its key,
 *   so of clients blocked on one queue only one pops each value. The
 *   client raises QueueEmptyError on a 0. Observed between 2.15's client
 *   and server: three pushes, then pops answered 3, 2 and 1 before each
 *   value. crun's store has these semantics, store.h.)
 *   1.13 and 2.0 stop at DELETE_KEY (8). Opcodes 8 .. 12 mean the same in
 *   both dialects; 0 .. 7 are shifted by VALIDATE and WATCH_KEY.
 *
 *   On connect: a modern client (2.2 ..) sends VALIDATE first, then (2.4 ..)
 *   PING with a random nonce and reads the echo. A legacy client sends no
 *   greeting. Either, when given a world size, then ADDs 1 to "init/".
 *
 *   Semantics both torch servers share (and crun's store, store.h, has):
 *   values are bytes; ADD keeps the value as decimal ASCII, a missing key
 *   counting as 0. COMPARE_SET on a missing key with an empty expected
 *   value sets desired and replies it; with a non-empty expected value it
 *   changes nothing and replies expected; on an existing key it swaps when
 *   the value equals expected and replies the value now stored. GET of
 *   a missing key (torch's clients always WAIT first, so they never send
 *   one): 2.15's libuv server replies an empty value, and so does crun in
 *   the modern dialect; 1.13's server closed the connection, and so does
 *   crun in the legacy dialect and for MULTI_GET. ADD on a value that is not
 *   a number: 2.15's libuv server closes that connection; 1.13's threaded
 *   server dropped every connection. Errors have no reply encoding in this
 *   protocol: the torch servers close the connection, so does crun, with
 *   one rate-limited log line. 1.13's Python binding lacks check, append,
 *   multi_get and multi_set (its C++ client has check).
 *
 *   WAIT and CANCEL_WAIT: the client gives up after its timeout (1.13:
 *   a socket timeout, connection unusable; 2.1 ..: it sends CANCEL_WAIT
 *   and reads one u8: WAIT_CANCELED, or STOP_WAITING when the wait's
 *   answer crossed the cancel, then a second u8 that must be
 *   WAIT_CANCELED). So the server answers every CANCEL_WAIT with
 *   WAIT_CANCELED, after cancelling the waits still pending, whether or
 *   not one was.
 *
 * Telling the dialects apart: the first request of a modern client is
 * VALIDATE, 0x00 + the magic's 4 bytes (ce f7 85 3c). A legacy SET
 * (0x00) with those bytes would announce a key of over 10^9 bytes, above
 * any key limit, so the first five bytes decide: VALIDATE + magic is the
 * modern dialect, anything else the legacy one. No release has both
 * VALIDATE and WATCH_KEY. Limit: a development snapshot of PyTorch from
 * the time of the libuv backend (around 2.2) put a 4-byte magic before
 * every request; whether a release shipped it was not established. crun
 * does not speak it: such a client's first byte reads as an unknown
 * opcode, and the connection is closed with a line saying so.
 *
 * This file is the pure core: parse, translate to the store's requests
 * (wire.h's, applied by crun__store_apply), encode replies. No I/O. */
#ifndef CRUN_RENDEZVOUS_TCPSTORE_H
#define CRUN_RENDEZVOUS_TCPSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rendezvous/wire.h"

#define CRUN__TCPSTORE_MAGIC 0x3C85F7CEu
/* The run id of the namespace every TCPStore client shares. It starts with
 * a NUL byte, which HELLO refuses in a run id (hello.c), so no crun run
 * can name it. */
#define CRUN__TCPSTORE_RUN "\0torch-tcpstore"
#define CRUN__TCPSTORE_RUN_LEN 15
/* A WAIT has no timeout on the server side; the store needs one: this. */
#define CRUN__TCPSTORE_WAIT_MS ((int64_t)1 << 40)
/* Requests with a reply still owed, per connection (torch's clients have
 * one; CANCEL_WAIT cancels). */
#define CRUN__TCPSTORE_PENDING 16

enum crun__tcpstore_dialect {
	CRUN__TCPSTORE_UNKNOWN = 0, /* no request yet */
	CRUN__TCPSTORE_LEGACY,	    /* 1.13 .. 2.1: no VALIDATE, WATCH_KEY */
	CRUN__TCPSTORE_MODERN,	    /* 2.2 ..: VALIDATE first */
};

/* Requests, whatever their number in a dialect. */
enum crun__tcpstore_op {
	CRUN__TS_VALIDATE,
	CRUN__TS_SET,
	CRUN__TS_COMPARE_SET,
	CRUN__TS_GET,
	CRUN__TS_ADD,
	CRUN__TS_CHECK,
	CRUN__TS_WAIT,
	CRUN__TS_GETNUMKEYS,
	CRUN__TS_WATCH_KEY,
	CRUN__TS_DELETE_KEY,
	CRUN__TS_APPEND,
	CRUN__TS_MULTI_GET,
	CRUN__TS_MULTI_SET,
	CRUN__TS_CANCEL_WAIT,
	CRUN__TS_PING,
	CRUN__TS_QUEUE_PUSH,
	CRUN__TS_QUEUE_POP,
	CRUN__TS_QUEUE_LEN,
	CRUN__TS_OPS,
};

struct crun__tcpstore_limits {
	uint32_t max_key_size;	 /* bytes */
	uint32_t max_value_size; /* bytes */
	uint64_t max_request;	 /* bytes of one whole request */
};

/* One parsed request. items point into the parsed buffer (and into the
 * caller's item store); num is ADD's delta; u32 VALIDATE's magic or
 * PING's nonce. */
struct crun__tcpstore_req {
	enum crun__tcpstore_op op;
	uint8_t opcode; /* as it came, for messages */
	int64_t num;
	uint32_t u32;
	uint32_t count;
	struct crun__wire_item *items;
};

/* A connection's protocol state. Zeroed memory is a fresh connection. */
struct crun__tcpstore_conn {
	enum crun__tcpstore_dialect dialect;
	uint32_t last_id;
	uint32_t npending;
	struct {
		uint32_t id;
		uint8_t op; /* enum crun__tcpstore_op */
	} pending[CRUN__TCPSTORE_PENDING];
};

/* "legacy" (1.13 .. 2.1), "modern" (2.2 ..), or "unknown". */
const char *crun__tcpstore_dialect_name(enum crun__tcpstore_dialect d);
/* "SET", ... */
const char *crun__tcpstore_op_name(enum crun__tcpstore_op op);

/* Parses the request at the start of buf (len bytes), in ts's dialect;
 * the first request decides the dialect (stored in ts->dialect when the
 * request is whole). Returns the request's size when whole (*req filled,
 * items in *items, grown with realloc as needed: *items_cap entries);
 * 0 when more bytes are needed; -EMSGSIZE for a length past limits (said
 * as soon as the length is in, before its bytes), -EOPNOTSUPP for an
 * opcode this dialect does not have or crun does not serve, -EPROTO for a
 * bad magic, -ENOMEM; err says why. Never allocates more than the items
 * of a list it is given (count is checked against what max_request can
 * hold first). */
long crun__tcpstore_parse(struct crun__tcpstore_conn *ts, const uint8_t *buf, size_t len,
			  const struct crun__tcpstore_limits *lim, struct crun__tcpstore_req *req,
			  struct crun__wire_item **items, uint32_t *items_cap, char *err,
			  size_t errlen);

/* What the edge does with a parsed request (crun__tcpstore_begin). */
enum crun__tcpstore_action {
	CRUN__TS_APPLY,	 /* apply *m to the store (crun__store_apply) */
	CRUN__TS_REPLY,	 /* send the reply bytes (may be none) */
	CRUN__TS_CANCEL, /* cancel the client's waits, then send the reply */
};

/* Turns req into what to do. For CRUN__TS_APPLY, *m is a store request
 * (items are req's) with a fresh id remembered with its op when the
 * store owes an answer; for the others, reply (at least 8 bytes) holds
 * *reply_len bytes to send. -ENOSPC when CRUN__TCPSTORE_PENDING replies
 * are owed already. */
int crun__tcpstore_begin(struct crun__tcpstore_conn *ts, const struct crun__tcpstore_req *req,
			 struct crun__wire_msg *m, uint8_t *reply, size_t *reply_len);

/* Forgets the owed WAITs (their waits were cancelled in the store). */
void crun__tcpstore_cancel_waits(struct crun__tcpstore_conn *ts);

/* The TCPStore bytes of the store's answer (type, id, num, items) to a
 * request begun above. Writes up to cap bytes into out and returns the
 * size the answer takes (call again with a larger out when it exceeds
 * cap); 0 when the request has no reply (SET, APPEND, MULTI_SET);
 * -ENOENT when id is owed nothing (a frame to drop); -EPROTO when the
 * answer is an error or does not fit the request: the connection must be
 * closed, err says why. The request is forgotten unless more bytes are
 * asked for. */
long crun__tcpstore_reply(struct crun__tcpstore_conn *ts, uint8_t type, uint32_t id, int64_t num,
			  const struct crun__wire_item *items, uint32_t count, uint8_t *out,
			  size_t cap, char *err, size_t errlen);

#endif

/* The cpu comm backend: ring collectives between processes, over TCP, or
 * over shared memory between ranks of one host.
 *
 * Every rank holds two links: one to its right neighbour (rank+1), on
 * which it only sends, and one from its left neighbour (rank-1), on which
 * it only receives. Each link is a TCP connection; when both ends can map
 * the same shared-memory ring (ranks of one host), the bytes go through
 * the ring and the connection only carries doorbells and notices a dead
 * peer. A collective is compiled into a plan: the list of segments this
 * rank sends, in order, and the list it receives, in order. A sent
 * segment may be "gated" by a received one: it covers the same memory and
 * its bytes may leave only once they have arrived (and been reduced).
 * That one rule expresses the ring's pipelining at byte granularity: in an
 * all-reduce the partial sum of a chunk travels on to the next rank as
 * soon as it is computed, while the rest of the step is still arriving,
 * and the whole reduce-scatter + all-gather is one continuous stream per
 * link.
 *
 * The plan runs on the caller's thread: send what is available (at most a
 * chunk at a time), take what has arrived (at most a chunk, reduced at
 * once while it is still in the cache), and sleep in poll() only when
 * neither moved. The TCP kernel buffers and the rings let both directions
 * move while this rank reduces. With CRUN_COMM_SEND_THREAD=1 a second
 * thread runs the send side of large plans instead; on the 2-core
 * reference machine, with 2 and 4 ranks, the two gave the same bandwidth
 * within the noise (scripts/bench/collectives), so the default stays with
 * one thread per process; the thread is for hosts with cores to spare per
 * rank.
 *
 * Every collective starts with a 24-byte header on each link it uses, so
 * that ranks calling different collectives or sizes fail with a message
 * instead of reading each other's data as floats. The only waits are
 * poll() calls bounded by the timeout, and the timeout counts from the
 * last byte that moved, so a large transfer never times out while it is
 * progressing but a dead or stalled neighbour is noticed. */
#include "trainer/comm.h"
#include "common/le.h"
#include "trainer/comm_backend.h"
#include "trainer/comm_shm.h"

#include "common/log.h"
#include "common/util.h"
#include <crun/store.h>

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define HELLO_MAGIC "CRUNCOMM"
#define HELLO_LEN 32
#define COMM_VERSION 2u
#define HDR_MAGIC 0x4c4f4343u /* "CCOL" */
#define HDR_LEN 24
#define DEFAULT_CHUNK (1u << 20)
#define DEFAULT_SOCKBUF (4u << 20)
#define ADDR_LEN 128
#define RING_MAGIC "CRUNRING"
#define RING_DATA_OFF 4096 /* the header's page */
#define RING_BYTES (2u << 20)

enum op {
	OP_ALLREDUCE = 1,
	OP_REDUCE_SCATTER,
	OP_ALLGATHER,
	OP_BROADCAST,
	OP_BARRIER,
	OP_ALLREDUCE_F64,
	OP_MAX,
};

/* clang-format off */
static const char *const op_names[OP_MAX] = {
	[OP_ALLREDUCE] = "all-reduce",
	[OP_REDUCE_SCATTER] = "reduce-scatter",
	[OP_ALLGATHER] = "all-gather",
	[OP_BROADCAST] = "broadcast",
	[OP_BARRIER] = "barrier",
	[OP_ALLREDUCE_F64] = "all-reduce (f64)",
};
/* clang-format on */

/* A segment this rank sends. gate >= 0: the index of the received
 * segment that fills this memory; only its completed bytes may be sent. */
struct sseg {
	const uint8_t *p;
	size_t len;
	int gate;
};

/* A segment this rank receives: into dst, or, when add is set, reduced
 * as dst[i] = add[i] + incoming[i] (floats). */
struct rseg {
	uint8_t *dst;
	const float *add;
	size_t len;
};

/* A shared-memory ring for one link between two ranks of one host: the
 * producer (the left rank) copies into it, the consumer (the right rank)
 * reduces or copies straight out of it, so the bytes cross no kernel.
 * head and tail count bytes since the start and only grow. A side that
 * finds nothing to do sets its wait flag, checks once more, and sleeps in
 * poll() on the link's TCP connection; the other side, after moving head
 * or tail, sends one doorbell byte on that connection when the flag is
 * set. The connection stays the failure detector: a peer that dies closes
 * it, and the sleeper wakes. */
struct ring_hdr {
	char magic[8];
	uint64_t nonce;
	uint64_t cap;
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) _Atomic uint32_t cons_wait;
	_Alignas(64) _Atomic uint32_t prod_wait;
};

_Static_assert(sizeof(struct ring_hdr) <= RING_DATA_OFF, "ring header fits its page");

/* One direction of the ring of ranks, as seen by this rank. */
struct link {
	struct ring_hdr *ring; /* NULL: the bytes go through the socket */
	uint8_t *data;
	size_t cap;
	uint64_t pos; /* bytes put (out) or taken (in) so far */
};

struct cpu {
	struct link out; /* to the right */
	struct link in;	 /* from the left */
	int rank;
	int size;
	int left;
	int right;
	int send_fd; /* to right */
	int recv_fd; /* from left */
	char left_addr[ADDR_LEN];
	char right_addr[ADDR_LEN];
	int64_t timeout_ms;
	size_t chunk;
	uint32_t seq;	/* collectives called so far */
	uint8_t *stage; /* chunk bytes: incoming data waiting to be reduced */
	struct sseg *send;
	struct rseg *recv;
	size_t ns, nr; /* segments in the current plan */
	uint8_t hdr_out[HDR_LEN];
	uint8_t hdr_in[HDR_LEN];
	enum op op;
	size_t total; /* bytes named in the header */
	int root;
	uint8_t pad_in[64];    /* where ring padding is received */
	uint64_t *rstart;      /* offset of each received segment in the plan */
	uint64_t sbytes;       /* bytes the plan sends */
	struct sender *sender; /* NULL: one thread does both directions */
};

/* The send thread (CRUN_COMM_SEND_THREAD=1): runs the send side of large
 * plans while the caller's thread receives and reduces, so the kernel's
 * TCP work (or the copy into the ring) for the outgoing link runs on a
 * second core. The caller publishes how far the receive side got in
 * recv_pos; gated bytes leave once it covers them. */
struct sender {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int efd;		   /* eventfd: the job ended */
	bool job;		   /* under mu: a plan to send */
	bool stop;		   /* under mu: exit */
	_Atomic bool abort;	   /* the caller gave up on this plan */
	_Atomic bool waiting;	   /* sleeps on cv for recv_pos to move */
	_Atomic uint64_t recv_pos; /* bytes of the plan received and reduced */
	int err;		   /* under mu: 0 or errno of the last job */
};

/* Plans that move fewer bytes than this run on the caller's thread:
 * handing them over would cost more than it saves. */
#define THREAD_MIN_BYTES (256u << 10)

static const uint8_t zeros[64];

/* Communicators created by this process, which scopes their store keys:
 * every rank creates its communicators in the same order. */
static unsigned instances;

static int mod(int a, int n)
{
	return ((a % n) + n) % n;
}

/* ------------------------------------------------------------------ */
/* Setup: listener, store, connections, hello                          */

struct hello {
	uint32_t version;
	uint32_t rank;
	uint32_t size;
	uint32_t instance;
	uint64_t round;
};

static void hello_encode(uint8_t *p, const struct hello *h)
{
	memcpy(p, HELLO_MAGIC, 8);
	crun__put_le32(p + 8, h->version);
	crun__put_le32(p + 12, h->rank);
	crun__put_le32(p + 16, h->size);
	crun__put_le32(p + 20, h->instance);
	crun__put_le64(p + 24, h->round);
}

/* Compares a received hello with what this rank expects; a reason in
 * why when it does not match. */
static bool hello_check(const uint8_t *p, const struct hello *want, char *why, size_t whylen)
{
	struct hello h;

	if (memcmp(p, HELLO_MAGIC, 8)) {
		snprintf(why, whylen, "not a crun comm peer (bad magic)");
		return false;
	}
	h.version = crun__get_le32(p + 8);
	h.rank = crun__get_le32(p + 12);
	h.size = crun__get_le32(p + 16);
	h.instance = crun__get_le32(p + 20);
	h.round = crun__get_le64(p + 24);
	if (h.version != want->version)
		snprintf(why, whylen, "protocol version %u, expected %u", h.version, want->version);
	else if (h.round != want->round)
		snprintf(why, whylen, "round %llu, expected %llu", (unsigned long long)h.round,
			 (unsigned long long)want->round);
	else if (h.size != want->size)
		snprintf(why, whylen, "world size %u, expected %u", h.size, want->size);
	else if (h.instance != want->instance)
		snprintf(why, whylen, "communicator %u, expected %u", h.instance, want->instance);
	else if (h.rank != want->rank)
		snprintf(why, whylen, "rank %u, expected %u", h.rank, want->rank);
	else
		return true;
	return false;
}

static int64_t ms_left(uint64_t deadline)
{
	uint64_t now = crun__now_ms();

	return now >= deadline ? 0 : (int64_t)(deadline - now);
}

/* What is left until the deadline, as a store wait (at least 1 ms). */
static int wait_ms(uint64_t deadline)
{
	int64_t left = ms_left(deadline);

	return left >= INT32_MAX ? INT32_MAX : (int)left + 1;
}

static int poll_one(int fd, short events, uint64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = events};
	int n;

	for (;;) {
		int64_t left = ms_left(deadline);

		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* Sends or receives exactly len bytes on a non-blocking socket before
 * the deadline. -ECONNRESET when the peer closed. */
static int io_full(int fd, void *buf, size_t len, bool out, uint64_t deadline)
{
	uint8_t *p = buf;
	size_t done = 0;
	int rc;

	while (done < len) {
		ssize_t n = out ? send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
				: recv(fd, p + done, len - done, MSG_DONTWAIT);

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if ((rc = poll_one(fd, out ? POLLOUT : POLLIN, deadline)) < 0)
			return rc;
	}
	return 0;
}

static void tune_socket(int fd, size_t sockbuf)
{
	int one = 1, sz = sockbuf > INT32_MAX ? INT32_MAX : (int)sockbuf;

	/* Failures only cost speed: the kernel caps the buffers at
	 * net.core.{w,r}mem_max, and TCP_NODELAY is missing on no TCP. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}

/* Opens the listener. With addr, binds that address and publishes it;
 * without, binds every address of the family that reaches the store and
 * publishes the local address of the store connection. */
static int open_listener(struct crun__comm *comm, const char *addr, int store_fd, size_t sockbuf,
			 int *out_fd, char *pub, size_t publen)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN + 32]; /* numeric, with a scope id */
	int fd, rc, port;

	memset(&ss, 0, sizeof(ss));
	if (addr) {
		struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
					 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
		struct addrinfo *ai;

		rc = getaddrinfo(addr, "0", &hints, &ai);
		if (rc) {
			crun__comm_set_error(comm, "cannot resolve CRUN_COMM_ADDR '%s': %s", addr,
					     gai_strerror(rc));
			return -EINVAL;
		}
		memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
		sl = ai->ai_addrlen;
		freeaddrinfo(ai);
	} else {
		if (getsockname(store_fd, (struct sockaddr *)&ss, &sl) < 0) {
			rc = -errno;
			crun__comm_set_error(comm, "cannot read the store connection's address: %s",
					     strerror(-rc));
			return rc;
		}
	}
	rc = getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), NULL, 0, NI_NUMERICHOST);
	if (rc) {
		crun__comm_set_error(comm, "cannot format the local address: %s", gai_strerror(rc));
		return -EINVAL;
	}
	if (!addr) {
		/* Listen on every address; publish the one the store sees. */
		if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
			s6->sin6_addr = in6addr_any;
			s6->sin6_port = 0;
		} else {
			struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
			s4->sin_addr.s_addr = htonl(INADDR_ANY);
			s4->sin_port = 0;
		}
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		rc = -errno;
		crun__comm_set_error(comm, "cannot create a socket: %s", strerror(-rc));
		return rc;
	}
	if (ss.ss_family == AF_INET6 && !addr) {
		int zero = 0;
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	}
	/* Buffers before listen(): accepted sockets inherit them, and the
	 * window scale is fixed at the handshake. */
	tune_socket(fd, sockbuf);
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 64) < 0) {
		rc = -errno;
		crun__comm_set_error(comm, "cannot listen on '%s': %s", host, strerror(-rc));
		goto out_close_fd;
	}
	sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		rc = -errno;
		crun__comm_set_error(comm, "cannot read the listening port: %s", strerror(-rc));
		goto out_close_fd;
	}
	port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					      : ((struct sockaddr_in *)&ss)->sin_port);
	crun__format_endpoint(pub, publen, host, port);
	*out_fd = fd;
	return 0;

out_close_fd:
	close(fd);
	return rc;
}

/* Connects to "host:port" before the deadline, retrying refusals (the
 * peer listens before it publishes, so a refusal is a network hiccup). */
static int connect_peer(struct crun__comm *comm, struct cpu *c, size_t sockbuf, uint64_t deadline,
			int *out_fd)
{
	char host[NI_MAXHOST], portstr[16], why[160];
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai;
	int port, rc, fd = -1;

	if (crun__parse_endpoint(c->right_addr, 0, host, sizeof(host), &port, why, sizeof(why)) <
		    0 ||
	    port <= 0) {
		crun__comm_set_error(comm, "rank %d published a bad address '%s'", c->right,
				     c->right_addr);
		return -EPROTO;
	}
	snprintf(portstr, sizeof(portstr), "%d", port);
	rc = getaddrinfo(host, portstr, &hints, &ai);
	if (rc) {
		crun__comm_set_error(comm, "cannot resolve rank %d's address '%s': %s", c->right,
				     c->right_addr, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	for (;;) {
		int err = 0;
		socklen_t el = sizeof(err);

		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			rc = -errno;
			break;
		}
		tune_socket(fd, sockbuf);
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
			err = errno;
		} else {
			rc = poll_one(fd, POLLOUT, deadline);
			if (rc < 0)
				break;
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
		}
		if (!err) {
			rc = 0;
			break;
		}
		close(fd);
		fd = -1;
		rc = -err;
		if ((err != ECONNREFUSED && err != EAGAIN) || ms_left(deadline) <= 50)
			break;
		usleep(50 * 1000);
	}
	freeaddrinfo(ai);
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		crun__comm_set_error(comm, "cannot connect to rank %d '%s': %s", c->right,
				     c->right_addr, strerror(-rc));
		return rc;
	}
	*out_fd = fd;
	return 0;
}

/* Accepts connections until one says hello as the left neighbour;
 * anything else (a stale peer of another round, a port scanner) is
 * refused with a warning and does not end the wait. */
static int accept_left(struct crun__comm *comm, struct cpu *c, int lfd, const struct hello *want,
		       const uint8_t *reply, uint64_t deadline, int *out_fd)
{
	uint8_t buf[HELLO_LEN];
	char why[160];
	int rc, fd;

	for (;;) {
		uint64_t conn_deadline;

		rc = poll_one(lfd, POLLIN, deadline);
		if (rc < 0) {
			crun__comm_set_error(comm, "rank %d '%s' did not connect within %lld ms",
					     c->left, c->left_addr, (long long)c->timeout_ms);
			return rc;
		}
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
				continue;
			rc = -errno;
			crun__comm_set_error(comm, "cannot accept rank %d: %s", c->left,
					     strerror(-rc));
			return rc;
		}
		/* A silent connection must not use up the whole wait. */
		conn_deadline = crun__now_ms() + 10000;
		if (conn_deadline > deadline)
			conn_deadline = deadline;
		rc = io_full(fd, buf, HELLO_LEN, false, conn_deadline);
		if (rc == 0 && !hello_check(buf, want, why, sizeof(why)))
			rc = -EPROTO;
		if (rc == 0)
			rc = io_full(fd, (void *)reply, HELLO_LEN, true, deadline);
		if (rc == 0) {
			*out_fd = fd;
			return 0;
		}
		if (rc != -EPROTO)
			snprintf(why, sizeof(why), "%s", strerror(-rc));
		crun__warn("comm: refused a connection while waiting for rank %d: %s", c->left,
			   why);
		close(fd);
	}
}

static void ring_unmap(struct link *l)
{
	if (l->ring)
		munmap(l->ring, RING_DATA_OFF + l->cap);
	l->ring = NULL;
	l->data = NULL;
}

static int ring_map(struct link *l, int fd, size_t cap)
{
	void *m = mmap(NULL, RING_DATA_OFF + cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (m == MAP_FAILED)
		return -errno;
	l->ring = m;
	l->data = (uint8_t *)m + RING_DATA_OFF;
	l->cap = cap;
	l->pos = 0;
	return 0;
}

/* Where this process runs, for crun__shm_reachable; all zero when /proc
 * does not say (then no ring is offered or opened). */
static void place_here(struct crun__shm_place *p)
{
	char text[64] = "";
	struct stat st;
	ssize_t n;
	int fd;

	memset(p, 0, sizeof(*p));
	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0 || crun__shm_parse_boot_id(text, p->boot_id) < 0 ||
	    stat("/proc/self/ns/pid", &st) < 0) {
		memset(p, 0, sizeof(*p));
		return;
	}
	p->pid_ns = (uint64_t)st.st_ino;
}

/* Makes the ring of the incoming link: an anonymous file, never named, so
 * that nothing is left behind however this process ends. Its pages are
 * allocated now, so that running out of memory fails here rather than
 * with SIGBUS mid-collective, and its size is sealed. On success *fd
 * stays open: the left neighbour opens the ring through it. */
static int ring_create(struct link *l, int *fd, uint64_t *nonce)
{
	uint64_t rnd = 0;
	int rc;

	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
		rnd = crun__now_ns() ^ ((uint64_t)getpid() << 32);
	*fd = memfd_create("crun-comm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (*fd < 0)
		return -errno;
	rc = -posix_fallocate(*fd, 0, RING_DATA_OFF + RING_BYTES);
	if (rc == 0 && fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		rc = -errno;
	if (rc == 0)
		rc = ring_map(l, *fd, RING_BYTES);
	if (rc < 0) {
		close(*fd);
		*fd = -1;
		return rc;
	}
	memcpy(l->ring->magic, RING_MAGIC, 8);
	l->ring->nonce = *nonce = rnd;
	l->ring->cap = RING_BYTES;
	atomic_store(&l->ring->head, 0);
	atomic_store(&l->ring->tail, 0);
	atomic_store(&l->ring->cons_wait, 0);
	atomic_store(&l->ring->prod_wait, 0);
	return 0;
}

/* Opens the right neighbour's ring through its descriptor. -EXDEV: the
 * neighbour runs elsewhere (another host or PID namespace). The path is
 * looked at before it is opened: only a regular file of the ring's size
 * is opened, and the nonce in its header proves it is the offered ring. */
static int ring_open(struct link *l, const struct crun__shm_offer *o,
		     const struct crun__shm_place *here)
{
	char path[64];
	struct stat st;
	int fd, rc;

	if (!crun__shm_reachable(here, &o->place))
		return -EXDEV;
	rc = crun__shm_proc_path(path, sizeof(path), o->pid, o->fd);
	if (rc < 0)
		return rc;
	if (stat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != RING_DATA_OFF + o->cap)
		return -EINVAL;
	fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != RING_DATA_OFF + o->cap) {
		close(fd);
		return -EINVAL;
	}
	rc = ring_map(l, fd, (size_t)o->cap);
	close(fd);
	if (rc < 0)
		return rc;
	if (memcmp(l->ring->magic, RING_MAGIC, 8) || l->ring->nonce != o->nonce ||
	    l->ring->cap != o->cap) {
		ring_unmap(l);
		return -EINVAL;
	}
	return 0;
}

/* Agrees with both neighbours whether their links use shared memory.
 * Each rank offers a ring for its incoming link (or an empty offer), the
 * left neighbour answers whether it could map it, and the maker closes
 * its descriptor as soon as the answer is in: from then on only the two
 * mappings hold the ring. */
static int negotiate_shm(struct crun__comm *comm, struct cpu *c, bool enabled, uint64_t deadline)
{
	uint8_t offer[CRUN__SHM_OFFER_LEN], theirs[CRUN__SHM_OFFER_LEN], mine = 0, answer = 0;
	struct crun__shm_offer o = {0}, t;
	struct crun__shm_place here;
	const char *peer = "";
	int rc, who = 0, ring_fd = -1;

	place_here(&here);
	if (enabled && here.pid_ns && ring_create(&c->in, &ring_fd, &o.nonce) == 0) {
		o.present = true;
		o.place = here;
		o.pid = (int32_t)getpid();
		o.fd = ring_fd;
		o.cap = RING_BYTES;
	}
	crun__shm_offer_encode(offer, &o);
	rc = io_full(c->recv_fd, offer, sizeof(offer), true, deadline);
	who = c->left;
	peer = c->left_addr;
	if (rc == 0) {
		rc = io_full(c->send_fd, theirs, sizeof(theirs), false, deadline);
		who = c->right;
		peer = c->right_addr;
	}
	if (rc == 0)
		rc = crun__shm_offer_decode(theirs, &t);
	if (rc == 0 && enabled && t.present) {
		int orc = ring_open(&c->out, &t, &here);

		mine = orc == 0;
		/* The neighbour is on this host but its ring cannot be
		 * opened: say why the link is slower than it could be.
		 * (ENOENT: the neighbour is gone; the next read says so.) */
		if (orc < 0 && orc != -EXDEV && orc != -ENOENT)
			crun__warn("comm: rank %d cannot map the ring of rank %d: %s; the link "
				   "uses tcp",
				   c->rank, c->right, strerror(-orc));
	}
	if (rc == 0)
		rc = io_full(c->send_fd, &mine, 1, true, deadline);
	if (rc == 0) {
		rc = io_full(c->recv_fd, &answer, 1, false, deadline);
		who = c->left;
		peer = c->left_addr;
	}
	if (ring_fd >= 0)
		close(ring_fd);
	if (rc == 0 && answer > 1)
		rc = -EPROTO;
	if (rc < 0 || answer != 1)
		ring_unmap(&c->in);
	if (rc < 0)
		crun__comm_set_error(comm, "setup with rank %d (%s) failed: %s", who, peer,
				     rc == -ECONNRESET ? "it closed the connection"
						       : strerror(-rc));
	else
		crun__debug(
			"comm: rank %d receives from rank %d over %s and sends to rank %d over %s",
			c->rank, c->left, c->in.ring ? "shared memory" : "tcp", c->right,
			c->out.ring ? "shared memory" : "tcp");
	return rc;
}

static int connect_ring(struct crun__comm *comm, struct cpu *c, const struct crun__comm_opts *o,
			unsigned instance)
{
	size_t sockbuf = o->sockbuf_bytes ? o->sockbuf_bytes : DEFAULT_SOCKBUF;
	uint64_t deadline = crun__now_ms() + (uint64_t)c->timeout_ms;
	struct crun_store_opts so;
	struct crun_store *store;
	struct crun_store_buf vals[2];
	char pub[ADDR_LEN], key[3][96], why[160];
	const char *keys[2];
	uint8_t mine[HELLO_LEN], theirs[HELLO_LEN];
	struct hello me, want;
	int rc, lfd = -1;

	rc = crun_store_opts_from_env(&so);
	if (rc < 0) {
		crun__comm_set_error(comm, "cannot read the store's address from CRUN_STORE: %s",
				     crun_store_strerror(rc));
		return rc;
	}
	store = crun_store_create(&so);
	if (!store) {
		crun__comm_set_error(comm, "cannot create a store client: %s", strerror(ENOMEM));
		return -ENOMEM;
	}
	rc = crun_store_connect(store);
	if (rc < 0) {
		crun__comm_set_error(comm, "cannot reach the store '%s:%d': %s",
				     so.host ? so.host : "127.0.0.1", so.port,
				     crun_store_errmsg(store));
		goto out_destroy_store;
	}
	rc = open_listener(comm, o->addr, crun_store_fd(store), sockbuf, &lfd, pub, sizeof(pub));
	if (rc < 0)
		goto out_destroy_store;

	snprintf(key[0], sizeof(key[0]), "comm/%lld/%u/addr/%d", (long long)o->round, instance,
		 c->rank);
	snprintf(key[1], sizeof(key[1]), "comm/%lld/%u/addr/%d", (long long)o->round, instance,
		 c->right);
	snprintf(key[2], sizeof(key[2]), "comm/%lld/%u/addr/%d", (long long)o->round, instance,
		 c->left);
	rc = crun_store_set_flags(store, key[0], pub, strlen(pub), CRUN_STORE_EPHEMERAL,
				  wait_ms(deadline));
	if (rc < 0) {
		crun__comm_set_error(comm, "cannot publish '%s' in the store: %s", key[0],
				     crun_store_errmsg(store));
		goto out_close_listener;
	}
	keys[0] = key[1];
	keys[1] = key[2];
	rc = crun_store_mget(store, keys, c->left == c->right ? 1 : 2, vals, wait_ms(deadline));
	if (rc < 0) {
		crun__comm_set_error(comm, "cannot find rank %d%s in the store within %lld ms: %s",
				     c->right, c->left == c->right ? "" : " or its left neighbour",
				     (long long)c->timeout_ms, crun_store_errmsg(store));
		goto out_close_listener;
	}
	snprintf(c->right_addr, sizeof(c->right_addr), "%.*s", (int)vals[0].len,
		 (const char *)vals[0].data);
	snprintf(c->left_addr, sizeof(c->left_addr), "%.*s",
		 (int)vals[c->left == c->right ? 0 : 1].len,
		 (const char *)vals[c->left == c->right ? 0 : 1].data);
	crun_store_buf_finish(&vals[0]);
	if (c->left != c->right)
		crun_store_buf_finish(&vals[1]);

	me = (struct hello){COMM_VERSION, (uint32_t)c->rank, (uint32_t)c->size, instance,
			    (uint64_t)o->round};
	hello_encode(mine, &me);
	rc = connect_peer(comm, c, sockbuf, deadline, &c->send_fd);
	if (rc < 0)
		goto out_close_listener;
	rc = io_full(c->send_fd, mine, HELLO_LEN, true, deadline);
	if (rc < 0) {
		crun__comm_set_error(comm, "cannot greet rank %d '%s': %s", c->right, c->right_addr,
				     strerror(-rc));
		goto out_close_listener;
	}
	want = me;
	want.rank = (uint32_t)c->left;
	rc = accept_left(comm, c, lfd, &want, mine, deadline, &c->recv_fd);
	if (rc < 0)
		goto out_close_listener;
	rc = io_full(c->send_fd, theirs, HELLO_LEN, false, deadline);
	if (rc == -ECONNRESET) {
		crun__comm_set_error(comm,
				     "rank %d '%s' closed the connection during setup "
				     "(see its log for why it refused this rank)",
				     c->right, c->right_addr);
		goto out_close_listener;
	}
	if (rc < 0) {
		crun__comm_set_error(comm, "no answer from rank %d '%s': %s", c->right,
				     c->right_addr, strerror(-rc));
		goto out_close_listener;
	}
	want.rank = (uint32_t)c->right;
	if (!hello_check(theirs, &want, why, sizeof(why))) {
		crun__comm_set_error(comm, "the peer at '%s' is not rank %d of this group: %s",
				     c->right_addr, c->right, why);
		rc = -EPROTO;
		goto out_close_listener;
	}
	rc = negotiate_shm(comm, c, !o->no_shm, deadline);

out_close_listener:
	close(lfd);
out_destroy_store:
	/* Drops the connection, and with it the ephemeral address key. */
	crun_store_destroy(store);
	return rc;
}

static void cpu_finish(struct crun__comm *comm)
{
	struct cpu *c = comm->priv;

	if (!c)
		return;
	if (c->send_fd >= 0)
		close(c->send_fd);
	if (c->recv_fd >= 0)
		close(c->recv_fd);
	if (c->sender) {
		struct sender *sd = c->sender;

		pthread_mutex_lock(&sd->mu);
		sd->stop = true;
		pthread_cond_signal(&sd->cv);
		pthread_mutex_unlock(&sd->mu);
		pthread_join(sd->thread, NULL);
		pthread_cond_destroy(&sd->cv);
		pthread_mutex_destroy(&sd->mu);
		close(sd->efd);
		free(sd);
	}
	ring_unmap(&c->out);
	ring_unmap(&c->in);
	free(c->rstart);
	free(c->stage);
	free(c->send);
	free(c->recv);
	free(c);
	comm->priv = NULL;
}

static void *sender_main(void *arg);

static int start_sender(struct crun__comm *comm, struct cpu *c)
{
	struct sender *sd = calloc(1, sizeof(*sd));
	sigset_t all, old;
	int rc;

	if (!sd) {
		crun__comm_set_error(comm, "cannot allocate the send thread: %s", strerror(ENOMEM));
		return -ENOMEM;
	}
	sd->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sd->efd < 0) {
		rc = -errno;
		crun__comm_set_error(comm, "cannot create an eventfd: %s", strerror(-rc));
		free(sd);
		return rc;
	}
	pthread_mutex_init(&sd->mu, NULL);
	pthread_cond_init(&sd->cv, NULL);
	/* Signals stay with the caller's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	c->sender = sd;
	rc = -pthread_create(&sd->thread, NULL, sender_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc < 0) {
		c->sender = NULL;
		crun__comm_set_error(comm, "cannot start the send thread: %s", strerror(-rc));
		pthread_cond_destroy(&sd->cv);
		pthread_mutex_destroy(&sd->mu);
		close(sd->efd);
		free(sd);
		return rc;
	}
	return 0;
}

static int cpu_init(struct crun__comm *comm, const struct crun__comm_opts *o)
{
	unsigned instance = instances++;
	struct cpu *c;
	size_t nseg;
	int rc;

	c = calloc(1, sizeof(*c));
	if (!c) {
		crun__comm_set_error(comm, "cannot allocate the communicator: %s",
				     strerror(ENOMEM));
		return -ENOMEM;
	}
	comm->priv = c;
	c->rank = o->rank;
	c->size = o->world_size;
	c->left = mod(c->rank - 1, c->size);
	c->right = mod(c->rank + 1, c->size);
	c->send_fd = c->recv_fd = -1;
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : CRUN__COMM_DEFAULT_TIMEOUT_MS;
	c->chunk = o->chunk_bytes ? o->chunk_bytes : DEFAULT_CHUNK;
	c->chunk = (c->chunk + 63) & ~(size_t)63;
	if (c->size == 1)
		return 0;

	nseg = 2 + 2 * (size_t)(c->size - 1); /* header, steps, padding */
	c->stage = aligned_alloc(64, c->chunk);
	c->send = calloc(nseg, sizeof(*c->send));
	c->recv = calloc(nseg, sizeof(*c->recv));
	c->rstart = calloc(nseg + 1, sizeof(*c->rstart));
	if (!c->stage || !c->send || !c->recv || !c->rstart) {
		crun__comm_set_error(comm, "cannot allocate the communicator: %s",
				     strerror(ENOMEM));
		rc = -ENOMEM;
		goto out_finish;
	}
	rc = connect_ring(comm, c, o, instance);
	if (rc < 0)
		goto out_finish;
	if (o->send_thread && (rc = start_sender(comm, c)) < 0)
		goto out_finish;
	return 0;

out_finish:
	cpu_finish(comm);
	return rc;
}

/* ------------------------------------------------------------------ */
/* The plan runner                                                     */

/* dst[i] = a[i] + b[i]; dst may be a. Written with vector types so that
 * it is vectorized at -O2 whatever the alias analysis concludes. */
static void reduce_f32(float *dst, const float *a, const float *b, size_t n)
{
	typedef float v8 __attribute__((vector_size(32)));
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		v8 x, y;

		memcpy(&x, a + i, sizeof(x));
		memcpy(&y, b + i, sizeof(y));
		x += y;
		memcpy(dst + i, &x, sizeof(x));
	}
	for (; i < n; i++)
		dst[i] = a[i] + b[i];
}

/* Starts a plan: resets the segment lists and queues the header on each
 * link this rank uses. */
static void plan_begin(struct cpu *c, enum op op, size_t total, int root, bool has_send,
		       bool has_recv)
{
	c->ns = c->nr = 0;
	c->op = op;
	c->total = total;
	c->root = root;
	crun__put_le32(c->hdr_out, HDR_MAGIC);
	crun__put_le32(c->hdr_out + 4, (uint32_t)op);
	crun__put_le32(c->hdr_out + 8, c->seq);
	crun__put_le32(c->hdr_out + 12, (uint32_t)root);
	crun__put_le64(c->hdr_out + 16, total);
	c->seq++;
	if (has_send)
		c->send[c->ns++] = (struct sseg){c->hdr_out, HDR_LEN, -1};
	if (has_recv)
		c->recv[c->nr++] = (struct rseg){c->hdr_in, NULL, HDR_LEN};
}

static void add_send(struct cpu *c, const void *p, size_t len, int gate)
{
	c->send[c->ns++] = (struct sseg){p, len, gate};
}

/* Returns the index the new received segment got, for gating. */
static int add_recv(struct cpu *c, void *dst, const float *add, size_t len)
{
	c->recv[c->nr] = (struct rseg){dst, add, len};
	return (int)c->nr++;
}

static int fail(struct crun__comm *comm, struct cpu *c, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Records the failure and shuts both connections down, so that the
 * neighbours notice at once and the failure runs around the ring instead
 * of every rank waiting out its timeout. */
static int fail(struct crun__comm *comm, struct cpu *c, int rc, const char *fmt, ...)
{
	char msg[sizeof(comm->errmsg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	crun__comm_set_error(comm, "%s", msg);
	shutdown(c->send_fd, SHUT_RDWR);
	shutdown(c->recv_fd, SHUT_RDWR);
	return rc;
}

static void describe(char *out, size_t outlen, const char *name, uint32_t seq, uint64_t bytes,
		     int root)
{
	int n = snprintf(out, outlen, "%s (call %u, %llu bytes", name, seq,
			 (unsigned long long)bytes);

	if (n > 0 && (size_t)n < outlen)
		snprintf(out + n, outlen - (size_t)n, root >= 0 ? ", root %d)" : ")", root);
}

static int check_header(struct crun__comm *comm, struct cpu *c)
{
	char theirs[96], mine[96];
	const uint8_t *h = c->hdr_in;
	uint32_t op = crun__get_le32(h + 4), seq = crun__get_le32(h + 8);
	int32_t root = (int32_t)crun__get_le32(h + 12);
	uint64_t total = crun__get_le64(h + 16);
	const char *name = op > 0 && op < OP_MAX ? op_names[op] : "an unknown collective";

	if (crun__get_le32(h) != HDR_MAGIC)
		return fail(comm, c, -EPROTO,
			    "rank %d (%s) sent garbage instead of a collective header during %s",
			    c->left, c->left_addr, op_names[c->op]);
	if (!memcmp(h, c->hdr_out, HDR_LEN))
		return 0;
	describe(theirs, sizeof(theirs), name, seq, total, op == OP_BROADCAST ? root : -1);
	describe(mine, sizeof(mine), op_names[c->op], c->seq - 1, c->total, c->root);
	return fail(comm, c, -EPROTO, "rank %d (%s) called %s while this rank called %s", c->left,
		    c->left_addr, theirs, mine);
}

/* Bytes of send segment si that may leave now. */
static size_t available(const struct cpu *c, size_t si, uint64_t recv_pos)
{
	int g = c->send[si].gate;
	uint64_t start;

	if (g < 0)
		return c->send[si].len;
	start = c->rstart[g];
	if (recv_pos <= start)
		return 0;
	return recv_pos - start >= c->send[si].len ? c->send[si].len : (size_t)(recv_pos - start);
}

/* Pads a plan's traffic on each ring to a multiple of 64 bytes, so that
 * every collective starts cache-aligned in the ring and floats never
 * straddle its end. Both ends of a link count the same bytes. */
static void plan_end(struct cpu *c)
{
	size_t tot = 0, pad;

	if (c->out.ring && c->ns) {
		for (size_t i = 0; i < c->ns; i++)
			tot += c->send[i].len;
		pad = (size_t)(-(c->out.pos + tot)) & 63;
		if (pad)
			add_send(c, zeros, pad, -1);
	}
	tot = 0;
	if (c->in.ring && c->nr) {
		for (size_t i = 0; i < c->nr; i++)
			tot += c->recv[i].len;
		pad = (size_t)(-(c->in.pos + tot)) & 63;
		if (pad)
			add_recv(c, c->pad_in, NULL, pad);
	}
	c->rstart[0] = 0;
	for (size_t i = 0; i < c->nr; i++)
		c->rstart[i + 1] = c->rstart[i] + c->recv[i].len;
	c->sbytes = 0;
	for (size_t i = 0; i < c->ns; i++)
		c->sbytes += c->send[i].len;
}

/* Rings the doorbell of the other end of a ring if it sleeps. The fence
 * orders the head/tail store before the flag load; the sleeper stores
 * the flag before it loads head/tail again (Dekker), so one of the two
 * always sees the other. */
static int doorbell(int fd, _Atomic uint32_t *waiting)
{
	uint8_t b = 1;

	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(waiting, memory_order_relaxed) || !atomic_exchange(waiting, 0))
		return 0;
	if (send(fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
		return 0;
	/* EAGAIN: unread doorbells fill the buffer; the peer wakes anyway. */
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
}

/* Puts up to n bytes on the outgoing link. Returns the bytes taken (0:
 * no room now) or a negative errno. */
static ssize_t out_put(struct cpu *c, const uint8_t *p, size_t n)
{
	struct link *l = &c->out;
	size_t room, off;
	ssize_t w;
	int rc;

	if (!l->ring) {
		w = send(c->send_fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w >= 0)
			return w;
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	}
	room = l->cap -
	       (size_t)(l->pos - atomic_load_explicit(&l->ring->tail, memory_order_acquire));
	off = (size_t)(l->pos % l->cap);
	if (n > room)
		n = room;
	if (n > l->cap - off)
		n = l->cap - off;
	if (!n)
		return 0;
	memcpy(l->data + off, p, n);
	l->pos += n;
	atomic_store_explicit(&l->ring->head, l->pos, memory_order_release);
	rc = doorbell(c->send_fd, &l->ring->cons_wait);
	return rc < 0 ? rc : (ssize_t)n;
}

/* Takes incoming bytes of segment r into place (reducing where r says
 * so), advancing *roff by the bytes finished. *fill: bytes of a partial
 * float waiting in the stage (socket only). Returns 1 when something
 * moved, 0 when nothing was there, -ECONNRESET when the peer closed,
 * else a negative errno. */
static int in_take(struct cpu *c, const struct rseg *r, size_t *roff, size_t *fill)
{
	struct link *l = &c->in;
	size_t want = r->len - *roff;
	ssize_t got;
	int rc;

	if (want > c->chunk)
		want = c->chunk;
	if (l->ring) {
		size_t have, off = (size_t)(l->pos % l->cap);

		have = (size_t)(atomic_load_explicit(&l->ring->head, memory_order_acquire) -
				l->pos);
		if (want > have)
			want = have;
		if (want > l->cap - off)
			want = l->cap - off;
		if (r->add)
			want &= ~(size_t)3;
		if (!want)
			return 0;
		if (r->add)
			reduce_f32((float *)(r->dst + *roff), r->add + *roff / 4,
				   (const float *)(l->data + off), want / 4);
		else
			memcpy(r->dst + *roff, l->data + off, want);
		*roff += want;
		l->pos += want;
		atomic_store_explicit(&l->ring->tail, l->pos, memory_order_release);
		rc = doorbell(c->recv_fd, &l->ring->prod_wait);
		return rc < 0 ? rc : 1;
	}
	if (r->add) {
		size_t whole;

		want -= *fill < want ? *fill : want;
		if (want > c->chunk - *fill)
			want = c->chunk - *fill;
		got = recv(c->recv_fd, c->stage + *fill, want, MSG_DONTWAIT);
		if (got <= 0)
			goto out_nothing;
		*fill += (size_t)got;
		whole = *fill & ~(size_t)3;
		reduce_f32((float *)(r->dst + *roff), r->add + *roff / 4, (const float *)c->stage,
			   whole / 4);
		*roff += whole;
		*fill -= whole;
		if (*fill)
			memmove(c->stage, c->stage + whole, *fill);
		return 1;
	}
	got = recv(c->recv_fd, r->dst + *roff, want, MSG_DONTWAIT);
	if (got > 0) {
		*roff += (size_t)got;
		return 1;
	}
out_nothing:
	if (got == 0)
		return -ECONNRESET;
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
}

/* Reads the doorbell bytes waiting on fd. -ECONNRESET when the peer
 * closed the connection. */
static int drain(int fd)
{
	uint8_t buf[256];

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0)
			continue;
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	}
}

static int send_failed(struct crun__comm *comm, struct cpu *c, int err)
{
	const char *what = op_names[c->op];

	if (err == ECONNRESET || err == EPIPE || err == 0)
		return fail(comm, c, -ECONNRESET, "rank %d (%s) closed the connection during %s",
			    c->right, c->right_addr, what);
	return fail(comm, c, -err, "lost the connection to rank %d (%s) during %s: %s", c->right,
		    c->right_addr, what, strerror(err));
}

static int recv_failed(struct crun__comm *comm, struct cpu *c, int err)
{
	const char *what = op_names[c->op];

	if (err == ECONNRESET)
		return fail(comm, c, -ECONNRESET, "rank %d (%s) closed the connection during %s",
			    c->left, c->left_addr, what);
	return fail(comm, c, -err, "lost the connection to rank %d (%s) during %s: %s", c->left,
		    c->left_addr, what, strerror(err));
}

/* Before sleeping on a ring: raise the flag, then look once more. True
 * when the other end moved meanwhile (do not sleep). */
static bool ring_moved(struct link *l, bool in, size_t need)
{
	_Atomic uint32_t *flag = in ? &l->ring->cons_wait : &l->ring->prod_wait;
	uint64_t now;

	atomic_store(flag, 1);
	if (in) {
		now = atomic_load(&l->ring->head);
		if (now - l->pos >= need)
			goto out_moved;
	} else {
		now = atomic_load(&l->ring->tail);
		if (l->cap - (size_t)(l->pos - now) > 0)
			goto out_moved;
	}
	return false;
out_moved:
	atomic_store(flag, 0);
	return true;
}

/* One attempt to move the send side: 1 when bytes left, 0 when blocked
 * (*need_room: by the link; else by the gate), or a negative errno.
 * *si, *soff: the segment and offset reached; done when *si == ns. */
static int send_step(struct cpu *c, size_t *si, size_t *soff, uint64_t recv_pos, bool *need_room)
{
	size_t avail, len;
	ssize_t w;

	avail = available(c, *si, recv_pos);
	if (avail <= *soff) {
		*need_room = false;
		return 0;
	}
	len = avail - *soff < c->chunk ? avail - *soff : c->chunk;
	w = out_put(c, c->send[*si].p + *soff, len);
	if (w > 0) {
		*soff += (size_t)w;
		return 1;
	}
	*need_room = true;
	return (int)w;
}

static void skip_done(const struct cpu *c, size_t *si, size_t *soff)
{
	while (*si < c->ns && *soff == c->send[*si].len) {
		(*si)++;
		*soff = 0;
	}
}

/* Sleeps until the outgoing link has room (or its peer's doorbell
 * rings). 0, -ETIMEDOUT after timeout_ms without progress since
 * last_move, or -ECONNRESET when the right neighbour closed. */
static int wait_room(struct cpu *c, uint64_t last_move)
{
	int64_t left = (int64_t)(last_move + (uint64_t)c->timeout_ms) - (int64_t)crun__now_ms();
	struct pollfd p = {c->send_fd, (short)((c->out.ring ? POLLIN : POLLOUT) | POLLRDHUP), 0};
	int n;

	if (c->out.ring && ring_moved(&c->out, false, 0))
		return 0;
	if (left <= 0)
		return -ETIMEDOUT;
	n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	if (n == 0)
		return 0;
	if (c->out.ring && (p.revents & POLLIN) && drain(c->send_fd) < 0)
		return -ECONNRESET;
	if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) && !(p.revents & POLLOUT && !c->out.ring))
		return -ECONNRESET;
	return 0;
}

/* The send thread's half of a plan. 0 or a positive errno. */
static int sender_run(struct cpu *c)
{
	struct sender *s = c->sender;
	size_t si = 0, soff = 0;
	uint64_t last_move = crun__now_ms();
	int rc;

	for (;;) {
		uint64_t rp = atomic_load_explicit(&s->recv_pos, memory_order_acquire);
		bool need_room = false;

		skip_done(c, &si, &soff);
		if (si == c->ns)
			return 0;
		if (atomic_load(&s->abort))
			return ECANCELED;
		rc = send_step(c, &si, &soff, rp, &need_room);
		if (rc > 0) {
			last_move = crun__now_ms();
			continue;
		}
		if (rc < 0)
			return -rc;
		if (need_room) {
			rc = wait_room(c, last_move);
			if (rc < 0)
				return -rc;
			continue;
		}
		/* Gated: sleep until the receive side moves. The caller
		 * stores recv_pos, then looks at waiting (both seq_cst), and
		 * signals under mu, so no wake-up is lost. */
		pthread_mutex_lock(&s->mu);
		atomic_store(&s->waiting, true);
		while (!atomic_load(&s->abort) && atomic_load(&s->recv_pos) == rp)
			pthread_cond_wait(&s->cv, &s->mu);
		atomic_store(&s->waiting, false);
		pthread_mutex_unlock(&s->mu);
		last_move = crun__now_ms();
	}
}

static void *sender_main(void *arg)
{
	struct cpu *c = arg;
	struct sender *s = c->sender;
	uint64_t one = 1;
	int err;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->job && !s->stop)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->stop)
			break;
		pthread_mutex_unlock(&s->mu);
		err = sender_run(c);
		pthread_mutex_lock(&s->mu);
		s->job = false;
		s->err = err;
		if (write(s->efd, &one, sizeof(one)) < 0)
			s->err = s->err ? s->err : errno;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void sender_publish(struct sender *s, uint64_t recv_pos)
{
	atomic_store(&s->recv_pos, recv_pos);
	if (atomic_load(&s->waiting)) {
		pthread_mutex_lock(&s->mu);
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
}

/* Waits for the send thread to end its job; it always does, since each
 * of its waits ends on the timeout, a socket event or abort. Returns its
 * result (0 or a positive errno). */
static int sender_join(struct sender *s)
{
	struct pollfd p = {s->efd, POLLIN, 0};
	uint64_t v;
	int err;

	while (read(s->efd, &v, sizeof(v)) != sizeof(v))
		poll(&p, 1, 1000);
	pthread_mutex_lock(&s->mu);
	err = s->err;
	pthread_mutex_unlock(&s->mu);
	return err;
}

static int run_plan(struct crun__comm *comm, struct cpu *c)
{
	const char *what = op_names[c->op];
	struct sender *s = NULL;
	size_t si = 0, soff = 0, ri = 0, roff = 0, fill = 0;
	uint64_t last_move = crun__now_ms();
	int rc = 0, send_err = -1; /* >= 0: the send side failed (errno, 0: closed) */
	bool left_closed = false;  /* its ring may still hold data */
	bool sender_done = false;
	uint64_t slept;

	plan_end(c);
	if (c->sender && c->sbytes >= THREAD_MIN_BYTES) {
		s = c->sender;
		atomic_store(&s->recv_pos, 0);
		atomic_store(&s->abort, false);
		pthread_mutex_lock(&s->mu);
		s->job = true;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		si = c->ns; /* the send side is the thread's */
	}
	for (;;) {
		struct pollfd pfd[3];
		bool moved = false, want_out = false, want_in = false;
		int np = 0, n, out_idx = -1, in_idx = -1, efd_idx = -1;

		skip_done(c, &si, &soff);
		while (ri < c->nr && roff == c->recv[ri].len) {
			if (c->recv[ri].dst == c->hdr_in && (rc = check_header(comm, c)) < 0)
				goto out_rc;
			ri++;
			roff = 0;
		}
		if (si == c->ns && ri == c->nr && (!s || sender_done)) {
			if (send_err < 0)
				return 0;
			rc = send_failed(comm, c, send_err);
			goto out_rc;
		}

		if (si < c->ns && send_err < 0) {
			rc = send_step(c, &si, &soff, c->rstart[ri] + roff, &want_out);
			if (rc > 0)
				moved = true;
			else if (rc < 0)
				send_err = -rc;
			want_out = want_out && rc == 0;
		}
		if (ri < c->nr) {
			rc = in_take(c, &c->recv[ri], &roff, &fill);
			if (rc > 0) {
				moved = true;
				if (s)
					sender_publish(s, c->rstart[ri] + roff);
			} else if (rc == 0 && !left_closed) {
				want_in = true;
			} else {
				rc = recv_failed(comm, c, rc < 0 ? -rc : ECONNRESET);
				goto out_rc;
			}
		}
		if (moved) {
			last_move = crun__now_ms();
			continue;
		}
		/* The right neighbour is gone: what already arrived from the
		 * left may tell more (a header naming another collective), so
		 * it is read first, and the loss reported once it runs dry. */
		if (send_err >= 0) {
			rc = send_failed(comm, c, send_err);
			goto out_rc;
		}
		if (want_in && c->in.ring &&
		    ring_moved(&c->in, true, c->recv[ri].add ? 4 - fill : 1))
			continue;
		if (want_out && c->out.ring && ring_moved(&c->out, false, 0))
			continue;

		if (si < c->ns) {
			/* POLLRDHUP: the right neighbour went away while it
			 * still had data coming from this rank. On a ring,
			 * POLLIN is its doorbell. */
			short ev = want_out ? (c->out.ring ? POLLIN : POLLOUT) : 0;

			out_idx = np;
			pfd[np++] = (struct pollfd){c->send_fd, (short)(ev | POLLRDHUP), 0};
		}
		if (want_in) {
			in_idx = np;
			pfd[np++] = (struct pollfd){c->recv_fd, POLLIN, 0};
		}
		if (s && !sender_done) {
			efd_idx = np;
			pfd[np++] = (struct pollfd){s->efd, POLLIN, 0};
		}
		{
			int64_t left = (int64_t)(last_move + (uint64_t)c->timeout_ms) -
				       (int64_t)crun__now_ms();

			/* With a send thread, it times out its own waits. */
			if (left <= 0 && (want_in || !s)) {
				if (want_in)
					rc = fail(comm, c, -ETIMEDOUT,
						  "rank %d (%s) sent nothing for %lld ms during %s",
						  c->left, c->left_addr, (long long)c->timeout_ms,
						  what);
				else
					rc = fail(comm, c, -ETIMEDOUT,
						  "rank %d (%s) took nothing for %lld ms during %s",
						  c->right, c->right_addr, (long long)c->timeout_ms,
						  what);
				goto out_rc;
			}
			if (left <= 0)
				left = c->timeout_ms;
			slept = crun__now_ns();
			n = poll(pfd, (nfds_t)np, left > INT32_MAX ? INT32_MAX : (int)left);
			comm->blocked_ns += crun__now_ns() - slept;
		}
		if (n < 0 && errno != EINTR) {
			rc = fail(comm, c, -errno, "poll failed during %s: %s", what,
				  strerror(errno));
			goto out_rc;
		}
		if (n <= 0)
			continue;
		/* A closed connection ends the wait but not the reading: the
		 * ring may hold what the left neighbour wrote before it left
		 * (all it had to send, or a header that explains why). */
		if (in_idx >= 0 && c->in.ring && (pfd[in_idx].revents & (POLLIN | POLLHUP)) &&
		    (rc = drain(c->recv_fd)) < 0) {
			if (rc != -ECONNRESET) {
				rc = recv_failed(comm, c, -rc);
				goto out_rc;
			}
			left_closed = true;
		}
		if (out_idx >= 0) {
			short re = pfd[out_idx].revents;

			if (c->out.ring && (re & POLLIN) && drain(c->send_fd) < 0)
				send_err = 0;
			if ((re & (POLLRDHUP | POLLHUP | POLLERR)) &&
			    !(re & POLLOUT && want_out && !c->out.ring))
				send_err = 0;
		}
		if (efd_idx >= 0 && (pfd[efd_idx].revents & POLLIN)) {
			int err = sender_join(s);

			sender_done = true;
			if (err == ETIMEDOUT) {
				rc = fail(comm, c, -ETIMEDOUT,
					  "rank %d (%s) took nothing for %lld ms during %s",
					  c->right, c->right_addr, (long long)c->timeout_ms, what);
				goto out_rc;
			}
			if (err)
				send_err = err == ECONNRESET || err == EPIPE ? 0 : err;
		}
	}

out_rc:
	if (s && !sender_done) {
		/* fail() shut the sockets down, which wakes the thread in
		 * poll(); abort wakes it on the condition variable. */
		pthread_mutex_lock(&s->mu);
		atomic_store(&s->abort, true);
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		sender_join(s);
	}
	return rc;
}

/* ------------------------------------------------------------------ */
/* Collectives                                                         */

static void split(size_t count, int n, int j, size_t *off, size_t *len)
{
	size_t base = count / (size_t)n, rem = count % (size_t)n, uj = (size_t)j;

	*off = uj * base + (uj < rem ? uj : rem);
	*len = base + (uj < rem ? 1 : 0);
}

static int cpu_allreduce_f32(struct crun__comm *comm, float *buf, size_t count)
{
	struct cpu *c = comm->priv;
	int n = c->size, r = c->rank, prev = -1;

	if (n == 1)
		return 0;
	plan_begin(c, OP_ALLREDUCE, count * sizeof(float), -1, true, true);
	/* Reduce-scatter: step t sends segment r-t (from step 1 on: the
	 * partial sum just received) and adds segment r-t-1; after n-1
	 * steps this rank holds the full sum of segment r+1. */
	for (int t = 0; t < n - 1; t++) {
		size_t so, sl, ro, rl;

		split(count, n, mod(r - t, n), &so, &sl);
		split(count, n, mod(r - t - 1, n), &ro, &rl);
		add_send(c, buf + so, sl * sizeof(float), prev);
		prev = add_recv(c, buf + ro, buf + ro, rl * sizeof(float));
	}
	/* All-gather: pass the finished segments around the ring. */
	for (int t = 0; t < n - 1; t++) {
		size_t so, sl, ro, rl;

		split(count, n, mod(r + 1 - t, n), &so, &sl);
		split(count, n, mod(r - t, n), &ro, &rl);
		add_send(c, buf + so, sl * sizeof(float), prev);
		prev = add_recv(c, buf + ro, NULL, rl * sizeof(float));
	}
	return run_plan(comm, c);
}

static int cpu_reduce_scatter_f32(struct crun__comm *comm, float *in, float *out, size_t count)
{
	struct cpu *c = comm->priv;
	int n = c->size, r = c->rank, prev = -1;

	if (n == 1) {
		if (out != in)
			memmove(out, in, count * sizeof(float));
		return 0;
	}
	plan_begin(c, OP_REDUCE_SCATTER, count * sizeof(float), -1, true, true);
	/* As in all-reduce, shifted by one so that segment r is the one
	 * completed here; the last step adds straight into out. */
	for (int t = 0; t < n - 1; t++) {
		float *s = in + (size_t)mod(r - t - 1, n) * count;
		float *d = in + (size_t)mod(r - t - 2, n) * count;

		add_send(c, s, count * sizeof(float), prev);
		prev = add_recv(c, t == n - 2 ? out : d, d, count * sizeof(float));
	}
	return run_plan(comm, c);
}

/* Every rank's bytes [in, in+bytes) into out, rank order. */
static int allgather_bytes(struct crun__comm *comm, enum op op, const void *in, void *out,
			   size_t bytes)
{
	struct cpu *c = comm->priv;
	uint8_t *o = out;
	int n = c->size, r = c->rank, prev = -1;

	if (bytes && o + (size_t)r * bytes != in)
		memcpy(o + (size_t)r * bytes, in, bytes);
	if (n == 1)
		return 0;
	plan_begin(c, op, bytes, -1, true, true);
	for (int t = 0; t < n - 1; t++) {
		add_send(c, o + (size_t)mod(r - t, n) * bytes, bytes, prev);
		prev = add_recv(c, o + (size_t)mod(r - t - 1, n) * bytes, NULL, bytes);
	}
	return run_plan(comm, c);
}

static int cpu_allgather_f32(struct crun__comm *comm, const float *in, float *out, size_t count)
{
	return allgather_bytes(comm, OP_ALLGATHER, in, out, count * sizeof(float));
}

static int cpu_broadcast(struct crun__comm *comm, void *buf, size_t bytes, int root)
{
	struct cpu *c = comm->priv;
	bool has_recv, has_send;
	int gate = -1;

	if (c->size == 1)
		return 0;
	/* A chain root -> root+1 -> ... -> root-1, forwarded as it arrives. */
	has_recv = c->rank != root;
	has_send = c->right != root;
	plan_begin(c, OP_BROADCAST, bytes, root, has_send, has_recv);
	if (has_recv)
		gate = add_recv(c, buf, NULL, bytes);
	if (has_send)
		add_send(c, buf, bytes, gate);
	return run_plan(comm, c);
}

static int cpu_barrier(struct crun__comm *comm)
{
	struct cpu *c = comm->priv;
	uint8_t mark = 1, *all;
	int rc;

	if (c->size == 1)
		return 0;
	/* An all-gather of one byte: nobody gets every byte before every
	 * rank has sent its own, in n-1 steps. */
	all = malloc((size_t)c->size);
	if (!all) {
		crun__comm_set_error(comm, "barrier: %s", strerror(ENOMEM));
		return -ENOMEM;
	}
	rc = allgather_bytes(comm, OP_BARRIER, &mark, all, 1);
	free(all);
	return rc;
}

static int cpu_allreduce_f64(struct crun__comm *comm, double *buf, size_t count)
{
	struct cpu *c = comm->priv;
	double *all;
	int rc;

	if (c->size == 1)
		return 0;
	if (count == 0)
		return allgather_bytes(comm, OP_ALLREDUCE_F64, buf, buf, 0);
	all = malloc((size_t)c->size * count * sizeof(double));
	if (!all) {
		crun__comm_set_error(comm, "all-reduce (f64) of %zu values: %s", count,
				     strerror(ENOMEM));
		return -ENOMEM;
	}
	rc = allgather_bytes(comm, OP_ALLREDUCE_F64, buf, all, count * sizeof(double));
	if (rc == 0) {
		for (size_t i = 0; i < count; i++) {
			double s = all[i];

			for (int j = 1; j < c->size; j++)
				s += all[(size_t)j * count + i];
			buf[i] = s;
		}
	}
	free(all);
	return rc;
}

const struct crun__comm_ops crun__comm_cpu_ops = {
	.name = "cpu",
	.init = cpu_init,
	.finish = cpu_finish,
	.allreduce_f32 = cpu_allreduce_f32,
	.reduce_scatter_f32 = cpu_reduce_scatter_f32,
	.allgather_f32 = cpu_allgather_f32,
	.broadcast = cpu_broadcast,
	.barrier = cpu_barrier,
	.allreduce_f64 = cpu_allreduce_f64,
	.counts_blocked = true,
};

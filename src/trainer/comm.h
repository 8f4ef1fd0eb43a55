/* Collective communication for crun-train, behind one interface with
 * several backends: "cpu" (ring collectives between the workers over TCP,
 * or shared memory between workers of one host, peers found through the
 * job's store) and, in CUDA builds, "nccl" (comm_nccl.h). Buffers are host
 * memory for the cpu backend. A communicator is used by one thread at a time.
 *
 * Every rank of the group calls the same collectives in the same order
 * with the same sizes (as with NCCL and MPI). Every call returns 0 or a
 * negative errno; on failure crun__comm_errmsg() says what went wrong in one
 * line ("rank 2 (10.0.0.3:41234) closed the connection during
 * all-reduce"), and the communicator is unusable afterwards: the trainer
 * exits non-zero so that crun restarts the group. A peer that dies or
 * stalls mid-collective makes every other rank fail within the timeout —
 * never a hang. */
#ifndef CRUN_TRAINER_COMM_H
#define CRUN_TRAINER_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest wait for a peer when crun__comm_opts.timeout_ms is 0. */
#define CRUN__COMM_DEFAULT_TIMEOUT_MS 300000

struct crun__comm;

struct crun__comm_opts {
	const char *backend; /* "cpu" (default) */
	int rank;	     /* RANK */
	int world_size;	     /* WORLD_SIZE */
	int local_rank;	     /* LOCAL_RANK */
	/* Store for finding peers: libcrun's environment (CRUN_STORE,
	 * CRUN_RUN_ID, CRUN_TOKEN); keys are scoped by round (CRUN_ROUND)
	 * so a restarted attempt never reads an earlier attempt's keys. */
	int64_t timeout_ms; /* longest wait for a peer, in connecting and in
			     * each collective: a call fails when no byte
			     * moved for this long; 0:
			     * CRUN__COMM_DEFAULT_TIMEOUT_MS */
	size_t chunk_bytes; /* pipelining chunk for ring steps; 0: 1 MiB */
	/* Zero means "default" for the fields below too. */
	int64_t round;	      /* CRUN_ROUND: scopes the store keys */
	const char *addr;     /* CRUN_COMM_ADDR: address this rank listens on
			       * and publishes; NULL: listen on every address
			       * and publish the one that reaches the store */
	size_t sockbuf_bytes; /* SO_SNDBUF/SO_RCVBUF; 0: 4 MiB */
	bool no_shm;	      /* CRUN_COMM_SHM=0: TCP even between ranks of
			       * one host (default: shared memory there) */
	bool send_thread;     /* CRUN_COMM_SEND_THREAD=1: a second thread
			       * sends while the caller receives and reduces */
	/* Storage for addr when opts_from_env found it from an interface
	 * name (CRUN_COMM_IFNAME, else GLOO_SOCKET_IFNAME, as gloo). */
	char addr_storage[64];
};

/* Fills opts from the environment: RANK, WORLD_SIZE, LOCAL_RANK (all
 * absent: a group of one), CRUN_ROUND, CRUN_COMM_BACKEND,
 * CRUN_COMM_TIMEOUT (a duration: "300", "2s", "500ms"), CRUN_COMM_CHUNK,
 * CRUN_COMM_SOCKBUF (sizes: "256K", "4M"), CRUN_COMM_ADDR, CRUN_COMM_SHM
 * and CRUN_COMM_SEND_THREAD (0 or 1); defaults and meanings in
 * common/env.c's table. Strings point into the environment. 0, or
 * -EINVAL with the variable and the reason in err. */
int crun__comm_opts_from_env(struct crun__comm_opts *opts, char *err, size_t errlen);

/* Connects to every peer it needs (for the ring: both neighbours).
 * world_size 1 needs no store and no sockets. NULL on failure, with the
 * reason in err.
 *
 * cpu backend: each rank listens on an ephemeral TCP port, publishes
 * "host:port" in the store under comm/<round>/<k>/addr/<rank> (k counts
 * the communicators this process created before, so every rank must
 * create them in the same order; the key is ephemeral and disappears when
 * create returns), connects to rank+1 and accepts rank-1. Both ends of a
 * connection check a hello (magic, version, rank, world size, round, k),
 * so a peer of another round or group is refused. Then each link tries
 * shared memory: the receiving rank makes a 2 MiB ring of anonymous memory
 * and the sending rank maps it if it can (same host and PID namespace;
 * comm_shm.h says how), so nothing is ever created in /dev/shm and the
 * memory goes with the last rank that maps it, however the ranks die;
 * links that cannot keep TCP. Floats travel in the host's byte order:
 * every node of a job must share it. */
struct crun__comm *crun__comm_create(const struct crun__comm_opts *opts, char *err, size_t errlen);
void crun__comm_destroy(struct crun__comm *comm);

int crun__comm_rank(const struct crun__comm *comm);
int crun__comm_size(const struct crun__comm *comm);
/* The first failure, in one line ("" when none). After a failure every
 * later collective returns -ENOTCONN at once and the message stays. */
const char *crun__comm_errmsg(const struct crun__comm *comm);
/* Name of the backend in use ("cpu"). */
const char *crun__comm_backend(const struct crun__comm *comm);
/* Time, in ns, that the callers of comm's collectives spent waiting for
 * their peers in them since it was created. The cpu backend counts the
 * time its collectives slept with no data to take and no room to send
 * (two clock reads per sleep): a rank that arrives late at a collective
 * finds its data there and waits little, its peers waited for it; a
 * rank that is slow inside one (descheduled, stopped while it reduces)
 * counts that time as its own. The nccl backend's collectives only queue
 * the work on a stream, so for it this is the whole time in the calls,
 * the time to queue, and the waiting happens where the device
 * synchronises. */
uint64_t crun__comm_wait_ns(const struct crun__comm *comm);

/* Collectives. The cpu backend runs rings: all-reduce is a
 * reduce-scatter then an all-gather (2(n-1) steps), each step pipelined
 * in chunks. Results are bitwise the same on every rank and in every run
 * with the same world size (the order of additions is fixed by the
 * ring); they may differ in the last bits between world sizes. Each call
 * starts with a small header on every link, so two ranks that call
 * different collectives (or sizes) fail with -EPROTO and a message
 * instead of exchanging garbage. */

/* Sum of buf over ranks, in place, on every rank. */
int crun__comm_allreduce_f32(struct crun__comm *comm, float *buf, size_t count);

/* in holds size*count floats; out (count floats) receives this rank's
 * slice [rank*count, (rank+1)*count) of the sum over ranks. in may be
 * modified (used as scratch). */
int crun__comm_reduce_scatter_f32(struct crun__comm *comm, float *in, float *out, size_t count);

/* in holds count floats; out (size*count floats) receives every rank's in,
 * rank order. in may alias out + rank*count. */
int crun__comm_allgather_f32(struct crun__comm *comm, const float *in, float *out, size_t count);

/* Copies bytes from root's buf to every rank's buf (a pipelined chain
 * root, root+1, ... on the ring). */
int crun__comm_broadcast(struct crun__comm *comm, void *buf, size_t bytes, int root);

/* Returns once every rank has entered the barrier. */
int crun__comm_barrier(struct crun__comm *comm);

/* Sum of count doubles over ranks (losses, norms), in place: gathers
 * every rank's values and adds them in rank order, so it is the same on
 * every rank; meant for small counts (it holds world_size*count doubles). */
int crun__comm_allreduce_f64(struct crun__comm *comm, double *buf, size_t count);

#endif

/* What a comm backend provides to comm.c (private to src/trainer).
 *
 * comm.c owns struct crun__comm: it checks arguments, refuses calls after
 * a failure and keeps the error message; a backend only moves data. Every
 * op returns 0 or a negative errno and, on failure, has described it with
 * crun__comm_set_error(). Sizes given to a backend are already validated:
 * buffers are non-NULL when a count is non-zero, root is in range, and
 * size*count does not overflow. */
#ifndef CRUN_TRAINER_COMM_BACKEND_H
#define CRUN_TRAINER_COMM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "trainer/comm.h"

struct crun__comm_ops {
	const char *name;
	/* Sets comm->priv; may call crun__comm_set_error on failure. */
	int (*init)(struct crun__comm *comm, const struct crun__comm_opts *opts);
	void (*finish)(struct crun__comm *comm);
	int (*allreduce_f32)(struct crun__comm *comm, float *buf, size_t count);
	int (*reduce_scatter_f32)(struct crun__comm *comm, float *in, float *out, size_t count);
	int (*allgather_f32)(struct crun__comm *comm, const float *in, float *out, size_t count);
	int (*broadcast)(struct crun__comm *comm, void *buf, size_t bytes, int root);
	int (*barrier)(struct crun__comm *comm);
	int (*allreduce_f64)(struct crun__comm *comm, double *buf, size_t count);
	/* The backend adds to comm->blocked_ns every sleep of the caller's
	 * thread in a collective, waiting for peers (else comm.c counts the
	 * whole time in the calls). */
	bool counts_blocked;
};

struct crun__comm {
	const struct crun__comm_ops *ops;
	int rank;
	int size;
	bool failed;
	uint64_t entered_ns; /* when the collective in progress began */
	uint64_t inside_ns;  /* time in the collectives */
	uint64_t blocked_ns; /* of it, asleep waiting for peers (counts_blocked) */
	char errmsg[512];
	void *priv; /* the backend's state */
};

extern const struct crun__comm_ops crun__comm_cpu_ops;
#ifdef CRUN_HAVE_NCCL
extern const struct crun__comm_ops crun__comm_nccl_ops;
#endif

/* Records the failure message (the first one wins). */
void crun__comm_set_error(struct crun__comm *comm, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif

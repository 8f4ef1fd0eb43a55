/* What a comm backend provides to comm.c (private to src/trainer).
 *
 * comm.c owns struct crun_comm: it checks arguments, refuses calls after
 * a failure and keeps the error message; a backend only moves data. Every
 * op returns 0 or a negative errno and, on failure, has described it with
 * crun_comm_set_error(). Sizes given to a backend are already validated:
 * buffers are non-NULL when a count is non-zero, root is in range, and
 * size*count does not overflow. */
#ifndef CRUN_TRAINER_COMM_BACKEND_H
#define CRUN_TRAINER_COMM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "trainer/comm.h"

struct crun_comm_ops {
	const char *name;
	/* Sets comm->priv; may call crun_comm_set_error on failure. */
	int (*init)(struct crun_comm *comm, const struct crun_comm_opts *opts);
	void (*finish)(struct crun_comm *comm);
	int (*allreduce_f32)(struct crun_comm *comm, float *buf, size_t count);
	int (*reduce_scatter_f32)(struct crun_comm *comm, float *in, float *out, size_t count);
	int (*allgather_f32)(struct crun_comm *comm, const float *in, float *out, size_t count);
	int (*broadcast)(struct crun_comm *comm, void *buf, size_t bytes, int root);
	int (*barrier)(struct crun_comm *comm);
	int (*allreduce_f64)(struct crun_comm *comm, double *buf, size_t count);
};

struct crun_comm {
	const struct crun_comm_ops *ops;
	int rank;
	int size;
	bool failed;
	char errmsg[512];
	void *priv; /* the backend's state */
};

extern const struct crun_comm_ops crun_comm_cpu_ops;
#ifdef CRUN_HAVE_NCCL
extern const struct crun_comm_ops crun_comm_nccl_ops;
#endif

/* Records the failure message (the first one wins). */
void crun_comm_set_error(struct crun_comm *comm, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif

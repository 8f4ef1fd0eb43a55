/* libcrun's worker API in a native worker: what a NCCL program does to
 * build its communicator, with 128 random bytes standing in for the
 * ncclUniqueId so that it runs without a GPU.
 *
 *   crun --standalone --nproc-per-node=4 ./ncclid_example
 *
 * Rank 0 makes the id and broadcasts it; every rank prints a hash of what
 * it got; the ranks all-gather their host names, ranks and hashes; after a
 * barrier, rank 0 prints one line per rank and checks that every rank got
 * the same id. Any failure prints one line and exits 1.
 *
 * Build: cc ncclid_example.c $(pkg-config --cflags --libs crun) -o ncclid_example */
#include <crun/worker.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define ID_BYTES 128 /* sizeof(ncclUniqueId) */

/* What each rank contributes to the all-gather: a fixed layout, the same
 * in every rank (one program, one architecture). */
struct entry {
	char host[48];
	uint64_t hash;
	int32_t rank;
	int32_t local_rank;
};

/* FNV-1a, to print something short that every rank can compare. */
static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static int fail(struct crun_worker *w, const char *what)
{
	fprintf(stderr, "ncclid_example: %s failed: %s\n", what, crun_worker_errmsg(w));
	crun_worker_destroy(w);
	return 1;
}

int main(void)
{
	unsigned char id[ID_BYTES];
	struct entry me, *all;
	struct crun_worker *w;
	char err[256];
	int rank, n;

	/* Timeouts of 0: connect within CRUN_CONNECT_TIMEOUT (default 30 s),
	 * and let each call take up to CRUN_TIMEOUT (default 300 s). */
	w = crun_worker_create(0, err, sizeof(err));
	if (!w) {
		fprintf(stderr, "ncclid_example: %s\n", err);
		return 1;
	}
	rank = crun_worker_rank(w);
	n = crun_worker_world_size(w);

	/* A NCCL program calls ncclGetUniqueId(&id) here, on rank 0 only. */
	if (rank == 0 && getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
		perror("ncclid_example: getrandom");
		crun_worker_destroy(w);
		return 1;
	}
	if (crun_worker_broadcast(w, id, sizeof(id), 0, 0) < 0)
		return fail(w, "broadcast of the id");
	/* ... and ncclCommInitRank(&comm, n, id, rank) here, on every rank. */
	printf("rank %d: id hash %016llx\n", rank, (unsigned long long)hash_bytes(id, sizeof(id)));
	fflush(stdout);

	memset(&me, 0, sizeof(me));
	if (gethostname(me.host, sizeof(me.host) - 1) < 0)
		snprintf(me.host, sizeof(me.host), "unknown");
	me.hash = hash_bytes(id, sizeof(id));
	me.rank = rank;
	me.local_rank = crun_worker_local_rank(w);
	all = calloc((size_t)n, sizeof(*all));
	if (!all) {
		fprintf(stderr, "ncclid_example: out of memory\n");
		crun_worker_destroy(w);
		return 1;
	}
	if (crun_worker_allgather(w, &me, sizeof(me), all, 0) < 0) {
		free(all);
		return fail(w, "all-gather of the hosts");
	}
	if (crun_worker_barrier(w, 0) < 0) {
		free(all);
		return fail(w, "barrier");
	}
	for (int r = 0; r < n; r++) {
		if (all[r].rank != r || all[r].hash != me.hash) {
			fprintf(stderr,
				"ncclid_example: rank %d on %s got id hash %016llx, "
				"rank %d got %016llx\n",
				(int)all[r].rank, all[r].host, (unsigned long long)all[r].hash,
				rank, (unsigned long long)me.hash);
			free(all);
			crun_worker_destroy(w);
			return 1;
		}
		if (rank == 0)
			printf("rank %d of %d on %s (local rank %d): id hash %016llx\n", r, n,
			       all[r].host, (int)all[r].local_rank,
			       (unsigned long long)all[r].hash);
	}
	free(all);
	crun_worker_destroy(w);
	return 0;
}

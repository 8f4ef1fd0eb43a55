/* Host memory of a run: what it needs, per kind of buffer, what the host
 * offers (MemAvailable and the process's limits), and the one line that
 * says both when an allocation fails. */
#ifndef CRUN_TRAINER_HOSTMEM_H
#define CRUN_TRAINER_HOSTMEM_H

#include <stddef.h>
#include <stdint.h>

/* Bytes a rank allocates on the host for the run. */
struct crun__host_need {
	size_t param_bytes;  /* parameters */
	size_t grad_bytes;   /* gradients: full, bucket and shard buffers */
	size_t optim_bytes;  /* both AdamW moments */
	size_t gather_bytes; /* zero3's gather buffer */
	size_t act_bytes;    /* activations of a micro-batch */
	size_t token_bytes;  /* the token rows of a step */
};

/* What the host offers; 0 where unknown or unlimited. The last five can
 * refuse an allocation that MemAvailable and the rlimits would allow. */
struct crun__host_avail {
	uint64_t mem_available;	 /* MemAvailable of /proc/meminfo */
	uint64_t as_limit;	 /* RLIMIT_AS (ulimit -v) */
	uint64_t as_used;	 /* VmSize of /proc/self/status */
	uint64_t data_limit;	 /* RLIMIT_DATA (ulimit -d) */
	uint64_t data_used;	 /* VmData of /proc/self/status */
	int overcommit_memory;	 /* vm.overcommit_memory (0 also when unknown) */
	uint64_t commit_limit;	 /* CommitLimit of /proc/meminfo */
	uint64_t committed_as;	 /* Committed_AS of /proc/meminfo */
	uint64_t cgroup_max;	 /* memory.max of this process's cgroup (v2) */
	uint64_t cgroup_current; /* its memory.current */
};

/* Reads the host's and this process's numbers; what cannot be read is 0. */
void crun__host_avail_read(struct crun__host_avail *out);

/* The message of a failed host allocation, one line into buf: the bytes
 * needed in all and per kind, the bytes available (the least of
 * MemAvailable and what each set limit leaves) and which bound that is;
 * when that is enough, that the allocator refused anyway and the limits
 * that may have refused it (vm.overcommit_memory=2's commit limit, the
 * cgroup's memory.max); and a pointer to OUT OF MEMORY in crun-train(1). */
void crun__host_oom_message(const struct crun__host_need *need,
			    const struct crun__host_avail *avail, char *buf, size_t len);

#endif

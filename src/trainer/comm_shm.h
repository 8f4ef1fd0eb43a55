/* How the cpu backend hands a shared-memory ring from one rank to its
 * neighbour without ever giving it a name: the pure part (the offer on
 * the wire, whether a peer can reach it, the path it opens). comm_cpu.c
 * makes, opens and maps the rings.
 *
 * A ring is an anonymous file (memfd_create(2)): nothing of it appears in
 * /dev/shm or in any directory, and the kernel frees it when the last
 * process holding it or mapping it is gone, however the processes end
 * (SIGKILL of every rank and of crun included). The receiving rank makes
 * it, keeps its descriptor open, and offers it to its left neighbour as
 * (pid, fd); the neighbour opens /proc/PID/fd/FD, maps it, answers, and
 * only then does the maker close its descriptor. The kernel allows that
 * open to a process of the same user in the same PID namespace on the
 * same kernel, so the offer also says where the maker runs: the kernel's
 * boot id and the inode of its PID namespace. A peer elsewhere (another
 * host, another container) sees a different place and keeps TCP without
 * trying. */
#ifndef CRUN_TRAINER_COMM_SHM_H
#define CRUN_TRAINER_COMM_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of an offer on the wire; integers are little-endian. */
#define CRUN__SHM_OFFER_LEN 56
/* Bounds of a ring's data size that a decoded offer may state. */
#define CRUN__SHM_MIN_CAP 4096u
#define CRUN__SHM_MAX_CAP (1u << 30)

/* Where a process runs, as far as opening another's descriptor goes. All
 * zero: unknown (then nothing is reachable). */
struct crun__shm_place {
	uint8_t boot_id[16]; /* /proc/sys/kernel/random/boot_id */
	uint64_t pid_ns;     /* inode of /proc/self/ns/pid */
};

struct crun__shm_offer {
	bool present; /* false: no ring offered; the rest is zero */
	struct crun__shm_place place;
	int32_t pid;	/* the maker, in its PID namespace */
	int32_t fd;	/* the maker's descriptor of the ring */
	uint64_t nonce; /* also in the ring's header: proves it is the one */
	uint64_t cap;	/* bytes of ring data, after the header's page */
};

/* Writes o (or an empty offer when o->present is false) into buf. */
void crun__shm_offer_encode(uint8_t buf[CRUN__SHM_OFFER_LEN], const struct crun__shm_offer *o);
/* Reads an offer; 0, or -EPROTO when buf is not one (bad magic, flag,
 * pid, fd, or a cap out of bounds or not a multiple of 64). */
int crun__shm_offer_decode(const uint8_t buf[CRUN__SHM_OFFER_LEN], struct crun__shm_offer *o);

/* Whether a ring made at `there` can be opened from `here`: both places
 * known, same boot id, same PID namespace. */
bool crun__shm_reachable(const struct crun__shm_place *here, const struct crun__shm_place *there);

/* Parses the text of /proc/sys/kernel/random/boot_id (a UUID, 36
 * characters, an optional newline after) into 16 bytes. 0 or -EINVAL. */
int crun__shm_parse_boot_id(const char *text, uint8_t out[16]);

/* Writes "/proc/PID/fd/FD" into buf. 0, -EINVAL (pid <= 0 or fd < 0) or
 * -ENAMETOOLONG. */
int crun__shm_proc_path(char *buf, size_t len, int32_t pid, int32_t fd);

#endif

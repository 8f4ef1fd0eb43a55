/* cudasim's NCCL: communicators whose ranks are processes of one host,
 * meeting in POSIX shared memory named after the unique id.
 *
 * The segment holds a header (a barrier, the attach count, a failure
 * flag) and one data slot per rank. A collective moves its data in chunks
 * of a slot: each rank copies its part into its own slot, all meet at the
 * barrier, each rank computes its own output from every slot, adding in
 * rank order so that all ranks get the same bits, and all meet again
 * before the slots are reused. The segment is unlinked as soon as every
 * rank has mapped it, so a process killed after the rendezvous leaves
 * nothing in /dev/shm (one killed during it can leave the segment).
 *
 * Every wait is bounded. A rendezvous that times out fails the init; a
 * collective that times out is fatal, as a hung NCCL kernel would be, so
 * that the process dies and its launcher restarts the group.
 *
 * Tunables (read at ncclCommInitRank*):
 *   CUDASIM_NCCL_TIMEOUT_MS  longest wait for peers, default 120000
 *   CUDASIM_NCCL_SLOT_BYTES  bytes per rank's data slot; the creator's
 *                            value wins; default 4 MiB, less above 8 ranks */
#include "cudasim.h"

#include <nccl.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <map>
#include <memory>
#include <new>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace cudasim;

namespace
{

constexpr int64_t DEFAULT_TIMEOUT_MS = 120000;
constexpr size_t DEFAULT_SLOT_BYTES = 4 << 20;
constexpr size_t MAX_SLOT_BYTES = 1 << 30;
/* default slots shrink to fit in this: docker's /dev/shm is 64 MiB */
constexpr size_t SHM_BUDGET = 32 << 20;
constexpr uint64_t SHM_MAGIC = 0x6c636e2d6d697363ULL; /* "csim-ncl" */
constexpr char ID_PREFIX[] = "cudasim-nccl";
constexpr unsigned SPINS = 200; /* busy polls before sleeping between polls */

static_assert(std::atomic<uint32_t>::is_always_lock_free &&
		      std::atomic<uint64_t>::is_always_lock_free,
	      "shm atomics must be address-free");

enum class coll_kind : uint32_t { allreduce = 1, reduce_scatter, allgather, broadcast };

/* What a rank is about to run, in its slot, so peers can check they run
 * the same: a mismatch hangs a GPU. */
struct coll_desc {
	uint64_t seq;
	uint64_t count;
	uint32_t kind;
	uint32_t dtype;
	uint32_t op;
	int32_t root;
};

struct shm_header {
	std::atomic<uint64_t> magic; /* stored last by the creator */
	uint32_t nranks;
	uint64_t slot_bytes;
	uint64_t total_bytes;
	uint64_t data_off;
	char id[NCCL_UNIQUE_ID_BYTES];
	std::atomic<uint32_t> attached;
	std::atomic<uint32_t> arrived; /* barrier: ranks in this generation */
	std::atomic<uint32_t> generation;
	std::atomic<uint32_t> failed; /* an ncclResult_t; the first failure wins */
	char reason[192];	      /* why, written before failed */
};

struct alignas(64) shm_slot {
	std::atomic<uint32_t> joined;
	int32_t pid;
	std::atomic<uint64_t> barriers; /* entered: who is behind shows after a timeout */
	coll_desc desc;
};

constexpr size_t SLOTS_OFF = (sizeof(shm_header) + 63) / 64 * 64;

/* One queued collective. */
struct coll {
	coll_kind k;
	const char *name;
	const char *send;
	char *recv;
	size_t count;
	int dt; /* ncclDataType_t, once checked */
	int op; /* ncclRedOp_t */
	int root;
	size_t ts;
	uint64_t seq;
};

} // namespace

enum class comm_state { ready, finalized, aborted, destroyed };

struct ncclComm {
	int nranks = 0;
	int rank = 0;
	bool blocking = true;
	int64_t timeout_ms = DEFAULT_TIMEOUT_MS;
	comm_state state = comm_state::ready;
	ncclResult_t async_error = ncclSuccess;	 /* sticky */
	bool report_in_progress = false;	 /* the next ncclCommGetAsyncError says so once */
	uint64_t issued = 0;			 /* collectives queued */
	uint64_t ran = 0;			 /* collectives run */
	std::map<uint64_t, cudaStream_t> queued; /* not yet run: seq -> stream */

	/* the shared segment; NULL for one rank or once detached */
	char *base = nullptr;
	size_t map_bytes = 0;

	shm_header *hdr() const
	{
		return reinterpret_cast<shm_header *>(base);
	}
	shm_slot *slot(int r) const
	{
		return reinterpret_cast<shm_slot *>(base + SLOTS_OFF) + r;
	}
	char *data(int r) const
	{
		return base + hdr()->data_off + (size_t)r * hdr()->slot_bytes;
	}
	void detach()
	{
		if (base)
			munmap(base, map_bytes);
		base = nullptr;
	}
	~ncclComm()
	{
		detach();
	}
};

namespace
{

/* The live communicators: a handle not in here was never made, or has
 * been destroyed or aborted. Queued work holds its own reference. */
std::map<ncclComm *, std::shared_ptr<ncclComm>> live;
char last_error[512];
uint64_t ids_made;

uint64_t now_ms()
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void pause_poll(unsigned spin)
{
	struct timespec ts = {0, 50000};

	if (spin < SPINS)
		sched_yield();
	else
		nanosleep(&ts, nullptr);
}

/* Records the error as ncclGetLastError's and prints it. Returns r. */
ncclResult_t complain(ncclResult_t r, const char *fn, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
ncclResult_t complain(ncclResult_t r, const char *fn, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(last_error, sizeof(last_error), "%s: ", fn);

	va_start(ap, fmt);
	vsnprintf(last_error + n, sizeof(last_error) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "cudasim: %s\n", last_error);
	return r;
}

/* An enum argument as the int the caller passed: a C caller may pass any
 * value, which C++ must not load as the enum. */
template <typename E> int raw(const E &e)
{
	int v;

	static_assert(sizeof(E) == sizeof(int), "enums are ints");
	memcpy(&v, &e, sizeof(v));
	return v;
}

ncclComm *find_comm(ncclComm_t comm)
{
	auto it = live.find(comm);

	return it == live.end() ? nullptr : it->second.get();
}

size_t type_size(int t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32:
		return 4;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64:
		return 8;
	}
	return 0;
}

const char *type_name(uint32_t t)
{
	static const char *const names[] = {"int8",   "uint8",	 "int32",   "uint32",  "int64",
					    "uint64", "float16", "float32", "float64", "bfloat16"};

	return t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown type";
}

const char *kind_name(uint32_t k)
{
	switch ((coll_kind)k) {
	case coll_kind::allreduce:
		return "ncclAllReduce";
	case coll_kind::reduce_scatter:
		return "ncclReduceScatter";
	case coll_kind::allgather:
		return "ncclAllGather";
	case coll_kind::broadcast:
		return "ncclBroadcast";
	}
	return "nothing";
}

uint64_t fnv1a(const void *p, size_t n)
{
	const unsigned char *b = (const unsigned char *)p;
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

bool overlap(const void *a, size_t an, const void *b, size_t bn)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

	return x < y + bn && y < x + an;
}

/* Marks the group failed so that peers stop waiting for this rank. */
void mark_failed(ncclComm *c, ncclResult_t r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void mark_failed(ncclComm *c, ncclResult_t r, const char *fmt, ...)
{
	shm_header *h = c->hdr();
	uint32_t zero = 0;
	va_list ap;

	if (!c->base || h->failed.load(std::memory_order_acquire))
		return;
	/* claim with a value no result has, write the reason, then publish */
	if (!h->failed.compare_exchange_strong(zero, ~0u, std::memory_order_acq_rel))
		return;
	va_start(ap, fmt);
	vsnprintf(h->reason, sizeof(h->reason), fmt, ap);
	va_end(ap);
	h->failed.store((uint32_t)r, std::memory_order_release);
}

/* Nonzero (an ncclResult_t) once a peer marked the group failed; reason
 * then says why. */
uint32_t group_failure(const ncclComm *c)
{
	uint32_t f = c->hdr()->failed.load(std::memory_order_acquire);

	return f == ~0u ? 0 : f;
}

enum class wait_end { done, timeout, failed };

/* Waits at the group's barrier, at most timeout_ms. */
wait_end barrier(ncclComm *c)
{
	shm_header *h = c->hdr();
	uint32_t gen = h->generation.load(std::memory_order_acquire);
	uint64_t deadline;

	c->slot(c->rank)->barriers.fetch_add(1, std::memory_order_relaxed);
	if (h->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == (uint32_t)c->nranks) {
		h->arrived.store(0, std::memory_order_relaxed);
		h->generation.fetch_add(1, std::memory_order_release);
		return wait_end::done;
	}
	deadline = now_ms() + (uint64_t)c->timeout_ms;
	for (unsigned spin = 0;; spin++) {
		bool late = spin >= SPINS && now_ms() > deadline;

		if (h->generation.load(std::memory_order_acquire) != gen)
			return wait_end::done;
		if (group_failure(c))
			return wait_end::failed;
		if (late)
			return wait_end::timeout;
		pause_poll(spin);
	}
}

/* "1 (pid 42), 3" for the ranks that have not joined (at init) or are
 * behind this one at the barrier. */
const char *missing_ranks(const ncclComm *c, bool init, char *buf, size_t len)
{
	uint64_t mine = c->slot(c->rank)->barriers.load(std::memory_order_relaxed);
	size_t at = 0;

	buf[0] = 0;
	for (int r = 0; r < c->nranks && at + 1 < len; r++) {
		const shm_slot *s = c->slot(r);
		bool gone = init ? !s->joined.load(std::memory_order_acquire)
				 : s->barriers.load(std::memory_order_relaxed) < mine;
		int n;

		if (r == c->rank || !gone)
			continue;
		if (init)
			n = snprintf(buf + at, len - at, "%s%d", at ? ", " : "", r);
		else
			n = snprintf(buf + at, len - at, "%s%d (pid %d)", at ? ", " : "", r,
				     (int)s->pid);
		if (n < 0)
			break;
		at += (size_t)n;
	}
	return buf;
}

/* Rendezvous. */

void shm_name(const ncclUniqueId &id, char *name, size_t len)
{
	snprintf(name, len, "/cudasim-nccl-%016" PRIx64, fnv1a(id.internal, sizeof(id.internal)));
}

size_t pick_slot_bytes(int nranks)
{
	size_t slot = (size_t)env_positive("CUDASIM_NCCL_SLOT_BYTES", 0);

	if (!slot) {
		slot = DEFAULT_SLOT_BYTES;
		if (slot * (size_t)nranks > SHM_BUDGET)
			slot = SHM_BUDGET / (size_t)nranks;
	}
	/* whole cache lines, and room for one element of every rank (a
	 * reduce-scatter chunk holds a piece for each) */
	if (slot > MAX_SLOT_BYTES)
		slot = MAX_SLOT_BYTES;
	slot = slot / 64 * 64;
	if (slot < 64 * (size_t)nranks)
		slot = 64 * (size_t)nranks;
	return slot;
}

/* Makes the segment; the caller holds fd from shm_open(O_CREAT|O_EXCL). */
ncclResult_t create_segment(ncclComm *c, int fd, const ncclUniqueId &id, const char *fn)
{
	size_t slot = pick_slot_bytes(c->nranks);
	size_t data_off = (SLOTS_OFF + sizeof(shm_slot) * (size_t)c->nranks + 4095) / 4096 * 4096;
	size_t total = data_off + slot * (size_t)c->nranks;
	shm_header *h;
	void *p;
	int err;

	if (ftruncate(fd, (off_t)total))
		return complain(ncclSystemError, fn, "cannot size shared memory to %zu bytes: %s",
				total, strerror(errno));
	/* reserve it now: tmpfs running full later is a SIGBUS in a collective */
	err = posix_fallocate(fd, 0, (off_t)total);
	if (err && err != EOPNOTSUPP && err != ENOSYS && err != EINVAL)
		return complain(ncclSystemError, fn,
				"cannot reserve %zu bytes of shared memory: %s (is /dev/shm too "
				"small? CUDASIM_NCCL_SLOT_BYTES sets the per-rank slot)",
				total, strerror(err));
	p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return complain(ncclSystemError, fn, "cannot map shared memory: %s",
				strerror(errno));
	c->base = (char *)p;
	c->map_bytes = total;
	h = new (p) shm_header();
	for (int r = 0; r < c->nranks; r++)
		new (c->slot(r)) shm_slot();
	h->nranks = (uint32_t)c->nranks;
	h->slot_bytes = slot;
	h->total_bytes = total;
	h->data_off = data_off;
	memcpy(h->id, id.internal, sizeof(h->id));
	h->magic.store(SHM_MAGIC, std::memory_order_release);
	return ncclSuccess;
}

/* Maps a segment another rank made, once it is ready. */
ncclResult_t join_segment(ncclComm *c, int fd, const ncclUniqueId &id, uint64_t deadline,
			  const char *fn)
{
	struct stat st;
	shm_header *h;
	void *p;

	for (unsigned spin = 0;; spin++) {
		if (fstat(fd, &st))
			return complain(ncclSystemError, fn, "cannot stat shared memory: %s",
					strerror(errno));
		if (st.st_size > 0)
			break;
		if (now_ms() > deadline)
			return ncclInProgress; /* the caller reports the timeout */
		pause_poll(spin);
	}
	if ((size_t)st.st_size < sizeof(shm_header))
		return complain(ncclSystemError, fn, "shared memory of %lld bytes is not cudasim's",
				(long long)st.st_size);
	p = mmap(nullptr, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return complain(ncclSystemError, fn, "cannot map shared memory: %s",
				strerror(errno));
	c->base = (char *)p;
	c->map_bytes = (size_t)st.st_size;
	h = c->hdr();
	for (unsigned spin = 0; h->magic.load(std::memory_order_acquire) != SHM_MAGIC; spin++) {
		if (now_ms() > deadline)
			return ncclInProgress;
		pause_poll(spin);
	}
	if (h->total_bytes != c->map_bytes || memcmp(h->id, id.internal, sizeof(h->id)))
		return complain(ncclSystemError, fn,
				"shared memory of another group has this id's name");
	if (h->nranks != (uint32_t)c->nranks) {
		mark_failed(c, ncclInvalidUsage,
			    "rank %d joined with nranks %d, rank 0's group has %u", c->rank,
			    c->nranks, h->nranks);
		return complain(ncclInvalidUsage, fn,
				"rank %d was given nranks %d, the group was made with %u", c->rank,
				c->nranks, h->nranks);
	}
	return ncclSuccess;
}

/* Opens or creates the segment, maps it and waits for every rank. */
ncclResult_t rendezvous(ncclComm *c, const ncclUniqueId &id, const char *fn)
{
	uint64_t deadline = now_ms() + (uint64_t)c->timeout_ms;
	char name[64];
	ncclResult_t r;
	uint32_t f;
	int fd;

	shm_name(id, name, sizeof(name));
	for (unsigned spin = 0;; spin++) {
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd >= 0) {
			r = create_segment(c, fd, id, fn);
			break;
		}
		if (errno != EEXIST)
			return complain(ncclSystemError, fn, "cannot create shared memory '%s': %s",
					name, strerror(errno));
		fd = shm_open(name, O_RDWR, 0);
		if (fd >= 0) {
			r = join_segment(c, fd, id, deadline, fn);
			break;
		}
		/* gone between the two calls: its group failed or has all
		 * its ranks; try again to make a fresh one */
		if (errno != ENOENT)
			return complain(ncclSystemError, fn, "cannot open shared memory '%s': %s",
					name, strerror(errno));
		if (now_ms() > deadline) {
			r = ncclInProgress;
			break;
		}
		pause_poll(spin);
	}
	if (fd >= 0)
		close(fd);
	if (r == ncclSuccess) {
		shm_header *h = c->hdr();
		shm_slot *s = c->slot(c->rank);

		if (s->joined.exchange(1, std::memory_order_acq_rel)) {
			mark_failed(c, ncclInvalidUsage, "two processes joined as rank %d",
				    c->rank);
			r = complain(ncclInvalidUsage, fn,
				     "another process already joined as rank %d", c->rank);
			goto out_unlink;
		}
		s->pid = (int32_t)getpid();
		h->attached.fetch_add(1, std::memory_order_acq_rel);
		for (unsigned spin = 0;; spin++) {
			bool late = now_ms() > deadline;

			if (h->attached.load(std::memory_order_acquire) >= (uint32_t)c->nranks)
				break;
			if ((f = group_failure(c))) {
				r = complain((ncclResult_t)f, fn, "the group failed: %s",
					     h->reason);
				goto out_unlink;
			}
			if (late) {
				r = ncclInProgress;
				break;
			}
			pause_poll(spin);
		}
	}
	if (r == ncclInProgress) {
		char who[128] = "";

		if (c->base) {
			mark_failed(c, ncclSystemError, "rank %d gave up waiting for its peers",
				    c->rank);
			/* the slots are there only once the creator is done */
			if (c->hdr()->magic.load(std::memory_order_acquire) == SHM_MAGIC &&
			    c->hdr()->nranks == (uint32_t)c->nranks)
				missing_ranks(c, true, who, sizeof(who));
		}
		r = complain(ncclSystemError, fn,
			     "rank %d waited over %lld ms for its peers (of %d ranks, missing: "
			     "%s; CUDASIM_NCCL_TIMEOUT_MS)",
			     c->rank, (long long)c->timeout_ms, c->nranks,
			     *who ? who : "all but this one");
	}
out_unlink:
	/* all ranks have it mapped, or the group failed: either way the name
	 * is no longer needed */
	shm_unlink(name);
	if (r != ncclSuccess)
		c->detach();
	return r;
}

/* Collectives. */

const char *describe(const coll_desc &d, char *buf, size_t len)
{
	if ((coll_kind)d.kind == coll_kind::broadcast)
		snprintf(buf, len, "#%" PRIu64 " %s of %" PRIu64 " %s from root %d", d.seq,
			 kind_name(d.kind), d.count, type_name(d.dtype), d.root);
	else
		snprintf(buf, len, "#%" PRIu64 " %s of %" PRIu64 " %s", d.seq, kind_name(d.kind),
			 d.count, type_name(d.dtype));
	return buf;
}

/* Where a collective's wait at the barrier ended other than done: fatal,
 * as the kernel would hang on a GPU. */
[[noreturn]] void hung(ncclComm *c, const coll &op, wait_end why)
{
	char who[160];

	if (why == wait_end::failed) {
		c->async_error = ncclRemoteError;
		fatal("nccl: rank %d in %s (collective #%" PRIu64 "): the group failed: %s",
		      c->rank, op.name, op.seq, c->hdr()->reason);
	}
	c->async_error = ncclSystemError;
	missing_ranks(c, false, who, sizeof(who));
	mark_failed(c, ncclSystemError, "rank %d timed out in %s", c->rank, op.name);
	fatal("nccl: rank %d waited over %lld ms for its peers in %s (collective #%" PRIu64
	      "; not there: rank %s; CUDASIM_NCCL_TIMEOUT_MS)",
	      c->rank, (long long)c->timeout_ms, op.name, op.seq, who);
}

void sync_group(ncclComm *c, const coll &op)
{
	wait_end w = barrier(c);

	if (w != wait_end::done)
		hung(c, op, w);
}

void check_same(ncclComm *c, const coll &op)
{
	const coll_desc &mine = c->slot(c->rank)->desc;
	char a[128], b[128];

	for (int r = 0; r < c->nranks; r++) {
		const coll_desc &d = c->slot(r)->desc;

		if (!memcmp(&d, &mine, sizeof(d)))
			continue;
		c->async_error = ncclInvalidUsage;
		mark_failed(c, ncclInvalidUsage, "ranks issued different collectives");
		fatal("nccl: rank %d runs collective %s but rank %d runs %s: a GPU would hang "
		      "here (%s)",
		      c->rank, describe(mine, a, sizeof(a)), r, describe(d, b, sizeof(b)), op.name);
	}
}

template <typename T> void add_up(char *out, const char *const *in, int n, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		T acc, v;

		memcpy(&acc, in[0] + i * sizeof(T), sizeof(T));
		for (int r = 1; r < n; r++) {
			memcpy(&v, in[r] + i * sizeof(T), sizeof(T));
			acc = (T)(acc + v);
		}
		memcpy(out + i * sizeof(T), &acc, sizeof(T));
	}
}

/* bfloat16 adds in float and rounds once, as NCCL's kernels do */
void add_up_bf16(char *out, const char *const *in, int n, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		uint16_t v;
		float acc;

		memcpy(&v, in[0] + 2 * i, 2);
		acc = bf16_to_float(v);
		for (int r = 1; r < n; r++) {
			memcpy(&v, in[r] + 2 * i, 2);
			acc += bf16_to_float(v);
		}
		v = float_to_bf16(acc);
		memcpy(out + 2 * i, &v, 2);
	}
}

/* out[i] = in[0][i] + ... + in[n-1][i], in rank order */
void reduce(ncclDataType_t dt, char *out, const char *const *in, int n, size_t len)
{
	switch (dt) {
	case ncclInt8:
	case ncclUint8:
		add_up<uint8_t>(out, in, n, len); /* unsigned: wraps as the GPU does */
		break;
	case ncclInt32:
	case ncclUint32:
		add_up<uint32_t>(out, in, n, len);
		break;
	case ncclInt64:
	case ncclUint64:
		add_up<uint64_t>(out, in, n, len);
		break;
	case ncclFloat32:
		add_up<float>(out, in, n, len);
		break;
	case ncclFloat64:
		add_up<double>(out, in, n, len);
		break;
	case ncclBfloat16:
		add_up_bf16(out, in, n, len);
		break;
	case ncclFloat16:
		fatal("nccl: float16 reduction reached the executor"); /* refused at the call */
	}
}

/* One rank alone: every collective is a copy. */
void run_alone(const coll &op)
{
	size_t bytes = op.count * op.ts;

	if (op.send != op.recv)
		memmove(op.recv, op.send, bytes);
}

void run_group(ncclComm *c, const coll &op)
{
	int n = c->nranks, me = c->rank;
	size_t ts = op.ts, per = c->hdr()->slot_bytes / ts;
	std::vector<const char *> in((size_t)n);
	shm_slot *s = c->slot(me);
	char *mine = c->data(me);

	s->desc.seq = op.seq;
	s->desc.count = op.count;
	s->desc.kind = (uint32_t)op.k;
	s->desc.dtype = (uint32_t)op.dt;
	s->desc.op = (uint32_t)op.op;
	s->desc.root = op.k == coll_kind::broadcast ? op.root : 0;
	if (op.k == coll_kind::reduce_scatter)
		per /= (size_t)n;
	for (size_t off = 0; off < op.count; off += per) {
		size_t len = op.count - off < per ? op.count - off : per;
		size_t bytes = len * ts;

		switch (op.k) {
		case coll_kind::allreduce:
		case coll_kind::allgather:
			memcpy(mine, op.send + off * ts, bytes);
			break;
		case coll_kind::reduce_scatter:
			for (int j = 0; j < n; j++)
				memcpy(mine + (size_t)j * bytes,
				       op.send + ((size_t)j * op.count + off) * ts, bytes);
			break;
		case coll_kind::broadcast:
			if (me == op.root)
				memcpy(mine, op.send + off * ts, bytes);
			break;
		}
		sync_group(c, op);
		if (!off)
			check_same(c, op);
		switch (op.k) {
		case coll_kind::allreduce:
			for (int r = 0; r < n; r++)
				in[(size_t)r] = c->data(r);
			reduce((ncclDataType_t)op.dt, op.recv + off * ts, in.data(), n, len);
			break;
		case coll_kind::reduce_scatter:
			for (int r = 0; r < n; r++)
				in[(size_t)r] = c->data(r) + (size_t)me * bytes;
			reduce((ncclDataType_t)op.dt, op.recv + off * ts, in.data(), n, len);
			break;
		case coll_kind::allgather:
			for (int r = 0; r < n; r++)
				memcpy(op.recv + ((size_t)r * op.count + off) * ts, c->data(r),
				       bytes);
			break;
		case coll_kind::broadcast:
			memcpy(op.recv + off * ts, c->data(op.root), bytes);
			break;
		}
		/* nobody refills a slot before everyone has read it */
		sync_group(c, op);
	}
}

/* The queued work of a collective. */
void run(const std::shared_ptr<ncclComm> &sp, const coll &op)
{
	ncclComm *c = sp.get();

	c->queued.erase(op.seq);
	/* an abort stops the communicator's kernels */
	if (c->state == comm_state::aborted)
		return;
	if (c->state == comm_state::destroyed)
		fatal("nccl: %s (collective #%" PRIu64 ") ran after ncclCommDestroy", op.name,
		      op.seq);
	if (op.seq != c->ran + 1)
		fatal("nccl: rank %d runs collective #%" PRIu64 " (%s) before #%" PRIu64
		      ": collectives of one communicator were issued on different streams "
		      "without ordering them, which deadlocks a GPU",
		      c->rank, op.seq, op.name, c->ran + 1);
	c->ran = op.seq;
	if (c->nranks == 1)
		run_alone(op);
	else
		run_group(c, op);
}

/* Checks one buffer argument: device memory of the whole span. */
bool device_buffer(const char *fn, const char *what, const void *p, size_t bytes)
{
	if (device_range(p, bytes))
		return true;
	if (kind(p) == Mem::device)
		complain(ncclInvalidArgument, fn, "%s [%p, +%zu) runs past its device allocation",
			 what, p, bytes);
	else
		complain(ncclInvalidArgument, fn, "%s %p is not device memory", what, p);
	return false;
}

/* Checks a collective as NCCL does at the call, and queues it. */
ncclResult_t collective(coll op, ncclComm_t comm, cudaStream_t stream)
{
	const char *fn = op.name;
	std::shared_ptr<ncclComm> sp;
	size_t send_bytes, recv_bytes, n;
	ncclComm *c;
	cudaError_t ce;

	auto it = live.find(comm);
	if (it == live.end())
		return complain(ncclInvalidArgument, fn, "%p is not a live communicator",
				(void *)comm);
	sp = it->second;
	c = sp.get();
	if (c->async_error != ncclSuccess)
		return complain(c->async_error, fn, "the communicator failed earlier");
	if (c->report_in_progress)
		return complain(ncclInvalidArgument, fn,
				"communicator used before ncclCommGetAsyncError reported its last "
				"call done");
	if (c->state != comm_state::ready)
		return complain(ncclInvalidUsage, fn, "communicator used after ncclCommFinalize");
	op.ts = type_size(op.dt);
	if (!op.ts)
		return complain(ncclInvalidArgument, fn, "invalid data type %d", op.dt);
	if (op.k == coll_kind::allreduce || op.k == coll_kind::reduce_scatter) {
		if (op.op != ncclSum)
			return complain(ncclInvalidArgument, fn,
					"reduction op %d: cudasim runs only ncclSum", op.op);
		if (op.dt == ncclFloat16)
			return complain(ncclInvalidArgument, fn, "cudasim does not reduce float16");
	}
	if (op.k == coll_kind::broadcast && (op.root < 0 || op.root >= c->nranks))
		return complain(ncclInvalidArgument, fn, "root %d of %d ranks", op.root, c->nranks);
	if (!stream_valid(stream))
		return complain(ncclInvalidArgument, fn, "stream %p is not a live stream",
				(void *)stream);
	/* NCCL skips empty collectives; they do not count on any rank */
	if (!op.count)
		return ncclSuccess;
	n = (size_t)c->nranks;
	if (op.count > SIZE_MAX / op.ts / n)
		return complain(ncclInvalidArgument, fn, "count %zu is too large", op.count);
	send_bytes = recv_bytes = op.count * op.ts;
	if (op.k == coll_kind::reduce_scatter)
		send_bytes *= n;
	if (op.k == coll_kind::allgather)
		recv_bytes *= n;
	/* a broadcast reads sendbuff on the root only */
	if (op.k != coll_kind::broadcast || c->rank == op.root) {
		if (!device_buffer(fn, "sendbuff", op.send, send_bytes))
			return ncclInvalidArgument;
		if (overlap(op.send, send_bytes, op.recv, recv_bytes)) {
			const char *want = nullptr;

			switch (op.k) {
			case coll_kind::allreduce:
			case coll_kind::broadcast:
				want = op.send == op.recv ? nullptr : "recvbuff == sendbuff";
				break;
			case coll_kind::reduce_scatter:
				want = op.recv == op.send + (size_t)c->rank * recv_bytes
					       ? nullptr
					       : "recvbuff == sendbuff + rank * recvcount";
				break;
			case coll_kind::allgather:
				want = op.send == op.recv + (size_t)c->rank * send_bytes
					       ? nullptr
					       : "sendbuff == recvbuff + rank * sendcount";
				break;
			}
			if (want)
				return complain(ncclInvalidArgument, fn,
						"sendbuff %p and recvbuff %p overlap; in place "
						"needs %s",
						(const void *)op.send, (void *)op.recv, want);
		}
	}
	if (!device_buffer(fn, "recvbuff", op.recv, recv_bytes))
		return ncclInvalidArgument;
	op.seq = ++c->issued;
	c->queued[op.seq] = stream;
	ce = enqueue(stream, fn, [sp, op] { run(sp, op); });
	if (ce != cudaSuccess) {
		c->queued.erase(op.seq);
		c->issued--;
		return complain(ncclUnhandledCudaError, fn, "cannot queue on stream %p: %s",
				(void *)stream, cudaGetErrorString(ce));
	}
	return ncclSuccess;
}

/* Runs what this communicator has queued, as ncclCommFinalize does, in
 * the order it was issued. */
void flush(ncclComm *c)
{
	while (!c->queued.empty()) {
		uint64_t seq = c->queued.begin()->first;
		cudaStream_t s = c->queued.begin()->second;

		if (!stream_valid(s) || cudaStreamSynchronize(s) != cudaSuccess)
			return;
		if (!c->queued.empty() && c->queued.begin()->first == seq)
			return; /* the stream did not run it: leave it */
	}
}

} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return complain(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	struct timespec ts;
	uint64_t rnd = 0, t;
	int32_t pid = (int32_t)getpid();

	if (!uniqueId)
		return complain(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		rnd = 0; /* pid, time and count still tell ids apart */
	clock_gettime(CLOCK_REALTIME, &ts);
	t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	ids_made++;
	memset(uniqueId, 0, sizeof(*uniqueId));
	memcpy(uniqueId->internal, ID_PREFIX, sizeof(ID_PREFIX));
	memcpy(uniqueId->internal + 16, &pid, sizeof(pid));
	memcpy(uniqueId->internal + 24, &rnd, sizeof(rnd));
	memcpy(uniqueId->internal + 32, &t, sizeof(t));
	memcpy(uniqueId->internal + 40, &ids_made, sizeof(ids_made));
	return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				    ncclConfig_t *config)
{
	const char *fn = "ncclCommInitRank";
	std::shared_ptr<ncclComm> sp;
	ncclResult_t r = ncclSuccess;

	if (!comm)
		return complain(ncclInvalidArgument, fn, "comm is NULL");
	*comm = nullptr;
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return complain(ncclInvalidArgument, fn, "rank %d of %d ranks", rank, nranks);
	if (config && config->magic != 0xcafebeef)
		return complain(ncclInvalidArgument, fn,
				"config magic %#x: not from NCCL_CONFIG_INITIALIZER",
				config->magic);
	if (memcmp(commId.internal, ID_PREFIX, sizeof(ID_PREFIX)))
		return complain(ncclInvalidArgument, fn,
				"the unique id was not made by ncclGetUniqueId");
	sp = std::make_shared<ncclComm>();
	sp->nranks = nranks;
	sp->rank = rank;
	sp->blocking = !config || config->blocking != 0;
	sp->timeout_ms = env_positive("CUDASIM_NCCL_TIMEOUT_MS", DEFAULT_TIMEOUT_MS);
	if (nranks > 1)
		r = rendezvous(sp.get(), commId, fn);
	if (r != ncclSuccess) {
		if (sp->blocking)
			return r;
		/* non-blocking: the communicator exists and carries the error */
		sp->async_error = r;
	} else if (!sp->blocking) {
		sp->report_in_progress = true;
		r = ncclInProgress;
	}
	live[sp.get()] = sp;
	*comm = sp.get();
	return r;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	ncclComm *c = find_comm(comm);

	if (!c)
		return complain(ncclInvalidArgument, "ncclCommFinalize",
				"%p is not a live communicator", (void *)comm);
	if (c->state != comm_state::ready)
		return complain(ncclInvalidUsage, "ncclCommFinalize", "called twice");
	if (c->async_error != ncclSuccess)
		return c->async_error; /* what is queued would wait for peers in vain */
	flush(c);
	c->state = comm_state::finalized;
	if (c->blocking)
		return ncclSuccess;
	c->report_in_progress = true;
	return ncclInProgress;
}

/* Shared by destroy and abort: the handle dies; queued work that still
 * holds the communicator sees the state. */
static ncclResult_t drop(ncclComm_t comm, const char *fn, comm_state to)
{
	auto it = live.find(comm);
	ncclComm *c;

	if (!comm)
		return ncclSuccess;
	if (it == live.end())
		return complain(ncclInvalidArgument, fn, "%p is not a live communicator",
				(void *)comm);
	c = it->second.get();
	/* a failed group cannot run what is queued: drop it, as an abort does */
	if (c->async_error != ncclSuccess)
		to = comm_state::aborted;
	if (to == comm_state::destroyed && c->state == comm_state::ready)
		flush(c);
	if (to == comm_state::aborted && c->base)
		mark_failed(c, ncclRemoteError, "rank %d aborted the communicator", c->rank);
	c->state = to;
	c->detach();
	live.erase(it);
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	return drop(comm, "ncclCommDestroy", comm_state::destroyed);
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	return drop(comm, "ncclCommAbort", comm_state::aborted);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	ncclComm *c = find_comm(comm);

	if (!c || !asyncError)
		return complain(ncclInvalidArgument, "ncclCommGetAsyncError", "%s",
				!c ? "not a live communicator" : "asyncError is NULL");
	/* a peer's failure shows here, as NCCL's proxy reports it */
	if (c->async_error == ncclSuccess && c->base && group_failure(c)) {
		c->async_error = ncclRemoteError;
		complain(ncclRemoteError, "ncclCommGetAsyncError", "rank %d: %s", c->rank,
			 c->hdr()->reason);
	}
	if (c->async_error != ncclSuccess) {
		*asyncError = c->async_error;
	} else if (c->report_in_progress) {
		*asyncError = ncclInProgress;
		c->report_in_progress = false;
	} else {
		*asyncError = ncclSuccess;
	}
	return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	ncclComm *c = find_comm(comm);

	if (!c || !count)
		return complain(ncclInvalidArgument, "ncclCommCount", "%s",
				!c ? "not a live communicator" : "count is NULL");
	*count = c->nranks;
	return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	ncclComm *c = find_comm(comm);

	if (!c || !rank)
		return complain(ncclInvalidArgument, "ncclCommUserRank", "%s",
				!c ? "not a live communicator" : "rank is NULL");
	*rank = c->rank;
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error";
	case ncclSystemError:
		return "unhandled system error";
	case ncclInternalError:
		return "internal error";
	case ncclInvalidArgument:
		return "invalid argument";
	case ncclInvalidUsage:
		return "invalid usage";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	case ncclInProgress:
		return "NCCL operation in progress";
	case ncclNumResults:
		break;
	}
	return "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm)
{
	(void)comm;
	return last_error;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
			   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
			   cudaStream_t stream)
{
	return collective(coll{coll_kind::allreduce, "ncclAllReduce", (const char *)sendbuff,
			       (char *)recvbuff, count, raw(datatype), raw(op), 0, 0, 0},
			  comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
			       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
			       cudaStream_t stream)
{
	return collective(coll{coll_kind::reduce_scatter, "ncclReduceScatter",
			       (const char *)sendbuff, (char *)recvbuff, recvcount, raw(datatype),
			       raw(op), 0, 0, 0},
			  comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
			   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	return collective(coll{coll_kind::allgather, "ncclAllGather", (const char *)sendbuff,
			       (char *)recvbuff, sendcount, raw(datatype), ncclSum, 0, 0, 0},
			  comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
			   ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
	return collective(coll{coll_kind::broadcast, "ncclBroadcast", (const char *)sendbuff,
			       (char *)recvbuff, count, raw(datatype), ncclSum, root, 0, 0},
			  comm, stream);
}

} /* extern "C" */

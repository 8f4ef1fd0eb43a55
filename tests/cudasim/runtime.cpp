/* cudasim's CUDA runtime: devices, memory, streams, events and kernel
 * launches, on the CPU (README.md says what it checks and what it cannot).
 *
 * Device memory is host memory that the registry below knows, so a copy
 * or a kernel argument that strays outside an allocation is caught where a
 * GPU would fault or silently corrupt. Work on a stream is a queue of
 * closures; CUDASIM_SCHED decides when they run (see cudasim.h). */
#include "cudasim.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <sys/mman.h>
#include <ucontext.h>
#if defined(__x86_64__)
#define CUDASIM_FAST_SWITCH 1
#else
#define CUDASIM_FAST_SWITCH 0
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1 /* clang says it this way */
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && CUDASIM_FAST_SWITCH
#include <sanitizer/common_interface_defs.h>
/* AddressSanitizer follows the fibers' stacks through these */
#define ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define ASAN_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define ASAN_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif
#include <unordered_map>
#include <vector>
/* as cuda_runtime.h declares cur: cudasim links only into programs */
#define IE_TLS __attribute__((tls_model("initial-exec")))

struct CUstream_st {
	CUstream_st(unsigned f, uint64_t i) : flags(f), id(i)
	{
	}
	unsigned flags;
	uint64_t id;
	uint64_t queued = 0; /* ops ever queued: the seq of the newest */
	uint64_t done = 0;   /* ops run */
	bool running = false;
	struct op {
		uint64_t seq;
		const char *what;
		std::function<void()> fn;
		std::vector<std::pair<CUstream_st *, uint64_t>> deps;
	};
	std::deque<op> q;
};

struct CUevent_st {
	CUstream_st *stream = nullptr; /* of the newest record; NULL: never recorded */
	uint64_t seq = 0;
	unsigned flags = 0;
	/* when the newest record ran, in ns of the host's steady clock (-1:
	 * not yet); shared with the queued record, which may outlive this */
	std::shared_ptr<int64_t> stamp;
};

namespace cudasim
{

thread_local thread_ctx *cur IE_TLS;

namespace
{

std::recursive_mutex mu;
thread_local cudaError_t last_error IE_TLS = cudaSuccess;
thread_local int cur_device IE_TLS = 0;

struct alloc {
	size_t bytes;
	Mem kind;
};
std::map<uintptr_t, alloc> allocs;
size_t device_bytes;

CUstream_st legacy(0, 0);
std::vector<CUstream_st *> streams; /* live ones, in creation order */
std::set<CUevent_st *> events;	    /* live ones */
uint64_t next_stream_id = 1;

enum class sched { eager, lazy, first_late };

sched sched_mode()
{
	static int mode = -1;

	if (mode < 0) {
		const char *s = getenv("CUDASIM_SCHED");

		if (!s || !*s || !strcmp(s, "lazy"))
			mode = (int)sched::lazy;
		else if (!strcmp(s, "eager"))
			mode = (int)sched::eager;
		else if (!strcmp(s, "first-late"))
			mode = (int)sched::first_late;
		else
			fatal("CUDASIM_SCHED='%s': use lazy, first-late or eager", s);
	}
	return (sched)mode;
}

/* Whether s runs its work as soon as it is queued. */
bool runs_at_once(const CUstream_st *s)
{
	switch (sched_mode()) {
	case sched::eager:
		return true;
	case sched::first_late:
		return s != &legacy && s->id != 1;
	case sched::lazy:
		break;
	}
	return false;
}

size_t total_memory()
{
	return (size_t)env_positive("CUDASIM_MEMORY_MB", 16384) << 20;
}

/* Devices that CUDA_VISIBLE_DEVICES leaves of the CUDASIM_DEVICES there
 * are; like CUDA, the list ends at the first entry that is not a device. */
int visible_devices()
{
	int n = (int)env_positive("CUDASIM_DEVICES", 1);
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	int count = 0;

	if (!vis)
		return n;
	for (const char *p = vis; *p;) {
		char *end;
		long v = strtol(p, &end, 10);

		if (end == p || v < 0 || v >= n)
			break;
		count++;
		p = end;
		if (*p != ',')
			break;
		p++;
	}
	return count;
}

const alloc *find(const void *p, uintptr_t *base)
{
	uintptr_t a = (uintptr_t)p;
	auto it = allocs.upper_bound(a);

	if (it == allocs.begin())
		return nullptr;
	--it;
	if (a >= it->first + it->second.bytes)
		return nullptr;
	*base = it->first;
	return &it->second;
}

CUstream_st *resolve(cudaStream_t s)
{
	return s ? s : &legacy;
}

bool blocking(const CUstream_st *s)
{
	return !(s->flags & cudaStreamNonBlocking);
}

void run_until(CUstream_st *s, uint64_t seq);

void run_op(CUstream_st *s)
{
	CUstream_st::op op = std::move(s->q.front());

	s->q.pop_front();
	for (auto &d : op.deps)
		run_until(d.first, d.second);
	op.fn();
	s->done = op.seq;
}

/* Runs s's queue up to and including op seq, and first whatever each op
 * waits for. */
void run_until(CUstream_st *s, uint64_t seq)
{
	if (s->done >= seq)
		return;
	if (s->running)
		fatal("a stream waits for its own later work (a cycle of cudaStreamWaitEvent): "
		      "a GPU would hang here");
	s->running = true;
	while (s->done < seq && !s->q.empty())
		run_op(s);
	s->running = false;
}

void run_all()
{
	/* newest stream first: work that another stream should have waited
	 * for runs as late as it can */
	for (size_t i = streams.size(); i-- > 0;)
		run_until(streams[i], streams[i]->queued);
	run_until(&legacy, legacy.queued);
}

bool stream_known(const CUstream_st *s)
{
	if (s == &legacy)
		return true;
	for (auto *t : streams)
		if (t == s)
			return true;
	return false;
}

} // namespace

static void vnote(const char *fmt, va_list ap)
{
	fputs("cudasim: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vnote(fmt, ap);
	va_end(ap);
}

[[noreturn]] void fatal(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	va_start(ap, fmt);
	vnote(fmt, ap);
	va_end(ap);
	abort();
}

int64_t env_positive(const char *name, int64_t def)
{
	const char *s = getenv(name);
	char *end;
	long long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v <= 0)
		fatal("%s='%s' is not a positive number", name, s);
	return v;
}

cudaError_t set_error(cudaError_t err)
{
	if (err != cudaSuccess)
		last_error = err;
	return err;
}

/* the kernels' conversions (cuda_bf16.h), on raw bits */
float bf16_to_float(uint16_t h)
{
	return __bfloat162float(__nv_bfloat16{h});
}

uint16_t float_to_bf16(float f)
{
	return __float2bfloat16(f).x;
}

bool stream_valid(cudaStream_t stream)
{
	std::lock_guard<std::recursive_mutex> g(mu);

	return stream_known(resolve(stream));
}

Mem kind(const void *p)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	uintptr_t base;
	const alloc *a = find(p, &base);

	return a ? a->kind : Mem::unknown;
}

bool device_range(const void *p, size_t bytes)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	uintptr_t base;
	const alloc *a = find(p, &base);

	return a && a->kind == Mem::device && (uintptr_t)p - base + bytes <= a->bytes;
}

/* enqueue(), plus a wait for stream after's op seq (after NULL: none). */
static cudaError_t enqueue_after(cudaStream_t stream, const char *what, std::function<void()> fn,
				 CUstream_st *after, uint64_t seq)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	CUstream_st *s = resolve(stream);
	CUstream_st::op op;

	if (!stream_known(s))
		return set_error(cudaErrorInvalidResourceHandle);
	op.seq = ++s->queued;
	op.what = what;
	op.fn = std::move(fn);
	if (after)
		op.deps.emplace_back(after, seq);
	/* the legacy stream and the blocking streams order each other */
	if (s == &legacy) {
		for (auto *t : streams)
			if (blocking(t) && t->queued)
				op.deps.emplace_back(t, t->queued);
	} else if (blocking(s) && legacy.queued) {
		op.deps.emplace_back(&legacy, legacy.queued);
	}
	s->q.push_back(std::move(op));
	if (runs_at_once(s))
		run_until(s, s->queued);
	return cudaSuccess;
}

cudaError_t enqueue(cudaStream_t stream, const char *what, std::function<void()> fn)
{
	return enqueue_after(stream, what, std::move(fn), nullptr, 0);
}

/* Kernels: each CUDA thread of a block is a fiber. */
namespace
{

constexpr size_t STACK = 256 << 10;
constexpr size_t GUARD = 4096;

struct barrier {
	int size = 0, arrived = 0;
	uint64_t gen = 0;
};

struct fiber {
#if CUDASIM_FAST_SWITCH
	void *sp;	 /* saved stack pointer while switched out */
	void *asan_fake; /* AddressSanitizer's fake stack while switched out */
#else
	ucontext_t uc;
#endif
	thread_ctx ctx;
	char *stack = nullptr;
	bool done = false;
	barrier *wait = nullptr; /* the barrier it waits at, of generation wait_gen */
	uint64_t wait_gen = 0;
	/* its values for shuffles of even and odd number: one barrier per
	 * shuffle suffices, as a lane can write a slot again only two
	 * shuffles on, after every lane has passed the shuffle between
	 * (and so has read the slot) */
	unsigned char slot[2][16];
	unsigned shuffles = 0; /* shuffles it has entered */
};

struct block_run {
	const char *name;
	const std::function<void()> *body;
	std::vector<fiber> fibers;
	barrier block_bar;
	std::vector<barrier> warp_bar;
#if CUDASIM_FAST_SWITCH
	void *sched_sp;
	void *sched_fake;
	const void *sched_bottom; /* the scheduler's stack, for AddressSanitizer */
	size_t sched_size;
#else
	ucontext_t sched;
#endif
	fiber *running = nullptr;
	bool used_barrier = false;
	bool direct = false; /* threads run one after another, no fibers */
};

thread_local block_run *cur_block IE_TLS;
std::vector<char *> stack_pool;
std::unordered_map<std::string, bool> uses_barriers; /* learned per kernel */

bool always_fibers()
{
	const char *s = getenv("CUDASIM_FIBERS");

	return s && !strcmp(s, "always");
}

/* f is the CUDA thread that runs now. */
void run_as(block_run *b, fiber *f)
{
	b->running = f;
	cur = &f->ctx;
}

bool runnable(const fiber &f)
{
	return !f.done && (!f.wait || f.wait->gen != f.wait_gen);
}

/* The fiber after f, in thread order and round again, that can run; NULL
 * when none can (every one finished, or a hang). Its wait is over. */
fiber *next_runnable(block_run *b, fiber *f)
{
	size_t n = b->fibers.size(), i = (size_t)(f - b->fibers.data());

	for (size_t k = 1; k <= n; k++) {
		fiber *g = &b->fibers[(i + k) % n];

		if (runnable(*g)) {
			g->wait = nullptr;
			return g;
		}
	}
	return nullptr;
}

/* A block's fibers pass the CPU from one to the next directly: a fiber
 * that waits or finishes switches to the next one that can run, and only
 * when none can does the scheduler (run_block) get it back. */
#if CUDASIM_FAST_SWITCH
/* Saves the callee-saved registers and the floating-point control words
 * (MXCSR, x87: callee-saved too in the SysV ABI) on the current stack,
 * stores the stack pointer in *save and continues on the stack to, where
 * the same was done: a switch costs a few instructions, where swapcontext
 * makes a system call (a training step switches millions of times). */
extern "C" void cudasim_switch(void **save, void *to);
asm(".text\n"
    ".globl cudasim_switch\n"
    ".type cudasim_switch, @function\n"
    "cudasim_switch:\n"
    "\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
    "\tsubq $8, %rsp\n\tstmxcsr (%rsp)\n\tfnstcw 4(%rsp)\n"
    "\tmovq %rsp, (%rdi)\n"
    "\tmovq %rsi, %rsp\n"
    "\tldmxcsr (%rsp)\n\tfldcw 4(%rsp)\n\taddq $8, %rsp\n"
    "\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
    "\tret\n"
    ".size cudasim_switch, .-cudasim_switch\n");

/* From fiber f to fiber g, or to the scheduler when g is NULL. save:
 * where f's AddressSanitizer fake stack is kept while it is switched out;
 * NULL when f has finished (its stack ends). Returns when f runs again. */
void leave(block_run *b, fiber *f, fiber *g, void **save)
{
	if (g) {
		run_as(b, g);
		ASAN_START(save, g->stack, STACK);
		cudasim_switch(&f->sp, g->sp);
	} else {
		ASAN_START(save, b->sched_bottom, b->sched_size);
		cudasim_switch(&f->sp, b->sched_sp);
	}
	ASAN_FINISH(f->asan_fake, nullptr, nullptr);
}

[[noreturn]] void fiber_main()
{
	block_run *b = cur_block;
	fiber *f = b->running;

	if (f == &b->fibers[0]) /* the scheduler entered it: its stack is known */
		ASAN_FINISH(nullptr, &b->sched_bottom, &b->sched_size);
	else
		ASAN_FINISH(nullptr, nullptr, nullptr);
	(*b->body)();
	f->done = true;
	leave(b, f, next_runnable(b, f), nullptr);
	fatal("a finished fiber was resumed");
}

/* A stack that cudasim_switch enters at fiber_main: the default control
 * words (MXCSR 0x1f80, x87 0x037f), six zeroed registers, then fiber_main
 * as the return address, with the alignment that a call would leave. */
void fiber_init(fiber *f)
{
	uintptr_t top = ((uintptr_t)f->stack + STACK) & ~(uintptr_t)15;
	void **sp = (void **)top;
	uint32_t words[2] = {0x1f80, 0x037f};

	*--sp = nullptr; /* fiber_main's own return address: never used */
	*--sp = (void *)fiber_main;
	for (int i = 0; i < 6; i++)
		*--sp = nullptr;
	--sp;
	memcpy(sp, words, sizeof(words));
	f->sp = sp;
}

void to_fiber(block_run *b, fiber *f)
{
	ASAN_START(&b->sched_fake, f->stack, STACK);
	cudasim_switch(&b->sched_sp, f->sp);
	ASAN_FINISH(b->sched_fake, nullptr, nullptr);
}

/* Fiber f waits: the next one runs. */
void wait_here(block_run *b, fiber *f)
{
	leave(b, f, next_runnable(b, f), &f->asan_fake);
}
#else
void fiber_main()
{
	block_run *b = cur_block;
	fiber *f = b->running, *g;

	(*b->body)();
	f->done = true;
	g = next_runnable(b, f);
	if (g) {
		run_as(b, g);
		setcontext(&g->uc);
	}
	/* none can run: back to the scheduler through uc_link */
}

void fiber_init(fiber *f)
{
	block_run *b = cur_block;

	getcontext(&f->uc);
	f->uc.uc_stack.ss_sp = f->stack;
	f->uc.uc_stack.ss_size = STACK;
	f->uc.uc_link = &b->sched;
	makecontext(&f->uc, fiber_main, 0);
}

void to_fiber(block_run *b, fiber *f)
{
	swapcontext(&b->sched, &f->uc);
}

void wait_here(block_run *b, fiber *f)
{
	fiber *g = next_runnable(b, f);

	if (g) {
		run_as(b, g);
		swapcontext(&f->uc, &g->uc);
	} else {
		swapcontext(&f->uc, &b->sched);
	}
}
#endif

unsigned linear_tid(const thread_ctx &c)
{
	return c.thread_idx.x + c.block_dim.x * (c.thread_idx.y + c.block_dim.y * c.thread_idx.z);
}

void arrive(block_run *b, barrier *bar, const char *what)
{
	fiber *f = b->running;

	if (b->direct)
		fatal("kernel %s reached %s on a path its first launch did not take; run with "
		      "CUDASIM_FIBERS=always",
		      b->name, what);
	b->used_barrier = true;
	if (++bar->arrived == bar->size) {
		bar->arrived = 0;
		bar->gen++;
		return;
	}
	f->wait = bar;
	f->wait_gen = bar->gen;
	wait_here(b, f);
}

void run_block(block_run *b, dim3 grid, dim3 block, uint3 bidx)
{
	size_t n = (size_t)block.x * block.y * block.z;

	for (size_t t = 0; t < n; t++) {
		thread_ctx &c = b->fibers[t].ctx;

		c.thread_idx = {(unsigned)(t % block.x), (unsigned)(t / block.x % block.y),
				(unsigned)(t / ((size_t)block.x * block.y))};
		c.block_idx = bidx;
		c.block_dim = block;
		c.grid_dim = grid;
	}
	if (b->direct) {
		for (size_t t = 0; t < n; t++) {
			run_as(b, &b->fibers[t]);
			(*b->body)();
		}
		return;
	}
	b->block_bar = barrier{(int)n, 0, 0};
	for (size_t w = 0; w < b->warp_bar.size(); w++)
		b->warp_bar[w] = barrier{(int)std::min<size_t>(32, n - w * 32), 0, 0};
	for (size_t t = 0; t < n; t++) {
		fiber &f = b->fibers[t];

		f.done = false;
		f.wait = nullptr;
		f.shuffles = 0;
		fiber_init(&f);
	}
	run_as(b, &b->fibers[0]);
	to_fiber(b, &b->fibers[0]);
	/* back when no fiber can run */
	size_t at_block = 0, finished = 0;

	for (auto &f : b->fibers)
		if (f.done)
			finished++;
		else if (f.wait == &b->block_bar)
			at_block++;
	if (finished < n)
		fatal("kernel %s, block (%u,%u,%u): %zu of %zu threads wait at __syncthreads, "
		      "%zu finished, the rest wait in a warp shuffle: a GPU would hang or "
		      "misbehave",
		      b->name, bidx.x, bidx.y, bidx.z, at_block, n, finished);
}

void run_grid(const char *name, dim3 grid, dim3 block, const std::function<void()> &body)
{
	size_t n = (size_t)block.x * block.y * block.z;
	block_run b;
	auto known = uses_barriers.find(name);

	b.name = name;
	b.body = &body;
	b.direct = !always_fibers() && known != uses_barriers.end() && !known->second;
	b.fibers.resize(n);
	b.warp_bar.resize((n + 31) / 32);
	if (!b.direct) {
		while (stack_pool.size() < n) {
			/* a guard page below each stack: an overflow faults */
			char *s = (char *)mmap(nullptr, STACK + GUARD, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

			if (s == MAP_FAILED || mprotect(s, GUARD, PROT_NONE))
				fatal("cannot map fiber stacks: %s", strerror(errno));
			stack_pool.push_back(s + GUARD);
		}
		for (size_t t = 0; t < n; t++)
			b.fibers[t].stack = stack_pool[t];
	}
	block_run *saved = cur_block;
	cur_block = &b;
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++)
				run_block(&b, grid, block, uint3{x, y, z});
	cur_block = saved;
	cur = nullptr;
	if (!b.direct)
		uses_barriers[name] = b.used_barrier;
}

} // namespace

void sync_block()
{
	block_run *b = cur_block;

	arrive(b, &b->block_bar, "__syncthreads");
}

void shfl_xor(unsigned mask, const void *v, void *out, size_t bytes, int lanemask)
{
	block_run *b = cur_block;
	unsigned tid = linear_tid(*cur);
	unsigned w = tid / 32, lane = tid % 32;
	barrier *bar;
	unsigned partner;
	unsigned full;

	if (b->direct)
		arrive(b, nullptr, "a warp shuffle");
	bar = &b->warp_bar[w];
	full = bar->size == 32 ? 0xffffffffu : (1u << bar->size) - 1;
	if (mask != full)
		fatal("kernel %s: __shfl_xor_sync with mask %#x in a warp of %d threads (cudasim "
		      "runs only whole-warp shuffles)",
		      b->name, mask, bar->size);
	if (bytes > sizeof(b->running->slot[0]))
		fatal("kernel %s: shuffle of a %zu-byte value", b->name, bytes);
	fiber *me = b->running;
	unsigned k = me->shuffles++;

	memcpy(me->slot[k & 1], v, bytes);
	arrive(b, bar, "a warp shuffle");
	partner = lane ^ (unsigned)lanemask;
	if ((int)partner >= bar->size)
		partner = lane;
	memcpy(out, b->fibers[w * 32 + partner].slot[k & 1], bytes);
}

bool kernel_pointer_ok(const char *kernel, int i, const void *p)
{
	if (!p || kind(p) != Mem::unknown)
		return true;
	note("kernel %s: argument %d (%p) is not device or pinned memory: a GPU would fault",
	     kernel, i, p);
	set_error(cudaErrorIllegalAddress);
	return false;
}

void launch(const char *name, dim3 grid, dim3 block, cudaStream_t stream,
	    std::function<void()> body)
{
	size_t threads = (size_t)block.x * block.y * block.z;

	if (!threads || threads > 1024 || block.z > 64 || !grid.x || !grid.y || !grid.z ||
	    grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
		note("kernel %s: bad launch configuration grid (%u,%u,%u) block (%u,%u,%u)", name,
		     grid.x, grid.y, grid.z, block.x, block.y, block.z);
		set_error(cudaErrorInvalidConfiguration);
		return;
	}
	enqueue(stream, name, [name, grid, block, body] { run_grid(name, grid, block, body); });
}

} // namespace cudasim

using namespace cudasim;

extern "C" {

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
#define N(x)    \
	case x: \
		return #x
		N(cudaSuccess);
		N(cudaErrorInvalidValue);
		N(cudaErrorMemoryAllocation);
		N(cudaErrorInitializationError);
		N(cudaErrorInvalidConfiguration);
		N(cudaErrorInvalidDevicePointer);
		N(cudaErrorInvalidMemcpyDirection);
		N(cudaErrorNoDevice);
		N(cudaErrorInvalidDevice);
		N(cudaErrorInvalidResourceHandle);
		N(cudaErrorNotReady);
		N(cudaErrorIllegalAddress);
		N(cudaErrorLaunchFailure);
#undef N
	}
	return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return "no error";
	case cudaErrorInvalidValue:
		return "invalid argument";
	case cudaErrorMemoryAllocation:
		return "out of memory";
	case cudaErrorInitializationError:
		return "initialization error";
	case cudaErrorInvalidConfiguration:
		return "invalid configuration argument";
	case cudaErrorInvalidDevicePointer:
		return "invalid device pointer";
	case cudaErrorInvalidMemcpyDirection:
		return "invalid copy direction for memcpy";
	case cudaErrorNoDevice:
		return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice:
		return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle:
		return "invalid resource handle";
	case cudaErrorNotReady:
		return "device not ready";
	case cudaErrorIllegalAddress:
		return "an illegal memory access was encountered";
	case cudaErrorLaunchFailure:
		return "unspecified launch failure";
	}
	return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	last_error = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = visible_devices();
	if (!*count)
		return set_error(cudaErrorNoDevice);
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	if (device < 0 || device >= visible_devices())
		return set_error(cudaErrorInvalidDevice);
	cur_device = device;
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
	*device = cur_device;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	if (device < 0 || device >= visible_devices())
		return set_error(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "cudasim (CPU emulator, not a GPU)");
	prop->totalGlobalMem = total_memory();
	prop->sharedMemPerBlock = 48 << 10;
	prop->warpSize = 32;
	prop->maxThreadsPerBlock = 1024;
	prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
	prop->maxThreadsDim[2] = 64;
	prop->maxGridSize[0] = 0x7fffffff;
	prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
	prop->major = 9;
	prop->minor = 0;
	prop->multiProcessorCount = 1;
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	std::lock_guard<std::recursive_mutex> g(mu);

	run_all();
	return last_error;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
	std::lock_guard<std::recursive_mutex> g(mu);

	*total_bytes = total_memory();
	*free_bytes = *total_bytes - device_bytes;
	return cudaSuccess;
}

static cudaError_t alloc_mem(void **ptr, size_t size, Mem kind)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	size_t rounded = (size + 255) & ~(size_t)255;
	void *p;

	*ptr = nullptr;
	if (kind == Mem::device &&
	    (size > total_memory() || device_bytes + rounded > total_memory()))
		return set_error(cudaErrorMemoryAllocation);
	if (!size)
		return cudaSuccess;
	/* the exact size: under AddressSanitizer a kernel or copy that runs
	 * past the end is caught at once */
	if (posix_memalign(&p, 256, size))
		return set_error(cudaErrorMemoryAllocation);
	/* device memory starts as NaNs, so a read before a write shows */
	memset(p, 0xff, size);
	allocs[(uintptr_t)p] = alloc{size, kind};
	if (kind == Mem::device)
		device_bytes += rounded;
	*ptr = p;
	return cudaSuccess;
}

static cudaError_t free_mem(void *ptr, Mem kind, const char *fn)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	auto it = allocs.find((uintptr_t)ptr);

	if (!ptr)
		return cudaSuccess;
	if (it == allocs.end() || it->second.kind != kind) {
		note("%s(%p): not the start of a live %s allocation", fn, ptr,
		     kind == Mem::device ? "device" : "pinned host");
		return set_error(cudaErrorInvalidValue);
	}
	/* cudaFree and cudaFreeHost wait for the device */
	run_all();
	if (kind == Mem::device)
		device_bytes -= (it->second.bytes + 255) & ~(size_t)255;
	memset(ptr, 0xff, it->second.bytes);
	allocs.erase(it);
	free(ptr);
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
	return alloc_mem(ptr, size, Mem::device);
}

cudaError_t cudaFree(void *ptr)
{
	return free_mem(ptr, Mem::device, "cudaFree");
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return alloc_mem(ptr, size, Mem::pinned);
}

cudaError_t cudaFreeHost(void *ptr)
{
	return free_mem(ptr, Mem::pinned, "cudaFreeHost");
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr)
{
	Mem k = kind(ptr);

	memset(attr, 0, sizeof(*attr));
	attr->type = k == Mem::device	? cudaMemoryTypeDevice
		     : k == Mem::pinned ? cudaMemoryTypeHost
					: cudaMemoryTypeUnregistered;
	attr->device = cur_device;
	if (k == Mem::device)
		attr->devicePointer = (void *)ptr;
	else
		attr->hostPointer = (void *)ptr;
	return cudaSuccess;
}

namespace
{

/* One side of a copy: device memory (which must hold the whole span),
 * pinned host memory, or pageable host memory. */
enum class side { device, pinned, pageable };

const char *side_name(side s)
{
	return s == side::device ? "device" : s == side::pinned ? "pinned host" : "pageable host";
}

cudaError_t classify(const char *fn, const char *which, const void *p, size_t span, side *out)
{
	uintptr_t base;
	const alloc *a;

	std::lock_guard<std::recursive_mutex> g(mu);
	a = find(p, &base);
	if (!a) {
		*out = side::pageable;
		return cudaSuccess;
	}
	if ((uintptr_t)p - base + span > a->bytes) {
		note("%s: %s range [%p, +%zu) runs past its allocation of %zu bytes at %#lx", fn,
		     which, p, span, a->bytes, (unsigned long)base);
		return set_error(cudaErrorInvalidValue);
	}
	*out = a->kind == Mem::device ? side::device : side::pinned;
	return cudaSuccess;
}

cudaError_t check_kind(const char *fn, enum cudaMemcpyKind kind, side dst, side src)
{
	bool dd = dst == side::device, sd = src == side::device;
	bool ok;

	switch (kind) {
	case cudaMemcpyHostToHost:
		ok = !dd && !sd;
		break;
	case cudaMemcpyHostToDevice:
		ok = dd && !sd;
		break;
	case cudaMemcpyDeviceToHost:
		ok = !dd && sd;
		break;
	case cudaMemcpyDeviceToDevice:
		ok = dd && sd;
		break;
	case cudaMemcpyDefault:
		return cudaSuccess;
	default:
		return set_error(cudaErrorInvalidMemcpyDirection);
	}
	if (!ok) {
		note("%s: kind %d copies from %s memory to %s memory", fn, (int)kind,
		     side_name(src), side_name(dst));
		return set_error(cudaErrorInvalidMemcpyDirection);
	}
	return cudaSuccess;
}

/* A 2-D copy (rows of width bytes; a 1-D copy is one row). As in CUDA,
 * a copy from pageable memory reads the source before the call returns,
 * and a copy to pageable memory is complete when it returns. */
cudaError_t copy2d(const char *fn, void *dst, size_t dpitch, const void *src, size_t spitch,
		   size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream,
		   bool sync)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	side ds, ss;
	cudaError_t rc;
	size_t dspan, sspan;

	if (!width || !height)
		return cudaSuccess;
	if (dpitch < width || spitch < width)
		return set_error(cudaErrorInvalidValue);
	dspan = dpitch * (height - 1) + width;
	sspan = spitch * (height - 1) + width;
	if ((rc = classify(fn, "destination", dst, dspan, &ds)) ||
	    (rc = classify(fn, "source", src, sspan, &ss)) || (rc = check_kind(fn, kind, ds, ss)))
		return rc;
	if (!stream_known(resolve(stream)))
		return set_error(cudaErrorInvalidResourceHandle);

	std::shared_ptr<std::vector<char>> snap;
	const char *from = (const char *)src;
	size_t from_pitch = spitch;

	if (ss == side::pageable) {
		snap = std::make_shared<std::vector<char>>(width * height);
		for (size_t r = 0; r < height; r++)
			memcpy(snap->data() + r * width, (const char *)src + r * spitch, width);
		from = snap->data();
		from_pitch = width;
	}
	rc = enqueue(stream, fn, [=] {
		for (size_t r = 0; r < height; r++)
			memmove((char *)dst + r * dpitch, from + r * from_pitch, width);
		(void)snap;
	});
	if (rc)
		return rc;
	if (sync || ds == side::pageable)
		run_until(resolve(stream), resolve(stream)->queued);
	return cudaSuccess;
}

} // namespace

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return copy2d("cudaMemcpy", dst, count, src, count, count, 1, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	return copy2d("cudaMemcpyAsync", dst, count, src, count, count, 1, kind, stream, false);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
			      size_t width, size_t height, enum cudaMemcpyKind kind,
			      cudaStream_t stream)
{
	return copy2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, stream,
		      false);
}

static cudaError_t memset_on(const char *fn, void *ptr, int value, size_t count,
			     cudaStream_t stream)
{
	if (!count)
		return cudaSuccess;
	if (!device_range(ptr, count)) {
		note("%s(%p, %d, %zu): not inside one device allocation", fn, ptr, value, count);
		return set_error(cudaErrorInvalidValue);
	}
	return enqueue(stream, fn, [=] { memset(ptr, value, count); });
}

cudaError_t cudaMemset(void *ptr, int value, size_t count)
{
	/* asynchronous for device memory, on the legacy stream */
	return memset_on("cudaMemset", ptr, value, count, nullptr);
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
	return memset_on("cudaMemsetAsync", ptr, value, count, stream);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	CUstream_st *s;

	if (flags & ~(unsigned)cudaStreamNonBlocking)
		return set_error(cudaErrorInvalidValue);
	s = new CUstream_st(flags, next_stream_id++);
	streams.push_back(s);
	*stream = s;
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
	return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	std::lock_guard<std::recursive_mutex> g(mu);

	if (!stream || !stream_known(stream))
		return set_error(cudaErrorInvalidResourceHandle);
	/* its work still completes (now); then nothing may point at it:
	 * events recorded on it are complete, and so is what other streams
	 * wait for on it */
	run_until(stream, stream->queued);
	for (auto *e : events)
		if (e->stream == stream)
			e->stream = nullptr;
	std::vector<CUstream_st *> all(streams);

	all.push_back(&legacy);
	for (auto *t : all)
		for (auto &op : t->q)
			for (size_t i = op.deps.size(); i-- > 0;)
				if (op.deps[i].first == stream)
					op.deps.erase(op.deps.begin() + (long)i);
	for (size_t i = 0; i < streams.size(); i++)
		if (streams[i] == stream)
			streams.erase(streams.begin() + (long)i);
	delete stream;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	CUstream_st *s = resolve(stream);

	if (!stream_known(s))
		return set_error(cudaErrorInvalidResourceHandle);
	run_until(s, s->queued);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	CUstream_st *s = resolve(stream);

	if (!stream_known(s))
		return set_error(cudaErrorInvalidResourceHandle);
	if (s->done >= s->queued)
		return cudaSuccess;
	/* not finished yet: let it progress, the next query sees it done */
	run_until(s, s->queued);
	return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	CUstream_st *s = resolve(stream);

	if (!events.count(event) || !stream_known(s))
		return set_error(cudaErrorInvalidResourceHandle);
	if (flags)
		return set_error(cudaErrorInvalidValue);
	if (!event->stream) /* never recorded: nothing to wait for */
		return cudaSuccess;
	return enqueue_after(
		stream, "cudaStreamWaitEvent", [] {}, event->stream, event->seq);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	if (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming))
		return set_error(cudaErrorInvalidValue);
	std::lock_guard<std::recursive_mutex> g(mu);
	*event = new CUevent_st;
	(*event)->flags = flags;
	events.insert(*event);
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	std::lock_guard<std::recursive_mutex> g(mu);

	if (!events.erase(event))
		return set_error(cudaErrorInvalidResourceHandle);
	delete event;
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	std::lock_guard<std::recursive_mutex> g(mu);
	cudaError_t rc;

	if (!events.count(event))
		return set_error(cudaErrorInvalidResourceHandle);
	auto stamp = std::make_shared<int64_t>(-1);
	rc = enqueue(stream, "cudaEventRecord", [stamp] {
		*stamp = std::chrono::duration_cast<std::chrono::nanoseconds>(
				 std::chrono::steady_clock::now().time_since_epoch())
				 .count();
	});
	if (rc)
		return rc;
	event->stamp = stamp;
	event->stream = resolve(stream);
	event->seq = event->stream->queued;
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	std::lock_guard<std::recursive_mutex> g(mu);

	if (!events.count(event))
		return set_error(cudaErrorInvalidResourceHandle);
	if (!event->stream || event->stream->done >= event->seq)
		return cudaSuccess;
	/* the first query of a pending event says "not ready" (the caller's
	 * polling loop runs); the work then completes */
	run_until(event->stream, event->seq);
	return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	std::lock_guard<std::recursive_mutex> g(mu);

	if (!events.count(event))
		return set_error(cudaErrorInvalidResourceHandle);
	if (event->stream)
		run_until(event->stream, event->seq);
	return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	std::lock_guard<std::recursive_mutex> g(mu);

	if (!events.count(start) || !events.count(end) || !start->stamp || !end->stamp ||
	    ((start->flags | end->flags) & cudaEventDisableTiming))
		return set_error(cudaErrorInvalidResourceHandle);
	if (*start->stamp < 0 || *end->stamp < 0)
		return cudaErrorNotReady;
	/* the emulator's clock: when the records ran on the host */
	*ms = (float)((double)(*end->stamp - *start->stamp) / 1e6);
	return cudaSuccess;
}

} /* extern "C" */

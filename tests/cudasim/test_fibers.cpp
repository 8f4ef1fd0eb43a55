/* cudasim's kernel threads: barriers and warp shuffles give what a GPU
 * gives, for whole and partial warps and blocks, however many shuffles
 * run back to back; a block whose threads cannot all pass a barrier is
 * reported, not left to hang. */
#include <cuda_runtime.h>

#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include <cmocka.h>
}

namespace
{

constexpr int ROUNDS = 7;
constexpr int MASKS[ROUNDS] = {1, 16, 2, 8, 4, 16, 1};

/* Each thread: ROUNDS shuffles of its running value with the partner
 * lane, each added in, then the block's sum through shared memory, between
 * barriers. out[t] = the shuffled value, out[n + t] = the block's sum. */
__global__ void shuffle_sum(long *out, int n)
{
	__shared__ long sh[32];
	int t = (int)threadIdx.x, lane = t & 31, wid = t >> 5;
	int nw = ((int)blockDim.x + 31) >> 5;
	int in_warp = n - (t & ~31) < 32 ? n - (t & ~31) : 32; /* the last may be partial */
	unsigned mask = in_warp == 32 ? 0xffffffffu : (1u << in_warp) - 1;
	long v = t + 1;

	for (int r = 0; r < ROUNDS; r++)
		v += __shfl_xor_sync(mask, v, MASKS[r]);
	out[t] = v;
	__syncthreads();
	if (lane == 0)
		sh[wid] = 0;
	__syncthreads();
	atomicAdd(&sh[wid], (long)(t + 1));
	__syncthreads();
	if (t == 0) {
		long s = 0;

		for (int w = 0; w < nw; w++)
			s += sh[w];
		sh[0] = s;
	}
	__syncthreads();
	out[n + t] = sh[0];
}

/* What shuffle_sum's first half gives, computed on the host. */
void expected(long *v, int n)
{
	long next[1024];

	for (int t = 0; t < n; t++)
		v[t] = t + 1;
	for (int r = 0; r < ROUNDS; r++) {
		for (int t = 0; t < n; t++) {
			int base = t & ~31, size = n - base < 32 ? n - base : 32;
			int p = (t - base) ^ MASKS[r];

			next[t] = v[t] + v[p < size ? base + p : t];
		}
		memcpy(v, next, sizeof(long) * (size_t)n);
	}
}

void test_shuffles_and_barriers(void **state)
{
	static const int sizes[] = {1, 5, 31, 32, 33, 64, 100, 256, 1024};

	(void)state;
	for (int n : sizes) {
		long host[2048], want[1024];
		long *d = nullptr;

		assert_int_equal(cudaMalloc((void **)&d, sizeof(long) * 2 * (size_t)n),
				 cudaSuccess);
		for (int launch = 0; launch < 2; launch++) { /* the second knows the kernel */
			memset(host, 0, sizeof(host));
			CUDASIM_LAUNCH(shuffle_sum, 3, n, nullptr, d, n);
			assert_int_equal(cudaGetLastError(), cudaSuccess);
			assert_int_equal(cudaMemcpy(host, d, sizeof(long) * 2 * (size_t)n,
						    cudaMemcpyDeviceToHost),
					 cudaSuccess);
			expected(want, n);
			for (int t = 0; t < n; t++) {
				if (host[t] != want[t] || host[n + t] != (long)n * (n + 1) / 2)
					fail_msg("block of %d, thread %d: %ld and %ld, want %ld "
						 "and %ld",
						 n, t, host[t], host[n + t], want[t],
						 (long)n * (n + 1) / 2);
			}
		}
		assert_int_equal(cudaFree(d), cudaSuccess);
	}
}

/* Thread 0 leaves before the barrier the others wait at. */
__global__ void skips_barrier(int *out)
{
	if (threadIdx.x == 0)
		return;
	__syncthreads();
	out[threadIdx.x] = 1;
}

void test_hang_reported(void **state)
{
	int fds[2];
	pid_t pid;
	char buf[4096];
	ssize_t got, len = 0;
	int status;

	(void)state;
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int *d = nullptr;

		dup2(fds[1], 2);
		signal(SIGABRT, SIG_DFL);
		if (cudaMalloc((void **)&d, sizeof(int) * 64) != cudaSuccess)
			_exit(3);
		CUDASIM_LAUNCH(skips_barrier, 1, 64, nullptr, d);
		cudaDeviceSynchronize();
		_exit(0); /* not reached: cudasim aborts */
	}
	close(fds[1]);
	while ((got = read(fds[0], buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += got;
	buf[len] = 0;
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
	if (!strstr(buf, "kernel skips_barrier, block (0,0,0): 63 of 64 threads wait at "
			 "__syncthreads, 1 finished"))
		fail_msg("cudasim said: %s", buf);
}

} // namespace

int main()
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shuffles_and_barriers),
		cmocka_unit_test(test_hang_reported),
	};

	return cmocka_run_group_tests(tests, nullptr, nullptr);
}

/* bench_allreduce: all-reduce bandwidth of crun-train's comm backend.
 *
 * Start it as WORLD_SIZE processes with RANK, WORLD_SIZE and the store's
 * environment (CRUN_STORE, CRUN_RUN_ID), as crun does for workers, or
 * through scripts/bench/collectives. For each size (bytes, from --min to
 * --max multiplying by --factor) it runs --warmup all-reduces, checks the
 * result of the first one, then times up to --iters all-reduces (fewer
 * when they would take longer than --budget), each after a barrier, and
 * rank 0 prints one line per size:
 *
 *   bytes  median_us  algbw_GBps  busbw_GBps
 *
 * with the nccl-tests definitions: algbw = bytes / time and busbw =
 * algbw * 2(n-1)/n (the bytes each rank must send and receive in a
 * bandwidth-optimal all-reduce). Exit status: 0, 1 when a collective
 * failed or gave a wrong result, 2 for bad arguments. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "trainer/comm.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int size_arg(const char *opt, const char *v, uint64_t *out)
{
	char err[160];

	if (crun__parse_size(v, out, err, sizeof(err)) < 0 || *out < 4) {
		crun__error("invalid value '%s' for %s: %s", v, opt,
			    *out < 4 ? "expected at least 4 bytes" : err);
		return -EINVAL;
	}
	return 0;
}

static int int_arg(const char *opt, const char *v, int64_t min, int64_t max, int64_t *out)
{
	char err[160];

	if (crun__parse_int64(v, min, max, out, err, sizeof(err)) < 0) {
		crun__error("invalid value '%s' for %s: %s", v, opt, err);
		return -EINVAL;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_allreduce [--min SIZE] [--max SIZE] [--factor N] [--iters N]\n"
		   "                       [--warmup N] [--budget MS]\n"
		   "defaults: --min 1M --max 256M --factor 4 --iters 20 --warmup 2 "
		   "--budget 4000\n");
}

int main(int argc, char **argv)
{
	uint64_t min = 1 << 20, max = 256u << 20;
	int64_t factor = 4, iters = 20, warmup = 2, budget = 4000;
	struct crun__comm_opts o;
	struct crun__comm *comm;
	char err[512];
	int rc = 0;

	crun__log_init("bench_allreduce", CRUN_LOG_WARN);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!v) {
			crun__error("option '%s' needs a value", a);
			return 2;
		}
		if (!strcmp(a, "--min"))
			bad = size_arg(a, v, &min);
		else if (!strcmp(a, "--max"))
			bad = size_arg(a, v, &max);
		else if (!strcmp(a, "--factor"))
			bad = int_arg(a, v, 2, 1024, &factor);
		else if (!strcmp(a, "--iters"))
			bad = int_arg(a, v, 1, 100000, &iters);
		else if (!strcmp(a, "--warmup"))
			bad = int_arg(a, v, 1, 100000, &warmup);
		else if (!strcmp(a, "--budget"))
			bad = int_arg(a, v, 0, 3600000, &budget);
		else {
			crun__error("unknown option '%s'", a);
			usage(stderr);
			return 2;
		}
		if (bad)
			return 2;
		i++;
	}
	if (crun__comm_opts_from_env(&o, err, sizeof(err)) < 0) {
		crun__error("%s", err);
		return 2;
	}
	comm = crun__comm_create(&o, err, sizeof(err));
	if (!comm) {
		crun__error("%s", err);
		return 1;
	}
	if (o.rank == 0)
		printf("# ranks=%d backend=%s\n# %12s %12s %11s %11s\n", o.world_size,
		       crun__comm_backend(comm), "bytes", "median_us", "algbw_GBps", "busbw_GBps");
	for (uint64_t bytes = min; bytes <= max && rc == 0; bytes *= (uint64_t)factor) {
		size_t count = bytes / sizeof(float);
		float *buf = malloc(count * sizeof(float));
		double *t = malloc((size_t)iters * sizeof(double)), n_iters;
		int n = o.world_size;
		uint64_t t0;

		if (!buf || !t) {
			crun__error("out of memory for %llu bytes", (unsigned long long)bytes);
			rc = 1;
			free(buf);
			free(t);
			break;
		}
		for (size_t i = 0; i < count; i++)
			buf[i] = (float)(o.rank + 1);
		t0 = crun__now_ns();
		for (int64_t w = 0; w < warmup && rc == 0; w++) {
			if (crun__comm_allreduce_f32(comm, buf, count) < 0) {
				rc = 1;
				break;
			}
			if (w == 0 && (buf[0] != (float)(n * (n + 1) / 2) ||
				       buf[count - 1] != (float)(n * (n + 1) / 2))) {
				crun__error("wrong all-reduce result %g, expected %d", buf[0],
					    n * (n + 1) / 2);
				rc = 1;
			}
			memset(buf, 0, count * sizeof(float));
		}
		/* Everybody runs as many iterations as rank 0 decides. */
		n_iters = (double)iters;
		if (rc == 0 && budget > 0) {
			double per = (double)(crun__now_ns() - t0) / 1e6 / (double)warmup;

			if (per * n_iters > (double)budget)
				n_iters =
					(double)budget / per < 3 ? 3 : (int)((double)budget / per);
			if (crun__comm_broadcast(comm, &n_iters, sizeof(n_iters), 0) < 0)
				rc = 1;
		}
		for (int k = 0; k < (int)n_iters && rc == 0; k++) {
			uint64_t s;

			if (crun__comm_barrier(comm) < 0) {
				rc = 1;
				break;
			}
			s = crun__now_ns();
			if (crun__comm_allreduce_f32(comm, buf, count) < 0) {
				rc = 1;
				break;
			}
			t[k] = (double)(crun__now_ns() - s) / 1e3;
		}
		if (rc == 0 && o.rank == 0) {
			double med, alg;

			qsort(t, (size_t)n_iters, sizeof(double), cmp_double);
			med = t[(size_t)n_iters / 2];
			alg = (double)bytes / med / 1e3;
			printf("  %12llu %12.1f %11.3f %11.3f\n", (unsigned long long)bytes, med,
			       alg, alg * 2.0 * (n - 1) / n);
			fflush(stdout);
		}
		free(buf);
		free(t);
	}
	if (rc)
		crun__error("rank %d: %s", o.rank, crun__comm_errmsg(comm));
	crun__comm_destroy(comm);
	return rc;
}

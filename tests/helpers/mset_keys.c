/* crun-test-mset: fills a store run with many keys, fast.
 *
 *   crun-test-mset N
 *
 * Connects as libcrun's workers do (CRUN_STORE, CRUN_RUN_ID, CRUN_TOKEN,
 * ..., crun_store_opts_from_env) and sets the keys k0000000 .. k(N-1),
 * each to "v", with one MSET per 10,000 keys. Exits 0 when every MSET
 * succeeded, else 1 with a line on stderr. */
#include <stdio.h>
#include <stdlib.h>

#include "crun/store.h"

enum { BATCH = 10000 };

int main(int argc, char **argv)
{
	static char names[BATCH][24];
	static const char *keys[BATCH];
	static const void *vals[BATCH];
	static size_t lens[BATCH];
	struct crun_store_opts opts;
	struct crun_store *s;
	char err[256];
	long n;
	int rc;

	if (argc != 2 || (n = strtol(argv[1], NULL, 10)) < 0) {
		fprintf(stderr, "usage: crun-test-mset N\n");
		return 2;
	}
	if (crun_store_opts_from_env_err(&opts, err, sizeof(err)) < 0) {
		fprintf(stderr, "crun-test-mset: %s\n", err);
		return 1;
	}
	s = crun_store_create(&opts);
	if (!s || (rc = crun_store_connect(s)) < 0) {
		fprintf(stderr, "crun-test-mset: cannot connect: %s\n",
			s ? crun_store_errmsg(s) : "out of memory");
		crun_store_destroy(s);
		return 1;
	}
	for (long i = 0; i < n; i += BATCH) {
		size_t k = 0;

		for (long j = i; j < n && j < i + BATCH; j++, k++) {
			snprintf(names[k], sizeof(names[k]), "k%07ld", j);
			keys[k] = names[k];
			vals[k] = "v";
			lens[k] = 1;
		}
		rc = crun_store_mset(s, keys, vals, lens, k, 0);
		if (rc < 0) {
			fprintf(stderr, "crun-test-mset: mset at key %ld: %s\n", i,
				crun_store_errmsg(s));
			crun_store_destroy(s);
			return 1;
		}
	}
	crun_store_destroy(s);
	return 0;
}

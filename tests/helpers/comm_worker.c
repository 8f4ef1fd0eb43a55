/* crun-test-comm DIR: a worker that does nothing but set up crun-train's
 * communicator, over and over, so that a signal at any moment most likely
 * lands in the middle of a set-up.
 *
 * Writes its pid to DIR/RANK.pid (a new file renamed into place) before
 * the first set-up, then loops: create the communicator from the
 * environment (crun's RANK, WORLD_SIZE, CRUN_STORE, ...), all-reduce one
 * float, destroy it. After a set-up in which this rank mapped a ring of
 * shared memory (seen in /proc/self/maps) it creates DIR/shm-seen, so a
 * test knows the shared-memory path ran. Stops after 30 s; exits 1 when a
 * set-up fails. */
#include "trainer/comm.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool maps_a_ring(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "crun-comm") != NULL;
	fclose(f);
	return found;
}

static int write_pid(const char *dir, int rank)
{
	char tmp[4096], path[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s/%d.pid.new", dir, rank);
	snprintf(path, sizeof(path), "%s/%d.pid", dir, rank);
	f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "%d\n", (int)getpid());
	if (fclose(f) != 0)
		return -1;
	return rename(tmp, path);
}

int main(int argc, char **argv)
{
	struct crun__comm_opts opts;
	char err[512], path[4096];
	time_t end = time(NULL) + 30;
	bool seen = false;

	if (argc != 2) {
		fprintf(stderr, "usage: crun-test-comm DIR\n");
		return 64;
	}
	if (crun__comm_opts_from_env(&opts, err, sizeof(err)) < 0) {
		fprintf(stderr, "crun-test-comm: %s\n", err);
		return 2;
	}
	if (write_pid(argv[1], opts.rank) < 0) {
		perror("crun-test-comm: cannot write its pid");
		return 1;
	}
	while (time(NULL) < end) {
		struct crun__comm *c = crun__comm_create(&opts, err, sizeof(err));
		float x = 1;

		if (!c) {
			fprintf(stderr, "crun-test-comm: %s\n", err);
			return 1;
		}
		if (!seen && maps_a_ring()) {
			FILE *f;

			snprintf(path, sizeof(path), "%s/shm-seen", argv[1]);
			f = fopen(path, "w");
			if (f)
				fclose(f);
			seen = true;
		}
		if (crun__comm_allreduce_f32(c, &x, 1) < 0) {
			fprintf(stderr, "crun-test-comm: %s\n", crun__comm_errmsg(c));
			crun__comm_destroy(c);
			return 1;
		}
		crun__comm_destroy(c);
	}
	return 0;
}

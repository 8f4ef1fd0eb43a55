/* Runs every file named on the command line, or found in a directory named
 * there, through LLVMFuzzerTestOneInput once: the seed corpus (and any
 * crash file libFuzzer saved) replays in builds without libFuzzer. Exits 1
 * when an input cannot be read or when there was no input at all, so an
 * empty or misplaced corpus fails rather than passes. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Inputs larger than this are not seeds; refuse them rather than guess. */
#define INPUT_MAX_BYTES (16u << 20)

static int run_file(const char *path)
{
	struct stat st;
	uint8_t *buf;
	size_t len = 0;
	int fd, rc = -1;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "replay: cannot open '%s': %s\n", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size > INPUT_MAX_BYTES) {
		fprintf(stderr, "replay: cannot use '%s': not a file of at most %u bytes\n", path,
			INPUT_MAX_BYTES);
		goto out_close_fd;
	}
	/* An exact-size allocation, so ASan catches a read past the input. */
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		fprintf(stderr, "replay: out of memory for '%s'\n", path);
		goto out_close_fd;
	}
	while (len < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + len, (size_t)st.st_size - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			fprintf(stderr, "replay: cannot read '%s': %s\n", path,
				r < 0 ? strerror(errno) : "file shrank");
			goto out_free_buf;
		}
		len += (size_t)r;
	}
	LLVMFuzzerTestOneInput(buf, len);
	rc = 0;
out_free_buf:
	free(buf);
out_close_fd:
	close(fd);
	return rc;
}

static int skip_dots(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

int main(int argc, char **argv)
{
	unsigned long runs = 0, failed = 0;

	for (int i = 1; i < argc; i++) {
		struct dirent **names;
		struct stat st;
		int n;

		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: cannot use '%s': %s\n", argv[i], strerror(errno));
			failed++;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			runs++;
			failed += run_file(argv[i]) < 0;
			continue;
		}
		n = scandir(argv[i], &names, skip_dots, alphasort);
		if (n < 0) {
			fprintf(stderr, "replay: cannot list '%s': %s\n", argv[i], strerror(errno));
			failed++;
			continue;
		}
		for (int j = 0; j < n; j++) {
			char path[4096];

			snprintf(path, sizeof(path), "%s/%s", argv[i], names[j]->d_name);
			if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
				runs++;
				failed += run_file(path) < 0;
			}
			free(names[j]);
		}
		free(names);
	}
	printf("replay: %lu inputs, %lu unreadable\n", runs, failed);
	if (!runs)
		fprintf(stderr, "replay: no inputs found\n");
	return runs && !failed ? 0 : 1;
}

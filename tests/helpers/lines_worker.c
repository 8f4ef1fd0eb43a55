/* crun-test-lines: output that a careless agent would split or mix.
 *
 *   crun-test-lines long N      one line of N bytes, written in pieces
 *   crun-test-lines many K L    K lines of L bytes, each in two writes
 *   crun-test-lines partial T   T without a newline at the end
 *   crun-test-lines both        "out" on stdout and "err" on stderr
 *
 * A line's bytes are all one letter, 'a' + RANK % 26, so a reader can tell
 * whose bytes landed where. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			exit(1);
		p += w;
		n -= (size_t)w;
	}
}

int main(int argc, char **argv)
{
	const char *r = getenv("RANK");
	char c = (char)('a' + (r ? atoi(r) : 0) % 26);

	if (argc == 3 && !strcmp(argv[1], "long")) {
		size_t n = strtoul(argv[2], NULL, 10), chunk = 1000;
		char *buf = malloc(chunk);
		if (!buf)
			return 1;
		memset(buf, c, chunk);
		for (size_t done = 0; done < n; done += chunk) {
			put(1, buf, n - done < chunk ? n - done : chunk);
			if (done % (64 * chunk) == 0)
				usleep(200);
		}
		put(1, "\n", 1);
		free(buf);
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "many")) {
		long k = atol(argv[2]);
		size_t l = strtoul(argv[3], NULL, 10);
		char *buf = malloc(l + 1);
		if (!buf)
			return 1;
		memset(buf, c, l);
		buf[l] = '\n';
		for (long i = 0; i < k; i++) {
			put(1, buf, l / 2);
			sched_yield();
			put(1, buf + l / 2, l - l / 2 + 1);
		}
		free(buf);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "partial")) {
		put(1, argv[2], strlen(argv[2]));
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "both")) {
		put(1, "out\n", 4);
		put(2, "err\n", 4);
		return 0;
	}
	fprintf(stderr, "usage: crun-test-lines long N | many K L | partial TEXT | both\n");
	return 64;
}

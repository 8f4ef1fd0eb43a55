/* crun-test-env: prints its arguments as ARG<i>=<arg> lines, then its
 * whole environment, one KEY=VALUE per line, with one write(2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);

	if (!buf)
		return 1;
	for (int i = 0; i <= argc; i++) {
		const char *line = i < argc ? argv[i] : NULL;
		char tmp[4096];
		size_t n;

		if (i < argc)
			snprintf(tmp, sizeof(tmp), "ARG%d=%s\n", i, line);
		else
			snprintf(tmp, sizeof(tmp), "STDIN_IS_DEVNULL=%d\n",
				 isatty(0) ? 0 : lseek(0, 0, SEEK_END) == 0);
		n = strlen(tmp);
		if (len + n > cap)
			return 1;
		memcpy(buf + len, tmp, n);
		len += n;
	}
	for (char **e = environ; *e; e++) {
		size_t n = strlen(*e);
		if (len + n + 1 > cap) {
			cap = (len + n + 1) * 2;
			buf = realloc(buf, cap);
			if (!buf)
				return 1;
		}
		memcpy(buf + len, *e, n);
		buf[len + n] = '\n';
		len += n + 1;
	}
	for (size_t off = 0; off < len;) {
		ssize_t w = write(1, buf + off, len - off);
		if (w <= 0)
			return 1;
		off += (size_t)w;
	}
	free(buf);
	return 0;
}

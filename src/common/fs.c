/* mkdir -p, atomic replacement of files, PATH search and the program's
 * own directory. The temporary file carries the
 * writer's pid, so writers in different processes never share one, and
 * lies in the target's directory, so the rename never crosses a file
 * system. */
#include "common/fs.h"
#include "common/util.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* After mkdir(p) failed with err: 0 when p is a directory all the same
 * (it existed, or another process made it), -ENOTDIR when it exists as
 * something else, else -err. */
static int existing_dir(const char *p, int err)
{
	struct stat st;

	if (stat(p, &st) < 0)
		return -err;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int crun__mkdir_p(const char *path, mode_t mode)
{
	char *p;
	int rc = 0;

	if (!*path)
		return -ENOENT;
	p = strdup(path);
	if (!p)
		return -ENOMEM;
	for (char *s = p + 1;; s++) {
		char c = *s;

		if (c != '/' && c != '\0')
			continue;
		if (s[-1] != '/') { /* not an empty component of "a//b" or "a/" */
			*s = '\0';
			if (mkdir(p, mode) < 0)
				rc = existing_dir(p, errno);
			*s = c;
			if (rc)
				break;
		}
		if (!c)
			break;
	}
	if (!rc && !p[strspn(p, "/")]) /* only slashes: the root */
		rc = existing_dir(p, EEXIST);
	free(p);
	return rc;
}

int crun__fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0 && errno != EINVAL)
		rc = -errno;
	close(fd);
	return rc;
}

/* The directory that holds path: what precedes its last slash, "/" or ".". */
static int fsync_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	int rc;

	if (!slash)
		return crun__fsync_dir(".");
	if (slash == path)
		return crun__fsync_dir("/");
	dir = strndup(path, (size_t)(slash - path));
	if (!dir)
		return -ENOMEM;
	rc = crun__fsync_dir(dir);
	free(dir);
	return rc;
}

static void atomic_free(struct crun__atomic_file *f)
{
	free(f->path);
	free(f->tmp);
	f->path = NULL;
	f->tmp = NULL;
	f->fd = -1;
}

int crun__atomic_open(struct crun__atomic_file *f, const char *path, mode_t mode)
{
	int rc;

	f->fd = -1;
	f->tmp = NULL;
	f->path = strdup(path);
	if (!f->path || asprintf(&f->tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
		f->tmp = NULL;
		rc = -ENOMEM;
		goto out_free;
	}
	f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (f->fd < 0) {
		rc = -errno;
		goto out_free;
	}
	return 0;
out_free:
	atomic_free(f);
	return rc;
}

int crun__atomic_write(struct crun__atomic_file *f, const void *buf, size_t len)
{
	return crun__write_all(f->fd, buf, len);
}

int crun__atomic_commit(struct crun__atomic_file *f)
{
	int rc = 0;

	if (fsync(f->fd) < 0)
		rc = -errno;
	if (close(f->fd) < 0 && !rc)
		rc = -errno;
	f->fd = -1;
	if (!rc && rename(f->tmp, f->path) < 0)
		rc = -errno;
	if (rc)
		unlink(f->tmp);
	else
		rc = fsync_parent(f->path);
	atomic_free(f);
	return rc;
}

void crun__atomic_abort(struct crun__atomic_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->tmp)
		unlink(f->tmp);
	atomic_free(f);
}

int crun__write_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
	struct crun__atomic_file f;
	int rc = crun__atomic_open(&f, path, mode);

	if (rc)
		return rc;
	rc = crun__atomic_write(&f, data, len);
	if (rc) {
		crun__atomic_abort(&f);
		return rc;
	}
	return crun__atomic_commit(&f);
}

bool crun__is_executable_file(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode) && !access(path, X_OK);
}

int crun__path_search(const char *name, const char *path, char *buf, size_t len)
{
	char dflt[256];

	if (!*name)
		return -ENOENT;
	if (strlen(name) + 3 > len)
		return -ENAMETOOLONG;
	if (strchr(name, '/')) {
		snprintf(buf, len, "%s", name);
		return crun__is_executable_file(buf) ? 0 : -ENOENT;
	}
	if (!path) {
		size_t n = confstr(_CS_PATH, dflt, sizeof(dflt));

		path = n > 0 && n <= sizeof(dflt) ? dflt : "/bin:/usr/bin";
	}
	for (const char *p = path;;) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		int k = n ? snprintf(buf, len, "%.*s/%s", (int)n, p, name)
			  : snprintf(buf, len, "./%s", name);

		if (k > 0 && (size_t)k < len && crun__is_executable_file(buf))
			return 0;
		if (!end)
			break;
		p = end + 1;
	}
	buf[0] = '\0';
	return -ENOENT;
}

int crun__self_exe(char *buf, size_t len)
{
	ssize_t n;

	if (len < 2)
		return -ENAMETOOLONG;
	n = readlink("/proc/self/exe", buf, len);
	if (n < 0)
		return -errno;
	if ((size_t)n >= len) /* readlink truncates without saying so */
		return -ENAMETOOLONG;
	buf[n] = '\0';
	return buf[0] == '/' ? 0 : -EINVAL;
}

int crun__self_dir(char *buf, size_t len)
{
	int rc = crun__self_exe(buf, len);
	char *slash;

	if (rc < 0)
		return rc;
	slash = strrchr(buf, '/');
	*(slash == buf ? slash + 1 : slash) = '\0';
	return 0;
}

int crun__path_join_lexical(const char *dir, const char *rel, char *buf, size_t len)
{
	size_t n = strlen(dir);

	if (n >= len)
		return -ENAMETOOLONG;
	memcpy(buf, dir, n);
	while (n > 1 && buf[n - 1] == '/')
		n--;
	while (*rel) {
		size_t c = strcspn(rel, "/");

		if (c == 2 && !strncmp(rel, "..", 2)) {
			while (n > 0 && buf[n - 1] != '/')
				n--;
			while (n > 1 && buf[n - 1] == '/')
				n--;
		} else if (c && !(c == 1 && rel[0] == '.')) {
			bool root = n == 1 && buf[0] == '/';

			if (n + !root + c >= len)
				return -ENAMETOOLONG;
			if (!root)
				buf[n++] = '/';
			memcpy(buf + n, rel, c);
			n += c;
		}
		rel += c + (rel[c] == '/');
	}
	buf[n] = '\0';
	return 0;
}

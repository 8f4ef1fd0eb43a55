/* Job files: see jobfile.h. The directory checks follow what ssh and
 * systemd do for a per-user runtime directory: ours, a real directory,
 * no access for anyone else. */
#include "common/jobfile.h"

#include "common/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int crun__jobfile_dir(char *out, size_t len, const char *xdg_runtime_dir, uid_t uid)
{
	int n;

	if (xdg_runtime_dir && xdg_runtime_dir[0] == '/')
		n = snprintf(out, len, "%s/crun", xdg_runtime_dir);
	else
		n = snprintf(out, len, "/tmp/crun-%lu", (unsigned long)uid);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static bool plain(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

int crun__jobfile_path(char *out, size_t len, const char *dir, const char *sub, const char *run_id,
		       long pid, const char *ext)
{
	int n = snprintf(out, len, "%s/%s/", dir, sub);
	size_t used;

	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	used = (size_t)n;
	/* A leading dot would hide the file and make "." or "..". */
	for (const unsigned char *p = (const unsigned char *)run_id; *p; p++) {
		bool keep = plain(*p) && !(p == (const unsigned char *)run_id && *p == '.');

		if (used + (keep ? 1 : 3) >= len)
			return -ENAMETOOLONG;
		if (keep)
			out[used++] = (char)*p;
		else
			used += (size_t)snprintf(out + used, 4, "%%%02X", *p);
	}
	n = snprintf(out + used, len - used, ".%ld.%s", pid, ext);
	return n < 0 || (size_t)n >= len - used ? -ENAMETOOLONG : 0;
}

static int own_dir(const char *path)
{
	struct stat st;

	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
		return -EPERM;
	return 0;
}

int crun__jobfile_prepare(const char *dir, const char *sub)
{
	char path[4096];
	int rc;

	rc = own_dir(dir);
	if (rc < 0)
		return rc;
	if (snprintf(path, sizeof(path), "%s/%s", dir, sub) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	return own_dir(path);
}

char *crun__jobfile_format(const struct crun__jobfile *jf)
{
	json_t *o = json_object();
	char *text;

	if (!o)
		return NULL;
	json_object_set_new(o, "run_id", json_string(jf->run_id));
	json_object_set_new(o, "endpoint", json_string(jf->endpoint));
	if (jf->token_file[0])
		json_object_set_new(o, "token_file", json_string(jf->token_file));
	json_object_set_new(o, "pid", json_integer(jf->pid));
	json_object_set_new(o, "node", json_string(jf->node));
	json_object_set_new(o, "started_ms", json_integer((json_int_t)jf->started_ms));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return text;
}

static bool copy_str(json_t *o, const char *key, char *out, size_t len, bool need)
{
	const char *s = json_string_value(json_object_get(o, key));

	if (!s)
		return !need;
	if (strlen(s) >= len)
		return false;
	strcpy(out, s);
	return true;
}

int crun__jobfile_parse(const char *text, size_t len, struct crun__jobfile *jf)
{
	json_t *o = json_loadb(text, len, 0, NULL);
	int rc = -EINVAL;

	memset(jf, 0, sizeof(*jf));
	if (!json_is_object(o))
		goto out;
	if (!copy_str(o, "run_id", jf->run_id, sizeof(jf->run_id), true) || !jf->run_id[0] ||
	    !copy_str(o, "endpoint", jf->endpoint, sizeof(jf->endpoint), true) ||
	    !copy_str(o, "token_file", jf->token_file, sizeof(jf->token_file), false) ||
	    !copy_str(o, "node", jf->node, sizeof(jf->node), false) ||
	    !json_is_integer(json_object_get(o, "pid")))
		goto out;
	jf->pid = (long)json_integer_value(json_object_get(o, "pid"));
	jf->started_ms = (uint64_t)json_integer_value(json_object_get(o, "started_ms"));
	rc = jf->pid > 0 ? 0 : -EINVAL;
out:
	json_decref(o);
	return rc;
}

int crun__jobfile_write(const char *dir, const struct crun__jobfile *jf, int *lock_fd)
{
	struct crun__atomic_file f;
	char path[4096];
	char *text;
	int rc, lock = -1;

	rc = crun__jobfile_path(path, sizeof(path), dir, "jobs", jf->run_id, jf->pid, "json");
	if (rc < 0)
		return rc;
	text = crun__jobfile_format(jf);
	if (!text)
		return -ENOMEM;
	rc = crun__atomic_open(&f, path, 0600);
	if (rc < 0) {
		free(text);
		return rc;
	}
	/* Locked before it has its name, so that no reader ever sees it
	 * unlocked while this process lives; the lock goes with the last
	 * descriptor of the file, the caller's. */
	if (lock_fd) {
		lock = fcntl(f.fd, F_DUPFD_CLOEXEC, 0);
		if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) < 0)
			rc = -errno;
	}
	if (rc == 0)
		rc = crun__atomic_write(&f, text, strlen(text));
	free(text);
	if (rc < 0) {
		crun__atomic_abort(&f);
		if (lock >= 0)
			close(lock);
		return rc;
	}
	rc = crun__atomic_commit(&f);
	if (rc < 0 && lock >= 0) {
		close(lock);
		lock = -1;
	}
	if (lock_fd)
		*lock_fd = lock;
	return rc;
}

int crun__jobfile_write_token(const char *dir, const char *run_id, long pid, const void *token,
			      size_t len, char *path, size_t pathlen)
{
	int rc = crun__jobfile_path(path, pathlen, dir, "tokens", run_id, pid, "token");

	return rc < 0 ? rc : crun__write_atomic(path, token, len, 0600);
}

void crun__jobfile_remove(const char *dir, const char *run_id, long pid)
{
	char path[4096];

	if (crun__jobfile_path(path, sizeof(path), dir, "jobs", run_id, pid, "json") == 0)
		unlink(path);
	if (crun__jobfile_path(path, sizeof(path), dir, "tokens", run_id, pid, "token") == 0)
		unlink(path);
}

/* A directory of ours, not a symbolic link, with no access for anyone
 * else, opened (the fd); -EPERM when it is not, -ENOENT when absent. */
static int open_own_dir(int at, const char *path)
{
	int fd = openat(at, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return errno == ELOOP || errno == ENOTDIR ? -EPERM : -errno;
	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 077)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* A file of ours that only we can write, not a link: regular files
 * only, so that a FIFO or a device planted there cannot block or feed the
 * reader. */
static bool own_file(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_uid == geteuid() && !(st->st_mode & 022);
}

/* Reads a job file of ours; *live: its agent holds its lock. */
static int read_small(int dirfd, const char *name, char *buf, size_t cap, size_t *len, bool *live)
{
	struct stat st;
	ssize_t n;
	int fd;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!own_file(&st))
		return -EPERM;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !own_file(&st)) {
		close(fd);
		return -EPERM;
	}
	n = read(fd, buf, cap);
	*live = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);
	if (n < 0)
		return -errno;
	*len = (size_t)n;
	return (size_t)n < cap ? 0 : -EFBIG;
}

/* Removes a stale job file and its token file, by the names found in the
 * directories (not by names made from the file's contents). */
static void remove_stale(int jobsfd, int tokensfd, const char *name)
{
	char token[NAME_MAX + 8];
	size_t nl = strlen(name) - strlen(".json");

	unlinkat(jobsfd, name, 0);
	if (tokensfd >= 0 && nl + sizeof(".token") <= sizeof(token)) {
		memcpy(token, name, nl);
		strcpy(token + nl, ".token");
		unlinkat(tokensfd, token, 0);
	}
}

static int by_run(const void *a, const void *b)
{
	return strcmp(((const struct crun__jobfile *)a)->run_id,
		      ((const struct crun__jobfile *)b)->run_id);
}

int crun__jobfile_list(const char *dir, struct crun__jobfile **out, size_t *n)
{
	char text[8192];
	struct crun__jobfile *v = NULL, jf;
	struct dirent *de;
	size_t nv = 0, len = 0;
	int top, jobsfd, tokensfd;
	bool live = false;
	DIR *d;

	*out = NULL;
	*n = 0;
	top = open_own_dir(AT_FDCWD, dir);
	if (top < 0)
		return top;
	jobsfd = open_own_dir(top, "jobs");
	tokensfd = open_own_dir(top, "tokens");
	close(top);
	if (jobsfd < 0) {
		if (tokensfd >= 0)
			close(tokensfd);
		return jobsfd;
	}
	d = fdopendir(jobsfd);
	if (!d) {
		int rc = -errno;

		close(jobsfd);
		if (tokensfd >= 0)
			close(tokensfd);
		return rc;
	}
	while ((de = readdir(d))) {
		size_t nl = strlen(de->d_name);

		if (nl < 6 || strcmp(de->d_name + nl - 5, ".json"))
			continue;
		if (read_small(jobsfd, de->d_name, text, sizeof(text), &len, &live) < 0 ||
		    crun__jobfile_parse(text, len, &jf) < 0)
			continue;
		if (!live) {
			/* Its agent died without removing it (its pid may run
			 * another process by now). */
			remove_stale(jobsfd, tokensfd, de->d_name);
			continue;
		}
		struct crun__jobfile *nvp = realloc(v, (nv + 1) * sizeof(*v));
		if (!nvp) {
			free(v);
			closedir(d);
			if (tokensfd >= 0)
				close(tokensfd);
			return -ENOMEM;
		}
		v = nvp;
		v[nv++] = jf;
	}
	closedir(d);
	if (tokensfd >= 0)
		close(tokensfd);
	if (nv)
		qsort(v, nv, sizeof(*v), by_run);
	*out = v;
	*n = nv;
	return 0;
}

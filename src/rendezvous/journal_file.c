/* The rendezvous journal on disk (journal_file.h): the records in memory,
 * the whole file rewritten on each change. A journal holds a few hundred
 * runs at most and changes once per round, so one small file replaced
 * atomically is simpler than a log to compact, and a reader of the file
 * always sees one consistent state. */
#include "rendezvous/journal_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"

/* A journal file larger than this is not one this daemon wrote. */
#define MAX_FILE_SIZE (256u << 20)

struct crun__journal_file {
	char *path;
	int lock_fd; /* DIR/CRUN_JOURNAL_LOCK, locked while j lives */
	struct crun__journal_run *runs;
	size_t n, cap;
	bool stopped;
};

static long find(const struct crun__journal_file *j, const uint8_t *id, size_t len)
{
	for (size_t i = 0; i < j->n; i++)
		if (j->runs[i].run_id_len == len && !memcmp(j->runs[i].run_id, id, len))
			return (long)i;
	return -1;
}

static void remove_at(struct crun__journal_file *j, size_t i)
{
	crun__journal_run_finish(&j->runs[i]);
	memmove(&j->runs[i], &j->runs[i + 1], (j->n - i - 1) * sizeof(*j->runs));
	j->n--;
}

/* Drops the runs written longest ago: closed ones beyond
 * CRUN_JOURNAL_MAX_CLOSED, then any beyond CRUN_JOURNAL_MAX_RUNS. */
static void prune(struct crun__journal_file *j)
{
	for (;;) {
		size_t closed = 0, oldest = 0, oldest_closed = 0;

		for (size_t i = 0; i < j->n; i++) {
			if (j->runs[i].written < j->runs[oldest].written)
				oldest = i;
			if (!crun__journal_closed(j->runs[i].state))
				continue;
			if (!closed++ || j->runs[i].written < j->runs[oldest_closed].written)
				oldest_closed = i;
		}
		if (closed > CRUN_JOURNAL_MAX_CLOSED)
			remove_at(j, oldest_closed);
		else if (j->n > CRUN_JOURNAL_MAX_RUNS)
			remove_at(j, oldest);
		else
			return;
	}
}

static int write_file(struct crun__journal_file *j)
{
	char *text = crun__journal_encode(j->runs, j->n);
	int rc;

	if (!text)
		return -ENOMEM;
	rc = crun__write_atomic(j->path, text, strlen(text), 0600);
	free(text);
	return rc;
}

static void save(struct crun__journal_file *j)
{
	int rc = write_file(j);

	if (rc < 0)
		crun__error("cannot write the journal '%s': %s; a restart of the store now "
			    "loses what it misses",
			    j->path, strerror(-rc));
}

/* Takes DIR's lock (CRUN_JOURNAL_LOCK, flock LOCK_EX) for j and writes
 * this process's id in it. -EBUSY, with a line in err, when another
 * process holds it; -errno when it cannot be made. */
static int lock_dir(struct crun__journal_file *j, const char *dir, char *err, size_t errlen)
{
	char path[4096], pid[32];
	ssize_t got;
	int rc, n;

	if (snprintf(path, sizeof(path), "%s/%s", dir, CRUN_JOURNAL_LOCK) >= (int)sizeof(path)) {
		snprintf(err, errlen, "--state-dir '%s': path too long", dir);
		return -ENAMETOOLONG;
	}
	j->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (j->lock_fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "--state-dir '%s': cannot write '%s': %s", dir, path,
			 strerror(-rc));
		return rc;
	}
	while ((rc = flock(j->lock_fd, LOCK_EX | LOCK_NB)) < 0 && errno == EINTR)
		;
	if (rc < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		if (rc != -EBUSY) {
			snprintf(err, errlen, "--state-dir '%s': cannot lock '%s': %s", dir, path,
				 strerror(-rc));
			return rc;
		}
		/* The holder wrote its pid there; it may be mid-write. */
		got = pread(j->lock_fd, pid, sizeof(pid) - 1, 0);
		pid[got > 0 ? got : 0] = '\0';
		n = atoi(pid);
		if (n > 0)
			snprintf(err, errlen,
				 "state directory %s is in use by another crun-rdzvd (pid %d)", dir,
				 n);
		else
			snprintf(err, errlen, "state directory %s is in use by another crun-rdzvd",
				 dir);
		return -EBUSY;
	}
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(j->lock_fd, 0) < 0 || pwrite(j->lock_fd, pid, (size_t)n, 0) != n)
		crun__warn("cannot write the pid into '%s': %s", path, strerror(errno));
	return 0;
}

/* Reads path into a NUL-terminated buffer; -ENOENT when there is none. */
static int read_file(const char *path, char **out, size_t *len)
{
	struct stat st;
	ssize_t got;
	size_t off = 0;
	char *buf;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		got = -errno;
		close(fd);
		return (int)got;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_FILE_SIZE) {
		close(fd);
		return S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (off < (size_t)st.st_size) {
		got = read(fd, buf + off, (size_t)st.st_size - off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		off += (size_t)got;
	}
	close(fd);
	buf[off] = '\0';
	*out = buf;
	*len = off;
	return 0;
}

int crun__journal_file_open(const char *dir, struct crun__journal_file **out, char *err,
			    size_t errlen)
{
	struct crun__journal_file *j;
	struct stat st;
	char *text = NULL;
	size_t len = 0;
	int rc;

	*out = NULL;
	if (stat(dir, &st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "--state-dir '%s': %s", dir, strerror(-rc));
		return rc;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "--state-dir '%s': not a directory", dir);
		return -ENOTDIR;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		goto out_nomem;
	j->lock_fd = -1;
	rc = lock_dir(j, dir, err, errlen);
	if (rc < 0)
		goto out_destroy;
	j->path = malloc(strlen(dir) + sizeof(CRUN_JOURNAL_FILE) + 1);
	if (!j->path)
		goto out_nomem;
	sprintf(j->path, "%s/%s", dir, CRUN_JOURNAL_FILE);
	rc = read_file(j->path, &text, &len);
	if (rc == 0) {
		rc = crun__journal_decode(text, len, j->path, &j->runs, &j->n, err, errlen);
		free(text);
		if (rc < 0)
			goto out_destroy;
		j->cap = j->n;
	} else if (rc != -ENOENT) {
		snprintf(err, errlen, "cannot read the journal '%s': %s", j->path, strerror(-rc));
		goto out_destroy;
	}
	prune(j);
	rc = write_file(j);
	if (rc < 0) {
		snprintf(err, errlen, "--state-dir '%s': cannot write '%s': %s", dir, j->path,
			 strerror(-rc));
		goto out_destroy;
	}
	crun__info("journal '%s': %zu run%s", j->path, j->n, j->n == 1 ? "" : "s");
	*out = j;
	return 0;

out_nomem:
	snprintf(err, errlen, "--state-dir '%s': out of memory", dir);
	rc = -ENOMEM;
out_destroy:
	crun__journal_file_destroy(j);
	return rc;
}

const struct crun__journal_run *crun__journal_file_find(const struct crun__journal_file *j,
							const uint8_t *id, size_t len)
{
	long i = find(j, id, len);

	return i < 0 ? NULL : &j->runs[i];
}

void crun__journal_file_put(struct crun__journal_file *j, struct crun__journal_run *run)
{
	long i;

	if (j->stopped) {
		crun__journal_run_finish(run);
		return;
	}
	run->written = (int64_t)time(NULL);
	i = find(j, run->run_id, run->run_id_len);
	if (i >= 0) {
		crun__journal_run_finish(&j->runs[i]);
		j->runs[i] = *run;
	} else {
		if (j->n == j->cap) {
			size_t cap = j->cap ? j->cap * 2 : 8;
			struct crun__journal_run *v = realloc(j->runs, cap * sizeof(*v));

			if (!v) {
				crun__error("cannot record run in the journal '%s': out of memory",
					    j->path);
				crun__journal_run_finish(run);
				return;
			}
			j->runs = v;
			j->cap = cap;
		}
		j->runs[j->n++] = *run;
	}
	memset(run, 0, sizeof(*run));
	prune(j);
	save(j);
}

void crun__journal_file_drop(struct crun__journal_file *j, const uint8_t *id, size_t len)
{
	long i;

	if (j->stopped)
		return;
	i = find(j, id, len);
	if (i < 0)
		return;
	remove_at(j, (size_t)i);
	save(j);
}

void crun__journal_file_stop(struct crun__journal_file *j)
{
	if (j)
		j->stopped = true;
}

void crun__journal_file_destroy(struct crun__journal_file *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->n; i++)
		crun__journal_run_finish(&j->runs[i]);
	free(j->runs);
	free(j->path);
	if (j->lock_fd >= 0)
		close(j->lock_fd);
	free(j);
}

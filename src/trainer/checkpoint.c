/* Sharded, atomic, reshardable checkpoints; see checkpoint.h for the
 * protocol and the file formats. */
#include "trainer/checkpoint.h"
#include "common/fnv.h"
#include "common/fs.h"
#include "common/util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_MAGIC "CRUNSHRD"
#define MODEL_MAGIC "CRUNMODL"
#define MANIFEST_HEAD "crun-train checkpoint 1"
#define SHARD_HEADER 40
#define MAX_MANIFEST (1u << 20)
#define MAX_SHARDS 65536

static void put_le(uint8_t *out, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		out[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *in, int bytes)
{
	uint64_t v = 0;

	for (int i = 0; i < bytes; i++)
		v |= (uint64_t)in[i] << (8 * i);
	return v;
}

/* dir/name into out; -ENAMETOOLONG when it does not fit. */
static int join(char *out, size_t len, const char *dir, const char *name)
{
	int n = snprintf(out, len, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

void crun__ckpt_path(const char *dir, int64_t step, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/step-%010lld", dir, (long long)step);
}

/* A file written through a checksum and a buffer to a temporary name,
 * then synced and renamed into place. */
struct wfile {
	struct crun__atomic_file f;
	uint64_t fnv;
	uint64_t size;
	int err; /* the first failure; later writes do nothing */
	size_t used;
	uint8_t buf[64 * 1024];
};

static int w_open(struct wfile *w, const char *path)
{
	w->fnv = CRUN__FNV1A_INIT;
	w->size = 0;
	w->err = 0;
	w->used = 0;
	return crun__atomic_open(&w->f, path, 0666);
}

static void w_flush(struct wfile *w)
{
	if (!w->err && w->used)
		w->err = crun__atomic_write(&w->f, w->buf, w->used);
	w->used = 0;
}

static void w_bytes(struct wfile *w, const void *p, size_t n)
{
	if (w->err || n == 0)
		return;
	w->fnv = crun__fnv1a(w->fnv, p, n);
	w->size += n;
	if (w->used + n > sizeof(w->buf))
		w_flush(w);
	if (n >= sizeof(w->buf)) {
		if (!w->err)
			w->err = crun__atomic_write(&w->f, p, n);
		return;
	}
	memcpy(w->buf + w->used, p, n);
	w->used += n;
}

static void w_u32(struct wfile *w, uint32_t v)
{
	uint8_t b[4];

	put_le(b, v, 4);
	w_bytes(w, b, 4);
}

static void w_u64(struct wfile *w, uint64_t v)
{
	uint8_t b[8];

	put_le(b, v, 8);
	w_bytes(w, b, 8);
}

static void w_floats(struct wfile *w, const float *p, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	w_bytes(w, p, n * sizeof(float));
#else
	for (size_t i = 0; i < n; i++) {
		uint32_t u;

		memcpy(&u, &p[i], 4);
		w_u32(w, u);
	}
#endif
}

/* Syncs and renames into place (then syncs the directory), or removes
 * the temporary file after a failure. */
static int w_commit(struct wfile *w)
{
	w_flush(w);
	if (w->err) {
		crun__atomic_abort(&w->f);
		return w->err;
	}
	return crun__atomic_commit(&w->f);
}

static void shard_name(int rank, int world, char *out, size_t len)
{
	snprintf(out, len, "shard-%05d-of-%05d.bin", rank, world);
}

static int write_shard(struct crun__parallel *par, const char *sdir, int64_t step, int rank,
		       int world, size_t n_params, uint64_t *fnv, uint64_t *size)
{
	int n_seg = crun__parallel_n_segments(par);
	char name[64], path[PATH_MAX];
	struct wfile w;
	uint32_t n_ranges = 0;
	int rc;

	shard_name(rank, world, name, sizeof(name));
	if (snprintf(path, sizeof(path), "%s/%s", sdir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	rc = w_open(&w, path);
	if (rc)
		return rc;
	for (int s = 0; s < n_seg; s++) {
		struct crun__view v;

		crun__parallel_owned(par, s, &v);
		n_ranges += v.n > 0;
	}
	w_bytes(&w, SHARD_MAGIC, 8);
	w_u32(&w, 1);
	w_u32(&w, (uint32_t)rank);
	w_u32(&w, (uint32_t)world);
	w_u32(&w, n_ranges);
	w_u64(&w, (uint64_t)step);
	w_u64(&w, n_params);
	for (int s = 0; s < n_seg; s++) {
		struct crun__view v;

		crun__parallel_owned(par, s, &v);
		if (v.n) {
			w_u64(&w, v.flat);
			w_u64(&w, v.n);
		}
	}
	for (int s = 0; s < n_seg; s++) {
		struct crun__view v;

		crun__parallel_owned(par, s, &v);
		w_floats(&w, v.p, v.n);
		w_floats(&w, v.m, v.n);
		w_floats(&w, v.v, v.n);
	}
	*fnv = w.fnv;
	*size = w.size;
	return w_commit(&w);
}

static int write_manifest(const char *sdir, const struct crun__ckpt_meta *meta,
			  const double *status, int world)
{
	char path[PATH_MAX], line[512];
	struct wfile w;
	int rc;

	if (snprintf(path, sizeof(path), "%s/MANIFEST", sdir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	rc = w_open(&w, path);
	if (rc)
		return rc;
	snprintf(line, sizeof(line),
		 "%s\nstep %lld\nworld_size %d\nstrategy %s\nn_params %zu\n"
		 "model.context %d\nmodel.embed_dim %d\nmodel.width %d\nmodel.layers %d\n"
		 "model.ffn_mult %d\ntrain_loss %.9g\nelapsed_s %.3f\n",
		 MANIFEST_HEAD, (long long)meta->step, world, meta->strategy, meta->n_params,
		 meta->model.context, meta->model.embed_dim, meta->model.width, meta->model.layers,
		 meta->model.ffn_mult, meta->train_loss, meta->elapsed_s);
	w_bytes(&w, line, strlen(line));
	for (int r = 0; r < world; r++) {
		char name[64];
		uint64_t size = (uint64_t)status[4 * r + 1];
		uint64_t sum = ((uint64_t)status[4 * r + 2] << 32) | (uint64_t)status[4 * r + 3];

		shard_name(r, world, name, sizeof(name));
		snprintf(line, sizeof(line), "shard %d %s %llu %016llx\n", r, name,
			 (unsigned long long)size, (unsigned long long)sum);
		w_bytes(&w, line, strlen(line));
	}
	w_bytes(&w, "end\n", 4);
	return w_commit(&w);
}

static int remove_ckpt_dir(const char *path)
{
	char file[PATH_MAX];
	struct dirent *e;
	DIR *d;

	/* the MANIFEST first, so a half-removed checkpoint is never complete */
	if (join(file, sizeof(file), path, "MANIFEST"))
		return -ENAMETOOLONG;
	if (unlink(file) < 0 && errno != ENOENT)
		return -errno;
	d = opendir(path);
	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (!join(file, sizeof(file), path, e->d_name))
			unlink(file);
	}
	closedir(d);
	return rmdir(path) < 0 ? -errno : 0;
}

static bool parse_step_name(const char *name, int64_t *step)
{
	char *end;
	long long v;

	if (strncmp(name, "step-", 5) || !name[5])
		return false;
	errno = 0;
	v = strtoll(name + 5, &end, 10);
	if (*end || errno || v < 0)
		return false;
	*step = v;
	return true;
}

static int cmp_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of the checkpoints in dir, newest first, and which are complete. */
static int list_ckpts(const char *dir, int64_t **steps, bool **complete, size_t *n)
{
	size_t cap = 16, cnt = 0;
	int64_t *st = malloc(cap * sizeof(*st));
	bool *ok;
	struct dirent *e;
	DIR *d;

	if (!st)
		return -ENOMEM;
	d = opendir(dir);
	if (!d) {
		int rc = -errno;

		free(st);
		return rc;
	}
	while ((e = readdir(d))) {
		int64_t s;

		if (!parse_step_name(e->d_name, &s))
			continue;
		if (cnt == cap) {
			int64_t *bigger = realloc(st, 2 * cap * sizeof(*st));

			if (!bigger) {
				closedir(d);
				free(st);
				return -ENOMEM;
			}
			st = bigger;
			cap *= 2;
		}
		st[cnt++] = s;
	}
	closedir(d);
	qsort(st, cnt, sizeof(*st), cmp_desc);
	ok = calloc(cnt ? cnt : 1, sizeof(*ok));
	if (!ok) {
		free(st);
		return -ENOMEM;
	}
	for (size_t i = 0; i < cnt; i++) {
		char path[PATH_MAX];
		struct crun__ckpt_meta meta;
		char why[256];

		crun__ckpt_path(dir, st[i], path, sizeof(path));
		ok[i] = crun__ckpt_read_meta(path, &meta, why, sizeof(why)) == 0 &&
			meta.step == st[i];
	}
	*steps = st;
	*complete = ok;
	*n = cnt;
	return 0;
}

static void prune(const char *dir, int64_t keep)
{
	int64_t *steps;
	bool *complete, newest_found = false;
	size_t n;
	int64_t kept = 0;

	if (list_ckpts(dir, &steps, &complete, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX];

		if (complete[i] && kept < keep) {
			kept++;
			newest_found = true;
			continue;
		}
		/* older complete ones beyond keep, and leftovers of failed saves
		 * older than a complete checkpoint */
		if (!newest_found)
			continue;
		crun__ckpt_path(dir, steps[i], path, sizeof(path));
		remove_ckpt_dir(path);
	}
	crun__fsync_dir(dir);
	free(steps);
	free(complete);
}

static int comm_fail(struct crun__comm *comm, int rc, char *err, size_t errlen)
{
	crun__seterr(err, errlen, "%s", crun__comm_errmsg(comm));
	return rc;
}

int crun__ckpt_save(struct crun__parallel *par, struct crun__comm *comm, const char *dir,
		    const struct crun__ckpt_meta *meta, int64_t keep, uint64_t *bytes, char *err,
		    size_t errlen)
{
	int rank = crun__comm_rank(comm), world = crun__comm_size(comm);
	char sdir[PATH_MAX], path[PATH_MAX];
	uint64_t fnv = 0, size = 0;
	double flag = 0, *status;
	int rc = 0, mine;

	crun__ckpt_path(dir, meta->step, sdir, sizeof(sdir));
	if (rank == 0) {
		/* a checkpoint of this step from an earlier run is replaced: it
		 * stops being complete before any shard changes */
		rc = crun__mkdir_p(sdir, 0777);
		if (!rc)
			rc = join(path, sizeof(path), sdir, "MANIFEST");
		if (!rc && unlink(path) == 0)
			rc = crun__fsync_dir(sdir);
		else if (!rc && errno != ENOENT)
			rc = -errno;
		if (rc)
			crun__seterr(err, errlen, "cannot create checkpoint '%s': %s", sdir,
				     strerror(-rc));
		flag = rc ? 1 : 0;
	}
	mine = crun__comm_allreduce_f64(comm, &flag, 1);
	if (mine)
		return comm_fail(comm, mine, err, errlen);
	if (flag > 0) {
		if (rank != 0)
			crun__seterr(err, errlen, "rank 0 could not create checkpoint '%s'", sdir);
		return rc ? rc : -EIO;
	}

	status = calloc(4 * (size_t)world, sizeof(*status));
	if (!status) {
		crun__seterr(err, errlen, "checkpoint: out of memory");
		return -ENOMEM;
	}
	mine = crun__mkdir_p(sdir, 0777);
	if (!mine)
		mine = write_shard(par, sdir, meta->step, rank, world, meta->n_params, &fnv, &size);
	if (mine)
		crun__seterr(err, errlen, "cannot write checkpoint shard in '%s': %s", sdir,
			     strerror(-mine));
	status[4 * rank] = mine ? 1 : 0;
	status[4 * rank + 1] = (double)size;
	status[4 * rank + 2] = (double)(fnv >> 32);
	status[4 * rank + 3] = (double)(fnv & 0xffffffffu);
	rc = crun__comm_allreduce_f64(comm, status, 4 * (size_t)world);
	if (rc) {
		free(status);
		return comm_fail(comm, rc, err, errlen);
	}
	for (int r = 0; r < world; r++) {
		if (status[4 * r] > 0) {
			if (!mine)
				crun__seterr(err, errlen,
					     "rank %d could not write its checkpoint shard in '%s'",
					     r, sdir);
			free(status);
			return mine ? mine : -EIO;
		}
	}

	if (bytes) {
		*bytes = 0;
		for (int r = 0; r < world; r++)
			*bytes += (uint64_t)status[4 * r + 1];
	}
	flag = 0;
	if (rank == 0) {
		rc = write_manifest(sdir, meta, status, world);
		if (rc)
			crun__seterr(err, errlen, "cannot write checkpoint manifest in '%s': %s",
				     sdir, strerror(-rc));
		else
			prune(dir, keep);
		flag = rc ? 1 : 0;
	}
	free(status);
	mine = crun__comm_allreduce_f64(comm, &flag, 1);
	if (mine)
		return comm_fail(comm, mine, err, errlen);
	if (flag > 0) {
		if (rank != 0)
			crun__seterr(err, errlen,
				     "rank 0 could not write checkpoint manifest in '%s'", sdir);
		return rc ? rc : -EIO;
	}
	return 0;
}

int crun__ckpt_latest(const char *dir, int64_t *step, char *err, size_t errlen)
{
	int64_t *steps;
	bool *complete;
	size_t n;
	int rc = list_ckpts(dir, &steps, &complete, &n);

	if (rc == -ENOENT)
		return -ENOENT;
	if (rc) {
		crun__seterr(err, errlen, "cannot read checkpoint dir '%s': %s", dir,
			     strerror(-rc));
		return rc;
	}
	rc = -ENOENT;
	for (size_t i = 0; i < n; i++) {
		if (complete[i]) {
			*step = steps[i];
			rc = 0;
			break;
		}
	}
	free(steps);
	free(complete);
	return rc;
}

/* One shard as listed by the manifest. */
struct shard_entry {
	char name[64];
	uint64_t size;
	uint64_t fnv;
};

struct manifest {
	struct crun__ckpt_meta meta;
	struct shard_entry *shards; /* meta.world_size entries */
};

static int read_text(const char *path, char **out, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rbe");
	char *buf;
	size_t n;

	if (!f) {
		int rc = -errno;

		crun__seterr(err, errlen, "cannot read '%s': %s", path, strerror(errno));
		return rc;
	}
	buf = malloc(MAX_MANIFEST + 1);
	if (!buf) {
		fclose(f);
		crun__seterr(err, errlen, "cannot read '%s': out of memory", path);
		return -ENOMEM;
	}
	n = fread(buf, 1, MAX_MANIFEST + 1, f);
	fclose(f);
	if (n > MAX_MANIFEST) {
		free(buf);
		crun__seterr(err, errlen, "manifest '%s' is too large", path);
		return -EINVAL;
	}
	buf[n] = '\0';
	*out = buf;
	return 0;
}

/* A finite value >= 0 for an optional MANIFEST key, or NAN when the text
 * is not one. */
static double optional_value(const char *text)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(text, &end);
	if (end == text || *end || errno || !isfinite(v) || v < 0)
		return NAN;
	return v;
}

/* "key value": a key of lower-case letters, digits, '_' and '.', one
 * space, a value without spaces. */
static bool is_key_value(const char *line)
{
	const char *sp = strchr(line, ' ');

	if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' '))
		return false;
	for (const char *c = line; c < sp; c++)
		if (!(islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '_' ||
		      *c == '.'))
			return false;
	return true;
}

/* Parses MANIFEST; shards is NULL when not wanted. */
static int parse_manifest(const char *ckpt, struct crun__ckpt_meta *meta,
			  struct shard_entry **shards, char *err, size_t errlen)
{
	char path[PATH_MAX], *text = NULL, *save = NULL, *line;
	struct shard_entry *sh = NULL;
	int got = 0, n_shards = 0, rc = -EINVAL;
	bool head = false, end = false;

	memset(meta, 0, sizeof(*meta));
	meta->train_loss = NAN;
	if (join(path, sizeof(path), ckpt, "MANIFEST")) {
		crun__seterr(err, errlen, "checkpoint path '%s' is too long", ckpt);
		return -ENAMETOOLONG;
	}
	rc = read_text(path, &text, err, errlen);
	if (rc)
		return rc;
	rc = -EINVAL;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		long long v;
		int idx;
		char name[64];
		unsigned long long size, sum;

		if (!head) {
			if (strcmp(line, MANIFEST_HEAD))
				break;
			head = true;
		} else if (!strcmp(line, "end")) {
			end = true;
			break;
		} else if (sscanf(line, "step %lld", &v) == 1) {
			meta->step = v, got |= 1;
		} else if (sscanf(line, "world_size %lld", &v) == 1 && v > 0 && v <= MAX_SHARDS) {
			meta->world_size = (int)v, got |= 2;
			if (shards) {
				sh = calloc((size_t)v, sizeof(*sh));
				if (!sh) {
					rc = -ENOMEM;
					break;
				}
			}
		} else if (sscanf(line, "strategy %15s", meta->strategy) == 1) {
			got |= 4;
		} else if (sscanf(line, "n_params %lld", &v) == 1 && v > 0) {
			meta->n_params = (size_t)v, got |= 8;
		} else if (sscanf(line, "model.context %lld", &v) == 1) {
			meta->model.context = (int)v, got |= 16;
		} else if (sscanf(line, "model.embed_dim %lld", &v) == 1) {
			meta->model.embed_dim = (int)v, got |= 32;
		} else if (sscanf(line, "model.width %lld", &v) == 1) {
			meta->model.width = (int)v, got |= 64;
		} else if (sscanf(line, "model.layers %lld", &v) == 1) {
			meta->model.layers = (int)v, got |= 128;
		} else if (sscanf(line, "model.ffn_mult %lld", &v) == 1) {
			meta->model.ffn_mult = (int)v, got |= 256;
		} else if (!strncmp(line, "train_loss ", 11)) {
			/* optional, as elapsed_s: a bad value reads as absent */
			meta->train_loss = optional_value(line + 11);
		} else if (!strncmp(line, "elapsed_s ", 10)) {
			double t = optional_value(line + 10);

			meta->elapsed_s = isnan(t) ? 0 : t;
		} else if (sscanf(line, "shard %d %63s %llu %llx", &idx, name, &size, &sum) == 4 &&
			   (got & 2) && idx == n_shards && idx < meta->world_size &&
			   !strchr(name, '/')) {
			if (sh) {
				snprintf(sh[idx].name, sizeof(sh[idx].name), "%s", name);
				sh[idx].size = size;
				sh[idx].fnv = sum;
			}
			n_shards++;
		} else if (!n_shards && strncmp(line, "shard ", 6) && is_key_value(line)) {
			/* a key of a newer crun-train: skipped */
		} else {
			break;
		}
	}
	free(text);
	if (rc == -ENOMEM) {
		crun__seterr(err, errlen, "cannot read '%s': out of memory", path);
	} else if (!end || got != 511 || n_shards != meta->world_size) {
		crun__seterr(err, errlen, "checkpoint '%s' is incomplete or damaged: bad MANIFEST",
			     ckpt);
	} else {
		rc = 0;
		if (shards)
			*shards = sh, sh = NULL;
	}
	free(sh);
	return rc;
}

int crun__ckpt_read_meta(const char *ckpt, struct crun__ckpt_meta *meta, char *err, size_t errlen)
{
	return parse_manifest(ckpt, meta, NULL, err, errlen);
}

struct range {
	uint64_t flat, len;
	uint64_t data; /* file offset of p; m and v follow */
	int shard;
};

struct reader {
	struct crun__ckpt_meta meta;
	char path[PATH_MAX];
	int n_shards;
	int *fd;
	size_t n_ranges;
	struct range *ranges; /* sorted by flat */
};

static void reader_close(struct reader *rd)
{
	for (int i = 0; rd->fd && i < rd->n_shards; i++)
		if (rd->fd[i] >= 0)
			close(rd->fd[i]);
	free(rd->fd);
	free(rd->ranges);
	memset(rd, 0, sizeof(*rd));
}

static int read_full(int fd, void *buf, size_t n, off_t off)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t k = pread(fd, p, n, off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -EIO;
		p += k;
		n -= (size_t)k;
		off += k;
	}
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	return x->flat < y->flat ? -1 : x->flat > y->flat ? 1 : 0;
}

/* Opens one shard: checks size and checksum against the manifest and its
 * header against the checkpoint, and appends its ranges. */
static int open_shard(struct reader *rd, int idx, const struct shard_entry *e, char *err,
		      size_t errlen)
{
	char path[PATH_MAX];
	uint8_t hdr[SHARD_HEADER], buf[65536];
	uint64_t fnv = CRUN__FNV1A_INIT, off = 0, data, total;
	uint32_t n_ranges;
	struct stat st;
	struct range *grown;
	int fd, rc;

	if (join(path, sizeof(path), rd->path, e->name)) {
		crun__seterr(err, errlen, "checkpoint path '%s' is too long", rd->path);
		return -ENAMETOOLONG;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		crun__seterr(err, errlen, "cannot read checkpoint shard '%s': %s", path,
			     strerror(errno));
		return rc;
	}
	rd->fd[idx] = fd;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != e->size) {
		crun__seterr(err, errlen, "checkpoint shard '%s' has the wrong size", path);
		return -EINVAL;
	}
	while (off < e->size) {
		size_t n = e->size - off < sizeof(buf) ? (size_t)(e->size - off) : sizeof(buf);

		rc = read_full(fd, buf, n, (off_t)off);
		if (rc) {
			crun__seterr(err, errlen, "cannot read checkpoint shard '%s': %s", path,
				     strerror(-rc));
			return rc;
		}
		fnv = crun__fnv1a(fnv, buf, n);
		off += n;
	}
	if (fnv != e->fnv) {
		crun__seterr(err, errlen, "checkpoint shard '%s' is damaged: checksum mismatch",
			     path);
		return -EINVAL;
	}
	if (e->size < SHARD_HEADER || read_full(fd, hdr, SHARD_HEADER, 0) ||
	    memcmp(hdr, SHARD_MAGIC, 8) || get_le(hdr + 8, 4) != 1 ||
	    get_le(hdr + 12, 4) != (uint64_t)idx ||
	    get_le(hdr + 16, 4) != (uint64_t)rd->meta.world_size ||
	    get_le(hdr + 24, 8) != (uint64_t)rd->meta.step ||
	    get_le(hdr + 32, 8) != rd->meta.n_params) {
		crun__seterr(err, errlen,
			     "checkpoint shard '%s' does not belong to this checkpoint", path);
		return -EINVAL;
	}
	n_ranges = (uint32_t)get_le(hdr + 20, 4);
	if ((uint64_t)n_ranges * 16 > e->size) {
		crun__seterr(err, errlen, "checkpoint shard '%s' is damaged", path);
		return -EINVAL;
	}
	grown = realloc(rd->ranges, (rd->n_ranges + n_ranges + 1) * sizeof(*grown));
	if (!grown) {
		crun__seterr(err, errlen, "checkpoint: out of memory");
		return -ENOMEM;
	}
	rd->ranges = grown;
	data = SHARD_HEADER + (uint64_t)n_ranges * 16;
	total = data;
	for (uint32_t i = 0; i < n_ranges; i++) {
		uint8_t t[16];
		struct range *r = &rd->ranges[rd->n_ranges + i];

		rc = read_full(fd, t, 16, (off_t)(SHARD_HEADER + 16 * (uint64_t)i));
		if (rc)
			return rc;
		r->flat = get_le(t, 8);
		r->len = get_le(t + 8, 8);
		r->shard = idx;
		r->data = total;
		if (r->len > rd->meta.n_params || r->flat > rd->meta.n_params - r->len) {
			crun__seterr(err, errlen, "checkpoint shard '%s' is damaged", path);
			return -EINVAL;
		}
		total += 3 * r->len * sizeof(float);
	}
	if (total != e->size) {
		crun__seterr(err, errlen, "checkpoint shard '%s' is damaged: wrong length", path);
		return -EINVAL;
	}
	rd->n_ranges += n_ranges;
	return 0;
}

static int reader_open(struct reader *rd, const char *ckpt, char *err, size_t errlen)
{
	struct shard_entry *sh = NULL;
	uint64_t next = 0;
	int rc;

	memset(rd, 0, sizeof(*rd));
	snprintf(rd->path, sizeof(rd->path), "%s", ckpt);
	rc = parse_manifest(ckpt, &rd->meta, &sh, err, errlen);
	if (rc)
		return rc;
	rd->n_shards = rd->meta.world_size;
	rd->fd = malloc((size_t)rd->n_shards * sizeof(*rd->fd));
	if (!rd->fd) {
		free(sh);
		crun__seterr(err, errlen, "checkpoint: out of memory");
		return -ENOMEM;
	}
	for (int i = 0; i < rd->n_shards; i++)
		rd->fd[i] = -1;
	for (int i = 0; i < rd->n_shards && !rc; i++)
		rc = open_shard(rd, i, &sh[i], err, errlen);
	free(sh);
	if (rc)
		goto out_close;
	/* the shards must tile [0, n_params) exactly */
	qsort(rd->ranges, rd->n_ranges, sizeof(*rd->ranges), cmp_range);
	for (size_t i = 0; i < rd->n_ranges; i++) {
		if (rd->ranges[i].flat != next)
			break;
		next += rd->ranges[i].len;
	}
	if (next != rd->meta.n_params) {
		crun__seterr(err, errlen,
			     "checkpoint '%s' is damaged: its shards do not cover the model", ckpt);
		rc = -EINVAL;
		goto out_close;
	}
	return 0;

out_close:
	reader_close(rd);
	return rc;
}

/* Reads [flat, flat+n) of kind 0 (parameters), 1 (m) or 2 (v). */
static int reader_fetch(struct reader *rd, int kind, size_t flat, size_t n, float *dst, char *err,
			size_t errlen)
{
	size_t end = flat + n;

	for (size_t i = 0; i < rd->n_ranges && n; i++) {
		const struct range *r = &rd->ranges[i];
		size_t a = r->flat > flat ? r->flat : flat;
		size_t b = r->flat + r->len < end ? r->flat + r->len : end;
		off_t off;
		int rc;

		if (a >= b)
			continue;
		off = (off_t)(r->data + ((uint64_t)kind * r->len + (a - r->flat)) * sizeof(float));
		rc = read_full(rd->fd[r->shard], dst + (a - flat), (b - a) * sizeof(float), off);
		if (rc) {
			crun__seterr(err, errlen, "cannot read checkpoint '%s': %s", rd->path,
				     strerror(-rc));
			return rc;
		}
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
		for (size_t j = a; j < b; j++) {
			uint32_t u;

			memcpy(&u, &dst[j - flat], 4);
			u = (uint32_t)get_le((const uint8_t *)&u, 4);
			memcpy(&dst[j - flat], &u, 4);
		}
#endif
	}
	return 0;
}

static bool same_model(const struct crun__model_config *a, const struct crun__model_config *b)
{
	return a->context == b->context && a->embed_dim == b->embed_dim && a->width == b->width &&
	       a->layers == b->layers && a->ffn_mult == b->ffn_mult;
}

int crun__ckpt_load(struct crun__parallel *par, const struct crun__model *model, const char *ckpt,
		    char *err, size_t errlen)
{
	struct reader rd;
	int rc = reader_open(&rd, ckpt, err, errlen);

	if (rc)
		return rc;
	if (!same_model(&rd.meta.model, &model->cfg) || rd.meta.n_params != model->n_params) {
		crun__seterr(
			err, errlen,
			"checkpoint '%s' is of another model (context %d, embed_dim %d, width %d, "
			"layers %d, ffn_mult %d)",
			ckpt, rd.meta.model.context, rd.meta.model.embed_dim, rd.meta.model.width,
			rd.meta.model.layers, rd.meta.model.ffn_mult);
		rc = -EINVAL;
		goto out_close;
	}
	for (int s = 0; s < crun__parallel_n_segments(par) && !rc; s++) {
		struct crun__view pv, ov;

		crun__parallel_held(par, s, &pv, &ov);
		rc = reader_fetch(&rd, 0, pv.flat, pv.n, pv.p, err, errlen);
		if (!rc)
			rc = reader_fetch(&rd, 1, ov.flat, ov.n, ov.m, err, errlen);
		if (!rc)
			rc = reader_fetch(&rd, 2, ov.flat, ov.n, ov.v, err, errlen);
	}
out_close:
	reader_close(&rd);
	return rc;
}

int crun__ckpt_export(const char *path, const char *out, char *err, size_t errlen)
{
	char ckpt[PATH_MAX], probe[PATH_MAX];
	struct crun__model *model;
	struct reader rd;
	struct wfile w;
	struct stat st;
	float *params;
	int rc;

	snprintf(probe, sizeof(probe), "%s/MANIFEST", path);
	if (stat(probe, &st) == 0) {
		snprintf(ckpt, sizeof(ckpt), "%s", path);
	} else {
		int64_t step;

		rc = crun__ckpt_latest(path, &step, err, errlen);
		if (rc == -ENOENT)
			crun__seterr(err, errlen, "no complete checkpoint in '%s'", path);
		if (rc)
			return rc;
		crun__ckpt_path(path, step, ckpt, sizeof(ckpt));
	}
	rc = reader_open(&rd, ckpt, err, errlen);
	if (rc)
		return rc;
	rd.meta.model.init_std = 0.02f;
	model = crun__model_create(&rd.meta.model, err, errlen);
	if (!model) {
		rc = -EINVAL;
		goto out_close;
	}
	params = malloc(rd.meta.n_params * sizeof(float));
	if (!params) {
		crun__seterr(err, errlen, "export: out of memory");
		rc = -ENOMEM;
		goto out_model;
	}
	rc = reader_fetch(&rd, 0, 0, rd.meta.n_params, params, err, errlen);
	if (rc)
		goto out_params;

	rc = w_open(&w, out);
	if (rc) {
		crun__seterr(err, errlen, "cannot write '%s': %s", out, strerror(-rc));
		goto out_params;
	}
	w_bytes(&w, MODEL_MAGIC, 8);
	w_u32(&w, 1);
	w_u32(&w, (uint32_t)model->n_tensors);
	w_u64(&w, model->n_params);
	w_u64(&w, (uint64_t)rd.meta.step);
	w_u32(&w, (uint32_t)model->cfg.context);
	w_u32(&w, (uint32_t)model->cfg.embed_dim);
	w_u32(&w, (uint32_t)model->cfg.width);
	w_u32(&w, (uint32_t)model->cfg.layers);
	w_u32(&w, (uint32_t)model->cfg.ffn_mult);
	w_u32(&w, 0);
	for (int i = 0; i < model->n_tensors; i++) {
		const struct crun__tensor *t = &model->tensors[i];
		char name[24] = {0};

		memcpy(name, t->name, strnlen(t->name, sizeof(name)));
		w_bytes(&w, name, sizeof(name));
		w_u64(&w, t->offset);
		w_u32(&w, (uint32_t)t->rows);
		w_u32(&w, (uint32_t)t->cols);
	}
	w_floats(&w, params, model->n_params);
	rc = w_commit(&w);
	if (rc)
		crun__seterr(err, errlen, "cannot write '%s': %s", out, strerror(-rc));
out_params:
	free(params);
out_model:
	crun__model_destroy(model);
out_close:
	reader_close(&rd);
	return rc;
}

int crun__ckpt_read_consolidated(const char *path, float **params, size_t *n_params,
				 struct crun__model_config *cfg, int64_t *step, char *err,
				 size_t errlen)
{
	uint8_t hdr[56];
	struct stat st;
	uint64_t n, n_tensors, data;
	float *p;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		crun__seterr(err, errlen, "cannot read '%s': %s", path, strerror(errno));
		return rc;
	}
	rc = -EINVAL;
	if (fstat(fd, &st) < 0 || read_full(fd, hdr, sizeof(hdr), 0) ||
	    memcmp(hdr, MODEL_MAGIC, 8) || get_le(hdr + 8, 4) != 1) {
		crun__seterr(err, errlen, "'%s' is not a crun-train model file", path);
		goto out_close;
	}
	n_tensors = get_le(hdr + 12, 4);
	n = get_le(hdr + 16, 8);
	data = sizeof(hdr) + n_tensors * 40;
	if (n == 0 || n > (uint64_t)st.st_size / 4 || data + n * 4 != (uint64_t)st.st_size) {
		crun__seterr(err, errlen, "'%s' is damaged: wrong length", path);
		goto out_close;
	}
	*step = (int64_t)get_le(hdr + 24, 8);
	cfg->context = (int)get_le(hdr + 32, 4);
	cfg->embed_dim = (int)get_le(hdr + 36, 4);
	cfg->width = (int)get_le(hdr + 40, 4);
	cfg->layers = (int)get_le(hdr + 44, 4);
	cfg->ffn_mult = (int)get_le(hdr + 48, 4);
	cfg->init_std = 0.02f;
	p = malloc(n * sizeof(float));
	if (!p) {
		crun__seterr(err, errlen, "cannot read '%s': out of memory", path);
		rc = -ENOMEM;
		goto out_close;
	}
	rc = read_full(fd, p, n * sizeof(float), (off_t)data);
	if (rc) {
		free(p);
		crun__seterr(err, errlen, "cannot read '%s': %s", path, strerror(-rc));
		goto out_close;
	}
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
	for (uint64_t i = 0; i < n; i++) {
		uint32_t u;

		memcpy(&u, &p[i], 4);
		u = (uint32_t)get_le((const uint8_t *)&u, 4);
		memcpy(&p[i], &u, 4);
	}
#endif
	*params = p;
	*n_params = (size_t)n;
	rc = 0;
out_close:
	close(fd);
	return rc;
}

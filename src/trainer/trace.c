/* The step timeline's recorder and its Chrome trace writer (trace.h). */
#include "trainer/trace.h"

#include "common/fs.h"
#include "common/record.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ev grows by doubling, up to capacity. */
struct crun__trace {
	int rank, world;
	size_t capacity, n, alloc;
	uint64_t dropped;
	struct crun__trace_event *ev;
};

static const char *const track_names[CRUN__TRACK_COUNT] = {
	[CRUN__TRACK_STEP] = "step",
	[CRUN__TRACK_COMPUTE] = "compute",
	[CRUN__TRACK_COMM] = "comm",
	[CRUN__TRACK_OPTIMIZER] = "optimizer",
	[CRUN__TRACK_CHECKPOINT] = "checkpoint",
};

struct crun__trace *crun__trace_create(int rank, int world, size_t capacity)
{
	struct crun__trace *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->rank = rank;
	t->world = world;
	t->capacity = capacity;
	return t;
}

void crun__trace_destroy(struct crun__trace *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		free(t->ev[i].text);
	free(t->ev);
	free(t);
}

int crun__trace_add(struct crun__trace *t, const struct crun__trace_event *ev)
{
	struct crun__trace_event *e;

	if (t->n >= t->capacity) {
		t->dropped++;
		return -ENOSPC;
	}
	if (t->n == t->alloc) {
		size_t alloc = t->alloc ? 2 * t->alloc : 256;

		if (alloc > t->capacity)
			alloc = t->capacity;
		e = realloc(t->ev, alloc * sizeof(*e));
		if (!e) {
			t->dropped++;
			return -ENOMEM;
		}
		t->ev = e;
		t->alloc = alloc;
	}
	e = &t->ev[t->n++];
	*e = *ev;
	if (e->track >= CRUN__TRACK_COUNT)
		e->track = CRUN__TRACK_STEP;
	if (e->dur_us < 0)
		e->dur_us = 0;
	e->text = NULL;
	if (ev->text) {
		e->text = strdup(ev->text);
		if (!e->text)
			return -ENOMEM;
	}
	return 0;
}

size_t crun__trace_count(const struct crun__trace *t)
{
	return t->n;
}

uint64_t crun__trace_dropped(const struct crun__trace *t)
{
	return t->dropped;
}

const char *crun__trace_track_name(enum crun__trace_track track)
{
	return track < CRUN__TRACK_COUNT ? track_names[track] : "?";
}

int crun__trace_json_string(FILE *out, const char *s)
{
	json_t *v = crun__record_text(s);
	char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;

	json_decref(v);
	if (!text)
		return -ENOMEM;
	fputs(text, out);
	free(text);
	return 0;
}

/* A metadata event: {"ph":"M","pid":P,"tid":T,"name":NAME,"args":{"name":VALUE}}
 * (or "sort_index" with a number when value is NULL), after the events
 * before it. */
static int write_meta(FILE *out, int pid, int tid, const char *name, const char *value,
		      int sort_index)
{
	int rc = 0;

	fprintf(out, ",\n");
	fprintf(out, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{", pid, tid,
		name);
	if (value) {
		fputs("\"name\":", out);
		rc = crun__trace_json_string(out, value);
	} else {
		fprintf(out, "\"sort_index\":%d", sort_index);
	}
	fputs("}}", out);
	return rc;
}

static int write_event(FILE *out, int pid, const struct crun__trace_event *e)
{
	int rc;

	fputs("{\"ph\":\"X\",\"name\":", out);
	rc = crun__trace_json_string(out, e->name ? e->name : "");
	fprintf(out,
		",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%" PRId64 ",\"dur\":%" PRId64
		",\"args\":{\"step\":%" PRId64,
		crun__trace_track_name(e->track), pid, (int)e->track, e->ts_us, e->dur_us, e->step);
	if (e->unit >= 0)
		fprintf(out, ",\"unit\":%d", e->unit);
	if (e->elements)
		fprintf(out, ",\"elements\":%" PRIu64, e->elements);
	if (e->bytes)
		fprintf(out, ",\"bytes\":%" PRIu64, e->bytes);
	if (e->text && !rc) {
		fputs(",\"text\":", out);
		rc = crun__trace_json_string(out, e->text);
	}
	fputs("}}", out);
	return rc;
}

int crun__trace_write(const struct crun__trace *t, FILE *out)
{
	char pname[32];
	int rc;

	snprintf(pname, sizeof(pname), "rank %d", t->rank);
	/* the first event, then the others each after a comma */
	fputs("{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":", out);
	fprintf(out, "%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":", t->rank);
	rc = crun__trace_json_string(out, pname);
	fputs("}}", out);
	/* a failed string leaves the document unfinished: stop there */
	if (!rc)
		rc = write_meta(out, t->rank, 0, "process_sort_index", NULL, t->rank);
	for (int k = 0; k < CRUN__TRACK_COUNT && !rc; k++) {
		rc = write_meta(out, t->rank, k, "thread_name", track_names[k], 0);
		if (!rc)
			rc = write_meta(out, t->rank, k, "thread_sort_index", NULL, k);
	}
	for (size_t i = 0; i < t->n && !rc; i++) {
		fputs(",\n", out);
		rc = write_event(out, t->rank, &t->ev[i]);
	}
	if (rc)
		return rc;
	fprintf(out,
		"\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"rank\":%d,\"world_size\":%d,"
		"\"clock\":\"CLOCK_REALTIME\",\"dropped\":%" PRIu64 "}}\n",
		t->rank, t->world, t->dropped);
	return ferror(out) ? -EIO : 0;
}

int crun__trace_save(const struct crun__trace *t, const char *path)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	int rc;

	if (!out)
		return -errno;
	rc = crun__trace_write(t, out);
	if (fclose(out) != 0 && !rc)
		rc = -ENOMEM;
	if (!rc)
		rc = crun__write_atomic(path, buf, len, 0644);
	free(buf);
	return rc;
}

int crun__trace_path(const char *pattern, int rank, int world, char *out, size_t len)
{
	static const char tag[] = "{rank}";
	const char *p = pattern, *hit;
	size_t used = 0;
	int n;

	if (!strstr(pattern, tag)) {
		n = world > 1 ? snprintf(out, len, "%s.rank%d", pattern, rank)
			      : snprintf(out, len, "%s", pattern);
		return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
	}
	while ((hit = strstr(p, tag))) {
		n = snprintf(out + used, len - used, "%.*s%d", (int)(hit - p), p, rank);
		if (n < 0 || (size_t)n >= len - used)
			return -ENAMETOOLONG;
		used += (size_t)n;
		p = hit + sizeof(tag) - 1;
	}
	n = snprintf(out + used, len - used, "%s", p);
	return n < 0 || (size_t)n >= len - used ? -ENAMETOOLONG : 0;
}

int64_t crun__trace_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

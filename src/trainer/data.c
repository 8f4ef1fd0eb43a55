/* Corpus loading and generation, the train/validation split and the
 * distributed sampler. */
#include "trainer/data.h"

#include "common/util.h"
#include "trainer/rng.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The generated corpus: sentences from a small grammar over a few hundred
 * words, drawn with a skew towards the start of each list so that the
 * text has a Zipf-like shape a model can learn from. */
static const char *const dets[] = {
	"the", "a", "this", "that", "every", "one", "my", "our", "his", "her", "their", "some",
};
static const char *const adjs[] = {
	"small",  "old",    "red",    "quiet",	 "bright",  "heavy",   "green",
	"cold",	  "happy",  "tall",   "dark",	 "young",   "strange", "gentle",
	"wild",	  "busy",   "tired",  "clever",	 "warm",    "empty",   "golden",
	"narrow", "broken", "silver", "patient", "curious", "distant", "hidden",
};
static const char *const nouns[] = {
	"dog",	   "cat",   "river",   "house",	 "child",  "teacher",  "bird",	 "garden",
	"machine", "city",  "road",    "farmer", "window", "letter",   "train",	 "storm",
	"tree",	   "boat",  "king",    "song",	 "door",   "mountain", "friend", "market",
	"lamp",	   "horse", "village", "doctor", "bridge", "forest",   "sailor", "painter",
	"island",  "clock", "student", "baker",	 "field",  "ship",
};
static const char *const names[] = {
	"anna", "tom", "maria", "leo", "sara", "ben", "nora", "omar", "ida", "paul",
};
static const char *const vts[] = {
	"sees",	   "finds", "builds",  "carries",   "watches", "likes",
	"follows", "opens", "paints",  "remembers", "helps",   "calls",
	"visits",  "meets", "answers", "keeps",	    "shows",   "leaves",
};
static const char *const vis[] = {
	"sleeps", "runs",    "waits",	"sings",   "falls", "laughs",
	"works",  "listens", "returns", "wanders", "rests", "smiles",
};
static const char *const advs[] = {
	"quickly", "slowly", "quietly",	 "again",	   "often",	"never",
	"always",  "today",  "at night", "in the morning", "once more", "without a word",
};
static const char *const preps[] = {
	"over", "under", "near", "behind", "beside", "across", "into", "through", "with", "from",
};
static const char *const conjs[] = {
	"and", "but", "while", "because", "so", "when",
};

struct gen {
	uint8_t *out;
	size_t len, pos;
	struct crun__rng rng;
	bool cap; /* capitalise the next letter */
};

static void put(struct gen *g, const char *s)
{
	for (; *s && g->pos < g->len; s++) {
		char c = *s;

		if (g->cap && c >= 'a' && c <= 'z') {
			c = (char)(c - 'a' + 'A');
			g->cap = false;
		}
		g->out[g->pos++] = (uint8_t)c;
	}
}

/* Index in [0, n), skewed towards 0 (density ~ 1/sqrt(x)). */
static size_t pick(struct gen *g, size_t n)
{
	double u = crun__rng_unit(crun__rng_next(&g->rng));

	return (size_t)(u * u * (double)n);
}

#define PICK(g, list) ((list)[pick(g, CRUN_ARRAY_SIZE(list))])

static bool chance(struct gen *g, int percent)
{
	return crun__rng_below(&g->rng, 100) < (uint32_t)percent;
}

static void noun_phrase(struct gen *g)
{
	bool plural;

	if (chance(g, 15)) {
		g->cap = true; /* a name */
		put(g, PICK(g, names));
		return;
	}
	plural = chance(g, 20);
	put(g, plural ? (chance(g, 50) ? "the" : "some") : PICK(g, dets));
	put(g, " ");
	if (chance(g, 45)) {
		put(g, PICK(g, adjs));
		put(g, " ");
	}
	put(g, PICK(g, nouns));
	if (plural)
		put(g, "s");
}

static void clause(struct gen *g)
{
	noun_phrase(g);
	put(g, " ");
	if (chance(g, 60)) {
		put(g, PICK(g, vts));
		put(g, " ");
		noun_phrase(g);
	} else {
		put(g, PICK(g, vis));
	}
	if (chance(g, 35)) {
		put(g, " ");
		put(g, PICK(g, preps));
		put(g, " ");
		noun_phrase(g);
	}
	if (chance(g, 25)) {
		put(g, " ");
		put(g, PICK(g, advs));
	}
}

void crun__data_generate(uint8_t *out, size_t len, uint64_t seed)
{
	struct gen g = {.out = out, .len = len, .rng = {crun__rng_mix(seed)}, .cap = true};
	int in_par = 0;

	while (g.pos < g.len) {
		g.cap = true;
		clause(&g);
		if (chance(&g, 30)) {
			put(&g, chance(&g, 50) ? ", " : " ");
			put(&g, PICK(&g, conjs));
			put(&g, " ");
			clause(&g);
		}
		put(&g, chance(&g, 90) ? "." : "?");
		if (++in_par >= 4 && chance(&g, 30)) {
			put(&g, "\n");
			in_par = 0;
		} else {
			put(&g, " ");
		}
	}
}

double crun__data_unigram_bits(const uint8_t *buf, size_t len)
{
	size_t count[256] = {0};
	double h = 0;

	for (size_t i = 0; i < len; i++)
		count[buf[i]]++;
	for (int c = 0; c < 256; c++) {
		if (count[c]) {
			double p = (double)count[c] / (double)len;

			h -= p * log2(p);
		}
	}
	return h;
}

static int read_file(const char *path, uint8_t **out, size_t *outlen, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	uint8_t *buf = NULL;
	int rc = 0;

	if (!f) {
		rc = -errno;
		crun__seterr(err, errlen, "cannot read data '%s': %s", path, strerror(errno));
		return rc;
	}
	if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		crun__seterr(err, errlen, "cannot read data '%s': not a regular file", path);
		goto out_close;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		rc = -ENOMEM;
		crun__seterr(err, errlen, "cannot read data '%s': out of memory", path);
		goto out_close;
	}
	if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		rc = -EIO;
		crun__seterr(err, errlen, "cannot read data '%s': short read", path);
		free(buf);
		goto out_close;
	}
	*out = buf;
	*outlen = (size_t)st.st_size;
out_close:
	fclose(f);
	return rc;
}

int crun__data_load(struct crun__data *d, const char *path, size_t gen_bytes, uint64_t gen_seed,
		    double val_fraction, int context, char *err, size_t errlen)
{
	size_t val_len;
	int rc;

	memset(d, 0, sizeof(*d));
	d->context = context;
	if (path && *path) {
		rc = read_file(path, &d->bytes, &d->len, err, errlen);
		if (rc)
			return rc;
	} else {
		d->bytes = malloc(gen_bytes);
		if (!d->bytes) {
			crun__seterr(err, errlen, "cannot generate data: out of memory");
			return -ENOMEM;
		}
		d->len = gen_bytes;
		crun__data_generate(d->bytes, gen_bytes, gen_seed);
	}
	val_len = (size_t)floor((double)d->len * val_fraction);
	d->train_len = d->len - val_len;
	if (d->train_len <= (size_t)context || val_len <= (size_t)context) {
		crun__seterr(err, errlen,
			     "data '%s' is too small: %zu bytes leave no %d-byte window in the "
			     "training or validation part",
			     path && *path ? path : "(generated)", d->len, context + 1);
		crun__data_finish(d);
		return -EINVAL;
	}
	d->n_train = d->train_len - (size_t)context;
	d->n_val = val_len - (size_t)context;
	return 0;
}

void crun__data_finish(struct crun__data *d)
{
	free(d->bytes);
	memset(d, 0, sizeof(*d));
}

void crun__data_sample(const struct crun__data *d, int val, size_t idx, uint8_t *out)
{
	size_t start = (val ? d->train_len : 0) + idx;

	memcpy(out, d->bytes + start, (size_t)d->context + 1);
}

int crun__sampler_init(struct crun__sampler *s, size_t n, uint64_t seed)
{
	memset(s, 0, sizeof(*s));
	if (n == 0 || n > UINT32_MAX)
		return -EINVAL;
	s->perm = malloc(n * sizeof(*s->perm));
	if (!s->perm)
		return -ENOMEM;
	s->n = n;
	s->seed = seed;
	s->epoch = -1;
	return 0;
}

void crun__sampler_finish(struct crun__sampler *s)
{
	free(s->perm);
	memset(s, 0, sizeof(*s));
}

size_t crun__sampler_at(struct crun__sampler *s, int64_t epoch, size_t pos)
{
	if (s->epoch != epoch) {
		/* Fisher-Yates with the j-th draw a function of (seed, epoch, j) */
		for (size_t i = 0; i < s->n; i++)
			s->perm[i] = (uint32_t)i;
		for (size_t i = s->n - 1; i > 0; i--) {
			uint64_t r = crun__rng_at(s->seed, 1000 + (uint64_t)epoch, i);
			size_t j = (size_t)(((r >> 32) * (uint64_t)(i + 1)) >> 32);
			uint32_t t = s->perm[i];

			s->perm[i] = s->perm[j];
			s->perm[j] = t;
		}
		s->epoch = epoch;
	}
	return s->perm[pos % s->n];
}

size_t crun__sampler_rank_at(struct crun__sampler *s, int64_t epoch, int rank, int world, size_t k)
{
	return crun__sampler_at(s, epoch, (size_t)rank + k * (size_t)world);
}

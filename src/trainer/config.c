/* crun-train's configuration: the table of keys, loading a YAML file
 * read by common/yaml.c (whose nodes keep line numbers for messages), and
 * --set overrides. */
#include "trainer/config.h"

#include "common/util.h"
#include "common/yaml.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdint.h>
#include <sys/stat.h>

#define F(field) offsetof(struct crun__train_config, field)
#define I64 9.2e18

/* The one table of keys and defaults. man/crun-train.yaml.5.scd documents
 * the same rows; tests/integration/train-config.sh checks that every key
 * and default is there. */
static const struct crun__config_key keys[] = {
	{"model", "context", CRUN_CONFIG_INT, F(model.context), "32", 1, 4096, false, NULL,
	 "bytes of context the model sees; it predicts the byte that follows them"},
	{"model", "embed_dim", CRUN_CONFIG_INT, F(model.embed_dim), "16", 1, 4096, false, NULL,
	 "size of each byte embedding and position embedding"},
	{"model", "width", CRUN_CONFIG_INT, F(model.width), "128", 1, 65536, false, NULL,
	 "width of the residual stream"},
	{"model", "layers", CRUN_CONFIG_INT, F(model.layers), "2", 0, 1024, false, NULL,
	 "number of residual MLP blocks"},
	{"model", "ffn_mult", CRUN_CONFIG_INT, F(model.ffn_mult), "4", 1, 64, false, NULL,
	 "hidden width of a block's MLP, as a multiple of width"},
	{"model", "init_std", CRUN_CONFIG_FLOAT, F(model.init_std), "0.02", 0, 10, true, NULL,
	 "standard deviation of the initial embeddings and head weights"},
	{"model", "seed", CRUN_CONFIG_INT, F(model.seed), "1234", 0, I64, false, NULL,
	 "seed of the initial parameters"},
	{"model", "checkpoint_activations", CRUN_CONFIG_BOOL, F(model.checkpoint_activations),
	 "false", 0, 0, false, NULL,
	 "keep only each block's input and recompute the rest in the backward pass "
	 "(train.device cuda)"},

	{"data", "path", CRUN_CONFIG_STRING, F(data.path), "", 0, 0, false, NULL,
	 "file to train on, read as bytes; empty: a generated English-like corpus"},
	{"data", "generate_bytes", CRUN_CONFIG_INT, F(data.generate_bytes), "2000000", 1024,
	 1 << 30, false, NULL, "size of the generated corpus when path is empty"},
	{"data", "seed", CRUN_CONFIG_INT, F(data.seed), "1", 0, I64, false, NULL,
	 "seed of the generated corpus"},
	{"data", "val_fraction", CRUN_CONFIG_FLOAT, F(data.val_fraction), "0.05", 0, 0.5, true,
	 NULL, "fraction of the data, taken from its end, held out for validation"},

	{"optim", "lr", CRUN_CONFIG_FLOAT, F(optim.lr), "0.003", 0, 10, true, NULL,
	 "peak learning rate of AdamW"},
	{"optim", "schedule", CRUN_CONFIG_ENUM, F(optim.schedule), "cosine", 0, 0, false,
	 "cosine|linear|constant", "decay of the learning rate after the warm-up"},
	{"optim", "warmup_steps", CRUN_CONFIG_INT, F(optim.warmup_steps), "20", 0, I64, false, NULL,
	 "steps of linear warm-up from 0 to lr"},
	{"optim", "min_lr_ratio", CRUN_CONFIG_FLOAT, F(optim.min_lr_ratio), "0.1", 0, 1, false,
	 NULL, "learning rate at the last step, as a fraction of lr"},
	{"optim", "beta1", CRUN_CONFIG_FLOAT, F(optim.beta1), "0.9", 0, 0.999999, false, NULL,
	 "AdamW decay rate of the first moment"},
	{"optim", "beta2", CRUN_CONFIG_FLOAT, F(optim.beta2), "0.95", 0, 0.999999, false, NULL,
	 "AdamW decay rate of the second moment"},
	{"optim", "eps", CRUN_CONFIG_FLOAT, F(optim.eps), "1e-08", 0, 1, true, NULL,
	 "AdamW epsilon"},
	{"optim", "weight_decay", CRUN_CONFIG_FLOAT, F(optim.weight_decay), "0.1", 0, 10, false,
	 NULL, "decoupled weight decay, applied to matrices only"},
	{"optim", "grad_clip", CRUN_CONFIG_FLOAT, F(optim.grad_clip), "1", 0, 1e30, false, NULL,
	 "largest global gradient norm; 0: no clipping"},

	{"train", "steps", CRUN_CONFIG_INT, F(train.steps), "200", 1, 1e12, false, NULL,
	 "optimizer steps of the whole run"},
	{"train", "batch_size", CRUN_CONFIG_INT, F(train.batch_size), "64", 1, 1 << 24, false, NULL,
	 "global batch: samples per step over all ranks and micro-steps"},
	{"train", "seed", CRUN_CONFIG_INT, F(train.seed), "1", 0, I64, false, NULL,
	 "seed of the per-epoch shuffle of the training samples"},
	{"train", "eval_every", CRUN_CONFIG_INT, F(train.eval_every), "0", 0, 1e12, false, NULL,
	 "steps between validation passes; 0: only after the last step"},
	{"train", "eval_samples", CRUN_CONFIG_INT, F(train.eval_samples), "2048", 1, 1 << 30, false,
	 NULL, "validation samples per pass, spread evenly over the held-out data"},
	{"train", "threads", CRUN_CONFIG_INT, F(train.threads), "0", 0, 1024, false, NULL,
	 "OpenBLAS threads per rank; 0: OpenBLAS's default (OPENBLAS_NUM_THREADS, "
	 "OMP_NUM_THREADS)"},
	{"train", "stop_at", CRUN_CONFIG_INT, F(train.stop_at), "0", 0, 1e12, false, NULL,
	 "stop after this step as if interrupted (after its checkpoint, if any); 0: never"},
	{"train", "device", CRUN_CONFIG_ENUM, F(train.device), "cpu", 0, 0, false, "cpu|cuda",
	 "where the model computes: cpu (OpenBLAS) or cuda (the GPU that LOCAL_RANK picks)"},
	{"train", "precision", CRUN_CONFIG_ENUM, F(train.precision), "fp32", 0, 0, false,
	 "fp32|bf16",
	 "number format of matrix products and activations; bf16 keeps fp32 master weights, "
	 "gradients and optimizer state (train.device cuda)"},
	{"train", "slow_rank", CRUN_CONFIG_INT, F(train.slow_rank), "-1", -1, 1 << 24, false, NULL,
	 "a testing aid: the rank that sleeps train.slow_delay in every step; -1: none"},
	{"train", "slow_delay", CRUN_CONFIG_DURATION, F(train.slow_delay_ms), "0s", 0, 0, false,
	 NULL, "how long train.slow_rank sleeps in the compute part of every step"},

	{"parallel", "strategy", CRUN_CONFIG_ENUM, F(parallel.strategy), "ddp", 0, 0, false,
	 "ddp|zero1|zero2|zero3|fsdp",
	 "how gradients, optimizer state and parameters are "
	 "shared out over the ranks"},
	{"parallel", "grad_accum", CRUN_CONFIG_INT, F(parallel.grad_accum), "1", 1, 65536, false,
	 NULL, "micro-steps per step; ranks communicate only on the last"},
	{"parallel", "bucket_mb", CRUN_CONFIG_FLOAT, F(parallel.bucket_mb), "25", 0, 1e6, true,
	 NULL, "MiB of gradients reduced together (ddp, zero1, zero2)"},
	{"parallel", "backend", CRUN_CONFIG_ENUM, F(parallel.backend), "cpu", 0, 0, false,
	 "cpu|nccl", "collective backend: cpu (TCP and shared memory) or nccl (train.device cuda)"},
	{"parallel", "reduce_dtype", CRUN_CONFIG_ENUM, F(parallel.reduce_dtype), "compute", 0, 0,
	 false, "compute|fp32",
	 "number format gradients are reduced in: compute (train.precision) or fp32; the cpu "
	 "backend always reduces in fp32"},
	{"parallel", "timeout", CRUN_CONFIG_DURATION, F(parallel.timeout_ms), "0s", 0, 0, false,
	 NULL,
	 "longest wait for a peer in a collective before the rank gives up; "
	 "0: CRUN_COMM_TIMEOUT, else 300s"},

	{"checkpoint", "dir", CRUN_CONFIG_STRING, F(checkpoint.dir), "", 0, 0, false, NULL,
	 "directory of checkpoints, shared by all ranks; empty: no checkpoints"},
	{"checkpoint", "every", CRUN_CONFIG_INT, F(checkpoint.every), "0", 0, 1e12, false, NULL,
	 "steps between checkpoints; 0: only after the last step"},
	{"checkpoint", "keep", CRUN_CONFIG_INT, F(checkpoint.keep), "2", 1, 1e6, false, NULL,
	 "complete checkpoints kept; older ones are deleted"},
	{"checkpoint", "resume", CRUN_CONFIG_BOOL, F(checkpoint.resume), "true", 0, 0, false, NULL,
	 "start from the latest complete checkpoint in dir, when there is one"},

	{"log", "every", CRUN_CONFIG_INT, F(log.every), "10", 1, 1e12, false, NULL,
	 "steps between progress lines"},
	{"log", "csv", CRUN_CONFIG_STRING, F(log.csv), "", 0, 0, false, NULL,
	 "file that receives one line of metrics per step; empty: none"},

	{"trace", "path", CRUN_CONFIG_STRING, F(trace.path), "", 0, 0, false, NULL,
	 "Chrome trace file of the step timeline, per rank ({rank}, or .rank<N> appended); "
	 "empty: none"},
	{"trace", "warmup", CRUN_CONFIG_INT, F(trace.warmup), "1", 0, 1e12, false, NULL,
	 "steps of the run before the traced ones"},
	{"trace", "steps", CRUN_CONFIG_INT, F(trace.steps), "20", 1, 100000, false, NULL,
	 "steps traced"},
};

static const char *const sections[] = {
	"model", "data", "optim", "train", "parallel", "checkpoint", "log", "trace",
};

const struct crun__config_key *crun__train_config_keys(size_t *count)
{
	*count = CRUN_ARRAY_SIZE(keys);
	return keys;
}

static void *field(struct crun__train_config *cfg, const struct crun__config_key *k)
{
	return (char *)cfg + k->offset;
}

static const void *cfield(const struct crun__train_config *cfg, const struct crun__config_key *k)
{
	return (const char *)cfg + k->offset;
}

static bool choice_ok(const char *choices, const char *v)
{
	size_t n = strlen(v);
	const char *p = choices;

	while (p && *p) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);

		if (len == n && !strncmp(p, v, n))
			return true;
		p = bar ? bar + 1 : NULL;
	}
	return false;
}

static const char *type_name(const struct crun__config_key *k, char *buf, size_t len)
{
	switch (k->type) {
	case CRUN_CONFIG_INT:
		snprintf(buf, len, "an integer from %.0f to %.0f", k->min, k->max);
		break;
	case CRUN_CONFIG_FLOAT:
		snprintf(buf, len, "a number %s %g and at most %g", k->min_open ? "above" : "from",
			 k->min, k->max);
		break;
	case CRUN_CONFIG_STRING:
		snprintf(buf, len, "a string");
		break;
	case CRUN_CONFIG_ENUM:
		snprintf(buf, len, "one of %s", k->choices);
		break;
	case CRUN_CONFIG_BOOL:
		snprintf(buf, len, "true or false");
		break;
	case CRUN_CONFIG_DURATION:
		snprintf(buf, len, "a duration like 30s, 500ms or 5m");
		break;
	}
	return buf;
}

/* Parses v for key k and stores it. -EINVAL when v does not fit the key. */
static int assign(struct crun__train_config *cfg, const struct crun__config_key *k, const char *v)
{
	void *dst = field(cfg, k);

	switch (k->type) {
	case CRUN_CONFIG_INT: {
		char why[128];
		int64_t n;

		if (crun__parse_int64(v, (int64_t)k->min, (int64_t)k->max, &n, why, sizeof(why)))
			return -EINVAL;
		*(int64_t *)dst = n;
		return 0;
	}
	case CRUN_CONFIG_FLOAT: {
		char *end;
		double d;

		errno = 0;
		d = strtod(v, &end);
		if (!*v || *end || errno || !isfinite(d) || d < k->min || d > k->max ||
		    (k->min_open && d == k->min))
			return -EINVAL;
		*(double *)dst = d;
		return 0;
	}
	case CRUN_CONFIG_BOOL:
		if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on") ||
		    !strcmp(v, "1"))
			*(bool *)dst = true;
		else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off") ||
			 !strcmp(v, "0"))
			*(bool *)dst = false;
		else
			return -EINVAL;
		return 0;
	case CRUN_CONFIG_DURATION: {
		char why[128];
		int64_t ms;

		if (crun__parse_duration_ms(v, &ms, why, sizeof(why)))
			return -EINVAL;
		*(int64_t *)dst = ms;
		return 0;
	}
	case CRUN_CONFIG_ENUM:
		if (!choice_ok(k->choices, v))
			return -EINVAL;
		/* fall through */
	case CRUN_CONFIG_STRING: {
		char *copy = strdup(v);

		if (!copy)
			return -ENOMEM;
		free(*(char **)dst);
		*(char **)dst = copy;
		return 0;
	}
	}
	return -EINVAL;
}

static const struct crun__config_key *find_key(const char *section, size_t seclen, const char *name)
{
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(keys); i++)
		if (strlen(keys[i].section) == seclen &&
		    !strncmp(keys[i].section, section, seclen) && !strcmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

static bool is_section(const char *s)
{
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(sections); i++)
		if (!strcmp(sections[i], s))
			return true;
	return false;
}

int crun__train_config_init(struct crun__train_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(keys); i++) {
		int rc = assign(cfg, &keys[i], keys[i].def);

		if (rc) {
			crun__train_config_finish(cfg);
			return rc == -ENOMEM ? -ENOMEM : -EINVAL;
		}
	}
	return 0;
}

void crun__train_config_finish(struct crun__train_config *cfg)
{
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(keys); i++) {
		if (keys[i].type == CRUN_CONFIG_STRING || keys[i].type == CRUN_CONFIG_ENUM) {
			char **p = field(cfg, &keys[i]);

			free(*p);
			*p = NULL;
		}
	}
}

/* Text of a scalar node; a null means empty. */
static const char *scalar_text(const struct crun__yaml_node *n)
{
	return n->kind == CRUN__YAML_NULL ? "" : n->text;
}

/* A null or an empty scalar, quoted or not: a section with nothing in it,
 * or a file with no sections. */
static bool is_empty(const struct crun__yaml_node *n)
{
	return n->kind == CRUN__YAML_NULL || (n->kind == CRUN__YAML_SCALAR && !*n->text);
}

static bool is_scalar(const struct crun__yaml_node *n)
{
	return n->kind == CRUN__YAML_SCALAR || n->kind == CRUN__YAML_NULL;
}

static const char *node_kind(const struct crun__yaml_node *n)
{
	return n->kind == CRUN__YAML_SEQUENCE ? "a list" : "a mapping";
}

static int load_section(struct crun__train_config *cfg, const char *path, const char *section,
			const struct crun__yaml_node *map, char *err, size_t errlen)
{
	unsigned char seen[CRUN_ARRAY_SIZE(keys)] = {0};
	char tn[96];

	if (is_empty(map))
		return 0; /* "model:" with nothing under it */
	if (map->kind != CRUN__YAML_MAPPING) {
		crun__seterr(err, errlen,
			     "config '%s' line %d: section '%s' must be a mapping of keys", path,
			     map->line, section);
		return -EINVAL;
	}
	for (size_t i = 0; i < map->n; i++) {
		const struct crun__yaml_node *kn = crun__yaml_deref(map->items[2 * i]);
		const struct crun__yaml_node *vn = crun__yaml_deref(map->items[2 * i + 1]);
		const struct crun__config_key *k;
		const char *name;
		int rc;

		if (!is_scalar(kn)) {
			crun__seterr(err, errlen,
				     "config '%s' line %d: keys of section '%s' must be names",
				     path, kn->line, section);
			return -EINVAL;
		}
		name = kn->text;
		k = find_key(section, strlen(section), name);
		if (!k) {
			crun__seterr(err, errlen, "config '%s' line %d: unknown key '%s.%s'", path,
				     kn->line, section, name);
			return -EINVAL;
		}
		if (seen[k - keys]++) {
			crun__seterr(err, errlen, "config '%s' line %d: duplicate key '%s.%s'",
				     path, kn->line, section, name);
			return -EINVAL;
		}
		if (!is_scalar(vn)) {
			crun__seterr(err, errlen,
				     "config '%s' line %d: key '%s.%s' expects %s, got %s", path,
				     vn->line, section, name, type_name(k, tn, sizeof(tn)),
				     node_kind(vn));
			return -EINVAL;
		}
		rc = assign(cfg, k, scalar_text(vn));
		if (rc == -ENOMEM) {
			crun__seterr(err, errlen, "config '%s': out of memory", path);
			return rc;
		}
		if (rc) {
			crun__seterr(err, errlen,
				     "config '%s' line %d: key '%s.%s' expects %s, got '%s'", path,
				     vn->line, section, name, type_name(k, tn, sizeof(tn)),
				     scalar_text(vn));
			return rc;
		}
	}
	return 0;
}

static int load_sections(struct crun__train_config *cfg, const char *path,
			 const struct crun__yaml_node *root, char *err, size_t errlen)
{
	unsigned char seen[CRUN_ARRAY_SIZE(sections)] = {0};

	if (root->kind != CRUN__YAML_MAPPING) {
		crun__seterr(err, errlen,
			     "config '%s' line %d: expected a mapping of sections (model, data, "
			     "optim, train, parallel, checkpoint, log, trace)",
			     path, root->line);
		return -EINVAL;
	}
	for (size_t i = 0; i < root->n; i++) {
		const struct crun__yaml_node *kn = crun__yaml_deref(root->items[2 * i]);
		const struct crun__yaml_node *vn = crun__yaml_deref(root->items[2 * i + 1]);
		size_t idx = 0;
		int rc;

		if (!is_scalar(kn)) {
			crun__seterr(err, errlen,
				     "config '%s' line %d: section names must be names", path,
				     kn->line);
			return -EINVAL;
		}
		if (!is_section(kn->text)) {
			crun__seterr(err, errlen, "config '%s' line %d: unknown key '%s'", path,
				     kn->line, kn->text);
			return -EINVAL;
		}
		while (strcmp(sections[idx], kn->text))
			idx++;
		if (seen[idx]++) {
			crun__seterr(err, errlen, "config '%s' line %d: duplicate key '%s'", path,
				     kn->line, kn->text);
			return -EINVAL;
		}
		rc = load_section(cfg, path, kn->text, vn, err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

int crun__train_config_load(struct crun__train_config *cfg, const char *path, char *err,
			    size_t errlen)
{
	struct crun__yaml_error e;
	struct crun__yaml_doc *doc;
	int rc;

	rc = crun__yaml_load_file(path, SIZE_MAX, &doc, &e);
	if (rc) {
		crun__yaml_format_error(&e, "config", path, err, errlen);
		return rc;
	}
	if (crun__yaml_is_empty(doc)) {
		/* nothing or only comments: a mistake, not a way to say "defaults"
		 * (running without a config is) */
		crun__yaml_format_empty("config", path, err, errlen);
		crun__yaml_destroy(doc);
		return -EINVAL;
	}
	rc = load_sections(cfg, path, crun__yaml_root(doc), err, errlen);
	crun__yaml_destroy(doc);
	return rc;
}

/* Whether a path has a ".." component. */
static bool has_dotdot(const char *path)
{
	const char *c = path;

	while (*c) {
		size_t n = strcspn(c, "/");

		if (n == 2 && c[0] == '.' && c[1] == '.')
			return true;
		c += n;
		if (*c == '/')
			c++;
	}
	return false;
}

int crun__train_config_find(const char *name, const char *const *datadirs, char *out, size_t outlen,
			    bool *found_elsewhere, char *err, size_t errlen)
{
	static const char *const subdirs[] = {"/configs/", "/"};
	static const char more[] = ", …";
	char searched[1024];
	size_t used = 0;
	bool cut = false;
	struct stat st;

	*found_elsewhere = false;
	if (name[0] == '/' || has_dotdot(name) || stat(name, &st) == 0 || errno != ENOENT ||
	    !datadirs || !datadirs[0]) {
		if (snprintf(out, outlen, "%s", name) >= (int)outlen)
			goto out_too_long;
		return 0;
	}
	searched[0] = '\0';
	for (size_t i = 0; datadirs[i]; i++) {
		for (size_t j = 0; j < CRUN_ARRAY_SIZE(subdirs); j++) {
			bool last = !datadirs[i + 1] && j + 1 == CRUN_ARRAY_SIZE(subdirs);
			int n = snprintf(out, outlen, "%s%s%s", datadirs[i], subdirs[j], name);

			if (n < 0 || (size_t)n >= outlen)
				goto out_too_long;
			if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
				*found_elsewhere = true;
				return 0;
			}
			/* the directory searched, for the message: whole, or "…"
			 * once one does not fit (room for that kept) */
			if (cut)
				continue;
			n = snprintf(searched + used, sizeof(searched) - sizeof(more) - used,
				     "%s'%s%s'", last ? " or " : ", ", datadirs[i],
				     j == 0 ? "/configs" : "");
			if (n >= 0 && (size_t)n < sizeof(searched) - sizeof(more) - used) {
				used += (size_t)n;
			} else {
				memcpy(searched + used, more, sizeof(more));
				cut = true;
			}
		}
	}
	crun__seterr(err, errlen, "cannot read config '%s': not in the working directory%s", name,
		     searched);
	return -ENOENT;

out_too_long:
	crun__seterr(err, errlen, "config '%s': path too long", name);
	return -ENAMETOOLONG;
}

int crun__train_config_set(struct crun__train_config *cfg, const char *assignment, char *err,
			   size_t errlen)
{
	const char *eq = strchr(assignment, '=');
	const char *dot = strchr(assignment, '.');
	const struct crun__config_key *k = NULL;
	char name[64], tn[96];
	size_t namelen;
	int rc;

	if (!eq || !dot || dot > eq) {
		crun__seterr(err, errlen, "--set '%s': expected section.key=value", assignment);
		return -EINVAL;
	}
	namelen = (size_t)(eq - dot - 1);
	if (namelen < sizeof(name)) {
		memcpy(name, dot + 1, namelen);
		name[namelen] = '\0';
		k = find_key(assignment, (size_t)(dot - assignment), name);
	}
	if (!k) {
		crun__seterr(err, errlen, "--set '%s': unknown key '%.*s'", assignment,
			     (int)(eq - assignment), assignment);
		return -EINVAL;
	}
	rc = assign(cfg, k, eq + 1);
	if (rc == -ENOMEM) {
		crun__seterr(err, errlen, "--set '%s': out of memory", assignment);
		return rc;
	}
	if (rc) {
		crun__seterr(err, errlen, "--set '%s': key '%s.%s' expects %s, got '%s'",
			     assignment, k->section, k->name, type_name(k, tn, sizeof(tn)), eq + 1);
		return rc;
	}
	return 0;
}

/* The keys that only the GPU path implements. */
static int check_device(const struct crun__train_config *cfg, char *err, size_t errlen)
{
	bool cuda = !strcmp(cfg->train.device, "cuda");
	bool nccl = !strcmp(cfg->parallel.backend, "nccl");

#ifndef CRUN_HAVE_CUDA
	if (cuda || nccl) {
		crun__seterr(
			err, errlen,
			"%s needs a crun-train built with CUDA (meson setup -Dcuda=enabled); this "
			"one computes on the cpu only",
			cuda ? "train.device cuda" : "parallel.backend nccl");
		return -EINVAL;
	}
#endif
	if (cuda)
		return 0;
	if (nccl) {
		crun__seterr(err, errlen, "parallel.backend nccl needs train.device cuda");
		return -EINVAL;
	}
	if (!strcmp(cfg->train.precision, "bf16")) {
		crun__seterr(
			err, errlen,
			"train.precision bf16 needs train.device cuda (the cpu path computes in "
			"fp32)");
		return -EINVAL;
	}
	if (cfg->model.checkpoint_activations) {
		crun__seterr(err, errlen, "model.checkpoint_activations needs train.device cuda");
		return -EINVAL;
	}
	return 0;
}

int crun__train_config_check(const struct crun__train_config *cfg, int world_size, char *err,
			     size_t errlen)
{
	int64_t per = (int64_t)world_size * cfg->parallel.grad_accum;
	int rc = check_device(cfg, err, errlen);

	if (rc)
		return rc;

	if (cfg->train.batch_size % per) {
		crun__seterr(err, errlen,
			     "train.batch_size %lld does not split evenly over %d ranks x %lld "
			     "micro-steps (parallel.grad_accum)",
			     (long long)cfg->train.batch_size, world_size,
			     (long long)cfg->parallel.grad_accum);
		return -EINVAL;
	}
	if (cfg->train.slow_rank >= world_size) {
		crun__seterr(err, errlen, "train.slow_rank %lld is not a rank of %d",
			     (long long)cfg->train.slow_rank, world_size);
		return -EINVAL;
	}
	if (cfg->data.path[0] == '\0' && cfg->data.generate_bytes <= 4 * cfg->model.context) {
		crun__seterr(err, errlen,
			     "data.generate_bytes %lld is too small for model.context %lld",
			     (long long)cfg->data.generate_bytes, (long long)cfg->model.context);
		return -EINVAL;
	}
	return 0;
}

/* Quotes strings that YAML would read as something else. */
static void print_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', out);
		fputc(*s, out);
	}
	fputc('"', out);
}

void crun__train_config_print(const struct crun__train_config *cfg, FILE *out)
{
	const char *section = "";

	for (size_t i = 0; i < CRUN_ARRAY_SIZE(keys); i++) {
		const struct crun__config_key *k = &keys[i];
		const void *v = cfield(cfg, k);

		if (strcmp(section, k->section)) {
			section = k->section;
			fprintf(out, "%s:\n", section);
		}
		fprintf(out, "  %s: ", k->name);
		switch (k->type) {
		case CRUN_CONFIG_INT:
			fprintf(out, "%lld", (long long)*(const int64_t *)v);
			break;
		case CRUN_CONFIG_FLOAT: {
			double d = *(const double *)v;
			char buf[40];

			/* the shortest text that reads back as the same double */
			for (int prec = 1; prec <= 17; prec++) {
				snprintf(buf, sizeof(buf), "%.*g", prec, d);
				if (strtod(buf, NULL) == d)
					break;
			}
			fprintf(out, "%s", buf);
			break;
		}
		case CRUN_CONFIG_BOOL:
			fprintf(out, "%s", *(const bool *)v ? "true" : "false");
			break;
		case CRUN_CONFIG_DURATION: {
			long long ms = (long long)*(const int64_t *)v;

			if (ms % 1000)
				fprintf(out, "%lldms", ms);
			else
				fprintf(out, "%llds", ms / 1000);
			break;
		}
		case CRUN_CONFIG_ENUM:
			fprintf(out, "%s", *(char *const *)v);
			break;
		case CRUN_CONFIG_STRING:
			print_string(out, *(char *const *)v);
			break;
		}
		fputc('\n', out);
	}
}

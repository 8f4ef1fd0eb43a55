/* crun-train's configuration: one table of keys (section, name, type,
 * default, limits, meaning) in config.c is the single source of the
 * defaults; man/crun-train.yaml.5.scd lists the same table and a unit test
 * checks that the two agree.
 *
 * A config is a YAML mapping of sections (model, data, optim, train,
 * parallel, checkpoint, log, trace), each a mapping of scalar keys. Loading and
 * --set overrides check every key and value; errors name the key and, for
 * files, the line:
 *   "config 'x.yaml' line 4: unknown key 'model.widht'" */
#ifndef CRUN_TRAINER_CONFIG_H
#define CRUN_TRAINER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct crun__train_config {
	struct {
		int64_t context;
		int64_t embed_dim;
		int64_t width;
		int64_t layers;
		int64_t ffn_mult;
		double init_std;
		int64_t seed;
		bool checkpoint_activations;
	} model;
	struct {
		char *path;
		int64_t generate_bytes;
		int64_t seed;
		double val_fraction;
	} data;
	struct {
		double lr;
		char *schedule; /* cosine, linear, constant */
		int64_t warmup_steps;
		double min_lr_ratio;
		double beta1;
		double beta2;
		double eps;
		double weight_decay;
		double grad_clip;
	} optim;
	struct {
		int64_t steps;
		int64_t batch_size;
		int64_t seed;
		int64_t eval_every;
		int64_t eval_samples;
		int64_t threads;
		int64_t stop_at;
		char *device;	       /* cpu, cuda */
		char *precision;       /* fp32, bf16 */
		int64_t slow_rank;     /* -1: none */
		int64_t slow_delay_ms; /* slow_rank sleeps this long per step */
	} train;
	struct {
		char *strategy; /* ddp, zero1, zero2, zero3, fsdp */
		int64_t grad_accum;
		double bucket_mb;
		char *backend;
		char *reduce_dtype; /* compute, fp32 */
		int64_t timeout_ms;
	} parallel;
	struct {
		char *dir;
		int64_t every;
		int64_t keep;
		bool resume;
	} checkpoint;
	struct {
		int64_t every;
		char *csv;
	} log;
	struct {
		char *path; /* "": no trace */
		int64_t warmup;
		int64_t steps;
	} trace;
};

enum crun__config_type {
	CRUN_CONFIG_INT,
	CRUN_CONFIG_FLOAT,
	CRUN_CONFIG_STRING,
	CRUN_CONFIG_ENUM,
	CRUN_CONFIG_BOOL,
	CRUN_CONFIG_DURATION,
};

/* One row of the table of keys. */
struct crun__config_key {
	const char *section;
	const char *name;
	enum crun__config_type type;
	size_t offset;	     /* of the field in struct crun__train_config */
	const char *def;     /* default, as written in a config file */
	double min, max;     /* INT and FLOAT: allowed range */
	bool min_open;	     /* FLOAT: min itself is not allowed */
	const char *choices; /* ENUM: "a|b|c" */
	const char *meaning;
};

/* The table, in documentation order. */
const struct crun__config_key *crun__train_config_keys(size_t *count);

/* Fills cfg with the defaults. Returns 0 or -ENOMEM. Pair with finish. */
int crun__train_config_init(struct crun__train_config *cfg);
void crun__train_config_finish(struct crun__train_config *cfg);

/* The file that a config argument names. The path as given (relative to
 * the working directory) when it exists, when it is absolute or has a ".."
 * component, or when looking it up fails for another reason than its
 * absence (the load then says why); else the first regular file among
 * DIR/configs/NAME and DIR/NAME for each DIR of datadirs (in order,
 * NULL-terminated), so that "tiny.yaml" and "configs/tiny.yaml" both find
 * an installed DATADIR/configs/tiny.yaml. Returns 0 with the path in out
 * and *found_elsewhere telling whether it is not the argument itself;
 * -ENOENT with err naming the places searched (ending with ", …" when
 * they do not all fit); -ENAMETOOLONG. */
int crun__train_config_find(const char *name, const char *const *datadirs, char *out, size_t outlen,
			    bool *found_elsewhere, char *err, size_t errlen);

/* Applies the keys of a YAML file on top of what cfg holds. 0, or a
 * negative errno with the reason in err ("config 'x.yaml' line 4: ...").
 * A file with no content (nothing, or only comments) and a directory are
 * errors: "config 'x.yaml' is empty", "config 'x' is a directory". */
int crun__train_config_load(struct crun__train_config *cfg, const char *path, char *err,
			    size_t errlen);

/* Applies one "section.key=value" override. 0 or -EINVAL with err. */
int crun__train_config_set(struct crun__train_config *cfg, const char *assignment, char *err,
			   size_t errlen);

/* Checks what single keys cannot: relations between keys. world_size is
 * the number of ranks (batch_size must split evenly over ranks and
 * micro-steps; train.slow_rank must be one of the ranks). The GPU keys
 * (train.device cuda, train.precision bf16, parallel.backend nccl,
 * model.checkpoint_activations) need train.device cuda, which needs a
 * build with CUDA (CRUN_HAVE_CUDA). 0 or -EINVAL with err. */
int crun__train_config_check(const struct crun__train_config *cfg, int world_size, char *err,
			     size_t errlen);

/* Writes the effective configuration as YAML that load() reads back. */
void crun__train_config_print(const struct crun__train_config *cfg, FILE *out);

#endif

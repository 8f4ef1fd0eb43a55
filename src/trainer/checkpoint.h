/* Sharded checkpoints of crun-train.
 *
 * A checkpoint is a directory DIR/step-NNNNNNNNNN holding one file per
 * rank, shard-RRRRR-of-WWWWW.bin, and a MANIFEST that marks it complete:
 *
 *   1. every rank writes its shard to a temporary file, fsyncs it, renames
 *      it into place and fsyncs the directory;
 *   2. the ranks agree (a collective) that every shard was written;
 *   3. rank 0 writes MANIFEST the same way (temporary file, fsync, rename,
 *      fsync of the directory). It lists each shard's size and FNV-1a
 *      checksum. Only a directory with a MANIFEST is ever loaded, so a
 *      crash at any point leaves either the previous checkpoint or a
 *      complete new one.
 *
 * MANIFEST is text, one "name value" per line: the step, world size,
 * strategy, the model's sizes, the training loss of the step and the
 * training time so far (train_loss, elapsed_s: optional; absent, or a
 * value that is not a number >= 0, reads as unknown and 0), then the
 * shards. Readers skip a "name value" line with a name they do not know
 * before the shard lines, so that keys added later keep a checkpoint
 * readable; a known name with a bad value is still an error, except for
 * the optional ones.
 *
 * A shard holds ranges of the flat parameter index space (the chunks the
 * rank owns, see parallel.h) with the parameters and both AdamW moments of
 * each, so a checkpoint written by W ranks loads at any world size and
 * with any strategy: each reader fetches exactly the ranges it holds.
 *
 * Shard file, little-endian: "CRUNSHRD", u32 version (1), u32 rank,
 * u32 world_size, u32 n_ranges, u64 step, u64 n_params; n_ranges times
 * (u64 flat, u64 len); then per range float32 p[len], m[len], v[len].
 *
 * Consolidated file (export): "CRUNMODL", u32 version (1), u32 n_tensors,
 * u64 n_params, u64 step, i32 context, embed_dim, width, layers, ffn_mult,
 * u32 0; n_tensors times (char name[24], u64 offset, u32 rows, u32 cols);
 * then float32 params[n_params]. */
#ifndef CRUN_TRAINER_CHECKPOINT_H
#define CRUN_TRAINER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/comm.h"
#include "trainer/model.h"
#include "trainer/parallel.h"

struct crun__ckpt_meta {
	int64_t step;
	int world_size;
	char strategy[16];
	struct crun__model_config model;
	size_t n_params;
	double train_loss; /* of the step (NAN: not recorded) */
	double elapsed_s;  /* seconds of training up to the step, over every run */
};

/* Writes the checkpoint of step (collective over comm) and then keeps only
 * the newest `keep` complete checkpoints in dir. 0 on every rank when the
 * checkpoint is complete, with the bytes of all its shards in *bytes
 * (NULL: not wanted), else a negative errno with the reason in err (the
 * same result on every rank unless the comm layer failed). */
int crun__ckpt_save(struct crun__parallel *par, struct crun__comm *comm, const char *dir,
		    const struct crun__ckpt_meta *meta, int64_t keep, uint64_t *bytes, char *err,
		    size_t errlen);

/* Step of the newest complete checkpoint in dir: 0 and *step, or -ENOENT
 * when there is none (also when dir does not exist). */
int crun__ckpt_latest(const char *dir, int64_t *step, char *err, size_t errlen);

/* Path of the checkpoint of step in dir. */
void crun__ckpt_path(const char *dir, int64_t step, char *out, size_t outlen);

/* Reads a checkpoint's MANIFEST. 0 or a negative errno with err. */
int crun__ckpt_read_meta(const char *ckpt, struct crun__ckpt_meta *meta, char *err, size_t errlen);

/* Fills what par holds (parameters and optimizer state) from the
 * checkpoint directory ckpt, after checking every shard's size and
 * checksum and that the shards cover the model exactly. The model must
 * match the checkpoint's (-EINVAL otherwise). */
int crun__ckpt_load(struct crun__parallel *par, const struct crun__model *model, const char *ckpt,
		    char *err, size_t errlen);

/* Writes the parameters of a checkpoint as one consolidated file. path is
 * a checkpoint (step-N) or a checkpoint.dir (its newest complete one). */
int crun__ckpt_export(const char *path, const char *out, char *err, size_t errlen);

/* Reads a consolidated file: the parameters (malloc'd, caller frees) and
 * the model configuration. */
int crun__ckpt_read_consolidated(const char *path, float **params, size_t *n_params,
				 struct crun__model_config *cfg, int64_t *step, char *err,
				 size_t errlen);

#endif

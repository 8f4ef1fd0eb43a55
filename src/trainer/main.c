/* crun-train: the command line, the training loop and its output.
 *
 * Exit codes: 0 success, 1 training failed (a collective, a checkpoint, an
 * I/O error), 78 usage or configuration error (trainer/fatal.h). Every
 * error that ends the run goes through crun__train_fatal(), which also
 * tells the agent in TORCHELASTIC_ERROR_FILE. */
#include "common/fs.h"
#include "common/log.h"
#include "common/util.h"
#include "crun-config.h"
#include "crun-train-features.h"
#include "trainer/checkpoint.h"
#include "trainer/comm.h"
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/device.h"
#include "trainer/fatal.h"
#include "trainer/hostmem.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/parallel.h"
#include "trainer/trace.h"

#include <cblas.h>
#include <crun/worker.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FAILED CRUN__EXIT_FAILED
#define EXIT_USAGE CRUN__EXIT_CONFIG

static void usage(FILE *out)
{
	fprintf(out, "usage: crun-train [--set SECTION.KEY=VALUE]... [CONFIG.yaml]\n"
		     "       crun-train export CHECKPOINT OUT\n"
		     "       crun-train compare [--tolerance X] A B\n"
		     "\n"
		     "Trains a byte-level language model with data parallelism over the ranks\n"
		     "that crun starts (RANK, WORLD_SIZE, CRUN_STORE, ...); alone it runs as\n"
		     "one rank. The config's keys are listed in crun-train.yaml(5); a relative\n"
		     "CONFIG.yaml that is not in the working directory is looked for among the\n"
		     "installed examples (crun-train tiny.yaml; crun-train(1), FILES).\n"
		     "\n"
		     "options:\n"
		     "  -s, --set SECTION.KEY=VALUE  override a config key (repeatable; applied\n"
		     "                               after the file, in order)\n"
		     "  -p, --print-config           print the effective config as YAML and exit\n"
		     "  -h, --help                   show this help and exit\n"
		     "  -V, --version                show the version and the build's features\n"
		     "                               (cpu, cuda, nccl) and exit\n"
		     "\n"
		     "export writes the parameters of a checkpoint (a step-N directory, or a\n"
		     "checkpoint.dir for its newest complete one) as one consolidated file.\n"
		     "compare reads two such files and exits 0 when their relative L2\n"
		     "difference is at most the tolerance (default 0: bitwise equal), 1 if\n"
		     "not.\n"
		     "\n"
		     "exit status: 0 success, 1 training failed, 78 usage or config error\n");
}

struct run {
	const struct crun__train_config *cfg;
	struct crun__comm *comm;
	int rank, world;
	struct crun__data data;
	struct crun__sampler sampler;
	struct crun__model *model;
	struct crun__parallel *par; /* the host copy: layout, parameters, optimizer state */
	struct crun__device *dev;   /* train.device, attached to par */
	struct crun__optim optim;
	enum crun__strategy strategy;
	int accum, micro;
	int64_t global_batch;
	int64_t steps_per_epoch;
	uint8_t *tokens;
	FILE *csv;
	double unigram_bits;
	int64_t resumed_from;
	int64_t step; /* steps completed */
	double last_loss;
	double val_loss;
	/* Training time: t0 is when this process's training loop started;
	 * elapsed_before the seconds of the runs before it (the checkpoint's). */
	uint64_t t0;
	double elapsed_before;
	struct crun__trace *trace; /* trace.path's recorder; NULL: none */
	char trace_path[PATH_MAX];
	char err[512];
};

static void out_line(const struct run *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Rank 0's progress and summary go to stdout, one whole line at a time. */
static void out_line(const struct run *r, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	if (r->rank != 0)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	fflush(stdout);
	crun__write_all(1, line, (size_t)n);
}

/* A collective failed: EXIT_FAILED, so that crun restarts the group. */
#define comm_failed(r, what) \
	crun__train_fatal(EXIT_FAILED, "%s failed: %s", (what), crun__comm_errmsg((r)->comm))

/* Rows of step (0-based) for this rank: grad_accum micro-steps of micro
 * rows, from rank's positions of the epoch's shuffled order. */
static void fill_batch(struct run *r, int64_t step)
{
	int64_t epoch = step / r->steps_per_epoch;
	size_t j = (size_t)(step % r->steps_per_epoch);
	size_t per_rank = (size_t)(r->global_batch / r->world);
	size_t row = (size_t)r->data.context + 1;

	for (size_t i = 0; i < per_rank; i++) {
		size_t idx = crun__sampler_rank_at(&r->sampler, epoch, r->rank, r->world,
						   j * per_rank + i);

		crun__data_sample(&r->data, 0, idx, r->tokens + i * row);
	}
}

/* Mean validation loss (nats) over eval_samples evenly spaced samples of
 * the held-out split, spread over the ranks. */
static int evaluate(struct run *r, double *out)
{
	size_t E = (size_t)r->cfg->train.eval_samples, row = (size_t)r->data.context + 1;
	size_t W = (size_t)r->world, per_rank, chunks, k = 0;
	double sum = 0;
	int rc;

	if (E > r->data.n_val)
		E = r->data.n_val;
	per_rank = (E + W - 1) / W;
	chunks = (per_rank + (size_t)r->micro - 1) / (size_t)r->micro;
	for (size_t c = 0; c < chunks; c++) {
		int rows = 0;

		for (; rows < r->micro; rows++, k++) {
			size_t q = (size_t)r->rank + k * W;

			if (q >= E)
				break;
			crun__data_sample(&r->data, 1,
					  (size_t)((double)q * (double)r->data.n_val / (double)E),
					  r->tokens + (size_t)rows * row);
		}
		rc = crun__schedule_forward(r->dev, r->tokens, rows, &sum);
		if (rc)
			return rc;
	}
	rc = crun__comm_allreduce_f64(r->comm, &sum, 1);
	if (rc)
		return rc;
	*out = sum / (double)E;
	return 0;
}

static double peak_rss_mib(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) < 0)
		return 0;
	return (double)ru.ru_maxrss / 1024.0;
}

static void model_config(const struct crun__train_config *cfg, struct crun__model_config *mc)
{
	mc->context = (int)cfg->model.context;
	mc->embed_dim = (int)cfg->model.embed_dim;
	mc->width = (int)cfg->model.width;
	mc->layers = (int)cfg->model.layers;
	mc->ffn_mult = (int)cfg->model.ffn_mult;
	mc->init_std = (float)cfg->model.init_std;
}

/* Resumes from the newest complete checkpoint that rank 0 finds. Returns
 * an exit status or 0 to go on. */
static int resume(struct run *r)
{
	const char *dir = r->cfg->checkpoint.dir;
	const char *restarts = getenv("TORCHELASTIC_RESTART_COUNT");
	struct crun__ckpt_meta meta;
	char path[PATH_MAX];
	int64_t step = -1;
	double flag[2] = {0, 0}; /* ranks that failed to load; that found another model */
	int rc;

	if (r->rank == 0) {
		rc = crun__ckpt_latest(dir, &step, r->err, sizeof(r->err));
		if (rc && rc != -ENOENT)
			crun__warn("%s; starting from scratch", r->err);
		if (rc)
			step = -1;
	}
	rc = crun__comm_broadcast(r->comm, &step, sizeof(step), 0);
	if (rc)
		return comm_failed(r, "broadcast of the checkpoint step");
	if (step < 0)
		return 0;
	crun__ckpt_path(dir, step, path, sizeof(path));
	rc = crun__ckpt_read_meta(path, &meta, r->err, sizeof(r->err));
	if (!rc &&
	    (meta.model.context != r->model->cfg.context ||
	     meta.model.embed_dim != r->model->cfg.embed_dim ||
	     meta.model.width != r->model->cfg.width || meta.model.layers != r->model->cfg.layers ||
	     meta.model.ffn_mult != r->model->cfg.ffn_mult)) {
		crun__train_fatal(EXIT_USAGE,
				  "checkpoint '%s' is of another model (context %d, embed_dim %d, "
				  "width %d, layers %d, ffn_mult %d): use another checkpoint.dir",
				  path, meta.model.context, meta.model.embed_dim, meta.model.width,
				  meta.model.layers, meta.model.ffn_mult);
		flag[1] = 1;
	} else {
		if (!rc)
			rc = crun__ckpt_load(r->par, r->model, path, r->err, sizeof(r->err));
		if (rc)
			crun__train_fatal(EXIT_FAILED, "%s", r->err);
		flag[0] = rc ? 1 : 0;
	}
	/* every rank learns whether any failed, so none waits for the others */
	rc = crun__comm_allreduce_f64(r->comm, flag, 2);
	if (rc)
		return comm_failed(r, "agreement on the checkpoint");
	if (flag[1] > 0)
		return EXIT_USAGE;
	if (flag[0] > 0)
		return EXIT_FAILED;
	crun__schedule_upload(r->dev);
	r->step = step;
	r->resumed_from = step;
	r->last_loss = meta.train_loss;
	r->elapsed_before = meta.elapsed_s;
	out_line(r,
		 "resuming from checkpoint '%s': step %lld of %lld, saved by %d rank%s as %s%s%s",
		 path, (long long)step, (long long)r->cfg->train.steps, meta.world_size,
		 meta.world_size == 1 ? "" : "s", meta.strategy,
		 restarts && strcmp(restarts, "0") ? ", restart " : "",
		 restarts && strcmp(restarts, "0") ? restarts : "");
	if (step >= r->cfg->train.steps)
		out_line(r,
			 "nothing to train: the checkpoint of step %lld is at or past "
			 "train.steps %lld",
			 (long long)step, (long long)r->cfg->train.steps);
	return 0;
}

/* Writes the trace file as it stands (a failure is a warning: the trace
 * is an aid, not the training). */
static void save_trace(struct run *r)
{
	int rc;

	if (!r->trace)
		return;
	rc = crun__trace_save(r->trace, r->trace_path);
	if (rc)
		crun__warn("cannot write trace '%s': %s", r->trace_path, strerror(-rc));
}

/* Seconds of training so far, over this run and the ones it resumed. */
static double elapsed(const struct run *r)
{
	return r->elapsed_before + (double)(crun__now_ns() - r->t0) * 1e-9;
}

static int save(struct run *r)
{
	struct crun__ckpt_meta meta;
	char path[PATH_MAX], human[32];
	int64_t t0 = crun__trace_now_us(), dt;
	uint64_t start = crun__now_ns(), bytes = 0;
	int rc;

	memset(&meta, 0, sizeof(meta));
	meta.step = r->step;
	meta.world_size = r->world;
	snprintf(meta.strategy, sizeof(meta.strategy), "%s", crun__strategy_name(r->strategy));
	meta.model = r->model->cfg;
	meta.n_params = r->model->n_params;
	meta.train_loss = r->last_loss;
	meta.elapsed_s = elapsed(r);
	crun__schedule_download(r->dev, true);
	crun_worker_heartbeat_section("checkpoint", 1);
	rc = crun__ckpt_save(r->par, r->comm, r->cfg->checkpoint.dir, &meta,
			     r->cfg->checkpoint.keep, &bytes, r->err, sizeof(r->err));
	crun_worker_heartbeat_section("checkpoint", 0);
	if (rc)
		return crun__train_fatal(EXIT_FAILED, "checkpoint of step %lld failed: %s",
					 (long long)r->step, r->err);
	dt = (int64_t)((crun__now_ns() - start) / 1000);
	crun__ckpt_path(r->cfg->checkpoint.dir, r->step, path, sizeof(path));
	if (r->trace) {
		struct crun__trace_event ev = {
			.name = "checkpoint",
			.track = CRUN__TRACK_CHECKPOINT,
			.ts_us = t0,
			.dur_us = dt,
			.step = r->step,
			.unit = -1,
			.bytes = bytes,
			.text = path,
		};

		crun__trace_add(r->trace, &ev);
	}
	crun__format_bytes(bytes, human, sizeof(human));
	out_line(r, "checkpoint of step %lld saved to '%s' (%llu bytes, %s, %.2f s)",
		 (long long)r->step, path, (unsigned long long)bytes, human, (double)dt * 1e-6);
	return 0;
}

static int open_csv(struct run *r)
{
	const char *path = r->cfg->log.csv;
	struct stat st;
	bool append = r->resumed_from > 0 && stat(path, &st) == 0 && st.st_size > 0;

	r->csv = fopen(path, append ? "a" : "w");
	if (!r->csv)
		return crun__train_fatal(EXIT_FAILED, "cannot write metrics '%s': %s", path,
					 strerror(errno));
	if (!append)
		fprintf(r->csv, "step,loss,lr,grad_norm,tokens_per_s,elapsed_s,val_loss,val_bpb\n");
	fflush(r->csv);
	return 0;
}

/* Every rank's value of x, then the largest. */
static int max_over_ranks(struct run *r, double x, double *out)
{
	double *v = calloc((size_t)r->world, sizeof(*v));
	int rc;

	if (!v)
		return -ENOMEM;
	v[r->rank] = x;
	rc = crun__comm_allreduce_f64(r->comm, v, (size_t)r->world);
	*out = v[0];
	for (int i = 1; i < r->world; i++)
		*out = v[i] > *out ? v[i] : *out;
	free(v);
	return rc;
}

/* SIGUSR1 or SIGUSR2: a scheduler's warning that the job will be stopped
 * soon (Slurm's --signal=USR1@60, which crun forwards to its workers). The
 * handler only notes it; the loop saves a checkpoint at the next logged
 * step, when every rank has agreed that one of them was warned. */
static volatile sig_atomic_t save_asked;

static void on_save_signal(int sig)
{
	(void)sig;
	save_asked = 1;
}

static void catch_save_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_save_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
}

/* At a logged step: a checkpoint when any rank was warned (collective).
 * saved: this step's checkpoint is already written. */
static int save_if_warned(struct run *r, bool saved)
{
	double any;
	int rc;

	if (!r->cfg->checkpoint.dir[0]) {
		if (save_asked) {
			save_asked = 0;
			out_line(r,
				 "warned by a signal at step %lld: no checkpoint.dir, "
				 "nothing saved",
				 (long long)r->step);
		}
		return 0;
	}
	rc = max_over_ranks(r, save_asked ? 1.0 : 0.0, &any);
	if (rc)
		return comm_failed(r, "agreement on a warned checkpoint");
	if (any <= 0)
		return 0;
	save_asked = 0;
	if (!saved) {
		rc = save(r);
		if (rc)
			return rc;
	}
	out_line(r, "checkpoint of step %lld saved: warned by a signal (SIGUSR1/SIGUSR2)",
		 (long long)r->step);
	return 0;
}

/* train.slow_rank's sleep in each step: a straggler for tests and demos. */
static void slow_down(const struct run *r)
{
	int64_t ms = r->cfg->train.slow_delay_ms;
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

	if (r->rank != r->cfg->train.slow_rank || ms <= 0)
		return;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int train_loop(struct run *r)
{
	const struct crun__train_config *cfg = r->cfg;
	int64_t steps = cfg->train.steps, first = r->step;
	uint64_t t0 = r->t0, t_log = t0;
	int64_t step_log = r->step;
	int64_t trace_from = first + cfg->trace.warmup, trace_to = trace_from + cfg->trace.steps;
	int rc;

	while (r->step < steps) {
		int64_t s = r->step;
		double lr = crun__optim_lr(&r->optim, s, steps), loss, gnorm;
		bool logged = false, saved, last;
		double val = NAN, work;
		/* The step's own work: its time less what it waited in the
		 * collectives, which in lock-step training is the time the
		 * slowest rank made it wait. */
		uint64_t t_step = crun__now_ns(), waited = crun__comm_wait_ns(r->comm);

		fill_batch(r, s);
		slow_down(r);
		if (r->trace && s >= trace_from && s < trace_to &&
		    crun__schedule_trace(r->dev, r->trace, s + 1))
			return crun__train_fatal(EXIT_FAILED, "out of memory for the trace");
		rc = crun__schedule_step(r->dev, &r->optim, r->tokens, r->global_batch, s + 1, lr,
					 &loss, &gnorm);
		if (rc)
			return comm_failed(r, "training step");
		if (!isfinite(loss))
			return crun__train_fatal(EXIT_FAILED,
						 "loss is %f at step %lld: training diverged "
						 "(lower optim.lr?)",
						 loss, (long long)s + 1);
		r->step = s + 1;
		r->last_loss = loss;
		if (r->trace && r->step == trace_to)
			save_trace(r); /* the traced steps are done: the file need not wait */
		waited = crun__comm_wait_ns(r->comm) - waited;
		t_step = crun__now_ns() - t_step;
		work = t_step > waited ? (double)(t_step - waited) * 1e-9 : 0;
		/* crun watches this worker from here */
		crun_worker_heartbeat_work(r->step, work);
		last = r->step == steps || r->step == cfg->train.stop_at;
		if (last || (cfg->train.eval_every && r->step % cfg->train.eval_every == 0)) {
			rc = evaluate(r, &val);
			if (rc)
				return comm_failed(r, "validation");
			if (last)
				r->val_loss = val;
		}
		if (r->step % cfg->log.every == 0 || r->step == steps || !isnan(val)) {
			uint64_t now = crun__now_ns();
			double dt = (double)(now - t_log) * 1e-9;
			double tps =
				dt > 0 ? (double)(r->step - step_log) * (double)r->global_batch / dt
				       : 0;
			double per_step = (double)(now - t0) * 1e-9 / (double)(r->step - first);

			if (isnan(val))
				out_line(r,
					 "step %lld/%lld loss=%.4f lr=%.1e tokens/s=%.0f eta=%.0fs",
					 (long long)r->step, (long long)steps, loss, lr, tps,
					 per_step * (double)(steps - r->step));
			else
				out_line(r,
					 "step %lld/%lld loss=%.4f lr=%.1e tokens/s=%.0f eta=%.0fs "
					 "val_loss=%.4f val_bpb=%.4f",
					 (long long)r->step, (long long)steps, loss, lr, tps,
					 per_step * (double)(steps - r->step), val, val / M_LN2);
			t_log = now;
			step_log = r->step;
			logged = true;
		}
		if (r->csv) {
			double el = (double)(crun__now_ns() - t0) * 1e-9;

			fprintf(r->csv, "%lld,%.6f,%.6e,%.6f,%.1f,%.3f,", (long long)r->step, loss,
				lr, gnorm,
				el > 0 ? (double)(r->step - first) * (double)r->global_batch / el
				       : 0.0,
				r->elapsed_before + el);
			if (isnan(val))
				fprintf(r->csv, ",\n");
			else
				fprintf(r->csv, "%.6f,%.6f\n", val, val / M_LN2);
			if (logged)
				fflush(r->csv);
		}
		saved = cfg->checkpoint.dir[0] &&
			((cfg->checkpoint.every && r->step % cfg->checkpoint.every == 0) ||
			 r->step == steps || r->step == cfg->train.stop_at);
		if (saved) {
			rc = save(r);
			if (rc)
				return rc;
		}
		if (r->step % cfg->log.every == 0 && r->step < steps) {
			rc = save_if_warned(r, saved);
			if (rc)
				return rc;
		}
		if (r->step == cfg->train.stop_at && r->step < steps) {
			out_line(r, "stopping after step %lld (train.stop_at)", (long long)r->step);
			break;
		}
	}
	return 0;
}

/* The summary's fields of a device that mirrors the host's state (empty
 * on the cpu): the largest over the ranks. Collective. */
static int device_summary(struct run *r, char *buf, size_t len)
{
	struct crun__device_memory dm;
	struct crun__device_times dt;
	double peak, used, act, tc, tm, tu, n;
	int rc;

	buf[0] = '\0';
	if (!r->dev->ops->mirrors)
		return 0;
	r->dev->ops->memory(r->dev, &dm);
	r->dev->ops->times(r->dev, &dt);
	n = dt.steps ? (double)dt.steps : 1.0;
	rc = max_over_ranks(r, (double)dm.act_bytes, &act);
	if (!rc)
		rc = max_over_ranks(r, (double)dm.peak_bytes, &peak);
	if (!rc)
		rc = max_over_ranks(r, (double)dm.used_bytes, &used);
	if (!rc)
		rc = max_over_ranks(r, dt.compute_ms / n, &tc);
	if (!rc)
		rc = max_over_ranks(r, dt.comm_ms / n, &tm);
	if (!rc)
		rc = max_over_ranks(r, dt.update_ms / n, &tu);
	if (rc)
		return rc;
	snprintf(buf, len,
		 " device=%s precision=%s reduce_dtype=%s backend=%s act_bytes_per_rank=%.0f "
		 "gpu_peak_alloc_bytes_per_rank=%.0f gpu_used_bytes_per_rank=%.0f "
		 "gpu_ms_compute=%.3f gpu_ms_exposed_comm=%.3f gpu_ms_update=%.3f",
		 r->dev->ops->name, r->cfg->train.precision, r->cfg->parallel.reduce_dtype,
		 crun__comm_backend(r->comm), act, peak, used, tc, tm, tu);
	return 0;
}

static int summarize(struct run *r, double elapsed, int64_t trained)
{
	struct crun__device_memory dm;
	double l2, rss, pbytes, gbytes, obytes;
	char dev[512];
	int rc;

	crun__schedule_download(r->dev, false);
	rc = crun__parallel_param_l2(r->par, &l2);
	r->dev->ops->memory(r->dev, &dm);
	/* a mirroring device keeps its gather buffers for the run: they count
	 * with the parameters */
	if (r->dev->ops->mirrors)
		dm.param_bytes += dm.gather_bytes;
	if (!rc)
		rc = max_over_ranks(r, peak_rss_mib(), &rss);
	if (!rc)
		rc = max_over_ranks(r, (double)dm.param_bytes, &pbytes);
	if (!rc)
		rc = max_over_ranks(r, (double)dm.grad_bytes, &gbytes);
	if (!rc)
		rc = max_over_ranks(r, (double)dm.optim_bytes, &obytes);
	if (!rc)
		rc = device_summary(r, dev, sizeof(dev));
	if (rc)
		return comm_failed(r, "summary");
	out_line(r,
		 "summary: steps=%lld train_loss=%.6f val_loss=%.6f val_bpb=%.6f unigram_bpb=%.6f "
		 "param_l2=%.10g tokens_per_s=%.0f elapsed_s=%.2f peak_rss_mib=%.1f strategy=%s "
		 "world_size=%d grad_accum=%d param_bytes_per_rank=%.0f param_bytes_total=%zu "
		 "grad_bytes_per_rank=%.0f optim_bytes_per_rank=%.0f resumed_from=%lld%s",
		 (long long)r->step, r->last_loss, r->val_loss, r->val_loss / M_LN2,
		 r->unigram_bits, l2,
		 elapsed > 0 ? (double)trained * (double)r->global_batch / elapsed : 0.0, elapsed,
		 rss, crun__strategy_name(r->strategy), r->world, r->accum, pbytes,
		 r->model->n_params * sizeof(float), gbytes, obytes, (long long)r->resumed_from,
		 dev);
	return 0;
}

/* The host memory of the run on this rank: the parameters and optimizer
 * state, the token rows of a step and, on the cpu, the device's buffers. */
static void host_need(const struct run *r, struct crun__host_need *need)
{
	struct crun__parallel_memory pm;

	memset(need, 0, sizeof(*need));
	crun__parallel_memory(r->par, &pm);
	need->param_bytes = pm.param_bytes;
	need->optim_bytes = pm.optim_bytes;
	need->token_bytes =
		(size_t)r->accum * (size_t)r->micro * ((size_t)r->model->cfg.context + 1);
	if (!r->dev->ops->mirrors)
		crun__device_cpu_need(crun__parallel_layout(r->par), r->model, &need->grad_bytes,
				      &need->gather_bytes, &need->act_bytes);
}

/* The run does not fit in host memory: a configuration error (another
 * attempt fails the same way), said with the numbers. */
static int host_oom(const struct crun__host_need *need)
{
	struct crun__host_avail avail;
	char msg[1024];

	crun__host_avail_read(&avail);
	crun__host_oom_message(need, &avail, msg, sizeof(msg));
	return crun__train_fatal(EXIT_USAGE, "%s", msg);
}

static int setup(struct run *r)
{
	const struct crun__train_config *cfg = r->cfg;
	struct crun__parallel_opts po;
	struct crun__device_memory mem;
	struct crun__host_need need;
	struct crun__model_config mc;
	char pb[32], gb[32], ob[32], xb[32], line[512];
	int rc;

	rc = crun__data_load(&r->data, cfg->data.path, (size_t)cfg->data.generate_bytes,
			     (uint64_t)cfg->data.seed, cfg->data.val_fraction,
			     (int)cfg->model.context, r->err, sizeof(r->err));
	if (rc)
		return crun__train_fatal(rc == -EINVAL || rc == -ENOENT ? EXIT_USAGE : EXIT_FAILED,
					 "%s", r->err);
	if ((int64_t)r->data.n_train < r->global_batch)
		return crun__train_fatal(EXIT_USAGE,
					 "data '%s' has %zu training samples, fewer than "
					 "train.batch_size %lld",
					 cfg->data.path[0] ? cfg->data.path : "(generated)",
					 r->data.n_train, (long long)r->global_batch);
	r->steps_per_epoch = (int64_t)r->data.n_train / r->global_batch;
	r->unigram_bits = crun__data_unigram_bits(r->data.bytes, r->data.train_len);
	if (crun__sampler_init(&r->sampler, r->data.n_train, (uint64_t)cfg->train.seed))
		return crun__train_fatal(EXIT_USAGE, "data '%s': too many samples for the sampler",
					 cfg->data.path);
	out_line(r,
		 "data '%s': %zu bytes, %zu for training (%zu samples, %lld steps per epoch), "
		 "%zu held out; unigram entropy %.4f bits/byte",
		 cfg->data.path[0] ? cfg->data.path : "(generated)", r->data.len, r->data.train_len,
		 r->data.n_train, (long long)r->steps_per_epoch, r->data.len - r->data.train_len,
		 r->unigram_bits);

	model_config(cfg, &mc);
	r->model = crun__model_create(&mc, r->err, sizeof(r->err));
	if (!r->model)
		return crun__train_fatal(EXIT_USAGE, "%s", r->err);
	po.strategy = r->strategy;
	po.grad_accum = r->accum;
	po.micro_batch = r->micro;
	po.bucket_bytes = (size_t)(cfg->parallel.bucket_mb * 1024 * 1024);
	r->par = crun__parallel_plan(r->model, r->comm, &po);
	if (!r->par)
		return crun__train_fatal(EXIT_FAILED, "out of memory");
	host_need(r, &need);
	r->tokens = malloc(need.token_bytes);
	if (!r->tokens || crun__parallel_alloc(r->par))
		return host_oom(&need);
	crun__parallel_init_params(r->par, (uint64_t)cfg->model.seed);
	rc = crun__device_attach(r->dev, r->model, r->par, r->comm, r->err, sizeof(r->err));
	if (rc == -ENOMEM && !r->dev->ops->mirrors)
		return host_oom(&need);
	if (rc)
		return crun__train_fatal(rc == -ENOSPC ? EXIT_USAGE : EXIT_FAILED, "%s", r->err);
	crun__schedule_upload(r->dev);
	r->dev->ops->describe(r->dev, line, sizeof(line));
	if (line[0])
		out_line(r, "%s", line);
	r->dev->ops->memory(r->dev, &mem);
	out_line(r,
		 "model: context %d, embed_dim %d, width %d, layers %d, ffn_mult %d: "
		 "%zu parameters in %d units",
		 mc.context, mc.embed_dim, mc.width, mc.layers, mc.ffn_mult, r->model->n_params,
		 r->model->n_units);
	crun__format_bytes(mem.param_bytes, pb, sizeof(pb));
	crun__format_bytes(mem.grad_bytes, gb, sizeof(gb));
	crun__format_bytes(mem.optim_bytes, ob, sizeof(ob));
	crun__format_bytes(mem.gather_bytes, xb, sizeof(xb));
	out_line(r,
		 "parallel: %s over %d rank%s, %d segment%s, global batch %lld = %d ranks x %d "
		 "micro-steps x %d; per rank: parameters %s%s%s%s, gradients %s, optimizer %s",
		 crun__strategy_name(r->strategy), r->world, r->world == 1 ? "" : "s",
		 crun__parallel_n_segments(r->par),
		 crun__parallel_n_segments(r->par) == 1 ? "" : "s", (long long)r->global_batch,
		 r->world, r->accum, r->micro, pb, mem.gather_bytes ? " (+ " : "",
		 mem.gather_bytes ? xb : "", mem.gather_bytes ? " for the gathered unit)" : "", gb,
		 ob);

	if (cfg->trace.path[0]) {
		size_t cap = (size_t)cfg->trace.steps * crun__schedule_trace_events(r->dev) + 1024;

		if (crun__trace_path(cfg->trace.path, r->rank, r->world, r->trace_path,
				     sizeof(r->trace_path)))
			return crun__train_fatal(EXIT_USAGE, "trace.path '%s': name too long",
						 cfg->trace.path);
		r->trace = crun__trace_create(r->rank, r->world, cap);
		if (!r->trace)
			return crun__train_fatal(EXIT_FAILED, "out of memory for the trace");
		/* an empty trace now: a path that cannot be written fails at once */
		rc = crun__trace_save(r->trace, r->trace_path);
		if (rc) {
			crun__trace_destroy(r->trace);
			r->trace = NULL;
			return crun__train_fatal(EXIT_USAGE, "cannot write trace '%s': %s",
						 r->trace_path, strerror(-rc));
		}
	}

	r->optim.lr = cfg->optim.lr;
	r->optim.schedule = (enum crun__lr_schedule)crun__lr_schedule_parse(cfg->optim.schedule);
	r->optim.warmup_steps = cfg->optim.warmup_steps;
	r->optim.min_lr_ratio = cfg->optim.min_lr_ratio;
	r->optim.beta1 = cfg->optim.beta1;
	r->optim.beta2 = cfg->optim.beta2;
	r->optim.eps = cfg->optim.eps;
	r->optim.weight_decay = cfg->optim.weight_decay;
	r->optim.grad_clip = cfg->optim.grad_clip;
	return 0;
}

static int train(const struct crun__train_config *cfg, const struct crun__comm_opts *copts)
{
	struct crun__device_opts dopts;
	const struct crun__device_ops *dev_ops;
	struct run r;
	int64_t trained;
	int rc;

	memset(&r, 0, sizeof(r));
	r.cfg = cfg;
	r.resumed_from = 0;
	r.last_loss = NAN;
	r.val_loss = NAN;
	r.strategy = (enum crun__strategy)crun__strategy_parse(cfg->parallel.strategy);
	r.accum = (int)cfg->parallel.grad_accum;
	r.global_batch = cfg->train.batch_size;
	r.world = copts->world_size;
	r.rank = copts->rank;
	r.micro = (int)(r.global_batch / r.world / r.accum);
	if (cfg->train.threads > 0)
		openblas_set_num_threads((int)cfg->train.threads);
	/* the device first: a rank without its GPU fails before the group forms */
	dev_ops = crun__device_find(cfg->train.device);
	if (!dev_ops)
		return crun__train_fatal(EXIT_USAGE, "train.device %s: not in this build",
					 cfg->train.device);
	memset(&dopts, 0, sizeof(dopts));
	dopts.local_rank = copts->local_rank;
	dopts.shared = strcmp(cfg->parallel.backend, "nccl") != 0;
	dopts.bf16 = !strcmp(cfg->train.precision, "bf16");
	dopts.reduce_fp32 = !strcmp(cfg->parallel.reduce_dtype, "fp32");
	dopts.recompute = cfg->model.checkpoint_activations;
	r.dev = crun__device_open(dev_ops, &dopts, r.err, sizeof(r.err));
	if (!r.dev)
		return crun__train_fatal(EXIT_FAILED, "train.device %s: %s", cfg->train.device,
					 r.err);

	/* Under crun, the initial heartbeat timeout covers the set-up. */
	crun_worker_heartbeat_section("setup", 1);
	r.comm = crun__comm_create(copts, r.err, sizeof(r.err));
	if (!r.comm) {
		rc = crun__train_fatal(EXIT_FAILED, "cannot join the collective group: %s", r.err);
		crun__device_close(r.dev);
		return rc;
	}
	rc = setup(&r);
	if (!rc && cfg->checkpoint.dir[0] && cfg->checkpoint.resume)
		rc = resume(&r);
	if (!rc && r.rank == 0 && cfg->log.csv[0])
		rc = open_csv(&r);
	if (rc)
		goto out;

	crun_worker_heartbeat_section("setup", 0);
	r.t0 = crun__now_ns();
	rc = train_loop(&r);
	if (rc)
		goto out;
	trained = r.step - r.resumed_from;
	/* the last step validated already, unless none ran */
	if (isnan(r.val_loss) && evaluate(&r, &r.val_loss)) {
		rc = comm_failed(&r, "validation");
		goto out;
	}
	rc = summarize(&r, (double)(crun__now_ns() - r.t0) * 1e-9, trained);
out:
	save_trace(&r);
	crun__trace_destroy(r.trace);
	if (r.csv && fclose(r.csv) != 0 && !rc)
		rc = crun__train_fatal(EXIT_FAILED, "cannot write metrics '%s': %s", cfg->log.csv,
				       strerror(errno));
	free(r.tokens);
	crun__device_close(r.dev);
	crun__parallel_destroy(r.par);
	crun__model_destroy(r.model);
	crun__sampler_finish(&r.sampler);
	crun__data_finish(&r.data);
	crun__comm_destroy(r.comm);
	return rc;
}

static int cmd_export(int argc, char **argv)
{
	char err[512];
	int64_t step;
	struct crun__model_config mc;
	float *p;
	size_t n;

	if (argc != 3)
		return crun__train_fatal(EXIT_USAGE, "usage: crun-train export CHECKPOINT OUT");
	if (crun__ckpt_export(argv[1], argv[2], err, sizeof(err)))
		return crun__train_fatal(EXIT_FAILED, "%s", err);
	if (crun__ckpt_read_consolidated(argv[2], &p, &n, &mc, &step, err, sizeof(err)))
		return crun__train_fatal(EXIT_FAILED, "%s", err);
	free(p);
	printf("exported step %lld (%zu parameters) to '%s'\n", (long long)step, n, argv[2]);
	return 0;
}

static int cmd_compare(int argc, char **argv)
{
	double tol = 0, num = 0, den = 0, maxabs = 0, rel;
	const char *a = NULL, *b = NULL;
	struct crun__model_config ca, cb;
	int64_t sa, sb;
	float *pa, *pb;
	size_t na, nb;
	char err[512];
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tolerance") && i + 1 < argc) {
			char *end;

			tol = strtod(argv[++i], &end);
			if (*end || !(tol >= 0))
				return crun__train_fatal(EXIT_USAGE,
							 "invalid tolerance '%s': expected a "
							 "number >= 0",
							 argv[i]);
		} else if (!a) {
			a = argv[i];
		} else if (!b) {
			b = argv[i];
		} else {
			a = NULL;
			break;
		}
	}
	if (!a || !b)
		return crun__train_fatal(EXIT_USAGE,
					 "usage: crun-train compare [--tolerance X] A B");
	if (crun__ckpt_read_consolidated(a, &pa, &na, &ca, &sa, err, sizeof(err)))
		return crun__train_fatal(EXIT_USAGE, "%s", err);
	if (crun__ckpt_read_consolidated(b, &pb, &nb, &cb, &sb, err, sizeof(err))) {
		free(pa);
		return crun__train_fatal(EXIT_USAGE, "%s", err);
	}
	if (na != nb) {
		rc = crun__train_fatal(EXIT_USAGE,
				       "'%s' and '%s' hold different models (%zu and %zu "
				       "parameters)",
				       a, b, na, nb);
		goto out;
	}
	for (size_t i = 0; i < na; i++) {
		double d = (double)pa[i] - (double)pb[i];

		num += d * d;
		den += (double)pa[i] * pa[i];
		if (fabs(d) > maxabs)
			maxabs = fabs(d);
	}
	rel = den > 0 ? sqrt(num / den) : sqrt(num);
	printf("compare: parameters=%zu steps=%lld,%lld max_abs_diff=%.3e rel_l2_diff=%.3e "
	       "bitwise_equal=%s\n",
	       na, (long long)sa, (long long)sb, maxabs, rel,
	       memcmp(pa, pb, na * sizeof(float)) ? "no" : "yes");
	if (tol == 0)
		rc = memcmp(pa, pb, na * sizeof(float)) ? EXIT_FAILED : 0;
	else
		rc = rel <= tol ? 0 : EXIT_FAILED;
out:
	free(pa);
	free(pb);
	return rc;
}

/* The data directories that hold the example configs, in the order they
 * are searched: the one beside this executable (CRUN_DATADIR_FROM_BINDIR
 * from the directory of /proc/self/exe, so that an installed tree that was
 * moved, or a DESTDIR never moved into place, finds its own), then
 * CRUN_DATADIR. beside (PATH_MAX bytes) holds the first; dirs (3 entries)
 * ends with NULL. */
static void data_dirs(char *beside, const char **dirs)
{
	const char *rel = CRUN_DATADIR_FROM_BINDIR;
	char self[PATH_MAX];
	int k = 0;

	/* a path too long for the buffer: then only CRUN_DATADIR */
	if (rel[0] && crun__self_dir(self, sizeof(self)) == 0 &&
	    crun__path_join_lexical(self, rel, beside, PATH_MAX) == 0 &&
	    strcmp(beside, CRUN_DATADIR))
		dirs[k++] = beside;
	dirs[k++] = CRUN_DATADIR;
	dirs[k] = NULL;
}

static enum crun__log_level log_level_from_env(void)
{
	const char *v = crun__env_get("CRUN_LOG_LEVEL");

	if (v && !strcmp(v, "error"))
		return CRUN_LOG_ERROR;
	if (v && !strcmp(v, "warn"))
		return CRUN_LOG_WARN;
	if (v && !strcmp(v, "debug"))
		return CRUN_LOG_DEBUG;
	return CRUN_LOG_INFO;
}

/* getopt's answer to an unknown option or a missing value, as one line;
 * the usage follows on stderr. */
static int bad_option(char **argv)
{
	int rc;

	if (optopt == 's')
		rc = crun__train_fatal(EXIT_USAGE, "option '%s' needs a value", argv[optind - 1]);
	else if (optopt)
		rc = crun__train_fatal(EXIT_USAGE, "unknown option '-%c'", optopt);
	else /* a long option: optind is past it */
		rc = crun__train_fatal(EXIT_USAGE, "unknown option '%s'", argv[optind - 1]);
	usage(stderr);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"set", required_argument, NULL, 's'},
		{"print-config", no_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	struct crun__train_config cfg;
	struct crun__comm_opts copts;
	const char *path = NULL;
	bool print = false, elsewhere = false;
	char err[1536], beside[PATH_MAX], found[PATH_MAX];
	char **sets;
	int n_sets = 0, c, rc = EXIT_USAGE;

	crun__log_init("crun-train", log_level_from_env());
	if (argc > 1 && !strcmp(argv[1], "export"))
		return cmd_export(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "compare"))
		return cmd_compare(argc - 1, argv + 1);

	sets = calloc((size_t)argc, sizeof(*sets));
	if (!sets)
		return crun__train_fatal(EXIT_FAILED, "out of memory");
	opterr = 0; /* the message goes through crun__train_fatal */
	while ((c = getopt_long(argc, argv, "s:phV", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			sets[n_sets++] = optarg;
			break;
		case 'p':
			print = true;
			break;
		case 'h':
			usage(stdout);
			free(sets);
			return 0;
		case 'V':
			printf("crun-train %s (%s)\n", CRUN_VERSION, CRUN_TRAIN_FEATURES);
			free(sets);
			return 0;
		default:
			rc = bad_option(argv);
			free(sets);
			return rc;
		}
	}
	if (optind < argc)
		path = argv[optind++];
	if (optind < argc) {
		rc = crun__train_fatal(EXIT_USAGE,
				       "unexpected argument '%s' (one config file at most)",
				       argv[optind]);
		free(sets);
		return rc;
	}
	if (crun__train_config_init(&cfg)) {
		free(sets);
		return crun__train_fatal(EXIT_FAILED, "out of memory");
	}
	if (path) {
		const char *dirs[3];

		data_dirs(beside, dirs);
		if (crun__train_config_find(path, dirs, found, sizeof(found), &elsewhere, err,
					    sizeof(err)) ||
		    crun__train_config_load(&cfg, found, err, sizeof(err))) {
			crun__train_fatal(EXIT_USAGE, "%s", err);
			goto out;
		}
		/* one line per job, not per rank */
		if (elsewhere && (!getenv("RANK") || !strcmp(getenv("RANK"), "0")))
			crun__info("config '%s' is not in the working directory: using '%s'", path,
				   found);
		path = found;
	}
	for (int i = 0; i < n_sets; i++) {
		if (crun__train_config_set(&cfg, sets[i], err, sizeof(err))) {
			crun__train_fatal(EXIT_USAGE, "%s", err);
			goto out;
		}
	}
	if (print) {
		crun__train_config_print(&cfg, stdout);
		rc = 0;
		goto out;
	}
	if (crun__comm_opts_from_env(&copts, err, sizeof(err))) {
		crun__train_fatal(EXIT_USAGE, "%s", err);
		goto out;
	}
	copts.backend = cfg.parallel.backend;
	if (cfg.parallel.timeout_ms > 0)
		copts.timeout_ms = cfg.parallel.timeout_ms;
	if (crun__train_config_check(&cfg, copts.world_size, err, sizeof(err))) {
		crun__train_fatal(EXIT_USAGE, "config%s%s%s: %s", path ? " '" : "",
				  path ? path : "", path ? "'" : "", err);
		goto out;
	}
	catch_save_signals();
	rc = train(&cfg, &copts);
out:
	crun__train_config_finish(&cfg);
	free(sets);
	return rc;
}

/* The agent's GPUs on the loop (gpu_watch.h): a sampling timer and the
 * release wait's polling timer. What a reading means is gpu.c's; how NVML
 * is reached is nvml.c's. */
#include "agent/gpu_watch.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How often the release wait asks NVML (ft_launcher asks every 2 s; a
 * process listing is cheap, and a restart should not wait longer than
 * the memory takes). */
#define POLL_MS 200
/* Where NVML cannot list a GPU's processes, its memory is back when its
 * used memory is at most what it was at the agent's start plus this
 * (ft_launcher's gpu_memory_tolerance_mb). */
#define MEMORY_TOLERANCE (512LL << 20)

static void map_ranks(struct crun__gpu_watch *w)
{
	for (int lr = 0; lr < w->nproc; lr++) {
		int gpu = crun__gpu_find(w->gpus, w->ngpus, &w->refs[lr]);

		if (gpu != w->mapped[lr]) {
			if (gpu >= 0)
				crun__debug("local rank %d uses GPU %d (%s)", lr,
					    w->gpus[gpu].index, w->gpus[gpu].uuid);
			else
				crun__debug("local rank %d: which GPU it uses is unknown", lr);
		}
		w->mapped[lr] = gpu;
		if (w->interval_ms > 0)
			crun__monitor_worker_gpu(w->monitor, lr, gpu);
	}
}

static void sample(struct crun__gpu_watch *w)
{
	uint64_t now = crun__wall_ms();
	bool xids = crun__nvml_poll_xids(w->nvml, w->xids, w->last_xid) > 0;

	for (int i = 0; i < w->ngpus; i++) {
		struct crun__gpu_reading r;
		uint64_t before = w->gpus[i].xid_total;

		crun__nvml_read(w->nvml, i, &r);
		crun__gpu_from_reading(
			&r, crun__nvml_watches_xids(w->nvml, i) ? w->xids[i] : UINT64_MAX, now,
			&w->gpus[i]);
		if (xids && w->gpus[i].xid_total != UINT64_MAX && w->gpus[i].xid_total != before)
			crun__warn("GPU %d (%s) reported XID %llu (%llu so far)", w->gpus[i].index,
				   w->gpus[i].uuid[0] ? w->gpus[i].uuid : "no uuid", w->last_xid[i],
				   (unsigned long long)w->xids[i]);
	}
	for (int i = 0; i < w->ngpus && !w->sampled; i++)
		w->base_used[i] = w->gpus[i].mem_used;
	for (int i = 0; i < w->ngpus && !w->sampled; i++)
		crun__debug("GPU %d: %s '%s', %lld of %lld bytes used", w->gpus[i].index,
			    w->gpus[i].uuid, w->gpus[i].name, (long long)w->gpus[i].mem_used,
			    (long long)w->gpus[i].mem_total);
	w->sampled = true;
	/* Without sampling the readings only serve the release wait. */
	if (w->interval_ms > 0 && crun__monitor_set_gpus(w->monitor, w->gpus, w->ngpus) < 0)
		crun__debug("out of memory: the GPUs are not recorded");
	map_ranks(w);
}

static void on_sample(uv_timer_t *t)
{
	sample(t->data);
}

int crun__gpu_watch_init(struct crun__gpu_watch *w, uv_loop_t *loop, struct crun__monitor *monitor,
			 int nproc, int64_t interval_ms, int64_t release_timeout_ms,
			 const char *nvml_path, char *const *env, char *const *extra_env,
			 bool virtual_local_rank)
{
	int err;

	memset(w, 0, sizeof(*w));
	w->loop = loop;
	w->monitor = monitor;
	w->interval_ms = interval_ms;
	w->release_timeout_ms = release_timeout_ms;
	w->nproc = nproc;
	err = uv_timer_init(loop, &w->sample);
	if (err < 0)
		return err;
	w->sample.data = w;
	uv_timer_init(loop, &w->poll);
	w->poll.data = w;
	w->timers_open = true;
	if (interval_ms <= 0 && release_timeout_ms <= 0)
		return 0;
	w->nvml = crun__nvml_open(nvml_path);
	if (!w->nvml)
		return 0;
	w->ngpus = crun__nvml_count(w->nvml);
	w->refs = calloc((size_t)nproc, sizeof(*w->refs));
	w->gpus = calloc((size_t)w->ngpus + 1, sizeof(*w->gpus));
	w->xids = calloc((size_t)w->ngpus + 1, sizeof(*w->xids));
	w->last_xid = calloc((size_t)w->ngpus + 1, sizeof(*w->last_xid));
	w->base_used = calloc((size_t)w->ngpus + 1, sizeof(*w->base_used));
	w->wait_pids = calloc((size_t)nproc, sizeof(*w->wait_pids));
	w->wait_gpus = calloc((size_t)nproc, sizeof(*w->wait_gpus));
	w->held = calloc((size_t)nproc, sizeof(*w->held));
	w->mapped = calloc((size_t)nproc, sizeof(*w->mapped));
	if (!w->refs || !w->gpus || !w->xids || !w->last_xid || !w->base_used || !w->wait_pids ||
	    !w->wait_gpus || !w->held || !w->mapped)
		return -ENOMEM;
	for (int lr = 0; lr < nproc; lr++)
		w->mapped[lr] = -2; /* none said yet */
	for (int lr = 0; lr < nproc; lr++)
		crun__gpu_of_rank(env, extra_env, lr, virtual_local_rank, &w->refs[lr]);
	/* The first sample at once: the GPUs' names and uuids for the rank
	 * mapping, and the release wait's. */
	sample(w);
	if (interval_ms > 0)
		uv_timer_start(&w->sample, on_sample, (uint64_t)interval_ms, (uint64_t)interval_ms);
	return 0;
}

/* "GPU 0 (pid 4242), GPU 1 (pid 4243)": what the wait is for. */
static void describe(const struct crun__gpu_watch *w, const bool *held, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (int i = 0; i < w->nwait && off < len; i++) {
		int n;

		if (held && !held[i])
			continue;
		if (w->wait_gpus[i] >= 0)
			n = snprintf(buf + off, len - off, "%sGPU %d (pid %d)", off ? ", " : "",
				     w->gpus[w->wait_gpus[i]].index, (int)w->wait_pids[i]);
		else
			n = snprintf(buf + off, len - off, "%sany GPU (pid %d)", off ? ", " : "",
				     (int)w->wait_pids[i]);
		if (n < 0)
			break;
		off += (size_t)n;
	}
}

/* Whether GPU gpu uses more memory than at the start (with the
 * tolerance). -ENOTSUP when NVML cannot tell. */
static int memory_held(struct crun__gpu_watch *w, int gpu)
{
	struct crun__gpu_reading r;

	if (w->base_used[gpu] < 0 || crun__nvml_read(w->nvml, gpu, &r) < 0 || !r.has_mem ||
	    r.mem_used > INT64_MAX)
		return -ENOTSUP;
	return (int64_t)r.mem_used > w->base_used[gpu] + MEMORY_TOLERANCE;
}

/* GPU gpu's compute processes into w->procs (grown as needed): how
 * many, or a negative errno (-ENOTSUP: NVML cannot list them). */
static int list_processes(struct crun__gpu_watch *w, int gpu)
{
	for (;;) {
		int n = crun__nvml_processes(w->nvml, gpu, w->procs, NULL, w->procs_max);
		pid_t *more;

		if (n <= w->procs_max || w->procs_max >= 65536)
			return n < w->procs_max ? n : w->procs_max;
		more = realloc(w->procs, (size_t)(n + 16) * sizeof(*more));
		if (!more)
			return -ENOMEM;
		w->procs = more;
		w->procs_max = n + 16;
	}
}

/* Whether the wait's i-th pid is one GPU gpu concerns: its own, or any
 * when its GPU is unknown. */
static bool concerns(const struct crun__gpu_watch *w, int i, int gpu)
{
	return w->wait_gpus[i] < 0 || w->wait_gpus[i] == gpu;
}

/* Which of the dead workers' pids a GPU still holds (w->held[i]) and how
 * many (w->nheld): each GPU that a pid concerns is asked once, its
 * processes listed and every such pid looked for among them; where NVML
 * cannot list them, a GPU whose memory is not back holds all of its pids.
 * nheld is -ENOTSUP when NVML could tell of no GPU. */
static void poll_held(struct crun__gpu_watch *w)
{
	int count = 0, known = 0;

	for (int i = 0; i < w->nwait; i++)
		w->held[i] = false;
	for (int g = 0; g < w->ngpus; g++) {
		bool any = false;
		int n, mem = 0;

		for (int i = 0; i < w->nwait && !any; i++)
			any = concerns(w, i, g);
		if (!any)
			continue;
		n = list_processes(w, g);
		if (n == -ENOTSUP)
			mem = memory_held(w, g);
		if ((n < 0 && n != -ENOTSUP) || mem < 0)
			continue;
		known++;
		for (int i = 0; i < w->nwait; i++) {
			if (w->held[i] || !concerns(w, i, g))
				continue;
			if (n < 0)
				w->held[i] = mem > 0;
			for (int k = 0; k < n && !w->held[i]; k++)
				w->held[i] = w->procs[k] == w->wait_pids[i];
		}
	}
	for (int i = 0; i < w->nwait; i++)
		count += w->held[i];
	w->nheld = known ? count : -ENOTSUP;
}

static void end_wait(struct crun__gpu_watch *w, bool released, const char *why)
{
	double s = (double)(uv_now(w->loop) - w->wait_start) / 1000.0;
	char what[512], line[700];
	int n = released ? 0 : w->nheld; /* as the last poll found */

	uv_timer_stop(&w->poll);
	w->waiting = false;
	if (released) {
		snprintf(line, sizeof(line),
			 "the GPUs released the dead workers' memory after %.2fs", s);
		crun__info("%s", line);
	} else if (why) {
		snprintf(line, sizeof(line), "stopped waiting for the GPUs after %.2fs: %s", s,
			 why);
		crun__info("%s", line);
	} else {
		describe(w, n > 0 ? w->held : NULL, what, sizeof(what));
		snprintf(line, sizeof(line),
			 "%s still held after %.2fs (--gpu-release-timeout); restarting anyway",
			 what, s);
		crun__warn("%s", line);
	}
	crun__monitor_gpu_wait(w->monitor, crun__wall_ms(), s, line);
}

static void on_poll(uv_timer_t *t)
{
	struct crun__gpu_watch *w = t->data;
	int n;

	poll_held(w);
	n = w->nheld;

	if (n > 0 && uv_now(w->loop) - w->wait_start < (uint64_t)w->release_timeout_ms)
		return;
	end_wait(w, n == 0, n < 0 ? "NVML cannot list the GPUs' processes" : NULL);
	w->released(w->released_arg);
}

bool crun__gpu_watch_wait(struct crun__gpu_watch *w, const pid_t *pids, int n,
			  void (*released)(void *arg), void *arg)
{
	char what[512];

	if (!w->nvml || w->release_timeout_ms <= 0 || w->waiting)
		return false;
	w->nwait = 0;
	for (int lr = 0; lr < n && lr < w->nproc; lr++) {
		if (pids[lr] <= 0)
			continue;
		w->wait_pids[w->nwait] = pids[lr];
		w->wait_gpus[w->nwait] = crun__gpu_find(w->gpus, w->ngpus, &w->refs[lr]);
		w->nwait++;
	}
	w->nheld = 0;
	if (w->nwait)
		poll_held(w);
	if (w->nheld == -ENOTSUP)
		crun__debug("NVML can tell neither the GPUs' processes nor their memory: not "
			    "waiting for them");
	if (w->nheld <= 0)
		return false;
	describe(w, w->held, what, sizeof(what));
	crun__info("waiting up to %.1fs for %s to release the dead workers' memory",
		   (double)w->release_timeout_ms / 1000.0, what);
	w->waiting = true;
	w->wait_start = uv_now(w->loop);
	w->released = released;
	w->released_arg = arg;
	uv_timer_start(&w->poll, on_poll, POLL_MS, POLL_MS);
	return true;
}

void crun__gpu_watch_stop(struct crun__gpu_watch *w, const char *why)
{
	if (w->waiting)
		end_wait(w, false, why);
}

void crun__gpu_watch_close(struct crun__gpu_watch *w)
{
	if (!w->timers_open)
		return;
	w->timers_open = false;
	w->waiting = false;
	uv_close((uv_handle_t *)&w->sample, NULL);
	uv_close((uv_handle_t *)&w->poll, NULL);
}

void crun__gpu_watch_finish(struct crun__gpu_watch *w)
{
	crun__nvml_close(w->nvml);
	w->nvml = NULL;
	free(w->refs);
	free(w->gpus);
	free(w->xids);
	free(w->last_xid);
	free(w->base_used);
	w->base_used = NULL;
	free(w->wait_pids);
	free(w->wait_gpus);
	free(w->held);
	free(w->procs);
	w->procs = NULL;
	w->procs_max = 0;
	free(w->mapped);
	w->mapped = NULL;
	w->refs = NULL;
	w->gpus = NULL;
	w->xids = NULL;
	w->wait_pids = NULL;
	w->last_xid = NULL;
	w->wait_gpus = NULL;
	w->held = NULL;
}

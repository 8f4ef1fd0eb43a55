/* The scheduler detectors' dispatcher and their shared table (scheduler.h). */
#include "launcher/scheduler.h"
#include "launcher/options.h"

#include "common/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void crun__sched_init(struct crun__sched *s)
{
	memset(s, 0, sizeof(*s));
	s->kind = CRUN_SCHED_NONE;
	s->resolve_opt = -1;
	s->restart_count = -1;
}

int crun__sched_add(struct crun__sched *s, int opt, const char *origin, const char *fmt, ...)
{
	struct crun__sched_value *v = NULL;
	va_list ap;
	int n;

	for (size_t i = 0; i < s->nvalues; i++)
		if (s->values[i].opt == opt)
			v = &s->values[i];
	if (!v) {
		if (s->nvalues == CRUN_SCHED_MAX_VALUES)
			return -ENOSPC;
		v = &s->values[s->nvalues++];
	}
	v->opt = opt;
	snprintf(v->origin, sizeof(v->origin), "%s", origin);
	va_start(ap, fmt);
	n = vsnprintf(v->text, sizeof(v->text), fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= sizeof(v->text) ? -ENOSPC : 0;
}

const struct crun__sched_value *crun__sched_find(const struct crun__sched *s, int opt)
{
	for (size_t i = 0; i < s->nvalues; i++)
		if (s->values[i].opt == opt)
			return &s->values[i];
	return NULL;
}

const char *crun__sched_kind_name(enum crun__sched_kind kind)
{
	switch (kind) {
	case CRUN_SCHED_SLURM:
		return "slurm";
	case CRUN_SCHED_KUBERNETES:
		return "kubernetes";
	case CRUN_SCHED_NONE:
		break;
	}
	return "none";
}

bool crun__sched_in_worker(char **envp, const char **which)
{
	static const char *const worker_vars[] = {"TORCHELASTIC_RUN_ID", "GROUP_RANK", "LOCAL_RANK",
						  "CRUN_STORE"};

	for (size_t i = 0; i < CRUN_ARRAY_SIZE(worker_vars); i++) {
		const char *v = crun__launch_env_lookup(envp, worker_vars[i]);

		if (v && *v) {
			if (which)
				*which = worker_vars[i];
			return true;
		}
	}
	return false;
}

int crun__sched_detect(char **envp, enum crun__sched_mode mode, struct crun__sched *s, char *err,
		       size_t errlen)
{
	struct crun__sched_ask ask = s->ask;
	int rc = 0;

	crun__sched_init(s);
	s->ask = ask;
	if (mode == CRUN_SCHED_MODE_NONE ||
	    (mode == CRUN_SCHED_MODE_AUTO && crun__sched_in_worker(envp, NULL)))
		return 0;
	if (mode == CRUN_SCHED_MODE_AUTO || mode == CRUN_SCHED_MODE_SLURM)
		rc = crun__sched_slurm(envp, s, err, errlen);
	if (rc == 0 && (mode == CRUN_SCHED_MODE_AUTO || mode == CRUN_SCHED_MODE_KUBERNETES))
		rc = crun__sched_kubernetes(envp, s, err, errlen);
	if (rc < 0) {
		crun__sched_init(s);
		s->ask = ask;
		return rc;
	}
	if (rc == 0 && mode == CRUN_SCHED_MODE_SLURM) {
		crun__seterr(err, errlen,
			     "--scheduler slurm: no Slurm job in the environment (SLURM_JOB_ID "
			     "and SLURM_STEP_ID are set by srun)");
		return -EINVAL;
	}
	if (rc == 0 && mode == CRUN_SCHED_MODE_KUBERNETES) {
		crun__seterr(err, errlen,
			     "--scheduler kubernetes: no Kubernetes job in the environment "
			     "(KUBERNETES_SERVICE_HOST with PET_*, RANK/WORLD_SIZE or "
			     "JOB_COMPLETION_INDEX)");
		return -EINVAL;
	}
	return 0;
}

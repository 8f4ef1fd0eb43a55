/* What the scheduler that started crun says about the job, read from the
 * environment it gave crun: Slurm's SLURM_* variables under srun
 * (sched_slurm.c) and Kubernetes' (sched_k8s.c: Kubeflow's PyTorchJob,
 * Kubeflow Trainer v2 / JobSet, a plain Indexed Job).
 *
 * A detector turns the variables into option texts, each with the
 * variables it came from. options.c offers them above the defaults and
 * below everything a user wrote (config file, PET_ variables, command
 * line), checks them as it checks every text, and --dry-run shows where
 * each value came from. Pure: a detector reads only the envp it is given
 * and resolves no names (the plan resolves resolve_host). */
#ifndef CRUN_LAUNCHER_SCHED_H
#define CRUN_LAUNCHER_SCHED_H

#include <stdbool.h>
#include <stddef.h>

enum crun__sched_kind {
	CRUN_SCHED_NONE = 0,
	CRUN_SCHED_SLURM,
	CRUN_SCHED_KUBERNETES,
};

/* --scheduler: which detectors run. */
enum crun__sched_mode {
	CRUN_SCHED_MODE_AUTO = 0, /* Slurm, then Kubernetes; the first found */
	CRUN_SCHED_MODE_SLURM,	  /* Slurm's variables, an error without them */
	CRUN_SCHED_MODE_KUBERNETES,
	CRUN_SCHED_MODE_NONE, /* read no scheduler's variables */
};

#define CRUN_SCHED_MAX_VALUES 24
#define CRUN_SCHED_TEXT_MAX 512
#define CRUN_SCHED_ORIGIN_MAX 96

/* One option's text, as the option would take it on the command line. */
struct crun__sched_value {
	int opt; /* enum crun__launch_opt */
	char text[CRUN_SCHED_TEXT_MAX];
	char origin[CRUN_SCHED_ORIGIN_MAX]; /* "SLURM_NNODES" */
};

/* What the user's options ask of the detectors: set by the caller before
 * crun__sched_detect, which keeps it (see sched_slurm.h). */
struct crun__sched_ask {
	bool slurm_tasks_as_nodes; /* --slurm-tasks-as-nodes */
};

struct crun__sched {
	struct crun__sched_ask ask;
	enum crun__sched_kind kind;
	/* For --dry-run and the start line: "slurm: job 77 step 0, 2 nodes
	 * gpu[01-02]"; empty when none. */
	char detail[256];
	size_t nvalues;
	struct crun__sched_value values[CRUN_SCHED_MAX_VALUES];
	/* A host name the plan must resolve when the value it is part of
	 * wins (resolve_opt's), with the variable it came from, so that a
	 * name that does not resolve is an error at once: "SLURM_JOB_NODELIST:
	 * the first host 'gpu01' does not resolve". Empty: none. */
	char resolve_host[256];
	char resolve_origin[CRUN_SCHED_ORIGIN_MAX];
	int resolve_opt;
	/* Slurm: SLURM_RESTART_COUNT (the job's requeues), -1 unknown. */
	int restart_count;
};

/* Empties s (no scheduler). */
void crun__sched_init(struct crun__sched *s);

/* Adds the text for option opt, with its origin. 0, or -ENOSPC when the
 * table or the text is full. */
int crun__sched_add(struct crun__sched *s, int opt, const char *origin, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The value s gives option opt, or NULL. */
const struct crun__sched_value *crun__sched_find(const struct crun__sched *s, int opt);

/* Runs the detectors that mode names over envp (a NULL-terminated
 * "NAME=value" array) and fills s from the first that finds its
 * scheduler. Returns 0 (s->kind CRUN_SCHED_NONE when none was found and
 * mode is auto or none) or -EINVAL with one line in err: a scheduler's
 * variables that contradict each other, or mode naming a scheduler whose
 * variables are absent. */
int crun__sched_detect(char **envp, enum crun__sched_mode mode, struct crun__sched *s, char *err,
		       size_t errlen);

/* The detectors, also called by the tests. Each returns 1 when its
 * scheduler's variables are there (s filled), 0 when they are not (s
 * untouched), -EINVAL with one line in err on a misconfiguration. */
int crun__sched_slurm(char **envp, struct crun__sched *s, char *err, size_t errlen);
int crun__sched_kubernetes(char **envp, struct crun__sched *s, char *err, size_t errlen);

/* True when envp is a worker's of a crun (or torchrun) agent: it has one
 * of the variables an agent gives its workers (TORCHELASTIC_RUN_ID,
 * GROUP_RANK, LOCAL_RANK, CRUN_STORE), which no scheduler sets. A crun
 * started there inherits the scheduler's variables of its parent's job
 * and must not join that job again: auto detection finds no scheduler.
 * *which (when not NULL) receives the variable found. */
bool crun__sched_in_worker(char **envp, const char **which);

/* "slurm", "kubernetes", "none". */
const char *crun__sched_kind_name(enum crun__sched_kind kind);

#endif

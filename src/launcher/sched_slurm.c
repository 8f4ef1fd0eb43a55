/* Slurm's environment under srun (sched.h). */
#include "launcher/sched.h"
#include "launcher/options.h"

int crun__sched_slurm(char **envp, struct crun__sched *s, char *err, size_t errlen)
{
	(void)s;
	(void)err;
	(void)errlen;
	return crun__launch_env_lookup(envp, "SLURM_JOB_ID") ? 0 : 0;
}

/* Slurm: what crun__sched_slurm (scheduler.h) reads, and the pure pieces
 * around it that the launcher and the tests share. crun(1), SLURM, says
 * the same for users.
 *
 * A Slurm step (srun) is found by SLURM_JOB_ID with SLURM_STEP_ID (or
 * SLURM_STEPID). Its values, each offered below the user's:
 *   nnodes          SLURM_STEP_NUM_NODES, else SLURM_NNODES, else
 *                   SLURM_JOB_NUM_NODES; it must equal the number of hosts
 *                   of the node list: SLURM_STEP_NODELIST, else
 *                   SLURM_JOB_NODELIST, else SLURM_NODELIST
 *   node_rank       SLURM_NODEID
 *   rdzv_endpoint   (more than one node) the list's first host, on
 *                   crun__slurm_port(job, step); the plan resolves the
 *                   host (resolve_host)
 *   rdzv_id         JOB.STEP, JOB.STEP.rN after N requeues
 *   nproc_per_node  SLURM_GPUS_ON_NODE when set (0: no value), else the
 *                   devices of CUDA_VISIBLE_DEVICES; else no value
 *   restart_count   SLURM_RESTART_COUNT
 * One Slurm task per node is the rule: a count above 1 in
 * SLURM_STEP_TASKS_PER_NODE (Slurm's "2(x3),1"), or without it
 * SLURM_STEP_NUM_TASKS (else SLURM_NTASKS) above the nodes, is an error
 * (never SLURM_NTASKS_PER_NODE, which a step inherits from sbatch) unless
 * ask.slurm_tasks_as_nodes: then every task is one node of the job,
 * nnodes SLURM_STEP_NUM_TASKS, node_rank SLURM_PROCID, and nproc_per_node
 * the task's CUDA_VISIBLE_DEVICES, else SLURM_GPUS_PER_TASK.
 *
 * Without a step id (a batch script or salloc's shell, or a step id of
 * Slurm's own special steps, 4294967290 and above) crun runs on one node
 * of the allocation: that is Slurm on an allocation of one node (nnodes
 * 1, rdzv_id JOB.batch, the GPUs as above) and an error on several, which
 * would otherwise be a world of one on the first node. */
#ifndef CRUN_LAUNCHER_SCHED_SLURM_H
#define CRUN_LAUNCHER_SCHED_SLURM_H

#include <stdint.h>

/* The first and last port crun__slurm_port gives: below Linux's ephemeral
 * ports (32768 up). */
#define CRUN_SLURM_PORT_BASE 20000
#define CRUN_SLURM_PORT_LAST 29999

/* The rendezvous port of a step: 20000 + (job % 1000) * 10 + step % 10,
 * so that the last 1000 jobs and ten steps of each differ. */
int crun__slurm_port(uint64_t job_id, uint64_t step_id);

/* crun's exit status given the agent's (status) and --slurm-requeue
 * (requeue_status, 0: off): a job ended by SIGTERM exits requeue_status
 * (a value of slurm.conf's RequeueExit) instead of 143. Other statuses
 * are kept. RequeueExit requeues a batch job whose script exits with it,
 * never one Slurm ended (time limit, scancel): see crun(1) SLURM. */
int crun__slurm_exit_status(int status, int requeue_status);

#endif

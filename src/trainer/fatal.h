/* crun-train's fatal errors: the one line on stderr and, for the agent
 * that started the rank (crun or torchrun), the same line in
 * TORCHELASTIC_ERROR_FILE, in the JSON that PyTorch's @record writes:
 *
 *   {"message": {"message": "crun-train: config 'x.yaml': ...",
 *                "extraInfo": {"py_callstack": "rank 1 (local rank 1, pid 42):
 *                                 main() at src/trainer/main.c:812",
 *                              "timestamp": "1764612345"}}}
 *
 * so that the failure summary shows the real cause instead of an exit
 * code alone.
 *
 * Exit statuses (crun-train(1), EXIT STATUS): CRUN__EXIT_FAILED for a
 * failure that another attempt may not meet (a peer died, a collective
 * timed out, a disk filled), CRUN__EXIT_CONFIG for a configuration or
 * usage error, which every attempt would meet again: crun does not
 * restart a worker that exits with it. */
#ifndef CRUN_TRAINER_FATAL_H
#define CRUN_TRAINER_FATAL_H

#define CRUN__EXIT_FAILED 1
#define CRUN__EXIT_CONFIG 78 /* EX_CONFIG of sysexits.h */

/* Prints "crun-train: MESSAGE" as crun__error() does and returns code,
 * for `return crun__train_fatal(CRUN__EXIT_CONFIG, "...", ...)`. The
 * first call of the process also writes the message and its site (file,
 * line, function, the rank from RANK) to TORCHELASTIC_ERROR_FILE when
 * that is set: a temporary file renamed into place. Later calls only
 * print: the first error is the root cause. A failure to write the file
 * is one warning line; it never changes code. */
int crun__train_fatal_at(int code, const char *file, int line, const char *func, const char *fmt,
			 ...) __attribute__((format(printf, 5, 6)));

#define crun__train_fatal(code, ...) \
	crun__train_fatal_at((code), __FILE__, __LINE__, __func__, __VA_ARGS__)

#endif

/* Slurm's compressed host lists, as in SLURM_JOB_NODELIST and
 * `scontrol show hostnames`: items separated by commas, each a name with
 * zero or more bracket groups of numbers and ranges.
 *
 *   gpu[01-04,07],cpu3   gpu01 gpu02 gpu03 gpu04 gpu07 cpu3
 *   n[08-11]             n08 n09 n10 n11 (the width of a range's first
 *                        number is kept: n[8-11] is n8 n9 n10 n11)
 *   r[1-2]n[1-2]         r1n1 r1n2 r2n1 r2n2 (several groups: every
 *                        combination, the last group varying fastest)
 *
 * Hosts come in the list's order, duplicates kept, as Slurm gives them.
 * Refused, with one line naming the byte where it went wrong: an empty
 * list or item, an unbalanced or nested bracket, an empty range, a
 * number of more than CRUN_HOSTLIST_DIGITS_MAX digits, a reversed range
 * (n[3-1]), a space or control character, more than
 * CRUN_HOSTLIST_MAX_HOSTS hosts, a host name longer than
 * CRUN_HOSTLIST_NAME_MAX bytes, more than CRUN_HOSTLIST_GROUPS_MAX
 * groups in one item. Text after an item's last group is kept as a
 * suffix (n[1-2]-ib is n1-ib n2-ib).
 *
 * Pure: no allocation beyond the list itself, no I/O. The list is kept
 * compressed; a host is computed from its index, so counting and looking
 * up the n-th host cost no expansion. */
#ifndef CRUN_COMMON_HOSTLIST_H
#define CRUN_COMMON_HOSTLIST_H

#include <stddef.h>

#define CRUN_HOSTLIST_MAX_HOSTS 65536
#define CRUN_HOSTLIST_NAME_MAX 255 /* bytes of one host name, without the NUL */
#define CRUN_HOSTLIST_TEXT_MAX 65536
#define CRUN_HOSTLIST_DIGITS_MAX 9
#define CRUN_HOSTLIST_GROUPS_MAX 8

struct crun__hostlist;

/* Parses text. Returns the list (the caller destroys it), or NULL with one
 * line in err ("reversed range '3-1' at byte 2"; "out of memory"). */
struct crun__hostlist *crun__hostlist_create(const char *text, char *err, size_t errlen);

/* Frees hl; NULL does nothing. */
void crun__hostlist_destroy(struct crun__hostlist *hl);

/* Number of hosts, 1 to CRUN_HOSTLIST_MAX_HOSTS. */
size_t crun__hostlist_count(const struct crun__hostlist *hl);

/* Writes host i (0-based, below the count) into out, NUL-terminated.
 * Returns 0, -ERANGE when i is not below the count, -ENOSPC when outlen
 * is too small (CRUN_HOSTLIST_NAME_MAX + 1 always suffices). */
int crun__hostlist_nth(const struct crun__hostlist *hl, size_t i, char *out, size_t outlen);

/* Iteration: *pos starts at 0; each call writes the next host into out
 * and returns 1, then 0 after the last one (or an error of _nth). */
int crun__hostlist_next(const struct crun__hostlist *hl, size_t *pos, char *out, size_t outlen);

#endif

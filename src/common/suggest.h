/* "Did you mean": the known word closest to a mistyped one, for messages
 * about unknown keys and options. Pure functions of their arguments. */
#ifndef CRUN_COMMON_SUGGEST_H
#define CRUN_COMMON_SUGGEST_H

#include <stddef.h>

/* Words longer than this are never compared (their distance is
 * CRUN__EDIT_FAR). */
#define CRUN__EDIT_MAX_LEN 128
#define CRUN__EDIT_FAR ((size_t)-1)

/* Optimal string alignment distance between a and b: the fewest
 * insertions, deletions, substitutions and swaps of two adjacent bytes
 * that turn a into b ("join_timout" -> "join_timeout": 1,
 * "last_timeout_call" is far). CRUN__EDIT_FAR when either is longer than
 * CRUN__EDIT_MAX_LEN. */
size_t crun__edit_distance(const char *a, const char *b);

/* Of the n words in cands, the one closest to word, if it is close enough
 * to be what the user meant: at most 2 edits away, or at most a third of
 * word's length for longer words. The first of equally close ones wins.
 * NULL when none is close. Returns a pointer into cands. */
const char *crun__closest_word(const char *word, const char *const *cands, size_t n);

#endif

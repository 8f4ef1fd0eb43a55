/* Text that must be UTF-8 (JSON) from bytes that may not be: a worker's
 * line cut at a byte limit in the middle of a character, a path in
 * Latin-1. */
#ifndef CRUN_COMMON_UTF8_H
#define CRUN_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when the n bytes at s are well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
bool crun__utf8_valid(const char *s, size_t n);

/* A malloc'd, NUL-terminated, well-formed UTF-8 copy of the string s: a
 * sequence cut short by the end of s is dropped (text cut at a byte
 * limit), every other byte that does not start a well-formed sequence
 * becomes U+FFFD. NULL: out of memory. */
char *crun__utf8_dup(const char *s);

#endif

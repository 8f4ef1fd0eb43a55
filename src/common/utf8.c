/* UTF-8 checks and repair (utf8.h), after RFC 3629's table of well-formed
 * sequences. */
#include "common/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */

/* The length of the well-formed sequence at p (n bytes left), 0 when the
 * bytes there start none; *cut is set when they would, given more bytes. */
static size_t seq_len(const unsigned char *p, size_t n, bool *cut)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;

	*cut = false;
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0;
	/* the second byte's range excludes overlong forms, surrogates and
	 * code points above U+10FFFF */
	if (p[0] == 0xe0)
		lo = 0xa0;
	else if (p[0] == 0xed)
		hi = 0x9f;
	else if (p[0] == 0xf0)
		lo = 0x90;
	else if (p[0] == 0xf4)
		hi = 0x8f;
	for (size_t i = 1; i < len; i++) {
		if (i >= n) {
			*cut = true;
			return 0;
		}
		if (p[i] < lo || p[i] > hi)
			return 0;
		lo = 0x80;
		hi = 0xbf;
	}
	return len;
}

bool crun__utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, len;
	bool cut;

	while (i < n) {
		len = seq_len(p + i, n - i, &cut);
		if (!len)
			return false;
		i += len;
	}
	return true;
}

char *crun__utf8_dup(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s), i = 0, o = 0, len;
	char *out;
	bool cut;

	/* each byte gives at most 3 */
	if (n > (SIZE_MAX - 1) / 3)
		return NULL;
	out = malloc(3 * n + 1);
	if (!out)
		return NULL;
	while (i < n) {
		len = seq_len(p + i, n - i, &cut);
		if (cut)
			break;
		if (len) {
			memcpy(out + o, p + i, len);
			o += len;
			i += len;
		} else {
			memcpy(out + o, replacement, 3);
			o += 3;
			i++;
		}
	}
	out[o] = '\0';
	return out;
}

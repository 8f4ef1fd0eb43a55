/* The distance is the textbook dynamic programme over three rows (the
 * row before last is what a swap of adjacent bytes looks back at), on
 * bounded words so that it needs no allocation. */
#include "common/suggest.h"

#include <string.h>

static size_t min3(size_t a, size_t b, size_t c)
{
	size_t m = a < b ? a : b;

	return m < c ? m : c;
}

size_t crun__edit_distance(const char *a, const char *b)
{
	size_t rows[3][CRUN__EDIT_MAX_LEN + 1];
	size_t n = strlen(a), m = strlen(b);
	size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];

	if (n > CRUN__EDIT_MAX_LEN || m > CRUN__EDIT_MAX_LEN)
		return CRUN__EDIT_FAR;
	for (size_t j = 0; j <= m; j++)
		prev[j] = j;
	for (size_t i = 1; i <= n; i++) {
		size_t *t;

		cur[0] = i;
		for (size_t j = 1; j <= m; j++) {
			size_t cost = a[i - 1] != b[j - 1];

			cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    prev2[j - 2] + 1 < cur[j])
				cur[j] = prev2[j - 2] + 1;
		}
		t = prev2;
		prev2 = prev;
		prev = cur;
		cur = t;
	}
	return prev[m];
}

const char *crun__closest_word(const char *word, const char *const *cands, size_t n)
{
	size_t limit = strlen(word) / 3, best_d = CRUN__EDIT_FAR;
	const char *best = NULL;

	if (limit < 2)
		limit = 2;
	for (size_t i = 0; i < n; i++) {
		size_t d = crun__edit_distance(word, cands[i]);

		if (d <= limit && d < best_d) {
			best = cands[i];
			best_d = d;
		}
	}
	return best;
}

/* string.Template's pattern, by hand: after '$' comes another '$', an
 * identifier ([_a-zA-Z][_a-zA-Z0-9]*, the longest one), or '{' identifier
 * '}'; anything else leaves the '$' alone. */
#include "agent/prefix.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

struct sink {
	char *out;
	size_t len, n; /* n: bytes the whole result has */
};

static void put(struct sink *s, const char *p, size_t n)
{
	if (s->n < s->len - 1) {
		size_t room = s->len - 1 - s->n;

		memcpy(s->out + s->n, p, n < room ? n : room);
	}
	s->n += n;
}

static bool id_start(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool id_char(char c)
{
	return id_start(c) || (c >= '0' && c <= '9');
}

/* The value of name[0..n), or false when it is not one of torchrun's. */
static bool lookup(const struct crun__prefix_vars *v, const char *name, size_t n, char *buf,
		   size_t buflen, const char **value)
{
#define IS(word) (n == sizeof(word) - 1 && !memcmp(name, word, n))
	if (IS("role_name")) {
		*value = v->role_name ? v->role_name : "";
	} else if (IS("hostname")) {
		*value = v->hostname ? v->hostname : "";
	} else if (IS("rank")) {
		snprintf(buf, buflen, "%d", v->rank);
		*value = buf;
	} else if (IS("local_rank")) {
		snprintf(buf, buflen, "%d", v->local_rank);
		*value = buf;
	} else {
		return false;
	}
	return true;
#undef IS
}

size_t crun__prefix_render(const char *tmpl, const struct crun__prefix_vars *v, char *out,
			   size_t len)
{
	struct sink s = {.out = out, .len = len};
	const char *p = tmpl;

	while (*p) {
		const char *dollar = strchr(p, '$'), *name, *end;
		const char *value;
		char num[16];
		bool braced;

		if (!dollar) {
			put(&s, p, strlen(p));
			break;
		}
		put(&s, p, (size_t)(dollar - p));
		p = dollar + 1;
		if (*p == '$') {
			put(&s, "$", 1);
			p++;
			continue;
		}
		braced = *p == '{';
		name = braced ? p + 1 : p;
		end = name;
		if (id_start(*end))
			while (id_char(*end))
				end++;
		if (end == name || (braced && *end != '}')) {
			put(&s, "$", 1); /* invalid: kept, the rest read on */
			continue;
		}
		if (lookup(v, name, (size_t)(end - name), num, sizeof(num), &value))
			put(&s, value, strlen(value));
		else
			put(&s, dollar, (size_t)(end + braced - dollar));
		p = end + braced;
	}
	out[s.n < len ? s.n : len - 1] = '\0';
	return s.n;
}

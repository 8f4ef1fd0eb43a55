/* For the unit tests of metrics renderers: checks a text against
 * Prometheus's exposition format (0.0.4) and naming rules, and finds a
 * sample's value. Static functions: include it in one test file each. */
#ifndef CRUN_TEST_PROM_CHECK_H
#define CRUN_TEST_PROM_CHECK_H

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool prom_check_name(const char *s, size_t n, bool label)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool ok = isalpha((unsigned char)c) || c == '_' || (!label && c == ':') ||
			  (i > 0 && isdigit((unsigned char)c));

		if (!ok)
			return false;
	}
	return true;
}

static bool prom_ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n >= k && !memcmp(s + n - k, suffix, k);
}

/* NULL when text is well-formed; else a message (static) naming the
 * first bad line. *nsamples: the samples. */
static const char *prom_check(const char *text, int *nsamples)
{
	static char msg[512];
	char family[128] = "", type[16] = "";
	char seen[256][128];
	int nseen = 0;
	const char *line = text;

	*nsamples = 0;
	if (!*text)
		return NULL;
	while (*line) {
		const char *end = strchr(line, '\n');
		size_t n;

		if (!end) {
			snprintf(msg, sizeof(msg), "no newline at the end: '%s'", line);
			return msg;
		}
		n = (size_t)(end - line);
		if (n == 0) {
			snprintf(msg, sizeof(msg), "an empty line");
			return msg;
		}
		if (!strncmp(line, "# HELP ", 7)) {
			const char *name = line + 7, *sp = memchr(name, ' ', (size_t)(end - name));
			const char *t;
			size_t nn = sp ? (size_t)(sp - name) : 0;

			if (!sp || !prom_check_name(name, nn, false) || nn >= sizeof(family))
				goto bad;
			for (int i = 0; i < nseen; i++)
				if (strlen(seen[i]) == nn && !memcmp(seen[i], name, nn)) {
					snprintf(msg, sizeof(msg), "family %.*s twice", (int)nn,
						 name);
					return msg;
				}
			memcpy(family, name, nn);
			family[nn] = '\0';
			if (nseen < 256)
				snprintf(seen[nseen++], sizeof(seen[0]), "%s", family);
			t = end + 1;
			if (strncmp(t, "# TYPE ", 7) || strncmp(t + 7, family, nn) ||
			    t[7 + nn] != ' ')
				goto bad;
			line = t + 7 + nn + 1;
			end = strchr(line, '\n');
			if (!end || (size_t)(end - line) >= sizeof(type))
				goto bad;
			memcpy(type, line, (size_t)(end - line));
			type[end - line] = '\0';
			if (strcmp(type, "counter") && strcmp(type, "gauge") &&
			    strcmp(type, "histogram") && strcmp(type, "summary"))
				goto bad;
			if (!strcmp(type, "counter") && !prom_ends_with(family, nn, "_total")) {
				snprintf(msg, sizeof(msg), "counter %s does not end in _total",
					 family);
				return msg;
			}
			if (strncmp(family, "crun_", 5) && strncmp(family, "process_", 8)) {
				snprintf(msg, sizeof(msg), "%s has neither crun_ nor process_",
					 family);
				return msg;
			}
			line = end + 1;
			continue;
		}
		if (line[0] == '#')
			goto bad;
		{
			const char *p = line, *v;
			size_t nn = 0;
			char *vend;
			bool ok;

			while (p + nn < end && p[nn] != '{' && p[nn] != ' ')
				nn++;
			if (!prom_check_name(p, nn, false) || !*family)
				goto bad;
			ok = (nn == strlen(family) && !memcmp(p, family, nn));
			if (!strcmp(type, "histogram") || !strcmp(type, "summary")) {
				char want[160];

				for (int k = 0; k < 3 && !ok; k++) {
					snprintf(want, sizeof(want), "%s%s", family,
						 k == 0	  ? "_sum"
						 : k == 1 ? "_count"
							  : "_bucket");
					ok = nn == strlen(want) && !memcmp(p, want, nn);
				}
			}
			if (!ok) {
				snprintf(msg, sizeof(msg), "sample %.*s outside its family %s",
					 (int)nn, p, family);
				return msg;
			}
			p += nn;
			if (*p == '{') {
				p++;
				while (*p != '}') {
					size_t ln = 0;

					while (p[ln] && p[ln] != '=')
						ln++;
					if (!prom_check_name(p, ln, true) || p[ln + 1] != '"')
						goto bad;
					p += ln + 2;
					while (*p && *p != '"' && *p != '\n') {
						if (*p == '\\') {
							if (p[1] != '\\' && p[1] != '"' &&
							    p[1] != 'n')
								goto bad;
							p++;
						}
						p++;
					}
					if (*p != '"')
						goto bad;
					p++;
					if (*p == ',')
						p++;
					else if (*p != '}')
						goto bad;
				}
				p++;
			}
			if (*p != ' ')
				goto bad;
			v = p + 1;
			if (!strncmp(v, "NaN\n", 4) || !strncmp(v, "+Inf\n", 5) ||
			    !strncmp(v, "-Inf\n", 5)) {
				(*nsamples)++;
				line = end + 1;
				continue;
			}
			strtod(v, &vend);
			if (vend == v || vend != end)
				goto bad;
			(*nsamples)++;
		}
		line = end + 1;
		continue;
	bad:
		snprintf(msg, sizeof(msg), "bad line: '%.*s'",
			 (int)(strchr(line, '\n') ? (int)(strchr(line, '\n') - line)
						  : (int)strlen(line)),
			 line);
		return msg;
	}
	return NULL;
}

/* The value of the sample whose name and labels are exactly key
 * ("crun_restarts_total{cause=\"worker_failed\"}"), NAN when absent. */
static double prom_value(const char *text, const char *key)
{
	size_t k = strlen(key);

	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (!strncmp(l, key, k) && l[k] == ' ') {
			if (!strncmp(l + k + 1, "NaN", 3))
				return NAN;
			return strtod(l + k + 1, NULL);
		}
	return NAN;
}

static bool prom_has(const char *text, const char *key)
{
	size_t k = strlen(key);

	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (!strncmp(l, key, k) && (l[k] == ' ' || l[k] == '{'))
			return true;
	return false;
}

#endif

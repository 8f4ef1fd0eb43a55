/* Unit tests of Slurm's host lists (src/common/hostlist.c), table-driven:
 * each row is a list and its hosts as `scontrol show hostnames` prints
 * them (Slurm 22.05), or the one line of its error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>

#include "common/hostlist.h"

static const struct row {
	const char *text;
	const char *hosts; /* space-separated; NULL: an error */
	const char *err;
} rows[] = {
	{"cpu3", "cpu3", NULL},
	{"gpu[01-04,07],cpu3", "gpu01 gpu02 gpu03 gpu04 gpu07 cpu3", NULL},
	{"n[08-11]", "n08 n09 n10 n11", NULL},
	{"n[8-11]", "n8 n9 n10 n11", NULL},
	{"n[01-3]", "n01 n02 n03", NULL},
	{"n[1-03]", "n1 n2 n3", NULL},
	{"n[098-101]", "n098 n099 n100 n101", NULL},
	{"a[1-2]b[3-4]", "a1b3 a1b4 a2b3 a2b4", NULL},
	{"r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2", NULL},
	{"n[1-2][3-4]", "n13 n14 n23 n24", NULL},
	{"n[1-2]-[3]", "n1-3 n2-3", NULL},
	{"n[1-2]-ib", "n1-ib n2-ib", NULL},
	{"[1-2]", "1 2", NULL},
	{"n[1,1]", "n1 n1", NULL},
	{"n1,n1", "n1 n1", NULL},
	{"x,n[0001-0002]", "x n0001 n0002", NULL},
	{"n[1-3,2]", "n1 n2 n3 n2", NULL},
	{"localhost,127.0.0.1", "localhost 127.0.0.1", NULL},
	{"n[0-0]", "n0", NULL},
	{"", NULL, "empty host list"},
	{"a,,b", NULL, "empty item at byte 2"},
	{",a", NULL, "empty item at byte 0"},
	{"a,", NULL, "empty item at byte 2"},
	{"n[3-1]", NULL, "reversed range '3-1' at byte 2"},
	{"n[1-2", NULL, "unbalanced '[' at byte 5"},
	{"a]", NULL, "unbalanced ']' at byte 1"},
	{"n[]", NULL, "empty range at byte 2"},
	{"n[1-2,]", NULL, "empty range at byte 6"},
	{"n[-2]", NULL, "expected a number or range like 1-4 at byte 2"},
	{"n[a-b]", NULL, "expected a number or range like 1-4 at byte 2"},
	{"n[1[2]]", NULL, "nested '[' at byte 3"},
	{"n[1x]", NULL, "expected ',', '-' or ']' in a range at byte 3"},
	{"a b", NULL, "space or control character in a host name at byte 1"},
	{"n[1234567890]", NULL, "number of more than 9 digits at byte 2"},
	{"n[0-65535]", "", NULL}, /* 65536 hosts: the limit */
	{"n[0-65536]", NULL, "more than 65536 hosts at byte 2"},
	{"n[0-255][0-256]", NULL, "more than 65536 hosts at byte 0"},
	{"n[0-65535],x", NULL, "more than 65536 hosts at byte 11"},
	{"a[1]b[1]c[1]d[1]e[1]f[1]g[1]h[1]i[1]", NULL,
	 "more than 8 bracket groups in one name at byte 33"},
};

static void test_rows(void **state)
{
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		const struct row *row = &rows[r];
		char err[256] = "", got[4096] = "", host[CRUN_HOSTLIST_NAME_MAX + 1];
		struct crun__hostlist *hl = crun__hostlist_create(row->text, err, sizeof(err));
		size_t pos = 0, used = 0;
		int rc;

		print_message("%s\n", row->text);
		if (!row->hosts) {
			assert_null(hl);
			assert_string_equal(err, row->err);
			continue;
		}
		assert_non_null(hl);
		if (!*row->hosts) { /* only the count */
			assert_int_equal(crun__hostlist_count(hl), CRUN_HOSTLIST_MAX_HOSTS);
			assert_int_equal(crun__hostlist_nth(hl, 65535, host, sizeof(host)), 0);
			assert_string_equal(host, "n65535");
			crun__hostlist_destroy(hl);
			continue;
		}
		while ((rc = crun__hostlist_next(hl, &pos, host, sizeof(host))) == 1)
			used += (size_t)snprintf(got + used, sizeof(got) - used, "%s%s",
						 used ? " " : "", host);
		assert_int_equal(rc, 0);
		assert_string_equal(got, row->hosts);
		assert_int_equal(pos, crun__hostlist_count(hl));
		crun__hostlist_destroy(hl);
	}
}

static void test_nth(void **state)
{
	char err[256], host[CRUN_HOSTLIST_NAME_MAX + 1], small[4];
	struct crun__hostlist *hl = crun__hostlist_create("gpu[01-04,07],cpu3", err, sizeof(err));

	(void)state;
	assert_non_null(hl);
	assert_int_equal(crun__hostlist_count(hl), 6);
	assert_int_equal(crun__hostlist_nth(hl, 4, host, sizeof(host)), 0);
	assert_string_equal(host, "gpu07");
	assert_int_equal(crun__hostlist_nth(hl, 5, host, sizeof(host)), 0);
	assert_string_equal(host, "cpu3");
	assert_int_equal(crun__hostlist_nth(hl, 6, host, sizeof(host)), -ERANGE);
	assert_int_equal(crun__hostlist_nth(hl, 0, small, sizeof(small)), -ENOSPC);
	crun__hostlist_destroy(hl);
	crun__hostlist_destroy(NULL);
}

/* The longest name allowed, and one byte more. */
static void test_name_limit(void **state)
{
	char text[300], err[256], host[CRUN_HOSTLIST_NAME_MAX + 1];
	struct crun__hostlist *hl;

	(void)state;
	memset(text, 'a', 253);
	strcpy(text + 253, "[01-99]"); /* names of 255 bytes */
	hl = crun__hostlist_create(text, err, sizeof(err));
	assert_non_null(hl);
	assert_int_equal(crun__hostlist_nth(hl, 98, host, sizeof(host)), 0);
	assert_int_equal(strlen(host), CRUN_HOSTLIST_NAME_MAX);
	crun__hostlist_destroy(hl);
	strcpy(text + 253, "[1-100]"); /* n100 takes 256 */
	hl = crun__hostlist_create(text, err, sizeof(err));
	assert_null(hl);
	assert_string_equal(err, "host name longer than 255 bytes at byte 0");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_nth),
		cmocka_unit_test(test_name_limit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

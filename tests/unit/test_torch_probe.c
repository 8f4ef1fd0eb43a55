/* torch_probe: reading torch/version.py, the supported range, and finding
 * the PyTorch of an interpreter in made-up installations. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "launcher/torch_probe.h"

static void test_parse(void **state)
{
	char v[64];
	int major, minor;
	const char *ok[] = {
		"__version__ = '2.15.0+cu132'\ndebug = False\n",
		"from typing import Optional\n__version__: str = '2.15.0+cu132'\n",
		"cuda = None\n__version__ = \"2.15.0+cu132\"  # built\n",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(crun__torch_version_parse(ok[i], strlen(ok[i]), v, sizeof(v),
							   &major, &minor),
				 0);
		assert_string_equal(v, "2.15.0+cu132");
		assert_int_equal(major, 2);
		assert_int_equal(minor, 15);
	}
	assert_int_equal(crun__torch_version_parse("__version__ = '1.13.0a0'", 24, v, sizeof(v),
						   &major, &minor),
			 0);
	assert_int_equal(major, 1);
	assert_int_equal(minor, 13);
	/* No version, not a number, unterminated, too long for the buffer. */
	assert_int_equal(crun__torch_version_parse("x = 1\n", 6, v, sizeof(v), &major, &minor),
			 -EINVAL);
	assert_int_equal(
		crun__torch_version_parse("__version__ = 'git'", 19, v, sizeof(v), &major, &minor),
		-EINVAL);
	assert_int_equal(
		crun__torch_version_parse("__version__ = '2.1", 18, v, sizeof(v), &major, &minor),
		-EINVAL);
	assert_int_equal(
		crun__torch_version_parse("__version__ = '2.15.0'", 22, v, 4, &major, &minor),
		-EINVAL);
	assert_int_equal(
		crun__torch_version_parse("__version__ = '2'", 17, v, sizeof(v), &major, &minor),
		-EINVAL);
}

static void test_supported(void **state)
{
	(void)state;
	assert_false(crun__torch_version_supported(1, 12));
	assert_true(crun__torch_version_supported(CRUN_TORCH_MIN_MAJOR, CRUN_TORCH_MIN_MINOR));
	assert_true(crun__torch_version_supported(2, 0));
	assert_true(crun__torch_version_supported(CRUN_TORCH_MAX_MAJOR, CRUN_TORCH_MAX_MINOR));
	assert_false(crun__torch_version_supported(CRUN_TORCH_MAX_MAJOR, CRUN_TORCH_MAX_MINOR + 1));
	assert_false(crun__torch_version_supported(3, 0));
	assert_false(crun__torch_version_supported(0, 4));
}

static char root[256];

static void put(const char *rel, const char *text, mode_t mode)
{
	char path[PATH_MAX * 2], *p;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		mkdir(path, 0755);
		*p = '/';
	}
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
}

static void rm_rf(const char *dir)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_probe(void **state)
{
	char env_pp[PATH_MAX * 2], env_path[PATH_MAX * 2], env_home[PATH_MAX * 2], py[PATH_MAX * 2];
	char *envp[4] = {NULL};
	struct crun__torch_found t;

	(void)state;
	snprintf(root, sizeof(root), "/tmp/crun-probe-XXXXXX");
	assert_non_null(mkdtemp(root));

	/* An installation: prefix/bin/python3.11, prefix/lib/python3.11/site-packages. */
	put("usr/bin/python3.11", "#!/bin/sh\n", 0755);
	put("usr/lib/python3.11/site-packages/torch/version.py", "__version__ = '2.3.1'\n", 0644);
	snprintf(env_path, sizeof(env_path), "PATH=%s/usr/bin", root);
	envp[0] = env_path;
	crun__torch_probe("python3.11", envp, &t);
	assert_true(t.found);
	assert_string_equal(t.version, "2.3.1");
	assert_int_equal(t.minor, 3);

	/* The user's site-packages comes first. */
	snprintf(env_home, sizeof(env_home), "HOME=%s/home", root);
	envp[1] = env_home;
	put("home/.local/lib/python3.11/site-packages/torch/version.py", "__version__ = '2.5.0'\n",
	    0644);
	crun__torch_probe("python3.11", envp, &t);
	assert_string_equal(t.version, "2.5.0");

	/* PYTHONPATH first of all. */
	snprintf(env_pp, sizeof(env_pp), "PYTHONPATH=%s/nowhere:%s/pp", root, root);
	envp[2] = env_pp;
	put("pp/torch/version.py", "__version__ = '1.8.1'\n", 0644);
	crun__torch_probe("python3.11", envp, &t);
	assert_string_equal(t.version, "1.8.1");
	assert_false(crun__torch_version_supported(t.major, t.minor));
	envp[2] = NULL;

	/* A virtual environment without the system's packages hides them
	 * and the user's; with them, the user's come first, then its own. */
	put("venv/pyvenv.cfg",
	    "home = /usr/bin\ninclude-system-site-packages = false\n"
	    "version = 3.11.2\n",
	    0644);
	put("venv/bin/python", "#!/bin/sh\n", 0755);
	snprintf(py, sizeof(py), "%s/venv/bin/python", root);
	crun__torch_probe(py, envp, &t);
	assert_false(t.found);
	put("venv/pyvenv.cfg",
	    "home = /usr/bin\ninclude-system-site-packages = true\n"
	    "version = 3.11.2\n",
	    0644);
	crun__torch_probe(py, envp, &t);
	assert_true(t.found);
	assert_string_equal(t.version, "2.5.0");
	put("venv/lib/python3.11/site-packages/torch/version.py", "__version__ = '2.15.0+cpu'\n",
	    0644);
	crun__torch_probe(py, envp, &t);
	assert_string_equal(t.version, "2.5.0"); /* the user's site */
	envp[1] = NULL;
	crun__torch_probe(py, envp, &t);
	assert_string_equal(t.version, "2.15.0+cpu");
	assert_non_null(strstr(t.dir, "/venv/lib/python3.11/site-packages/torch"));

	/* Debian's layout, found for a python3 without a minor version in
	 * its name; an interpreter that does not exist finds nothing. */
	put("deb/bin/python3", "#!/bin/sh\n", 0755);
	put("deb/lib/python3/dist-packages/torch/version.py", "__version__ = '1.13.0a0'\n", 0644);
	snprintf(py, sizeof(py), "%s/deb/bin/python3", root);
	envp[1] = NULL;
	crun__torch_probe(py, envp, &t);
	assert_true(t.found);
	assert_string_equal(t.version, "1.13.0a0");
	crun__torch_probe("no-such-python", envp, &t);
	assert_false(t.found);
	rm_rf(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_supported),
		cmocka_unit_test(test_probe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

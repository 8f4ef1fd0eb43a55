/* crun's own programs as commands when PATH lacks them (sibling.h). */
#include "launcher/sibling.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/fs.h"
#include "common/util.h"

#include "crun-config.h"

bool crun__launch_is_own_program(const char *name)
{
	static const char *const own[] = {"crun-train", "crunctl", "crun-rdzvd",
					  "crun-trace-merge"};

	for (size_t i = 0; i < CRUN_ARRAY_SIZE(own); i++)
		if (!strcmp(name, own[i]))
			return true;
	return !strncmp(name, "crun-plot-", 10) && name[10];
}

bool crun__launch_in_path(const char *name, const char *path)
{
	char file[4096];

	return crun__path_search(name, path, file, sizeof(file)) == 0;
}

/* out = dir/name when that is an executable file: 0, else -ENOENT. */
static int try_dir(const char *dir, const char *name, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, "%s/%s", dir, name);

	if (n < 0 || (size_t)n >= outlen)
		return -ENAMETOOLONG;
	return crun__is_executable_file(out) ? 0 : -ENOENT;
}

int crun__launch_find_sibling(const char *name, const char *path, const char *self_dir,
			      const char *build_root, char *out, size_t outlen, const char **from)
{
	/* Where the build tree puts each program (src/<part>/meson.build). */
	static const char *const build_dirs[] = {"src/trainer", "src/rendezvous"};
	char dir[4096];
	int rc;

	*from = NULL;
	if (strchr(name, '/') || !crun__launch_is_own_program(name) ||
	    crun__launch_in_path(name, path))
		return -ENOENT;
	*from = "next to crun";
	rc = try_dir(self_dir, name, out, outlen);
	if (rc != -ENOENT)
		return rc;
	if (!strcmp(name, "crun-rdzvd") && *CRUN_SBINDIR_FROM_BINDIR) {
		/* the installed sbindir as seen from bindir (crun-config.h) */
		rc = crun__path_join_lexical(self_dir, CRUN_SBINDIR_FROM_BINDIR, dir, sizeof(dir));
		if (rc < 0)
			return rc;
		rc = try_dir(dir, name, out, outlen);
		if (rc != -ENOENT)
			return rc;
	}
	if (build_root && *build_root) {
		int n = snprintf(dir, sizeof(dir), "%s/src/launcher", build_root);

		if (n > 0 && (size_t)n < sizeof(dir) && !strcmp(dir, self_dir)) {
			*from = "in crun's build tree";
			for (size_t i = 0; i < CRUN_ARRAY_SIZE(build_dirs); i++) {
				snprintf(dir, sizeof(dir), "%s/%s", build_root, build_dirs[i]);
				rc = try_dir(dir, name, out, outlen);
				if (rc != -ENOENT)
					return rc;
			}
		}
	}
	*from = NULL;
	return -ENOENT;
}

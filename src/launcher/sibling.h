/* crun's own programs as commands when PATH lacks them.
 *
 * `crun crun-train tiny.yaml` should work where crun was installed (or
 * unpacked from a DESTDIR) without its bin directory in PATH, and from the
 * build tree, where each program lies in its own subdirectory. A command
 * without a slash that PATH does not have, and that is one of crun's own
 * programs, is looked for next to the running crun (and, for crun-rdzvd,
 * in ../sbin beside it); and, when this crun is the build tree's
 * uninstalled binary, in the build tree's program directories. Any other
 * command is left to PATH, as exec does. */
#ifndef CRUN_LAUNCHER_SIBLING_H
#define CRUN_LAUNCHER_SIBLING_H

#include <stdbool.h>
#include <stddef.h>

/* crun-train, crunctl, crun-rdzvd, crun-trace-merge and crun-plot-*. */
bool crun__launch_is_own_program(const char *name);

/* Whether PATH has an executable file called name, as execvp(3) finds
 * it (crun__path_search(): an empty entry is the current directory;
 * NULL: the system's default PATH). */
bool crun__launch_in_path(const char *name, const char *path);

/* Finds crun's own program name for a command that PATH lacks. self_dir
 * is the directory of the running crun's executable; build_root the build
 * tree's root, used only when self_dir is exactly build_root/src/launcher
 * (NULL or "": none). Returns 0 with the executable's path in out, or
 * -ENOENT: name has a slash, is not crun's own, is in path, or is found
 * nowhere (then exec reports it as usual); -ENAMETOOLONG. *from says
 * where it was found: "next to crun" or "in crun's build tree". */
int crun__launch_find_sibling(const char *name, const char *path, const char *self_dir,
			      const char *build_root, char *out, size_t outlen, const char **from);

#endif

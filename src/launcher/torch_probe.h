/* Which PyTorch the workers' Python would import, found without running
 * it, for --agent-store=auto.
 *
 * With the agent store, crun gives every worker
 * TORCHELASTIC_USE_AGENT_STORE=True and a MASTER_ADDR:MASTER_PORT that is
 * crun's own store speaking PyTorch's TCPStore protocol; PyTorch's env://
 * and tcp:// initialisation then connects to it as a client instead of
 * rank 0 hosting a TCPStore there. A PyTorch whose dialect crun does not
 * speak, or one too old to read that variable (its rank 0 would try to
 * listen on a port crun holds), must get the old arrangement instead.
 *
 * Starting the interpreter to ask costs tens of milliseconds on every
 * launch, so crun reads torch/version.py from where that interpreter looks
 * for packages, in the order Python searches them: PYTHONPATH, the virtual
 * environment of the interpreter (with or without the system's packages,
 * as its pyvenv.cfg says), the user's site-packages, then the
 * installation's site-packages and dist-packages (Debian's layout
 * included). A PyTorch that is not found counts as supported: the workers
 * then either do not use PyTorch or use one crun could not place, and
 * --agent-store=off is the way out. */
#ifndef CRUN_LAUNCHER_TORCH_PROBE_H
#define CRUN_LAUNCHER_TORCH_PROBE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/* The releases whose TCPStore clients crun's store serves (tcpstore.h). */
#define CRUN_TORCH_MIN_MAJOR 1
#define CRUN_TORCH_MIN_MINOR 13
#define CRUN_TORCH_MAX_MAJOR 2
#define CRUN_TORCH_MAX_MINOR 15
#define CRUN_TORCH_RANGE "1.13 to 2.15"

struct crun__torch_found {
	bool found;
	char version[64]; /* as torch/version.py spells it: "2.15.0+cu130" */
	int major, minor;
	char dir[PATH_MAX]; /* the torch package directory */
};

/* Reads __version__ from the text of a torch/version.py (len bytes, not
 * NUL-terminated). 0 with the version string and its first two numbers,
 * or -EINVAL when the text holds no version of the form N.N... */
int crun__torch_version_parse(const char *text, size_t len, char *version, size_t versionlen,
			      int *major, int *minor);

/* True when crun's store speaks the TCPStore dialect of major.minor. */
bool crun__torch_version_supported(int major, int minor);

/* Looks for the PyTorch that python (a path or a name looked up in PATH
 * of envp) would import with the environment envp (PYTHONPATH, PATH,
 * HOME; NULL-terminated "NAME=value" strings). Fills out; found is false
 * when there is none where Python would look. Never fails: unreadable
 * places are skipped. */
void crun__torch_probe(const char *python, char **envp, struct crun__torch_found *out);

#endif

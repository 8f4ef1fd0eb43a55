/* A run's own log directory (logdir.h). */
#include "agent/logdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fs.h"

int crun__logdir_name(char *buf, size_t len, const char *run_id, time_t now, int n)
{
	char base[64];
	const char *name = run_id;
	struct tm tm;
	int k;

	if (!strcmp(run_id, "none")) {
		if (!gmtime_r(&now, &tm) || !strftime(base, sizeof(base), "%Y%m%dT%H%M%SZ", &tm))
			return -EINVAL;
		name = base;
	}
	if (n > 0)
		k = snprintf(buf, len, "%s.%d", name, n);
	else
		k = snprintf(buf, len, "%s", name);
	return k < 0 || (size_t)k >= len ? -ENAMETOOLONG : 0;
}

/* mkdir of dir/name, dir/name.1, ... until one is made. */
static int make_unique(const char *dir, const char *name, char **out, char *what, size_t whatlen)
{
	char *path;
	int err;

	for (int n = 0; n < CRUN__LOGDIR_TRIES; n++) {
		int k = n > 0 ? asprintf(&path, "%s/%s.%d", dir, name, n)
			      : asprintf(&path, "%s/%s", dir, name);

		if (k < 0)
			return -ENOMEM;
		if (n == 0)
			snprintf(what, whatlen, "%s", path);
		if (!mkdir(path, 0777)) {
			*out = path;
			return 0;
		}
		err = -errno;
		if (err != -EEXIST)
			snprintf(what, whatlen, "%s", path);
		free(path);
		if (err != -EEXIST)
			return err;
	}
	return -EEXIST;
}

int crun__logdir_make(const char *parent, const char *run_id, const char *host, time_t now,
		      char **out, char *what, size_t whatlen)
{
	char name[256];
	char *run;
	int err;

	*out = NULL;
	snprintf(what, whatlen, "%s", parent);
	err = crun__mkdir_p(parent, 0777);
	if (err < 0)
		return err;
	if (!host) {
		err = crun__logdir_name(name, sizeof(name), run_id, now, 0);
		return err < 0 ? err : make_unique(parent, name, out, what, whatlen);
	}
	/* Every node names the run level alike: the run id as it is. */
	if (asprintf(&run, "%s/%s", parent, run_id) < 0)
		return -ENOMEM;
	snprintf(what, whatlen, "%s", run);
	if (mkdir(run, 0777) < 0 && errno != EEXIST) {
		free(run);
		return -errno;
	}
	err = crun__mkdir_p(run, 0777); /* a file of the name: -ENOTDIR */
	if (!err)
		err = make_unique(run, host, out, what, whatlen);
	free(run);
	return err;
}

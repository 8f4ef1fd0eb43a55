/* Which PyTorch the workers' Python would import (torch_probe.h). */
#include "launcher/torch_probe.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/options.h"
#include "common/fs.h"

int crun__torch_version_parse(const char *text, size_t len, char *version, size_t versionlen,
			      int *major, int *minor)
{
	static const char name[] = "__version__";
	const char *end = text + len;

	for (const char *line = text; line < end;) {
		const char *eol = memchr(line, '\n', (size_t)(end - line));
		const char *p = line, *q;
		char quote;
		size_t n;

		if (!eol)
			eol = end;
		line = eol + 1;
		if ((size_t)(eol - p) < sizeof(name) - 1 || memcmp(p, name, sizeof(name) - 1))
			continue;
		p += sizeof(name) - 1;
		/* "__version__ = '...'" or "__version__: str = '...'" */
		while (p < eol && *p != '\'' && *p != '"' && *p != '#')
			p++;
		if (p == eol || *p == '#')
			continue;
		quote = *p++;
		q = memchr(p, quote, (size_t)(eol - p));
		if (!q)
			continue;
		n = (size_t)(q - p);
		if (n + 1 > versionlen || !isdigit((unsigned char)*p))
			return -EINVAL;
		memcpy(version, p, n);
		version[n] = '\0';
		if (sscanf(version, "%d.%d", major, minor) != 2 || *major < 0 || *minor < 0)
			return -EINVAL;
		return 0;
	}
	return -EINVAL;
}

bool crun__torch_version_supported(int major, int minor)
{
	long v = (long)major * 1000 + minor;

	return v >= CRUN_TORCH_MIN_MAJOR * 1000L + CRUN_TORCH_MIN_MINOR &&
	       v <= CRUN_TORCH_MAX_MAJOR * 1000L + CRUN_TORCH_MAX_MINOR;
}

/* True when dir holds torch/version.py with a version; fills out. */
static bool try_dir(const char *dir, struct crun__torch_found *out)
{
	char path[PATH_MAX], text[4096];
	ssize_t n;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/torch/version.py", dir) >= sizeof(path))
		return false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, text, sizeof(text));
	close(fd);
	if (n <= 0 || crun__torch_version_parse(text, (size_t)n, out->version, sizeof(out->version),
						&out->major, &out->minor) < 0)
		return false;
	snprintf(out->dir, sizeof(out->dir), "%s/torch", dir);
	out->found = true;
	return true;
}

/* The site directories of an installation under prefix for Python
 * version ver ("3.11"), in sys.path's order (Debian's dist-packages
 * included). */
static bool try_prefix_version(const char *prefix, const char *ver, struct crun__torch_found *out)
{
	static const char *const forms[] = {
		"%s/local/lib/python%s/dist-packages",
		"%s/lib/python%s/site-packages",
		"%s/lib/python%s/dist-packages",
	};
	char dir[PATH_MAX];

	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		if ((size_t)snprintf(dir, sizeof(dir), forms[i], prefix, ver) < sizeof(dir) &&
		    try_dir(dir, out))
			return true;
	}
	return false;
}

/* "3.11" from "python3.11", else "" */
static void version_of_name(const char *path, char *ver, size_t len)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	ver[0] = '\0';
	if (strncmp(base, "python", 6) || !isdigit((unsigned char)base[6]) || !strchr(base, '.'))
		return;
	snprintf(ver, len, "%s", base + 6);
}

/* Every pythonX.Y under prefix/lib when ver is unknown, else that one. */
static bool try_prefix(const char *prefix, const char *ver, struct crun__torch_found *out)
{
	char lib[PATH_MAX];
	struct dirent *e;
	bool done = false;
	DIR *d;

	if (ver[0])
		return try_prefix_version(prefix, ver, out);
	if ((size_t)snprintf(lib, sizeof(lib), "%s/lib", prefix) >= sizeof(lib))
		return false;
	d = opendir(lib);
	if (!d)
		return false;
	while (!done && (e = readdir(d))) {
		if (!strncmp(e->d_name, "python3.", 8) && isdigit((unsigned char)e->d_name[8]))
			done = try_prefix_version(prefix, e->d_name + 6, out);
	}
	closedir(d);
	if (!done) {
		/* Debian's own packages, whatever the minor version. */
		snprintf(lib, sizeof(lib), "%s/lib/python3/dist-packages", prefix);
		done = try_dir(lib, out);
	}
	return done;
}

/* The interpreter's path: python itself when it has a slash, else the
 * first executable of that name in the job's PATH, as execvp(3) finds
 * it; without PATH also /usr/local/bin, which the system's default PATH
 * may lack. */
static bool find_python(const char *python, char **envp, char *path, size_t len)
{
	const char *dirs = crun__launch_env_lookup(envp, "PATH");

	if (!crun__path_search(python, dirs, path, len))
		return true;
	return !dirs && !strchr(python, '/') &&
	       !crun__path_search(python, "/usr/local/bin", path, len);
}

/* Reads the value of key from a pyvenv.cfg ("key = value"). */
static bool venv_value(const char *cfg, const char *key, char *val, size_t len)
{
	char line[PATH_MAX + 64];
	size_t klen = strlen(key);
	bool found = false;
	FILE *f = fopen(cfg, "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *p = line, *end;

		while (isspace((unsigned char)*p))
			p++;
		if (strncmp(p, key, klen))
			continue;
		p += klen;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p++ != '=')
			continue;
		while (*p == ' ' || *p == '\t')
			p++;
		end = p + strlen(p);
		while (end > p && isspace((unsigned char)end[-1]))
			*--end = '\0';
		snprintf(val, len, "%s", p);
		found = true;
	}
	fclose(f);
	return found;
}

static void parent(char *path)
{
	char *slash = strrchr(path, '/');

	if (slash && slash != path)
		*slash = '\0';
	else if (slash)
		slash[1] = '\0';
}

void crun__torch_probe(const char *python, char **envp, struct crun__torch_found *out)
{
	const char *pythonpath = crun__launch_env_lookup(envp, "PYTHONPATH");
	const char *home = crun__launch_env_lookup(envp, "HOME");
	char exe[PATH_MAX], real[PATH_MAX], prefix[PATH_MAX], cfg[PATH_MAX + 16];
	char ver[32], val[PATH_MAX], vver[32] = "";
	bool venv, system_site = true;

	memset(out, 0, sizeof(*out));
	for (const char *p = pythonpath ? pythonpath : ""; *p;) {
		const char *colon = strchr(p, ':');
		size_t n = colon ? (size_t)(colon - p) : strlen(p);
		char dir[PATH_MAX];

		if (n && n < sizeof(dir)) {
			memcpy(dir, p, n);
			dir[n] = '\0';
			if (try_dir(dir, out))
				return;
		}
		p += n + (colon ? 1 : 0);
	}
	if (!find_python(python, envp, exe, sizeof(exe)))
		return;
	if (!realpath(exe, real))
		snprintf(real, sizeof(real), "%s", exe);
	version_of_name(real, ver, sizeof(ver));

	/* A virtual environment: bin/python with pyvenv.cfg one level up.
	 * Without the system's packages it has no user site either; with
	 * them, the user's site comes before its own (site.py's order). */
	snprintf(prefix, sizeof(prefix), "%s", exe);
	parent(prefix);
	parent(prefix);
	snprintf(cfg, sizeof(cfg), "%s/pyvenv.cfg", prefix);
	venv = access(cfg, R_OK) == 0;
	if (venv) {
		if (venv_value(cfg, "version", val, sizeof(val)) ||
		    venv_value(cfg, "version_info", val, sizeof(val))) {
			int a, b;

			if (sscanf(val, "%d.%d", &a, &b) == 2)
				snprintf(vver, sizeof(vver), "%d.%d", a, b);
		}
		if (!ver[0])
			snprintf(ver, sizeof(ver), "%s", vver);
		system_site = venv_value(cfg, "include-system-site-packages", val, sizeof(val)) &&
			      !strcasecmp(val, "true");
		if (!system_site) {
			try_prefix(prefix, vver[0] ? vver : ver, out);
			return;
		}
	}
	if (home && *home) {
		char dir[PATH_MAX];

		if (ver[0]) {
			if ((size_t)snprintf(dir, sizeof(dir),
					     "%s/.local/lib/python%s/site-packages", home,
					     ver) < sizeof(dir) &&
			    try_dir(dir, out))
				return;
		} else if ((size_t)snprintf(dir, sizeof(dir), "%s/.local", home) < sizeof(dir) &&
			   try_prefix(dir, ver, out)) {
			return;
		}
	}
	if (venv) {
		snprintf(prefix, sizeof(prefix), "%s", exe);
		parent(prefix);
		parent(prefix);
		if (try_prefix(prefix, vver[0] ? vver : ver, out))
			return;
	}
	snprintf(prefix, sizeof(prefix), "%s", real);
	parent(prefix);
	parent(prefix);
	if (try_prefix(prefix, ver, out))
		return;
	snprintf(prefix + strlen(prefix), sizeof(prefix) - strlen(prefix),
		 "/lib/python3/dist-packages");
	try_dir(prefix, out);
}

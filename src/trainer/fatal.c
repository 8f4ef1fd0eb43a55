/* The error file is written at the error's site, not at exit: a rank that
 * dies later in its cleanup (a CUDA teardown, a collective that hangs
 * until killed) has still told the agent why it failed. */
#include "trainer/fatal.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/record.h"
#include "common/util.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool recorded;

/* A variable the agent sets; NULL when unset or empty. */
static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* "src/trainer/main.c" of "../src/trainer/main.c" (the build's path). */
static const char *source_path(const char *file)
{
	const char *src = strstr(file, "src/");

	return src ? src : file;
}

/* "rank 1 (local rank 1, pid 42): main() at src/trainer/main.c:812" */
static void site(char *buf, size_t len, const char *file, int line, const char *func)
{
	const char *rank = env("RANK");
	const char *local = env("LOCAL_RANK");

	snprintf(buf, len, "rank %s (local rank %s, pid %d): %s() at %s:%d", rank ? rank : "0",
		 local ? local : "0", (int)getpid(), func, source_path(file), line);
}

static int write_error_file(const char *path, const char *message, const char *where)
{
	json_t *doc = crun__record_doc(message, where);
	int rc;

	if (!doc)
		return -ENOMEM;
	rc = crun__record_write(path, doc);
	json_decref(doc);
	return rc;
}

int crun__train_fatal_at(int code, const char *file, int line, const char *func, const char *fmt,
			 ...)
{
	char msg[1024], full[1100], where[512];
	const char *path;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	crun__error("%s", msg);
	path = env("TORCHELASTIC_ERROR_FILE");
	if (recorded || !path)
		return code;
	recorded = true;
	snprintf(full, sizeof(full), "%s: %s", crun__log_prog(), msg);
	site(where, sizeof(where), file, line, func);
	rc = write_error_file(path, full, where);
	if (rc < 0)
		crun__warn("cannot write error file '%s': %s", path, strerror(-rc));
	return code;
}

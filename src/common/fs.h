/* Files and directories: creating a directory path, replacing a file
 * atomically so that a reader (or a crash) sees either the old content or
 * the new, never a part, searching PATH, and the running program's own
 * directory.
 *
 * Every function returns 0 or a negative errno. */
#ifndef CRUN_COMMON_FS_H
#define CRUN_COMMON_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Like mkdir -p: creates path and every missing parent with mode (the
 * umask applies; existing directories keep theirs). A path that exists as
 * a directory, or a symbolic link to one, is success. A component that
 * exists but is not a directory gives -ENOTDIR; "" gives -ENOENT. */
int crun__mkdir_p(const char *path, mode_t mode);

/* Opens the directory at path and fsyncs it, so that a rename or a
 * create inside it survives a crash. File systems that cannot sync a
 * directory (EINVAL) count as success. */
int crun__fsync_dir(const char *path);

/* A file being written to a temporary name beside its final path. Open,
 * write any number of times, then commit (or abort). The caller owns the
 * struct; its fields are private. */
struct crun__atomic_file {
	int fd;
	char *path; /* final name */
	char *tmp;  /* path.tmp.PID */
};

/* Creates (or truncates) the temporary file "path.tmp.PID" with mode (the
 * umask applies). On failure nothing is left behind and the struct needs
 * no abort. */
int crun__atomic_open(struct crun__atomic_file *f, const char *path, mode_t mode);

/* Writes all len bytes, retrying short writes and EINTR. After a failure
 * the caller aborts. */
int crun__atomic_write(struct crun__atomic_file *f, const void *buf, size_t len);

/* fsyncs and closes the temporary file, renames it over path and fsyncs
 * the directory. On any failure before the rename the temporary file is
 * removed and path is untouched; when only the directory's fsync fails,
 * path already holds the new content but may not survive a crash. The
 * struct is finished either way (no abort afterwards). */
int crun__atomic_commit(struct crun__atomic_file *f);

/* Closes and removes the temporary file; path is untouched. */
void crun__atomic_abort(struct crun__atomic_file *f);

/* Replaces path with len bytes of data: open, write, commit. */
int crun__write_atomic(const char *path, const void *data, size_t len, mode_t mode);

/* Finds name as execvp(3) does: a name with a slash is itself, else
 * each entry of path (colon-separated; an empty entry is the current
 * directory, written "./name"; NULL: the system's default,
 * confstr(_CS_PATH)) in order, the first regular file that this process
 * may execute. Entries too long for buf are passed over. Returns 0 with
 * the file's path in buf, -ENOENT (none, or name is ""), -ENAMETOOLONG
 * (name alone does not fit len). */
int crun__path_search(const char *name, const char *path, char *buf, size_t len);

/* Whether path is a regular file this process may execute. */
bool crun__is_executable_file(const char *path);

/* DIR/REL into buf, with REL's "." and ".." components applied to the text
 * of DIR ("/opt/crun/bin" and "../share/crun" give "/opt/crun/share/crun"),
 * without following links: for paths below the program's own directory,
 * which /proc/self/exe gives with none left. 0, or -ENAMETOOLONG when it
 * does not fit in len bytes. */
int crun__path_join_lexical(const char *dir, const char *rel, char *buf, size_t len);

/* The running program's executable (/proc/self/exe), as an absolute path
 * in buf. Returns 0, -ENAMETOOLONG when it does not fit len (never
 * truncated), or the negative errno of readlink(2). */
int crun__self_exe(char *buf, size_t len);

/* The directory of the running program's executable: crun__self_exe()
 * without its last component ("/" for a program in the root). */
int crun__self_dir(char *buf, size_t len);

#endif

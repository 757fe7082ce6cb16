/*
 * odafs.h: the C API of libodafs.
 *
 * Conventions follow POSIX: calls return 0 (or a byte count) on success and -1 with errno
 * set on failure; constructors return NULL with errno set. No call throws a C++ exception,
 * whatever fails underneath (out of memory included: ENOMEM), so C callers and callbacks
 * are safe. (The C++ API, client/client.h, throws odafs::Error from the calls its "Errors"
 * comment lists; this API is a shell over it that catches them.) Paths are relative to the
 * mount. A client may be used from many threads; a file from one thread at a time.
 * Modes of new objects are used as given: no umask is applied here or at the server (pass
 * mode & ~umask for what open(2) and mkdir(2) would make).
 */
#ifndef ODAFS_H_
#define ODAFS_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct odafs_client odafs_client;
typedef struct odafs_file odafs_file;

/* Read mechanisms, for measurement (see docs/architecture.md). */
enum odafs_read_mode {
  ODAFS_READ_INLINE = 0,    /* RPC, payload copied out of the reply */
  ODAFS_READ_PREPOSTED = 1, /* RPC, payload received into the caller's buffer */
  ODAFS_READ_ORDMA = 2,     /* one-sided when a reference is held, else pre-posted (default) */
  ODAFS_READ_DIRECT = 3     /* the server's engine writes into the caller's buffer */
};

/* Mounts odafs://HOST:PORT/PATH. */
odafs_client* odafs_mount(const char* url);
/* Writes back what closes kept under write delegations and frees the client. A server
 * that cannot be reached is waited for up to 60 s; then those bytes are saved in rescue
 * files ($TMPDIR, else /var/tmp), each path logged (Client::try_unmount). */
void odafs_unmount(odafs_client* client);
int odafs_set_read_mode(odafs_client* client, enum odafs_read_mode mode);

odafs_file* odafs_open(odafs_client* client, const char* path, int flags, mode_t mode);
/* Commits unstable writes and frees the file, even when it reports an error. */
int odafs_close(odafs_file* file);
ssize_t odafs_pread(odafs_file* file, void* buf, size_t len, off_t offset);
ssize_t odafs_pwrite(odafs_file* file, const void* buf, size_t len, off_t offset);
int odafs_fsync(odafs_file* file);
int odafs_ftruncate(odafs_file* file, off_t size);
int odafs_fstat(odafs_file* file, struct stat* st);

int odafs_stat(odafs_client* client, const char* path, struct stat* st);
int odafs_lstat(odafs_client* client, const char* path, struct stat* st);
int odafs_mkdir(odafs_client* client, const char* path, mode_t mode);
int odafs_rmdir(odafs_client* client, const char* path);
int odafs_unlink(odafs_client* client, const char* path);
int odafs_rename(odafs_client* client, const char* from, const char* to);
int odafs_truncate(odafs_client* client, const char* path, off_t size);
int odafs_chmod(odafs_client* client, const char* path, mode_t mode);
/* Like lchown(2): a symlink at the end is changed itself; -1 leaves uid or gid as is. */
int odafs_lchown(odafs_client* client, const char* path, uid_t uid, gid_t gid);
/* Like access(2) (R_OK, W_OK, X_OK; F_OK): 0, or -1 with EACCES, as the server decides. */
int odafs_access(odafs_client* client, const char* path, int mode);
/* Like utimensat(2) (UTIME_NOW, UTIME_OMIT allowed). */
int odafs_utimens(odafs_client* client, const char* path, const struct timespec times[2]);
int odafs_symlink(odafs_client* client, const char* target, const char* path);
/* Like mknod(2) for FIFOs, sockets and devices (S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK in
 * mode; EINVAL for another type). Devices: EPERM unless the export's rule says `devices`
 * and the caller is root there. */
int odafs_mknod(odafs_client* client, const char* path, mode_t mode, dev_t dev);
/* Like link(2): a second name for a file (EPERM for a directory). */
int odafs_link(odafs_client* client, const char* existing, const char* new_path);
/* Like readlink(2): no terminating NUL; returns the length. */
ssize_t odafs_readlink(odafs_client* client, const char* path, char* buf, size_t len);

/* Asynchronous I/O (client/io_queue.h, odafs::IoQueue): one thread submits many reads,
 * writes and metadata requests without waiting, then reaps or waits for their completions. Reads go
 * down the same path as odafs_pread (client cache, one-sided reads, RPC); writes are pipelined
 * WRITE calls with odafs_pwrite's bookkeeping. A queue is used by one thread at a time.
 * At most `depth` requests are submitted and not yet reaped. */
typedef struct odafs_ioq odafs_ioq;
struct odafs_completion {
  uint64_t user_tag; /* as given at submit */
  size_t bytes;      /* bytes read (fewer only at end of file) or written */
  int error;         /* errno of this request; 0: success */
};
/* NULL with errno EINVAL for a depth outside 1..65536. */
odafs_ioq* odafs_ioq_create(odafs_client* client, size_t depth);
/* Waits for the calls in flight, drops completions not reaped, frees the queue. */
void odafs_ioq_destroy(odafs_ioq* q);
/* 0, or -1 with errno: EBUSY (depth requests outstanding), EINVAL (a NULL argument, a
 * negative offset, a file of another client). Any other failure of the request comes as
 * its completion's error. buf and file must stay valid until the completion is reaped. */
int odafs_ioq_submit_read(odafs_ioq* q, odafs_file* file, void* buf, size_t len, off_t offset,
                          uint64_t user_tag);
int odafs_ioq_submit_write(odafs_ioq* q, odafs_file* file, const void* buf, size_t len,
                           off_t offset, uint64_t user_tag);
/* The metadata requests (IoQueue::submit_stat, submit_lstat...): as odafs_fstat,
 * odafs_lstat, odafs_access (the granted part of mode in *granted), odafs_open with O_CREAT
 * (the open file in *file at reap, NULL on failure), odafs_unlink and odafs_chmod. The
 * results are written when the completion is reaped; st, granted and file must stay valid
 * until then. Paths are copied at submit. Errors as odafs_ioq_submit_read's. */
int odafs_ioq_submit_stat(odafs_ioq* q, odafs_file* file, struct stat* st, uint64_t user_tag);
int odafs_ioq_submit_lstat(odafs_ioq* q, const char* path, struct stat* st, uint64_t user_tag);
int odafs_ioq_submit_access(odafs_ioq* q, const char* path, int mode, int* granted,
                            uint64_t user_tag);
int odafs_ioq_submit_create(odafs_ioq* q, const char* path, int flags, mode_t mode,
                            odafs_file** file, uint64_t user_tag);
int odafs_ioq_submit_unlink(odafs_ioq* q, const char* path, uint64_t user_tag);
int odafs_ioq_submit_chmod(odafs_ioq* q, const char* path, mode_t mode, uint64_t user_tag);
/* Moves up to max completions into out without waiting; returns how many (-1/EINVAL for a
 * NULL argument). */
ssize_t odafs_ioq_reap(odafs_ioq* q, struct odafs_completion* out, size_t max);
/* Waits until min completions are there, nothing is in flight, or timeout_ms passed (< 0:
 * no limit), then reaps like odafs_ioq_reap. -1/EINVAL when min > max. */
ssize_t odafs_ioq_wait(odafs_ioq* q, struct odafs_completion* out, size_t max, size_t min,
                       int timeout_ms);

/* Calls fn for every entry (no "." or ".."); a non-zero return from fn stops the walk and
 * becomes the result. d_type is a DT_* value. */
typedef int (*odafs_dir_fn)(void* ctx, const char* name, unsigned char d_type, uint64_t ino);
int odafs_readdir(odafs_client* client, const char* path, odafs_dir_fn fn, void* ctx);

#ifdef __cplusplus
}
#endif

#endif /* ODAFS_H_ */

/*
 * odafs.h: the C API of libodafs.
 *
 * Conventions follow POSIX: calls return 0 (or a byte count) on success and -1 with errno
 * set on failure; constructors return NULL with errno set. Paths are relative to the
 * mount. A client may be used from many threads; a file from one thread at a time.
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
/* Like utimensat(2) (UTIME_NOW, UTIME_OMIT allowed). */
int odafs_utimens(odafs_client* client, const char* path, const struct timespec times[2]);
int odafs_symlink(odafs_client* client, const char* target, const char* path);
/* Like readlink(2): no terminating NUL; returns the length. */
ssize_t odafs_readlink(odafs_client* client, const char* path, char* buf, size_t len);

/* Calls fn for every entry (no "." or ".."); a non-zero return from fn stops the walk and
 * becomes the result. d_type is a DT_* value. */
typedef int (*odafs_dir_fn)(void* ctx, const char* name, unsigned char d_type, uint64_t ino);
int odafs_readdir(odafs_client* client, const char* path, odafs_dir_fn fn, void* ctx);

#ifdef __cplusplus
}
#endif

#endif /* ODAFS_H_ */

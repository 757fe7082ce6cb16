// PosixStore: a directory tree of this machine as a Store (server/store.h).
//
// An Object is a descriptor: O_PATH for what lookup() holds (it can name anything, FIFOs
// included, without opening it), O_RDONLY / O_RDWR for what open() and create() return.
// Every name is opened with O_NOFOLLOW from a held directory, so nothing the store does
// follows a symlink or leaves the tree. Calls that have no descriptor form for O_PATH
// descriptors (chmod, utimensat, faccessat, linkat) go through /proc/self/fd, which needs
// no privilege. File bytes go through a FileEnv (server/file_env.h) so tests can simulate
// crashes.
//
// Identity: CallerScope sets the thread's file-system ids (IdentityScope's mechanism:
// needs root; the kernel then checks every call as the caller).
//
// Thread-safety: as Store: every member function is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "server/file_env.h"
#include "server/store.h"

namespace odafs::server {

class PosixStore final : public Store {
 public:
  // Holds root (a directory) open. env: null for the real system calls; else REQUIRES it
  // outlives the store. Fails with what open(2) said, or ENOTDIR.
  static Result<std::unique_ptr<PosixStore>> open_export(const std::string& root,
                                                         FileEnv* env = nullptr);
  ~PosixStore() override;

  // The descriptor an Object of this store is (for tests and diagnostics: the store's
  // calls are the way to use it).
  static int fd_of(const Object& obj) { return static_cast<int>(obj.native()); }

  const char* kind() const override { return "posix"; }
  bool shared() const override { return false; }  // odafs is the export's only writer
  Result<Object> root() override;
  Result<Object> lookup(const Object& dir, const char* name, struct stat* st) override;
  Status stat_at(const Object& dir, const char* name, struct stat* st) override;
  Status stat(const Object& obj, struct stat* st) override;
  ObjectId id_of(const struct stat& st) const override;
  bool finds_by_id() const override { return false; }
  Result<Object> find(const ObjectId& id, struct stat* st, Access* access) override;
  Result<Object> open_at(const Object& dir, const char* name, struct stat* st,
                         Access* access) override;
  Status reopen_in_place(const Object& obj, bool write, Access* access) override;
  std::string durable_key(const Object& obj) override;
  Result<Object> open(const Object& obj, int flags) override;
  Result<Object> create(const Object& dir, const char* name, mode_t mode, bool exclusive,
                        struct stat* st, bool* created, bool* writable) override;
  Status mkdir(const Object& dir, const char* name, mode_t mode) override;
  Status symlink(const Object& dir, const char* name, const char* target) override;
  Status mknod(const Object& dir, const char* name, mode_t mode, dev_t rdev) override;
  Status remove(const Object& dir, const char* name, bool directory) override;
  Status rename(const Object& from_dir, const char* from_name, const Object& to_dir,
                const char* to_name) override;
  Status link(const Object& obj, const Object& dir, const char* name) override;
  Result<size_t> readlink(const Object& obj, char* buf, size_t cap) override;
  Status statfs(const Object& obj, struct statvfs* out) override;
  Status set_attributes(const Object& obj, const AttrChange& change) override;
  int access(const Object& obj, int want) override;
  Status list(const Object& dir, uint64_t cookie, DirVisitor& visitor, bool* eof) override;
  Result<size_t> read(const Object& file, void* buf, size_t len, uint64_t offset) override;
  Result<size_t> write(const Object& file, const void* buf, size_t len, uint64_t offset) override;
  Status truncate(const Object& file, uint64_t size) override;
  Status sync(const Object& file, bool data_only) override;
  bool reserves_space() const override { return true; }
  Status reserve_space(const Object& file, uint64_t offset, uint64_t len) override;
  Status release_space(const Object& file) override;
  Result<bool> has_hole(const Object& file, uint64_t size) override;

 private:
  PosixStore(int root_fd, FileEnv* env) : root_fd_(root_fd), env_(env) {}
  void release(uintptr_t native) override;
  auth_stat begin_caller(const rpc::CallerCred* cred, bool acting, uintptr_t* restore) override;
  void end_caller(uintptr_t restore) override;
  Object adopt(int fd) { return Object(this, static_cast<uintptr_t>(fd)); }

  const int root_fd_;
  FileEnv* const env_;
};

}  // namespace odafs::server

// The file system under an export: everything the procedures ask of it (find a name,
// open, read and write bytes, attributes, directory changes, listings, sync) behind one
// interface, so that one odafsd can serve a local directory tree or a CephFS.
//
// Two implementations: PosixStore (server/store_impl/posix_store.h: a directory of this
// machine, system calls on descriptors, as odafsd has always served) and CephStore
// (server/store_impl/ceph_store.h: a CephFS through libcephfs's low-level API, built when
// libcephfs is installed). tests/test_store.cc runs one conformance suite against both.
//
// Objects: a store hands out Objects, each a held reference to one file system object
// (a descriptor on POSIX; an inode reference, plus an open file once opened for its bytes,
// on CephFS). An Object found by lookup() is "held": it names the object and answers
// stat(), directory operations and attribute changes; one from open() or create() also
// reads and writes bytes.
//
// Identity: a store call runs as the caller of the CallerScope alive on its thread (as
// the server itself when there is none, or when the scope does not act). POSIX: the
// thread's file-system ids (setfsuid, IdentityScope's mechanism), so the kernel checks
// permissions; CephFS: a UserPerm handed to every libcephfs call, so the MDS and the
// client library check them. Either way the store, not the procedure, enforces POSIX
// permissions on what it is asked to do; the procedures' own checks (the owner override
// of data, ACCESS) come on top.
//
// Failures: Status / Result (base/status.h), the errno saying why.
//
// Thread-safety: every member function of a store is thread-safe; an Object may be used
// by several threads at once (as a descriptor may), but moved or destroyed by one.
#pragma once

#include <fcntl.h>
#include <rpc/rpc.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "base/status.h"

namespace odafs::rpc {
struct CallerCred;
}  // namespace odafs::rpc

namespace odafs::server {

class Store;

// What names one object of a store for its whole life, however it is reached: (device,
// inode) on POSIX, where inode numbers are reused after a removal; (inode, snapshot id)
// on CephFS, whose inode numbers are never reused and mean the same to every client of
// the file system (what makes handles portable between gateways).
struct ObjectId {
  uint64_t ino = 0;    // the inode number
  uint64_t space = 0;  // what it is unique in: the device (POSIX), the snapshot (CephFS)
  bool operator==(const ObjectId&) const = default;
};
// For unordered containers keyed by ObjectId.
struct ObjectIdHash {
  size_t operator()(const ObjectId& k) const { return std::hash<uint64_t>()(k.ino * 31 + k.space); }
};

// A held object. Move-only; released through its store when destroyed. Empty only when
// default-constructed or moved from.
class Object {
 public:
  Object() = default;
  Object(Store* store, uintptr_t native) : store_(store), native_(native) {}
  Object(Object&& other) noexcept
      : store_(std::exchange(other.store_, nullptr)), native_(std::exchange(other.native_, 0)) {}
  Object& operator=(Object&& other) noexcept;
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  ~Object();

  explicit operator bool() const { return store_ != nullptr; }
  // The store's own representation, for the store that made it.
  uintptr_t native() const { return native_; }

 private:
  Store* store_ = nullptr;
  uintptr_t native_ = 0;
};

// One directory entry of a listing. name stays valid until the next list() on this
// thread (a listing's names may be sent after it ends, without copies).
struct StoreDirEntry {
  const char* name;
  uint64_t fileid;       // the inode number
  mode_t type;           // S_IFREG, S_IFDIR, ... (0: unknown)
  uint64_t next_cookie;  // where a listing resumes after this entry
};

// How a listing visits entries: return false to stop (the entry is not consumed: a
// listing resumed at its cookie starts with it). Deliberately a function reference, not a
// std::function: a listing allocates nothing per entry.
class DirVisitor {
 public:
  virtual bool visit(const StoreDirEntry& entry) = 0;

 protected:
  ~DirVisitor() = default;
};

// Which attributes set_attributes changes (any combination).
struct AttrChange {
  bool set_mode = false;
  mode_t mode = 0;
  bool set_owner = false;  // uid / gid of (uid_t)-1 / (gid_t)-1 keep that one
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  bool set_times = false;  // as utimensat: UTIME_NOW, UTIME_OMIT allowed
  timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
};

class Store {
 public:
  virtual ~Store() = default;

  // "posix" or "cephfs": for logs and STATS.
  virtual const char* kind() const = 0;
  // Whether others change this store's objects behind this server (CephFS: other gateways
  // and clients of the file system). The server then caches a file's bytes only under a
  // lease (below), or, for a store without leases, checks its cached blocks of a file
  // against the file's change time whenever it looks at the file (docs/ceph.md).
  virtual bool shared() const = 0;

  // Leases: the store's promise that no one else changes a file (a read lease; CephFS: a
  // read delegation), or that no one else even looks at it (a write lease; CephFS: a write
  // delegation), until the store recalls it. The server caches a shared store's file,
  // hands out references to it and grants delegations on it only while it holds one, and
  // write delegations only under a write lease (LeaseKeeper). A store that is not shared
  // needs none: leases() is false and the rest is never called.
  //
  // The recall function is called once per recall, from a thread of the store's (CephFS:
  // libcephfs's, perhaps inside a call of ours): it must only note the id and return. The
  // lease must then be given back soon (CephFS: within --lease-timeout, or the file system
  // unmounts this server). Set once, before the first take_lease.
  using LeaseRecallFn = std::function<void(const ObjectId& id)>;
  enum class LeaseKind { kRead, kWrite };
  virtual bool leases() const { return false; }
  virtual void set_lease_recall(LeaseRecallFn) {}
  // Takes a lease of `kind` on file (id its ObjectId): a read lease on a file opened for
  // reading only, a write lease on one opened to write (CephFS also refuses it while the
  // server has the file open for reading only, through an object reopened in place).
  // EAGAIN: the store refuses it now (someone else has the file open to write, or at all
  // for a write lease; or this server has it open the other way). Ok at once when file
  // already holds one.
  virtual Status take_lease(const Object& file, const ObjectId& id, LeaseKind kind) {
    (void)file;
    (void)id;
    (void)kind;
    return Status(EOPNOTSUPP, "this store has no leases");
  }
  // Evicts the store sessions a peer gateway `peer` (its listen address) opened before
  // `opened_before_ms` (wall clock, ms since the epoch): what it held goes now. Answers
  // how many. For PeerFence (server/peer_fence.h); only a shared store has peers.
  virtual Result<int> evict_peer_sessions(const std::string& peer, int64_t opened_before_ms) {
    (void)peer;
    (void)opened_before_ms;
    return Status(EOPNOTSUPP, "this store has no peers");
  }
  // Gives file's lease back, if it holds one. Never fails (a store that cannot give it
  // back has lost it anyway).
  virtual void give_back_lease(const Object& file) { (void)file; }

  // What an Object from open_at can do: read bytes (a file or directory opened for
  // reading) and write them (a file opened for both).
  struct Access {
    bool readable = false;
    bool writable = false;
  };
  // The export's root directory, held.
  virtual Result<Object> root() = 0;

  // The object `name` names in directory dir, held, and its attributes (a symlink there is
  // the symlink itself). REQUIRES: name is one path component, or "." / "..".
  virtual Result<Object> lookup(const Object& dir, const char* name, struct stat* st) = 0;
  // The attributes of `name` in dir without holding it (no symlink followed).
  virtual Status stat_at(const Object& dir, const char* name, struct stat* st) = 0;
  virtual Status stat(const Object& obj, struct stat* st) = 0;
  // The identity (see ObjectId) of an object with attributes st from this store.
  virtual ObjectId id_of(const struct stat& st) const = 0;
  // Whether find() works: objects can be found by identity alone (CephFS), so handles
  // made of identities mean the same to every server of the store.
  virtual bool finds_by_id() const = 0;
  // The object with this identity, opened as open_at opens objects (*st its attributes,
  // *access what it can do), where the store finds objects by identity alone (CephFS);
  // ENOTSUP where it cannot (POSIX: that needs open_by_handle_at and
  // CAP_DAC_READ_SEARCH), ESTALE when no such object exists any more.
  virtual Result<Object> find(const ObjectId& id, struct stat* st, Access* access) = 0;

  // The object `name` names in dir, opened as the node table keeps objects: a regular file
  // for reading and writing where the caller may (else reading only, else held; a store
  // whose writers are costly to others, CephFS, opens for reading only, and the table
  // makes a file writable in place before its first write: reopen_in_place), a
  // directory for reading (else held), anything else held; *access what it can do. Never
  // follows a symlink, never blocks (a FIFO is held, not opened). *st: on entry, the
  // attributes stat_at just gave for the name (its type decides how to open); on return,
  // the opened object's. ESTALE when the name now names another object.
  // REQUIRES: name is one path component.
  virtual Result<Object> open_at(const Object& dir, const char* name, struct stat* st,
                                 Access* access) = 0;
  // Makes obj (a regular file from open_at) readable, and writable too when `write`
  // (where the caller may; else readable only, when !write), in place: users of obj on
  // other threads go on unharmed, and native() stays the same. *access what it can do now.
  // EISDIR for anything but a regular file.
  virtual Status reopen_in_place(const Object& obj, bool write, Access* access) = 0;
  // Bytes that tell this object from a later one with the same ObjectId (POSIX: the
  // kernel's file handle, which carries the inode's generation), or empty where ObjectIds
  // are never reused (CephFS) or the file system gives none.
  virtual std::string durable_key(const Object& obj) = 0;

  // A regular file (or directory, for O_RDONLY) opened for its bytes: flags O_RDONLY or
  // O_RDWR (O_WRONLY reads as O_RDWR). Permission is checked as the caller.
  virtual Result<Object> open(const Object& obj, int flags) = 0;
  // Creates regular file `name` in dir with mode (no umask), opened O_RDWR, or (unless
  // exclusive) opens the one there (O_RDWR, or O_RDONLY when the caller may not write
  // it: *writable says which). *created says whether this call made it. EEXIST when
  // exclusive and the name exists, or when anything but a regular file is there.
  virtual Result<Object> create(const Object& dir, const char* name, mode_t mode, bool exclusive,
                                struct stat* st, bool* created, bool* writable) = 0;
  virtual Status mkdir(const Object& dir, const char* name, mode_t mode) = 0;
  virtual Status symlink(const Object& dir, const char* name, const char* target) = 0;
  // mode holds the type (S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK) and the permission bits.
  virtual Status mknod(const Object& dir, const char* name, mode_t mode, dev_t rdev) = 0;
  // Removes `name`: a directory (rmdir) when directory, else any other object (unlink).
  // A directory not empty is ENOTEMPTY.
  virtual Status remove(const Object& dir, const char* name, bool directory) = 0;
  // A directory not empty at the target is ENOTEMPTY.
  virtual Status rename(const Object& from_dir, const char* from_name, const Object& to_dir,
                        const char* to_name) = 0;
  // A new name for obj (not a directory).
  virtual Status link(const Object& obj, const Object& dir, const char* name) = 0;
  // The target of symlink obj into buf (not NUL-terminated); its length, at most cap.
  virtual Result<size_t> readlink(const Object& obj, char* buf, size_t cap) = 0;
  virtual Status statfs(const Object& obj, struct statvfs* out) = 0;
  // Mode, owner and times of obj (a symlink's own owner and times; its mode cannot be
  // changed: EOPNOTSUPP). Changes are made in that order; the first failure stops them.
  virtual Status set_attributes(const Object& obj, const AttrChange& change) = 0;
  // The part of want (R_OK | W_OK | X_OK) the caller has on obj.
  virtual int access(const Object& obj, int want) = 0;

  // Visits the entries of directory dir but "." and "..", from cookie (0: the start),
  // until the visitor says stop or the store's buffer for names is full (64 KiB: *eof
  // false, resume at the last entry's cookie). *eof: the listing reached the end. A cookie
  // the store cannot resume from is EINVAL.
  virtual Status list(const Object& dir, uint64_t cookie, DirVisitor& visitor, bool* eof) = 0;

  // Bytes of an opened object. read: len bytes, fewer only at end of file. write: len
  // bytes, or, when a failure stops it part way, the bytes that landed; a failure before
  // any landed is the failure.
  virtual Result<size_t> read(const Object& file, void* buf, size_t len, uint64_t offset) = 0;
  virtual Result<size_t> write(const Object& file, const void* buf, size_t len,
                               uint64_t offset) = 0;
  virtual Status truncate(const Object& file, uint64_t size) = 0;
  // Makes file's data (data_only) or data and metadata durable.
  virtual Status sync(const Object& file, bool data_only) = 0;

  // Space held for writes to come (a write delegation's space_limit, docs/protocol.md
  // "Open delegations"): a store that reserves_space() makes the blocks of
  // [offset, offset + len) of file (opened to write) allocated without changing its size
  // (POSIX: fallocate(FALLOC_FL_KEEP_SIZE)), so that writes there later cannot fail for
  // want of space; ENOSPC / EDQUOT when there is no room for them, EOPNOTSUPP where the
  // file system cannot. One that does not (CephFS) answers EOPNOTSUPP always.
  virtual bool reserves_space() const { return false; }
  virtual Status reserve_space(const Object& file, uint64_t offset, uint64_t len) {
    (void)file;
    (void)offset;
    (void)len;
    return Status(EOPNOTSUPP, "this store reserves no space");
  }
  // Whether file (opened to read or write) has a hole before `size`: a write there would
  // need blocks, where one over written bytes needs none (a write delegation's holder may
  // keep such writes only in space held for them). Blocks allocated past the end can hide
  // a hole from st_blocks, so a store that reserves_space() looks. true where it cannot.
  virtual Result<bool> has_hole(const Object& file, uint64_t size) {
    (void)file;
    (void)size;
    return true;
  }
  // Frees the blocks reserve_space allocated past file's end that no write has used
  // since; nothing (and the file's times untouched) when there are none. The file's size
  // and bytes stay as they are.
  // REQUIRES: no write or truncation of file runs meanwhile (one that extends the file
  // between the look at its size and the freeing would be cut back): the caller orders
  // them (FileService: Node::data.lock held exclusively).
  virtual Status release_space(const Object& file) {
    (void)file;
    return Status();
  }

 protected:
  // The open flags open() uses for an object of type (S_IFMT bits) asked for with flags:
  // O_RDONLY | O_DIRECTORY for a directory (EISDIR if asked to write), O_RDONLY or O_RDWR
  // for a regular file, EINVAL for anything else.
  static Result<int> open_flags(mode_t type, int flags) {
    const bool write = (flags & O_ACCMODE) != O_RDONLY;
    if (S_ISDIR(type)) {
      if (write) return Status(EISDIR, "open");
      return O_RDONLY | O_DIRECTORY;
    }
    if (S_ISREG(type)) return write ? O_RDWR : O_RDONLY;
    return Status(EINVAL, "open: only files and directories are opened for bytes");
  }

 private:
  friend class Object;
  friend class CallerScope;
  // Object's destructor.
  virtual void release(uintptr_t native) = 0;
  // CallerScope's: begin acting as cred (when acting) on this thread, setting *restore to
  // what end needs to restore the thread (0: nothing). AUTH_OK, or why the caller cannot
  // be acted as (the thread is the server's then, *restore 0).
  virtual auth_stat begin_caller(const rpc::CallerCred* cred, bool acting, uintptr_t* restore) = 0;
  virtual void end_caller(uintptr_t restore) = 0;
};

// Acting as one call's caller: this thread's calls of `store` run as cred while it lives
// (when acting; otherwise as the server), unless refused() says why it could not
// (AUTH_BADCRED when the identity cannot be taken on, AUTH_TOOWEAK for AUTH_NONE): then
// they would run as the server, and the caller must not make them.
// REQUIRES: destroyed on its thread; not nested with another scope of the same store.
class CallerScope {
 public:
  CallerScope(Store& store, const rpc::CallerCred* cred, bool acting)
      : store_(store), refused_(store.begin_caller(cred, acting, &restore_)) {}
  ~CallerScope() { store_.end_caller(restore_); }
  CallerScope(const CallerScope&) = delete;
  CallerScope& operator=(const CallerScope&) = delete;
  // AUTH_OK, or why this thread could not take the caller's identity on.
  auth_stat refused() const { return refused_; }

 private:
  Store& store_;
  uintptr_t restore_ = 0;
  auth_stat refused_;
};

inline Object::~Object() {
  if (store_ != nullptr) store_->release(native_);
}

inline Object& Object::operator=(Object&& other) noexcept {
  if (this != &other) {
    if (store_ != nullptr) store_->release(native_);
    store_ = std::exchange(other.store_, nullptr);
    native_ = std::exchange(other.native_, 0);
  }
  return *this;
}

}  // namespace odafs::server

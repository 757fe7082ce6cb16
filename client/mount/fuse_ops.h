// odafs-mount: the FUSE low-level operations on a libodafs Client.
//
// FuseFs answers the kernel's requests (lookup, getattr, open, read, ...) by calling the
// path-based Client API; the InodeTable turns FUSE inode numbers into those paths. Every
// odafs::Error becomes its errno in fuse_reply_err; anything else becomes EIO (ENOMEM for
// bad_alloc) and is logged. docs/mount.md says what is and is not supported, and why.
//
// Open files: fi->fh points at an OpenNode (an odafs::File for a regular file, a
// directory listing for a directory), made at open/create/opendir and freed at
// release/releasedir. FuseFs owns them all, so that those the kernel never released (the
// session ended first: SIGTERM, an unmount with files open) are closed at its end.
//
// Callers: every operation's calls carry the FUSE request's caller (uid and gid, from
// fuse_req_ctx, and its supplementary groups, from CallerGroups) as their AUTH_SYS
// credential (rpc::CallAs, set by guard()), so that a server run with --auth-sys checks
// and creates as that caller.
//
// Thread-safety: the operations run on libfuse's worker threads, any number at once. The
// Client and the InodeTable are thread-safe; an open File is used by concurrent read,
// write, flush and fsync (which File allows) and closed only at release, after the kernel
// sent the last request on it. A directory listing is touched by one request at a time
// (the kernel serialises readdir on one open directory).
#pragma once

#ifndef FUSE_USE_VERSION  // CMake picks 312 for libfuse >= 3.12, else 35
#define FUSE_USE_VERSION 35
#endif
#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/log.h"
#include "client/client.h"
#include "client/mount/caller_error_marks.h"
#include "client/mount/caller_groups.h"
#include "client/mount/inode_table.h"
#include "rpc/call_credential.h"

namespace odafs::mount {

struct FsOptions {
  double attr_timeout = 1.0;   // seconds the kernel may trust attributes
  double entry_timeout = 1.0;  // seconds the kernel may trust a name → inode lookup
  // Seconds the kernel may trust that a name does not exist (a negative entry): creating a
  // name looks it up first, so without this every create costs a LOOKUP more. Another
  // mount's create of the name goes unseen that long; this mount's own creates replace
  // the entry at once. 0: not kept.
  double negative_timeout = 1.0;
  // Listings carry attributes (READDIR with plus, the kernel's readdirplus): `ls -l` and
  // `find` need no LOOKUP per entry.
  bool readdirplus = true;
};

class FuseFs {
 public:
  // REQUIRES: client outlives this object. root: the mount root's attributes.
  FuseFs(Client& client, const Attr& root, FsOptions options);
  FuseFs(const FuseFs&) = delete;
  FuseFs& operator=(const FuseFs&) = delete;
  // Closes the files still open (close_left_open).
  ~FuseFs();
  // Closes the files and directories still open (the kernel never released them: an
  // unmount by signal). REQUIRES: the session loop has ended (no request runs any more).
  // Before the client's unmount, so that what their closes keep is written back or
  // rescued with the rest.
  void close_left_open();

  // The operation table; pass `this` as the session's userdata.
  static const fuse_lowlevel_ops& ops();
  // The session, for cache invalidations (set once before the session loop runs).
  void set_session(fuse_session* se) { session_ = se; }

  InodeTable& inodes() { return inodes_; }

 private:
  // What fi->fh points at. The kind tells an open file from an open directory, as
  // getattr/setattr get either.
  struct OpenNode {
    enum class Kind { kFile, kDir } kind;
    explicit OpenNode(Kind k) : kind(k) {}
    virtual ~OpenNode() = default;
  };
  struct OpenFile : OpenNode {
    OpenFile(File f, Ino i, uint64_t epoch, const rpc::CallerCred& by)
        : OpenNode(Kind::kFile), file(std::move(f)), ino(i), attr_epoch(epoch), opener(by) {}
    File file;
    Ino ino;
    // The attributes the open brought still describe the file, but for the size this
    // client's writes grow (File::known_size), as long as no setattr ran on this mount
    // since (attr_epoch == FuseFs::attr_epoch_): the kernel's getattrs through the open
    // (the first after open, llseek to the end, reads) are answered without a call, as
    // close-to-open allows. After the first, or once written through (the open's times
    // are old then), the kernel is told not to keep the answer.
    const uint64_t attr_epoch;
    std::atomic<bool> answered{false};
    std::atomic<bool> written{false};
    // An unprivileged write through it has made the server drop setuid/setgid (op_write):
    // the next ones need not be sent at once for that.
    std::atomic<bool> setid_dropped{false};
    // Who opened it: the release (which the kernel sends as no one in particular) closes
    // as the opener, whose flushes a write delegation keeps (Delegations::keep_open).
    const rpc::CallerCred opener;
    // Each caller's place among the file's failed writes, for its fsync and flush.
    CallerErrorMarks error_marks;
  };
  struct OpenDir : OpenNode {
    OpenDir() : OpenNode(Kind::kDir) {}
    std::string path;
    std::vector<DirEntry> entries;  // the server's listing, without "." and ".."
    bool served = false;            // a readdir at offset 0 after this lists again
    uint64_t changes_at_list = 0;   // FuseFs::changes_ when the listing was fetched
    std::chrono::steady_clock::time_point listed_at{};
  };

  // Takes ownership of an open node and returns its fi->fh; release() gives it back.
  uint64_t adopt(std::unique_ptr<OpenNode> node);
  // The node behind fh, now the caller's (fh no longer names it).
  std::unique_ptr<OpenNode> release(uint64_t fh);

  static FuseFs& self(fuse_req_t req) { return *static_cast<FuseFs*>(fuse_req_userdata(req)); }
  // The File behind fi, or null when fi is absent or holds a directory.
  static File* file_of(const fuse_file_info* fi);
  static OpenFile* open_file_of(const fuse_file_info* fi);

  // Runs fn (which replies on success) as the request's caller (its calls carry the
  // caller's credential); an exception becomes fuse_reply_err.
  template <class Fn>
  static void guard(fuse_req_t req, const char* op, Fn&& fn);

  struct stat to_stat(const Attr& a) const;
  // Replies with the entry for parent/name, found as `a` (counts one lookup; undoes it if
  // the kernel did not take the reply).
  void reply_entry(fuse_req_t req, Ino parent, const std::string& name, const Attr& a);
  // Attributes of the node by path; a node whose name now holds another file is detached
  // and fails ESTALE (the kernel then looks the name up again).
  Attr attr_of(Ino ino);

  // Instead of removing parent/name, whose node `ino` has open files: renames it to a
  // hidden name in the same directory, removed at the node's last release (NFS's silly
  // rename; the server forgets a file with its last name). Throws Error.
  void hide_open(Ino parent, const std::string& name, Ino ino);
  // Counts an open of `ino` (for hide_open); released() gives it back, and removes a
  // hidden name after the last.
  void opened(Ino ino) { inodes_.add_open(ino); }
  void released(Ino ino);
  // Closes and frees the open node behind fh (a file's close and released() included).
  void discard_open(uint64_t fh);

  // Namespace operations (fuse_ops.cc).
  static void op_init(void* userdata, fuse_conn_info* conn);
  static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
  static void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets);
  static void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                         fuse_file_info* fi);
  static void op_access(fuse_req_t req, fuse_ino_t ino, int mask);
  static void op_readlink(fuse_req_t req, fuse_ino_t ino);
  static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                       dev_t rdev);
  static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
  static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name);
  static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name);
  static void op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name);
  static void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                        const char* newname, unsigned int flags);
  static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname);
  static void op_statfs(fuse_req_t req, fuse_ino_t ino);

  // Files and directories (fuse_file_ops.cc).
  static void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                        fuse_file_info* fi);
  static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
  static void op_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                       fuse_file_info* fi);
  static void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
  static void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                             fuse_file_info* fi);
  // readdir and readdirplus: the open directory's listing from offset off, as much as
  // fits in size; with plus, each entry with its attributes (a lookup of it) where known.
  void list(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi, bool plus);
  // (Re)fetches dir's listing, with attributes if options_.readdirplus.
  void fetch_listing(OpenDir& dir);
  // This mount is about to change attributes or names (an open for writing, a create,
  // setattr, a namespace change): listings fetched before stop vouching for attributes.
  void changing() { changes_.fetch_add(1, std::memory_order_relaxed); }
  static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         fuse_file_info* fi);
  static void op_releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);

  // The request's caller (uid, gid, groups), for its calls' AUTH_SYS credential.
  static rpc::CallerCred caller_of(fuse_req_t req);

  Client& client_;
  const std::string machine_;  // this host's name, in every caller's credential
  CallerGroups groups_;
  InodeTable inodes_;
  // Bumped by every setattr: opens from before it stop answering getattrs themselves.
  std::atomic<uint64_t> attr_epoch_{0};
  std::atomic<uint64_t> changes_{0};  // see changing()
  const FsOptions options_;
  uint32_t block_size_;  // the server's block: statfs's f_bsize when the server names none
  // Reported as st_blksize, the size programs pick their buffers by (cp and cat read and
  // write max(128 KiB, st_blksize) at a time): the largest transfer one READ and one WRITE
  // carry, as Linux's NFS client reports its rsize/wsize. Each write(2) is a FUSE round
  // trip the program waits for, so larger ones stream faster (cp into the mount: 8 of
  // them per MiB with the 8 KiB block, one now). stdio ignores a st_blksize above BUFSIZ.
  uint32_t io_size_;
  fuse_session* session_ = nullptr;
  std::mutex open_mu_;  // guards open_
  std::unordered_map<OpenNode*, std::unique_ptr<OpenNode>> open_;
};

// Every libodafs error is an errno already; bad_alloc is ENOMEM, anything else EIO.
int errno_of_exception(const std::exception& e);

template <class Fn>
void FuseFs::guard(fuse_req_t req, const char* op, Fn&& fn) {
  const rpc::CallCredential caller(caller_of(req), self(req).machine_);
  const rpc::CallAs as(caller);
  try {
    fn();
  } catch (const std::exception& e) {
    int err = errno_of_exception(e);
    if (err == EIO || err == ENOMEM)
      ODAFS_LOG_WARN("odafs-mount: %s: %s", op, e.what());
    else
      ODAFS_LOG_DEBUG("odafs-mount: %s: %s", op, e.what());
    fuse_reply_err(req, err);
  }
}

}  // namespace odafs::mount

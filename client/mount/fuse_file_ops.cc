// FuseFs: open files (open, create, read, write, flush, release, fsync) and directories
// (opendir, readdir, readdirplus, releasedir).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <vector>

#include "base/setid.h"
#include "client/mount/fuse_ops.h"

namespace odafs::mount {
namespace {

// The open(2) flags libodafs acts on. The kernel has dealt with the rest (O_CREAT and
// O_EXCL reach create only; O_NOFOLLOW, O_DIRECTORY, O_CLOEXEC... are the VFS's).
constexpr int kOpenFlags = O_ACCMODE | O_APPEND | O_TRUNC;

// An O_APPEND open bypasses the kernel's page cache (direct I/O): through the page cache
// the kernel may cut one write(2) into several WRITE requests (at page boundaries), and
// each is appended at the server's end of file on its own, so another writer's record
// could land between the pieces. Direct, a write(2) up to the connection's max_write is
// one request, one atomic append at the server.
unsigned direct_io_for(int open_flags) { return (open_flags & O_APPEND) != 0 ? 1 : 0; }

// A close of an open for reading only has nothing to send or report (Linux's NFS client
// likewise flushes only descriptors open for writing): the kernel is told to skip its
// FLUSH (FOPEN_NOFLUSH), a round trip per close(2). Not for opens to write, even under a
// write delegation that would keep their bytes: the kernel fixes it at open, and should the
// file outgrow the room the delegation holds, or the delegation be recalled, the bytes would
// go at the release, after close(2) returned, where a failure reaches no one.
unsigned no_flush_for(int open_flags) { return (open_flags & O_ACCMODE) == O_RDONLY ? 1 : 0; }

// Room for one reply of `size` bytes (read data, a listing slice). A thread serves one
// request at a time, and the room stays with it: the requests allocate nothing once it
// has grown to the largest (max_read, or the kernel's readdir size).
char* reply_room(size_t size) {
  thread_local std::vector<char> room;
  if (room.size() < size) room.resize(size);
  return room.data();
}

}  // namespace

void FuseFs::op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guard(req, "open", [&] {
    FuseFs& fs = self(req);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) fs.changing();
    // libodafs looks the file up again and revalidates its cached blocks at open
    // (close-to-open). The kernel's copy likewise: its pages are kept (keep_cache) only
    // when the file's times and size are what the last open here found (nobody changed it
    // since; this mount's own writes went through those pages), else dropped; its
    // attributes are invalidated so that the size another client gave the file is
    // fetched (through this open file) before a read stops at an old size. Not when a
    // delegation this mount already held served the open: nobody changed the file since
    // the open that brought it, which invalidated them (no GETATTR round trip then).
    std::string path = fs.inodes_.path(ino);
    auto open = std::make_unique<OpenFile>(fs.client_.open(path, fi->flags & kOpenFlags), ino,
                                           fs.attr_epoch_.load(), caller_of(req));
    const Attr& at_open = open->file.attributes_at_open();
    const InodeTable::PageVersion version{at_open.mtime.tv_sec, at_open.mtime.tv_nsec,
                                          at_open.ctime.tv_sec, at_open.ctime.tv_nsec,
                                          at_open.size};
    fi->direct_io = direct_io_for(fi->flags);
    fi->keep_cache = fs.inodes_.pages_still_valid(ino, version) && !(fi->flags & O_TRUNC) ? 1 : 0;
    if (fs.session_ != nullptr && !open->file.opened_by_delegation()) {
      fuse_lowlevel_notify_inval_inode(fs.session_, ino, -1, 0);
    }
    fi->noflush = no_flush_for(fi->flags);
    fi->fh = fs.adopt(std::move(open));
    fs.opened(ino);
    if (fuse_reply_open(req, fi) != 0) {
      fs.discard_open(fi->fh);
      ODAFS_LOG_DEBUG("odafs-mount: open reply dropped (interrupted)");
    }
  });
}

void FuseFs::op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                       fuse_file_info* fi) {
  guard(req, "create", [&] {
    FuseFs& fs = self(req);
    fs.changing();
    std::string path = fs.inodes_.child_path(parent, name);
    int flags = (fi->flags & (kOpenFlags | O_EXCL)) | O_CREAT;
    File file = fs.client_.open(path, flags, mode & 07777);
    Attr a = file.attributes_at_open();  // CREATE's reply: no GETATTR
    fuse_entry_param e{};
    e.ino = fs.inodes_.add_lookup(parent, name, a.fileid, /*directory=*/false);
    auto open =
        std::make_unique<OpenFile>(std::move(file), e.ino, fs.attr_epoch_.load(), caller_of(req));
    e.attr = fs.to_stat(a);
    e.attr_timeout = fs.options_.attr_timeout;
    e.entry_timeout = fs.options_.entry_timeout;
    fi->keep_cache = 0;
    fi->direct_io = direct_io_for(fi->flags);
    fi->noflush = no_flush_for(fi->flags);
    fi->fh = fs.adopt(std::move(open));
    fs.opened(e.ino);
    if (fuse_reply_create(req, &e, fi) != 0) {
      fs.discard_open(fi->fh);
      fs.inodes_.forget(e.ino, 1);
    }
  });
}

void FuseFs::op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  (void)ino;
  guard(req, "read", [&] {
    File* f = file_of(fi);
    if (f == nullptr) throw Error(EBADF, "odafs-mount: read without an open file");
    char* buf = reply_room(size ? size : 1);
    size_t n = f->pread(buf, size, static_cast<uint64_t>(off));
    fuse_reply_buf(req, buf, n);
  });
}

void FuseFs::op_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                      fuse_file_info* fi) {
  guard(req, "write", [&] {
    OpenFile* of = open_file_of(fi);
    if (of == nullptr) throw Error(EBADF, "odafs-mount: write without an open file");
    of->written.store(true);  // its times change now (its size is the File's to know)
    File* f = &of->file;
    // Opened O_APPEND, the File writes at the server's end of file whatever `off` says
    // (the kernel's idea of the end may be old).
    size_t n = f->pwrite(buf, size, static_cast<uint64_t>(off));
    // An unprivileged write drops setuid/setgid: the server does, at the WRITE, so this
    // one is sent now (File::stat sends writes held behind) rather than held; and the
    // kernel, which left the drop to us (FUSE_CAP_HANDLE_KILLPRIV), is told to forget the
    // mode it cached. Attributes only (offset -1): no page lock is taken, so this is
    // safe inside a write.
    FuseFs& fs = self(req);
    if (fuse_req_ctx(req)->uid != 0 && setid_bits_to_drop(f->attributes_at_open().mode) != 0 &&
        !of->setid_dropped.exchange(true)) {
      if (Result<Attr> sent = f->try_stat(); !sent.ok()) {
        // The write itself was taken: a failure sending it comes back from the next write,
        // fsync or close, as for any write sent behind.
        ODAFS_LOG_DEBUG("odafs-mount: sending a write that drops setuid: %s",
                        sent.status().to_string().c_str());
      }
      if (fs.session_ != nullptr) fuse_lowlevel_notify_inval_inode(fs.session_, ino, -1, 0);
    }
    fuse_reply_write(req, n);
  });
}

void FuseFs::op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  (void)ino;
  guard(req, "flush", [&] {
    // Every close(2): commit the unstable writes (a no-op when there are none), so that
    // close reports a failed write and the data is durable, as NFS does at close; under
    // a write delegation they stay with it (File::flush).
    if (OpenFile* of = open_file_of(fi)) {
      CallerErrorMarks::Held caller(of->error_marks, fuse_req_ctx(req)->pid);
      of->file.flush(caller.mark());
    }
    fuse_reply_err(req, 0);
  });
}

void FuseFs::op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  (void)ino;
  self(req).discard_open(fi->fh);
  fuse_reply_err(req, 0);
}

void FuseFs::discard_open(uint64_t fh) {
  std::unique_ptr<OpenNode> node = release(fh);
  if (node == nullptr || node->kind != OpenNode::Kind::kFile) return;
  auto* of = static_cast<OpenFile*>(node.get());
  const rpc::CallCredential opener(of->opener, machine_);
  const rpc::CallAs as(opener);
  // op_release's and the destructor's: FUSE's release has no error to reply with, and
  // flush already reported and committed; what fails here is logged, never thrown.
  try {
    of->file.close();
  } catch (const std::exception& e) {
    ODAFS_LOG_WARN("odafs-mount: release: %s", e.what());
  }
  released(of->ino);
}

void FuseFs::op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
  (void)ino;
  (void)datasync;
  guard(req, "fsync", [&] {
    if (OpenFile* of = open_file_of(fi)) {
      CallerErrorMarks::Held caller(of->error_marks, fuse_req_ctx(req)->pid);
      of->file.fsync(caller.mark());
    }
    fuse_reply_err(req, 0);
  });
}

void FuseFs::op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guard(req, "opendir", [&] {
    FuseFs& fs = self(req);
    auto dir = std::make_unique<OpenDir>();
    dir->path = fs.inodes_.path(ino);
    // The whole listing now: readdir then serves it in the kernel's slices, and offsets
    // stay valid whatever happens in the directory meanwhile (as on a local file system,
    // names created or removed after opendir may or may not show up).
    fs.fetch_listing(*dir);
    fi->fh = fs.adopt(std::move(dir));
    if (fuse_reply_open(req, fi) != 0) fs.release(fi->fh);
  });
}

void FuseFs::op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        fuse_file_info* fi) {
  guard(req, "readdir", [&] { self(req).list(req, ino, size, off, fi, false); });
}

void FuseFs::op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                            fuse_file_info* fi) {
  guard(req, "readdirplus", [&] { self(req).list(req, ino, size, off, fi, true); });
}

void FuseFs::list(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
                  bool plus) {
  auto* dir = static_cast<OpenDir*>(reinterpret_cast<OpenNode*>(fi->fh));
  if (dir == nullptr || dir->kind != OpenNode::Kind::kDir) {
    throw Error(EBADF, "odafs-mount: readdir without an open directory");
  }
  // rewinddir(3) (offset 0 again) lists afresh, as POSIX asks.
  if (off == 0 && dir->served) fetch_listing(*dir);
  dir->served = true;
  // The listing's attributes stand for now only while nothing this mount did since may
  // have changed them (the kernel's own attribute versions cannot tell: they date from
  // this request, not from the listing), and for what is left of attr_timeout.
  const double age =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - dir->listed_at).count();
  const bool vouch = plus && changes_.load(std::memory_order_relaxed) == dir->changes_at_list &&
                     age < options_.attr_timeout;
  char* buf = reply_room(size);
  size_t used = 0;
  // Every entry a readdirplus reply carries with an inode counts as a lookup of it (the
  // kernel will FORGET it): counted as added, taken back if the reply does not go out.
  // Kept per thread, like the reply's room.
  thread_local std::vector<Ino> looked_up;
  looked_up.clear();
  // Offsets: 1 and 2 after "." and "..", 3 + i after entries[i].
  const size_t total = dir->entries.size() + 2;
  for (size_t i = static_cast<size_t>(off); i < total; ++i) {
    fuse_entry_param e{};
    const char* name;
    const DirEntry* entry = nullptr;
    if (i == 0) {
      name = ".";
      e.attr.st_ino = inodes_.fileid(ino);
      e.attr.st_mode = S_IFDIR;
    } else if (i == 1) {
      name = "..";
      e.attr.st_ino = inodes_.parent_fileid(ino);
      e.attr.st_mode = S_IFDIR;
    } else {
      entry = &dir->entries[i - 2];
      name = entry->name.c_str();
      e.attr.st_ino = entry->fileid;
      e.attr.st_mode = type_bits(entry->type);
    }
    // With no buffer, the calls only size the entry.
    const size_t need = plus ? fuse_add_direntry_plus(req, nullptr, 0, name, nullptr, 0)
                             : fuse_add_direntry(req, nullptr, 0, name, nullptr, 0);
    if (need > size - used) break;
    const auto next = static_cast<off_t>(i + 1);
    if (!plus) {
      fuse_add_direntry(req, buf + used, size - used, name, &e.attr, next);
    } else {
      // Without attributes (".", "..", or none known) the entry goes with inode 0: a plain
      // entry, which the kernel looks up when it needs more.
      if (vouch && entry != nullptr && entry->attr.has_value()) {
        e.ino = inodes_.add_lookup(ino, entry->name, entry->fileid,
                                   entry->attr->type == FileType::kDirectory);
        looked_up.push_back(e.ino);
        e.attr = to_stat(*entry->attr);
        e.attr_timeout = options_.attr_timeout - age;
        e.entry_timeout = std::max(0.0, options_.entry_timeout - age);
      }
      fuse_add_direntry_plus(req, buf + used, size - used, name, &e, next);
    }
    used += need;
  }
  if (fuse_reply_buf(req, buf, used) != 0) {
    for (Ino n : looked_up) inodes_.forget(n, 1);
  }
}

void FuseFs::fetch_listing(OpenDir& dir) {
  dir.changes_at_list = changes_.load(std::memory_order_relaxed);
  dir.listed_at = std::chrono::steady_clock::now();
  dir.entries = client_.readdir(dir.path, options_.readdirplus);
}

void FuseFs::op_releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  (void)ino;
  self(req).release(fi->fh);
  fuse_reply_err(req, 0);
}

void FuseFs::op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
  (void)ino;
  (void)datasync;
  (void)fi;
  // Directory operations are synchronous on the server (it renames, creates and removes
  // as they arrive); there is nothing to commit.
  fuse_reply_err(req, 0);
}

}  // namespace odafs::mount

// ClientImpl's opens: from a delegation this mount holds (no call), by OPEN or CREATE,
// the caller's permission under a per-call credential, and the File handed out
// (close-to-open revalidation, O_TRUNC).
#include <sys/stat.h>

#include <optional>

#include "client/call_util.h"
#include "client/client.h"
#include "client/client_cache.h"
#include "client/client_impl.h"
#include "client/dir_cache.h"
#include "client/mount_state.h"
#include "client/shared_file.h"
#include "client/url.h"
#include "rpc/call_credential.h"

namespace odafs {

File ClientImpl::open(const std::string& path, int flags, mode_t mode) {
  return or_throw(try_open(path, flags, mode));
}

Result<File> ClientImpl::try_open(const std::string& path, int flags, mode_t mode) {
  return again_after_restart([&]() -> Result<File> {
    Handle fh;
    Attr attr;
    bool created = false;
    bool by_delegation = false;
    // O_TRUNC needs write permission whatever the access mode, and truncates an O_RDONLY
    // open too (as Linux's open(2)): checked before anything is discarded.
    const int access =
        (flags & O_TRUNC) && (flags & O_ACCMODE) == O_RDONLY ? O_RDWR : flags & O_ACCMODE;
    if (flags & O_CREAT) {
      ODAFS_ASSIGN_OR_RETURN(auto parent, resolve_parent(path));
      const Handle& dir = parent.first;
      const std::string& name = parent.second;
      // Answered as OPEN: a file this client creates comes with a delegation, a write one
      // when opened to write (docs/protocol.md, "Open delegations").
      Result<std::pair<Handle, Attr>> made =
          with_mount(wire::kIdempotentProc<ODAFSPROC_CREATE>,
                     [&](const MountState& m) -> Result<std::pair<Handle, Attr>> {
                       const create_args args = create_call_args(dir, name, mode, flags, access);
                       open_res res{};
                       ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_CREATE>(*m.channel, args, &res));
                       return opened(m, dir, name, access, res, "create " + path);
                     });
      if (made.ok()) {
        std::tie(fh, attr) = *made;
        created = true;
      } else if (made.errno_value() != EEXIST || (flags & O_EXCL)) {
        // EEXIST without O_EXCL: a symlink at the name, which POSIX open(O_CREAT) follows.
        return std::move(made).status();
      }
    }
    if (!created) {
      ODAFS_ASSIGN_OR_RETURN(std::tie(fh, attr), open_existing(path, access, &by_delegation));
      if (attr.type == FileType::kRegular) {
        ODAFS_RETURN_IF_ERROR(check_access(fh, attr, path, access));
      }
    }
    ODAFS_ASSIGN_OR_RETURN(std::shared_ptr<const MountState> m, mount_state());
    return file_at_open(m, fh, attr, path, flags, access, by_delegation);
  });
}

Result<File> ClientImpl::file_at_open(const std::shared_ptr<const MountState>& m, const Handle& fh,
                                      Attr attr, const std::string& path, int flags, int access,
                                      bool by_delegation) {
  ClientCache& cache = *m->cache;
  cache.revalidate(cache_key(fh), attr.mtime, attr.ctime, attr.size);  // close-to-open
  if (attr.type == FileType::kDirectory && access != O_RDONLY) return Status(EISDIR, path);
  if ((flags & O_DIRECTORY) && attr.type != FileType::kDirectory) {
    return Status(ENOTDIR, path);
  }
  if ((flags & O_TRUNC) && access != O_RDONLY && attr.type == FileType::kRegular && attr.size) {
    ODAFS_ASSIGN_OR_RETURN(attr, setattr_size(fh, 0));  // the times change too
    cache.forget_file_data(cache_key(fh));
  }
  if ((flags & O_TRUNC) && access != O_RDONLY) attr.size = 0;
  File file(this, fh, attr, m->limits.write_verifier, path, flags);
  file.opened_by_delegation_ = by_delegation;
  return file;
}

bool ClientImpl::delegated(const MountState& m, const Handle& dir, std::string_view name,
                           Handle* fh, Attr* attr, bool* write) {
  std::optional<Delegations::Held> held = m.delegations->find(dir, name);
  if (!held) return false;
  // The sole writer's writes behind (not sent) may reach past what the entry knows.
  if (OpenFiles::Ref f = held->write ? open_files_.find(cache_key(held->fh)) : nullptr) {
    held->attr.size = std::max(held->attr.size, f->size.load(std::memory_order_relaxed));
  }
  *fh = held->fh;
  *attr = held->attr;
  *write = held->write;
  return true;
}

Result<std::pair<Handle, Attr>> ClientImpl::open_existing(const std::string& path, int access,
                                                          bool* by_delegation) {
  if (split_path(path).empty()) return resolve(path, true);  // the mount root
  ODAFS_ASSIGN_OR_RETURN(auto parent, resolve_parent(path));
  const Handle& dir = parent.first;
  const std::string& name = parent.second;
  ODAFS_ASSIGN_OR_RETURN(std::shared_ptr<const MountState> current, mount_state());
  // A read delegation serves opens for reading, a write one every open.
  Handle fh;
  Attr attr;
  bool write = false;
  if (delegated(*current, dir, name, &fh, &attr, &write) && (access == O_RDONLY || write)) {
    stats_.delegated_opens.fetch_add(1, std::memory_order_relaxed);
    *by_delegation = true;
    return std::make_pair(fh, attr);
  }
  Result<std::pair<Handle, Attr>> found =
      with_mount(wire::kIdempotentProc<ODAFSPROC_OPEN>,
                 [&](const MountState& m) -> Result<std::pair<Handle, Attr>> {
                   open_args args{};
                   put_fh(args.dir, dir);
                   args.name = const_cast<char*>(name.data());
                   args.access = open_access(access);
                   open_res res{};
                   ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_OPEN>(*m.channel, args, &res));
                   return opened(m, dir, name, access, res, "open " + path);
                 });
  if (found.errno_value() == ESTALE) {
    // A directory handle from the DirCache may be stale (removed, or a server restart):
    // the plain walk starts over without it.
    current->dirs->clear();
    return resolve(path, true);
  }
  if (!found.ok() || found->second.type != FileType::kSymlink) return found;
  return resolve(path, true);
}

Status ClientImpl::check_access(const Handle& fh, const Attr& attr, const std::string& path,
                                int access) {
  const rpc::CallCredential* as = rpc::CallAs::current();
  if (as == nullptr) return Status();  // one caller: what this client caches, it fetched
  const int want = (access != O_WRONLY ? R_OK : 0) | (access != O_RDONLY ? W_OK : 0);
  // Attributes that allow it settle it: a server acting as the caller decides by the same
  // rule on the same bits (they are current: from OPEN, or a delegation not recalled).
  if (rpc::caller_permits(as->id(), attr.mode, attr.uid, attr.gid, false, want)) return Status();
  // Otherwise the server decides (ACCESS): it refuses when it acts as its callers, and
  // allows when it acts as itself for everyone.
  ODAFS_ASSIGN_OR_RETURN(const int granted, access_handle(fh, want));
  if (granted != want) return Status(EACCES, "open " + path);
  return Status();
}

Result<int> ClientImpl::access_handle(const Handle& fh, int want) {
  return with_channel(
      wire::kIdempotentProc<ODAFSPROC_ACCESS>, [&](rpc::Channel& ch) -> Result<int> {
        access_args args{};
        put_fh(args.fh, fh);
        args.want =
            static_cast<u_int>(want) & (ODAFS_ACCESS_READ | ODAFS_ACCESS_WRITE | ODAFS_ACCESS_EXEC);
        access_res res{};
        ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_ACCESS>(ch, args, &res));
        return granted_of(res, static_cast<int>(args.want));
      });
}

Status ClientImpl::forget_delegation(const Handle& fh) {
  // A SETATTR of times sent before the writes gathered behind would be undone by their
  // mtime (cp -a sets times after writing): they go first.
  ODAFS_RETURN_IF_ERROR(flush_writes_behind(fh));
  ODAFS_ASSIGN_OR_RETURN(auto m, mount_state());
  m->delegations->forget_file(fh);
  return Status();
}

}  // namespace odafs

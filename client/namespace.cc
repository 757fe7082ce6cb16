// ClientImpl: path resolution and the namespace operations (stat, mkdir, rename,
// readdir...). Opening a file is in open_path.cc.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
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

Result<std::pair<Handle, Attr>> ClientImpl::resolve(const std::string& path, bool follow_last,
                                                    bool for_parent) {
  // A server restart makes every handle stale, the mount root's too. The client re-mounts
  // on its next call, so a walk that started before it meets ESTALE from an old handle:
  // it then starts over, once, from the new root. A directory handle from the DirCache
  // may be stale too (the directory removed by another client): start over without it.
  ODAFS_ASSIGN_OR_RETURN(const std::shared_ptr<const MountState> m, mount_state());  // keeps dirs
  const Handle start = m->root;
  DirCache* dirs = m->dirs.get();
  bool used_cache = false;
  Result<std::pair<Handle, Attr>> found =
      walk(path, follow_last, start, for_parent, dirs, &used_cache);
  if (found.errno_value() != ESTALE || (root() == start && !used_cache)) return found;
  dirs->clear();
  return walk(path, follow_last, root(), for_parent, nullptr, nullptr);
}

Result<std::pair<Handle, Attr>> ClientImpl::walk(const std::string& path, bool follow_last,
                                                 const Handle& start, bool for_parent,
                                                 DirCache* dirs, bool* used_cache) {
  std::vector<std::string> todo = split_path(path);
  if (todo.empty() && for_parent) {
    // The mount root as the parent of a name in it: a directory, and that is all a parent's
    // caller uses (a GETATTR here cost every create, open and remove in the root a call).
    Attr dir;
    dir.type = FileType::kDirectory;
    return std::make_pair(start, dir);
  }
  // Directories on the way come from the DirCache while it knows them: every component
  // but the last, and the last too when the caller wants it only as a parent directory.
  const size_t cacheable = for_parent ? todo.size() : (todo.empty() ? 0 : todo.size() - 1);
  Handle cur = start;
  std::optional<Attr> attr;
  std::string prefix;  // the literal components walked so far; cleared by a symlink
  size_t walked = 0;
  bool literal = dirs != nullptr;
  if (literal && cacheable > 0) {
    // The deepest directory on the way the cache knows, longest prefix first: one lookup
    // when the parent is known (each costs a hash of its prefix, so going from the root
    // down cost a path 1,500 deep over a million bytes hashed per call).
    for (size_t i = 0; i < cacheable; ++i) {
      if (i != 0) prefix += '/';
      prefix += todo[i];
    }
    size_t len = prefix.size();
    for (size_t n = cacheable; n > 0; --n) {
      if (std::optional<Handle> h = dirs->find(std::string_view(prefix).substr(0, len))) {
        cur = *h;
        walked = n;
        *used_cache = true;
        attr = Attr{};
        attr->type = FileType::kDirectory;  // a parent's handle and type are all callers use
        break;
      }
      len -= todo[n - 1].size() + (n > 1 ? 1 : 0);
    }
    prefix.resize(walked == 0 ? 0 : len);
  }
  todo.erase(todo.begin(), todo.begin() + static_cast<ptrdiff_t>(walked));
  std::reverse(todo.begin(), todo.end());  // a stack: back() is the next component
  int hops = 0;
  while (!todo.empty()) {
    std::string name = std::move(todo.back());
    todo.pop_back();
    ODAFS_ASSIGN_OR_RETURN(auto found, try_lookup(cur, name));
    const Handle& h = found.first;
    const Attr& a = found.second;
    if (a.type == FileType::kSymlink && (!todo.empty() || follow_last)) {
      if (++hops > kMaxSymlinkHops) return Status(ELOOP, path);
      ODAFS_ASSIGN_OR_RETURN(std::string target, readlink_handle(h));
      if (push_link_target(target, &todo)) cur = root();
      attr.reset();
      literal = false;  // the path no longer names what it walks
      continue;
    }
    if (literal && a.type == FileType::kDirectory && ++walked <= cacheable) {
      if (!prefix.empty()) prefix += '/';
      prefix += name;
      dirs->insert(prefix, h);
    }
    cur = h;
    attr = a;
  }
  if (!attr) {
    ODAFS_ASSIGN_OR_RETURN(attr, try_getattr(cur));
  }
  return std::make_pair(cur, *attr);
}

Result<std::pair<Handle, std::string>> ClientImpl::resolve_parent(const std::string& path) {
  std::vector<std::string> parts = split_path(path);
  if (parts.empty()) return Status(EINVAL, "the mount root has no parent: " + path);
  std::string name = parts.back();
  parts.pop_back();
  std::string dir_path;
  for (const std::string& p : parts) dir_path += "/" + p;
  ODAFS_ASSIGN_OR_RETURN(auto dir, resolve(dir_path, true, /*for_parent=*/true));
  if (dir.second.type != FileType::kDirectory) return Status(ENOTDIR, dir_path);
  ODAFS_RETURN_IF_ERROR(check_name(name));
  return std::make_pair(dir.first, name);
}

Result<std::string> ClientImpl::readlink_handle(const Handle& fh) {
  return with_channel(wire::kIdempotentProc<ODAFSPROC_READLINK>,
                      [&](rpc::Channel& ch) -> Result<std::string> {
                        getattr_args args{};
                        put_fh(args.fh, fh);
                        readlink_res res{};
                        XdrFree<readlink_res> guard{to_xdrproc(xdr_readlink_res), &res};
                        ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_READLINK>(ch, args, &res));
                        ODAFS_RETURN_IF_ERROR(status_of(res.status, "readlink"));
                        return std::string(res.readlink_res_u.target);
                      });
}

Attr ClientImpl::stat(const std::string& path) {
  return or_throw(again_after_restart([&]() -> Result<Attr> {
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(path, true));
    return with_writes_behind(found.first, found.second);
  }));
}

Attr ClientImpl::lstat(const std::string& path) { return or_throw(try_lstat(path)); }

Result<Attr> ClientImpl::try_lstat(const std::string& path) {
  return again_after_restart([&]() -> Result<Attr> {
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(path, false));
    return with_writes_behind(found.first, found.second);
  });
}

void ClientImpl::mkdir(const std::string& path, mode_t mode) {
  or_throw(again_after_restart([&]() -> Status {
    ODAFS_ASSIGN_OR_RETURN(auto parent, resolve_parent(path));
    const Handle& dir = parent.first;
    const std::string& name = parent.second;
    return with_channel(wire::kIdempotentProc<ODAFSPROC_MKDIR>, [&](rpc::Channel& ch) -> Status {
      mkdir_args args{};
      put_fh(args.dir, dir);
      args.name = const_cast<char*>(name.data());
      args.mode = mode & 07777;
      dirop_res res{};
      ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_MKDIR>(ch, args, &res));
      return status_of(res.status, "mkdir " + path);
    });
  }));
}

template <uint32_t P>
Status ClientImpl::remove_name(const std::string& path, const char* what) {
  return again_after_restart([&]() -> Status {
    ODAFS_ASSIGN_OR_RETURN(auto parent, resolve_parent(path));
    const Handle& dir = parent.first;
    const std::string& name = parent.second;
    // Held, not just dereferenced: a re-mount meanwhile frees the mount it replaced.
    ODAFS_ASSIGN_OR_RETURN(const std::shared_ptr<const MountState> m, mount_state());
    Delegations& delegations = *m->delegations;
    std::optional<Delegations::Return> held = delegations.take_for_remove(dir, name);
    Status removed = with_channel(wire::kIdempotentProc<P>, [&](rpc::Channel& ch) -> Status {
      stat_res res{};
      ODAFS_RETURN_IF_ERROR(call<P>(ch, dirop_args(dir, name), &res));
      return status_of(res.status, std::string(what) + " " + path);
    });
    // Still there after a failure: its bytes go back.
    if (held) delegations.removed(*held, removed.ok());
    return removed;
  });
}

void ClientImpl::rmdir(const std::string& path) {
  or_throw(mount_state())->dirs->clear();  // the path may be cached, or a path through it
  or_throw(remove_name<ODAFSPROC_RMDIR>(path, "rmdir"));
}
void ClientImpl::unlink(const std::string& path) {
  or_throw(remove_name<ODAFSPROC_REMOVE>(path, "unlink"));
}

void ClientImpl::rename(const std::string& from, const std::string& to) {
  or_throw(again_after_restart([&]() -> Status {
    ODAFS_ASSIGN_OR_RETURN(auto from_parent, resolve_parent(from));
    const Handle& from_dir = from_parent.first;
    const std::string& from_name = from_parent.second;
    // A renamed directory changes every cached path through either name.
    struct ClearAfter {
      DirCache& dirs;
      ~ClearAfter() { dirs.clear(); }
    };
    ODAFS_ASSIGN_OR_RETURN(const std::shared_ptr<const MountState> m, mount_state());  // held
    ClearAfter clear_after{*m->dirs};
    ODAFS_ASSIGN_OR_RETURN(auto to_parent, resolve_parent(to));
    const Handle& to_dir = to_parent.first;
    const std::string& to_name = to_parent.second;
    Delegations& delegations = *m->delegations;
    delegations.forget_name(from_dir, from_name);
    delegations.forget_name(to_dir, to_name);
    return with_channel(wire::kIdempotentProc<ODAFSPROC_RENAME>, [&](rpc::Channel& ch) -> Status {
      rename_args args{};
      put_fh(args.from_dir, from_dir);
      args.from_name = const_cast<char*>(from_name.data());
      put_fh(args.to_dir, to_dir);
      args.to_name = const_cast<char*>(to_name.data());
      stat_res res{};
      ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_RENAME>(ch, args, &res));
      return status_of(res.status, "rename " + from + " to " + to);
    });
  }));
}

std::vector<DirEntry> ClientImpl::readdir(const std::string& path, bool attributes) {
  return or_throw(again_after_restart([&]() -> Result<std::vector<DirEntry>> {
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(path, true));
    const Handle& dir = found.first;
    if (found.second.type != FileType::kDirectory) return Status(ENOTDIR, path);
    std::vector<DirEntry> out;
    uint64_t cookie = 0;
    for (bool eof = false; !eof;) {
      ODAFS_RETURN_IF_ERROR(
          with_channel(wire::kIdempotentProc<ODAFSPROC_READDIR>, [&](rpc::Channel& ch) -> Status {
            readdir_args args{};
            put_fh(args.dir, dir);
            args.cookie = cookie;
            args.max_bytes = 64 * 1024;
            args.plus = attributes;
            readdir_res res{};
            XdrFree<readdir_res> guard{to_xdrproc(xdr_readdir_res), &res};
            ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_READDIR>(ch, args, &res));
            ODAFS_RETURN_IF_ERROR(status_of(res.status, "readdir " + path));
            const readdir_ok& ok = res.readdir_res_u.ok;
            for (u_int i = 0; i < ok.entries.entries_len; ++i) {
              const odafs_dirent& e = ok.entries.entries_val[i];
              DirEntry& entry = out.emplace_back(DirEntry{e.name, file_type(e.type), e.fileid, {}});
              if (attributes && e.attr.present) entry.attr = to_attr(e.attr.odafs_post_attr_u.attr);
              cookie = e.cookie;
            }
            eof = ok.eof || ok.entries.entries_len == 0;
            return Status();
          }));
    }
    if (attributes) {
      // What this client holds of a regular file may be newer than the server's copy: under
      // a delegation, the delegation's view (as lstat gives it); while any file is open
      // here, writes behind may be unsent, so no regular file's attributes at all.
      ODAFS_ASSIGN_OR_RETURN(std::shared_ptr<const MountState> current, mount_state());
      const bool files_open = open_files_.files() != 0;
      for (DirEntry& e : out) {
        if (e.type != FileType::kRegular) continue;
        Handle fh;
        Attr held;
        bool write = false;
        if (delegated(*current, dir, e.name, &fh, &held, &write)) {
          e.attr = held;
        } else if (files_open) {
          e.attr.reset();
        }
      }
    }
    return out;
  }));
}

void ClientImpl::truncate(const std::string& path, uint64_t size) {
  or_throw(again_after_restart([&]() -> Status {
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(path, true));
    const Handle& fh = found.first;
    if (found.second.type == FileType::kDirectory) return Status(EISDIR, path);
    ODAFS_RETURN_IF_ERROR(setattr_size(fh, size));
    forget_data(cache_key(fh), 0, UINT64_MAX);
    // This client's opens of the file know its size: it is this one now.
    if (OpenFiles::Ref f = open_files_.find(cache_key(fh))) {
      f->size.store(size, std::memory_order_relaxed);
    }
    return Status();
  }));
}

void ClientImpl::chmod(const std::string& path, mode_t mode) { or_throw(try_chmod(path, mode)); }

Status ClientImpl::try_chmod(const std::string& path, mode_t mode) {
  return again_after_restart([&]() -> Status {
    setattr_args args{};
    args.mode.set = TRUE;
    args.mode.odafs_set_u32_u.value = mode & 07777;
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(path, true));
    return setattr(found.first, args, "chmod " + path).status();
  });
}

void ClientImpl::chown(const std::string& path, uid_t uid, gid_t gid) {
  or_throw(again_after_restart([&]() -> Status {
    setattr_args args{};
    args.uid.set = uid != static_cast<uid_t>(-1);
    args.uid.odafs_set_u32_u.value = uid;
    args.gid.set = gid != static_cast<gid_t>(-1);
    args.gid.odafs_set_u32_u.value = gid;
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(path, false));
    return setattr(found.first, args, "chown " + path).status();
  }));
}

int ClientImpl::access(const std::string& path, int want, bool follow_last) {
  return or_throw(try_access(path, want, follow_last));
}

Result<int> ClientImpl::try_access(const std::string& path, int want, bool follow_last) {
  return again_after_restart([&]() -> Result<int> {
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(path, follow_last));
    return access_handle(found.first, want);
  });
}

void ClientImpl::utimens(const std::string& path, const struct timespec times[2],
                         bool follow_last) {
  or_throw(again_after_restart([&]() -> Status {
    setattr_args args{};
    odafs_set_time* out[2] = {&args.atime, &args.mtime};
    for (int i = 0; i < 2; ++i) {
      if (times[i].tv_nsec == UTIME_OMIT) {
        out[i]->how = ODAFS_TIME_DONT_CHANGE;
      } else if (times[i].tv_nsec == UTIME_NOW) {
        out[i]->how = ODAFS_TIME_SERVER;
      } else {
        if (times[i].tv_nsec < 0 || times[i].tv_nsec >= 1000000000L) {
          return Status(EINVAL, "utimens");
        }
        out[i]->how = ODAFS_TIME_CLIENT;
        out[i]->odafs_set_time_u.time.seconds = times[i].tv_sec;
        out[i]->odafs_set_time_u.time.nseconds = static_cast<u_int>(times[i].tv_nsec);
      }
    }
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(path, follow_last));
    return setattr(found.first, args, "utimens " + path).status();
  }));
}

void ClientImpl::symlink(const std::string& target, const std::string& path) {
  or_throw(again_after_restart([&]() -> Status {
    if (target.find('\0') != std::string::npos) {
      return Status(EINVAL, "a link target holding a NUL byte");
    }
    ODAFS_ASSIGN_OR_RETURN(auto parent, resolve_parent(path));
    const Handle& dir = parent.first;
    const std::string& name = parent.second;
    return with_channel(wire::kIdempotentProc<ODAFSPROC_SYMLINK>, [&](rpc::Channel& ch) -> Status {
      symlink_args args{};
      put_fh(args.dir, dir);
      args.name = const_cast<char*>(name.data());
      args.target = const_cast<char*>(target.c_str());
      dirop_res res{};
      ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_SYMLINK>(ch, args, &res));
      return status_of(res.status, "symlink " + path);
    });
  }));
}

Attr ClientImpl::mknod(const std::string& path, mode_t mode, dev_t rdev) {
  const mode_t kind = mode & S_IFMT;
  if (kind != S_IFIFO && kind != S_IFSOCK && kind != S_IFCHR && kind != S_IFBLK) {
    throw Error(EINVAL, "mknod " + path + ": not a FIFO, socket or device");
  }
  const odafs_ftype type = wire_type(mode);  // proto/attr.h: the one mapping
  return or_throw(again_after_restart([&]() -> Result<Attr> {
    ODAFS_ASSIGN_OR_RETURN(auto parent, resolve_parent(path));
    const Handle& dir = parent.first;
    const std::string& name = parent.second;
    return with_channel(wire::kIdempotentProc<ODAFSPROC_MKNOD>,
                        [&](rpc::Channel& ch) -> Result<Attr> {
                          mknod_args args{};
                          put_fh(args.dir, dir);
                          args.name = const_cast<char*>(name.data());
                          args.type = type;
                          args.mode = mode & 07777;
                          args.rdev.major = major(rdev);
                          args.rdev.minor = minor(rdev);
                          dirop_res res{};
                          ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_MKNOD>(ch, args, &res));
                          ODAFS_RETURN_IF_ERROR(status_of(res.status, "mknod " + path));
                          return to_attr(res.dirop_res_u.ok.attr);
                        });
  }));
}

Attr ClientImpl::link(const std::string& existing, const std::string& new_path) {
  return or_throw(again_after_restart([&]() -> Result<Attr> {
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(existing, false));
    const Handle& fh = found.first;
    ODAFS_ASSIGN_OR_RETURN(auto parent, resolve_parent(new_path));
    const Handle& dir = parent.first;
    const std::string& name = parent.second;
    ODAFS_ASSIGN_OR_RETURN(auto m, mount_state());
    m->delegations->forget_file(fh);  // this client changes its attributes
    return with_channel(
        wire::kIdempotentProc<ODAFSPROC_LINK>, [&](rpc::Channel& ch) -> Result<Attr> {
          link_args args{};
          put_fh(args.fh, fh);
          put_fh(args.dir, dir);
          args.name = const_cast<char*>(name.data());
          attr_res res{};
          ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_LINK>(ch, args, &res));
          ODAFS_RETURN_IF_ERROR(status_of(res.status, "link " + existing + " to " + new_path));
          return to_attr(res.attr_res_u.attr);
        });
  }));
}

std::string ClientImpl::readlink(const std::string& path) {
  return or_throw(again_after_restart([&]() -> Result<std::string> {
    ODAFS_ASSIGN_OR_RETURN(auto found, resolve(path, false));
    if (found.second.type != FileType::kSymlink) return Status(EINVAL, path);
    return readlink_handle(found.first);
  }));
}

FsStat ClientImpl::statfs() {
  Handle r = root();
  return or_throw(with_channel(
      wire::kIdempotentProc<ODAFSPROC_FSSTAT>, [&](rpc::Channel& ch) -> Result<FsStat> {
        getattr_args args{};
        put_fh(args.fh, r);
        fsstat_res res{};
        ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_FSSTAT>(ch, args, &res));
        ODAFS_RETURN_IF_ERROR(status_of(res.status, "statfs"));
        const fsstat_ok& ok = res.fsstat_res_u.ok;
        return FsStat{ok.total_bytes, ok.free_bytes, ok.avail_bytes, ok.total_files,
                      ok.free_files,  ok.block_size, ok.max_name};
      }));
}

}  // namespace odafs

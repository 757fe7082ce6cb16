// Client: path resolution and the namespace operations (open, mkdir, rename, readdir...).
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <optional>

#include "client/call_util.h"
#include "client/client.h"
#include "client/client_cache.h"
#include "client/dir_cache.h"
#include "client/mount_state.h"
#include "client/shared_file.h"
#include "client/url.h"
#include "rpc/call_credential.h"

namespace odafs {
namespace {

constexpr int kMaxSymlinkHops = 40;

}  // namespace

std::pair<Handle, Attr> Client::resolve(const std::string& path, bool follow_last,
                                        bool for_parent) {
  // A server restart makes every handle stale, the mount root's too. The client re-mounts
  // on its next call, so a walk that started before it meets ESTALE from an old handle:
  // it then starts over, once, from the new root. A directory handle from the DirCache
  // may be stale too (the directory removed by another client): start over without it.
  const std::shared_ptr<const MountState> m = mount_state();  // keeps dirs alive
  const Handle start = m->root;
  DirCache* dirs = m->dirs.get();
  bool used_cache = false;
  try {
    return walk(path, follow_last, start, for_parent, dirs, &used_cache);
  } catch (const Error& e) {
    if (e.errno_value() != ESTALE || (root() == start && !used_cache)) throw;
    dirs->clear();
  }
  return walk(path, follow_last, root(), for_parent, nullptr, nullptr);
}

std::pair<Handle, Attr> Client::walk(const std::string& path, bool follow_last, const Handle& start,
                                     bool for_parent, DirCache* dirs, bool* used_cache) {
  std::vector<std::string> todo = split_path(path);
  if (todo.empty() && for_parent) {
    // The mount root as the parent of a name in it: a directory, and that is all a parent's
    // caller uses (a GETATTR here cost every create, open and remove in the root a call).
    Attr dir;
    dir.type = FileType::kDirectory;
    return {start, dir};
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
    auto [h, a] = lookup(cur, name);
    if (a.type == FileType::kSymlink && (!todo.empty() || follow_last)) {
      if (++hops > kMaxSymlinkHops) fail(ELOOP, path);
      std::string target = readlink_handle(h);
      std::vector<std::string> more = split_path(target, /*resolve_dotdot=*/false);
      for (auto it = more.rbegin(); it != more.rend(); ++it) todo.push_back(*it);
      if (!target.empty() && target[0] == '/') cur = root();
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
  if (!attr) attr = getattr(cur);
  return {cur, *attr};
}

std::pair<Handle, std::string> Client::resolve_parent(const std::string& path) {
  std::vector<std::string> parts = split_path(path);
  if (parts.empty()) fail(EINVAL, "the mount root has no parent: " + path);
  std::string name = parts.back();
  parts.pop_back();
  std::string dir_path;
  for (const std::string& p : parts) dir_path += "/" + p;
  auto [dir, attr] = resolve(dir_path, true, /*for_parent=*/true);
  if (attr.type != FileType::kDirectory) fail(ENOTDIR, dir_path);
  check_name(name);
  return {dir, name};
}

std::string Client::readlink_handle(const Handle& fh) {
  return with_channel(true, [&](rpc::Channel& ch) {
    getattr_args args{};
    put_fh(args.fh, fh);
    readlink_res res{};
    XdrFree<readlink_res> guard{to_xdrproc(xdr_readlink_res), &res};
    ch.call(ODAFSPROC_READLINK, to_xdrproc(xdr_getattr_args), &args, to_xdrproc(xdr_readlink_res),
            &res);
    check(res.status, "readlink");
    return std::string(res.readlink_res_u.target);
  });
}

namespace {

uint32_t open_access(int access) {
  return access == O_RDONLY ? ODAFS_OPEN_READ : ODAFS_OPEN_READ | ODAFS_OPEN_WRITE;
}

// The file an OPEN or CREATE of `name` in dir answered (checked: throws Error naming
// `what`), its delegation, if granted, recorded.
std::pair<Handle, Attr> opened(const MountState& m, const Handle& dir, std::string_view name,
                               int access, const open_res& res, const std::string& what) {
  check(res.status, what);
  const open_ok& ok = res.open_res_u.ok;
  std::pair<Handle, Attr> out{get_fh(ok.fh), to_attr(ok.attr)};
  if (ok.delegation != 0) {
    m.delegations->insert(dir, name, out.first, out.second, ok.delegation, ok.lease_ms,
                          ok.delegation_kind == ODAFS_DELEG_WRITE, ok.space_limit);
  } else if (access != O_RDONLY) {
    m.delegations->forget_name(dir, name);  // this client is about to write it
  }
  return out;
}

}  // namespace

File Client::open(const std::string& path, int flags, mode_t mode) {
  return again_after_restart([&] {
    Handle fh;
    Attr attr;
    bool created = false;
    // O_TRUNC needs write permission whatever the access mode, and truncates an O_RDONLY
    // open too (as Linux's open(2)): checked before anything is discarded.
    const int access =
        (flags & O_TRUNC) && (flags & O_ACCMODE) == O_RDONLY ? O_RDWR : flags & O_ACCMODE;
    if (flags & O_CREAT) {
      auto [dir, name] = resolve_parent(path);
      try {
        // Answered as OPEN: a file this client creates comes with a delegation, a write one
        // when opened to write (docs/protocol.md, "Open delegations").
        std::tie(fh, attr) = with_mount(false, [&, &dir = dir, &name = name](const MountState& m) {
          create_args args{};
          put_fh(args.dir, dir);
          args.name = name.data();
          args.mode = mode & 07777;
          args.how = (flags & O_EXCL) ? ODAFS_CREATE_EXCLUSIVE : ODAFS_CREATE_UNCHECKED;
          args.access = open_access(access);
          open_res res{};
          m.channel->call(ODAFSPROC_CREATE, to_xdrproc(xdr_create_args), &args,
                          to_xdrproc(xdr_open_res), &res);
          return opened(m, dir, name, access, res, "create " + path);
        });
        created = true;
      } catch (const Error& e) {
        // A symlink at the name: POSIX open(O_CREAT) without O_EXCL follows it.
        if (e.errno_value() != EEXIST || (flags & O_EXCL)) throw;
      }
    }
    if (!created) std::tie(fh, attr) = open_existing(path, access);
    if (!created && attr.type == FileType::kRegular) check_access(fh, attr, path, access);
    const uint64_t key = cache_key(fh);
    std::shared_ptr<const MountState> m = mount_state();
    ClientCache& cache = *m->cache;
    cache.revalidate(key, attr.mtime, attr.ctime, attr.size);  // close-to-open

    if (attr.type == FileType::kDirectory && access != O_RDONLY) fail(EISDIR, path);
    if ((flags & O_DIRECTORY) && attr.type != FileType::kDirectory) fail(ENOTDIR, path);
    if ((flags & O_TRUNC) && access != O_RDONLY && attr.type == FileType::kRegular && attr.size) {
      attr = setattr_size(fh, 0);  // the times change too: File::attributes_at_open
      cache.forget_file_data(key);
    }
    if ((flags & O_TRUNC) && access != O_RDONLY) attr.size = 0;
    return File(this, fh, attr, m->limits.write_verifier, path, flags);
  });
}

bool Client::delegated(const MountState& m, const Handle& dir, std::string_view name, Handle* fh,
                       Attr* attr, bool* write) {
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

std::pair<Handle, Attr> Client::open_existing(const std::string& path, int access) {
  if (split_path(path).empty()) return resolve(path, true);  // the mount root
  auto [dir, name] = resolve_parent(path);
  std::shared_ptr<const MountState> current = mount_state();
  // A read delegation serves opens for reading, a write one every open.
  Handle fh;
  Attr attr;
  bool write = false;
  if (delegated(*current, dir, name, &fh, &attr, &write) && (access == O_RDONLY || write)) {
    stats_.delegated_opens.fetch_add(1, std::memory_order_relaxed);
    return {fh, attr};
  }
  std::optional<std::pair<Handle, Attr>> found;
  try {
    found = with_mount(true, [&, &dir = dir, &name = name](const MountState& m) {
      open_args args{};
      put_fh(args.dir, dir);
      args.name = name.data();
      args.access = open_access(access);
      open_res res{};
      m.channel->call(ODAFSPROC_OPEN, to_xdrproc(xdr_open_args), &args, to_xdrproc(xdr_open_res),
                      &res);
      return opened(m, dir, name, access, res, "open " + path);
    });
  } catch (const Error& e) {
    // A directory handle from the DirCache may be stale (removed, or a server restart):
    // the plain walk below starts over without it.
    if (e.errno_value() != ESTALE) throw;
    current->dirs->clear();
  }
  if (!found || found->second.type == FileType::kSymlink) return resolve(path, true);
  return *found;
}

void Client::check_access(const Handle& fh, const Attr& attr, const std::string& path, int access) {
  const rpc::CallCredential* as = rpc::CallAs::current();
  if (as == nullptr) return;  // one caller: what this client caches, it fetched itself
  const int want = (access != O_WRONLY ? R_OK : 0) | (access != O_RDONLY ? W_OK : 0);
  // Attributes that allow it settle it: a server acting as the caller decides by the same
  // rule on the same bits (they are current: from OPEN, or a delegation not recalled).
  if (rpc::caller_permits(as->id(), attr.mode, attr.uid, attr.gid, false, want)) return;
  // Otherwise the server decides (ACCESS): it refuses when it acts as its callers, and
  // allows when it acts as itself for everyone.
  if (access_handle(fh, want) != want) fail(EACCES, "open " + path);
}

int Client::access_handle(const Handle& fh, int want) {
  return with_channel(true, [&](rpc::Channel& ch) {
    access_args args{};
    put_fh(args.fh, fh);
    args.want =
        static_cast<u_int>(want) & (ODAFS_ACCESS_READ | ODAFS_ACCESS_WRITE | ODAFS_ACCESS_EXEC);
    access_res res{};
    ch.call(ODAFSPROC_ACCESS, to_xdrproc(xdr_access_args), &args, to_xdrproc(xdr_access_res), &res);
    check(res.status, "access");
    return static_cast<int>(res.access_res_u.granted & args.want);
  });
}

void Client::forget_delegation(const Handle& fh) {
  // A SETATTR of times sent before the writes gathered behind would be undone by their
  // mtime (cp -a sets times after writing): they go first.
  flush_writes_behind(fh);
  mount_state()->delegations->forget_file(fh);
}

Attr Client::stat(const std::string& path) {
  return again_after_restart([&] {
    auto [fh, attr] = resolve(path, true);
    return with_writes_behind(fh, attr);
  });
}
Attr Client::lstat(const std::string& path) {
  return again_after_restart([&] {
    auto [fh, attr] = resolve(path, false);
    return with_writes_behind(fh, attr);
  });
}

void Client::mkdir(const std::string& path, mode_t mode) {
  again_after_restart([&] {
    auto [dir, name] = resolve_parent(path);
    with_channel(false, [&, &dir = dir, &name = name](rpc::Channel& ch) {
      mkdir_args args{};
      put_fh(args.dir, dir);
      args.name = name.data();
      args.mode = mode & 07777;
      dirop_res res{};
      ch.call(ODAFSPROC_MKDIR, to_xdrproc(xdr_mkdir_args), &args, to_xdrproc(xdr_dirop_res), &res);
      check(res.status, "mkdir " + path);
    });
  });
}

void Client::remove_name(const std::string& path, uint32_t proc, const char* what) {
  again_after_restart([&] {
    auto [dir, name] = resolve_parent(path);
    // Held, not just dereferenced: a re-mount meanwhile frees the mount it replaced.
    const std::shared_ptr<const MountState> m = mount_state();
    Delegations& delegations = *m->delegations;
    std::optional<Delegations::Return> held = delegations.take_for_remove(dir, name);
    try {
      with_channel(false, [&, &dir = dir, &name = name](rpc::Channel& ch) {
        diropargs args{};
        put_fh(args.dir, dir);
        args.name = name.data();
        stat_res res{};
        ch.call(proc, to_xdrproc(xdr_diropargs), &args, to_xdrproc(xdr_stat_res), &res);
        check(res.status, std::string(what) + " " + path);
      });
    } catch (...) {
      if (held) delegations.removed(*held, false);  // still there: its bytes go back
      throw;
    }
    if (held) delegations.removed(*held, true);
  });
}

void Client::rmdir(const std::string& path) {
  mount_state()->dirs->clear();  // the path may be cached, or a path through it
  remove_name(path, ODAFSPROC_RMDIR, "rmdir");
}
void Client::unlink(const std::string& path) { remove_name(path, ODAFSPROC_REMOVE, "unlink"); }

void Client::rename(const std::string& from, const std::string& to) {
  again_after_restart([&] {
    auto [from_dir, from_name] = resolve_parent(from);
    // A renamed directory changes every cached path through either name.
    struct ClearAfter {
      DirCache& dirs;
      ~ClearAfter() { dirs.clear(); }
    };
    const std::shared_ptr<const MountState> m = mount_state();  // held: see remove_name
    ClearAfter clear_after{*m->dirs};
    auto [to_dir, to_name] = resolve_parent(to);
    Delegations& delegations = *m->delegations;
    delegations.forget_name(from_dir, from_name);
    delegations.forget_name(to_dir, to_name);
    with_channel(false, [&, &from_dir = from_dir, &from_name = from_name, &to_dir = to_dir,
                         &to_name = to_name](rpc::Channel& ch) {
      rename_args args{};
      put_fh(args.from_dir, from_dir);
      args.from_name = from_name.data();
      put_fh(args.to_dir, to_dir);
      args.to_name = to_name.data();
      stat_res res{};
      ch.call(ODAFSPROC_RENAME, to_xdrproc(xdr_rename_args), &args, to_xdrproc(xdr_stat_res), &res);
      check(res.status, "rename " + from + " to " + to);
    });
  });
}

std::vector<DirEntry> Client::readdir(const std::string& path, bool attributes) {
  return again_after_restart([&] {
    auto [dir, attr] = resolve(path, true);
    if (attr.type != FileType::kDirectory) fail(ENOTDIR, path);
    std::vector<DirEntry> out;
    uint64_t cookie = 0;
    for (bool eof = false; !eof;) {
      with_channel(true, [&, &dir = dir](rpc::Channel& ch) {
        readdir_args args{};
        put_fh(args.dir, dir);
        args.cookie = cookie;
        args.max_bytes = 64 * 1024;
        args.plus = attributes;
        readdir_res res{};
        XdrFree<readdir_res> guard{to_xdrproc(xdr_readdir_res), &res};
        ch.call(ODAFSPROC_READDIR, to_xdrproc(xdr_readdir_args), &args, to_xdrproc(xdr_readdir_res),
                &res);
        check(res.status, "readdir " + path);
        const readdir_ok& ok = res.readdir_res_u.ok;
        for (u_int i = 0; i < ok.entries.entries_len; ++i) {
          const odafs_dirent& e = ok.entries.entries_val[i];
          DirEntry& entry = out.emplace_back(DirEntry{e.name, file_type(e.type), e.fileid, {}});
          if (attributes && e.attr.present) entry.attr = to_attr(e.attr.odafs_post_attr_u.attr);
          cookie = e.cookie;
        }
        eof = ok.eof || ok.entries.entries_len == 0;
      });
    }
    if (attributes) {
      // What this client holds of a regular file may be newer than the server's copy: under
      // a delegation, the delegation's view (as lstat gives it); while any file is open
      // here, writes behind may be unsent, so no regular file's attributes at all.
      std::shared_ptr<const MountState> current = mount_state();
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
  });
}

void Client::truncate(const std::string& path, uint64_t size) {
  again_after_restart([&] {
    auto [fh, attr] = resolve(path, true);
    if (attr.type == FileType::kDirectory) fail(EISDIR, path);
    setattr_size(fh, size);
    forget_data(cache_key(fh), 0, UINT64_MAX);
    // This client's opens of the file know its size: it is this one now.
    if (OpenFiles::Ref f = open_files_.find(cache_key(fh))) {
      f->size.store(size, std::memory_order_relaxed);
    }
  });
}

void Client::chmod(const std::string& path, mode_t mode) {
  again_after_restart([&] {
    setattr_args args{};
    args.mode.set = TRUE;
    args.mode.odafs_set_u32_u.value = mode & 07777;
    setattr(resolve(path, true).first, args, "chmod " + path);
  });
}

void Client::chown(const std::string& path, uid_t uid, gid_t gid) {
  again_after_restart([&] {
    setattr_args args{};
    args.uid.set = uid != static_cast<uid_t>(-1);
    args.uid.odafs_set_u32_u.value = uid;
    args.gid.set = gid != static_cast<gid_t>(-1);
    args.gid.odafs_set_u32_u.value = gid;
    setattr(resolve(path, false).first, args, "chown " + path);
  });
}

int Client::access(const std::string& path, int want, bool follow_last) {
  return again_after_restart([&] { return access_handle(resolve(path, follow_last).first, want); });
}

void Client::utimens(const std::string& path, const struct timespec times[2], bool follow_last) {
  again_after_restart([&] {
    setattr_args args{};
    odafs_set_time* out[2] = {&args.atime, &args.mtime};
    for (int i = 0; i < 2; ++i) {
      if (times[i].tv_nsec == UTIME_OMIT) {
        out[i]->how = ODAFS_TIME_DONT_CHANGE;
      } else if (times[i].tv_nsec == UTIME_NOW) {
        out[i]->how = ODAFS_TIME_SERVER;
      } else {
        if (times[i].tv_nsec < 0 || times[i].tv_nsec >= 1000000000L) fail(EINVAL, "utimens");
        out[i]->how = ODAFS_TIME_CLIENT;
        out[i]->odafs_set_time_u.time.seconds = times[i].tv_sec;
        out[i]->odafs_set_time_u.time.nseconds = static_cast<u_int>(times[i].tv_nsec);
      }
    }
    setattr(resolve(path, follow_last).first, args, "utimens " + path);
  });
}

void Client::symlink(const std::string& target, const std::string& path) {
  again_after_restart([&] {
    if (target.find('\0') != std::string::npos) fail(EINVAL, "a link target holding a NUL byte");
    auto [dir, name] = resolve_parent(path);
    with_channel(false, [&, &dir = dir, &name = name](rpc::Channel& ch) {
      symlink_args args{};
      put_fh(args.dir, dir);
      args.name = name.data();
      args.target = const_cast<char*>(target.c_str());
      dirop_res res{};
      ch.call(ODAFSPROC_SYMLINK, to_xdrproc(xdr_symlink_args), &args, to_xdrproc(xdr_dirop_res),
              &res);
      check(res.status, "symlink " + path);
    });
  });
}

Attr Client::mknod(const std::string& path, mode_t mode, dev_t rdev) {
  const mode_t kind = mode & S_IFMT;
  if (kind != S_IFIFO && kind != S_IFSOCK && kind != S_IFCHR && kind != S_IFBLK) {
    fail(EINVAL, "mknod " + path + ": not a FIFO, socket or device");
  }
  const odafs_ftype type = wire_type(mode);  // proto/attr.h: the one mapping
  return again_after_restart([&] {
    auto [dir, name] = resolve_parent(path);
    return with_channel(false, [&, &dir = dir, &name = name](rpc::Channel& ch) {
      mknod_args args{};
      put_fh(args.dir, dir);
      args.name = name.data();
      args.type = type;
      args.mode = mode & 07777;
      args.rdev.major = major(rdev);
      args.rdev.minor = minor(rdev);
      dirop_res res{};
      ch.call(ODAFSPROC_MKNOD, to_xdrproc(xdr_mknod_args), &args, to_xdrproc(xdr_dirop_res), &res);
      check(res.status, "mknod " + path);
      return to_attr(res.dirop_res_u.ok.attr);
    });
  });
}

Attr Client::link(const std::string& existing, const std::string& new_path) {
  return again_after_restart([&] {
    auto [fh, attr] = resolve(existing, false);
    auto [dir, name] = resolve_parent(new_path);
    mount_state()->delegations->forget_file(fh);  // this client changes its attributes
    return with_channel(false, [&, &fh = fh, &dir = dir, &name = name](rpc::Channel& ch) {
      link_args args{};
      put_fh(args.fh, fh);
      put_fh(args.dir, dir);
      args.name = name.data();
      attr_res res{};
      ch.call(ODAFSPROC_LINK, to_xdrproc(xdr_link_args), &args, to_xdrproc(xdr_attr_res), &res);
      check(res.status, "link " + existing + " to " + new_path);
      return to_attr(res.attr_res_u.attr);
    });
  });
}

std::string Client::readlink(const std::string& path) {
  return again_after_restart([&] {
    auto [fh, attr] = resolve(path, false);
    if (attr.type != FileType::kSymlink) fail(EINVAL, path);
    return readlink_handle(fh);
  });
}

FsStat Client::statfs() {
  Handle r = root();
  return with_channel(true, [&](rpc::Channel& ch) {
    getattr_args args{};
    put_fh(args.fh, r);
    fsstat_res res{};
    ch.call(ODAFSPROC_FSSTAT, to_xdrproc(xdr_getattr_args), &args, to_xdrproc(xdr_fsstat_res),
            &res);
    check(res.status, "statfs");
    const fsstat_ok& ok = res.fsstat_res_u.ok;
    return FsStat{ok.total_bytes, ok.free_bytes, ok.avail_bytes, ok.total_files,
                  ok.free_files,  ok.block_size, ok.max_name};
  });
}

}  // namespace odafs

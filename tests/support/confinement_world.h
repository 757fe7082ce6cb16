// Test support for the confinement suites (test_confinement*.cc): raw RPC with hand-built
// argument bytes, and a World: an export beside a sentinel directory (with symlinks from
// the export into it), whose every file's contents and times are snapshotted so that a
// test can tell that nothing outside the export was read, created, changed or removed.
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "proto/odafs_prot.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"
#include "tests/support/rpc_calls.h"
#include "tests/support/server_process.h"

namespace odafs::test::confinement {

namespace fsys = std::filesystem;
using odafs::Client;
using odafs::Handle;
using odafs::rpc::CallFailure;
using odafs::rpc::to_xdrproc;
using odafs::test::errno_of;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

// Argument bytes built by hand, so that a name may hold anything.
struct Args {
  std::string b;
  Args& fh(const Handle& h) {
    b.append(reinterpret_cast<const char*>(h.data()), h.size());
    return *this;
  }
  Args& u32(uint32_t v) {
    v = htonl(v);
    b.append(reinterpret_cast<const char*>(&v), 4);
    return *this;
  }
  Args& u64(uint64_t v) {
    return u32(static_cast<uint32_t>(v >> 32)).u32(static_cast<uint32_t>(v));
  }
  Args& str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    b += s;
    b.append((4 - s.size() % 4) % 4, '\0');
    return *this;
  }
};

inline bool_t xdr_args_bytes(XDR* x, Args* a) {
  return xdr_opaque(x, a->b.data(), static_cast<u_int>(a->b.size()));
}

constexpr int kGarbage = -1;      // the server answered GARBAGE_ARGS
constexpr int kBadCred = -2;      // AUTH_ERROR / AUTH_BADCRED
constexpr int kTooWeak = -3;      // AUTH_ERROR / AUTH_TOOWEAK
constexpr int kOtherDenial = -4;  // another MSG_DENIED

// This process as itself: its uid and gid, no groups.
inline odafs::rpc::AuthSysCred self_credential() {
  return odafs::rpc::AuthSysCred{getuid(), getgid(), "test", {}};
}

// Raw calls on one connection. Each returns the reply's status (or kGarbage, or one of
// the refusals above).
class Raw {
 public:
  // auth: the credential every call carries; nullopt sends AUTH_NONE. host: the server's
  // address (the connection's source is then the host's address the kernel routes from).
  explicit Raw(uint16_t port, std::optional<odafs::rpc::AuthSysCred> auth = self_credential(),
               const std::string& host = "127.0.0.1")
      : ch_(odafs::test::open_channel({host, port}, options(std::move(auth)))) {}

  int lookup(const Handle& dir, const std::string& name, Handle* fh = nullptr,
             odafs_fattr* attr = nullptr) {
    return dirop(ODAFSPROC_LOOKUP, Args().fh(dir).str(name), fh, attr);
  }
  int create(const Handle& dir, const std::string& name, uint32_t how = ODAFS_CREATE_GUARDED) {
    open_res res{};  // CREATE answers as OPEN does; access 0: no delegation asked
    return call(ODAFSPROC_CREATE, Args().fh(dir).str(name).u32(0644).u32(how).u32(0),
                to_xdrproc(xdr_open_res), &res);
  }
  int mkdir(const Handle& dir, const std::string& name) {
    return dirop(ODAFSPROC_MKDIR, Args().fh(dir).str(name).u32(0755));
  }
  // MKNOD of type (ODAFS_FIFO, ODAFS_CHR...; any number, to try others) with mode and
  // device numbers.
  int mknod(const Handle& dir, const std::string& name, uint32_t type, uint32_t mode = 0644,
            uint32_t major = 0, uint32_t minor = 0, odafs_fattr* attr = nullptr) {
    return dirop(ODAFSPROC_MKNOD,
                 Args().fh(dir).str(name).u32(type).u32(mode).u32(major).u32(minor), nullptr, attr);
  }
  int symlink(const Handle& dir, const std::string& name, const std::string& target) {
    return dirop(ODAFSPROC_SYMLINK, Args().fh(dir).str(name).str(target));
  }
  int remove(const Handle& dir, const std::string& name) {
    return bare(ODAFSPROC_REMOVE, Args().fh(dir).str(name));
  }
  int rmdir(const Handle& dir, const std::string& name) {
    return bare(ODAFSPROC_RMDIR, Args().fh(dir).str(name));
  }
  int rename(const Handle& from, const std::string& from_name, const Handle& to,
             const std::string& to_name) {
    return bare(ODAFSPROC_RENAME, Args().fh(from).str(from_name).fh(to).str(to_name));
  }
  // LINK: a new name `name` in dir for the object fh names.
  int link(const Handle& fh, const Handle& dir, const std::string& name,
           odafs_fattr* attr = nullptr) {
    attr_res res{};
    int st = call(ODAFSPROC_LINK, Args().fh(fh).fh(dir).str(name), to_xdrproc(xdr_attr_res), &res);
    if (st == ODAFS_OK && attr != nullptr) *attr = res.attr_res_u.attr;
    return st;
  }
  int readdir(const Handle& dir, std::set<std::string>* names = nullptr) {
    readdir_res res{};
    int st = call(ODAFSPROC_READDIR, Args().fh(dir).u64(0).u32(64 * 1024).u32(1),
                  to_xdrproc(xdr_readdir_res), &res);
    if (st == ODAFS_OK && names != nullptr) {
      for (u_int i = 0; i < res.readdir_res_u.ok.entries.entries_len; ++i) {
        names->insert(res.readdir_res_u.ok.entries.entries_val[i].name);
      }
    }
    xdr_free(to_xdrproc(xdr_readdir_res), reinterpret_cast<char*>(&res));
    return st;
  }
  int readlink(const Handle& fh, std::string* target = nullptr) {
    readlink_res res{};
    int st = call(ODAFSPROC_READLINK, Args().fh(fh), to_xdrproc(xdr_readlink_res), &res);
    if (st == ODAFS_OK && target != nullptr) *target = res.readlink_res_u.target;
    xdr_free(to_xdrproc(xdr_readlink_res), reinterpret_cast<char*>(&res));
    return st;
  }
  int getattr(const Handle& fh, odafs_fattr* attr = nullptr) {
    attr_res res{};
    int st = call(ODAFSPROC_GETATTR, Args().fh(fh), to_xdrproc(xdr_attr_res), &res);
    if (st == ODAFS_OK && attr != nullptr) *attr = res.attr_res_u.attr;
    return st;
  }
  enum class Set { kMode, kSize, kServerTimes, kClientTimes, kOwner };
  // kOwner sets uid and gid to owner_id.
  int setattr(const Handle& fh, Set what, uint32_t owner_id = 0) {
    Args a;
    a.fh(fh);
    if (what == Set::kMode)
      a.u32(1).u32(0777);
    else
      a.u32(0);
    if (what == Set::kSize)
      a.u32(1).u64(0);
    else
      a.u32(0);
    for (int i = 0; i < 2; ++i) {
      if (what == Set::kServerTimes) {
        a.u32(ODAFS_TIME_SERVER);
      } else if (what == Set::kClientTimes) {
        a.u32(ODAFS_TIME_CLIENT).u64(1700000000).u32(0);
      } else {
        a.u32(ODAFS_TIME_DONT_CHANGE);
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (what == Set::kOwner)
        a.u32(1).u32(owner_id);
      else
        a.u32(0);
    }
    attr_res res{};
    return call(ODAFSPROC_SETATTR, a, to_xdrproc(xdr_attr_res), &res);
  }
  int read(const Handle& fh) {
    read_res res{};
    int st =
        call(ODAFSPROC_READ, Args().fh(fh).u64(0).u32(4096).u64(0), to_xdrproc(xdr_read_res), &res);
    xdr_free(to_xdrproc(xdr_read_res), reinterpret_cast<char*>(&res));
    return st;
  }
  int write(const Handle& fh) {
    write_res res{};
    return call(ODAFSPROC_WRITE, Args().fh(fh).u64(0).u32(ODAFS_FILE_SYNC).str("pwned"),
                to_xdrproc(xdr_write_res), &res);
  }
  int commit(const Handle& fh) {
    commit_res res{};
    return call(ODAFSPROC_COMMIT, Args().fh(fh).u64(0).u32(0), to_xdrproc(xdr_commit_res), &res);
  }
  int getrefs(const Handle& fh) {
    getrefs_res res{};
    int st = call(ODAFSPROC_GETREFS, Args().fh(fh).u64(0).u32(4096).u64(1),
                  to_xdrproc(xdr_getrefs_res), &res);
    xdr_free(to_xdrproc(xdr_getrefs_res), reinterpret_cast<char*>(&res));
    return st;
  }
  int read_direct(const Handle& fh) {
    read_direct_res res{};
    return call(ODAFSPROC_READ_DIRECT, Args().fh(fh).u64(0).u32(4096).u64(1).u32(1).u32(0).u32(7),
                to_xdrproc(xdr_read_direct_res), &res);
  }
  int write_direct(const Handle& fh) {
    write_res res{};
    return call(ODAFSPROC_WRITE_DIRECT,
                Args().fh(fh).u64(0).u32(ODAFS_FILE_SYNC).u32(5).u64(1).u32(1).u32(0).u32(7),
                to_xdrproc(xdr_write_res), &res);
  }
  int access(const Handle& fh, uint32_t want, uint32_t* granted = nullptr) {
    access_res res{};
    int st = call(ODAFSPROC_ACCESS, Args().fh(fh).u32(want), to_xdrproc(xdr_access_res), &res);
    if (st == ODAFS_OK && granted != nullptr) *granted = res.access_res_u.granted;
    return st;
  }
  int fsstat(const Handle& fh) {
    fsstat_res res{};
    return call(ODAFSPROC_FSSTAT, Args().fh(fh), to_xdrproc(xdr_fsstat_res), &res);
  }
  // NULL: 0 when answered.
  int null() {
    CallFailure layer{};
    odafs::Status s = ch_->call(ODAFSPROC_NULL, to_xdrproc(odafs::rpc::xdr_nothing), nullptr,
                                to_xdrproc(odafs::rpc::xdr_nothing), nullptr, &layer);
    return s.ok() ? 0 : refusal(s, layer);
  }
  int mount(const std::string& path, Handle* root = nullptr) {
    mount_res res{};
    int st = call(ODAFSPROC_MOUNT, Args().str(path), to_xdrproc(xdr_mount_res), &res);
    if (st == ODAFS_OK && root != nullptr) std::memcpy(root->data(), res.mount_res_u.ok.root, 40);
    xdr_free(to_xdrproc(xdr_mount_res), reinterpret_cast<char*>(&res));
    return st;
  }

 private:
  static odafs::rpc::Channel::Options options(std::optional<odafs::rpc::AuthSysCred> auth) {
    odafs::rpc::Channel::Options o;
    o.program = ODAFS_PROGRAM;
    o.version = ODAFS_V3;
    o.timeout_ms = 10000;
    o.auth = std::move(auth);
    return o;
  }

 public:
  // Any procedure, by its encoded arguments: its status, and *res decoded.
  template <class Res>
  int call(uint32_t proc, Args args, xdrproc_t xres, Res* res) {
    bool_t (*enc)(XDR*, Args*) = xdr_args_bytes;
    CallFailure layer{};
    odafs::Status s = ch_->call(proc, to_xdrproc(enc), &args, xres, res, &layer);
    if (!s.ok()) return refusal(s, layer);
    int status;
    std::memcpy(&status, res, sizeof status);  // every result starts with its status
    return status;
  }
  // What a refused call returns; a transport error fails the test.
  static int refusal(const odafs::Status& s, CallFailure layer) {
    if (layer == CallFailure::kGarbageArgs) return kGarbage;
    REQUIRE_MESSAGE(layer == CallFailure::kDenied, s.to_string());
    const std::string& m = s.message();
    if (m.find("AUTH_BADCRED") != std::string::npos) return kBadCred;
    if (m.find("AUTH_TOOWEAK") != std::string::npos) return kTooWeak;
    return kOtherDenial;
  }

 private:
  int dirop(uint32_t proc, Args args, Handle* fh = nullptr, odafs_fattr* attr = nullptr) {
    dirop_res res{};
    int st = call(proc, std::move(args), to_xdrproc(xdr_dirop_res), &res);
    if (st == ODAFS_OK && fh != nullptr) std::memcpy(fh->data(), res.dirop_res_u.ok.fh, 40);
    if (st == ODAFS_OK && attr != nullptr) *attr = res.dirop_res_u.ok.attr;
    return st;
  }

 public:
  // A procedure answering a bare stat_res.
  int bare(uint32_t proc, Args args) {
    stat_res res{};
    return call(proc, std::move(args), to_xdrproc(xdr_stat_res), &res);
  }

 private:
  std::unique_ptr<odafs::rpc::Channel> ch_;
};

// The paths under dir (and dir itself).
inline std::vector<std::string> paths_under(const std::string& dir) {
  std::vector<std::string> all = {dir};
  for (auto it = fsys::recursive_directory_iterator(dir); it != fsys::end(it); ++it) {
    all.push_back(it->path());
  }
  return all;
}

// Everything lstat says of each path, and symlink targets, without reading a byte of any
// file or directory (a read would change an atime). An entry created in or removed from a
// directory changes its times, so listing the paths once beforehand is enough.
inline std::map<std::string, std::string> stat_snapshot(const std::vector<std::string>& paths) {
  std::map<std::string, std::string> snap;
  for (const std::string& p : paths) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) {
      snap[p] = "gone";
      continue;
    }
    std::ostringstream s;
    s << st.st_ino << " " << std::oct << st.st_mode << std::dec << " " << st.st_nlink << " "
      << st.st_size << " " << st.st_atim.tv_sec << "." << st.st_atim.tv_nsec << " "
      << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec << " " << st.st_ctim.tv_sec << "."
      << st.st_ctim.tv_nsec << " " << st.st_uid << ":" << st.st_gid;
    if (S_ISLNK(st.st_mode)) s << " -> " << fsys::read_symlink(p).string();
    snap[p] = s.str();
  }
  return snap;
}

inline std::map<std::string, std::string> content_snapshot(const std::string& dir) {
  std::map<std::string, std::string> snap;
  for (auto it = fsys::recursive_directory_iterator(dir); it != fsys::end(it); ++it) {
    if (it->is_regular_file() && !it->is_symlink()) snap[it->path()] = read_local(it->path());
  }
  return snap;
}

// Sets atime and mtime of every path to a moment long past: the file system (relatime)
// then updates an atime on any read, so a read shows in stat_snapshot.
inline void age(std::vector<std::string> paths) {
  timespec past[2] = {{1000000000, 0}, {1000000000, 0}};
  std::sort(paths.rbegin(), paths.rend());  // children before their directories
  for (const std::string& p : paths) {
    REQUIRE(::utimensat(AT_FDCWD, p.c_str(), past, AT_SYMLINK_NOFOLLOW) == 0);
  }
}

// The layout: base/export is exported; base/sentinel must stay untouched.
struct World {
  TempDir base;
  std::string exp = base / "export";
  std::string sentinel = base / "sentinel";
  std::vector<std::string> paths;
  std::map<std::string, std::string> contents, stats, beside;

  World() {
    REQUIRE(::mkdir(exp.c_str(), 0755) == 0);
    REQUIRE(::mkdir(sentinel.c_str(), 0755) == 0);
    REQUIRE(::mkdir((sentinel + "/sub").c_str(), 0755) == 0);
    write_local(sentinel + "/secret", "outside data");
    write_local(sentinel + "/sub/inner", "more outside data");
    // Inside the export: a file, a directory, and symlinks that lead out.
    write_local(exp + "/f", "inside");
    REQUIRE(::mkdir((exp + "/d").c_str(), 0755) == 0);
    REQUIRE(::mkdir((exp + "/d/e").c_str(), 0755) == 0);
    link(sentinel, "abs-dir");                   // absolute, to the sentinel directory
    link(sentinel + "/secret", "abs-file");      // absolute, to a file outside
    link("../sentinel", "rel-dir");              // relative, "..", out of the export
    link("../../sentinel/secret", "d/up-file");  // "../.." from a subdirectory
    link("../../../sentinel", "d/e/up-dir");
    link("chain2", "chain1");  // a chain that ends outside
    link("d/chain3", "chain2");
    link("../../sentinel/sub", "d/chain3");
    link(sentinel + "/created", "dangling");  // outside, not existing yet
    contents = content_snapshot(sentinel);
    paths = paths_under(sentinel);
    age(paths);
    stats = stat_snapshot(paths);
    beside = listing(base.path());
  }
  void link(const std::string& target, const std::string& name) {
    REQUIRE(::symlink(target.c_str(), (exp + "/" + name).c_str()) == 0);
  }
  static std::map<std::string, std::string> listing(const std::string& dir) {
    std::map<std::string, std::string> l;
    for (auto& e : fsys::directory_iterator(dir)) l[e.path().filename()] = "";
    return l;
  }
  // Nothing in the sentinel was read, created, changed or removed; nothing appeared
  // beside the export.
  void check_untouched() {
    auto now = stat_snapshot(paths);
    for (auto& [path_key, before] : stats) {
      const auto& path = path_key;  // clang 14 lambdas cannot capture a binding
      CHECK_MESSAGE(now[path] == before, path);
    }
    CHECK(content_snapshot(sentinel) == contents);  // reads: last
    CHECK(listing(base.path()) == beside);
  }
};

const char kNul[] = "f\0/../../sentinel";

// Names no procedure may take as a new or existing entry's name.
inline std::vector<std::string> hostile_names(const World& w) {
  return {"..",
          ".",
          "",
          "/",
          w.sentinel,
          w.sentinel + "/secret",
          "../sentinel",
          "../sentinel/secret",
          "d/../../sentinel",
          "abs-dir/secret",
          "chain1/inner",
          std::string(kNul, sizeof kNul - 1),
          std::string("\0", 1),
          std::string("new\0", 4)};
}

}  // namespace odafs::test::confinement

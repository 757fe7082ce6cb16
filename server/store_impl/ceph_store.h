// CephStore: a CephFS as a Store (server/store.h), through libcephfs's low-level API
// (ceph_ll_*), the interface nfs-ganesha's FSAL_CEPH uses.
//
// An Object holds an inode reference (ceph_ll_lookup and friends take one; release puts
// it) and, once opened for its bytes, an open file (Fh, which pins its inode itself).
// Inode numbers are never reused by CephFS and mean the same to every client of one file
// system, so find() reaches any object by its ObjectId alone (ceph_ll_lookup_inode): what
// lets several gateways accept each other's handles.
//
// Identity: CallerScope makes the thread's UserPerm (uid, gid, groups; one kept per thread
// and reused while the caller stays the same, so a call allocates nothing); every
// libcephfs call gets it, and the client library and the MDS check permissions by it. As
// the server (no scope, or one that does not act): the mount's own UserPerm. No privilege
// of the odafsd process is needed for either. The caller is the thread's, for every
// CephStore of the process (odafsd has one).
//
// Built only where libcephfs is installed (ODAFS_HAVE_CEPHFS); the translation unit that
// includes libcephfs.h needs _FILE_OFFSET_BITS=64, which CMake sets for it alone. This
// header does not include libcephfs.h.
//
// Thread-safety: as Store; libcephfs serialises inside its client.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/store.h"

struct ceph_mount_info;
struct Fh;
struct Inode;

namespace odafs::server {

class CephStore final : public Store {
 public:
  struct Options {
    std::string conf;        // ceph.conf of the cluster (its monitors and keyring)
    std::string client_id;   // cephx name without "client." (empty: "admin")
    std::string path = "/";  // the directory of the CephFS to export
    // Seconds this server has to give back a recalled lease (a CephFS delegation) before
    // the file system unmounts it (ceph_set_deleg_timeout). 0: no leases, so no caching.
    unsigned lease_timeout_s = 20;
    // This gateway's CephFS session identity across restarts (ceph_set_uuid; empty: none).
    // Before mounting, the session an earlier instance left under it (a crash, a SIGKILL)
    // is evicted (ceph_start_reclaim, CEPH_RECLAIM_RESET), so the capabilities and
    // delegations it held go now, not at the MDS's session timeout (30 s or more). It
    // must be this gateway's alone: another given the same would evict this one
    // (server/daemon_setup.h's claim_ceph_session keeps it so).
    std::string session_uuid;
    // How this gateway names itself to its peers (its listen address; empty: unnamed, so
    // no peer can fence it): kept in its session's metadata with the session's start,
    // for their evict_peer_sessions (server/peer_fence.h).
    std::string gateway_name;
  };
  // Connects and mounts. Fails with what libcephfs said (ENOENT for a missing path, say).
  static Result<std::unique_ptr<CephStore>> connect(const Options& options);
  ~CephStore() override;

  // The libcephfs mount, for what the store does not wrap. Owned.
  ceph_mount_info* mount_info() const { return cm_; }

  const char* kind() const override { return "cephfs"; }
  bool shared() const override { return true; }
  // Leases are CephFS read delegations on the object's open file (ceph_ll_delegation).
  bool leases() const override { return leases_; }
  void set_lease_recall(LeaseRecallFn recall) override { recall_ = std::move(recall); }
  Status take_lease(const Object& file, const ObjectId& id, LeaseKind kind) override;
  void give_back_lease(const Object& file) override;
  // The MDS evicts them (the peer's client is blocklisted). Needs the MDS caps to evict
  // (cephx "allow *" on mds).
  Result<int> evict_peer_sessions(const std::string& peer, int64_t opened_before_ms) override;
  Result<Object> root() override;
  Result<Object> lookup(const Object& dir, const char* name, struct stat* st) override;
  Status stat_at(const Object& dir, const char* name, struct stat* st) override;
  Status stat(const Object& obj, struct stat* st) override;
  ObjectId id_of(const struct stat& st) const override;
  bool finds_by_id() const override { return true; }
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

 private:
  explicit CephStore(ceph_mount_info* cm) : cm_(cm) {}
  // libcephfs's recall callback (ceph_deleg_cb_t); store is this.
  static void lease_recalled(Fh* fh, void* store);
  // ceph_ll_lookup of name in dir, not following a symlink: *in referenced (the caller
  // puts it) and *st filled on success. Returns libcephfs's rc.
  int lookup_inode(const Object& dir, const char* name, Inode** in, struct stat* st);
  // Gives back the delegation fh holds and forgets it.
  void give_back_delegation(Fh* fh);
  // open_at's and find's second half: opens held (attributes st) as the node table keeps
  // objects.
  Status open_held(const Object& held, const struct stat& st, Access* access);
  void release(uintptr_t native) override;
  auth_stat begin_caller(const rpc::CallerCred* cred, bool acting, uintptr_t* restore) override;
  void end_caller(uintptr_t restore) override;

  ceph_mount_info* const cm_;
  bool leases_ = false;  // set by connect
  LeaseRecallFn recall_;
  // The open files holding a delegation, and whose they are: a recall names only the Fh.
  std::mutex leased_mu_;
  std::unordered_map<Fh*, ObjectId> leased_;  // guarded by leased_mu_
};

}  // namespace odafs::server

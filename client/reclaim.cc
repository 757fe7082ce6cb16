// Client: restart and reclaim (docs/protocol.md, "Restart and reclaim"). A write
// delegation lets a close keep bytes only this client has; when the connection breaks,
// the mount's Delegations hand them over (take_unsent) and the next mount writes them
// back, before anything else goes out on it, if the server says this client may reclaim
// (it restarted, and its recovery record names this client; or it stayed up and kept this
// client's delegations while the client was away). Bytes that cannot be written
// back are reported: logged with the file and the byte count, and EIO at the file's next
// write, fsync or close through this client. None is dropped silently.
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>

#include "client/call_util.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/delegations.h"
#include "client/mount_state.h"
#include "client/shared_file.h"
#include "client/url.h"
#include "client/write_books.h"
#include "rpc/call_credential.h"

namespace odafs {
namespace {

// Takes sf's unsent bytes into *pieces (offset, length) and *data (their bytes end to
// end): its uncommitted writes (older), then its run (newer), in the order they must land.
// run_locked: the caller holds sf.behind_mu. Otherwise a run whose lock another thread
// holds is left to that thread: it is sending it, and waits for this re-mount to do so
// (taking the lock here would deadlock with it); it sends the run itself, or hands it to
// rehome_run_locked.
//
// A commit in progress (commit_mu held) has the older uncommitted writes in its hands, and
// will send them again itself after its COMMIT fails: taking the newer ones here would let
// those older ones land last. Then nothing is taken, and the committing thread (a File's
// fsync, or a write-back whose failure hands the bytes to adopt_unsent) sends them all.
void take_unsent_bytes(SharedFile& sf, bool run_locked,
                       std::vector<std::pair<uint64_t, size_t>>* pieces, std::vector<char>* data) {
  std::unique_lock commit(sf.commit_mu, std::try_to_lock);
  if (!commit.owns_lock()) return;
  std::unique_lock behind(sf.behind_mu, std::defer_lock);
  if (!run_locked) (void)behind.try_lock();
  {
    std::lock_guard lock(sf.mu);
    if (sf.unstable) {
      pieces->swap(sf.pending);
      data->swap(sf.pending_data);
      sf.unstable = false;
      sf.verifier.reset();
      sf.verifier_changed = false;
    }
  }
  if ((run_locked || behind.owns_lock()) && !sf.behind.empty()) {
    pieces->emplace_back(sf.behind_offset, sf.behind.size());
    data->insert(data->end(), sf.behind.begin(), sf.behind.end());
    sf.behind.clear();
    sf.has_behind.store(false, std::memory_order_release);
  }
}

constexpr const char* kNotAtPath = "the file is no longer at its path";
constexpr const char* kRemovedOnServer =
    "the file was removed on the server (or replaced by a rename over it) since";
constexpr const char* kInodeReused =
    "the file was removed on the server: its inode number now names another file";

// Whether a reply on the reclaiming mount says to wait and ask again (retry_delayed): DELAY,
// or GRACE while other clients reclaim.
bool waits(const odafs_stat& status) {
  const int raw = raw_enum(status);
  return raw == ODAFS_ERR_DELAY || raw == ODAFS_ERR_GRACE;
}

// Why bytes could not be written home, or ok when that is no loss: the file is gone, so
// nothing anyone can read could hold them, as for bytes written to a local file that is
// then unlinked. Gone means removed on the server that stayed up (by another client, or a
// rename over it: write_home's ESTALE), its inode number found naming another file (after
// a restart too: ESTALE), or not found after a restart while it was going with this
// client's own REMOVE (cut off by the restart).
Status loss(Status why, bool removing, const SharedFile& sf) {
  if (why.errno_value() == ESTALE) {
    ODAFS_LOG_INFO("odafs: the bytes kept for %s went with the file: %s", sf.path().c_str(),
                   why.message().c_str());
    return Status();
  }
  if (removing && why.message() == kNotAtPath) {
    ODAFS_LOG_INFO("odafs: %s went with its REMOVE across a server restart", sf.path().c_str());
    return Status();
  }
  return why;
}

}  // namespace

Result<ClientOwner> ClientImpl::make_owner() {
  ClientOwner o{};
  for (size_t got = 0; got < o.size();) {
    ssize_t n = getrandom(o.data() + got, o.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      return Status::from_errno("getrandom: no client owner id");
    }
  }
  return o;
}

Result<bool> ClientImpl::name_client(MountState& m) {
  client_id_args args{};
  std::memcpy(args.owner, owner_.data(), owner_.size());
  client_id_res res{};
  rpc::CallFailure layer{};
  Status called = call<ODAFSPROC_CLIENT_ID>(*m.channel, args, &res, &layer);
  if (!called.ok()) {
    if (layer == rpc::CallFailure::kTransport) return in_context(std::move(called), "client id");
    return false;  // a server without it: no write delegations, nothing to reclaim
  }
  ODAFS_RETURN_IF_ERROR(status_of(res.status, "client id"));
  if (res.client_id_res_u.ok.kept) m.reclaim_after = "a reconnection";
  return static_cast<bool>(res.client_id_res_u.ok.reclaim);
}

Result<std::optional<std::pair<Handle, Attr>>> ClientImpl::find_again(const MountState& m,
                                                                      const std::string& path) {
  using Found = std::optional<std::pair<Handle, Attr>>;
  std::vector<std::string> todo = split_path(path);
  std::reverse(todo.begin(), todo.end());  // a stack: back() is the next component
  Handle cur = m.root;
  std::optional<Attr> attr;
  int hops = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.back());
    todo.pop_back();
    diropargs args{};
    put_fh(args.dir, cur);
    args.name = const_cast<char*>(name.c_str());
    ODAFS_ASSIGN_OR_RETURN(Found step, retry_delayed(options_.timeout_ms, [&]() -> Result<Found> {
                             dirop_res res{};
                             ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_LOOKUP>(*m.channel, args, &res));
                             if (waits(res.status)) return Status(kDelayErrno, "lookup");
                             if (raw_enum(res.status) != ODAFS_OK) return Found();
                             return Found(std::make_pair(get_fh(res.dirop_res_u.ok.fh),
                                                         to_attr(res.dirop_res_u.ok.attr)));
                           }));
    if (!step) return Found();
    if (step->second.type == FileType::kSymlink) {
      // Followed as the open that named the file followed it: a path through a link to a
      // directory names the file by the link (issue #38).
      if (++hops > kMaxSymlinkHops) return Found();
      getattr_args link{};
      put_fh(link.fh, step->first);
      ODAFS_ASSIGN_OR_RETURN(
          std::optional<std::string> target,
          retry_delayed(options_.timeout_ms, [&]() -> Result<std::optional<std::string>> {
            readlink_res res{};
            XdrFree<readlink_res> guard{to_xdrproc(xdr_readlink_res), &res};
            ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_READLINK>(*m.channel, link, &res));
            if (waits(res.status)) return Status(kDelayErrno, "readlink");
            if (raw_enum(res.status) != ODAFS_OK) return std::optional<std::string>();
            return std::optional<std::string>(res.readlink_res_u.target);
          }));
      if (!target) return Found();
      if (push_link_target(*target, &todo)) cur = m.root;
      attr.reset();
      continue;
    }
    cur = step->first;
    attr = step->second;
  }
  if (!attr) return Found();
  return Found(std::make_pair(cur, *attr));
}

Result<std::optional<Handle>> ClientImpl::home_of(const MountState& m, const SharedFile& sf,
                                                  const HeldHandle* held) {
  using Home = std::optional<Handle>;
  // The same file: its inode number, and its generation where both sides know it. The same
  // inode number with another generation is another file, made after sf's was removed
  // (reused numbers are why: writing there would put sf's bytes in a stranger's file).
  enum class Match { kOther, kSame, kReused };
  const auto match = [&](const Attr& a) {
    if (a.fileid != sf.fileid || a.type != FileType::kRegular) return Match::kOther;
    if (a.file_generation != 0 && sf.file_generation != 0 &&
        a.file_generation != sf.file_generation) {
      return Match::kReused;
    }
    return Match::kSame;
  };
  bool held_is_gone = false;
  if (held != nullptr) {
    getattr_args args{};
    put_fh(args.fh, held->fh);
    ODAFS_ASSIGN_OR_RETURN(std::optional<Attr> attr,
                           retry_delayed(options_.timeout_ms, [&]() -> Result<std::optional<Attr>> {
                             attr_res res{};
                             ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_GETATTR>(*m.channel, args, &res));
                             if (waits(res.status)) return Status(kDelayErrno, "getattr");
                             const int status = raw_enum(res.status);
                             // Refused: a server instance that does not know it (a restart, with
                             // handles that name one instance), or the file is gone. The path may
                             // still find it.
                             if (status == ODAFS_ERR_STALE || status == ODAFS_ERR_BADHANDLE) {
                               return std::optional<Attr>();
                             }
                             ODAFS_RETURN_IF_ERROR(status_of(res.status, "getattr"));
                             return std::optional<Attr>(to_attr(res.attr_res_u.attr));
                           }));
    if (attr && match(*attr) == Match::kSame) return Home(held->fh);
    held_is_gone = !attr && held->instance == m.limits.write_verifier;
  }
  // Every name this client opened the file by, the latest first; the file id tells which
  // holds it. A reused inode number says the file is gone, but only once no other name
  // holds it (an export spanning file systems may show one number twice).
  using Found = std::optional<std::pair<Handle, Attr>>;
  bool reused = false;
  for (const std::string& name : sf.paths()) {
    ODAFS_ASSIGN_OR_RETURN(Found found, find_again(m, name));
    if (!found) continue;
    const Match at_name = match(found->second);
    if (at_name == Match::kSame) return Home(found->first);
    reused = reused || at_name == Match::kReused;
  }
  if (held_is_gone) return Status(ESTALE, kRemovedOnServer);
  if (reused) return Status(ESTALE, kInodeReused);
  return Home();
}

Status ClientImpl::write_home(const MountState& m, SharedFile& sf, const HeldHandle* held,
                              const std::vector<std::pair<uint64_t, size_t>>& pieces,
                              const std::vector<char>& data) {
  Result<std::optional<Handle>> home = home_of(m, sf, held);
  if (!home.ok()) return home.status();
  if (!*home) return Status(EIO, kNotAtPath);
  // Stable: durable when answered, so no COMMIT (and no verifier) to keep track of.
  const char* src = data.data();
  for (const auto& [offset, len] : pieces) {
    for (size_t done = 0; done < len;) {
      WriteVerifier verf;
      int committed = 0;
      Result<size_t> n =
          write_on(m, **home, src + done, std::min<size_t>(len - done, m.limits.max_write),
                   offset + done, Stability::kFileSync, &verf, &committed);
      if (!n.ok()) return n.status();
      if (*n == 0) return Status(EIO, "the server wrote nothing");
      done += *n;
    }
    src += len;
  }
  stats_.reclaimed_files.fetch_add(1, std::memory_order_relaxed);
  ODAFS_LOG_INFO("odafs: reclaimed %zu byte(s) of %s after %s", data.size(), sf.path().c_str(),
                 m.reclaim_after);
  return Status();
}

void ClientImpl::reclaim(const MountState* home, const MountState& old,
                         const std::string& no_home) {
  std::vector<Delegations::Return> unsent = old.delegations->take_unsent();
  for (Delegations::Return& r : unsent) {
    SharedFile& sf = *r.kept;
    std::vector<std::pair<uint64_t, size_t>> pieces;
    std::vector<char> data;
    take_unsent_bytes(sf, /*run_locked=*/false, &pieces, &data);
    if (!data.empty()) {
      Status why;
      if (home == nullptr) {
        why = Status(EIO, no_home);
      } else {
        std::optional<rpc::CallCredential> cred;
        std::optional<rpc::CallAs> as;
        if (r.caller) {  // as the caller whose close kept them
          cred.emplace(*r.caller, "odafs");
          as.emplace(*cred);
        }
        const HeldHandle held{r.fh, old.limits.write_verifier};
        why = loss(write_home(*home, sf, &held, pieces, data), r.removing, sf);
      }
      if (!why.ok()) report_lost(sf, pieces, data, why);
    }
    open_files_.release(cache_key(r.fh), r.kept);
  }
}

void ClientImpl::adopt_unsent(const HeldHandle& held, OpenFiles::Ref& kept,
                              const rpc::CallerCred* caller, bool removing) {
  std::vector<std::pair<uint64_t, size_t>> pieces;
  std::vector<char> data;
  take_unsent_bytes(*kept, /*run_locked=*/false, &pieces, &data);
  if (!data.empty()) {
    std::optional<rpc::CallCredential> cred;
    std::optional<rpc::CallAs> as;
    if (caller != nullptr) {
      cred.emplace(*caller, "odafs");
      as.emplace(*cred);
    }
    Result<std::shared_ptr<const MountState>> m = mount_state();
    const Status why = m.ok() ? loss(write_home(**m, *kept, &held, pieces, data), removing, *kept)
                              : m.status();  // no mount to be had
    if (!why.ok()) report_lost(*kept, pieces, data, why);
  }
  open_files_.release(cache_key(held.fh), kept);
}

void ClientImpl::rehome_run_locked(const HeldHandle& held, SharedFile& sf) {
  std::vector<std::pair<uint64_t, size_t>> pieces;
  std::vector<char> data;
  take_unsent_bytes(sf, /*run_locked=*/true, &pieces, &data);
  if (data.empty()) return;
  Result<std::shared_ptr<const MountState>> m = mount_state();
  const Status why =
      m.ok() ? write_home(**m, sf, &held, pieces, data) : m.status();  // no mount to be had
  if (why.ok()) return;
  if (why.errno_value() == ESTALE) {
    // Removed while the connection was down: the open Files hear it as they would have
    // connected (their run's WRITE answered STALE), and nothing is lost that a reader
    // could have seen.
    record_write_failure_locked(sf, why);
    return;
  }
  report_lost(sf, pieces, data, why);
}

void ClientImpl::report_lost(SharedFile& sf, const std::vector<std::pair<uint64_t, size_t>>& pieces,
                             const std::vector<char>& data, const Status& why) {
  std::string message = std::to_string(data.size()) + " byte(s) written to " + sf.path() + " on " +
                        server_name() +
                        " under a write delegation could not be written back: " + why.to_string();
  if (unmounting_.load(std::memory_order_acquire)) {
    Result<std::string> saved = rescue(sf, pieces, data);
    message += saved.ok() ? "; saved in " + *saved
                          : "; and could not be saved locally: " + saved.status().to_string();
  }
  ODAFS_LOG_ERROR("odafs: %s", message.c_str());
  stats_.lost_files.fetch_add(1, std::memory_order_relaxed);
  // The file's next write, fsync or close hears it: ENOSPC or EDQUOT as such (a full disk
  // is the writer's to act on), anything else as EIO.
  const int err =
      why.errno_value() == ENOSPC || why.errno_value() == EDQUOT ? why.errno_value() : EIO;
  lost_writes_.add(sf.fileid, sf.server_mtime_ns.load(std::memory_order_relaxed), err, message);
}

Result<std::string> ClientImpl::rescue(const SharedFile& sf,
                                       const std::vector<std::pair<uint64_t, size_t>>& pieces,
                                       const std::vector<char>& data) {
  std::string dir = options_.rescue_dir;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    dir = tmp != nullptr && *tmp != '\0' ? tmp : "/var/tmp";
  }
  // NAME: the file's last component, kept to what a file name may hold here.
  const std::string latest = sf.path();
  std::string name = latest.substr(latest.rfind('/') + 1);
  if (name.empty() || name.size() > 64) name = name.empty() ? "file" : name.substr(0, 64);
  std::string path = dir + "/odafs-rescue." + name + ".XXXXXX";
  const int fd = mkostemp(path.data(), O_CLOEXEC);  // 0600: the user's bytes, the user's only
  if (fd < 0) {
    const int err = errno;
    return Status(err, "rescue file in " + dir);
  }
  // In the order they were to land: a later piece over an earlier one.
  const char* src = data.data();
  Status written;
  for (const auto& [offset, len] : pieces) {
    for (size_t done = 0; done < len && written.ok();) {
      const ssize_t n = pwrite(fd, src + done, len - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        written = Status(err, "writing rescue file " + path);
      } else {
        done += static_cast<size_t>(n);
      }
    }
    src += len;
  }
  if (written.ok() && fsync(fd) != 0) {
    const int err = errno;
    written = Status(err, "fsync " + path);
  }
  close(fd);
  if (!written.ok()) return written;
  {
    std::lock_guard lock(rescued_mu_);
    rescued_.push_back(sf.path() + " on " + server_name() + ": " + std::to_string(data.size()) +
                       " byte(s) saved in " + path);
  }
  return path;
}

std::string ClientImpl::server_name() const {
  // Without remount_mu_: a message may name the server just failed over from.
  return servers_.empty() ? url_ : servers_[server_index_.load() % servers_.size()].to_string();
}

Status ClientImpl::check_lost(uint64_t fileid, const struct timespec& mtime_at_open) {
  if (!lost_writes_.any()) return Status();
  if (std::optional<Status> why = lost_writes_.take(fileid, nanoseconds(mtime_at_open))) {
    return *why;
  }
  return Status();
}

void ClientImpl::reconnect_soon() {
  std::lock_guard lock(reconnect_mu_);
  if (closing_) return;
  reconnect_wanted_ = true;
  if (!reconnector_.joinable()) reconnector_ = std::thread([this] { reconnect_loop(); });
  reconnect_cv_.notify_one();
}

void ClientImpl::reconnect_loop() {
  std::unique_lock lock(reconnect_mu_);
  for (;;) {
    reconnect_cv_.wait(lock, [&] { return closing_ || reconnect_wanted_; });
    if (closing_) return;
    reconnect_wanted_ = false;
    // Until the server is back (it restarts within its grace period, or the kept bytes are
    // lost anyway), or the client closes.
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(std::max(options_.timeout_ms, 1000));
    while (!closing_ && std::chrono::steady_clock::now() < give_up) {
      lock.unlock();
      Result<std::shared_ptr<const MountState>> m = mount_state();
      const bool done = m.ok();
      if (!done)
        ODAFS_LOG_DEBUG("odafs: re-mounting to reclaim: %s", m.status().to_string().c_str());
      lock.lock();
      if (done) break;
      reconnect_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return closing_; });
    }
  }
}

void ClientImpl::stop_reconnecting() {
  {
    std::lock_guard lock(reconnect_mu_);
    closing_ = true;
  }
  reconnect_cv_.notify_all();
  if (reconnector_.joinable()) reconnector_.join();
}

}  // namespace odafs

// ClientImpl: connecting and mounting, re-mounting, unmounting and the mount's accessors.
// The handle-level calls and RPC reads are in handle_calls.cc, the read pipeline in
// read_path.cc, path operations in namespace.cc, File in file.cc.
#include "client/client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/tls.h"
#include "client/block_reader.h"
#include "client/call_util.h"
#include "client/client_cache.h"
#include "client/client_impl.h"
#include "client/mount_state.h"
#include "client/server_channel.h"
#include "client/shared_file.h"
#include "client/url.h"
#include "ordma/engine.h"
#include "proto/ref_xdr.h"
#include "proto/wire_layout.h"
#include "rpc/client_channel.h"

namespace odafs {
namespace {

constexpr size_t kLargestRecord = ODAFS_MAXDATA + 8192;  // odafsd's largest --max-io + slack

rpc::Channel::Options channel_options(const MountOptions& options,
                                      std::shared_ptr<const tls::Context> tls,
                                      const std::string& tls_host) {
  rpc::Channel::Options o;
  o.tls = std::move(tls);
  o.tls_host = tls_host;
  o.program = ODAFS_PROGRAM;
  o.version = ODAFS_V3;
  o.max_record = kLargestRecord;
  o.timeout_ms = options.timeout_ms;
  if (options.auth_sys) {
    rpc::AuthSysCred cred;
    cred.uid = getuid();
    cred.gid = getgid();
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    cred.machine = host;
    gid_t groups[16];
    int n = getgroups(16, groups);
    for (int i = 0; i < n; ++i) cred.gids.push_back(groups[i]);
    o.auth = cred;
  }
  return o;
}

}  // namespace

// ---------------------------------------------------------------- connection and mount

ClientImpl::ClientImpl(const std::string& url, MountOptions options, ClientOwner owner)
    : url_(url), options_(options), read_mode_(options.read_mode), owner_(owner) {}

ClientImpl::~ClientImpl() {
  (void)try_unmount(nullptr);  // it logged what it could not write back, and where it went
  // The mount goes before open_files_, which its Delegations release into.
  mount_.store(nullptr);
}

Status ClientImpl::try_unmount(const std::atomic<bool>* give_up) {
  std::lock_guard lock(unmount_mu_);
  if (unmounted_) return *unmounted_;
  stop_reconnecting();  // from here this thread alone re-mounts
  unmounting_.store(true, std::memory_order_release);
  // Write delegations keep writes nobody else has: written back and returned first, or
  // waited for the server with, or saved locally; never dropped.
  wait_for_server(give_up);
  if (std::shared_ptr<const MountState> m = mount_.load()) {
    if (m->channel->broken()) {
      reclaim(nullptr, *m,
              "the server did not come back before the unmount gave up waiting for it");
    }
    m->delegations->stop();
  }
  Status status;
  {
    std::lock_guard rescued(rescued_mu_);
    if (!rescued_.empty()) {
      std::string message = "unmount: " + std::to_string(rescued_.size()) +
                            " file(s) kept bytes the server never got; they were saved locally:";
      for (const std::string& line : rescued_) message += "\n  " + line;
      status = Status(EIO, message);
    }
  }
  unmounted_ = status;
  return status;
}

void ClientImpl::wait_for_server(const std::atomic<bool>* give_up) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_note = start;
  for (;;) {
    std::shared_ptr<const MountState> m = mount_.load();
    if (!m) return;
    if (!m->channel->broken()) {
      m->delegations->return_all();
      // A connection that broke under the write-back left its bytes for a re-mount.
      if (!m->channel->broken()) return;
    }
    const Delegations::Unsent unsent = m->delegations->unsent();
    if (unsent.paths.empty()) return;
    const auto waited = Clock::now() - start;
    if ((give_up != nullptr && give_up->load()) ||
        (options_.unmount_wait_ms >= 0 &&
         waited >= std::chrono::milliseconds(options_.unmount_wait_ms))) {
      return;
    }
    if (Clock::now() >= next_note) {
      std::string files;
      for (size_t i = 0; i < unsent.paths.size() && i < 8; ++i) {
        files += (i == 0 ? "" : ", ") + unsent.paths[i];
      }
      if (unsent.paths.size() > 8) files += ", ...";
      ODAFS_LOG_WARN(
          "odafs: unmount is waiting for the server %s: %zu byte(s) of %zu file(s) (%s) were "
          "kept under write delegations and are not on it yet (waited %lld s; %s)",
          server_name().c_str(), unsent.bytes, unsent.paths.size(), files.c_str(),
          static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(waited).count()),
          options_.unmount_wait_ms < 0
              ? "waits until it answers; a signal, or unmount_wait_ms=N, gives up into rescue files"
              : "gives up into rescue files after unmount_wait_ms");
      next_note += std::chrono::seconds(5);
    }
    // A new mount reclaims them (ClientImpl::remount), or reports them: rescued meanwhile.
    Result<std::shared_ptr<const MountState>> mounted = mount_state();
    if (!mounted.ok()) {
      ODAFS_LOG_DEBUG("odafs: unmount: re-mounting to write back: %s",
                      mounted.status().to_string().c_str());
      // The pause a re-mount's retries take (mount_state), in steps a give-up ends.
      for (int i = 0; i < 5 && (give_up == nullptr || !give_up->load()); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
}

namespace {

// The TLS context of a mount's options (null without tls).
Result<std::shared_ptr<const tls::Context>> client_tls_context(const MountOptions& options,
                                                               const std::string& url) {
  if (!options.tls) return std::shared_ptr<const tls::Context>();
  Result<std::shared_ptr<const tls::Context>> context = tls::Context::make(
      tls::Context::Side::kClient, tls::Files{options.tls_cert, options.tls_key, options.tls_ca});
  if (!context.ok()) return Status(EINVAL, "mount " + url + ": " + context.status().message());
  return context;
}

}  // namespace

Result<std::shared_ptr<rpc::Channel>> server_channel(const Url& url, const MountOptions& options) {
  ODAFS_ASSIGN_OR_RETURN(std::shared_ptr<const tls::Context> context,
                         client_tls_context(options, url.server.to_string()));
  return connect_channel(url.server, channel_options(options, context, url.server.host));
}

std::unique_ptr<Client> Client::mount(const std::string& url, MountOptions options) {
  Url parsed = or_throw(parse_url(url));
  apply_url_options(parsed, &options);  // the URL's word wins
  std::unique_ptr<ClientImpl> client(
      new ClientImpl(url, options, or_throw(ClientImpl::make_owner())));
  client->tls_context_ = or_throw(client_tls_context(options, url));
  client->servers_ = parsed.servers;
  client->mount_path_ = parsed.path;
  or_throw(client->mount_state());  // connects and mounts
  return client;
}

Client::~Client() = default;

const ClientStats& ClientImpl::stats() const { return stats_; }

void ClientImpl::count_reads(const ReadCounts& counts) {
  auto add = [](std::atomic<uint64_t>& to, uint64_t n) {
    if (n != 0) to.fetch_add(n, std::memory_order_relaxed);
  };
  add(stats_.cache_hits, counts.cache_hits);
  add(stats_.ordma_reads, counts.ordma_reads);
  add(stats_.ordma_bytes, counts.ordma_bytes);
  add(stats_.fallbacks, counts.fallbacks);
  for (size_t f = 0; f < counts.faults.size(); ++f) add(stats_.faults[f], counts.faults[f]);
}
const MountOptions& ClientImpl::options() const { return options_; }
void ClientImpl::set_read_mode(ReadMode mode) { read_mode_.store(mode, std::memory_order_relaxed); }
ReadMode ClientImpl::read_mode() const { return read_mode_.load(std::memory_order_relaxed); }

Result<std::shared_ptr<const MountState>> ClientImpl::mount_state() {
  std::shared_ptr<const MountState> m = mount_.load();
  if (m && !m->channel->broken()) return m;
  std::lock_guard lock(remount_mu_);
  m = mount_.load();  // another thread may have re-mounted meanwhile
  if (m && !m->channel->broken()) return m;
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.reconnect_window_ms);
  auto pause = std::chrono::milliseconds(50);
  size_t tried = 0;  // servers tried since the last pause
  for (;;) {
    Result<std::shared_ptr<const MountState>> mounted = remount();
    const int err = mounted.errno_value();
    if (!server_unreachable(err)) return mounted;
    if (servers_.size() > 1) {  // the next server, at once, until each had its turn
      const net::Endpoint& from = servers_[server_index_];
      server_index_ = (server_index_ + 1) % servers_.size();
      ODAFS_LOG_WARN("odafs: %s cannot be reached (%s); failing over to %s",
                     from.to_string().c_str(), mounted.status().message().c_str(),
                     servers_[server_index_].to_string().c_str());
      if (++tried < servers_.size()) continue;
    }
    tried = 0;
    if (std::chrono::steady_clock::now() + pause > give_up) return mounted;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

Result<std::shared_ptr<const MountState>> ClientImpl::remount() {
  auto m = std::make_shared<MountState>();
  const net::Endpoint& server = servers_[server_index_];
  m->server_host = server.host;
  ODAFS_ASSIGN_OR_RETURN(
      m->channel, connect_channel(server, channel_options(options_, tls_context_, server.host)));
  mount_args args{};
  args.path = mount_path_.data();
  mount_res res{};
  XdrFree<mount_res> guard{to_xdrproc(xdr_mount_res), &res};
  ODAFS_RETURN_IF_ERROR(
      in_context(call<ODAFSPROC_MOUNT>(*m->channel, args, &res), "mount " + url_));
  ODAFS_RETURN_IF_ERROR(status_of(res.status, "mount " + url_));
  const mount_ok& ok = res.mount_res_u.ok;
  // The client sizes its cache and its requests from these: a server's word is not
  // enough to make it allocate gigabytes.
  if (ok.block_size < ODAFS_MINBLOCK || ok.block_size > ODAFS_MAXBLOCK ||
      (ok.block_size & (ok.block_size - 1)) != 0) {
    return Status(EPROTO, "mount " + url_ + ": server block size " + std::to_string(ok.block_size) +
                              " is not a power of two in [4096, 65536]");
  }
  m->root = get_fh(ok.root);
  ServerLimits& limits = m->limits;
  limits.block_size = ok.block_size;
  limits.max_read = std::clamp<uint32_t>(ok.max_read, 4096, ODAFS_MAXDATA);
  limits.max_write = std::clamp<uint32_t>(ok.max_write, 4096, ODAFS_MAXDATA);
  std::memcpy(limits.write_verifier.data(), ok.write_verf, limits.write_verifier.size());
  limits.engine = ok.engine != nullptr ? ok.engine : "";
  limits.engine_kind = ok.engine_kind != nullptr ? ok.engine_kind : "";
  m->session.id = limits.engine.empty() ? 0 : ok.session;
  std::memcpy(m->session.secret.data(), ok.session_secret, m->session.secret.size());
  m->cache = std::make_unique<ClientCache>(options_.directory_entries, options_.cache_blocks,
                                           limits.block_size, options_.cache_policy);
  m->dirs = std::make_unique<DirCache>(options_.dir_cache_ms, /*max_entries=*/4096);
  // The worker writes back on this mount only (m outlives its Delegations' worker).
  const MountState* mount = m.get();
  m->delegations = std::make_shared<Delegations>(
      m->channel.get(), m->cache.get(), server_name(), options_.delegated_bytes,
      options_.delegated_write_back_ms,
      [this, mount](const Handle& fh, const OpenFiles::Ref& kept) -> Result<bool> {
        OpenFiles::Ref sf = kept ? kept : open_files_.find(cache_key(fh));
        if (!sf) return false;
        Result<bool> wrote = write_back(*mount, fh, *sf);
        if (wrote.ok()) return wrote;
        // What the Delegations log names the file and the server.
        return Status(wrote.errno_value(),
                      sf->path() + " on " + server_name() + ": " + wrote.status().message());
      },
      [this](const Handle& fh, OpenFiles::Ref& sf) { open_files_.release(cache_key(fh), sf); },
      [this] { reconnect_soon(); },
      [this, mount](Delegations::Return& r) {
        adopt_unsent(HeldHandle{r.fh, mount->limits.write_verifier}, r.kept,
                     r.caller ? &*r.caller : nullptr, r.removing);
      });
  // Named, this client may be granted write delegations, and reclaim what the last mount's
  // kept if the server restarted: before anything else goes out on the new mount.
  ODAFS_ASSIGN_OR_RETURN(const bool may_reclaim, name_client(*m));
  if (std::shared_ptr<const MountState> old = mount_.load()) {
    reclaim(may_reclaim ? m.get() : nullptr, *old,
            "the server did not let this client reclaim them (its grace period was over, or "
            "it gave up this client's write delegations: the client was away too long)");
  }
  if (may_reclaim) {
    stat_res done{};
    ODAFS_RETURN_IF_ERROR(
        in_context(call<ODAFSPROC_RECLAIM_COMPLETE>(*m->channel, &done), "reclaim complete"));
  }
  std::weak_ptr<Delegations> delegations = m->delegations;
  m->channel->set_callback_handler([delegations](const rpc::CallHeader& h, XDR* args) {
    if (h.prog != ODAFS_CB_PROGRAM || h.vers != ODAFS_CB_V1 || h.proc != ODAFSCBPROC_RECALL) {
      ODAFS_LOG_WARN("odafs: ignoring a callback the client does not know (program %u, proc %u)",
                     h.prog, h.proc);
      return;
    }
    cb_recall_args a{};
    if (!xdr_cb_recall_args(args, &a)) return;
    if (auto d = delegations.lock()) d->recall(get_fh(a.fh), a.delegation);
  });
  std::shared_ptr<const MountState> published = std::move(m);
  mount_.store(published);
  mounts_.fetch_add(1, std::memory_order_release);
  return published;
}

Handle ClientImpl::root() const { return mount_.load()->root; }
ServerLimits ClientImpl::limits() const { return mount_.load()->limits; }
ClientCache* ClientImpl::cache() { return mount_.load()->cache.get(); }
size_t ClientImpl::directory_size() const { return mount_.load()->cache->size(); }

std::shared_ptr<ordma::EngineClient> ClientImpl::engine(const MountState& m) {
  ordma::EngineClientOptions eo;
  eo.same_host_shortcut = options_.same_host_shortcut;
  eo.timeout_ms = options_.timeout_ms;
  eo.tls = tls_context_;
  eo.tls_host = m.server_host;
  return m.engine.get(m.limits, m.session, eo);
}

std::shared_ptr<ordma::EngineClient> ClientImpl::engine_for_reads(const MountState& m) {
  return read_mode() == ReadMode::kOrdma ? engine(m) : nullptr;
}

uint64_t ClientImpl::session_for_reads(const MountState& m) const {
  return read_mode() == ReadMode::kOrdma ? m.session.id : 0;  // else: RPC-only measurement
}

std::string ClientImpl::engine_transport() const {
  std::shared_ptr<ordma::EngineClient> e = mount_.load()->engine.current();
  return e && !e->broken() ? e->transport() : "none";
}

bool ClientImpl::engine_connected() const {
  std::shared_ptr<ordma::EngineClient> e = mount_.load()->engine.current();
  return e && !e->broken();
}

void ClientImpl::forget_data(uint64_t key, uint64_t offset, uint64_t len) {
  if (len == 0) return;
  std::shared_ptr<const MountState> m = mount_.load();
  uint64_t bs = m->limits.block_size;
  m->cache->forget_data(key, offset / bs, (offset + len - 1) / bs);
}

}  // namespace odafs

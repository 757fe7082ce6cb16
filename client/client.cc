#include "client/client.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "client/client_cache.h"
#include "client/url.h"
#include "ordma/engine.h"
#include "proto/enums.h"
#include "proto/odafs_prot.h"
#include "proto/ref_xdr.h"
#include "proto/status.h"
#include "rpc/client_channel.h"
#include "rpc/xdr_util.h"

namespace odafs {
namespace {

using rpc::to_xdrproc;

// READ reply bytes before the payload when the call succeeds: accepted reply header
// (XID .. accept_stat), status, attributes (fixed size), eof, payload length.
constexpr size_t kFattrWireBytes = 80;
constexpr size_t kReadReplyHeaderBytes =
    rpc::Channel::kAcceptedReplyHeaderBytes + 4 + kFattrWireBytes + 4 + 4;

constexpr int kMaxSymlinkHops = 40;
constexpr size_t kLargestRecord = (16u << 20) + 8192;  // odafsd's largest --max-io + slack

[[noreturn]] void fail(int err, const std::string& what) {
  throw Error(err, what + ": " + std::strerror(err));
}

// Takes the enum by reference and reads its raw bits: a hostile reply may carry any
// 32-bit status, and loading one outside odafs_stat's enumerators is undefined behaviour.
void check(const odafs_stat& status, const std::string& what) {
  const auto raw = static_cast<int>(raw_enum(status));
  if (raw != ODAFS_OK) fail(errno_from_status(raw), what);
}

FileType file_type(const odafs_ftype& t) {
  switch (raw_enum(t)) {
    case ODAFS_DIR:
      return FileType::kDirectory;
    case ODAFS_LNK:
      return FileType::kSymlink;
    case ODAFS_BLK:
      return FileType::kBlock;
    case ODAFS_CHR:
      return FileType::kChar;
    case ODAFS_SOCK:
      return FileType::kSocket;
    case ODAFS_FIFO:
      return FileType::kFifo;
    default:
      return FileType::kRegular;
  }
}

Attr to_attr(const odafs_fattr& a) {
  Attr out;
  out.type = file_type(a.type);
  out.mode = a.mode;
  out.nlink = a.nlink;
  out.uid = a.uid;
  out.gid = a.gid;
  out.size = a.size;
  out.used = a.used;
  out.fileid = a.fileid;
  out.atime = {static_cast<time_t>(a.atime.seconds), static_cast<long>(a.atime.nseconds)};
  out.mtime = {static_cast<time_t>(a.mtime.seconds), static_cast<long>(a.mtime.nseconds)};
  out.ctime = {static_cast<time_t>(a.ctime.seconds), static_cast<long>(a.ctime.nseconds)};
  return out;
}

void put_fh(char* dst, const Handle& h) { std::memcpy(dst, h.data(), h.size()); }
Handle get_fh(const char* src) {
  Handle h;
  std::memcpy(h.data(), src, h.size());
  return h;
}

// Frees what decoding a result allocated, whatever path leaves the scope.
template <class T>
struct XdrFree {
  xdrproc_t proc;
  T* obj;
  ~XdrFree() { xdr_free(proc, reinterpret_cast<char*>(obj)); }
};

void check_name(const std::string& name) {
  if (name.size() > ODAFS_MAXNAMLEN) fail(ENAMETOOLONG, name.substr(0, 32) + "...");
}

}  // namespace

// ---------------------------------------------------------------- Client: connection

Client::Client(const std::string& url, MountOptions options)
    : url_(url), options_(options), read_mode_(options.read_mode) {}

Client::~Client() = default;

std::unique_ptr<Client> Client::mount(const std::string& url, MountOptions options) {
  Url parsed;
  try {
    parsed = parse_url(url);
  } catch (const std::invalid_argument& e) {
    throw Error(EINVAL, e.what());
  }
  if (parsed.timeout_ms) options.timeout_ms = *parsed.timeout_ms;  // the URL's word wins
  std::unique_ptr<Client> client(new Client(url, options));
  client->mount_path_ = parsed.path;
  client->channel();  // connects and mounts
  return client;
}

std::shared_ptr<rpc::Channel> Client::channel() {
  std::lock_guard lock(channel_mu_);
  if (channel_ && !channel_->broken()) return channel_;
  Url parsed = parse_url(url_);
  rpc::Channel::Options o;
  o.program = ODAFS_PROGRAM;
  o.version = ODAFS_V1;
  o.max_record = kLargestRecord;
  o.timeout_ms = options_.timeout_ms;
  if (options_.auth_sys) {
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
  std::shared_ptr<rpc::Channel> ch;
  try {
    ch = std::make_shared<rpc::Channel>(parsed.server, o);
  } catch (const std::system_error& e) {
    throw Error(e.code().value() ? e.code().value() : ECONNREFUSED, e.what());
  }
  // (Re)mount: after a server restart the old root handle is stale.
  mount_args args{};
  args.path = mount_path_.data();
  mount_res res{};
  XdrFree<mount_res> guard{to_xdrproc(xdr_mount_res), &res};
  try {
    ch->call(ODAFSPROC_MOUNT, to_xdrproc(xdr_mount_args), &args, to_xdrproc(xdr_mount_res), &res);
  } catch (const rpc::RpcError& e) {
    throw Error(e.code().value(), std::string("mount ") + url_ + ": " + e.what());
  }
  check(res.status, "mount " + url_);
  const mount_ok& ok = res.mount_res_u.ok;
  root_ = get_fh(ok.root);
  // The client sizes its cache and its requests from these: a server's word is not
  // enough to make it allocate gigabytes.
  if (ok.block_size < ODAFS_MINBLOCK || ok.block_size > ODAFS_MAXBLOCK ||
      (ok.block_size & (ok.block_size - 1)) != 0) {
    fail(EPROTO, "mount " + url_ + ": server block size " + std::to_string(ok.block_size) +
                     " is not a power of two in [4096, 65536]");
  }
  limits_.block_size = ok.block_size;
  limits_.max_read = std::clamp<uint32_t>(ok.max_read, 4096, ODAFS_MAXDATA);
  limits_.max_write = std::clamp<uint32_t>(ok.max_write, 4096, ODAFS_MAXDATA);
  std::memcpy(limits_.write_verifier.data(), ok.write_verf, limits_.write_verifier.size());
  limits_.engine = ok.engine != nullptr ? ok.engine : "";
  limits_.engine_kind = ok.engine_kind != nullptr ? ok.engine_kind : "";
  // A new mount is a new engine session: references from the old one would all fault.
  session_id_ = limits_.engine.empty() ? 0 : ok.session;
  std::memcpy(session_secret_.data(), ok.session_secret, session_secret_.size());
  engine_.reset();
  engine_failed_ = false;
  if (!cache_ || cache_->block_size() != limits_.block_size) {
    cache_ = std::make_unique<ClientCache>(options_.directory_entries, options_.cache_blocks,
                                           limits_.block_size);
  }
  cache_->clear();
  channel_ = ch;
  return channel_;
}

template <class Fn>
auto Client::with_channel(bool idempotent, Fn&& fn) -> decltype(fn(std::declval<rpc::Channel&>())) {
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<rpc::Channel> ch = channel();
    try {
      return fn(*ch);
    } catch (const rpc::RpcError& e) {
      bool lost = e.kind() == rpc::RpcError::Kind::kTransport && ch->broken();
      if (lost && idempotent && attempt == 0) {
        ODAFS_LOG_WARN("odafs: connection lost (%s); reconnecting", e.what());
        continue;
      }
      throw Error(e.code().value(), e.what());
    }
  }
}

Handle Client::root() const {
  std::lock_guard lock(channel_mu_);
  return root_;
}

// ---------------------------------------------------------------- Client: handle calls

std::pair<Handle, Attr> Client::lookup(const Handle& dir, const std::string& name) {
  check_name(name);
  return with_channel(true, [&](rpc::Channel& ch) {
    diropargs args{};
    put_fh(args.dir, dir);
    args.name = const_cast<char*>(name.c_str());
    dirop_res res{};
    ch.call(ODAFSPROC_LOOKUP, to_xdrproc(xdr_diropargs), &args, to_xdrproc(xdr_dirop_res), &res);
    check(res.status, "lookup " + name);
    return std::make_pair(get_fh(res.dirop_res_u.ok.fh), to_attr(res.dirop_res_u.ok.attr));
  });
}

Attr Client::getattr(const Handle& fh) {
  return with_channel(true, [&](rpc::Channel& ch) {
    getattr_args args{};
    put_fh(args.fh, fh);
    attr_res res{};
    ch.call(ODAFSPROC_GETATTR, to_xdrproc(xdr_getattr_args), &args, to_xdrproc(xdr_attr_res), &res);
    check(res.status, "getattr");
    return to_attr(res.attr_res_u.attr);
  });
}

// Decodes a READ reply whose RPC header `x` is past; the payload is already in buf when
// the reply came pre-posted, else it is copied out of the reply here. References in the
// trailer go into the directory (when there is one).
static size_t decode_read_reply(const rpc::Call& call, XDR* x, void* buf, size_t len, bool* eof,
                                ClientCache* directory, ClientStats* stats) {
  odafs_stat status;
  odafs_fattr attr;
  bool_t at_eof = FALSE;
  u_int n = 0;
  if (!xdr_odafs_stat(x, &status)) fail(EPROTO, "read: malformed reply");
  check(status, "read");
  if (!xdr_odafs_fattr(x, &attr) || !xdr_bool(x, &at_eof) || !xdr_u_int(x, &n) || n > len) {
    fail(EPROTO, "read: malformed reply");
  }
  if (std::optional<size_t> posted = call.posted_length()) {
    if (*posted != n) fail(EPROTO, "read: posted length mismatch");
  } else if (!xdr_opaque(x, static_cast<char*>(buf), n)) {
    fail(EPROTO, "read: truncated reply");
  }
  u_int nrefs = 0;
  if (!xdr_u_int(x, &nrefs) || nrefs > ODAFS_MAXREFS) fail(EPROTO, "read: malformed references");
  for (u_int i = 0; i < nrefs; ++i) {
    odafs_ref wire{};
    if (!xdr_odafs_ref(x, &wire)) fail(EPROTO, "read: malformed references");
    if (directory == nullptr) continue;
    directory->insert(attr.fileid, wire.block, ordma::reference_from_wire(wire));
    stats->refs_received.fetch_add(1, std::memory_order_relaxed);
  }
  if (eof != nullptr) *eof = at_eof;
  return n;
}

size_t Client::read_chunk(rpc::Call& call, const Handle& fh, void* buf, size_t len, uint64_t offset,
                          bool* eof) {
  read_args args{};
  put_fh(args.fh, fh);
  args.offset = offset;
  args.count = static_cast<u_int>(len);
  args.session = session_for_reads();
  stats_.rpc_reads.fetch_add(1, std::memory_order_relaxed);
  return with_channel(true, [&](rpc::Channel& ch) -> size_t {
    if (read_mode() != ReadMode::kInline) call.post(buf, len, kReadReplyHeaderBytes);
    ch.start(call, ODAFSPROC_READ, to_xdrproc(xdr_read_args), &args);
    XDR x;
    ch.wait(call, &x);
    return decode_read_reply(call, &x, buf, len, eof, cache_.get(), &stats_);
  });
}

AsyncRead::AsyncRead() : call_(std::make_unique<rpc::Call>()) {}
AsyncRead::AsyncRead(AsyncRead&& other) noexcept
    : call_(std::move(other.call_)),
      channel_(std::move(other.channel_)),
      buf_(other.buf_),
      len_(other.len_),
      in_flight_(std::exchange(other.in_flight_, false)) {}
AsyncRead::~AsyncRead() {
  if (in_flight_) {
    // The reply would land in a buffer nobody waits for: collect it first.
    try {
      XDR x;
      channel_->wait(*call_, &x);
    } catch (const std::exception&) {
    }
  }
}

void Client::start_read(AsyncRead& op, const Handle& fh, void* buf, size_t len, uint64_t offset) {
  if (op.in_flight_) fail(EBUSY, "start_read: the AsyncRead is in flight");
  if (len > limits_.max_read) fail(EINVAL, "start_read: longer than the server's max_read");
  read_args args{};
  put_fh(args.fh, fh);
  args.offset = offset;
  args.count = static_cast<u_int>(len);
  args.session = session_for_reads();
  op.channel_ = channel();
  op.buf_ = buf;
  op.len_ = len;
  if (read_mode() != ReadMode::kInline) op.call_->post(buf, len, kReadReplyHeaderBytes);
  try {
    op.channel_->start(*op.call_, ODAFSPROC_READ, to_xdrproc(xdr_read_args), &args);
  } catch (const rpc::RpcError& e) {
    throw Error(e.code().value(), e.what());
  }
  op.in_flight_ = true;
}

size_t Client::finish_read(AsyncRead& op, bool* eof) {
  if (!op.in_flight_) fail(EINVAL, "finish_read: nothing in flight");
  op.in_flight_ = false;
  try {
    XDR x;
    op.channel_->wait(*op.call_, &x);
    return decode_read_reply(*op.call_, &x, op.buf_, op.len_, eof, cache_.get(), &stats_);
  } catch (const rpc::RpcError& e) {
    throw Error(e.code().value(), e.what());
  }
}

size_t Client::read(const Handle& fh, void* buf, size_t len, uint64_t offset, bool* eof) {
  thread_local rpc::Call call;
  size_t done = 0;
  *eof = false;
  while (done < len && !*eof) {
    size_t chunk = std::min<size_t>(len - done, limits_.max_read);
    size_t n = read_chunk(call, fh, static_cast<char*>(buf) + done, chunk, offset + done, eof);
    done += n;
    if (n < chunk) break;
  }
  return done;
}

size_t Client::write(const Handle& fh, const void* buf, size_t len, uint64_t offset, Stability how,
                     WriteVerifier* verf, int* committed) {
  return with_channel(true, [&](rpc::Channel& ch) {
    write_args args{};
    put_fh(args.fh, fh);
    args.offset = offset;
    args.stable = static_cast<odafs_stable_how>(how);
    args.data.data_len = static_cast<u_int>(len);
    args.data.data_val = static_cast<char*>(const_cast<void*>(buf));
    write_res res{};
    ch.call(ODAFSPROC_WRITE, to_xdrproc(xdr_write_args), &args, to_xdrproc(xdr_write_res), &res);
    check(res.status, "write");
    std::memcpy(verf->data(), res.write_res_u.ok.verf, verf->size());
    *committed = static_cast<int>(raw_enum(res.write_res_u.ok.committed));
    if (res.write_res_u.ok.count == 0 && len > 0) fail(EIO, "write: server wrote nothing");
    return static_cast<size_t>(res.write_res_u.ok.count);
  });
}

WriteVerifier Client::commit(const Handle& fh) {
  return with_channel(true, [&](rpc::Channel& ch) {
    commit_args args{};
    put_fh(args.fh, fh);
    commit_res res{};
    ch.call(ODAFSPROC_COMMIT, to_xdrproc(xdr_commit_args), &args, to_xdrproc(xdr_commit_res), &res);
    check(res.status, "commit");
    WriteVerifier v;
    std::memcpy(v.data(), res.commit_res_u.verf, v.size());
    return v;
  });
}

void Client::setattr_size(const Handle& fh, uint64_t size) {
  with_channel(true, [&](rpc::Channel& ch) {
    setattr_args args{};
    put_fh(args.fh, fh);
    args.size.set = TRUE;
    args.size.odafs_set_u64_u.value = size;
    attr_res res{};
    ch.call(ODAFSPROC_SETATTR, to_xdrproc(xdr_setattr_args), &args, to_xdrproc(xdr_attr_res), &res);
    check(res.status, "truncate");
  });
}

// ---------------------------------------------------------------- Client: one-sided reads

uint64_t Client::session_for_reads() const {
  if (read_mode() != ReadMode::kOrdma) return 0;  // RPC-only measurement modes
  std::lock_guard lock(channel_mu_);
  return session_id_;
}

std::shared_ptr<ordma::EngineClient> Client::engine() {
  std::lock_guard lock(channel_mu_);
  if (engine_ && !engine_->broken()) return engine_;
  if (engine_failed_ || session_id_ == 0 || limits_.engine.empty()) return nullptr;
  ordma::Session session;
  session.id = session_id_;
  std::memcpy(session.secret.data(), session_secret_.data(), session.secret.size());
  try {
    ordma::EngineClientOptions eo;
    eo.local_rings = options_.local_rings;
    eo.timeout_ms = options_.timeout_ms;
    engine_ = ordma::connect_engine(limits_.engine_kind, net::parse_endpoint(limits_.engine),
                                    session, eo);
  } catch (const std::exception& e) {
    // Reads go by RPC for the rest of this mount; a re-mount tries again.
    ODAFS_LOG_WARN("odafs: one-sided engine at %s unusable (%s); reading by RPC",
                   limits_.engine.c_str(), e.what());
    engine_.reset();
    engine_failed_ = true;
  }
  return engine_;
}

std::string Client::engine_transport() const {
  std::lock_guard lock(channel_mu_);
  return engine_ && !engine_->broken() ? engine_->transport() : "none";
}

bool Client::engine_connected() const {
  std::lock_guard lock(channel_mu_);
  return engine_ && !engine_->broken();
}

size_t Client::directory_size() const { return cache_ ? cache_->size() : 0; }

size_t Client::read_file(const Handle& fh, uint64_t fileid, void* buf, size_t len,
                         uint64_t offset) {
  if (read_mode() == ReadMode::kDirect) return read_direct(fh, buf, len, offset);
  if (cache_->data_capacity() > 0) return read_file_cached(fh, fileid, buf, len, offset);
  bool eof = false;
  if (read_mode() != ReadMode::kOrdma) return read(fh, buf, len, offset, &eof);
  std::shared_ptr<ordma::EngineClient> eng = engine();
  if (!eng) return read(fh, buf, len, offset, &eof);
  const uint64_t bs = limits_.block_size;
  auto* out = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    uint64_t pos = offset + done;
    uint64_t block = pos / bs;
    uint32_t in_block = static_cast<uint32_t>(pos % bs);
    size_t chunk = std::min<size_t>(bs - in_block, len - done);
    ordma::Reference ref;
    if (cache_->find(fileid, block, &ref) && ref.length > in_block) {
      uint32_t want = static_cast<uint32_t>(std::min<size_t>(chunk, ref.length - in_block));
      uint32_t got = 0;
      ordma::Fault f = eng->read(ref, ref.offset + in_block, want, out + done, &got);
      if (f == ordma::Fault::kNone) {
        stats_.ordma_reads.fetch_add(1, std::memory_order_relaxed);
        stats_.ordma_bytes.fetch_add(got, std::memory_order_relaxed);
        done += got;
        if (got == chunk) continue;
        // The reference covers the block only up to its valid bytes when it was issued:
        // past them lies EOF or newer data, which the RPC below settles.
      } else {
        stats_.faults[static_cast<size_t>(f)].fetch_add(1, std::memory_order_relaxed);
        stats_.fallbacks.fetch_add(1, std::memory_order_relaxed);
        cache_->drop(fileid, block);
        if (f == ordma::Fault::kTransport) eng.reset();
      }
    }
    // RPC from here over the following blocks the directory does not map (one call
    // instead of one per block); its reply brings their references.
    uint64_t end_block = block + 1;
    uint64_t last_block = (offset + len - 1) / bs;
    while (end_block <= last_block && (end_block - block) * bs < limits_.max_read &&
           !cache_->contains(fileid, end_block)) {
      ++end_block;
    }
    size_t span = std::min<size_t>(
        {len - done, end_block * bs - (offset + done), static_cast<size_t>(limits_.max_read)});
    thread_local rpc::Call call;
    size_t n = read_chunk(call, fh, out + done, span, offset + done, &eof);
    stats_.rpc_bytes.fetch_add(n, std::memory_order_relaxed);
    done += n;
    if (n < span) break;  // end of file
    if (!eng) {
      eng = engine();
      if (!eng) return done + read(fh, out + done, len - done, offset + done, &eof);
    }
  }
  return done;
}

size_t Client::read_file_cached(const Handle& fh, uint64_t fileid, void* buf, size_t len,
                                uint64_t offset) {
  const uint64_t bs = limits_.block_size;
  std::shared_ptr<ordma::EngineClient> eng = read_mode() == ReadMode::kOrdma ? engine() : nullptr;
  thread_local std::vector<char> scratch;
  thread_local rpc::Call call;
  auto* out = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    uint64_t pos = offset + done;
    uint64_t block = pos / bs;
    uint32_t in_block = static_cast<uint32_t>(pos % bs);
    uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(bs - in_block, len - done));
    if (cache_->read(fileid, block, in_block, chunk, out + done)) {
      stats_.cache_hits.fetch_add(1, std::memory_order_relaxed);
      done += chunk;
      continue;
    }
    uint64_t ticket = cache_->data_ticket();  // before the fetch: see ClientCache::store
    ordma::Reference ref;
    if (eng && cache_->find(fileid, block, &ref) && ref.length > in_block) {
      // The whole block travels one-sided and stays in the cache.
      scratch.resize(bs);
      uint32_t got = 0;
      ordma::Fault f = eng->read(ref, ref.offset, ref.length, scratch.data(), &got);
      if (f == ordma::Fault::kNone) {
        stats_.ordma_reads.fetch_add(1, std::memory_order_relaxed);
        stats_.ordma_bytes.fetch_add(got, std::memory_order_relaxed);
        cache_->store(fileid, block, scratch.data(), got, ticket);
        uint32_t n = std::min<uint32_t>(chunk, got - in_block);
        std::memcpy(out + done, scratch.data() + in_block, n);
        done += n;
        continue;  // bytes past the reference's length: the next round goes by RPC
      }
      stats_.faults[static_cast<size_t>(f)].fetch_add(1, std::memory_order_relaxed);
      stats_.fallbacks.fetch_add(1, std::memory_order_relaxed);
      cache_->drop(fileid, block);
      if (f == ordma::Fault::kTransport) eng.reset();
    }
    // RPC over this block and the following ones neither cached nor mapped, block-aligned,
    // so whole blocks come back for the cache.
    uint64_t last_block = (offset + len - 1) / bs;
    uint64_t end_block = block + 1;
    while (end_block <= last_block && (end_block + 1 - block) * bs <= limits_.max_read &&
           !cache_->has_data(fileid, end_block) && !(eng && cache_->contains(fileid, end_block))) {
      ++end_block;
    }
    size_t span = std::min<size_t>((end_block - block) * bs, limits_.max_read);
    scratch.resize(std::max<size_t>(span, bs));
    bool eof = false;
    size_t n = read_chunk(call, fh, scratch.data(), span, block * bs, &eof);
    stats_.rpc_bytes.fetch_add(n, std::memory_order_relaxed);
    for (size_t b = 0; b * bs < n; ++b) {
      size_t valid = std::min<size_t>(bs, n - b * bs);
      if (valid == bs || n < span || eof) {
        cache_->store(fileid, block + b, scratch.data() + b * bs, static_cast<uint32_t>(valid),
                      ticket);
      }
    }
    size_t take = n > in_block ? std::min<size_t>(n - in_block, len - done) : 0;
    std::memcpy(out + done, scratch.data() + in_block, take);
    done += take;
    if (n < span || take == 0) break;  // end of file
    if (!eng && read_mode() == ReadMode::kOrdma) eng = engine();
  }
  return done;
}

size_t Client::read_direct(const Handle& fh, void* buf, size_t len, uint64_t offset) {
  std::shared_ptr<ordma::EngineClient> eng = engine();
  uint64_t session;
  {
    std::lock_guard lock(channel_mu_);
    session = session_id_;
  }
  bool eof = false;
  if (!eng || session == 0) return read(fh, buf, len, offset, &eof);  // no engine: RPC
  // Registration is client-local: the id travels in the RPC, the server's engine writes.
  struct Registration {
    ordma::EngineClient* eng;
    uint32_t id;
    ~Registration() { eng->unregister_buffer(id); }
  } reg{eng.get(), eng->register_buffer(buf, len)};
  size_t done = 0;
  while (done < len) {
    size_t chunk = std::min<size_t>(len - done, limits_.max_read);
    u_int count = 0;
    uint32_t got = 0;
    ordma::Fault f = eng->direct(
        [&](uint32_t tag) {
          with_channel(false, [&](rpc::Channel& ch) {
            read_direct_args args{};
            put_fh(args.fh, fh);
            args.offset = offset + done;
            args.count = static_cast<u_int>(chunk);
            args.session = session;
            args.buffer = reg.id;
            args.buffer_offset = static_cast<u_int>(done);
            args.tag = tag;
            read_direct_res res{};
            ch.call(ODAFSPROC_READ_DIRECT, to_xdrproc(xdr_read_direct_args), &args,
                    to_xdrproc(xdr_read_direct_res), &res);
            check(res.status, "read_direct");
            count = res.read_direct_res_u.ok.count;
            eof = res.read_direct_res_u.ok.eof;
          });
        },
        &got);
    if (f != ordma::Fault::kNone) fail(EIO, std::string("read_direct: ") + ordma::fault_name(f));
    if (got != count || count > chunk) fail(EPROTO, "read_direct: transfer length mismatch");
    stats_.direct_reads.fetch_add(1, std::memory_order_relaxed);
    stats_.direct_bytes.fetch_add(count, std::memory_order_relaxed);
    done += count;
    if (count < chunk) break;  // end of file
  }
  return done;
}

size_t Client::write_direct(const Handle& fh, const void* buf, size_t len, uint64_t offset,
                            Stability how, WriteVerifier* verf, int* committed) {
  std::shared_ptr<ordma::EngineClient> eng = engine();
  uint64_t session;
  {
    std::lock_guard lock(channel_mu_);
    session = session_id_;
  }
  if (!eng || session == 0) return write(fh, buf, len, offset, how, verf, committed);
  struct Registration {
    ordma::EngineClient* eng;
    uint32_t id;
    ~Registration() { eng->unregister_buffer(id); }
  } reg{eng.get(), eng->register_buffer(const_cast<void*>(buf), len)};
  std::shared_ptr<rpc::Channel> ch = channel();
  thread_local rpc::Call call;
  write_direct_args args{};
  put_fh(args.fh, fh);
  args.offset = offset;
  args.stable = static_cast<odafs_stable_how>(how);
  args.count = static_cast<u_int>(len);
  args.session = session;
  args.buffer = reg.id;
  uint32_t got = 0;
  ordma::Fault f;
  try {
    // Start the call, then serve the server's pull while its reply is outstanding.
    f = eng->direct(
        [&](uint32_t tag) {
          args.tag = tag;
          ch->start(call, ODAFSPROC_WRITE_DIRECT, to_xdrproc(xdr_write_direct_args), &args);
        },
        &got);
    XDR x;
    ch->wait(call, &x);
    write_res res{};
    if (!xdr_write_res(&x, &res)) fail(EPROTO, "write_direct: malformed reply");
    // No engine, or every direct-write place taken: nothing was written; write by RPC.
    if (raw_enum(res.status) == ODAFS_ERR_NOTSUPP) return write(fh, buf, len, offset, how, verf, committed);
    check(res.status, "write_direct");
    if (f != ordma::Fault::kNone) fail(EIO, std::string("write_direct: ") + ordma::fault_name(f));
    std::memcpy(verf->data(), res.write_res_u.ok.verf, verf->size());
    *committed = static_cast<int>(raw_enum(res.write_res_u.ok.committed));
    stats_.direct_writes.fetch_add(1, std::memory_order_relaxed);
    if (res.write_res_u.ok.count == 0 && len > 0) fail(EIO, "write_direct: server wrote nothing");
    return res.write_res_u.ok.count;
  } catch (const rpc::RpcError& e) {
    throw Error(e.code().value(), e.what());
  }
}

size_t Client::prefetch_references(const File& f, uint64_t offset, uint64_t len) {
  uint64_t session = session_for_reads();
  if (session == 0) return 0;
  size_t total = 0;
  for (uint64_t done = 0; done < len;) {
    uint64_t span = std::min<uint64_t>(len - done, limits_.max_read);
    size_t got = with_channel(true, [&](rpc::Channel& ch) -> size_t {
      getrefs_args args{};
      put_fh(args.fh, f.handle());
      args.offset = offset + done;
      args.count = static_cast<u_int>(span);
      args.session = session;
      getrefs_res res{};
      XdrFree<getrefs_res> guard{to_xdrproc(xdr_getrefs_res), &res};
      ch.call(ODAFSPROC_GETREFS, to_xdrproc(xdr_getrefs_args), &args, to_xdrproc(xdr_getrefs_res),
              &res);
      if (raw_enum(res.status) == ODAFS_ERR_NOTSUPP) return 0;
      check(res.status, "getrefs " + f.path());
      const getrefs_ok& ok = res.getrefs_res_u.ok;
      for (u_int i = 0; i < ok.refs.refs_len; ++i) {
        const odafs_ref& w = ok.refs.refs_val[i];
        cache_->insert(f.fileid_, w.block, ordma::reference_from_wire(w));
      }
      stats_.refs_received.fetch_add(ok.refs.refs_len, std::memory_order_relaxed);
      return ok.refs.refs_len;
    });
    if (got == 0) break;
    total += got;
    done += span;
  }
  return total;
}

// ---------------------------------------------------------------- Client: paths

std::pair<Handle, Attr> Client::resolve(const std::string& path, bool follow_last) {
  // A server restart makes every handle stale, the mount root's too. The client re-mounts
  // on its next call, so a walk that started before it meets ESTALE from an old handle:
  // it then starts over, once, from the new root.
  Handle start = root();
  try {
    return walk(path, follow_last, start);
  } catch (const Error& e) {
    if (e.errno_value() != ESTALE || root() == start) throw;
  }
  return walk(path, follow_last, root());
}

std::pair<Handle, Attr> Client::walk(const std::string& path, bool follow_last,
                                     const Handle& start) {
  std::vector<std::string> todo = split_path(path);
  std::reverse(todo.begin(), todo.end());  // a stack: back() is the next component
  Handle cur = start;
  std::optional<Attr> attr;
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
      continue;
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
  auto [dir, attr] = resolve(dir_path, true);
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

File Client::open(const std::string& path, int flags, mode_t mode) {
  Handle fh;
  Attr attr;
  bool created = false;
  if (flags & O_CREAT) {
    auto [dir, name] = resolve_parent(path);
    try {
      std::tie(fh, attr) = with_channel(false, [&, &dir = dir, &name = name](rpc::Channel& ch) {
        create_args args{};
        put_fh(args.dir, dir);
        args.name = name.data();
        args.mode = mode & 07777;
        args.how = (flags & O_EXCL) ? ODAFS_CREATE_EXCLUSIVE : ODAFS_CREATE_UNCHECKED;
        dirop_res res{};
        ch.call(ODAFSPROC_CREATE, to_xdrproc(xdr_create_args), &args, to_xdrproc(xdr_dirop_res),
                &res);
        check(res.status, "create " + path);
        return std::make_pair(get_fh(res.dirop_res_u.ok.fh), to_attr(res.dirop_res_u.ok.attr));
      });
      created = true;
    } catch (const Error& e) {
      // A symlink at the name: POSIX open(O_CREAT) without O_EXCL follows it.
      if (e.errno_value() != EEXIST || (flags & O_EXCL)) throw;
    }
  }
  if (!created) std::tie(fh, attr) = resolve(path, true);
  cache_->revalidate(attr.fileid, attr.mtime, attr.ctime, attr.size);  // close-to-open
  int access = flags & O_ACCMODE;
  if (attr.type == FileType::kDirectory && access != O_RDONLY) fail(EISDIR, path);
  if ((flags & O_DIRECTORY) && attr.type != FileType::kDirectory) fail(ENOTDIR, path);
  if ((flags & O_TRUNC) && access != O_RDONLY && attr.type == FileType::kRegular && attr.size) {
    setattr_size(fh, 0);
    cache_->forget_file_data(attr.fileid);
  }
  return File(this, fh, attr.fileid, path, flags);
}

Attr Client::stat(const std::string& path) { return resolve(path, true).second; }
Attr Client::lstat(const std::string& path) { return resolve(path, false).second; }

void Client::mkdir(const std::string& path, mode_t mode) {
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
}

void Client::remove_name(const std::string& path, uint32_t proc, const char* what) {
  auto [dir, name] = resolve_parent(path);
  with_channel(false, [&, &dir = dir, &name = name](rpc::Channel& ch) {
    diropargs args{};
    put_fh(args.dir, dir);
    args.name = name.data();
    stat_res res{};
    ch.call(proc, to_xdrproc(xdr_diropargs), &args, to_xdrproc(xdr_stat_res), &res);
    check(res.status, std::string(what) + " " + path);
  });
}

void Client::rmdir(const std::string& path) { remove_name(path, ODAFSPROC_RMDIR, "rmdir"); }
void Client::unlink(const std::string& path) { remove_name(path, ODAFSPROC_REMOVE, "unlink"); }

void Client::rename(const std::string& from, const std::string& to) {
  auto [from_dir, from_name] = resolve_parent(from);
  auto [to_dir, to_name] = resolve_parent(to);
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
}

std::vector<DirEntry> Client::readdir(const std::string& path) {
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
      readdir_res res{};
      XdrFree<readdir_res> guard{to_xdrproc(xdr_readdir_res), &res};
      ch.call(ODAFSPROC_READDIR, to_xdrproc(xdr_readdir_args), &args, to_xdrproc(xdr_readdir_res),
              &res);
      check(res.status, "readdir " + path);
      const readdir_ok& ok = res.readdir_res_u.ok;
      for (u_int i = 0; i < ok.entries.entries_len; ++i) {
        const odafs_dirent& e = ok.entries.entries_val[i];
        out.push_back(DirEntry{e.name, file_type(e.type), e.fileid});
        cookie = e.cookie;
      }
      eof = ok.eof || ok.entries.entries_len == 0;
    });
  }
  return out;
}

void Client::truncate(const std::string& path, uint64_t size) {
  auto [fh, attr] = resolve(path, true);
  if (attr.type == FileType::kDirectory) fail(EISDIR, path);
  setattr_size(fh, size);
  cache_->forget_file_data(attr.fileid);
}

void Client::chmod(const std::string& path, mode_t mode) {
  auto [fh, attr] = resolve(path, true);
  with_channel(true, [&, &fh = fh](rpc::Channel& ch) {
    setattr_args args{};
    put_fh(args.fh, fh);
    args.mode.set = TRUE;
    args.mode.odafs_set_u32_u.value = mode & 07777;
    attr_res res{};
    ch.call(ODAFSPROC_SETATTR, to_xdrproc(xdr_setattr_args), &args, to_xdrproc(xdr_attr_res), &res);
    check(res.status, "chmod " + path);
  });
}

void Client::utimens(const std::string& path, const struct timespec times[2]) {
  auto [fh, attr] = resolve(path, true);
  with_channel(true, [&, &fh = fh](rpc::Channel& ch) {
    setattr_args args{};
    put_fh(args.fh, fh);
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
    attr_res res{};
    ch.call(ODAFSPROC_SETATTR, to_xdrproc(xdr_setattr_args), &args, to_xdrproc(xdr_attr_res), &res);
    check(res.status, "utimens " + path);
  });
}

void Client::symlink(const std::string& target, const std::string& path) {
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
}

std::string Client::readlink(const std::string& path) {
  auto [fh, attr] = resolve(path, false);
  if (attr.type != FileType::kSymlink) fail(EINVAL, path);
  return readlink_handle(fh);
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

void Client::ping() {
  with_channel(true, [&](rpc::Channel& ch) {
    ch.call(ODAFSPROC_NULL, to_xdrproc(rpc::xdr_nothing), nullptr, to_xdrproc(rpc::xdr_nothing),
            nullptr);
  });
}

std::vector<std::pair<std::string, uint64_t>> Client::server_stats() {
  return with_channel(true, [&](rpc::Channel& ch) {
    stats_res res{};
    XdrFree<stats_res> guard{to_xdrproc(xdr_stats_res), &res};
    ch.call(ODAFSPROC_STATS, to_xdrproc(rpc::xdr_nothing), nullptr, to_xdrproc(xdr_stats_res),
            &res);
    std::vector<std::pair<std::string, uint64_t>> out;
    for (u_int i = 0; i < res.counters.counters_len; ++i) {
      out.emplace_back(res.counters.counters_val[i].name, res.counters.counters_val[i].value);
    }
    return out;
  });
}

void Client::read_batch(std::span<ReadRequest> requests) {
  struct Piece {
    ReadRequest* req;
    char* buf;
    size_t len;
    uint64_t offset;
  };
  std::vector<Piece> pieces;
  for (ReadRequest& r : requests) {
    r.result = 0;
    r.error = 0;
    for (size_t done = 0; done < r.len;) {
      size_t chunk = std::min<size_t>(r.len - done, limits_.max_read);
      pieces.push_back({&r, static_cast<char*>(r.buf) + done, chunk, r.offset + done});
      done += chunk;
    }
  }
  constexpr size_t kWindow = 64;  // reads in flight at once
  std::vector<AsyncRead> ops(std::min(kWindow, pieces.size()));
  auto launch = [&](size_t i) {
    Piece& p = pieces[i];
    if (p.req->error != 0) return;
    try {
      start_read(ops[i % ops.size()], p.req->file->handle(), p.buf, p.len, p.offset);
    } catch (const Error& e) {
      p.req->error = e.errno_value();
    }
  };
  for (size_t i = 0; i < ops.size(); ++i) launch(i);
  for (size_t i = 0; i < pieces.size(); ++i) {
    AsyncRead& op = ops[i % ops.size()];
    if (op.in_flight()) {
      try {
        pieces[i].req->result += finish_read(op);
      } catch (const Error& e) {
        pieces[i].req->error = e.errno_value();
      }
    }
    if (i + ops.size() < pieces.size()) launch(i + ops.size());
  }
}

// ---------------------------------------------------------------- File

File::File(Client* client, Handle fh, uint64_t fileid, std::string path, int flags)
    : client_(client), fh_(fh), fileid_(fileid), path_(std::move(path)), flags_(flags) {}

File::File(File&& other) noexcept { *this = std::move(other); }

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (client_ != nullptr) {
      try {
        close();
      } catch (const std::exception& e) {
        ODAFS_LOG_WARN("odafs: closing %s: %s", path_.c_str(), e.what());
      }
    }
    client_ = std::exchange(other.client_, nullptr);
    fh_ = other.fh_;
    fileid_ = other.fileid_;
    path_ = std::move(other.path_);
    flags_ = other.flags_;
    unstable_ = other.unstable_;
    verifier_ = other.verifier_;
    verifier_changed_ = other.verifier_changed_;
  }
  return *this;
}

File::~File() {
  if (client_ == nullptr) return;
  try {
    close();
  } catch (const std::exception& e) {
    ODAFS_LOG_WARN("odafs: closing %s: %s", path_.c_str(), e.what());
  }
}

template <class Fn>
auto File::retry_stale(Fn&& fn) -> decltype(fn()) {
  if (client_ == nullptr) fail(EBADF, "file is closed");
  try {
    return fn();
  } catch (const Error& e) {
    if (e.errno_value() != ESTALE) throw;
    // The server restarted or forgot the handle: find the file again by its path.
    Handle fresh = client_->resolve(path_, true).first;
    if (fresh == fh_) throw;
    fh_ = fresh;
    return fn();
  }
}

size_t File::pread(void* buf, size_t len, uint64_t offset) {
  if ((flags_ & O_ACCMODE) == O_WRONLY) fail(EBADF, "pread on a write-only file");
  return retry_stale([&] { return client_->read_file(fh_, fileid_, buf, len, offset); });
}

size_t File::pwrite(const void* buf, size_t len, uint64_t offset) {
  if ((flags_ & O_ACCMODE) == O_RDONLY) fail(EBADF, "pwrite on a read-only file");
  if (flags_ & O_APPEND) offset = stat().size;  // not atomic against other writers
  return retry_stale([&] {
    size_t done = 0;
    while (done < len) {
      size_t chunk = std::min<size_t>(len - done, client_->limits().max_write);
      WriteVerifier verf;
      int committed = 0;
      const char* src = static_cast<const char*>(buf) + done;
      size_t n = client_->options().direct_writes
                     ? client_->write_direct(fh_, src, chunk, offset + done,
                                             client_->options().stability, &verf, &committed)
                     : client_->write(fh_, src, chunk, offset + done, client_->options().stability,
                                      &verf, &committed);
      if (committed == ODAFS_UNSTABLE) {
        if (verifier_ && *verifier_ != verf) verifier_changed_ = true;
        verifier_ = verf;
        unstable_ = true;
      }
      done += n;
    }
    // The written blocks' cached copies are out of date now.
    if (len > 0) {
      uint64_t bs = client_->limits().block_size;
      client_->cache_->forget_data(fileid_, offset / bs, (offset + len - 1) / bs);
    }
    return done;
  });
}

Attr File::stat() {
  return retry_stale([&] { return client_->getattr(fh_); });
}

void File::truncate(uint64_t size) {
  retry_stale([&] { client_->setattr_size(fh_, size); });
  client_->cache_->forget_file_data(fileid_);
}

void File::fsync() {
  if (!unstable_) return;
  WriteVerifier v = retry_stale([&] { return client_->commit(fh_); });
  bool lost = verifier_changed_ || (verifier_ && *verifier_ != v);
  unstable_ = false;
  verifier_changed_ = false;
  verifier_.reset();
  if (lost) {
    fail(EIO,
         "commit " + path_ + ": the server restarted since an unstable write, which may be lost");
  }
}

void File::close() {
  if (client_ == nullptr) return;
  try {
    fsync();
  } catch (...) {
    client_ = nullptr;
    throw;
  }
  client_ = nullptr;
}

}  // namespace odafs

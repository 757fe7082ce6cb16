// ClientImpl's handle-level calls (LOOKUP, GETATTR, READ, WRITE, COMMIT, SETATTR, NULL,
// STATS), each whole or in the two halves IoQueue pipelines, and AsyncRead.
#include <cstring>
#include <optional>
#include <vector>

#include "client/call_util.h"
#include "client/client_cache.h"
#include "client/client_impl.h"
#include "client/delegations.h"
#include "client/mount_state.h"
#include "client/shared_file.h"
#include "ordma/engine.h"
#include "proto/ref_xdr.h"
#include "proto/wire_layout.h"
#include "rpc/client_channel.h"

namespace odafs {
namespace {

// READ reply bytes before the payload when the call succeeds: the accepted reply header,
// then the READ reply's fixed prefix. The payload lands in the caller's buffer after them.
constexpr size_t kReadReplyHeaderBytes =
    rpc::Channel::kAcceptedReplyHeaderBytes + sizeof(wire::ReadReplyPrefix);
// A READ reply's references, decoded but not yet in a directory.
struct BlockRef {
  uint64_t block;
  ordma::Reference ref;
};

// Decodes a READ reply whose RPC header `x` is past; the payload is already in buf when
// the reply came pre-posted, else it is copied out of the reply here. The references of
// the trailer go to *refs (cleared first).
Result<size_t> decode_read_reply(const rpc::Call& call, XDR* x, void* buf, size_t len, bool* eof,
                                 std::vector<BlockRef>* refs) {
  odafs_stat status;
  odafs_fattr attr;
  bool_t at_eof = FALSE;
  u_int n = 0;
  refs->clear();
  if (!xdr_odafs_stat(x, &status)) return Status(EPROTO, "read: malformed reply");
  ODAFS_RETURN_IF_ERROR(status_of(status, "read"));
  if (!xdr_odafs_fattr(x, &attr) || !xdr_bool(x, &at_eof) || !xdr_u_int(x, &n) || n > len) {
    return Status(EPROTO, "read: malformed reply");
  }
  if (std::optional<size_t> posted = call.posted_length()) {
    if (*posted != n) return Status(EPROTO, "read: posted length mismatch");
  } else if (!xdr_opaque(x, static_cast<char*>(buf), n)) {
    return Status(EPROTO, "read: truncated reply");
  }
  u_int nrefs = 0;
  if (!xdr_u_int(x, &nrefs) || nrefs > ODAFS_MAXREFS) {
    return Status(EPROTO, "read: malformed references");
  }
  for (u_int i = 0; i < nrefs; ++i) {
    odafs_ref wire{};
    if (!xdr_odafs_ref(x, &wire)) return Status(EPROTO, "read: malformed references");
    refs->push_back({wire.block, ordma::reference_from_wire(wire)});
  }
  if (eof != nullptr) *eof = at_eof;
  return size_t{n};
}

// Puts a READ reply's references into the mount's directory.
void keep_references(const MountState& m, uint64_t key, const std::vector<BlockRef>& refs,
                     ClientStats* stats) {
  for (const BlockRef& r : refs) m.cache->insert(key, r.block, r.ref);
  stats->refs_received.fetch_add(refs.size(), std::memory_order_relaxed);
}

}  // namespace

std::pair<Handle, Attr> ClientImpl::lookup(const Handle& dir, const std::string& name) {
  return or_throw(try_lookup(dir, name));
}

Result<std::pair<Handle, Attr>> ClientImpl::try_lookup(const Handle& dir, const std::string& name) {
  ODAFS_RETURN_IF_ERROR(check_name(name));
  // A file under a delegation keeps its name and attributes until it is recalled: another
  // client's rename, removal or change of it recalls first. Only a file of one link: this
  // client's removal of another name of it changes its link count unseen by the entry.
  std::pair<Handle, Attr> found;
  ODAFS_ASSIGN_OR_RETURN(auto m, mount_state());
  if (lookup_without_call(*m, dir, name, &found)) return found;
  return with_channel(wire::kIdempotentProc<ODAFSPROC_LOOKUP>,
                      [&](rpc::Channel& ch) -> Result<std::pair<Handle, Attr>> {
                        diropargs args{};
                        put_fh(args.dir, dir);
                        args.name = const_cast<char*>(name.c_str());
                        dirop_res res{};
                        ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_LOOKUP>(ch, args, &res));
                        return lookup_of(res, name);
                      });
}

bool ClientImpl::lookup_without_call(const MountState& m, const Handle& dir,
                                     const std::string& name, std::pair<Handle, Attr>* found) {
  bool write = false;
  if (!delegated(m, dir, name, &found->first, &found->second, &write) || found->second.nlink > 1) {
    return false;
  }
  stats_.delegated_lookups.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Attr ClientImpl::getattr(const Handle& fh) { return or_throw(try_getattr(fh)); }

Result<Attr> ClientImpl::try_getattr(const Handle& fh) {
  return with_channel(wire::kIdempotentProc<ODAFSPROC_GETATTR>,
                      [&](rpc::Channel& ch) -> Result<Attr> {
                        getattr_args args{};
                        put_fh(args.fh, fh);
                        attr_res res{};
                        ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_GETATTR>(ch, args, &res));
                        return attr_of(res, fh);
                      });
}

Result<Attr> ClientImpl::attr_of(const attr_res& res, const Handle& fh) const {
  ODAFS_RETURN_IF_ERROR(status_of(res.status, "getattr"));
  return with_writes_behind(fh, to_attr(res.attr_res_u.attr));
}

Status ClientImpl::start_getattr(const MountState& m, rpc::Call& call, const Handle& fh) {
  getattr_args args{};
  put_fh(args.fh, fh);
  return start<ODAFSPROC_GETATTR>(*m.channel, call, args);
}

Result<Attr> ClientImpl::finish_getattr(const MountState& m, rpc::Call& call, const Handle& fh) {
  XDR x;
  ODAFS_RETURN_IF_ERROR(m.channel->wait_until(call, &x, call.deadline()));
  attr_res res{};
  if (!xdr_attr_res(&x, &res)) return Status(EPROTO, "getattr: malformed reply");
  return attr_of(res, fh);
}

Attr ClientImpl::with_writes_behind(const Handle& fh, Attr a) const {
  // Writes gathered behind (client/shared_file.h) have not reached the server, whose size
  // is then short of what this client wrote: the kernel under odafs-mount would cut its
  // own view of the file to it.
  if (a.type == FileType::kRegular) {
    OpenFiles::Ref f = open_files_.find(cache_key(fh));
    if (f && f->has_behind.load(std::memory_order_acquire)) {
      a.size = std::max<uint64_t>(a.size, f->size.load(std::memory_order_relaxed));
    }
  }
  return a;
}

Status ClientImpl::start_rpc_read(const MountState& m, rpc::Call& call, const Handle& fh, void* buf,
                                  size_t len, uint64_t offset) {
  read_args args{};
  put_fh(args.fh, fh);
  args.offset = offset;
  args.count = static_cast<u_int>(len);
  args.session = session_for_reads(m);
  stats_.rpc_reads.fetch_add(1, std::memory_order_relaxed);
  if (read_mode() != ReadMode::kInline) call.post(buf, len, kReadReplyHeaderBytes);
  return start<ODAFSPROC_READ>(*m.channel, call, args);
}

Result<size_t> ClientImpl::finish_rpc_read(const MountState& m, rpc::Call& call, uint64_t key,
                                           void* buf, size_t len, bool* eof) {
  thread_local std::vector<BlockRef> refs;  // keeps its capacity: no allocation per read
  XDR x;
  ODAFS_RETURN_IF_ERROR(m.channel->wait_until(call, &x, call.deadline()));
  ODAFS_ASSIGN_OR_RETURN(size_t n, decode_read_reply(call, &x, buf, len, eof, &refs));
  keep_references(m, key, refs, &stats_);
  stats_.rpc_bytes.fetch_add(n, std::memory_order_relaxed);
  return n;
}

Result<size_t> ClientImpl::rpc_read(const MountState& m, rpc::Call& call, const Handle& fh,
                                    uint64_t key, void* buf, size_t len, uint64_t offset,
                                    bool* eof) {
  ODAFS_RETURN_IF_ERROR(start_rpc_read(m, call, fh, buf, len, offset));
  return finish_rpc_read(m, call, key, buf, len, eof);
}

size_t ClientImpl::read(const Handle& fh, void* buf, size_t len, uint64_t offset, bool* eof) {
  return or_throw(try_read(fh, buf, len, offset, eof));
}

Result<size_t> ClientImpl::try_read(const Handle& fh, void* buf, size_t len, uint64_t offset,
                                    bool* eof) {
  thread_local rpc::Call call;
  const uint64_t key = cache_key(fh);
  size_t done = 0;
  *eof = false;
  auto read_chunk = [&](const MountState& m) -> Result<size_t> {
    size_t chunk = std::min<size_t>(len - done, m.limits.max_read);
    ODAFS_ASSIGN_OR_RETURN(size_t got, rpc_read(m, call, fh, key, static_cast<char*>(buf) + done,
                                                chunk, offset + done, eof));
    if (got < chunk) *eof = true;
    return got;
  };
  while (done < len && !*eof) {
    ODAFS_ASSIGN_OR_RETURN(size_t n, with_mount(true, read_chunk));
    done += n;
  }
  return done;
}

AsyncRead::AsyncRead() : call_(std::make_unique<rpc::Call>()) {}
AsyncRead::AsyncRead(AsyncRead&& other) noexcept
    : call_(std::move(other.call_)),
      mount_(std::move(other.mount_)),
      key_(other.key_),
      buf_(other.buf_),
      len_(other.len_),
      in_flight_(std::exchange(other.in_flight_, false)) {}
AsyncRead::~AsyncRead() {
  if (in_flight_) {
    // The reply would land in a buffer nobody waits for: collect it first (its failure
    // has no one to go to).
    XDR x;
    (void)mount_->channel->wait(*call_, &x);
  }
}

void ClientImpl::start_read(AsyncRead& op, const Handle& fh, void* buf, size_t len,
                            uint64_t offset) {
  if (op.in_flight_) throw Error(EBUSY, "start_read: the AsyncRead is in flight");
  op.mount_ = or_throw(mount_state());
  if (len > op.mount_->limits.max_read) {
    throw Error(EINVAL, "start_read: longer than the server's max_read");
  }
  op.key_ = cache_key(fh);
  op.buf_ = buf;
  op.len_ = len;
  or_throw(start_rpc_read(*op.mount_, *op.call_, fh, buf, len, offset));
  op.in_flight_ = true;
}

size_t ClientImpl::finish_read(AsyncRead& op, bool* eof) {
  if (!op.in_flight_) throw Error(EINVAL, "finish_read: nothing in flight");
  op.in_flight_ = false;
  return or_throw(finish_rpc_read(*op.mount_, *op.call_, op.key_, op.buf_, op.len_, eof));
}

Status ClientImpl::start_write(const MountState& m, rpc::Call& call, const Handle& fh,
                               const void* buf, size_t len, uint64_t offset, Stability how) {
  write_args args{};
  put_fh(args.fh, fh);
  args.offset = offset;
  args.stable = static_cast<odafs_stable_how>(how);
  args.data.data_len = static_cast<u_int>(len);
  args.data.data_val = static_cast<char*>(const_cast<void*>(buf));
  return start<ODAFSPROC_WRITE>(*m.channel, call, args);
}

Result<size_t> ClientImpl::finish_write(const MountState& m, rpc::Call& call, size_t len,
                                        WriteVerifier* verf, int* committed, uint64_t* size_after) {
  XDR x;
  ODAFS_RETURN_IF_ERROR(m.channel->wait_until(call, &x, call.deadline()));
  write_res res{};
  if (!xdr_write_res(&x, &res)) return Status(EPROTO, "write: malformed reply");
  ODAFS_RETURN_IF_ERROR(status_of(res.status, "write"));
  std::memcpy(verf->data(), res.write_res_u.ok.verf, verf->size());
  *committed = static_cast<int>(raw_enum(res.write_res_u.ok.committed));
  if (res.write_res_u.ok.count == 0 && len > 0) return Status(EIO, "write: server wrote nothing");
  if (res.write_res_u.ok.count > len) {
    return Status(EPROTO, "write: server wrote more than was sent");
  }
  if (size_after != nullptr) {
    *size_after = res.write_res_u.ok.attr.size;
    if (*size_after < res.write_res_u.ok.count) {
      return Status(EPROTO, "write: size after below the write");
    }
  }
  return static_cast<size_t>(res.write_res_u.ok.count);
}

size_t ClientImpl::write(const Handle& fh, const void* buf, size_t len, uint64_t offset,
                         Stability how, WriteVerifier* verf, int* committed, uint64_t* size_after) {
  return or_throw(try_write(fh, buf, len, offset, how, verf, committed, size_after));
}

Result<size_t> ClientImpl::try_write(const Handle& fh, const void* buf, size_t len, uint64_t offset,
                                     Stability how, WriteVerifier* verf, int* committed,
                                     uint64_t* size_after) {
  return with_mount(offset != kAppendOffset, [&](const MountState& m) -> Result<size_t> {
    thread_local rpc::Call call;
    ODAFS_RETURN_IF_ERROR(start_write(m, call, fh, buf, len, offset, how));
    uint64_t after = 0;
    ODAFS_ASSIGN_OR_RETURN(size_t n, finish_write(m, call, len, verf, committed, &after));
    if (size_after != nullptr) *size_after = after;
    // This client's own write (see delegations.h); under a write delegation no open
    // revalidates the cache, so its old copies go here.
    if (m.delegations->wrote(fh, after) && n != 0) {
      const uint64_t bs = m.limits.block_size;
      const uint64_t at = offset == kAppendOffset ? after - n : offset;
      m.cache->forget_data(cache_key(fh), at / bs, (at + n - 1) / bs);
    }
    return n;
  });
}

WriteVerifier ClientImpl::commit(const Handle& fh) { return or_throw(try_commit(fh)); }

Result<WriteVerifier> ClientImpl::try_commit(const Handle& fh) {
  return with_mount(true, [&](const MountState& m) { return commit_on(m, fh); });
}

Result<WriteVerifier> ClientImpl::commit_on(const MountState& m, const Handle& fh) {
  commit_args args{};
  put_fh(args.fh, fh);
  commit_res res{};
  ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_COMMIT>(*m.channel, args, &res));
  ODAFS_RETURN_IF_ERROR(status_of(res.status, "commit"));
  WriteVerifier v;
  std::memcpy(v.data(), res.commit_res_u.verf, v.size());
  return v;
}

Result<Attr> ClientImpl::setattr_size(const Handle& fh, uint64_t size) {
  setattr_args args{};
  args.size.set = TRUE;
  args.size.odafs_set_u64_u.value = size;
  return setattr(fh, args, "truncate");
}

Result<Attr> ClientImpl::setattr(const Handle& fh, setattr_args& args, const std::string& what) {
  ODAFS_RETURN_IF_ERROR(forget_delegation(fh));
  return with_channel(wire::kIdempotentProc<ODAFSPROC_SETATTR>,
                      [&](rpc::Channel& ch) -> Result<Attr> {
                        put_fh(args.fh, fh);
                        attr_res res{};
                        ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_SETATTR>(ch, args, &res));
                        return setattr_of(res, what);
                      });
}

void ClientImpl::ping() {
  or_throw(with_channel(true, [&](rpc::Channel& ch) {
    return ch.call(ODAFSPROC_NULL, to_xdrproc(rpc::xdr_nothing), nullptr,
                   to_xdrproc(rpc::xdr_nothing), nullptr);
  }));
}

std::vector<std::pair<std::string, uint64_t>> ClientImpl::server_stats() {
  using Counters = std::vector<std::pair<std::string, uint64_t>>;
  return or_throw(with_channel(
      wire::kIdempotentProc<ODAFSPROC_STATS>, [&](rpc::Channel& ch) -> Result<Counters> {
        stats_res res{};
        XdrFree<stats_res> guard{to_xdrproc(xdr_stats_res), &res};
        ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_STATS>(ch, &res));
        Counters out;
        for (u_int i = 0; i < res.counters.counters_len; ++i) {
          out.emplace_back(res.counters.counters_val[i].name, res.counters.counters_val[i].value);
        }
        return out;
      }));
}

}  // namespace odafs

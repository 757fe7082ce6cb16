// The data procedures of FileService: READ, WRITE, COMMIT, READ_DIRECT, WRITE_DIRECT
// and GETREFS, over the block cache. Every byte range is cut into blocks by BlockSpan
// (block_span.h); file bytes move through the store (server/store.h) only. Nothing here allocates
// per READ: the reply is encoded in place, scratch vectors are thread_local, and the
// cache fill is a closure small enough for std::function to hold in place.
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/log.h"
#include "base/setid.h"
#include "proto/enums.h"
#include "proto/ref_xdr.h"
#include "proto/status.h"
#include "server/block_span.h"
#include "server/file_service.h"
#include "server/identity.h"
#include "server/reply_util.h"

namespace odafs::server {
namespace {

// Bytes of piece p that pinned block holds (the rest of p is a hole: zeros).
uint32_t cached_bytes(const cache::BlockCache::ReadPin& pin, const BlockPiece& p) {
  uint32_t have = pin.valid() > p.in_block ? pin.valid() - p.in_block : 0;
  return std::min(have, p.length);
}

// What a data procedure answers for a file that is not a regular one.
odafs_stat not_regular(const struct stat& st) {
  return S_ISDIR(st.st_mode) ? ODAFS_ERR_ISDIR : ODAFS_ERR_INVAL;
}

}  // namespace

Status FileService::pin_block(const ReadableFile& file, uint64_t index, uint32_t need,
                              cache::BlockCache::ReadPin* pin) {
  if (!file.cacheable) {
    *pin = {};  // bypass: read the store
    return Status();
  }
  const OpenNode& node = file.node;
  // The fill captures one pointer, so the FillFn holds it in place: a closure larger than
  // two pointers would make std::function allocate on every call.
  struct {
    Store* store;
    const Object* file;
    uint64_t block_off;
    const Node* leased;  // over a store with leases: the lease to check after the read
    bool lease_lost;
  } from{store_.get(), &node.object(), index * cache_.block_size(),
         leases_.active() ? &*node : nullptr, false};
  auto fill = [&from](std::byte* buf, size_t n) -> Result<size_t> {
    Result<size_t> got = from.store->read(*from.file, buf, n, from.block_off);
    // A recall began while we read: the bytes may not stay (LeaseKeeper).
    if (got.ok() && from.leased != nullptr &&
        !from.leased->lease.held.load(std::memory_order_acquire)) {
      from.lease_lost = true;
      return Status(EAGAIN, "lease recalled during the fill");
    }
    return got;
  };
  Status s = cache_.read(cache::BlockKey{node->id, index}, need, fill, pin);
  if (from.lease_lost) return Status();  // *pin holds nothing: bypass
  return s;
}

odafs_stat FileService::open_for_read(const rpc::CallContext& ctx, const char* fh,
                                      ReadableFile* out) {
  if (odafs_stat s = open_handle(fh, &out->node); s != ODAFS_OK) return s;
  const OpenNode& node = out->node;
  // Permission before any wait: a caller who may not read the file must not recall its
  // writer.
  auto look = [&]() -> odafs_stat {
    if (odafs_stat s = stat_node(node, &out->st); s != ODAFS_OK) return s;
    if (!S_ISREG(out->st.st_mode)) return not_regular(out->st);
    if (!IdentityScope::permits_data(ctx.cred, options_.act_as_callers, out->st, R_OK)) {
      return ODAFS_ERR_ACCES;
    }
    return ODAFS_OK;
  };
  out->data_lock = std::shared_lock(node->data.lock);
  if (odafs_stat s = look(); s != ODAFS_OK) return s;
  if (delegations_.writers_out()) {
    // Another client's write delegation is flushed under the exclusive lock: wait without
    // ours, then look again (size and mode may have changed meanwhile). A delegation
    // granted after this check is ordered after the read: its holder has written nothing.
    out->data_lock.unlock();
    if (!delegations_.await_writers(node->id, ctx.connection)) return ODAFS_ERR_DELAY;
    out->data_lock.lock();
    if (odafs_stat s = look(); s != ODAFS_OK) return s;
  }
  // The node's descriptor may be one a caller without read permission left (O_PATH): the
  // server reads as itself, for this caller who may.
  if (Status s = nodes_.make_readable(node); !s.ok()) return status_from_errno(s.errno_value());
  out->cacheable = leases_.may_cache(node);
  return ODAFS_OK;
}

Status FileService::make_writable(const OpenNode& node) {
  if (!node.writable()) leases_.give_back(node->key);
  ODAFS_RETURN_IF_ERROR(nodes_.make_writable(node));
  leases_.note_written(node);
  return Status();
}

void FileService::do_read(const rpc::CallContext& ctx, read_args& a, rpc::Reply& r) {
  ReadableFile file;
  if (odafs_stat s = open_for_read(ctx, a.fh, &file); s != ODAFS_OK) {
    return reply_status<read_res>(r, xp(xdr_read_res), s);
  }
  const OpenNode& node = file.node;
  const struct stat& st = file.st;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t offset = a.offset;
  uint32_t count = std::min(a.count, options_.max_io);
  uint32_t len =
      offset >= size ? 0 : static_cast<uint32_t>(std::min<uint64_t>(count, size - offset));
  bool eof = offset + len >= size;

  // Encode status, attributes and eof, then copy the data from cache blocks straight into
  // the reply buffer (the one copy the RPC path needs).
  XDR* x = r.results();
  odafs_stat status = ODAFS_OK;
  odafs_fattr attr;
  fill_attr(st, node->file_generation, &attr);
  bool_t eof_flag = eof;
  u_int data_len = len;
  xdr_odafs_stat(x, &status);
  xdr_odafs_fattr(x, &attr);
  xdr_bool(x, &eof_flag);
  xdr_u_int(x, &data_len);
  uint32_t padded = (len + 3) & ~3u;
  auto* dst = reinterpret_cast<char*>(xdr_inline(x, static_cast<int>(padded)));
  if (dst == nullptr) {
    ODAFS_LOG_ERROR("READ reply of %u bytes does not fit the reply buffer", len);
    return reply_status<read_res>(r, xp(xdr_read_res), ODAFS_ERR_SERVERFAULT);
  }
  std::memset(dst + len, 0, padded - len);
  const bool want_refs = engine_ != nullptr && a.session != 0;
  thread_local std::vector<odafs_ref> refs;
  refs.clear();
  cache::BlockCache::ReadPin pin;
  const BlockSpan span(offset, len, cache_.block_size());
  for (const BlockPiece& p : span) {
    if (Status s = pin_block(file, p.index, span.file_bytes(p.index, size), &pin); !s.ok()) {
      return reply_status<read_res>(r, xp(xdr_read_res), status_from_errno(s.errno_value()));
    }
    char* to = dst + p.done;
    if (pin.bypass()) {
      Result<size_t> k = store_->read(node.object(), to, p.length, p.pos);
      if (!k)
        return reply_status<read_res>(r, xp(xdr_read_res), status_from_errno(k.errno_value()));
      if (*k < p.length) std::memset(to + *k, 0, p.length - *k);
    } else {
      uint32_t copy = cached_bytes(pin, p);
      std::memcpy(to, pin.data() + p.in_block, copy);
      // Bytes past the block's valid end are a hole the file grew over: zeros.
      if (copy < p.length) std::memset(to + copy, 0, p.length - copy);
      odafs_ref ref;
      if (want_refs && pin.valid() > 0 && make_ref(pin, p.index, a.session, &ref)) {
        refs.push_back(ref);
      }
    }
  }
  // The trailer: references to the blocks this read touched.
  u_int nrefs = static_cast<u_int>(refs.size());
  bool fits = xdr_u_int(x, &nrefs);
  for (odafs_ref& ref : refs) fits = fits && xdr_odafs_ref(x, &ref);
  if (!fits) {
    ODAFS_LOG_ERROR("READ references do not fit the reply buffer");
    return reply_status<read_res>(r, xp(xdr_read_res), ODAFS_ERR_SERVERFAULT);
  }
  bytes_read_.fetch_add(len, std::memory_order_relaxed);
}

void FileService::do_read_direct(const rpc::CallContext& ctx, read_direct_args& a, rpc::Reply& r) {
  auto fail = [&](odafs_stat status) {
    reply_status<read_direct_res>(r, xp(xdr_read_direct_res), status);
  };
  // The data lock is held while the bytes are gathered, not while the engine sends them:
  // the pins keep cached blocks whole from there on, and a slow client must not hold up
  // writers.
  ReadableFile file;
  if (odafs_stat s = open_for_read(ctx, a.fh, &file); s != ODAFS_OK) return fail(s);
  if (!engine_ || a.session == 0) return fail(ODAFS_ERR_NOTSUPP);
  const OpenNode& node = file.node;
  const struct stat& st = file.st;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint32_t count = std::min(a.count, options_.max_io);
  uint32_t len =
      a.offset >= size ? 0 : static_cast<uint32_t>(std::min<uint64_t>(count, size - a.offset));

  // Gather the bytes as a list of pieces of pinned cache blocks (no copy yet); the
  // engine copies them once, into the client's connection.
  thread_local std::vector<cache::BlockCache::ReadPin> pins;
  thread_local std::vector<iovec> parts;
  thread_local std::vector<char> scratch;  // bypassed blocks and holes
  pins.clear();
  parts.clear();
  scratch.assign(len, 0);  // sized up front: parts point into it
  const BlockSpan span(a.offset, len, cache_.block_size());
  for (const BlockPiece& p : span) {
    pins.emplace_back();
    Status s = pin_block(file, p.index, span.file_bytes(p.index, size), &pins.back());
    if (!s.ok()) {
      pins.clear();
      return fail(status_from_errno(s.errno_value()));
    }
    const cache::BlockCache::ReadPin& pin = pins.back();
    char* zeros = scratch.data() + p.done;
    if (pin.bypass()) {
      Result<size_t> k = store_->read(node.object(), zeros, p.length, p.pos);
      if (!k) {
        pins.clear();
        return fail(status_from_errno(k.errno_value()));
      }
      parts.push_back({zeros, p.length});
    } else {
      uint32_t copy = cached_bytes(pin, p);
      if (copy > 0) {
        parts.push_back({const_cast<std::byte*>(pin.data()) + p.in_block, copy});
      }
      if (copy < p.length) parts.push_back({zeros + copy, p.length - copy});
    }
  }
  file.data_lock.unlock();
  ordma::Fault f = engine_->push(a.session, a.buffer, a.buffer_offset, a.tag, parts.data(),
                                 static_cast<int>(parts.size()));
  pins.clear();
  if (f == ordma::Fault::kWrongSession) return fail(ODAFS_ERR_NOTSUPP);  // no engine link
  if (f != ordma::Fault::kNone) return fail(ODAFS_ERR_IO);
  bytes_read_.fetch_add(len, std::memory_order_relaxed);
  read_direct_res res{};
  res.status = ODAFS_OK;
  fill_attr(st, node->file_generation, &res.read_direct_res_u.ok.attr);
  res.read_direct_res_u.ok.eof = a.offset + len >= size;
  res.read_direct_res_u.ok.count = len;
  r.send(xp(xdr_read_direct_res), &res);
}

void FileService::do_getrefs(const rpc::CallContext& ctx, getrefs_args& a, rpc::Reply& r) {
  // A reference lets its holder read the block for as long as it stands: minted only for
  // a caller who may read the file now, and not past another's write delegation.
  ReadableFile file;
  if (odafs_stat s = open_for_read(ctx, a.fh, &file); s != ODAFS_OK) {
    return reply_status<getrefs_res>(r, xp(xdr_getrefs_res), s);
  }
  if (!engine_ || a.session == 0) {
    return reply_status<getrefs_res>(r, xp(xdr_getrefs_res), ODAFS_ERR_NOTSUPP);
  }
  const uint64_t size = static_cast<uint64_t>(file.st.st_size);
  uint64_t end = std::min<uint64_t>(size, a.offset + std::min<uint64_t>(a.count, options_.max_io));
  thread_local std::vector<odafs_ref> refs;
  refs.clear();
  cache::BlockCache::ReadPin pin;
  // References are to whole blocks: the one holding offset (even when offset is at or
  // past end, if that block starts before it) and each after it that starts before end.
  const BlockSpan span = BlockSpan::whole_blocks(a.offset, end, cache_.block_size());
  for (const BlockPiece& p : span) {
    if (refs.size() >= ODAFS_MAXREFS) break;
    if (Status s = pin_block(file, p.index, span.file_bytes(p.index, size), &pin); !s.ok()) {
      return reply_status<getrefs_res>(r, xp(xdr_getrefs_res), status_from_errno(s.errno_value()));
    }
    if (pin.bypass()) break;  // the cache is saturated: no more blocks to hand out
    odafs_ref ref;
    if (pin.valid() > 0 && make_ref(pin, p.index, a.session, &ref)) refs.push_back(ref);
  }
  pin = {};
  getrefs_res res{};
  res.status = ODAFS_OK;
  res.getrefs_res_u.ok.refs.refs_len = static_cast<u_int>(refs.size());
  res.getrefs_res_u.ok.refs.refs_val = refs.data();
  r.send(xp(xdr_getrefs_res), &res);
}

odafs_stat FileService::check_write(const rpc::CallContext& ctx, const OpenNode& node,
                                    const struct stat& st, uint64_t offset, size_t len) {
  if (!S_ISREG(st.st_mode)) return not_regular(st);
  if (authority_.refuses_change(ctx)) return ODAFS_ERR_ROFS;
  if (!IdentityScope::permits_data(ctx.cred, options_.act_as_callers, st, W_OK)) {
    return ODAFS_ERR_ACCES;
  }
  if (delegations_.revoked(node->id, ctx.connection)) return ODAFS_ERR_BAD_STATEID;
  if (len > options_.max_io) return ODAFS_ERR_FBIG;
  if (offset != kAppendOffset && offset > static_cast<u_quad_t>(INT64_MAX) - len) {
    return ODAFS_ERR_FBIG;
  }
  // Whatever stops the file being opened read-write, the caller may not write it.
  if (!make_writable(node).ok()) return ODAFS_ERR_ACCES;
  return ODAFS_OK;
}

void FileService::do_write(const rpc::CallContext& ctx, write_args& a, rpc::Reply& r) {
  if (!valid(a.stable)) return reply_status<write_res>(r, xp(xdr_write_res), ODAFS_ERR_INVAL);
  struct stat st;
  OpenNode node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  odafs_stat status = check_write(ctx, node, st, a.offset, a.data.data_len);
  if (status != ODAFS_OK) return reply_status<write_res>(r, xp(xdr_write_res), status);
  Delegations::Change change = delegations_.begin_change(node->id, ctx.connection);
  if (change.delayed()) return reply_status<write_res>(r, xp(xdr_write_res), ODAFS_ERR_DELAY);
  if (change.waited()) status = stat_node(node, &st);  // deleted meanwhile: STALE
  if (status != ODAFS_OK) return reply_status<write_res>(r, xp(xdr_write_res), status);
  // A write of no bytes changes nothing (clients send one to ask whether they may write).
  int err = a.data.data_len > 0 ? drop_setid_bits(ctx, node, st) : 0;
  if (err != 0) return reply_status<write_res>(r, xp(xdr_write_res), status_from_errno(err));
  write_through(node, a.offset, a.stable, a.data.data_val, a.data.data_len, r);
}

int FileService::drop_setid_bits(const rpc::CallContext& ctx, const OpenNode& node,
                                 const struct stat& st) {
  // The common case costs one test: no setuid bit, no setgid bit.
  if (setid_bits_to_drop(st.st_mode) == 0 ||
      IdentityScope::privileged(ctx.cred, options_.act_as_callers))
    return 0;
  struct stat now;  // the mode as of now: a chmod may have come in since st
  if (Status s = store_->stat(node.object(), &now); !s.ok()) return s.errno_value();
  const mode_t drop = setid_bits_to_drop(now.st_mode);
  if (drop == 0) return 0;
  AttrChange chmod;
  chmod.set_mode = true;
  chmod.mode = now.st_mode & 07777 & ~drop;
  return store_->set_attributes(node.object(), chmod).errno_value();
}

void FileService::do_write_direct(const rpc::CallContext& ctx, write_direct_args& a,
                                  rpc::Reply& r) {
  struct stat st;
  OpenNode node = resolve_or_reply(a.fh, r, &st);
  // Every failure before the transfer cancels the client's wait on the engine.
  auto cancel = [&] {
    if (engine_ && a.session != 0) engine_->cancel(a.session, a.tag, ordma::Fault::kBadRequest);
  };
  if (!node) return cancel();
  odafs_stat status =
      valid(a.stable) ? check_write(ctx, node, st, a.offset, a.count) : ODAFS_ERR_INVAL;
  if (status == ODAFS_OK && (!engine_ || a.session == 0)) status = ODAFS_ERR_NOTSUPP;
  // Others' delegations come back before the client is asked for its bytes.
  Delegations::Change change = status == ODAFS_OK
                                   ? delegations_.begin_change(node->id, ctx.connection)
                                   : delegations_.begin_change(0, ctx.connection);
  if (change.delayed()) status = ODAFS_ERR_DELAY;
  if (status == ODAFS_OK && change.waited()) status = stat_node(node, &st);
  // Take a place among the writes that may wait on their clients (see Options); without
  // one the client writes by RPC instead.
  if (status == ODAFS_OK && direct_writes_waiting_.fetch_add(1, std::memory_order_acq_rel) >=
                                options_.max_direct_writes) {
    direct_writes_waiting_.fetch_sub(1, std::memory_order_acq_rel);
    direct_writes_refused_.fetch_add(1, std::memory_order_relaxed);
    status = ODAFS_ERR_NOTSUPP;
  }
  // The pull waits up to kPullTimeoutMs for the client's engine: not with this thread's
  // event loop held (no spare to take it). The client then writes by RPC.
  if (status == ODAFS_OK && !rpc::before_blocking()) {
    direct_writes_waiting_.fetch_sub(1, std::memory_order_acq_rel);
    direct_writes_refused_.fetch_add(1, std::memory_order_relaxed);
    status = ODAFS_ERR_NOTSUPP;
  }
  if (status != ODAFS_OK) {
    cancel();
    return reply_status<write_res>(r, xp(xdr_write_res), status);
  }
  thread_local std::vector<char> data;
  ordma::Fault f =
      engine_->pull(a.session, a.buffer, a.buffer_offset, a.tag, a.count, kPullTimeoutMs, &data);
  direct_writes_waiting_.fetch_sub(1, std::memory_order_acq_rel);
  if (f != ordma::Fault::kNone) {
    if (f == ordma::Fault::kTransport) cancel();  // timed out: the client may still wait
    ODAFS_LOG_WARN("WRITE_DIRECT: pulling from the client failed: %s", ordma::fault_name(f));
    // Nothing was written: NOTSUPP sends the client to a plain WRITE (a client whose engine
    // connection broke, or a server stopping, which stops its engine first: never EIO).
    return reply_status<write_res>(r, xp(xdr_write_res), ODAFS_ERR_NOTSUPP);
  }
  int err = a.count > 0 ? drop_setid_bits(ctx, node, st) : 0;
  if (err != 0) return reply_status<write_res>(r, xp(xdr_write_res), status_from_errno(err));
  write_through(node, a.offset, a.stable, data.data(), a.count, r);
}

void FileService::write_through(const OpenNode& node, uint64_t offset, odafs_stable_how stable,
                                const char* src, size_t len, rpc::Reply& r) {
  // Exclusive over the file, its cached blocks and the size the reply reports; the sync
  // below needs no lock.
  std::unique_lock locked(node->data.lock);
  if (offset == kAppendOffset || check_change_times_) {  // the end, as of now; others' changes
    struct stat now;
    if (Status s = store_->stat(node.object(), &now); !s.ok()) {
      return reply_status<write_res>(r, xp(xdr_write_res), status_from_errno(s.errno_value()));
    }
    if (check_change_times_) check_cached_blocks(*node, now);  // before ours hide theirs
    if (offset == kAppendOffset) {  // no other write of ours runs meanwhile
      offset = static_cast<uint64_t>(now.st_size);
      if (offset > static_cast<uint64_t>(INT64_MAX) - len) {
        return reply_status<write_res>(r, xp(xdr_write_res), ODAFS_ERR_FBIG);
      }
    }
  }
  // Space promised to write delegations' holders by the server's accounting stays theirs
  // (delegation_ops.cc, "The space rule"): bytes in the file's own promise draw on it, by
  // accounting or allocated (only its holder writes the file while it lasts); any others
  // are refused when they would eat into what the accounting promised.
  const FileNodeState::SpacePromise& promise = node->data.space;
  uint64_t covered = 0;
  if (offset < promise.to && offset + len > promise.from) {
    covered = std::min<uint64_t>(offset + len, promise.to) - std::max(offset, promise.from);
  }
  if (!space_.begin_write(len, len - covered)) {
    return reply_status<write_res>(r, xp(xdr_write_res), ODAFS_ERR_NOSPC);
  }
  // A short write (ENOSPC half-way) still reaches the cache below for what landed, and the
  // reply's count tells the client the rest did not: it sends the rest, which fails.
  leases_.write_starts(node);
  Result<size_t> done = store_->write(node.object(), src, len, offset);
  leases_.write_ends(node);
  space_.end_write(len, done ? *done : 0);
  if (!done)
    return reply_status<write_res>(r, xp(xdr_write_res), status_from_errno(done.errno_value()));
  len = *done;
  // Write-through done; now bring cached blocks up to date.
  for (const BlockPiece& p : BlockSpan(offset, len, cache_.block_size())) {
    cache_.update(cache::BlockKey{node->id, p.index}, p.in_block, src + p.done, p.length);
  }
  struct stat st {};
  if (store_->stat(node.object(), &st).ok()) blocks_checked(*node, st);  // else zeros
  locked.unlock();
  odafs_stable_how committed = ODAFS_UNSTABLE;
  if (stable == ODAFS_FILE_SYNC || stable == ODAFS_DATA_SYNC) {
    if (Status s = store_->sync(node.object(), stable == ODAFS_DATA_SYNC); !s.ok()) {
      return reply_status<write_res>(r, xp(xdr_write_res), status_from_errno(s.errno_value()));
    }
    committed = stable;
  }
  bytes_written_.fetch_add(len, std::memory_order_relaxed);
  write_res res{};
  res.status = ODAFS_OK;
  res.write_res_u.ok.count = static_cast<u_int>(len);
  res.write_res_u.ok.committed = committed;
  std::memcpy(res.write_res_u.ok.verf, write_verf_.data(), write_verf_.size());
  fill_attr(st, node->file_generation, &res.write_res_u.ok.attr);
  r.send(xp(xdr_write_res), &res);
}

void FileService::do_commit(const rpc::CallContext& ctx, commit_args& a, rpc::Reply& r) {
  struct stat st;
  OpenNode node = resolve_or_reply(a.fh, r, &st);
  if (!node) return;
  if (!S_ISREG(st.st_mode)) {
    return reply_status<commit_res>(r, xp(xdr_commit_res), ODAFS_ERR_INVAL);
  }
  // As knfsd: a COMMIT is part of writing (its owner may commit a file it made read-only
  // since its writes), so no one else makes the server sync another's file.
  if (!IdentityScope::permits(ctx.cred, options_.act_as_callers, st, W_OK) &&
      !(ctx.cred->auth_sys && ctx.cred->uid == st.st_uid)) {
    return reply_status<commit_res>(r, xp(xdr_commit_res), ODAFS_ERR_ACCES);
  }
  if (Status s = nodes_.make_readable(node); !s.ok()) {
    return reply_status<commit_res>(r, xp(xdr_commit_res), status_from_errno(s.errno_value()));
  }
  if (Status s = store_->sync(node.object(), false); !s.ok()) {
    return reply_status<commit_res>(r, xp(xdr_commit_res), status_from_errno(s.errno_value()));
  }
  commit_res res{};
  res.status = ODAFS_OK;
  std::memcpy(res.commit_res_u.verf, write_verf_.data(), write_verf_.size());
  r.send(xp(xdr_commit_res), &res);
}
}  // namespace odafs::server

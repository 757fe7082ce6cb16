// The client's read path: the per-block pipeline (BlockReader, client/block_reader.h) that
// File::pread, read_batch and IoQueue share, plus the DAFS direct transfers and eager
// reference prefetch.
#include <algorithm>
#include <cstring>

#include "client/block_reader.h"
#include "client/call_util.h"
#include "client/client.h"
#include "client/client_cache.h"
#include "client/client_impl.h"
#include "client/io_queue.h"
#include "client/mount_state.h"
#include "ordma/engine.h"
#include "proto/ref_xdr.h"
#include "rpc/client_channel.h"

namespace odafs {

BlockReader::BlockReader(ClientImpl* client, const MountState& m, const Handle& fh, uint64_t key,
                         uint64_t size_hint, char* out, size_t len, uint64_t offset, size_t* done)
    : client_(*client),
      m_(m),
      fh_(fh),
      key_(key),
      size_hint_(size_hint),
      bs_(m.limits.block_size),
      caching_(m.cache->data_capacity() > 0),
      out_(out),
      len_(len),
      offset_(offset),
      done_(done),
      engine_(client->engine_for_reads(m)) {}

BlockReader::~BlockReader() { client_.count_reads(counts_); }

Status BlockReader::run(rpc::Call& call, std::vector<char>* scratch) {
  while (!serve_without_rpc()) {
    ODAFS_RETURN_IF_ERROR(start_rpc(call, scratch));
    ODAFS_ASSIGN_OR_RETURN(const bool complete, finish_rpc(call));
    if (complete) break;
  }
  return Status();
}

bool BlockReader::serve_without_rpc() {
  while (*done_ < len_ && offset_ + *done_ < size_hint_) {
    if (engine_ && one_sided_run() > 0) continue;  // it advanced *done
    size_t n = without_rpc();
    if (n == 0) return false;
    *done_ += n;
  }
  return true;
}

size_t BlockReader::without_rpc() {
  const uint64_t pos = offset_ + *done_;
  const uint64_t block = pos / bs_;
  const auto in_block = static_cast<uint32_t>(pos % bs_);
  // Up to the known end of file: a cached or referenced last block holds only that much.
  const auto chunk =
      static_cast<uint32_t>(std::min<uint64_t>({bs_ - in_block, len_ - *done_, size_hint_ - pos}));
  char* out = out_ + *done_;
  if (caching_ && m_.cache->read(key_, block, in_block, chunk, out)) {
    ++counts_.cache_hits;
    return chunk;
  }
  return one_sided(block, in_block, chunk, out);
}

size_t BlockReader::plan_run(std::vector<ordma::ReadOp>* ops, std::vector<char>* blocks,
                             size_t max_ops) {
  const uint64_t pos = offset_ + *done_;
  const uint64_t end = std::min<uint64_t>(offset_ + len_, size_hint_);
  const uint64_t first = pos / bs_;
  const size_t base = ops->size();
  for (uint64_t b = first; ops->size() - base < max_ops && b * bs_ < end; ++b) {
    const uint64_t start = std::max(pos, b * bs_);
    const auto in_block = static_cast<uint32_t>(start - b * bs_);
    ordma::Reference ref;
    if ((caching_ && m_.cache->has_data(key_, b)) || !m_.cache->find(key_, b, &ref) ||
        ref.length <= in_block) {
      break;
    }
    ordma::ReadOp op;
    op.ref = ref;
    if (caching_) {  // the whole block travels and stays (see one_sided); dst set below
      op.offset = ref.offset;
      op.length = ref.length;
    } else {
      op.offset = ref.offset + in_block;
      op.length = static_cast<uint32_t>(
          std::min<uint64_t>(end - start, std::min<uint64_t>(bs_, ref.length) - in_block));
      op.dst = out_ + (start - offset_);
    }
    ops->push_back(op);
    if (ref.length < bs_) break;  // the file's last block: nothing after it
  }
  const size_t n = ops->size() - base;
  if (caching_ && n > 0) {
    if (blocks->size() < n * bs_) blocks->resize(n * bs_);
    for (size_t i = 0; i < n; ++i) (*ops)[base + i].dst = blocks->data() + i * bs_;
  }
  run_ticket_ = m_.cache->data_ticket();  // before the fetch: see store()
  return n;
}

size_t BlockReader::apply_run(std::span<const ordma::ReadOp> ops) {
  const uint64_t pos = offset_ + *done_;
  const uint64_t end = std::min<uint64_t>(offset_ + len_, size_hint_);
  const uint64_t first = pos / bs_;
  size_t placed = 0;
  bool stopped = false;  // at a fault or the end of file: bytes after it are not the caller's
  for (size_t i = 0; i < ops.size(); ++i) {
    const ordma::ReadOp& op = ops[i];
    const uint64_t b = first + i;
    const uint64_t start = i == 0 ? pos : b * bs_;
    if (op.fault != ordma::Fault::kNone) {  // each fault counts, as one_sided's would
      ++counts_.faults[static_cast<size_t>(op.fault)];
      ++counts_.fallbacks;
      m_.cache->drop(key_, b);
      if (op.fault == ordma::Fault::kTransport) engine_.reset();
      stopped = true;  // this block needs the RPC first
      continue;
    }
    ++counts_.ordma_reads;
    counts_.ordma_bytes += op.got;
    const char* block = static_cast<const char*>(op.dst);
    if (caching_) m_.cache->store(key_, b, block, op.got, run_ticket_);  // good past a fault
    if (stopped) continue;
    size_t n = op.got;
    if (caching_) {
      const auto in_block = static_cast<uint32_t>(start - b * bs_);
      n = op.got <= in_block ? 0 : std::min<uint64_t>(end - start, op.got - in_block);
      if (n > 0) std::memcpy(out_ + (start - offset_), block + in_block, n);
    }
    placed += n;
    // Short of the block (or of what was asked): the end of file, as the reference knew it.
    if (start + n < std::min<uint64_t>(end, (b + 1) * bs_)) stopped = true;
  }
  *done_ += placed;
  return placed;
}

size_t BlockReader::one_sided_run() {
  thread_local std::vector<ordma::ReadOp> ops;
  thread_local std::vector<char> blocks;  // whole blocks, when they go to the data cache
  ops.clear();
  if (plan_run(&ops, &blocks, kMaxRun) < 2) return 0;  // one block: one_sided() reads it
  engine_->read_many(ops);
  return apply_run(ops);
}

BlockReader::Step BlockReader::step_batched(std::vector<ordma::ReadOp>* batch,
                                            std::vector<char>* blocks) {
  // With a data cache whole blocks land in *blocks: at most max_read of them, the most the
  // RPC path puts there too.
  const size_t max_ops =
      caching_ ? std::max<size_t>(1, std::min<uint64_t>(kMaxRun, m_.limits.max_read / bs_))
               : kMaxRun;
  while (*done_ < len_ && offset_ + *done_ < size_hint_) {
    if (engine_ && plan_run(batch, blocks, max_ops) > 0) return Step::kNeedsEngine;
    size_t n = caching_ ? without_rpc() : 0;  // no reference: the data cache, if any
    if (n == 0) return Step::kNeedsRpc;
    *done_ += n;
  }
  return Step::kComplete;
}

size_t BlockReader::one_sided(uint64_t block, uint32_t in_block, uint32_t chunk, char* out) {
  ordma::Reference ref;
  if (!engine_ || !m_.cache->find(key_, block, &ref) || ref.length <= in_block) return 0;
  const uint64_t ticket = m_.cache->data_ticket();  // before the fetch: see store()
  // With a cache the whole block travels and stays; without, only the bytes asked for.
  // A reference covers the block's valid bytes when it was issued: bytes past them are
  // EOF or newer data, which the RPC settles.
  thread_local std::vector<char> block_buf;  // one block; the read completes before return
  if (caching_ && block_buf.size() < bs_) block_buf.resize(bs_);
  char* dst = caching_ ? block_buf.data() : out;
  uint32_t from = caching_ ? 0 : in_block;
  uint32_t want = caching_ ? ref.length : std::min<uint32_t>(chunk, ref.length - in_block);
  uint32_t got = 0;
  ordma::Fault f = engine_->read(ref, ref.offset + from, want, dst, &got);
  if (f != ordma::Fault::kNone) {
    ++counts_.faults[static_cast<size_t>(f)];
    ++counts_.fallbacks;
    m_.cache->drop(key_, block);
    if (f == ordma::Fault::kTransport) engine_.reset();
    return 0;
  }
  ++counts_.ordma_reads;
  counts_.ordma_bytes += got;
  if (!caching_) return got;
  m_.cache->store(key_, block, dst, got, ticket);
  if (got <= in_block) return 0;
  uint32_t n = std::min<uint32_t>(chunk, got - in_block);
  std::memcpy(out, dst + in_block, n);
  return n;
}

Status BlockReader::start_rpc(rpc::Call& call, std::vector<char>* scratch) {
  const uint64_t pos = offset_ + *done_;
  const uint64_t block = pos / bs_;
  const auto in_block = static_cast<uint32_t>(pos % bs_);
  const size_t want = len_ - *done_;
  char* out = out_ + *done_;
  const uint64_t max_read = m_.limits.max_read;
  // One call instead of one per block: extend the span over the following blocks that
  // steps 1-2 cannot serve.
  const uint64_t last_block = (block * bs_ + in_block + want - 1) / bs_;
  uint64_t end_block = block + 1;
  while (end_block <= last_block && (end_block + 1 - block) * bs_ <= max_read &&
         !(caching_ && m_.cache->has_data(key_, end_block)) &&
         !(engine_ && m_.cache->contains(key_, end_block))) {
    ++end_block;
  }
  Pending& p = pending_;
  p.block = block;
  p.in_block = in_block;
  p.want = want;
  p.ticket = m_.cache->data_ticket();  // before the READ: see ClientCache::store
  p.whole = caching_;
  if (!caching_) {
    // Unaligned, straight into the caller's buffer (pre-posted unless kInline).
    p.span = std::min<size_t>({want, end_block * bs_ - (block * bs_ + in_block), max_read});
    p.dst = out;
    return client_.start_rpc_read(m_, call, fh_, p.dst, p.span, pos);
  }
  // Whole blocks, so they can be kept: into the caller's buffer when they fit there (the
  // read starts on a block boundary and the span ends within len), else into scratch.
  p.span = std::min<size_t>((end_block - block) * bs_, max_read);
  if (in_block == 0 && p.span <= want) {
    p.dst = out;
  } else {
    if (scratch->size() < p.span) scratch->resize(p.span);
    p.dst = scratch->data();
  }
  return client_.start_rpc_read(m_, call, fh_, p.dst, p.span, block * bs_);
}

Result<bool> BlockReader::finish_rpc(rpc::Call& call) {
  const Pending& p = pending_;
  bool eof = false;
  ODAFS_ASSIGN_OR_RETURN(size_t n, client_.finish_rpc_read(m_, call, key_, p.dst, p.span, &eof));
  after_rpc();
  if (!p.whole) {
    *done_ += n;
    return n < p.span;
  }
  for (size_t b = 0; b * bs_ < n; ++b) {
    size_t valid = std::min<size_t>(bs_, n - b * bs_);
    if (valid == bs_ || n < p.span || eof) {
      m_.cache->store(key_, p.block + b, p.dst + b * bs_, static_cast<uint32_t>(valid), p.ticket);
    }
  }
  size_t take = n > p.in_block ? std::min<size_t>(n - p.in_block, p.want) : 0;
  char* out = out_ + *done_;
  if (p.dst != out) std::memcpy(out, p.dst + p.in_block, take);
  *done_ += take;
  return n < p.span;
}

void BlockReader::after_rpc() {
  if (!engine_) engine_ = client_.engine_for_reads(m_);
}

Result<size_t> ClientImpl::read_file(const Handle& fh, uint64_t key, void* buf, size_t len,
                                     uint64_t offset, uint64_t size_hint) {
  if (read_mode() == ReadMode::kDirect) return read_direct(fh, buf, len, offset);
  thread_local rpc::Call call;
  thread_local std::vector<char> scratch;  // grows to the largest span once, then stays
  size_t done = 0;
  // Reads are idempotent: after a lost connection, re-mount and resume where it stopped,
  // once. (No DELAY here: File::pread's retry_delayed starts the read over.)
  RetryPolicy policy(options_.timeout_ms);
  for (;;) {
    ODAFS_ASSIGN_OR_RETURN(std::shared_ptr<const MountState> m, mount_state());
    Status read =
        BlockReader(this, *m, fh, key, size_hint, static_cast<char*>(buf), len, offset, &done)
            .run(call, &scratch);
    if (read.ok()) return done;
    if (!m->channel->broken() || !policy.again_after_lost_connection(true)) return read;
    ODAFS_LOG_WARN("odafs: connection lost (%s); reconnecting", read.to_string().c_str());
  }
}

void ClientImpl::read_batch(std::span<ReadRequest> requests) {
  // Through an IoQueue: each request goes down the read pipeline (cache, one-sided, RPC),
  // with up to kWindow of them waiting on their READs at once.
  constexpr size_t kWindow = 64;
  if (requests.empty()) return;
  IoQueue q(*this, std::min(kWindow, requests.size()));
  std::array<Completion, kWindow> got;
  size_t outstanding = 0;
  auto collect = [&](size_t min) {
    size_t n = q.wait(std::span(got.data(), got.size()), min, -1);
    for (size_t i = 0; i < n; ++i) {
      ReadRequest& r = requests[got[i].user_tag];
      r.result = got[i].bytes;
      r.error = got[i].error;
    }
    outstanding -= n;
  };
  for (size_t i = 0; i < requests.size(); ++i) {
    ReadRequest& r = requests[i];
    r.result = 0;
    r.error = 0;
    if (r.file == nullptr) {
      r.error = EBADF;
      continue;
    }
    if (outstanding == q.depth()) collect(1);
    if (Status submitted = q.try_submit(IoQueue::Op::kRead, *r.file, r.buf, r.len, r.offset, i);
        submitted.ok()) {
      ++outstanding;
    } else {
      r.error = submitted.errno_value();
    }
  }
  while (outstanding > 0) collect(1);
}

namespace {

// A buffer registered with the engine's client side for one direct transfer.
struct Registration {
  ordma::EngineClient* eng;
  uint32_t id;
  Registration(ordma::EngineClient* e, void* buf, size_t len)
      : eng(e), id(e->register_buffer(buf, len)) {}
  ~Registration() { eng->unregister_buffer(id); }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
};

}  // namespace

Result<size_t> ClientImpl::read_direct(const Handle& fh, void* buf, size_t len, uint64_t offset) {
  ODAFS_ASSIGN_OR_RETURN(std::shared_ptr<const MountState> m, mount_state());
  std::shared_ptr<ordma::EngineClient> eng = engine(*m);
  bool eof = false;
  if (!eng) return try_read(fh, buf, len, offset, &eof);  // no engine: RPC
  // Registration is client-local: the id travels in the RPC, the server's engine writes.
  Registration reg(eng.get(), buf, len);
  size_t done = 0;
  while (done < len) {
    size_t chunk = std::min<size_t>(len - done, m->limits.max_read);
    u_int count = 0;
    uint32_t got = 0;
    ODAFS_ASSIGN_OR_RETURN(
        ordma::Fault f,
        eng->direct(
            [&](uint32_t tag) -> Status {
              read_direct_args args{};
              put_fh(args.fh, fh);
              args.offset = offset + done;
              args.count = static_cast<u_int>(chunk);
              args.session = m->session.id;
              args.buffer = reg.id;
              args.buffer_offset = static_cast<u_int>(done);
              args.tag = tag;
              read_direct_res res{};
              ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_READ_DIRECT>(*m->channel, args, &res));
              ODAFS_RETURN_IF_ERROR(status_of(res.status, "read_direct"));
              count = res.read_direct_res_u.ok.count;
              eof = res.read_direct_res_u.ok.eof;
              return Status();
            },
            &got));
    if (f != ordma::Fault::kNone) {
      return Status(EIO, std::string("read_direct: ") + ordma::fault_name(f));
    }
    if (got != count || count > chunk)
      return Status(EPROTO, "read_direct: transfer length mismatch");
    stats_.direct_reads.fetch_add(1, std::memory_order_relaxed);
    stats_.direct_bytes.fetch_add(count, std::memory_order_relaxed);
    done += count;
    if (count < chunk) break;  // end of file
  }
  return done;
}

Result<size_t> ClientImpl::write_direct(const Handle& fh, const void* buf, size_t len,
                                        uint64_t offset, Stability how, WriteVerifier* verf,
                                        int* committed) {
  ODAFS_ASSIGN_OR_RETURN(std::shared_ptr<const MountState> m, mount_state());
  std::shared_ptr<ordma::EngineClient> eng = engine(*m);
  if (!eng) return try_write(fh, buf, len, offset, how, verf, committed);
  // This client's own write (see delegations.h); under a write delegation no open
  // revalidates the cache, so its old copies go here.
  if (m->delegations->wrote(fh, offset + len)) forget_data(cache_key(fh), offset, len);
  Registration reg(eng.get(), const_cast<void*>(buf), len);
  thread_local rpc::Call call;
  write_direct_args args{};
  put_fh(args.fh, fh);
  args.offset = offset;
  args.stable = static_cast<odafs_stable_how>(how);
  args.count = static_cast<u_int>(len);
  args.session = m->session.id;
  args.buffer = reg.id;
  uint32_t got = 0;
  // Start the call, then serve the server's pull while its reply is outstanding.
  ODAFS_ASSIGN_OR_RETURN(ordma::Fault f, eng->direct(
                                             [&](uint32_t tag) {
                                               args.tag = tag;
                                               return start<ODAFSPROC_WRITE_DIRECT>(*m->channel,
                                                                                    call, args);
                                             },
                                             &got));
  XDR x;
  ODAFS_RETURN_IF_ERROR(m->channel->wait(call, &x));
  write_res res{};
  if (!xdr_write_res(&x, &res)) return Status(EPROTO, "write_direct: malformed reply");
  // No engine, every direct-write place taken, the pull failed, others' delegations still
  // out (DELAY) or a grace period: nothing was written; write by RPC, which waits them out.
  if (raw_enum(res.status) == ODAFS_ERR_NOTSUPP || raw_enum(res.status) == ODAFS_ERR_DELAY ||
      raw_enum(res.status) == ODAFS_ERR_GRACE) {
    return try_write(fh, buf, len, offset, how, verf, committed);
  }
  ODAFS_RETURN_IF_ERROR(status_of(res.status, "write_direct"));
  if (f != ordma::Fault::kNone) {
    return Status(EIO, std::string("write_direct: ") + ordma::fault_name(f));
  }
  std::memcpy(verf->data(), res.write_res_u.ok.verf, verf->size());
  *committed = static_cast<int>(raw_enum(res.write_res_u.ok.committed));
  stats_.direct_writes.fetch_add(1, std::memory_order_relaxed);
  if (res.write_res_u.ok.count == 0 && len > 0) {
    return Status(EIO, "write_direct: server wrote nothing");
  }
  return static_cast<size_t>(res.write_res_u.ok.count);
}

size_t ClientImpl::prefetch_references(const File& f, uint64_t offset, uint64_t len) {
  size_t total = 0;
  for (uint64_t done = 0; done < len;) {
    uint64_t span = 0;
    size_t got = or_throw(with_mount(
        wire::kIdempotentProc<ODAFSPROC_GETREFS>, [&](const MountState& m) -> Result<size_t> {
          const uint64_t session = session_for_reads(m);
          if (session == 0) return size_t{0};
          span = std::min<uint64_t>(len - done, m.limits.max_read);
          getrefs_args args{};
          put_fh(args.fh, f.handle());
          args.offset = offset + done;
          args.count = static_cast<u_int>(span);
          args.session = session;
          getrefs_res res{};
          XdrFree<getrefs_res> guard{to_xdrproc(xdr_getrefs_res), &res};
          ODAFS_RETURN_IF_ERROR(call<ODAFSPROC_GETREFS>(*m.channel, args, &res));
          if (raw_enum(res.status) == ODAFS_ERR_NOTSUPP) return size_t{0};
          ODAFS_RETURN_IF_ERROR(status_of(res.status, "getrefs " + f.path()));
          const getrefs_ok& ok = res.getrefs_res_u.ok;
          for (u_int i = 0; i < ok.refs.refs_len; ++i) {
            const odafs_ref& w = ok.refs.refs_val[i];
            m.cache->insert(f.cache_key(), w.block, ordma::reference_from_wire(w));
          }
          stats_.refs_received.fetch_add(ok.refs.refs_len, std::memory_order_relaxed);
          return size_t{ok.refs.refs_len};
        }));
    if (got == 0) break;
    total += got;
    done += span;
  }
  return total;
}

}  // namespace odafs

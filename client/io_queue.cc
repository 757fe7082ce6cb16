// IoQueue: slots preallocated at the queue's depth, each driving one request through the
// read pipeline (BlockReader) or File's write steps, with at most one call in flight.
#include "client/io_queue.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "base/futex.h"
#include "base/log.h"
#include "client/block_reader.h"
#include "client/call_util.h"
#include "client/client_impl.h"
#include "client/delegations.h"
#include "client/dir_cache.h"
#include "client/mount_state.h"
#include "client/url.h"
#include "rpc/call_credential.h"
#include "rpc/client_channel.h"

namespace odafs {
namespace {

bool at_or_before(const timespec& a, const timespec& b) {
  return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec <= b.tv_nsec);
}

// Where a request by path stands.
enum class PathStep : uint8_t { kFindParent, kLookupLast, kOwnCall };

}  // namespace

// One request and what it needs while in flight. Reused for request after request: the
// call's buffers and scratch keep their capacity.
struct IoQueue::Slot {
  uint32_t index = 0;
  Op op = Op::kRead;
  File* file = nullptr;
  char* buf = nullptr;   // a write's bytes are only read
  Attr* attr = nullptr;  // a stat's result
  size_t len = 0;
  uint64_t offset = 0;
  uint64_t tag = 0;
  size_t done = 0;  // bytes read or written so far
  int error = 0;
  bool started = false;                     // the file's checks passed, the offset is settled
  bool in_flight = false;                   // `call` is out
  std::optional<RetryPolicy> retry;         // the request's, from its first failure on
  std::shared_ptr<const MountState> mount;  // the mount the calls go out on
  Handle fh{};
  uint64_t key = 0;
  std::optional<BlockReader> reader;  // reads
  bool waiting_engine = false;        // its one-sided reads are in batch_ (first, count)
  size_t batch_first = 0;
  size_t batch_count = 0;
  size_t chunk = 0;  // the WRITE in flight: its length
  rpc::Call call;
  std::vector<char> scratch;
  // Requests by path. The strings keep their capacity from request to request.
  std::string path;
  std::string name;  // its last name, in `dir`
  Handle dir{};
  PathStep step = PathStep::kFindParent;
  int want = 0;                             // access's
  int* granted = nullptr;                   // access's result
  mode_t mode = 0;                          // create's and chmod's
  int flags = 0;                            // create's
  File* made = nullptr;                     // create's result
  std::optional<Delegations::Return> held;  // unlink's: a delegation taken for the removal
  // The submitter's per-call credential (rpc::CallAs), if any: the calls the request starts
  // later, inside someone's reap or wait, go as the caller who asked for it.
  std::optional<rpc::CallCredential> as;
};

IoQueue::IoQueue(Client& client, size_t depth) : client_(ClientImpl::of(client)), depth_(depth) {
  if (depth == 0 || depth > 65536) throw Error(EINVAL, "IoQueue: depth must be 1..65536");
  slots_.reset(new Slot[depth]);
  free_.reserve(depth);
  flight_.reserve(depth);
  ready_.resize(depth);
  for (size_t i = depth; i-- > 0;) {
    slots_[i].index = static_cast<uint32_t>(i);
    slots_[i].call.set_notify(&notify_);
    free_.push_back(static_cast<uint32_t>(i));
  }
}

IoQueue::~IoQueue() {
  for (uint32_t i : flight_) {
    Slot& s = slots_[i];
    // The reply would land in a buffer nobody waits for: collect it first (its failure has
    // no one to go to).
    XDR x;
    (void)s.mount->channel->wait_until(s.call, &x, s.call.deadline());
  }
}

Result<IoQueue::Slot*> IoQueue::take_slot(File* f, const void* buf, size_t len) {
  if (len > 0 && buf == nullptr) return Status(EINVAL, "IoQueue: null buffer");
  if (f != nullptr && f->is_open() && f->client_ != &client_) {
    return Status(EINVAL, "IoQueue: a file of another client");
  }
  if (free_.empty()) return Status(EBUSY, "IoQueue: depth requests outstanding");
  Slot& s = slots_[free_.back()];
  free_.pop_back();
  s.file = f;
  s.buf = static_cast<char*>(const_cast<void*>(buf));
  s.len = len;
  s.done = 0;
  s.error = 0;
  s.started = false;
  s.in_flight = false;
  s.waiting_engine = false;
  s.retry.reset();
  s.as.reset();
  if (const rpc::CallCredential* caller = rpc::CallAs::current()) s.as.emplace(*caller);
  return &s;
}

void IoQueue::submit_read(File& f, void* buf, size_t len, uint64_t offset, uint64_t user_tag) {
  or_throw(try_submit(Op::kRead, f, buf, len, offset, user_tag));
}

void IoQueue::submit_write(File& f, const void* buf, size_t len, uint64_t offset,
                           uint64_t user_tag) {
  or_throw(try_submit(Op::kWrite, f, const_cast<void*>(buf), len, offset, user_tag));
}

void IoQueue::submit_stat(File& f, Attr* out, uint64_t user_tag) {
  if (out == nullptr) throw Error(EINVAL, "IoQueue: null attributes");
  or_throw(try_submit(Op::kStat, f, out, 0, 0, user_tag));
}

Status IoQueue::try_submit(Op op, File& f, void* buf, size_t len, uint64_t offset,
                           uint64_t user_tag) {
  ODAFS_ASSIGN_OR_RETURN(Slot * slot, take_slot(&f, buf, len));
  Slot& s = *slot;
  s.op = op;
  if (op == Op::kStat) {
    s.attr = static_cast<Attr*>(buf);
    s.buf = nullptr;
  }
  s.offset = offset;
  s.tag = user_tag;
  drive(s, false);
  if (s.in_flight) flight_.push_back(s.index);
  return Status();
}

template <class Fill>
void IoQueue::submit_by_path(Op op, const std::string& path, uint64_t user_tag, Fill&& fill) {
  Slot& s = *or_throw(take_slot(nullptr, nullptr, 0));
  s.op = op;
  s.tag = user_tag;
  try {
    s.path = path;  // keeps its capacity: allocates only for a longer path than before
  } catch (...) {
    free_.push_back(s.index);  // not submitted: the slot is free again
    throw;
  }
  s.step = PathStep::kFindParent;
  fill(s);
  drive(s, false);
  if (s.in_flight) flight_.push_back(s.index);
}

void IoQueue::submit_lstat(const std::string& path, Attr* out, uint64_t user_tag) {
  if (out == nullptr) throw Error(EINVAL, "IoQueue: null attributes");
  submit_by_path(Op::kLstat, path, user_tag, [&](Slot& s) { s.attr = out; });
}

void IoQueue::submit_access(const std::string& path, int want, int* granted, uint64_t user_tag) {
  if (granted == nullptr) throw Error(EINVAL, "IoQueue: null result");
  submit_by_path(Op::kAccess, path, user_tag, [&](Slot& s) {
    s.want = want;
    s.granted = granted;
  });
}

void IoQueue::submit_create(const std::string& path, int flags, mode_t mode, File* out,
                            uint64_t user_tag) {
  if (out == nullptr) throw Error(EINVAL, "IoQueue: null file");
  submit_by_path(Op::kCreate, path, user_tag, [&](Slot& s) {
    s.flags = flags | O_CREAT;
    s.mode = mode;
    s.made = out;
  });
}

void IoQueue::submit_unlink(const std::string& path, uint64_t user_tag) {
  submit_by_path(Op::kUnlink, path, user_tag, [](Slot&) {});
}

void IoQueue::submit_chmod(const std::string& path, mode_t mode, uint64_t user_tag) {
  submit_by_path(Op::kChmod, path, user_tag, [&](Slot& s) { s.mode = mode; });
}

RetryPolicy& IoQueue::policy(Slot& s) {
  if (!s.retry) s.retry.emplace(client_.options().timeout_ms);
  return *s.retry;
}

void IoQueue::drive(Slot& s, bool rpc_ready) {
  std::optional<rpc::CallAs> as;
  if (s.as) as.emplace(*s.as);
  for (;;) {
    Result<bool> step = false;
    // The queue's promise: a request's failure is its completion's, never thrown out of
    // submit, reap or wait. The steps return theirs; what can still be thrown under them
    // (memory running out, a bug below the client) ends the request, not the caller.
    try {
      step = s.op == Op::kRead    ? drive_read(s, rpc_ready)
             : s.op == Op::kWrite ? drive_write(s, rpc_ready)
             : s.op == Op::kStat  ? drive_stat(s, rpc_ready)
                                  : drive_by_path(s, rpc_ready);
    } catch (const std::bad_alloc&) {
      s.in_flight = false;
      complete(s, ENOMEM);
      return;
    } catch (const std::exception& e) {
      ODAFS_LOG_WARN("odafs: IoQueue request failed: %s", e.what());
      s.in_flight = false;
      complete(s, EIO);
      return;
    }
    if (step.ok()) {
      if (*step) complete(s, 0);
      return;
    }
    s.in_flight = false;
    const int err = step.errno_value();
    // DELAY: the server did nothing; the same goes again after the policy's pause (a
    // rare wait, taken here). A read resumes where it stopped, a request by path sends
    // the call of its step again.
    if (err == kDelayErrno && policy(s).again_after_delay()) {
      if (s.op == Op::kRead) s.reader.reset();
      rpc_ready = false;
      continue;
    }
    // Reads and writes are idempotent: after a lost connection (a failure on a channel
    // now broken, as ClientImpl::with_mount tells it) the request resumes where it stopped,
    // on the re-mounted connection. Of the requests by path, those that change nothing
    // start over; a CREATE or REMOVE may have been done, and fails.
    const bool idempotent =
        !by_path(s.op) || s.op == Op::kLstat || s.op == Op::kAccess || s.op == Op::kChmod;
    if (s.mount && s.mount->channel->broken() &&
        policy(s).again_after_lost_connection(idempotent)) {
      ODAFS_LOG_WARN("odafs: connection lost (%s); reconnecting",
                     step.status().to_string().c_str());
      s.reader.reset();
      start_over(s);
      rpc_ready = false;
      continue;
    }
    // A request by path that met a stale handle (a server restart, or a directory the
    // cache held removed by another client) starts over once, with the directory cache
    // emptied, as ClientImpl::resolve does.
    if (err == ESTALE && by_path(s.op) && s.mount && policy(s).again_after_stale()) {
      s.mount->dirs->clear();
      start_over(s);
      rpc_ready = false;
      continue;
    }
    // A handle from before a server restart: find the file again and resume (a removed
    // file stays ESTALE).
    if (err == ESTALE && s.mount && policy(s).again_after_stale()) {
      Result<bool> again = s.file->refresh_stale(s.fh);
      if (!again.ok()) {
        complete(s, again.errno_value());
        return;
      }
      if (*again) {
        s.reader.reset();
        s.mount.reset();
        rpc_ready = false;
        continue;
      }
    }
    complete(s, err);
    return;
  }
}

Result<bool> IoQueue::drive_read(Slot& s, bool rpc_ready) {
  if (!s.started) {
    s.started = true;
    ODAFS_RETURN_IF_ERROR(s.file->check_readable());
    ODAFS_RETURN_IF_ERROR(s.file->flush_behind(false));  // this client reads its own writes
    if (client_.read_mode() == ReadMode::kDirect) {      // the engine's push: synchronous
      ODAFS_ASSIGN_OR_RETURN(s.done, s.file->try_pread(s.buf, s.len, s.offset));
      return true;
    }
  }
  if (rpc_ready) {
    s.in_flight = false;
    ODAFS_ASSIGN_OR_RETURN(const bool complete, s.reader->finish_rpc(s.call));
    if (complete) return true;
  } else if (!s.reader) {
    ODAFS_ASSIGN_OR_RETURN(s.mount, client_.mount_state());
    std::tie(s.fh, s.key) = s.file->current();
    s.reader.emplace(&client_, *s.mount, s.fh, s.key, s.file->size_hint(), s.buf, s.len, s.offset,
                     &s.done);
  } else if (s.waiting_engine) {  // read by flush_engine
    s.waiting_engine = false;
    s.reader->apply_run({engine_done_.data() + s.batch_first, s.batch_count});
  }
  const size_t first = batch_.size();
  switch (s.reader->step_batched(&batch_, &s.scratch)) {
    case BlockReader::Step::kComplete:
      return true;
    case BlockReader::Step::kNeedsEngine:
      s.waiting_engine = true;
      s.batch_first = first;
      s.batch_count = batch_.size() - first;
      waiting_.push_back(s.index);
      return false;
    case BlockReader::Step::kNeedsRpc:
      break;
  }
  ODAFS_RETURN_IF_ERROR(s.reader->start_rpc(s.call, &s.scratch));
  s.in_flight = true;
  return false;
}

Result<bool> IoQueue::drive_write(Slot& s, bool rpc_ready) {
  if (!s.started) {
    s.started = true;
    ODAFS_RETURN_IF_ERROR(s.file->check_writable());
    ODAFS_RETURN_IF_ERROR(s.file->flush_behind(true));  // after the writes gathered before it
    ODAFS_ASSIGN_OR_RETURN(s.offset, s.file->write_offset(s.offset));
  }
  if (rpc_ready) {
    s.in_flight = false;
    WriteVerifier verf;
    int committed = 0;
    ODAFS_ASSIGN_OR_RETURN(size_t n,
                           client_.finish_write(*s.mount, s.call, s.chunk, &verf, &committed));
    s.file->wrote(s.key, s.offset + s.done, s.buf + s.done, n, verf, committed);
    s.done += n;
  }
  if (s.done >= s.len) return true;
  if (!s.mount) {
    ODAFS_ASSIGN_OR_RETURN(s.mount, client_.mount_state());
    std::tie(s.fh, s.key) = s.file->current();
    // Its own write (see delegations.h); File::wrote drops the cached copies.
    s.mount->delegations->wrote(s.fh, s.offset + s.len);
  }
  s.chunk = std::min<size_t>(s.len - s.done, s.mount->limits.max_write);
  ODAFS_RETURN_IF_ERROR(s.file->make_room_for(s.chunk));
  ODAFS_RETURN_IF_ERROR(client_.start_write(*s.mount, s.call, s.fh, s.buf + s.done, s.chunk,
                                            s.offset + s.done, client_.options().stability));
  s.in_flight = true;
  return false;
}

Result<bool> IoQueue::drive_stat(Slot& s, bool rpc_ready) {
  if (!s.started) {
    s.started = true;
    if (!s.file->is_open()) return Status(EBADF, "IoQueue: stat of a closed file");
    ODAFS_RETURN_IF_ERROR(s.file->flush_behind(false));  // as File::stat: its own writes count
  }
  if (rpc_ready) {
    s.in_flight = false;
    ODAFS_ASSIGN_OR_RETURN(Attr a, client_.finish_getattr(*s.mount, s.call, s.fh));
    s.file->learned_size(a.size);
    *s.attr = a;
    return true;
  }
  if (!s.mount) {
    ODAFS_ASSIGN_OR_RETURN(s.mount, client_.mount_state());
    std::tie(s.fh, s.key) = s.file->current();
  }
  ODAFS_RETURN_IF_ERROR(client_.start_getattr(*s.mount, s.call, s.fh));
  s.in_flight = true;
  return false;
}

Result<bool> IoQueue::drive_by_path(Slot& s, bool rpc_ready) {
  if (rpc_ready) {
    s.in_flight = false;
    return finish_step(s);
  }
  if (s.step == PathStep::kFindParent) {
    // The mount root has no parent: its stat is the synchronous one.
    if (split_path(s.path).empty()) return finish_synchronously(s);
    ODAFS_ASSIGN_OR_RETURN(auto parent, client_.resolve_parent(s.path));
    s.dir = parent.first;
    s.name = std::move(parent.second);
    ODAFS_ASSIGN_OR_RETURN(s.mount, client_.mount_state());
    s.step =
        s.op == Op::kCreate || s.op == Op::kUnlink ? PathStep::kOwnCall : PathStep::kLookupLast;
    std::pair<Handle, Attr> found;
    if (s.step == PathStep::kLookupLast &&
        client_.lookup_without_call(*s.mount, s.dir, s.name, &found)) {
      // A delegation answers the LOOKUP (a file: no symlink to follow).
      if (s.op == Op::kLstat) {
        *s.attr = client_.with_writes_behind(found.first, found.second);
        return true;
      }
      s.fh = found.first;
      if (s.op == Op::kChmod) ODAFS_RETURN_IF_ERROR(client_.forget_delegation(s.fh));
      s.step = PathStep::kOwnCall;
    }
    if (s.op == Op::kUnlink) s.held = s.mount->delegations->take_for_remove(s.dir, s.name);
  }
  return start_step(s);
}

Result<bool> IoQueue::start_step(Slot& s) {
  const MountState& m = *s.mount;
  if (s.step == PathStep::kLookupLast) {
    ODAFS_RETURN_IF_ERROR(client_.start_lookup(m, s.call, s.dir, s.name));
  } else if (s.op == Op::kAccess) {
    ODAFS_RETURN_IF_ERROR(client_.start_access(m, s.call, s.fh, s.want));
  } else if (s.op == Op::kChmod) {
    setattr_args args{};
    args.mode.set = TRUE;
    args.mode.odafs_set_u32_u.value = s.mode & 07777;
    ODAFS_RETURN_IF_ERROR(client_.start_setattr(m, s.call, s.fh, args));
  } else if (s.op == Op::kCreate) {
    ODAFS_RETURN_IF_ERROR(
        client_.start_create(m, s.call, s.dir, s.name, s.mode, s.flags, s.flags & O_ACCMODE));
  } else {  // kUnlink
    ODAFS_RETURN_IF_ERROR(client_.start_remove(m, s.call, s.dir, s.name));
  }
  s.in_flight = true;
  return false;
}

Result<bool> IoQueue::finish_step(Slot& s) {
  const MountState& m = *s.mount;
  if (s.step == PathStep::kLookupLast) {
    ODAFS_ASSIGN_OR_RETURN(auto found, client_.finish_lookup(m, s.call, s.name));
    if (s.op == Op::kLstat) {
      *s.attr = client_.with_writes_behind(found.first, found.second);
      return true;
    }
    if (found.second.type == FileType::kSymlink) return finish_synchronously(s);
    s.fh = found.first;
    // A SETATTR sent before the writes gathered behind would be undone by them, and this
    // client's own delegation on the file is void once it changes it (ClientImpl::setattr).
    if (s.op == Op::kChmod) ODAFS_RETURN_IF_ERROR(client_.forget_delegation(s.fh));
    s.step = PathStep::kOwnCall;
    return start_step(s);
  }
  switch (s.op) {
    case Op::kAccess: {
      ODAFS_ASSIGN_OR_RETURN(*s.granted, client_.finish_access(m, s.call, s.want));
      return true;
    }
    case Op::kChmod:
      ODAFS_RETURN_IF_ERROR(client_.finish_setattr(m, s.call, "chmod " + s.path).status());
      return true;
    case Op::kCreate: {
      const int access = s.flags & O_ACCMODE;
      Result<std::pair<Handle, Attr>> made =
          client_.finish_create(m, s.call, s.dir, s.name, access, "create " + s.path);
      // EEXIST without O_EXCL: a symlink at the name, which open(O_CREAT) follows.
      if (made.errno_value() == EEXIST && !(s.flags & O_EXCL)) return finish_synchronously(s);
      ODAFS_RETURN_IF_ERROR(made.status());
      ODAFS_ASSIGN_OR_RETURN(*s.made, client_.file_at_open(s.mount, made->first, made->second,
                                                           s.path, s.flags, access, false));
      return true;
    }
    default: {  // kUnlink
      Status removed = client_.finish_remove(m, s.call, "unlink " + s.path);
      if (removed.errno_value() == kDelayErrno) return removed;   // sent again, still held
      if (s.held) m.delegations->removed(*s.held, removed.ok());  // still there: bytes back
      s.held.reset();
      ODAFS_RETURN_IF_ERROR(removed);
      return true;
    }
  }
}

Result<bool> IoQueue::finish_synchronously(Slot& s) {
  switch (s.op) {
    case Op::kLstat: {
      ODAFS_ASSIGN_OR_RETURN(*s.attr, client_.try_lstat(s.path));
      return true;
    }
    case Op::kAccess: {
      ODAFS_ASSIGN_OR_RETURN(*s.granted, client_.try_access(s.path, s.want, true));
      return true;
    }
    case Op::kChmod:
      ODAFS_RETURN_IF_ERROR(client_.try_chmod(s.path, s.mode));
      return true;
    case Op::kCreate: {
      ODAFS_ASSIGN_OR_RETURN(*s.made, client_.try_open(s.path, s.flags, s.mode));
      return true;
    }
    default:
      return Status(EINVAL, "IoQueue: no synchronous form");
  }
}

void IoQueue::start_over(Slot& s) {
  if (s.held) {
    s.mount->delegations->removed(*s.held, false);
    s.held.reset();
  }
  s.step = PathStep::kFindParent;
  s.mount.reset();
}

void IoQueue::complete(Slot& s, int error) {
  if (s.held) {  // an unlink that failed before its REMOVE was answered: the bytes go back
    s.mount->delegations->removed(*s.held, false);
    s.held.reset();
  }
  s.error = error;
  if (error == 0 && s.op == Op::kRead && s.done > 0) {
    s.file->saw_size_at_least(s.offset + s.done);
  }
  s.reader.reset();
  s.mount.reset();
  ready_[(ready_head_ + ready_count_) % depth_] = s.index;
  ++ready_count_;
}

void IoQueue::flush_engine() {
  while (!waiting_.empty()) {
    engine_done_.swap(batch_);
    batch_.clear();
    waiting_done_.swap(waiting_);
    waiting_.clear();
    // One read_many per engine client: requests on one mount share it (a re-mount in
    // between brings another), and their ops lie end to end in engine_done_.
    for (size_t i = 0; i < waiting_done_.size();) {
      ordma::EngineClient* engine = slots_[waiting_done_[i]].reader->engine();
      size_t j = i + 1;
      while (j < waiting_done_.size() && slots_[waiting_done_[j]].reader->engine() == engine) ++j;
      const Slot& a = slots_[waiting_done_[i]];
      const Slot& z = slots_[waiting_done_[j - 1]];
      engine->read_many(std::span<ordma::ReadOp>(engine_done_.data() + a.batch_first,
                                                 z.batch_first + z.batch_count - a.batch_first));
      i = j;
    }
    for (uint32_t index : waiting_done_) {  // place, and step on: more one-sided, or a call
      Slot& s = slots_[index];
      drive(s, false);
      if (s.in_flight) flight_.push_back(s.index);
    }
  }
}

bool IoQueue::poll(timespec* next) {
  flush_engine();
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  bool any = false;
  for (size_t i = 0; i < flight_.size();) {
    Slot& s = slots_[flight_[i]];
    if (s.call.ready() || at_or_before(s.call.deadline(), now)) {  // ready or overdue
      drive(s, true);  // finishes the call; may start the request's next one
      if (!s.in_flight) {
        flight_[i] = flight_.back();
        flight_.pop_back();
        continue;
      }
    }
    *next = any ? earliest(*next, s.call.deadline()) : s.call.deadline();
    any = true;
    ++i;
  }
  return any;
}

size_t IoQueue::take(std::span<Completion> out) {
  size_t n = std::min(out.size(), ready_count_);
  for (size_t i = 0; i < n; ++i) {
    const Slot& s = slots_[ready_[ready_head_]];
    out[i] = Completion{s.tag, s.done, s.error};
    ready_head_ = (ready_head_ + 1) % depth_;
    --ready_count_;
    free_.push_back(s.index);
  }
  return n;
}

size_t IoQueue::reap(std::span<Completion> out) {
  timespec next;
  poll(&next);
  return take(out);
}

size_t IoQueue::wait(std::span<Completion> out, size_t min, int timeout_ms) {
  if (min > out.size()) throw Error(EINVAL, "IoQueue::wait: min is more than out holds");
  const Deadline limit(timeout_ms);
  for (;;) {
    // Read the word before looking at the calls: a reply after the look changes it, and
    // futex_wait then returns at once.
    const uint32_t seq = notify_.load(std::memory_order_acquire);
    timespec next;
    bool in_flight = poll(&next);
    if (ready_count_ >= min || !in_flight || timeout_ms == 0 || limit.passed()) break;
    timespec until = limit.get() != nullptr ? earliest(*limit.get(), next) : next;
    futex_wait(&notify_, seq, &until);
  }
  return take(out);
}

}  // namespace odafs

#include "rpc/client_channel.h"

#include <linux/futex.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "base/futex.h"
#include "base/log.h"
#include "rpc/message_header.h"
#include "rpc/record.h"
#include "rpc/xdr_util.h"

namespace odafs::rpc {
namespace {

// What a server's AUTH_ERROR means for the user (RFC 5531 auth_stat).
std::string auth_refusal(uint32_t why) {
  switch (why) {
    case AUTH_BADCRED:
      return "rpc denied: AUTH_BADCRED (the server will not act as the credential sent: a "
             "uid, gid or group it refuses, or one the kernel says this process is not)";
    case AUTH_TOOWEAK:
      return "rpc denied: AUTH_TOOWEAK (the server's export rules do not admit this client "
             "from this address or port, or ask more of it: TLS (mount option tls), a client "
             "certificate (tls_cert, tls_key) or a port below 1024)";
    case AUTH_REJECTEDCRED:
      return "rpc denied: AUTH_REJECTEDCRED";
    default:
      return "rpc denied: AUTH_ERROR " + std::to_string(why);
  }
}

uint32_t load_be32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ntohl(v);
}

size_t xdr_padding(size_t n) { return (4 - (n & 3)) & 3; }

// Status(err, message) with "where: " before the message.
Status failed_at(const std::string& where, int err, const std::string& why) {
  return Status(err, where + ": " + why);
}

}  // namespace

Channel::Channel(Options options)
    : options_(std::move(options)), next_xid_(std::random_device{}()) {
  if (options_.auth) {
    const AuthSysCred& a = *options_.auth;
    CallerCred id;
    id.uid = a.uid;
    id.gid = a.gid;
    id.ngids = static_cast<uint32_t>(std::min<size_t>(a.gids.size(), 16));
    std::copy_n(a.gids.begin(), id.ngids, id.gids);
    own_cred_.emplace(id, a.machine);
  }
}

Result<std::unique_ptr<Channel>> Channel::connect(const net::Endpoint& server, Options options,
                                                  CallFailure* failure) {
  if (failure != nullptr) *failure = CallFailure::kTransport;
  std::unique_ptr<Channel> ch(new Channel(std::move(options)));
  ODAFS_ASSIGN_OR_RETURN(ch->fd_, net::connect_tcp(server));
  if (ch->options_.tls) ODAFS_RETURN_IF_ERROR(ch->start_tls(server, failure));
  Channel* raw = ch.get();
  ch->receiver_ = std::thread([raw] { raw->receive_loop(); });
  return ch;
}

Status Channel::read_record_now(std::vector<char>* out, const timespec& deadline) {
  char mark[4];
  auto read = [&](void* buf, size_t len) -> Status {
    Result<bool> got = tls_ ? tls_->read_full(buf, len, &deadline)
                            : net::read_full_until(fd_, buf, len, &deadline);
    if (!got.ok()) return got.status();
    if (!*got) return Status(ECONNRESET, "the server closed the connection");
    return Status();
  };
  ODAFS_RETURN_IF_ERROR(read(mark, 4));
  const RecordMark m = read_record_mark(mark);
  if (!m.last || m.length > 4096) return Status(EPROTO, "bad record mark from server");
  out->resize(m.length);
  return read(out->data(), m.length);
}

Status Channel::start_tls(const net::Endpoint& server, CallFailure* failure) {
  const timespec deadline = deadline_after_ms(options_.timeout_ms);
  const std::string where = "TLS with " + server.to_string();
  std::vector<char> record;
  ReplyHeader h;
  size_t results = 0;
  const uint32_t probe_xid = next_xid_.fetch_add(1);
  // The probe: NULL with an AUTH_TLS credential, in the clear.
  CallSpec probe{probe_xid, options_.program, options_.version, 0, {}, true};
  Result<size_t> len = encode_call_record(probe, to_xdrproc(xdr_nothing), nullptr, 4096, &record);
  if (!len.ok()) return failed_at(where, EINVAL, len.status().message());
  iovec iov{record.data(), *len};
  Status sent = net::write_all_until(fd_, &iov, 1, &deadline);
  if (sent.ok()) sent = read_record_now(&record, deadline);
  if (!sent.ok()) return failed_at(where, ECONNRESET, "probe: " + sent.to_string());
  if (!decode_reply_header(record.data(), record.size(), &h, &results)) {
    return failed_at(where, EPROTO, "malformed answer to the AUTH_TLS probe");
  }
  if (h.xid != probe_xid) {
    return failed_at(where, EPROTO,
                     "an answer in the clear with XID " + std::to_string(h.xid) +
                         ", not the AUTH_TLS probe's " + std::to_string(probe_xid));
  }
  if (h.reply_stat == MSG_DENIED && h.reject_stat == AUTH_ERROR && h.auth_stat == AUTH_TOOWEAK) {
    // odafsd's answer to a peer no rule admits, whatever it asks.
    if (failure != nullptr) *failure = CallFailure::kDenied;
    return failed_at(where, EACCES, auth_refusal(h.auth_stat));
  }
  if (h.reply_stat == MSG_DENIED && h.reject_stat == AUTH_ERROR) {
    return failed_at(where, EPROTONOSUPPORT,
                     "the server offers no TLS (it refused the AUTH_TLS probe: AUTH_ERROR " +
                         std::to_string(h.auth_stat) +
                         "); odafsd serves TLS with --tls-cert and --tls-key");
  }
  if (h.reply_stat != MSG_ACCEPTED || h.accept_stat != SUCCESS ||
      h.verf.bytes() != std::string_view(kStartTlsVerifier)) {
    return failed_at(where, EPROTO, "the server did not answer the AUTH_TLS probe with STARTTLS");
  }
  // RFC 9289: nothing received in the clear is carried into TLS. The server sends nothing
  // after STARTTLS until the client's handshake begins, so bytes waiting now were added on
  // the path.
  char extra;
  if (recv(fd_, &extra, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
    return failed_at(where, EPROTO, "bytes in the clear after the server's STARTTLS");
  }
  Result<std::unique_ptr<tls::Session>> session =
      tls::Session::make(options_.tls, fd_, options_.tls_host);
  if (!session.ok()) return failed_at(where, session.errno_value(), session.status().message());
  tls_ = std::move(*session);
  if (Status s = tls_->handshake_until(deadline); !s.ok()) {
    return failed_at(where, s.errno_value(),
                     s.message() + " (server name checked: " + options_.tls_host + ")");
  }
  // A TLS 1.3 server judges the client's certificate after the client's handshake is
  // done; a NULL call now brings its refusal (an alert) here rather than to the first call.
  CallSpec ping{next_xid_.fetch_add(1), options_.program, options_.version, 0, {}, false};
  len = encode_call_record(ping, to_xdrproc(xdr_nothing), nullptr, 4096, &record);
  if (!len.ok()) return failed_at(where, EINVAL, len.status().message());
  // A failed send is not the answer: refused already, the server's alert may be waiting to
  // be read, and says why.
  (void)write_all(record.data(), *len);
  if (Status got = read_record_now(&record, deadline); !got.ok()) {
    const std::string why = tls_->last_error();
    return failed_at(
        where, EACCES,
        "the server refused this client's TLS session: " + (why.empty() ? got.to_string() : why) +
            (options_.tls->has_certificate()
                 ? ""
                 : " (this client presented no certificate: tls_cert, tls_key)"));
  }
  // Only the check's own answer will do: another is the reply to a call someone else
  // made inside this session (a record begun in the clear, say), and the session is not
  // this client's alone.
  h = ReplyHeader{};
  if (!decode_reply_header(record.data(), record.size(), &h, &results) || h.xid != ping.xid ||
      h.reply_stat != MSG_ACCEPTED || h.accept_stat != SUCCESS) {
    return failed_at(where, EPROTO,
                     "the first answer under TLS is not to this client's NULL check (XID " +
                         std::to_string(h.xid) + ", not " + std::to_string(ping.xid) + ")");
  }
  return Status();
}

Result<bool> Channel::read_full(void* buf, size_t len) {
  if (!tls_) return net::read_full(fd_, buf, len);
  return tls_->read_full(buf, len, nullptr);
}

Status Channel::read_rest(void* buf, size_t len) {
  Result<bool> got = read_full(buf, len);
  if (!got.ok()) return got.status();
  if (!*got) return Status(ECONNRESET, "server closed the connection mid-record");
  return Status();
}

Status Channel::readv_full(iovec* iov, int count) {
  if (!tls_) return net::readv_full(fd_, iov, count);
  for (int i = 0; i < count; ++i) {
    ODAFS_RETURN_IF_ERROR(read_rest(iov[i].iov_base, iov[i].iov_len));
  }
  return Status();
}

Status Channel::write_all(const char* data, size_t len) {
  if (!tls_) {
    iovec iov{const_cast<char*>(data), len};
    return net::write_all(fd_, &iov, 1, options_.timeout_ms);
  }
  const timespec deadline = deadline_after_ms(options_.timeout_ms);
  return tls_->write_all(data, len, &deadline);
}

Channel::~Channel() {
  broken_.store(true, std::memory_order_release);
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
  if (receiver_.joinable()) receiver_.join();
  if (fd_ >= 0) close(fd_);
}

Status Channel::start(Call& c, uint32_t proc, xdrproc_t xargs, const void* args) {
  if (broken()) {
    std::lock_guard lock(pending_mu_);
    return Status(ECONNRESET, "rpc channel broken: " + broken_reason_);
  }
  c.xid_ = next_xid_.fetch_add(1, std::memory_order_relaxed);
  c.error_.clear();
  c.posted_length_.reset();
  c.deadline_ = deadline_after_ms(options_.timeout_ms);
  c.started_ns_ = monotonic_ns();

  // The thread's caller, if it set one (CallAs), else the channel's own (or AUTH_NONE).
  const CallCredential* as = CallAs::current();
  std::string_view cred = as != nullptr ? as->body() : own_cred_ ? own_cred_->body() : "";
  CallSpec spec{c.xid_, options_.program, options_.version, proc, cred};
  Result<size_t> record = encode_call_record(spec, xargs, args, options_.max_record, &c.request_);
  if (!record.ok()) return record.status();
  const size_t body = *record - 4;

  c.state_.store(Call::kPending, std::memory_order_relaxed);
  {
    // Checked again under the lock fail_all takes: a call added after the receiver failed
    // the pending ones (and stopped) would wait out the whole timeout for a reply that no
    // one reads (a SIGKILLed server's connection, between the check above and here).
    std::lock_guard lock(pending_mu_);
    if (broken()) {
      c.state_.store(Call::kIdle, std::memory_order_relaxed);
      return Status(ECONNRESET, "rpc channel broken: " + broken_reason_);
    }
    pending_.push_back(&c);
  }
  Status sent;
  {
    std::lock_guard lock(send_mu_);
    sent = write_all(c.request_.data(), body + 4);
  }
  if (!sent.ok()) {
    // Part of the record may be on the wire: the stream is unusable from here on.
    take_pending(c.xid_);
    c.state_.store(Call::kIdle, std::memory_order_relaxed);
    c.posted_ = nullptr;
    shutdown(fd_, SHUT_RDWR);
    fail_all("send failed: " + sent.to_string());
    return Status(ECONNRESET, "rpc send: " + sent.to_string());
  }
  return Status();
}

Status Channel::wait(Call& c, XDR* results, CallFailure* failure) {
  return wait_until(c, results, deadline_after_ms(options_.timeout_ms), failure);
}

namespace {
thread_local BeforeBlockingHook before_blocking = nullptr;
thread_local void* before_blocking_arg = nullptr;
}  // namespace

void set_before_blocking_hook(BeforeBlockingHook hook, void* arg) {
  before_blocking = hook;
  before_blocking_arg = arg;
}

Status Channel::wait_until(Call& c, XDR* results, timespec deadline, CallFailure* failure) {
  CallFailure ignored;
  CallFailure& layer = failure != nullptr ? *failure : ignored;
  layer = CallFailure::kTransport;
  if (before_blocking != nullptr && c.state_.load(std::memory_order_acquire) == Call::kPending) {
    before_blocking(before_blocking_arg);
  }
  int receiver_waits = 0;  // deadlines passed while the receiver read this call's reply
  while (c.state_.load(std::memory_order_acquire) == Call::kPending) {
    futex_wait(&c.state_, Call::kPending, &deadline);
    bool expired = deadline_passed(deadline);
    if (expired && c.state_.load(std::memory_order_acquire) == Call::kPending) {
      if (take_pending(c.xid_) == &c) {
        c.state_.store(Call::kIdle, std::memory_order_relaxed);
        c.posted_ = nullptr;
        return Status(ETIMEDOUT, "rpc call timed out");
      }
      // The receiver is reading this call's reply and normally completes it at once. A
      // server stalled mid-record would hold it (and every later reply) for good: a second
      // later the connection is shut down, the stream being unusable anyway, and the
      // receiver fails the call.
      if (++receiver_waits == 2) shutdown(fd_, SHUT_RDWR);
      deadline = deadline_after_ms(1000);
    }
  }
  c.state_.store(Call::kIdle, std::memory_order_relaxed);
  c.posted_ = nullptr;
  if (!c.error_.empty()) {
    if (receiver_waits >= 2) return Status(ETIMEDOUT, "rpc call timed out mid-reply");
    return Status(ECONNRESET, c.error_);
  }

  ReplyHeader h;
  size_t results_offset = 0;
  if (!decode_reply_header(c.reply_.data(), c.reply_.size(), &h, &results_offset)) {
    return Status(EPROTO, "malformed rpc reply header");
  }
  if (h.reply_stat == MSG_DENIED) {
    layer = CallFailure::kDenied;
    return Status(EACCES, h.reject_stat == RPC_MISMATCH ? std::string("rpc denied: RPC_MISMATCH")
                                                        : auth_refusal(h.auth_stat));
  }
  switch (h.accept_stat) {
    case SUCCESS:
      xdrmem_create(results, c.reply_.data() + results_offset,
                    static_cast<u_int>(c.reply_.size() - results_offset), XDR_DECODE);
      return Status();
    case PROG_UNAVAIL:
      layer = CallFailure::kProgUnavail;
      return Status(EPROTONOSUPPORT, "rpc: PROG_UNAVAIL");
    case PROG_MISMATCH:
      layer = CallFailure::kProgMismatch;
      return Status(EPROTONOSUPPORT, "rpc: PROG_MISMATCH (server supports " +
                                         std::to_string(h.mismatch_low) + ".." +
                                         std::to_string(h.mismatch_high) + ")");
    case PROC_UNAVAIL:
      layer = CallFailure::kProcUnavail;
      return Status(EOPNOTSUPP, "rpc: PROC_UNAVAIL");
    case GARBAGE_ARGS:
      layer = CallFailure::kGarbageArgs;
      return Status(EINVAL, "rpc: GARBAGE_ARGS");
    default:
      layer = CallFailure::kSystemErr;
      return Status(EIO, "rpc: SYSTEM_ERR");
  }
}

Status Channel::call(uint32_t proc, xdrproc_t xargs, const void* args, xdrproc_t xres, void* res,
                     CallFailure* failure) {
  if (failure != nullptr) *failure = CallFailure::kTransport;
  thread_local Call c;
  ODAFS_RETURN_IF_ERROR(start(c, proc, xargs, args));
  XDR x;
  ODAFS_RETURN_IF_ERROR(wait(c, &x, failure));
  bool ok = xres(&x, res, 0);
  xdr_destroy(&x);
  if (!ok) return Status(EPROTO, "malformed rpc results");
  return Status();
}

Call* Channel::take_pending(uint32_t xid) {
  std::lock_guard lock(pending_mu_);
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i]->xid_ == xid) {
      Call* c = pending_[i];
      pending_[i] = pending_.back();
      pending_.pop_back();
      return c;
    }
  }
  return nullptr;
}

void Channel::complete(Call* c) {
  // Only the receiver completes calls with replies, so a plain max suffices; fail_all's
  // completions carry an error and confirm nothing.
  if (c->error_.empty() && c->started_ns_ > confirmed_ns_.load(std::memory_order_relaxed)) {
    confirmed_ns_.store(c->started_ns_, std::memory_order_release);
  }
  // The notify word is bumped before the call turns ready: once it is ready its owner may
  // free both. A sleeper on the word that looked before the bump finds the word changed;
  // one that looked after it finds the call ready or is woken below. Waking an address
  // that was freed meanwhile touches no memory.
  std::atomic<uint32_t>* notify = c->notify_;
  if (notify != nullptr) notify->fetch_add(1, std::memory_order_release);
  c->state_.store(Call::kDone, std::memory_order_release);
  futex_wake(&c->state_);
  if (notify != nullptr) futex_wake(notify);
}

void Channel::fail_all(const std::string& why) {
  std::vector<Call*> failed;
  {
    std::lock_guard lock(pending_mu_);
    broken_.store(true, std::memory_order_release);
    if (broken_reason_.empty()) broken_reason_ = why;
    failed.swap(pending_);
  }
  for (Call* c : failed) {
    c->error_ = "rpc connection lost: " + why;
    complete(c);
  }
}

void Channel::receive_loop() {
  // The call whose reply is being read: out of pending_ from take_pending on, so if the
  // stream breaks mid-reply fail_all cannot find it and it is failed here (else its
  // waiter, finding it gone from pending_, would wait on the receiver for good).
  Call* reading = nullptr;
  Result<bool> more = true;
  while (more.ok() && *more) more = receive_record(&reading);
  if (more.ok()) return;  // ended cleanly: receive_record failed every call
  const std::string why = more.status().to_string();
  if (!broken()) ODAFS_LOG_WARN("rpc channel: %s", why.c_str());
  fail_all(why);
  if (reading != nullptr) {
    reading->error_ = "rpc connection lost mid-reply: " + why;
    complete(reading);
  }
}

Result<bool> Channel::receive_record(Call** reading) {
  // Record mark, XID and direction: every reply and call has at least these.
  char head[12];
  ODAFS_ASSIGN_OR_RETURN(const bool got, read_full(head, sizeof head));
  if (!got) {
    fail_all("server closed the connection");
    return false;
  }
  const RecordMark mark = read_record_mark(head);
  uint32_t xid = load_be32(head + 4);
  size_t frag = mark.length;
  bool last = mark.last;
  if (frag < 8 || frag > options_.max_record) {
    fail_all("bad record mark from server");
    return false;
  }
  if (load_be32(head + 8) == CALL) {  // a callback from the server
    ODAFS_RETURN_IF_ERROR(take_callback(head + 4, frag - 8, last));
    return true;
  }
  Call* c = take_pending(xid);
  if (c == nullptr) {  // timed out and abandoned: skip its reply
    ODAFS_RETURN_IF_ERROR(discard(frag - 8, last));
    return true;
  }
  *reading = c;
  c->reply_.resize(8);
  std::memcpy(c->reply_.data(), head + 4, 8);
  if (c->posted_ != nullptr && last && frag >= c->posted_header_ && c->posted_header_ >= 12) {
    c->reply_.resize(c->posted_header_);
    ODAFS_RETURN_IF_ERROR(read_rest(c->reply_.data() + 8, c->posted_header_ - 8));
    size_t payload = load_be32(c->reply_.data() + c->posted_header_ - 4);
    size_t rest = frag - c->posted_header_;
    size_t padded = payload + xdr_padding(payload);
    if (payload <= c->posted_capacity_ && rest >= padded) {
      // Payload straight into the posted buffer; padding dropped; whatever follows the
      // opaque (the trailer) lands right after the header, so the results decode as
      // if the payload had been cut out of the record.
      size_t trailer = rest - padded;
      char pad[4];
      c->reply_.resize(c->posted_header_ + trailer);
      iovec iov[3] = {{c->posted_, payload},
                      {pad, padded - payload},
                      {c->reply_.data() + c->posted_header_, trailer}};
      ODAFS_RETURN_IF_ERROR(readv_full(iov, 3));
      c->posted_length_ = payload;
    } else {
      ODAFS_RETURN_IF_ERROR(read_generic(c, rest, last));  // not the posted layout: keep it whole
    }
  } else {
    ODAFS_RETURN_IF_ERROR(read_generic(c, frag - 8, last));
  }
  *reading = nullptr;
  complete(c);
  return true;
}

Status Channel::take_callback(const char* xid_and_direction, size_t frag_left, bool last) {
  // Callbacks are small and come whole in one fragment; anything else is dropped.
  if (!last || frag_left > kMaxCallbackRecord) {
    ODAFS_LOG_WARN("rpc channel: dropping a %zu-byte callback from the server", frag_left);
    return discard(frag_left, last);
  }
  callback_record_.resize(8 + frag_left);
  std::memcpy(callback_record_.data(), xid_and_direction, 8);
  ODAFS_RETURN_IF_ERROR(read_rest(callback_record_.data() + 8, frag_left));
  CallHeader header;
  size_t args_offset = 0;
  if (decode_call_header(callback_record_.data(), callback_record_.size(), &header, &args_offset) !=
      CallHeaderStatus::kOk) {
    ODAFS_LOG_WARN("rpc channel: dropping a malformed callback from the server");
    return Status();
  }
  std::shared_ptr<const CallbackHandler> handler;
  {
    std::lock_guard lock(pending_mu_);
    handler = callback_handler_;
  }
  if (!handler || !*handler) return Status();  // none set, or unset (nullptr)
  XDR x;
  xdrmem_create(&x, callback_record_.data() + args_offset,
                static_cast<u_int>(callback_record_.size() - args_offset), XDR_DECODE);
  (*handler)(header, &x);
  xdr_destroy(&x);
  return Status();
}

void Channel::set_callback_handler(CallbackHandler handler) {
  auto h = std::make_shared<const CallbackHandler>(std::move(handler));
  std::lock_guard lock(pending_mu_);
  callback_handler_ = std::move(h);
}

Status Channel::read_fragment_mark(size_t* length, bool* last) {
  char head[4];
  ODAFS_RETURN_IF_ERROR(read_rest(head, 4));
  const RecordMark mark = read_record_mark(head);
  *length = mark.length;
  *last = mark.last;
  return Status();
}

// Appends the rest of the current fragment, and any following fragments of the record,
// to c's reply buffer.
Status Channel::read_generic(Call* c, size_t frag_left, bool last) {
  for (;;) {
    size_t at = c->reply_.size();
    if (at + frag_left > options_.max_record) return Status(EMSGSIZE, "rpc reply too large");
    c->reply_.resize(at + frag_left);
    ODAFS_RETURN_IF_ERROR(read_rest(c->reply_.data() + at, frag_left));
    if (last) return Status();
    ODAFS_RETURN_IF_ERROR(read_fragment_mark(&frag_left, &last));
  }
}

Status Channel::discard(size_t frag_left, bool last) {
  char sink[4096];
  for (;;) {
    while (frag_left > 0) {
      size_t n = std::min(frag_left, sizeof sink);
      ODAFS_RETURN_IF_ERROR(read_rest(sink, n));
      frag_left -= n;
    }
    if (last) return Status();
    ODAFS_RETURN_IF_ERROR(read_fragment_mark(&frag_left, &last));
  }
}

}  // namespace odafs::rpc

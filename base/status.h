// Status and Result<T>: how a function inside odafs says it failed.
//
// Why: failures used to travel three ways at once: a value that means "failed" (nullptr,
// false, an empty OpenNode), errno set on the side, and now and then an enum out-parameter
// saying how to read errno. Nothing tied errno to the call that set it, so any system call
// between the failure and the caller's look at errno (a close(), a destructor, logging)
// could change the answer. A Status is the errno value itself, carried by the return value;
// a Result<T> is a T or the Status of why there is none.
//
// The rule (issue #11): internally, functions return a Status or a Result<T>. Exceptions
// are for the public C++ API only (odafs::Error, client/client.h), -1 with errno for the C
// API (client/odafs.h) and for thin wrappers that deliberately mirror a system call (the
// server's FileEnv, say): those say so where they are declared. The client follows it too
// (issue #27): its internals pass Status and Result<T>, and only its public methods turn a
// failure into an Error (odafs::or_throw, client/error.h).
//
// The error code is an errno value (never 0 for a failure) so that every layer maps it the
// same way: the server to a protocol status (proto/status.h), the client to an Error. The
// message is a few words of context for logs and tests ("lookup: replaced"), not for
// machines: never branch on it.
//
// Cost: an ok Status is an int and an empty std::string: constructing, moving or returning
// it never allocates. A failure may allocate for a message longer than the string's
// inline buffer (15 bytes with libstdc++); failures are off the hot path. A Result<T>
// holding a value costs what the T costs, plus an index.
//
// Thread-safety: plain values. Const member functions may be called from several threads
// at once; anything else needs the caller's synchronisation, as for std::string.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace odafs {

class [[nodiscard]] Status {
 public:
  // Success.
  Status() noexcept = default;
  // A failure: errno_value is the errno that says why, message a few words of context.
  // REQUIRES: errno_value != 0 (0 would read as success; it is turned into EIO so that a
  // bug never reports a failure as done).
  Status(int errno_value, std::string message)
      : errno_(errno_value != 0 ? errno_value : EIO), message_(std::move(message)) {}

  // The failure the last system call reported: Status(errno, message). Call it right after
  // the call that failed, before anything else can change errno. Takes a plain string so
  // that errno is read before anything (building a std::string, say) could touch it.
  static Status from_errno(const char* message) {
    const int err = errno;
    return Status(err, message);
  }

  bool ok() const noexcept { return errno_ == 0; }
  // 0 when ok().
  int errno_value() const noexcept { return errno_; }
  // Empty when ok().
  const std::string& message() const noexcept { return message_; }
  // "ok", or "message: strerror text" for logs and test output.
  std::string to_string() const {
    if (ok()) return "ok";
    return (message_.empty() ? std::string() : message_ + ": ") + std::strerror(errno_);
  }

 private:
  int errno_ = 0;
  std::string message_;
};

// A T, or the Status of why there is none. Move-only if T is. Construct from a T (success)
// or from a failed Status.
// REQUIRES: a Status it is built from is a failure (an ok one is turned into EIO, as
// above); value(), operator* and operator-> only when ok() (otherwise the process aborts
// with the status on stderr: a bug, never an error path).
template <class T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>, "Result<Status>: use Status");
  static_assert(!std::is_reference_v<T>, "Result<T&>: hold a pointer instead");

 public:
  Result(T value) noexcept(std::is_nothrow_move_constructible_v<T>)  // NOLINT: implicit
      : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Status status)  // NOLINT: implicit
      : v_(std::in_place_index<1>,
           status.ok() ? Status(EIO, "Result made from an ok Status") : std::move(status)) {}

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  // The failure, or an ok Status when there is a value.
  Status status() const& { return ok() ? Status() : std::get<1>(v_); }
  Status status() && { return ok() ? Status() : std::get<1>(std::move(v_)); }
  // status().errno_value() without copying the message: 0 when ok().
  int errno_value() const noexcept { return ok() ? 0 : std::get_if<1>(&v_)->errno_value(); }

  T& value() & {
    check();
    return *std::get_if<0>(&v_);
  }
  const T& value() const& {
    check();
    return *std::get_if<0>(&v_);
  }
  T&& value() && {
    check();
    return std::move(*std::get_if<0>(&v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void check() const {
    if (ok()) return;
    std::fprintf(stderr, "odafs: value() of a failed Result: %s\n",
                 std::get_if<1>(&v_)->to_string().c_str());
    std::abort();
  }

  std::variant<T, Status> v_;
};

// The Status of a Status or of a Result<T> (ok when it holds a value), for code that takes
// either: the macros below, the client's retry helpers.
inline const Status& to_status(const Status& s) { return s; }
inline Status to_status(Status&& s) { return std::move(s); }
template <class T>
Status to_status(const Result<T>& r) {
  return r.status();
}
template <class T>
Status to_status(Result<T>&& r) {
  return std::move(r).status();
}

}  // namespace odafs

// ODAFS_RETURN_IF_ERROR(expr): expr is a Status or a Result<T>; when it failed, returns its
// Status from the enclosing function (which returns a Status or any Result<U>). expr is
// evaluated once.
//
// ODAFS_ASSIGN_OR_RETURN(lhs, expr): expr is a Result<T>; when it holds a value,
// `lhs = std::move(value)` (lhs may declare: `auto x`, `auto [a, b]`, `Attr a`), else
// returns its Status as above. A statement, not an expression: not inside an unbraced if.
// lhs may not hold an unparenthesised comma (`std::pair<A, B> p`: use auto).
//
// In a lambda: give it its return type (`[&]() -> Result<T> {...}` or `-> Status`); a
// deduced one would see the macro's Status and the value as two different types.
#define ODAFS_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                               \
    if (auto&& odafs_status_or_result_ = (expr); !odafs_status_or_result_.ok()) {    \
      return ::odafs::to_status(                                                     \
          std::forward<decltype(odafs_status_or_result_)>(odafs_status_or_result_)); \
    }                                                                                \
  } while (false)

#define ODAFS_STATUS_CONCAT_INNER_(a, b) a##b
#define ODAFS_STATUS_CONCAT_(a, b) ODAFS_STATUS_CONCAT_INNER_(a, b)
#define ODAFS_ASSIGN_OR_RETURN(lhs, expr) \
  ODAFS_ASSIGN_OR_RETURN_IMPL_(ODAFS_STATUS_CONCAT_(odafs_result_, __LINE__), lhs, expr)
#define ODAFS_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                 \
  if (!result.ok()) return std::move(result).status();  \
  lhs = std::move(result).value()

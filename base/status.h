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
// server's FileEnv, say): those say so where they are declared.
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

}  // namespace odafs

// Unit: Status and Result<T> (base/status.h).
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "base/status.h"

using odafs::Result;
using odafs::Status;

// An ok Status, and a Result holding a value, never allocate: their constructors and moves
// cannot throw (an allocation could).
static_assert(std::is_nothrow_default_constructible_v<Status>);
static_assert(std::is_nothrow_move_constructible_v<Status>);
static_assert(std::is_nothrow_move_constructible_v<Result<int>>);
static_assert(std::is_nothrow_constructible_v<Result<std::shared_ptr<int>>, std::shared_ptr<int>>);
// Move-only values stay move-only.
static_assert(!std::is_copy_constructible_v<Result<std::unique_ptr<int>>>);

namespace {

Result<int> half(int n) {
  if (n % 2 != 0) return Status(EINVAL, "odd");
  return n / 2;
}

// Whether running fn in a child process ends it with SIGABRT.
template <class Fn>
bool aborts(Fn fn) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    fn();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

}  // namespace

TEST_CASE("a default Status is ok, with no errno and no message") {
  Status s;
  CHECK(s.ok());
  CHECK(s.errno_value() == 0);
  CHECK(s.message().empty());
  CHECK(s.to_string() == "ok");
}

TEST_CASE("a failed Status carries its errno and message") {
  Status s(ENOENT, "lookup");
  CHECK_FALSE(s.ok());
  CHECK(s.errno_value() == ENOENT);
  CHECK(s.message() == "lookup");
  CHECK(s.to_string() == std::string("lookup: ") + std::strerror(ENOENT));
  CHECK(Status(EACCES, "").to_string() == std::strerror(EACCES));

  Status copy = s;
  CHECK(copy.errno_value() == ENOENT);
  CHECK(copy.message() == "lookup");
  Status moved = std::move(copy);
  CHECK(moved.errno_value() == ENOENT);
}

TEST_CASE("a failure with errno 0 reads as EIO, never as success") {
  Status s(0, "bug");
  CHECK_FALSE(s.ok());
  CHECK(s.errno_value() == EIO);
  CHECK(s.message() == "bug");
}

TEST_CASE("from_errno takes errno as it is at the call") {
  errno = EXDEV;
  Status s = Status::from_errno("rename");
  errno = 0;  // later changes do not reach it
  CHECK(s.errno_value() == EXDEV);
  CHECK(s.message() == "rename");
}

TEST_CASE("a Result holds a value or a failure") {
  Result<int> good = half(8);
  REQUIRE(good.ok());
  CHECK(static_cast<bool>(good));
  CHECK(good.value() == 4);
  CHECK(*good == 4);
  CHECK(good.errno_value() == 0);
  CHECK(good.status().ok());

  Result<int> bad = half(7);
  CHECK_FALSE(bad.ok());
  CHECK_FALSE(static_cast<bool>(bad));
  CHECK(bad.errno_value() == EINVAL);
  Status why = bad.status();
  CHECK(why.errno_value() == EINVAL);
  CHECK(why.message() == "odd");
  // status() of an rvalue moves the failure out.
  Status taken = std::move(bad).status();
  CHECK(taken.errno_value() == EINVAL);
  CHECK(taken.message() == "odd");
}

TEST_CASE("a Result made from an ok Status is a failure (EIO)") {
  Result<int> r = Status();
  CHECK_FALSE(r.ok());
  CHECK(r.errno_value() == EIO);
}

TEST_CASE("a Result of a move-only type hands its value over") {
  Result<std::unique_ptr<std::string>> r = std::make_unique<std::string>("payload");
  REQUIRE(r.ok());
  CHECK(r->get() != nullptr);
  CHECK(**r == "payload");
  std::unique_ptr<std::string> out = std::move(r).value();
  REQUIRE(out != nullptr);
  CHECK(*out == "payload");

  Result<std::unique_ptr<std::string>> none = Status(ESTALE, "gone");
  CHECK(none.errno_value() == ESTALE);
}

TEST_CASE("operator-> reaches the value's members") {
  Result<std::string> r = std::string("abc");
  CHECK(r->size() == 3);
  const Result<std::string>& c = r;
  CHECK(c->front() == 'a');
  r->push_back('d');
  CHECK(r.value() == "abcd");
}

TEST_CASE("value() of a failed Result aborts") {
  CHECK(aborts([] {
    Result<int> r = Status(ENOENT, "missing");
    (void)r.value();
  }));
  CHECK_FALSE(aborts([] {
    Result<int> r = 1;
    (void)r.value();
  }));
}

namespace {

// What the macros are for: one line per step that may fail.
Result<int> quarter(int n) {
  ODAFS_ASSIGN_OR_RETURN(int h, half(n));
  ODAFS_ASSIGN_OR_RETURN(h, half(h));  // assigns to an existing name too
  return h;
}

Status even(int n) {
  ODAFS_RETURN_IF_ERROR(half(n));  // a Result's failure, as a Status
  ODAFS_RETURN_IF_ERROR(n >= 0 ? Status() : Status(ERANGE, "negative"));
  return Status();
}

}  // namespace

TEST_CASE("ODAFS_ASSIGN_OR_RETURN and ODAFS_RETURN_IF_ERROR pass a failure up unchanged") {
  CHECK(*quarter(8) == 2);
  Result<int> odd = quarter(6);  // 6 -> 3 -> odd
  REQUIRE(!odd.ok());
  CHECK(odd.errno_value() == half(3).errno_value());
  CHECK(odd.status().message() == half(3).status().message());
  CHECK(even(4).ok());
  CHECK(even(3).errno_value() == half(3).errno_value());
  CHECK(even(-2).errno_value() == ERANGE);
}

TEST_CASE("the macros work inside lambdas that name their Result or Status") {
  int evaluated = 0;
  auto count = [&](int n) {
    ++evaluated;
    return half(n);
  };
  auto sum = [&](int a, int b) -> Result<int> {
    ODAFS_ASSIGN_OR_RETURN(auto x, count(a));
    ODAFS_ASSIGN_OR_RETURN(auto y, count(b));
    return x + y;
  };
  CHECK(*sum(2, 4) == 3);
  CHECK(evaluated == 2);  // each expression once
  CHECK(!sum(1, 4).ok());
  CHECK(evaluated == 3);  // stopped at the first failure
  auto check = [&](int n) -> Status {
    ODAFS_RETURN_IF_ERROR(count(n));
    return Status();
  };
  CHECK(check(2).ok());
  CHECK(!check(5).ok());
  // A move-only value moves out of the Result.
  auto take = []() -> Result<std::unique_ptr<int>> {
    ODAFS_ASSIGN_OR_RETURN(std::unique_ptr<int> p,
                           Result<std::unique_ptr<int>>(std::make_unique<int>(7)));
    return p;
  };
  CHECK(**take() == 7);
}

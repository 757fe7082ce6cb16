// odafs::Error: what the throwing calls of libodafs's C++ API throw on failure (which ones:
// client/client.h, "Errors"), and or_throw, the one place a Status becomes one.
#pragma once

#include <string>
#include <system_error>
#include <utility>

#include "base/status.h"

namespace odafs {

class Error : public std::system_error {
 public:
  Error(int err, const std::string& what) : std::system_error(err, std::generic_category(), what) {}
  int errno_value() const { return code().value(); }
};

// A public method's edge: the library's internals return Status and Result<T> (base/status.h);
// the throwing API turns a failure into Error(errno, message) here and nowhere else. what()
// then reads "message: strerror text", as Status::to_string() does.
inline void or_throw(const Status& s) {
  if (!s.ok()) throw Error(s.errno_value(), s.message());
}
template <class T>
T or_throw(Result<T>&& r) {
  if (!r.ok()) or_throw(r.status());
  return std::move(r).value();
}

}  // namespace odafs

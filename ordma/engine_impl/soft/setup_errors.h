// How the soft engine's set-up fails: connecting, the greeting, the rings and the
// listener throw std::system_error, which the engine factories catch and report
// (ordma/engine.h); base/net answers with Status. These turn one into the other in one
// place. The read path itself never throws: a transfer's failure is a Fault.
#pragma once

#include <string>
#include <system_error>
#include <utility>

#include "base/status.h"

namespace odafs::ordma {

[[noreturn]] inline void fail(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}
inline void ok_or_fail(const Status& s) {
  if (!s.ok()) fail(s.errno_value(), s.message());
}
template <class T>
T value_or_fail(Result<T> r) {
  if (!r.ok()) fail(r.errno_value(), r.status().message());
  return std::move(r).value();
}

}  // namespace odafs::ordma

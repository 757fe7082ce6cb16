// odafs::Error: what every call of libodafs's C++ API throws on failure (client/client.h).
#pragma once

#include <string>
#include <system_error>

namespace odafs {

class Error : public std::system_error {
 public:
  Error(int err, const std::string& what) : std::system_error(err, std::generic_category(), what) {}
  int errno_value() const { return code().value(); }
};

}  // namespace odafs

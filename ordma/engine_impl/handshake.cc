#include "ordma/engine_impl/handshake.h"

#include <cerrno>
#include <system_error>

#include "ordma/wire.h"
#include "rpc/net.h"

namespace odafs::ordma {

void answer_greeting(int fd, const Session& session) {
  unsigned char greeting[wire::kGreetingBytes];
  if (!net::read_full(fd, greeting, sizeof greeting) || wire::get32(greeting) != wire::kMagic ||
      wire::get16(greeting + 4) != wire::kVersion) {
    throw std::system_error(EPROTO, std::generic_category(), "engine: bad greeting");
  }
  unsigned char hello[wire::kHelloBytes];
  wire::encode_hello(session.id, prove_session(session.secret, wire::greeting_nonce(greeting)),
                     hello);
  iovec iov{hello, sizeof hello};
  net::write_all(fd, &iov, 1);
}

}  // namespace odafs::ordma

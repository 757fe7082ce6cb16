#include "ordma/engine_impl/soft/handshake.h"

#include <cerrno>
#include <system_error>

#include "base/net.h"
#include "ordma/engine_impl/soft/wire.h"

namespace odafs::ordma {

void answer_greeting(int fd, const Session& session) {
  unsigned char greeting[wire::kGreetingBytes];
  Nonce nonce;
  if (!net::read_full(fd, greeting, sizeof greeting) || !wire::decode_greeting(greeting, &nonce)) {
    throw std::system_error(EPROTO, std::generic_category(), "engine: bad greeting");
  }
  unsigned char hello[wire::kHelloBytes];
  wire::encode_hello(session.id, prove_session(session.secret, nonce), hello);
  iovec iov{hello, sizeof hello};
  net::write_all(fd, &iov, 1);
}

}  // namespace odafs::ordma

#include "ordma/engine_impl/soft/handshake.h"

#include <cerrno>
#include <system_error>

#include "base/net.h"
#include "ordma/engine_impl/soft/wire.h"

namespace odafs::ordma {

void answer_greeting(int fd, const Session& session, const timespec* deadline) {
  unsigned char greeting[wire::kGreetingBytes];
  Nonce nonce;
  if (!net::read_full_until(fd, greeting, sizeof greeting, deadline) ||
      !wire::decode_greeting(greeting, &nonce)) {
    throw std::system_error(EPROTO, std::generic_category(), "engine: bad greeting");
  }
  unsigned char hello[wire::kHelloBytes];
  wire::encode_hello(session.id, prove_session(session.secret, nonce), hello);
  iovec iov{hello, sizeof hello};
  net::write_all_until(fd, &iov, 1, deadline);
}

}  // namespace odafs::ordma

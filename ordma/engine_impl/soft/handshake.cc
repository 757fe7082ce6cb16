#include "ordma/engine_impl/soft/handshake.h"

#include <cerrno>
#include <system_error>

#include "base/net.h"
#include "ordma/engine_impl/soft/setup_errors.h"
#include "ordma/engine_impl/soft/wire.h"

namespace odafs::ordma {

std::unique_ptr<tls::Session> answer_greeting(int fd, const Session& session,
                                              const timespec* deadline,
                                              std::shared_ptr<const tls::Context> tls,
                                              const std::string& host) {
  unsigned char greeting[wire::kGreetingBytes];
  Nonce nonce;
  uint16_t flags = 0;
  if (!value_or_fail(net::read_full_until(fd, greeting, sizeof greeting, deadline)) ||
      !wire::decode_greeting(greeting, &nonce, &flags)) {
    fail(EPROTO, "engine: bad greeting");
  }
  unsigned char hello[wire::kHelloBytes];
  if (!tls) {
    wire::encode_hello(session.id, prove_session(session.secret, nonce), 0, hello);
    iovec iov{hello, sizeof hello};
    ok_or_fail(net::write_all_until(fd, &iov, 1, deadline));
    return nullptr;
  }
  if ((flags & wire::kGreetingOffersTls) == 0) {
    fail(EPROTONOSUPPORT, "engine: the engine offers no TLS (odafsd --tls-cert serves it)");
  }
  wire::encode_hello(0, Proof{}, wire::kHelloStartTls, hello);
  iovec iov{hello, sizeof hello};
  ok_or_fail(net::write_all_until(fd, &iov, 1, deadline));
  Result<std::unique_ptr<tls::Session>> made = tls::Session::make(std::move(tls), fd, host);
  if (!made.ok()) fail(made.errno_value(), "engine: " + made.status().message());
  std::unique_ptr<tls::Session> t = std::move(*made);
  const timespec forever{INT32_MAX, 0};
  if (Status s = t->handshake_until(deadline ? *deadline : forever); !s.ok()) {
    fail(s.errno_value(), "engine: " + s.message());
  }
  unsigned char exporter[kNonceBytes];
  if (Status s = t->export_key(kEngineExporterLabel, exporter, sizeof exporter); !s.ok()) {
    fail(s.errno_value(), "engine: " + s.message());
  }
  wire::encode_hello(session.id, prove_session(session.secret, bind_to_tls(nonce, exporter)), 0,
                     hello);
  if (Status s = t->write_all(hello, sizeof hello, deadline); !s.ok()) {
    fail(s.errno_value(), "engine: " + s.message());
  }
  return t;
}

}  // namespace odafs::ordma

// The client's half of the engine handshake, shared by the TCP connection and the local
// ring's setup socket (both speak GREETING / HELLO / WELCOME, see wire.h).
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include "base/tls.h"
#include "ordma/session.h"

namespace odafs::ordma {

// Reads the engine's GREETING from fd and answers with a HELLO that proves `session`.
// With `tls` (a TLS mount's TCP connection) it first asks for TLS, runs the handshake
// (the engine's certificate must name `host`) and proves the session inside it, bound to
// that TLS session; the returned session then carries every later byte (null without tls).
// Blocking, until `deadline` (CLOCK_MONOTONIC; nullptr: none). Throws std::system_error:
// EPROTO for something that is not our engine, EPROTONOSUPPORT for an engine without TLS
// when tls is asked, ETIMEDOUT when the deadline passes first (the engine is stopped or
// overloaded), or the socket's or TLS's error.
std::unique_ptr<tls::Session> answer_greeting(int fd, const Session& session,
                                              const timespec* deadline = nullptr,
                                              std::shared_ptr<const tls::Context> tls = nullptr,
                                              const std::string& host = "");

}  // namespace odafs::ordma

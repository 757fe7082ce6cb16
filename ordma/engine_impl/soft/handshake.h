// The client's half of the engine handshake, shared by the TCP connection and the local
// ring's setup socket (both speak GREETING / HELLO / WELCOME, see wire.h).
#pragma once

#include <ctime>

#include "ordma/session.h"

namespace odafs::ordma {

// Reads the engine's GREETING from fd and answers with a HELLO that proves `session`.
// Blocking, until `deadline` (CLOCK_MONOTONIC; nullptr: none). Throws std::system_error:
// EPROTO for something that is not our engine, ETIMEDOUT when the deadline passes first
// (the engine is stopped or overloaded), or the socket's error.
void answer_greeting(int fd, const Session& session, const timespec* deadline = nullptr);

}  // namespace odafs::ordma

// Client owners: who a named client is across its connections (docs/protocol.md, "Open
// delegations" and "Restart and reclaim").
//
// A client names itself with CLIENT_ID: a 16-byte owner id it draws once per process. What
// the server holds for it, its delegations and the bytes those let it keep, is then the
// owner's, not its connection's (NFSv4.1's client record): each owner has a holder id
// (Delegations::kNamedHolder | n, never a connection id) under which Delegations files them.
// A connection that names no owner holds under its own connection id.
//
// An owner is bound to the principal whose connection first named it (CallAuthority::
// principal: the local user, the TLS identity or the peer's host); naming it from another
// principal is refused (EPERM, NFSv4's CLID_INUSE) and logged, so that nobody takes over
// another client's delegations, or makes its write-backs fail, by learning its owner id.
//
// An owner whose last connection closes is away. The caller keeps what it holds for it (a
// courteous server), and forgets an owner that holds nothing (forget_if_away). When the
// owner names itself again, join says it is known: it may write back what it kept. The
// state of owners away longer than away_ms is given up, and so is the longest-away one's
// when a new owner would make more than max_owners known (so the table, and the recovery
// record that names them, stay bounded): join and closed hand those back as `forgotten`,
// for the caller to drop what it held for them. Nothing runs on a timer: an away owner is
// forgotten at the next join or close after its time is up.
//
// Thread-safety: thread-safe, one mutex. holder_of and connection_of may be called with
// Delegations' lock held; this class calls nothing outside itself.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/counter_sink.h"
#include "base/status.h"

namespace odafs::server {

class ClientOwners {
 public:
  using Owner = std::array<unsigned char, 16>;
  struct Options {
    int64_t away_ms = 60000;   // an away owner's state is kept this long at most
    size_t max_owners = 1024;  // owners known at once (the server's connection limit)
  };
  explicit ClientOwners(Options options) : options_(options) {}

  struct Forgotten {
    uint64_t holder = 0;
    Owner owner{};
  };
  struct Joined {
    uint64_t holder = 0;  // the owner's holder id
    // The owner was known before this call (away, or named on another connection): what
    // the server holds for it is its own to write back.
    bool known = false;
  };
  // CLIENT_ID on `connection` from `principal`. EINVAL: the connection named another
  // owner before; EPERM: another principal named this owner (logged, naming `peer`).
  // Owners given up on meanwhile are appended to *forgotten.
  Result<Joined> join(uint64_t connection, const Owner& owner, const std::string& principal,
                      const std::string& peer, std::vector<Forgotten>* forgotten);
  // The holder `connection`'s calls hold under: its owner's, or the connection id itself.
  uint64_t holder_of(uint64_t connection) const;
  // A live connection of `holder`: the holder itself for a connection's own, the newest
  // connection of a named one; 0 when it has none.
  uint64_t connection_of(uint64_t holder) const;

  struct Closed {
    uint64_t holder = 0;  // what the connection held under (its own id when unnamed)
    bool named = false;
    bool away = false;  // named, and its owner has no connection left
  };
  // The connection closed. Owners given up on meanwhile are appended to *forgotten.
  Closed closed(uint64_t connection, std::vector<Forgotten>* forgotten);
  // Forgets `holder`'s owner if it is away still (it holds nothing worth keeping); true and
  // *owner if it did.
  bool forget_if_away(uint64_t holder, Owner* owner);

  int64_t away_ms() const { return options_.away_ms; }
  size_t known() const;
  size_t away() const;
  // Its counters under their own names (base/counter_sink.h). Thread-safe.
  void report_counters(const CounterSink& add) const;

 private:
  struct Entry {
    Owner owner{};
    std::string principal;
    std::vector<uint64_t> connections;  // live ones, oldest first
    int64_t away_since_ms = 0;          // 0: has a connection
  };
  // Forgets the owners away for longer than away_ms, and, if `room` and the table is full,
  // the longest-away one. REQUIRES: mu_ held.
  void give_up_locked(int64_t now, bool room, std::vector<Forgotten>* forgotten);
  void erase_locked(uint64_t holder, std::vector<Forgotten>* forgotten);

  const Options options_;
  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::map<Owner, uint64_t> by_owner_;                    // owner -> holder
  std::unordered_map<uint64_t, Entry> by_holder_;         // holder -> its owner
  std::unordered_map<uint64_t, uint64_t> by_connection_;  // named connection -> holder
};

}  // namespace odafs::server

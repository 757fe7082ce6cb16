#include "server/client_owners.h"

#include <algorithm>
#include <cerrno>

#include "base/futex.h"
#include "base/log.h"
#include "server/delegations.h"

namespace odafs::server {

Result<ClientOwners::Joined> ClientOwners::join(uint64_t connection, const Owner& owner,
                                                const std::string& principal,
                                                const std::string& peer,
                                                std::vector<Forgotten>* forgotten) {
  std::lock_guard lock(mu_);
  const auto named = by_connection_.find(connection);
  auto it = by_owner_.find(owner);
  if (named != by_connection_.end()) {
    if (it == by_owner_.end() || it->second != named->second) {
      return Status(EINVAL, "client id: the connection named another owner");
    }
    return Joined{named->second, false};  // named again: nothing changes
  }
  if (it != by_owner_.end() && by_holder_.at(it->second).principal != principal) {
    ODAFS_LOG_WARN_THROTTLED(
        "client id from %s (%s) refused: another principal named that client owner "
        "first",
        peer.c_str(), principal.c_str());
    return Status(EPERM, "client id: the owner belongs to another principal");
  }
  give_up_locked(now_ms(), it == by_owner_.end(), forgotten);
  it = by_owner_.find(owner);  // the giving up may have forgotten it
  Joined j;
  if (it != by_owner_.end()) {
    j = {it->second, true};
  } else {
    j = {Delegations::kNamedHolder | next_++, false};
    by_owner_.emplace(owner, j.holder);
    by_holder_.emplace(j.holder, Entry{owner, principal, {}, 0});
  }
  Entry& e = by_holder_.at(j.holder);
  e.connections.push_back(connection);
  e.away_since_ms = 0;
  by_connection_.emplace(connection, j.holder);
  return j;
}

uint64_t ClientOwners::holder_of(uint64_t connection) const {
  std::lock_guard lock(mu_);
  const auto it = by_connection_.find(connection);
  return it == by_connection_.end() ? connection : it->second;
}

uint64_t ClientOwners::connection_of(uint64_t holder) const {
  if ((holder & Delegations::kNamedHolder) == 0) return holder;
  std::lock_guard lock(mu_);
  const auto it = by_holder_.find(holder);
  return it == by_holder_.end() || it->second.connections.empty() ? 0
                                                                  : it->second.connections.back();
}

ClientOwners::Closed ClientOwners::closed(uint64_t connection, std::vector<Forgotten>* forgotten) {
  std::lock_guard lock(mu_);
  const int64_t now = now_ms();
  Closed c{connection, false, false};
  if (const auto named = by_connection_.find(connection); named != by_connection_.end()) {
    c = {named->second, true, false};
    by_connection_.erase(named);
    Entry& e = by_holder_.at(c.holder);
    std::erase(e.connections, connection);
    if (e.connections.empty()) {
      e.away_since_ms = std::max<int64_t>(now, 1);
      c.away = true;
    }
  }
  give_up_locked(now, false, forgotten);
  return c;
}

bool ClientOwners::forget_if_away(uint64_t holder, Owner* owner) {
  std::lock_guard lock(mu_);
  const auto it = by_holder_.find(holder);
  if (it == by_holder_.end() || it->second.away_since_ms == 0) return false;
  *owner = it->second.owner;
  erase_locked(holder, nullptr);
  return true;
}

void ClientOwners::give_up_locked(int64_t now, bool room, std::vector<Forgotten>* forgotten) {
  uint64_t longest = 0;
  int64_t longest_since = 0;
  for (auto it = by_holder_.begin(); it != by_holder_.end();) {
    const uint64_t holder = it->first;
    const int64_t since = it->second.away_since_ms;
    ++it;  // erasing holder leaves `it` valid
    if (since == 0) continue;
    if (now - since > options_.away_ms) {
      erase_locked(holder, forgotten);
    } else if (longest == 0 || since < longest_since) {
      longest = holder;
      longest_since = since;
    }
  }
  if (room && by_holder_.size() >= options_.max_owners && longest != 0) {
    ODAFS_LOG_WARN_THROTTLED(
        "client owners: %zu known, the most there may be; giving up the state of the one "
        "away the longest",
        by_holder_.size());
    erase_locked(longest, forgotten);
  }
}

void ClientOwners::erase_locked(uint64_t holder, std::vector<Forgotten>* forgotten) {
  const auto it = by_holder_.find(holder);
  if (forgotten != nullptr) forgotten->push_back({holder, it->second.owner});
  by_owner_.erase(it->second.owner);
  by_holder_.erase(it);
}

size_t ClientOwners::known() const {
  std::lock_guard lock(mu_);
  return by_holder_.size();
}

size_t ClientOwners::away() const {
  std::lock_guard lock(mu_);
  return static_cast<size_t>(std::count_if(by_holder_.begin(), by_holder_.end(), [](const auto& h) {
    return h.second.away_since_ms != 0;
  }));
}

void ClientOwners::report_counters(const CounterSink& add) const {
  add("known", known());
  add("away", away());
}

}  // namespace odafs::server

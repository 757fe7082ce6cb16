#include "client/replacement.h"

#include <algorithm>
#include <bit>

namespace odafs {

Replacement::Replacement(const ReplacementParams& params)
    : life_time_(params.life_time),
      queues_(std::clamp<uint32_t>(params.queues, 1, ReplacementParams::kMaxQueues)),
      ring_(params.history) {
  size_t nbuckets = 1;
  while (nbuckets < ring_.size()) nbuckets <<= 1;
  buckets_ = std::vector<History::bucket_type>(nbuckets);
  history_ = std::make_unique<History>(History::bucket_traits(buckets_.data(), buckets_.size()));
}

Replacement::~Replacement() {
  history_->clear();
  for (Queue& q : queues_) q.clear();
}

void Replacement::admit(ReplacementNode& n, const BlockKey& key) {
  uint32_t before = recall(key);
  n.frequency = before == UINT32_MAX ? before : before + 1;
  ++size_;
  place(n);
}

void Replacement::access(ReplacementNode& n) {
  queues_[n.queue].erase(Queue::s_iterator_to(n));
  if (n.frequency != UINT32_MAX) ++n.frequency;
  place(n);
}

void Replacement::place(ReplacementNode& n) {
  ++now_;
  // floor(log2 f), f >= 1.
  const auto level = static_cast<uint32_t>(std::bit_width(n.frequency) - 1);
  n.queue = static_cast<uint8_t>(std::min<uint32_t>(level, queues() - 1));
  n.expire = life_time_ == 0 ? UINT64_MAX : now_ + life_time_;
  queues_[n.queue].push_back(n);
  expire_heads();
}

void Replacement::expire_heads() {
  // Upwards, so an entry moved down is not looked at again in the same tick.
  for (uint32_t k = 1; k < queues(); ++k) {
    Queue& q = queues_[k];
    if (q.empty() || q.front().expire >= now_) continue;
    ReplacementNode& n = q.front();
    q.pop_front();
    n.queue = static_cast<uint8_t>(k - 1);
    n.expire = now_ + life_time_;
    queues_[k - 1].push_back(n);
  }
}

ReplacementNode* Replacement::victim() {
  for (Queue& q : queues_) {
    if (!q.empty()) return &q.front();
  }
  return nullptr;
}

void Replacement::remove(ReplacementNode& n, const BlockKey& key) {
  queues_[n.queue].erase(Queue::s_iterator_to(n));
  --size_;
  remember(key, n.frequency);
}

uint32_t Replacement::recall(const BlockKey& key) {
  if (ring_.empty()) return 0;
  auto it = history_->find(key);
  if (it == history_->end()) return 0;
  uint32_t f = it->frequency;
  history_->erase(it);  // its ring slot stays a hole until overwritten
  return f;
}

void Replacement::remember(const BlockKey& key, uint32_t frequency) {
  if (ring_.empty()) return;
  recall(key);  // at most one memory per key
  Memory& m = ring_[next_];
  next_ = next_ + 1 == ring_.size() ? 0 : next_ + 1;
  if (m.is_linked()) history_->erase(history_->iterator_to(m));
  m.key = key;
  m.frequency = frequency;
  history_->insert(m);
}

void Replacement::forget_history() { history_->clear(); }

uint32_t Replacement::remembered(const BlockKey& key) const {
  auto it = history_->find(key);
  return it == history_->end() ? 0 : it->frequency;
}

}  // namespace odafs

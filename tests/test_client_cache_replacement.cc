// The client cache's replacement order (client/replacement.*), on its own: one queue and
// no history is LRU; MQ places entries by use count, moves expired ones down, picks the
// victim from the lowest queue and remembers the counts of entries given up.
#include <doctest/doctest.h>

#include <algorithm>
#include <list>
#include <random>
#include <vector>

#include "client/replacement.h"

using odafs::BlockKey;
using odafs::Replacement;
using odafs::ReplacementNode;
using odafs::ReplacementParams;

namespace {

ReplacementParams mq(uint32_t queues, uint64_t life_time, size_t history) {
  ReplacementParams p;
  p.queues = queues;
  p.life_time = life_time;
  p.history = history;
  return p;
}

BlockKey key(uint64_t i) { return BlockKey{7, i}; }

size_t index_of(const std::vector<ReplacementNode>& nodes, const ReplacementNode* n) {
  return static_cast<size_t>(n - nodes.data());
}

}  // namespace

TEST_CASE("one queue without history gives up the least recently used entry") {
  Replacement lru{ReplacementParams{}};
  std::vector<ReplacementNode> nodes(16);
  std::list<size_t> model;  // front: least recently used
  std::mt19937 rng(5);
  for (int op = 0; op < 5000; ++op) {
    size_t i = rng() % nodes.size();
    if (!nodes[i].tracked()) {
      lru.admit(nodes[i], key(i));
      model.push_back(i);
    } else if (rng() % 4 == 0) {
      lru.remove(nodes[i], key(i));
      model.remove(i);
    } else {
      lru.access(nodes[i]);
      model.remove(i);
      model.push_back(i);
    }
    REQUIRE(lru.size() == model.size());
    if (model.empty()) {
      CHECK(lru.victim() == nullptr);
    } else {
      REQUIRE(index_of(nodes, lru.victim()) == model.front());
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].tracked()) lru.remove(nodes[i], key(i));
  }
}

TEST_CASE("MQ: an entry used f times lives in queue min(log2 f, m-1)") {
  Replacement r{mq(4, 0, 0)};
  ReplacementNode n;
  r.admit(n, key(1));
  const uint8_t want[] = {0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
  for (uint32_t f = 1; f <= 20; ++f) {
    CAPTURE(f);
    CHECK(n.frequency == f);
    CHECK(n.queue == want[f - 1]);
    r.access(n);
  }
  r.remove(n, key(1));
  CHECK_FALSE(n.tracked());
}

TEST_CASE("MQ: the victim is the least recently used entry of the lowest non-empty queue") {
  Replacement r{mq(8, 0, 0)};
  std::vector<ReplacementNode> nodes(4);
  for (size_t i = 0; i < nodes.size(); ++i) r.admit(nodes[i], key(i));
  r.access(nodes[0]);  // 0: 2 uses, queue 1
  r.access(nodes[2]);
  r.access(nodes[2]);  // 2: 3 uses, queue 1, after 0
  CHECK(index_of(nodes, r.victim()) == 1);
  r.remove(nodes[1], key(1));
  CHECK(index_of(nodes, r.victim()) == 3);
  r.access(nodes[3]);  // 3 leaves queue 0 for queue 1, after 2
  CHECK(index_of(nodes, r.victim()) == 0);
  r.remove(nodes[0], key(0));
  CHECK(index_of(nodes, r.victim()) == 2);
  r.remove(nodes[2], key(2));
  CHECK(index_of(nodes, r.victim()) == 3);
  r.remove(nodes[3], key(3));
  CHECK(r.victim() == nullptr);
  CHECK(r.size() == 0);
}

TEST_CASE("MQ: an entry unused for its life time moves down one queue, keeping its count") {
  Replacement r{mq(8, 4, 0)};
  ReplacementNode hot;
  r.admit(hot, key(0));
  for (int i = 0; i < 3; ++i) r.access(hot);  // 4 uses: queue 2, expires at now + 4
  REQUIRE(hot.queue == 2);
  const uint64_t expire = hot.expire;
  CHECK(expire == r.now() + 4);
  std::vector<ReplacementNode> others(16);
  size_t used = 0;
  auto use_another = [&] {
    r.admit(others[used], key(100 + used));
    ++used;
  };
  while (r.now() < expire) use_another();
  CHECK(hot.queue == 2);  // not yet: expired means expire < now
  use_another();
  CHECK(hot.queue == 1);
  CHECK(hot.frequency == 4);
  CHECK(hot.expire == r.now() + 4);
  for (int i = 0; i < 5; ++i) use_another();
  CHECK(hot.queue == 0);
  // In queue 0 it is behind the entries already there, which go first.
  CHECK(index_of(others, r.victim()) == 0);
  // The next use puts it back where its count says: 5 uses, queue 2.
  r.access(hot);
  CHECK(hot.queue == 2);
  CHECK(hot.frequency == 5);

  // Life time 0: nothing ever moves down.
  Replacement forever{mq(8, 0, 0)};
  ReplacementNode h2;
  forever.admit(h2, key(0));
  for (int i = 0; i < 3; ++i) forever.access(h2);
  std::vector<ReplacementNode> many(100);
  for (size_t i = 0; i < many.size(); ++i) forever.admit(many[i], key(i + 1));
  CHECK(h2.queue == 2);
  for (size_t i = 0; i < many.size(); ++i) forever.remove(many[i], key(i + 1));
  forever.remove(h2, key(0));
  for (size_t i = 0; i < used; ++i) r.remove(others[i], key(100 + i));
  r.remove(hot, key(0));
}

TEST_CASE("MQ: the history gives a block that comes back its count, and forgets the oldest") {
  Replacement r{mq(8, 0, 4)};
  ReplacementNode n;
  r.admit(n, key(0));
  for (int i = 0; i < 7; ++i) r.access(n);  // 8 uses: queue 3
  r.remove(n, key(0));
  CHECK(r.remembered(key(0)) == 8);
  r.admit(n, key(0));  // back: resumes at 9 uses, not 1
  CHECK(n.frequency == 9);
  CHECK(n.queue == 3);
  CHECK(r.remembered(key(0)) == 0);  // taken out of the history
  r.remove(n, key(0));

  // A fixed ring of 4 memories: the fifth given up overwrites the oldest.
  std::vector<ReplacementNode> nodes(5);
  for (size_t i = 1; i < nodes.size(); ++i) {
    r.admit(nodes[i], key(i));
    r.access(nodes[i]);
    r.remove(nodes[i], key(i));
  }
  CHECK(r.remembered(key(0)) == 0);  // key 0 was the oldest of five
  for (size_t i = 1; i < nodes.size(); ++i) CHECK(r.remembered(key(i)) == 2);
  r.forget_history();
  for (size_t i = 1; i < nodes.size(); ++i) CHECK(r.remembered(key(i)) == 0);
  r.admit(nodes[1], key(1));
  CHECK(nodes[1].frequency == 1);
  r.remove(nodes[1], key(1));

  // Without a history nothing is remembered.
  Replacement none{mq(8, 0, 0)};
  none.admit(n, key(0));
  none.access(n);
  none.remove(n, key(0));
  CHECK(none.remembered(key(0)) == 0);
  none.admit(n, key(0));
  CHECK(n.frequency == 1);
  none.remove(n, key(0));
}

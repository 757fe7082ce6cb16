// NodeTable's handles on the wire (docs/protocol.md, "File handles"): two layouts, each
// a struct of big-endian fields (base/endian.h) that is the layout, sealed by the table's
// MAC over its first kHandleBody bytes.
#include <cstddef>
#include <cstring>

#include "base/endian.h"
#include "server/node_table.h"

namespace odafs::server {
namespace {

constexpr size_t kHandleBody = 24;  // version..ino; the MAC covers these bytes
constexpr size_t kHandleMac = kHandleSize - kHandleBody;

// A slot handle: this instance's slot and its generation, with the inode for a check.
struct SlotHandle {
  static constexpr unsigned char kVersion = 1;
  unsigned char version;
  unsigned char zero[3];
  Be32 instance;
  Be32 slot;
  Be32 generation;
  Be64 ino;
  unsigned char mac[kHandleMac];
};
// A portable handle (stores that find by id): the object's id, good on every instance.
struct PortableHandle {
  static constexpr unsigned char kVersion = 2;
  unsigned char version;
  unsigned char zero[3];
  Be64 ino;
  Be64 space;
  unsigned char zero_after[4];
  unsigned char mac[kHandleMac];
};
static_assert(sizeof(SlotHandle) == kHandleSize && sizeof(PortableHandle) == kHandleSize);
static_assert(offsetof(SlotHandle, mac) == kHandleBody &&
              offsetof(PortableHandle, mac) == kHandleBody);

bool zeros(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace

WireHandle NodeTable::handle_of(const Node& node) const {
  WireHandle h{};
  if (portable_) {
    PortableHandle p{};
    p.version = PortableHandle::kVersion;
    p.ino.set(node.key.ino);
    p.space.set(node.key.space);
    std::memcpy(h.data(), &p, sizeof p);
  } else {
    SlotHandle s{};
    s.version = SlotHandle::kVersion;
    s.instance.set(instance_);
    s.slot.set(node.slot);
    s.generation.set(node.generation);
    s.ino.set(node.key.ino);
    std::memcpy(h.data(), &s, sizeof s);
  }
  mac_.compute(h.data(), kHandleBody, &h[kHandleBody], kHandleMac);
  return h;
}

Result<NodeTable::ParsedHandle> NodeTable::parse_handle(const unsigned char* h) const {
  SlotHandle s;
  std::memcpy(&s, h, sizeof s);
  if (s.version != SlotHandle::kVersion || !zeros(s.zero, sizeof s.zero)) {
    return Status(kBadHandle, "handle: unknown version");
  }
  if (s.instance.get() != instance_) return Status(ESTALE, "handle: earlier server instance");
  if (!mac_.verify(h, kHandleBody, &h[kHandleBody], kHandleMac)) {
    return Status(kBadHandle, "handle: bad MAC");
  }
  return ParsedHandle{s.slot.get(), s.generation.get(), s.ino.get()};
}

Result<ObjectId> NodeTable::parse_portable(const unsigned char* h) const {
  PortableHandle p;
  std::memcpy(&p, h, sizeof p);
  if (p.version != PortableHandle::kVersion || !zeros(p.zero, sizeof p.zero) ||
      !zeros(p.zero_after, sizeof p.zero_after)) {
    return Status(kBadHandle, "handle: not a portable one");
  }
  if (!mac_.verify(h, kHandleBody, &h[kHandleBody], kHandleMac)) {
    return Status(kBadHandle, "handle: bad MAC");
  }
  return ObjectId{p.ino.get(), p.space.get()};
}

}  // namespace odafs::server

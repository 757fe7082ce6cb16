// ONC RPC record marking over TCP (RFC 5531, section 11).
//
// A record is one or more fragments; each fragment starts with a 4-byte big-endian mark
// whose top bit says "last fragment" and whose low 31 bits give the fragment length.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/status.h"

namespace odafs::rpc {

inline constexpr uint32_t kLastFragment = 0x80000000u;

inline void put_record_mark(char* out, uint32_t length, bool last) {
  uint32_t mark = htonl(length | (last ? kLastFragment : 0));
  std::memcpy(out, &mark, 4);
}

// A fragment's 4-byte record mark (RFC 5531, 11), decoded: the one reader of the layout
// put_record_mark writes.
struct RecordMark {
  size_t length = 0;  // bytes of the fragment after its mark
  bool last = false;  // the fragment ends its record
};
inline RecordMark read_record_mark(const char* in) {
  uint32_t mark;
  std::memcpy(&mark, in, 4);
  mark = ntohl(mark);
  return {mark & ~kLastFragment, (mark & kLastFragment) != 0};
}

// Reassembles records from a byte stream, refusing any record longer than max_record.
//
// Memory stays bounded by max_record per assembler whatever the peer sends: fragment
// lengths are checked before a byte of the fragment is buffered, and the buffer grows with
// the bytes that arrive, never to what a mark merely announces.
// Thread-safety: none; one assembler per connection, fed by one thread at a time.
class RecordAssembler {
 public:
  explicit RecordAssembler(size_t max_record) : max_record_(max_record) {}

  // Consumes all of data[0, len). For every record completed, calls on_record(record),
  // where record is a std::vector<char>& the callback may swap out (to keep the bytes
  // without copying); it is cleared afterwards. Fails when the stream breaks the limits,
  // and the stream is then unusable (close the connection): EMSGSIZE for a record longer
  // than max_record, EPROTO for an empty fragment that is not the last of its record. An
  // ok return allocates nothing.
  template <class OnRecord>
  Status feed(const char* data, size_t len, OnRecord&& on_record);

  // True when no partial record or mark is buffered (a clean point to close).
  bool idle() const { return header_have_ == 0 && fragment_left_ == 0 && record_.empty(); }
  // Bytes of the record being assembled that are held now.
  size_t buffered() const { return record_.size(); }
  size_t capacity() const { return record_.capacity(); }
  // Moves the record being assembled into buf (its capacity replaces this one's) and
  // leaves the old buffer in buf, emptied: for handing a large-record buffer in or out.
  void exchange_buffer(std::vector<char>& buf) {
    buf.assign(record_.begin(), record_.end());
    record_.swap(buf);
    buf.clear();
  }

 private:
  size_t max_record_;
  char header_[4] = {};
  size_t header_have_ = 0;
  size_t fragment_left_ = 0;
  bool last_ = false;
  bool in_fragment_ = false;
  std::vector<char> record_;
};

template <class OnRecord>
Status RecordAssembler::feed(const char* data, size_t len, OnRecord&& on_record) {
  while (len > 0) {
    if (!in_fragment_) {
      size_t take = std::min(len, 4 - header_have_);
      std::memcpy(header_ + header_have_, data, take);
      header_have_ += take;
      data += take;
      len -= take;
      if (header_have_ < 4) return Status();
      const RecordMark mark = read_record_mark(header_);
      header_have_ = 0;
      last_ = mark.last;
      fragment_left_ = mark.length;
      if (fragment_left_ > max_record_ - record_.size()) {
        return Status(EMSGSIZE,
                      "a record of at least " + std::to_string(record_.size() + fragment_left_) +
                          " bytes exceeds the limit of " + std::to_string(max_record_) + " bytes");
      }
      // An empty fragment that is not the last carries nothing and ends nothing: a stream of
      // them would keep a connection busy forever without a record. (An empty last
      // fragment ends a record and is legal.)
      if (fragment_left_ == 0 && !last_) {
        return Status(EPROTO, "an empty fragment that is not the last of its record");
      }
      in_fragment_ = true;
    }
    size_t take = std::min(len, fragment_left_);
    // Grow geometrically with the bytes that came, never past the fragment's announced end:
    // a mark alone costs nothing, and the buffer never outgrows the record by much.
    if (record_.capacity() < record_.size() + take) {
      record_.reserve(std::min(record_.size() + fragment_left_,
                               std::max(record_.size() + take, 2 * record_.capacity())));
    }
    record_.insert(record_.end(), data, data + take);
    data += take;
    len -= take;
    fragment_left_ -= take;
    if (fragment_left_ == 0) {
      in_fragment_ = false;
      if (last_) {
        on_record(record_);
        record_.clear();
      }
    }
  }
  return Status();
}

}  // namespace odafs::rpc

// Fuzz target: a server's view of one connection's bytes. Record marking (fragments,
// lengths near the limit, truncated records), then the call header and the credential of
// every record, exactly as rpc::Server does before it dispatches.
//
// The first byte picks how the stream is cut into reads (1..256 bytes each), so the
// assembler sees every way a record can straddle reads.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rpc/message_header.h"
#include "rpc/record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t chunk = size_t{data[0]} + 1;
  const char* stream = reinterpret_cast<const char*>(data + 1);
  size_t left = size - 1;
  // A small limit, so that lengths near it are reachable.
  odafs::rpc::RecordAssembler assembler(4096);
  size_t records = 0;
  auto on_record = [&](std::vector<char>& record) {
    ++records;
    odafs::rpc::CallHeader header;
    size_t args = 0;
    auto status = odafs::rpc::decode_call_header(record.data(), record.size(), &header, &args);
    if (status == odafs::rpc::CallHeaderStatus::kOk) {
      if (args > record.size()) __builtin_trap();  // the contract: arguments lie inside
      odafs::rpc::CallerCred cred;
      if (odafs::rpc::decode_credential(header, &cred) && cred.ngids > 16) __builtin_trap();
    }
  };
  while (left > 0) {
    size_t n = std::min(chunk, left);
    if (!assembler.feed(stream, n, on_record).ok()) break;
    stream += n;
    left -= n;
  }
  return 0;
}

#include "ordma/engine_impl/soft/ring_server.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "ordma/engine_impl/soft/local_ring.h"
#include "ordma/engine_impl/soft/wire.h"

namespace odafs::ordma {

Ring::~Ring() {
  if (base != MAP_FAILED) munmap(base, bytes);
  if (doorbell >= 0) close(doorbell);
}

NewRing::NewRing(NewRing&& other) noexcept
    : ring(std::move(other.ring)), memfd(std::exchange(other.memfd, -1)) {}

NewRing::~NewRing() {
  if (memfd >= 0) close(memfd);
}

Result<NewRing> create_ring(uint32_t slot_bytes) {
  NewRing made;  // closes what was opened on every failure below
  made.memfd = memfd_create("odafs-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (made.memfd < 0) return Status::from_errno("local ring: memfd_create");
  made.ring = std::make_unique<Ring>();
  Ring& r = *made.ring;
  r.bytes = ring::ring_bytes(slot_bytes);
  if (ftruncate(made.memfd, static_cast<off_t>(r.bytes)) != 0) {
    return Status::from_errno("local ring: ftruncate");
  }
  if (fcntl(made.memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Status::from_errno("local ring: seals");
  }
  r.base = mmap(nullptr, r.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, made.memfd, 0);
  if (r.base == MAP_FAILED) return Status::from_errno("local ring: mmap");
  r.doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (r.doorbell < 0) return Status::from_errno("local ring: eventfd");
  ring::Header* h = ring::header(r.base);  // the file starts zeroed: every slot kFree
  h->magic = ring::kMagic;
  h->version = ring::kVersion;
  h->slots = ring::kSlots;
  h->slot_bytes = slot_bytes;
  return made;
}

bool send_ring_welcome(int socket_fd, int memfd, int doorbell) {
  int fds[2] = {memfd, doorbell};
  unsigned char welcome[wire::kWelcomeBytes];
  wire::encode_welcome(0, nullptr, welcome);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  iovec iov{welcome, sizeof welcome};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(cm), fds, sizeof fds);
  ssize_t sent = sendmsg(socket_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  return sent == static_cast<ssize_t>(sizeof welcome);
}

}  // namespace odafs::ordma

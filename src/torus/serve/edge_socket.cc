#include "torus/serve/edge_socket.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace torus::serve {

void EdgeSocket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  readable_ = writable_ = false;
}

void EdgeSocket::Reset(int fd, bool writable) {
  Close();
  fd_ = fd;
  writable_ = writable;
  peer_closed_ = false;
}

void EdgeSocket::OnEvents(uint32_t events) {
  if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) peer_closed_ = true;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) readable_ = true;
  if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) writable_ = true;
}

ssize_t EdgeSocket::Read(char* buf, size_t capacity) {
  while (true) {
    const ssize_t n = ::recv(fd_, buf, capacity, 0);
    if (n > 0) {
      // Fewer bytes than asked for: the socket is drained, and new bytes will bring a new event. Not so at the
      // end of the stream: reading on finds it.
      if (static_cast<size_t>(n) < capacity) readable_ = peer_closed_;
      return n;
    }
    if (n == 0) return 0;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      readable_ = false;
      return kWouldBlock;
    }
    return kError;
  }
}

ssize_t EdgeSocket::Write(absl::string_view data) {
  while (true) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      if (static_cast<size_t>(n) < data.size()) writable_ = false;  // full: an event comes when it drains
      return n;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      writable_ = false;
      return 0;
    }
    return kError;
  }
}

}  // namespace torus::serve

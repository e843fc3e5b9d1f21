// EdgeSocket: a non-blocking stream socket registered edge-triggered, with what its events and its last reads and
// writes say: whether a read or a write could make progress now. Edge-triggered epoll reports a change once, so
// the socket remembers it until a read or write shows it has been used up (a short read or write, EAGAIN).
//
// Thread-safety: not thread-safe; used on its event loop's thread.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "absl/strings/string_view.h"

namespace torus::serve {

class EdgeSocket {
 public:
  // Takes `fd` (non-blocking). `writable`: whether it can be written at once (false while it connects).
  EdgeSocket(int fd, bool writable) : fd_(fd), writable_(writable) {}
  ~EdgeSocket() { Close(); }
  EdgeSocket(const EdgeSocket&) = delete;
  EdgeSocket& operator=(const EdgeSocket&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void Close();
  // Replaces the fd (the next address of a connect), closing the old one.
  void Reset(int fd, bool writable);

  // Takes in what epoll reported (EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLHUP, EPOLLERR).
  void OnEvents(uint32_t events);
  // A read would return bytes, the end of the stream or an error (it may be wrong: then it returns kWouldBlock).
  bool readable() const { return readable_; }
  bool writable() const { return writable_; }
  // The peer has shut its side down, or the connection failed.
  bool peer_closed() const { return peer_closed_; }

  static constexpr ssize_t kWouldBlock = -1;
  static constexpr ssize_t kError = -2;
  // Reads at most `capacity` bytes into `buf`: how many (> 0), 0 at the end of the stream, kWouldBlock or kError.
  ssize_t Read(char* buf, size_t capacity);
  // Writes what the socket takes of `data`: how many bytes (0 when it is full), or kError.
  ssize_t Write(absl::string_view data);

 private:
  int fd_ = -1;
  bool readable_ = false;
  bool writable_ = false;
  bool peer_closed_ = false;
};

}  // namespace torus::serve

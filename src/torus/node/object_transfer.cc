#include "torus/node/object_transfer.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "torus/tls/pki.h"

namespace torus::node {
namespace {

constexpr auto kTicketLife = std::chrono::seconds(60);
constexpr int kIoTimeoutSeconds = 30;

void SetTimeouts(int fd) {
  timeval tv{.tv_sec = kIoTimeoutSeconds, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// Reads exactly `n` bytes; false when the peer stops first.
bool RecvAll(int fd, char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0 || found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  return found;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TransferServer>> TransferServer::Start(const std::string& host,
                                                                      const tls::TlsFiles* tls) {
  std::unique_ptr<tls::TlsSocketContext> context;
  if (tls != nullptr) {
    auto made = tls::TlsSocketContext::ForServer(*tls);
    if (!made.ok()) return made.status();
    context = *std::move(made);
  }
  auto found = Resolve(host, 0, /*passive=*/true);
  if (!found.ok()) return found.status();
  int fd = socket((*found)->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, (*found)->ai_addr, (*found)->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    const std::string why = std::strerror(errno);
    freeaddrinfo(*found);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen for object transfers on ", host, ": ", why));
  }
  freeaddrinfo(*found);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                              : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  std::unique_ptr<TransferServer> server(new TransferServer(fd, port, std::move(context)));
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

TransferServer::~TransferServer() {
  Stop();
  close(listen_fd_);
}

std::string TransferServer::Issue(const std::string& path, uint64_t size) {
  std::random_device random;
  std::string ticket(kTicketBytes, '\0');
  for (size_t i = 0; i < kTicketBytes; i += 4) {
    const uint32_t r = random();
    std::memcpy(ticket.data() + i, &r, std::min<size_t>(4, kTicketBytes - i));
  }
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  std::erase_if(grants_, [now](const auto& kv) { return kv.second.expires < now; });
  grants_[ticket] = Grant{.path = path, .size = size, .expires = now + kTicketLife};
  return ticket;
}

void TransferServer::AcceptLoop() {
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    std::vector<std::thread> done;
    {
      absl::MutexLock lock(&mu_);
      done.swap(finished_);
      if (stopping_) {
        if (fd >= 0) close(fd);
        for (auto& t : done) finished_.push_back(std::move(t));  // Stop joins them
        return;
      }
      if (fd >= 0) {
        SetTimeouts(fd);
        connections_[fd] = std::thread([this, fd] { Serve(fd); });
      }
    }
    for (auto& t : done) t.join();
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors: do not spin
  }
}

std::optional<TransferServer::Grant> TransferServer::Redeem(int fd, tls::TlsSocket* session) {
  std::string ticket(kTicketBytes, '\0');
  const bool read = session != nullptr ? session->ReadAll(ticket.data(), ticket.size())
                                       : RecvAll(fd, ticket.data(), ticket.size());
  if (!read) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = grants_.find(ticket);
  if (it == grants_.end()) return std::nullopt;
  std::optional<Grant> grant;
  if (it->second.expires >= std::chrono::steady_clock::now()) grant = it->second;
  grants_.erase(it);
  return grant;
}

void TransferServer::Serve(int fd) {
  std::unique_ptr<tls::TlsSocket> session;
  bool refused = false;
  if (tls_) {
    auto accepted = tls_->Accept(fd, tls::kNodeIdentityPrefix);  // only agents pull objects
    refused = !accepted.ok();
    if (accepted.ok()) session = *std::move(accepted);
  }
  std::optional<Grant> grant = refused ? std::nullopt : Redeem(fd, session.get());
  int file = grant ? open(grant->path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  if (file >= 0 && session) {
    std::vector<char> piece(std::min<uint64_t>(grant->size, 1 << 20));
    uint64_t offset = 0;
    while (offset < grant->size) {
      const ssize_t n = pread(file, piece.data(), std::min<uint64_t>(grant->size - offset, piece.size()),
                              static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !session->WriteAll(piece.data(), static_cast<size_t>(n))) break;
      offset += static_cast<uint64_t>(n);
    }
  } else if (file >= 0) {
    off_t offset = 0;
    while (static_cast<uint64_t>(offset) < grant->size) {
      ssize_t n = sendfile(fd, file, &offset, std::min<uint64_t>(grant->size - offset, 1 << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
    }
  }
  if (file >= 0) close(file);
  session.reset();  // the TLS session ends before its socket is closed
  absl::MutexLock lock(&mu_);
  if (auto it = connections_.find(fd); it != connections_.end()) {
    finished_.push_back(std::move(it->second));
    connections_.erase(it);
  }
  close(fd);
}

void TransferServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (const auto& [fd, thread] : connections_) shutdown(fd, SHUT_RDWR);
  }
  shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [fd, thread] : connections_) threads.push_back(std::move(thread));
    connections_.clear();
    for (auto& t : finished_) threads.push_back(std::move(t));
    finished_.clear();
  }
  for (auto& t : threads) t.join();
}

absl::Status FetchTransfer(const std::string& host, int port, const std::string& ticket, int fd, uint64_t size,
                           const tls::TlsFiles* tls) {
  const std::string peer = absl::StrCat(host, ":", port);
  std::unique_ptr<tls::TlsSocketContext> context;
  if (tls != nullptr) {
    auto made = tls::TlsSocketContext::ForClient(*tls);  // the certificate as it is now (renewals rewrite it)
    if (!made.ok()) return made.status();
    context = *std::move(made);
  }
  auto found = Resolve(host, port, /*passive=*/false);
  if (!found.ok()) return found.status();
  int sock = socket((*found)->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool connected = sock >= 0 && connect(sock, (*found)->ai_addr, (*found)->ai_addrlen) == 0;
  const std::string why = std::strerror(errno);
  freeaddrinfo(*found);
  if (!connected) {
    if (sock >= 0) close(sock);
    return absl::UnavailableError(absl::StrCat("cannot connect to the object transfer port ", peer, ": ", why));
  }
  SetTimeouts(sock);
  std::unique_ptr<tls::TlsSocket> session;
  if (context) {
    auto connected_tls = context->Connect(sock, tls::kNodeIdentityPrefix);
    if (!connected_tls.ok()) {
      close(sock);
      return absl::Status(connected_tls.status().code(), absl::StrCat("the object transfer port ", peer, ": ",
                                                                      connected_tls.status().message()));
    }
    session = *std::move(connected_tls);
  }
  // Reads up to `n` bytes into `out`: 0 at the end, negative on an error.
  auto receive = [&](char* out, size_t n) -> ssize_t {
    if (session) return static_cast<ssize_t>(session->Read(out, n));
    return recv(sock, out, n, 0);
  };
  const bool sent = session ? session->WriteAll(ticket.data(), ticket.size())
                            : send(sock, ticket.data(), ticket.size(), MSG_NOSIGNAL) ==
                                  static_cast<ssize_t>(ticket.size());
  absl::Status status;
  if (!sent) {
    status = absl::UnavailableError(absl::StrCat("cannot send the transfer ticket to ", peer));
  } else if (size > 0) {
    // Received straight into the store's file.
    void* map = mmap(nullptr, size, PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) {
      status = absl::InternalError(absl::StrCat("cannot map the object's file: ", std::strerror(errno)));
    } else {
      uint64_t got = 0;
      while (got < size) {
        ssize_t r = receive(static_cast<char*>(map) + got, std::min<uint64_t>(size - got, 1 << 30));
        if (r < 0 && !session && errno == EINTR) continue;  // a TLS error is final (errno says nothing of it)
        if (r <= 0) break;
        got += static_cast<uint64_t>(r);
      }
      munmap(map, size);
      if (got < size) {
        status = absl::UnavailableError(
            absl::StrCat("the transfer from ", peer, " ended after ", got, " of ", size, " bytes"));
      }
    }
  }
  session.reset();
  close(sock);
  return status;
}

}  // namespace torus::node

#include "torus/serve/ingress.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "torus/serve/ingress_loop.h"

namespace torus::serve {
namespace {

// One loop per CPU this process may run on, at most 4: beyond that the replicas, not the ingress, are the limit.
int DefaultThreads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                            : static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cpus, 1, 4);
}

}  // namespace

Ingress::Ingress(RouteTable* routes, Options options) : routes_(routes), options_(std::move(options)) {}

Ingress::~Ingress() { Stop(); }

absl::StatusOr<int> Ingress::Start() {
  if (started_ || stopped_) return absl::FailedPreconditionError("the ingress was started already");
  started_ = true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(options_.port);
  if (int rc = ::getaddrinfo(options_.host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("serve host ", options_.host, ": ", gai_strerror(rc)));
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const std::string error = std::strerror(errno);
    ::freeaddrinfo(res);
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", error));
  }
  ::freeaddrinfo(res);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                    : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);

  const int threads = options_.threads > 0 ? options_.threads : DefaultThreads();
  std::vector<IngressLoop*> loops;
  for (int i = 0; i < threads; ++i) {
    absl::StatusOr<std::unique_ptr<IngressLoop>> loop = IngressLoop::Create(routes_, &options_, &connections_);
    if (!loop.ok()) {
      ::close(fd);
      loops_.clear();
      return loop.status();
    }
    loops.push_back(loop->get());
    loops_.push_back(*std::move(loop));
  }
  if (absl::Status s = loops_[0]->Listen(fd, loops); !s.ok()) {
    loops_.clear();  // closes fd
    return s;
  }
  subscription_ = routes_->Subscribe([loops] {
    for (IngressLoop* loop : loops) loop->OnRoutesChanged();
  });
  for (auto& loop : loops_) threads_.emplace_back([l = loop.get()] { l->Run(); });
  return port;
}

void Ingress::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (subscription_) routes_->Unsubscribe(*subscription_);
  subscription_.reset();
  // The accepting loop first: once it is done, no connection is handed to the others.
  for (size_t i = 0; i < threads_.size(); ++i) {
    loops_[i]->Stop();
    threads_[i].join();
  }
  threads_.clear();
  loops_.clear();
}

}  // namespace torus::serve

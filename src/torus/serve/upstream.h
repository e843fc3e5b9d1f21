// Upstream: one connection of the ingress to a replica, registered on one event loop (edge-triggered, reading and
// writing) from connect to close. UpstreamPool: a loop's connections to replicas — new ones, and idle ones kept
// alive for reuse by "host:port".
//
// While an exchange uses a connection, its events go to that exchange (its User). While it idles in the pool, an
// event showing that the replica closed it (or sent bytes unasked) closes it, so that a request is seldom sent on
// a dead connection (one that is still is sent again on a fresh one: see ingress.h).
//
// Thread-safety: not thread-safe; used on its loop's thread.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torus/serve/edge_socket.h"
#include "torus/serve/event_loop.h"

namespace torus::serve {

class UpstreamPool;

class Upstream final : public EventLoop::Handler {
 public:
  // What an exchange using the connection is told: something changed (see socket()).
  class User {
   public:
    virtual void OnUpstreamEvents() = 0;

   protected:
    ~User() = default;
  };
  struct Address {
    sockaddr_storage addr{};
    socklen_t len = 0;
  };

  ~Upstream() override = default;  // closes

  const std::string& key() const { return key_; }  // "host:port"
  EdgeSocket& socket() { return socket_; }
  bool connecting() const { return connecting_; }
  // Bytes read and not used yet (an answer head being gathered).
  std::string& in() { return in_; }
  void set_user(User* user) { user_ = user; }

  // While connecting, once an event came: true when connected; false while connecting still (to the next address
  // when one failed); an error (the message a 502 quotes) once every address has failed.
  absl::StatusOr<bool> ContinueConnect();

  void OnEvents(uint32_t events) override;

 private:
  friend class UpstreamPool;
  Upstream(UpstreamPool* pool, std::string host, int port, std::vector<Address> addresses);
  // Starts connecting to the addresses from next_ on; an error when none can even start.
  absl::Status ConnectNext();

  UpstreamPool* const pool_;
  const std::string host_;
  const int port_;
  const std::string key_;
  const std::vector<Address> addresses_;
  size_t next_ = 0;  // the address to try after the current one
  EdgeSocket socket_{-1, false};
  bool connecting_ = true;
  std::string in_;
  User* user_ = nullptr;
};

class UpstreamPool {
 public:
  explicit UpstreamPool(EventLoop* loop) : loop_(loop) {}
  ~UpstreamPool();  // closes the idle ones

  // An idle connection to `key` ("host:port"), the most recently used, or null.
  std::unique_ptr<Upstream> Take(const std::string& key);
  // Starts connecting to host:port. A host name (not an address) is looked up blocking the loop, at most every 30 s.
  absl::StatusOr<std::unique_ptr<Upstream>> Connect(const std::string& host, int port);
  // Keeps `up` for reuse (at most 256 idle per host:port: more are closed). REQUIRES: no answer is left to read on it.
  void Put(std::unique_ptr<Upstream> up);
  // Closes `up` (it is deleted after the loop's round).
  void Close(std::unique_ptr<Upstream> up);
  // Closes every idle connection.
  void Clear();

 private:
  friend class Upstream;
  struct Resolved {
    std::vector<Upstream::Address> addresses;
    int64_t expires_ms = 0;
  };
  void OnIdleEvent(Upstream* up);
  absl::StatusOr<std::vector<Upstream::Address>> Resolve(const std::string& host, int port);

  EventLoop* const loop_;
  std::map<std::string, std::vector<std::unique_ptr<Upstream>>> idle_;
  std::map<std::string, Resolved> resolved_;  // by "host:port"
};

}  // namespace torus::serve

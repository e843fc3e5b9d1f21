// Registration and heartbeat load on a real torus-head process.
//
// Starts torus-head, registers N synthetic nodes over gRPC (TPU hosts in v6e-16 slices, with the labels a real
// agent sends), then heartbeats every node at the default period for a measurement window and reports the head's
// CPU (% of one core, from /proc/<pid>/stat) and resident memory, plus whether every node stayed ALIVE. Heartbeats
// go as agents send them (`datagram`: a HeartbeatStream open per node, as agents keep one for their reports, and a
// UDP datagram per period — an agent's beat that reports nothing new — each answered by the head), a message per
// period on each stream (`stream`, as agents did before datagrams), or one unary call each (`unary`, as agents did
// before streams); each mode runs against a fresh head, one after the other.
//
//   build/bin/bench_registration --nodes 1000,10000 --seconds 20 --mode datagram,stream,unary
//
// `--channels 0` gives every node a connection of its own, as real agents have. `--security plain,tls` runs each
// size against a plaintext head and against a head with TLS (`torus-head --tls`), where every node heartbeats over
// its own connection with a certificate of its own (issued here from the head's CA for "torus-node:bench-<i>").
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench_head.h"
#include "grpcpp/grpcpp.h"
#include "torus/head.grpc.pb.h"
#include "torus/rpc/beat_datagram.h"
#include "torus/tls/credentials.h"
#include "torus/tls/pki.h"

namespace {

using namespace torus::bench;
using Clock = std::chrono::steady_clock;

struct Node {
  std::string id;
  uint64_t incarnation = 0;
  std::string beat_key;  // the registration's datagram key
};

// Every node's heartbeat stream, as agents keep them: opened once, a message per period. A write still in flight at
// the next period counts as failed (the head fell behind). Nothing is read (an agent's reader thread waits for a
// REREGISTER that does not come here): a node told to register again is not ALIVE at the end. gRPC's asynchronous
// client API on two queues, so that 10,000 open streams cost the load generator little (a callback stream keeps an
// operation outstanding for its whole life, and Debian's gRPC scans those on every completion).
class BenchStreams {
 public:
  BenchStreams(const std::vector<std::unique_ptr<torus::rpc::HeadService::Stub>>& stubs, const std::string& bearer,
               const std::vector<Node>& nodes, std::atomic<int64_t>& failed)
      : failed_(failed), streams_(nodes.size()) {
    for (int q = 0; q < 2; ++q) queues_.push_back(std::make_unique<grpc::CompletionQueue>());
    for (size_t i = 0; i < nodes.size(); ++i) {
      Stream& st = streams_[i];
      st.ctx.AddMetadata("authorization", bearer);
      st.request.set_node_id(nodes[i].id);
      st.request.set_incarnation(nodes[i].incarnation);
      st.rw = stubs[i % stubs.size()]->PrepareAsyncHeartbeatStream(&st.ctx, queues_[i % 2].get());
      st.rw->StartCall(Tag(i, kStart));
    }
    for (auto& q : queues_) threads_.emplace_back([this, cq = q.get()] { Drain(cq); });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return started_ == streams_.size(); });
  }

  void Beat(size_t i) {
    Stream& st = streams_[i];
    if (st.writing.exchange(true)) {
      ++failed_;
      return;
    }
    st.rw->Write(st.request, Tag(i, kWrite));
  }

  // Cancels every stream and waits for their ends.
  void Close() {
    for (size_t i = 0; i < streams_.size(); ++i) {
      streams_[i].ctx.TryCancel();
      streams_[i].rw->Finish(&streams_[i].status, Tag(i, kFinish));
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return finished_ == streams_.size(); });
    }
    for (auto& q : queues_) q->Shutdown();
    for (std::thread& t : threads_) t.join();
  }

 private:
  enum Op : uintptr_t { kStart = 0, kWrite = 1, kFinish = 2 };
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientAsyncReaderWriter<torus::rpc::HeartbeatRequest, torus::rpc::HeartbeatReply>> rw;
    torus::rpc::HeartbeatRequest request;
    grpc::Status status;
    std::atomic<bool> writing{false};
  };
  static void* Tag(size_t i, Op op) { return reinterpret_cast<void*>((i << 2) | op); }

  void Drain(grpc::CompletionQueue* cq) {
    void* tag = nullptr;
    bool ok = false;
    while (cq->Next(&tag, &ok)) {
      const auto bits = reinterpret_cast<uintptr_t>(tag);
      const size_t i = bits >> 2;
      switch (bits & 3) {
        case kStart: {
          if (!ok) ++failed_;
          std::lock_guard<std::mutex> lock(mu_);
          if (++started_ == streams_.size()) cv_.notify_all();
          break;
        }
        case kWrite:
          if (!ok) ++failed_;
          streams_[i].writing = false;
          break;
        case kFinish: {
          std::lock_guard<std::mutex> lock(mu_);
          if (++finished_ == streams_.size()) cv_.notify_all();
          break;
        }
      }
    }
  }

  std::atomic<int64_t>& failed_;
  std::vector<Stream> streams_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t started_ = 0;   // guarded by mu_
  size_t finished_ = 0;  // guarded by mu_
};

// Every node's heartbeat datagrams: signed with its registration's key, sent over a few UDP sockets (the head answers
// each datagram's source address, so it does not matter that nodes share them), answers read and checked by one
// thread. A beat answered other than OK, or not answered by the end, counts as failed.
class BenchBeats {
 public:
  BenchBeats(const std::vector<Node>& nodes, int port) : nodes_(nodes), sequences_(nodes.size(), 0) {
    sockaddr_in head{};
    head.sin_family = AF_INET;
    head.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &head.sin_addr);
    for (int i = 0; i < kSockets; ++i) {
      fds_[i] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      int buffer = 4 << 20;
      setsockopt(fds_[i], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
      if (connect(fds_[i], reinterpret_cast<sockaddr*>(&head), sizeof(head)) != 0) {
        perror("bench_registration: connect");
        exit(1);
      }
    }
    reader_ = std::thread([this] { Read(); });
  }
  ~BenchBeats() {
    stop_ = true;
    reader_.join();
    for (int fd : fds_) close(fd);
  }

  void Beat(size_t i) {
    torus::rpc::BeatDatagram beat;
    beat.kind = torus::rpc::BeatKind::kBeat;
    beat.incarnation = nodes_[i].incarnation;
    beat.sequence = ++sequences_[i];
    beat.node_id = nodes_[i].id;
    const std::string bytes = torus::rpc::EncodeBeat(beat, nodes_[i].beat_key);
    if (send(fds_[i % kSockets], bytes.data(), bytes.size(), 0) < 0) ++send_failed_;
    ++sent_;
  }
  // Beats sent since the last reset that got no OK (waits a moment for answers in flight).
  int64_t Failed() {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return sent_.load() - ok_.load() + send_failed_.load();
  }
  // Waits for the answers in flight, then counts from zero.
  void Reset() {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    sent_ = 0;
    ok_ = 0;
    send_failed_ = 0;
  }

 private:
  static constexpr int kSockets = 8;
  void Read() {
    pollfd waits[kSockets];
    for (int i = 0; i < kSockets; ++i) waits[i] = {.fd = fds_[i], .events = POLLIN, .revents = 0};
    char buffer[torus::rpc::kMaxBeatDatagramBytes + 1];
    while (!stop_) {
      if (poll(waits, kSockets, 100) <= 0) continue;
      for (int i = 0; i < kSockets; ++i) {
        if (waits[i].revents == 0) continue;
        ssize_t got;
        while ((got = recv(fds_[i], buffer, sizeof(buffer), MSG_DONTWAIT)) > 0) {
          auto answer = torus::rpc::PeekBeat(std::string_view(buffer, static_cast<size_t>(got)));
          if (answer.ok() && answer->action == torus::rpc::BeatAction::kOk) ++ok_;
        }
      }
    }
  }

  const std::vector<Node>& nodes_;
  std::vector<uint64_t> sequences_;
  int fds_[kSockets] = {};
  std::thread reader_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> ok_{0};
  std::atomic<int64_t> send_failed_{0};
};

struct Result {
  int nodes = 0;
  double connect_s = 0;   // connections (and TLS handshakes) before registering
  double register_s = 0;
  double cpu_percent = 0;
  double rss_mb = 0;
  double heartbeats_per_s = 0;
  int64_t failed = 0;
  int alive_at_end = 0;
};

// CPUs to pin the head and this load generator to (-1: not pinned).
struct Pinning {
  int head = -1;
  int load = -1;
};

// One stub per node, each on its own connection — with TLS, with a certificate for that node issued from the head's
// CA — connected (handshakes done) before it returns, as agents are before they register; `connect_s` is how long
// connecting took.
std::vector<std::unique_ptr<torus::rpc::HeadService::Stub>> NodeStubs(HeadProcess& head, int n, bool tls,
                                                                      double* connect_s) {
  const std::string dir = head.dir + "/state/tls";
  auto ca_cert = torus::tls::ReadWholeFile(dir + "/ca.crt");
  auto ca_key = torus::tls::ReadWholeFile(dir + "/ca.key");
  if (tls && (!ca_cert.ok() || !ca_key.ok())) {
    fprintf(stderr, "bench_registration: no CA in %s\n", dir.c_str());
    exit(1);
  }
  const torus::tls::KeyAndCertificate ca{.key_pem = tls ? *ca_key : "", .cert_pem = tls ? *ca_cert : ""};
  const std::string key = *torus::tls::GeneratePrivateKey();
  const std::string csr = *torus::tls::CreateSigningRequest(key, "bench");
  const int64_t now = time(nullptr);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < n; ++i) {
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
    if (tls) {
      auto cert = torus::tls::IssueCertificate(
          ca, csr, {.common_name = torus::tls::NodeIdentity("bench-" + std::to_string(i)), .now_s = now});
      if (!cert.ok()) {
        fprintf(stderr, "bench_registration: %s\n", std::string(cert.status().message()).c_str());
        exit(1);
      }
      credentials = torus::tls::ChannelCredentialsFromPem(*ca_cert, *cert, key, torus::tls::kHeadIdentity);
    }
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);
    args.SetMaxReceiveMessageSize(512 << 20);
    channels.push_back(grpc::CreateCustomChannel(head.address, credentials, args));
  }
  // In batches, as agents come up over time: 10,000 handshakes at once outlast gRPC's handshake timeout.
  const auto t0 = Clock::now();
  constexpr size_t kBatch = 250;
  for (size_t begin = 0; begin < channels.size(); begin += kBatch) {
    const size_t end = std::min(channels.size(), begin + kBatch);
    for (size_t i = begin; i < end; ++i) channels[i]->GetState(/*try_to_connect=*/true);
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(60);
    for (size_t i = begin; i < end; ++i) {
      if (!channels[i]->WaitForConnected(deadline)) {
        fprintf(stderr, "bench_registration: connection %zu did not come up in 60 s\n", i);
        StopHead(head);
        exit(1);
      }
    }
  }
  *connect_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<std::unique_ptr<torus::rpc::HeadService::Stub>> stubs;
  for (auto& channel : channels) stubs.push_back(torus::rpc::HeadService::NewStub(channel));
  return stubs;
}

Result RunOnce(int n, int seconds, int64_t period_ms, int64_t node_timeout_ms, int channels_count,
               const std::string& mode, Pinning pin, bool tls) {
  const bool datagram = mode == "datagram";
  const bool stream = mode == "stream" || datagram;
  std::vector<std::string> head_args = {"--heartbeat-period-ms", std::to_string(period_ms), "--node-timeout-ms",
                                        std::to_string(node_timeout_ms)};
  if (tls) head_args.push_back("--tls");
  auto started = StartHead("/tmp/torus_bench_reg_", head_args);
  if (!started.ok()) {
    fprintf(stderr, "bench_registration: %s\n", std::string(started.status().message()).c_str());
    exit(1);
  }
  HeadProcess head = *std::move(started);
  if (pin.head >= 0 && !PinToCpu(head.pid, pin.head)) fprintf(stderr, "bench_registration: cannot pin the head\n");
  if (pin.load >= 0 && !PinToCpu(getpid(), pin.load)) fprintf(stderr, "bench_registration: cannot pin myself\n");
  // Connections: `channels_count`, or one per node (0, and always with TLS: a node's certificate is its own).
  double connect_s = 0;
  auto stubs = tls || channels_count == 0 ? NodeStubs(head, n, tls, &connect_s)
                                          : MakeStubs(head.address, channels_count, 0);
  const std::string bearer = "Bearer " + head.token;
  std::vector<Node> nodes(n);
  std::atomic<int64_t> failed{0};
  InFlight inflight(2000);

  auto t0 = Clock::now();
  std::vector<torus::rpc::RegisterNodeReply> replies;
  const std::vector<uint64_t> incarnations = RegisterSyntheticHosts(stubs, head.token, n, &replies);
  for (int i = 0; i < n; ++i) {
    nodes[i] = {"bench-" + std::to_string(i), incarnations[i], replies[i].beat_key()};
    if (incarnations[i] == 0) ++failed;
  }
  Result r;
  r.nodes = n;
  r.register_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.connect_s = connect_s;

  // Heartbeats: every node once per period, spread evenly over 10 ms ticks.
  std::atomic<int64_t> sent{0};
  std::unique_ptr<BenchStreams> streams;
  if (stream) streams = std::make_unique<BenchStreams>(stubs, bearer, nodes, failed);
  std::unique_ptr<BenchBeats> beats;
  if (datagram) {
    if (replies.empty() || replies[0].beat_port() == 0) {
      fprintf(stderr, "bench_registration: the head gave no heartbeat datagram port\n");
      exit(1);
    }
    beats = std::make_unique<BenchBeats>(nodes, static_cast<int>(replies[0].beat_port()));
    for (int i = 0; i < n; ++i) streams->Beat(i);  // an agent's first beat of a stream carries its availability
  }
  auto heartbeat = [&](int i) {
    ++sent;
    if (datagram) {
      beats->Beat(i);
    } else if (stream) {
      streams->Beat(i);
    } else {
      SendHeartbeat(*stubs[i % stubs.size()], bearer, nodes[i].id, nodes[i].incarnation, inflight, failed);
    }
  };
  const int64_t tick_ms = 10;
  const int64_t ticks_per_period = std::max<int64_t>(1, period_ms / tick_ms);
  auto run_for = [&](int secs) {
    auto start = Clock::now();
    for (int64_t tick = 0;; ++tick) {
      auto due = start + std::chrono::milliseconds(tick * tick_ms);
      if (due - start >= std::chrono::seconds(secs)) break;
      std::this_thread::sleep_until(due);
      int64_t slot = tick % ticks_per_period;
      for (int i = static_cast<int>(slot); i < n; i += static_cast<int>(ticks_per_period)) heartbeat(i);
    }
  };
  run_for(3);  // warm-up
  failed = 0;
  sent = 0;
  if (beats) beats->Reset();
  double cpu0 = CpuSeconds(head.pid);
  auto w0 = Clock::now();
  run_for(seconds);
  double wall = std::chrono::duration<double>(Clock::now() - w0).count();
  double cpu1 = CpuSeconds(head.pid);
  inflight.Drain();
  if (beats) failed += beats->Failed();
  if (streams) streams->Close();
  r.cpu_percent = 100.0 * (cpu1 - cpu0) / wall;
  r.rss_mb = RssMb(head.pid);
  r.heartbeats_per_s = sent.load() / wall;
  r.failed = failed.load();

  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", bearer);
  torus::rpc::GetClusterStatusRequest request;
  torus::rpc::ClusterStatus status;
  grpc::Status status_rpc = stubs[0]->GetClusterStatus(&ctx, request, &status);
  if (!status_rpc.ok()) fprintf(stderr, "GetClusterStatus: %s\n", status_rpc.error_message().c_str());
  if (status_rpc.ok()) {
    for (const auto& node : status.nodes()) r.alive_at_end += node.state() == torus::rpc::ALIVE;
  }
  StopHead(head);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string nodes_list = "1000,10000";
  int seconds = 20;
  int64_t period_ms = 500;
  int64_t node_timeout_ms = 3000;
  int channels = 4;
  std::string modes = "datagram,stream,unary";
  std::string security = "plain";
  Pinning pin;
  CLI::App app{"Registration and heartbeat load on torus-head"};
  app.add_option("--nodes", nodes_list, "Comma-separated node counts")->capture_default_str();
  app.add_option("--seconds", seconds, "Measurement window per size")->capture_default_str();
  app.add_option("--period-ms", period_ms, "Heartbeat period")->capture_default_str();
  app.add_option("--node-timeout-ms", node_timeout_ms, "The head's node timeout")->capture_default_str();
  app.add_option("--channels", channels, "Client connections (0: one per node)")->capture_default_str();
  app.add_option("--security", security, "plain, tls (a head with --tls, node certificates), or plain,tls")
      ->capture_default_str();
  app.add_option("--mode", modes, "Heartbeats as datagrams beside open streams (datagram), stream messages (stream), unary calls "
                 "(unary), or a list of them")
      ->capture_default_str();
  app.add_option("--head-cpu", pin.head, "Pin the head to this CPU (-1: not pinned)")->capture_default_str();
  app.add_option("--load-cpu", pin.load, "Pin the load generator to this CPU (-1: not pinned)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  printf("%8s  %7s  %6s  %10s  %12s  %12s  %10s  %9s  %12s  %8s  %8s\n", "nodes", "mode", "wire", "connect_s",
         "register_s", "register/s", "head_cpu%", "head_MB", "heartbeat/s", "failed", "alive");
  std::stringstream list(nodes_list);
  std::string item;
  while (std::getline(list, item, ',')) {
    int n = std::stoi(item);
    std::stringstream mode_list(modes);
    std::string mode;
    while (std::getline(mode_list, mode, ',')) {
      if (mode != "datagram" && mode != "stream" && mode != "unary") {
        fprintf(stderr, "--mode: '%s' is not datagram, stream or unary\n", mode.c_str());
        return 2;
      }
      std::stringstream wires(security);
      std::string wire;
      while (std::getline(wires, wire, ',')) {
        if (wire != "plain" && wire != "tls") {
          fprintf(stderr, "--security: '%s' is not plain or tls\n", wire.c_str());
          return 2;
        }
        Result r = RunOnce(n, seconds, period_ms, node_timeout_ms, channels, mode, pin, wire == "tls");
        printf("%8d  %7s  %6s  %10.3f  %12.3f  %12.0f  %10.1f  %9.1f  %12.0f  %8lld  %8d\n", r.nodes, mode.c_str(),
               wire.c_str(), r.connect_s, r.register_s, r.nodes / r.register_s, r.cpu_percent, r.rss_mb,
               r.heartbeats_per_s, static_cast<long long>(r.failed), r.alive_at_end);
        fflush(stdout);
      }
    }
  }
  return 0;
}

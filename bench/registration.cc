// Registration and heartbeat load on a real torus-head process.
//
// Starts torus-head, registers N synthetic nodes over gRPC (TPU hosts in v6e-16 slices, with the labels a real
// agent sends), then heartbeats every node at the default period for a measurement window and reports the head's
// CPU (% of one core, from /proc/<pid>/stat) and resident memory, plus whether every node stayed ALIVE.
//
//   build/bin/bench_registration --nodes 1000,10000 --seconds 20
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "grpcpp/grpcpp.h"
#include "torus/head.grpc.pb.h"
#include "torus/rpc/auth.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Head {
  pid_t pid = 0;
  std::string dir;
  std::string address;
  std::string token;
};

Head StartHead(int64_t period_ms) {
  Head head;
  char tmpl[] = "/tmp/torus_bench_reg_XXXXXX";
  head.dir = mkdtemp(tmpl);
  std::string bin = std::string(TORUS_BIN_DIR) + "/torus-head";
  std::vector<std::string> args = {bin, "--session-dir", head.dir, "--port", "0", "--dashboard-port", "0", "--heartbeat-period-ms",
                                   std::to_string(period_ms)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  std::string log = head.dir + "/head.log";
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  if (posix_spawn(&head.pid, bin.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
    fprintf(stderr, "cannot start %s\n", bin.c_str());
    exit(1);
  }
  posix_spawn_file_actions_destroy(&actions);
  for (int i = 0; i < 1000 && head.address.empty(); ++i) {
    std::ifstream in(head.dir + "/head_address");
    std::getline(in, head.address);
    if (head.address.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  head.token = *torus::rpc::ReadTokenFile(head.dir + "/token");
  return head;
}

void StopHead(Head& head) {
  kill(head.pid, SIGTERM);
  waitpid(head.pid, nullptr, 0);
  std::filesystem::remove_all(head.dir);
}

double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream fields(line.substr(line.rfind(')') + 2));
  std::string f;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stol(f);
    if (i == 15) stime = std::stol(f);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

double RssMb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      double kb = 0;
      in >> kb;
      return kb / 1024;
    }
    std::getline(in, key);
  }
  return 0;
}

// Limits in-flight calls and waits for all of them to finish.
class InFlight {
 public:
  explicit InFlight(int limit) : limit_(limit) {}
  void Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return count_ < limit_; });
    ++count_;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    --count_;
    cv_.notify_all();
  }
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return count_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  const int limit_;
};

struct Node {
  std::string id;
  uint64_t incarnation = 0;
};

struct Result {
  int nodes = 0;
  double register_s = 0;
  double cpu_percent = 0;
  double rss_mb = 0;
  double heartbeats_per_s = 0;
  int64_t failed = 0;
  int alive_at_end = 0;
};

Result RunOnce(int n, int seconds, int64_t period_ms, int channels_count) {
  Head head = StartHead(period_ms);
  std::vector<std::unique_ptr<torus::rpc::HeadService::Stub>> stubs;
  for (int c = 0; c < channels_count; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", c);  // distinct channels, distinct connections
    args.SetMaxReceiveMessageSize(512 << 20);
    stubs.push_back(torus::rpc::HeadService::NewStub(
        grpc::CreateCustomChannel(head.address, grpc::InsecureChannelCredentials(), args)));
  }
  const std::string bearer = "Bearer " + head.token;
  std::vector<Node> nodes(n);
  std::atomic<int64_t> failed{0};
  InFlight inflight(2000);

  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    nodes[i].id = "bench-" + std::to_string(i);
    struct Call {
      grpc::ClientContext ctx;
      torus::rpc::RegisterNodeRequest request;
      torus::rpc::RegisterNodeReply reply;
    };
    auto* call = new Call;
    call->ctx.AddMetadata("authorization", bearer);
    auto* info = call->request.mutable_node();
    info->set_node_id(nodes[i].id);
    info->set_address("10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250));
    info->set_hostname(nodes[i].id);
    (*info->mutable_resources_total())["CPU"] = 2240000;
    (*info->mutable_resources_total())["TPU"] = 40000;
    (*info->mutable_resources_total())["memory"] = int64_t{180} << 30;
    auto& labels = *info->mutable_labels();
    labels["torus.io/node-id"] = nodes[i].id;
    labels["torus.io/accelerator-type"] = "TPU-V6E";
    labels["torus.io/tpu-slice-name"] = "slice-" + std::to_string(i / 4);
    labels["torus.io/tpu-worker-id"] = std::to_string(i % 4);
    labels["torus.io/tpu-topology"] = "4x4";
    labels["torus.io/tpu-pod-type"] = "v6e-16";
    labels["torus.io/tpu-chips-per-host"] = "4";
    labels["torus.io/market-type"] = i % 3 == 0 ? "spot" : "on-demand";
    *call->request.mutable_resources_available() = info->resources_total();
    inflight.Acquire();
    stubs[i % stubs.size()]->async()->RegisterNode(&call->ctx, &call->request, &call->reply,
                                                    [call, &nodes, i, &failed, &inflight](grpc::Status s) {
                                                      if (s.ok()) {
                                                        nodes[i].incarnation = call->reply.incarnation();
                                                      } else {
                                                        ++failed;
                                                      }
                                                      delete call;
                                                      inflight.Release();
                                                    });
  }
  inflight.Drain();
  Result r;
  r.nodes = n;
  r.register_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // Heartbeats: every node once per period, spread evenly over 10 ms ticks.
  std::atomic<int64_t> sent{0};
  auto heartbeat = [&](int i) {
    struct Call {
      grpc::ClientContext ctx;
      torus::rpc::HeartbeatRequest request;
      torus::rpc::HeartbeatReply reply;
    };
    auto* call = new Call;
    call->ctx.AddMetadata("authorization", bearer);
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    call->request.set_node_id(nodes[i].id);
    call->request.set_incarnation(nodes[i].incarnation);
    inflight.Acquire();
    ++sent;
    stubs[i % stubs.size()]->async()->Heartbeat(&call->ctx, &call->request, &call->reply,
                                                 [call, &failed, &inflight](grpc::Status s) {
                                                   if (!s.ok() ||
                                                       call->reply.action() != torus::rpc::HeartbeatReply::OK) {
                                                     ++failed;
                                                   }
                                                   delete call;
                                                   inflight.Release();
                                                 });
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
  double cpu0 = CpuSeconds(head.pid);
  auto w0 = Clock::now();
  run_for(seconds);
  double wall = std::chrono::duration<double>(Clock::now() - w0).count();
  double cpu1 = CpuSeconds(head.pid);
  inflight.Drain();
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
  int channels = 4;
  CLI::App app{"Registration and heartbeat load on torus-head"};
  app.add_option("--nodes", nodes_list, "Comma-separated node counts")->capture_default_str();
  app.add_option("--seconds", seconds, "Measurement window per size")->capture_default_str();
  app.add_option("--period-ms", period_ms, "Heartbeat period")->capture_default_str();
  app.add_option("--channels", channels, "Client connections")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  printf("%8s  %12s  %12s  %10s  %9s  %12s  %8s  %8s\n", "nodes", "register_s", "register/s", "head_cpu%",
         "head_MB", "heartbeat/s", "failed", "alive");
  std::stringstream list(nodes_list);
  std::string item;
  while (std::getline(list, item, ',')) {
    int n = std::stoi(item);
    Result r = RunOnce(n, seconds, period_ms, channels);
    printf("%8d  %12.3f  %12.0f  %10.1f  %9.1f  %12.0f  %8lld  %8d\n", r.nodes, r.register_s, r.nodes / r.register_s,
           r.cpu_percent, r.rss_mb, r.heartbeats_per_s, static_cast<long long>(r.failed), r.alive_at_end);
    fflush(stdout);
  }
  return 0;
}

#include "bench_head.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "torus/rpc/auth.h"

extern char** environ;

namespace torus::bench {
namespace {

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

absl::StatusOr<HeadProcess> StartHead(const std::string& dir_prefix, const std::vector<std::string>& extra_args) {
  HeadProcess head;
  std::string tmpl = dir_prefix + "XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("cannot make a session directory");
  head.dir = tmpl;
  const std::string bin = std::string(TORUS_BIN_DIR) + "/torus-head";
  std::vector<std::string> args = {bin, "--session-dir", head.dir, "--port", "0", "--dashboard-port", "0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = head.dir + "/head.log";
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const int spawned = posix_spawn(&head.pid, bin.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return absl::InternalError(absl::StrCat("cannot start ", bin));
  // head_address is written after dashboard_address.
  for (int i = 0; i < 1000 && head.address.empty(); ++i) {
    head.address = ReadLine(head.dir + "/head_address");
    if (head.address.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string http = ReadLine(head.dir + "/dashboard_address");
  auto token = rpc::ReadTokenFile(head.dir + "/token");
  const size_t colon = http.rfind(':');
  if (head.address.empty() || colon == std::string::npos || !token.ok()) {
    return absl::UnavailableError(absl::StrCat("torus-head did not start; its log:\n", HeadLogTail(head, 20)));
  }
  head.http_host = http.substr(0, colon);
  head.http_port = std::stoi(http.substr(colon + 1));
  head.token = *token;
  return head;
}

void StopHead(HeadProcess& head) {
  if (head.pid <= 0) return;
  kill(head.pid, SIGTERM);
  waitpid(head.pid, nullptr, 0);
  head.pid = 0;
  std::filesystem::remove_all(head.dir);
}

std::string HeadLogTail(const HeadProcess& head, int lines) {
  std::ifstream log(head.dir + "/head.log");
  std::vector<std::string> all;
  for (std::string line; std::getline(log, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0; i < all.size(); ++i) {
    absl::StrAppend(&out, "  ", all[i], "\n");
  }
  return out;
}

double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 2));
  std::string f;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stol(f);
    if (i == 15) stime = std::stol(f);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

bool PinToCpu(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  bool all = true;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    const pid_t tid = std::stoi(task.path().filename().string());
    all = sched_setaffinity(tid, sizeof(set), &set) == 0 && all;
  }
  return all;
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

void InFlight::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return count_ < limit_; });
  ++count_;
}

void InFlight::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  --count_;
  cv_.notify_all();
}

void InFlight::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return count_ == 0; });
}

std::vector<std::unique_ptr<rpc::HeadService::Stub>> MakeStubs(const std::string& address, int count, int first_id) {
  std::vector<std::unique_ptr<rpc::HeadService::Stub>> stubs;
  for (int c = 0; c < count; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", first_id + c);  // distinct channels, distinct connections
    args.SetMaxReceiveMessageSize(512 << 20);
    stubs.push_back(
        rpc::HeadService::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

rpc::RegisterNodeRequest SyntheticV6eHost(int i) {
  rpc::RegisterNodeRequest request;
  const std::string id = "bench-" + std::to_string(i);
  auto* info = request.mutable_node();
  info->set_node_id(id);
  info->set_address("10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250));
  info->set_hostname(id);
  (*info->mutable_resources_total())["CPU"] = 2240000;
  (*info->mutable_resources_total())["TPU"] = 40000;
  (*info->mutable_resources_total())["memory"] = int64_t{720} << 30;
  auto& labels = *info->mutable_labels();
  labels["torus.io/node-id"] = id;
  labels["torus.io/accelerator-type"] = "TPU-V6E";
  labels["torus.io/tpu-slice-name"] = "slice-" + std::to_string(i / 4);
  labels["torus.io/tpu-worker-id"] = std::to_string(i % 4);
  labels["torus.io/tpu-topology"] = "4x4";
  labels["torus.io/tpu-pod-type"] = "v6e-16";
  labels["torus.io/tpu-chips-per-host"] = "4";
  labels["torus.io/market-type"] = i % 3 == 0 ? "spot" : "on-demand";
  *request.mutable_resources_available() = info->resources_total();
  return request;
}

std::vector<uint64_t> RegisterSyntheticHosts(const std::vector<std::unique_ptr<rpc::HeadService::Stub>>& stubs,
                                             const std::string& token, int n,
                                             std::vector<rpc::RegisterNodeReply>* replies) {
  std::vector<uint64_t> incarnations(n, 0);
  if (replies != nullptr) replies->assign(n, rpc::RegisterNodeReply());
  InFlight inflight(2000);
  for (int i = 0; i < n; ++i) {
    struct Call {
      grpc::ClientContext ctx;
      rpc::RegisterNodeRequest request;
      rpc::RegisterNodeReply reply;
    };
    auto* call = new Call;
    call->ctx.AddMetadata("authorization", "Bearer " + token);
    call->request = SyntheticV6eHost(i);
    inflight.Acquire();
    stubs[i % stubs.size()]->async()->RegisterNode(&call->ctx, &call->request, &call->reply,
                                                    [call, &incarnations, i, &inflight, replies](grpc::Status s) {
                                                      if (s.ok()) incarnations[i] = call->reply.incarnation();
                                                      if (s.ok() && replies != nullptr) (*replies)[i] = call->reply;
                                                      delete call;
                                                      inflight.Release();
                                                    });
  }
  inflight.Drain();
  return incarnations;
}

void SendHeartbeat(rpc::HeadService::Stub& stub, const std::string& bearer, const std::string& node_id,
                   uint64_t incarnation, InFlight& inflight, std::atomic<int64_t>& failed) {
  struct Call {
    grpc::ClientContext ctx;
    rpc::HeartbeatRequest request;
    rpc::HeartbeatReply reply;
  };
  auto* call = new Call;
  call->ctx.AddMetadata("authorization", bearer);
  call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  call->request.set_node_id(node_id);
  call->request.set_incarnation(incarnation);
  inflight.Acquire();
  stub.async()->Heartbeat(&call->ctx, &call->request, &call->reply, [call, &failed, &inflight](grpc::Status s) {
    if (!s.ok() || call->reply.action() != rpc::HeartbeatReply::OK) ++failed;
    delete call;
    inflight.Release();
  });
}

}  // namespace torus::bench

#include "torus/core/output_follower.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "torus/node.grpc.pb.h"

namespace torus::core {
namespace {

constexpr size_t kMaxQueuedLines = 100'000;  // beyond this, the oldest are dropped

}  // namespace

OutputFollower::~OutputFollower() { Stop(); }

void OutputFollower::Follow(const std::string& agent, const std::string& worker_id, int64_t pid,
                            const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || threads_.contains(worker_id)) return;
  const std::string source = absl::StrCat("pid=", pid, ", node=", node_id);
  threads_[worker_id] = std::thread([this, agent, worker_id, source] { Run(agent, worker_id, source); });
}

void OutputFollower::Run(std::string agent, std::string worker_id, std::string source) {
  auto stub = rpc::NodeService::NewStub(channels_->Agent(agent));
  int64_t offset = 0;
  std::string partial;
  while (true) {
    grpc::ClientContext ctx;
    channels_->Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(40));
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      calls_.push_back(&ctx);
    }
    rpc::ReadWorkerLogRequest request;
    request.set_worker_id(worker_id);
    request.set_offset(offset);
    request.set_wait_ms(30'000);
    rpc::ReadWorkerLogReply reply;
    grpc::Status s = stub->ReadWorkerLog(&ctx, request, &reply);
    absl::MutexLock lock(&mu_);
    std::erase(calls_, &ctx);
    if (!s.ok() || stopping_) return;
    offset = reply.next_offset();
    partial += reply.data();
    size_t start = 0;
    for (size_t nl = partial.find('\n'); nl != std::string::npos; nl = partial.find('\n', start)) {
      lines_.push_back(OutputLine{.source = source, .text = partial.substr(start, nl - start)});
      start = nl + 1;
    }
    partial.erase(0, start);
    if (reply.finished() && !partial.empty()) {
      lines_.push_back(OutputLine{.source = source, .text = std::move(partial)});
      partial.clear();
    }
    while (lines_.size() > kMaxQueuedLines) lines_.pop_front();
    cv_.SignalAll();
    if (reply.finished()) return;
  }
}

std::optional<OutputLine> OutputFollower::Next(int64_t timeout_ms) {
  absl::MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!(!lines_.empty() || stopping_)) {
    if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
  }
  if (lines_.empty()) return std::nullopt;
  OutputLine line = std::move(lines_.front());
  lines_.pop_front();
  return line;
}

void OutputFollower::Stop() {
  std::map<std::string, std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (grpc::ClientContext* ctx : calls_) ctx->TryCancel();
    threads.swap(threads_);
    cv_.SignalAll();
  }
  for (auto& [id, t] : threads) t.join();
}

}  // namespace torus::core

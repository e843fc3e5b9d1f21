#include "torus/core/core_worker.h"

#include <unistd.h>

#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "torus/core/groups.h"
#include "torus/core/ids.h"
#include "torus/core/value_proto.h"
#include "torus/head.grpc.pb.h"
#include "torus/node.grpc.pb.h"

namespace torus::core {
namespace {

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

std::chrono::steady_clock::time_point DeadlineAfter(int64_t timeout_ms) {
  if (timeout_ms < 0) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
}

}  // namespace

namespace {

size_t DefaultObjectStoreMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<size_t>(pages) * static_cast<size_t>(page) / 10 * 3;
}

}  // namespace

CoreWorker::CoreWorker(CoreWorkerOptions options)
    : options_(std::move(options)),
      channels_(options_.token),
      table_(options_.object_store_memory > 0 ? options_.object_store_memory : DefaultObjectStoreMemory()),
      executor_([this](const std::vector<Value>& returns, const std::string& owner) { RegisterCallerOf(returns, owner); }) {}

absl::StatusOr<std::unique_ptr<CoreWorker>> CoreWorker::Start(CoreWorkerOptions options) {
  if (options.job_id.empty()) return absl::InvalidArgumentError("job_id is required");
  if (options.local_agent.empty()) return absl::InvalidArgumentError("the local agent's address is required");
  std::unique_ptr<CoreWorker> w(new CoreWorker(std::move(options)));
  w->service_ = NewCoreWorkerService(w.get(), w->options_.token);
  // With TLS, this process's port serves a certificate of its own from the head (worker_certificate.h).
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!w->channels_.tls_ca().empty()) {
    auto certificate = WorkerCertificate::Obtain(&w->channels_, w->options_.head_address, w->channels_.tls_ca());
    if (!certificate.ok()) return certificate.status();
    w->certificate_ = *std::move(certificate);
    w->certificate_->StartRenewal();
    credentials = tls::ServerCredentials(w->certificate_->files());
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::StrCat(w->options_.node_ip, ":0"), credentials, &port);
  builder.RegisterService(w->service_.get());
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  w->server_ = builder.BuildAndStart();
  if (!w->server_ || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", w->options_.node_ip));
  }
  w->address_ = absl::StrCat(w->options_.node_ip, ":", port);
  w->blocked_ = w->NewBlockedReporter();
  w->store_ = std::make_unique<StoreClient>(&w->channels_, w->options_.local_agent,
                                            OwnerIdentity{.address = w->address_, .pid = getpid(), .boot_id = BootId()});
  w->table_.SetOnFreeStored(
      [store = w->store_.get()](const std::string& id, const Value& v) { store->Delete(v.location, id); });
  w->borrows_ = std::make_unique<Borrows>(&w->channels_, &w->table_, w->address_, std::chrono::seconds(5));
  w->table_.SetOnBorrowReleased(
      [borrows = w->borrows_.get()](const std::string& owner, const std::string& id) { borrows->Release(owner, id); });
  w->task_events_ = std::make_unique<TaskEvents>(&w->channels_, w->options_.head_address, w->address_);
  w->pipe_ = std::make_unique<TaskPipe>(&w->channels_);
  w->submitter_ = std::make_unique<TaskSubmitter>(TaskSubmitter::Options{.job_id = w->options_.job_id,
                                                                         .local_agent = w->options_.local_agent,
                                                                         .own_address = w->address_,
                                                                         .holder_pid = getpid(),
                                                                         .holder_boot_id = BootId(),
                                                                         .on_worker = w->Follower(),
                                                                         .on_task = w->task_events_->Sink()},
                                                  &w->table_, &w->channels_, w->pipe_.get(),
                                                  [self = w.get()] {
                                                    self->RefreshNodes().IgnoreError();
                                                    return self->nodes();
                                                  },
                                                  [self = w.get()](const std::string& group,
                                                                   const std::function<bool()>& stop) {
                                                    return WaitForBundles(self->channels_, self->options_.head_address,
                                                                          group, stop);
                                                  });
  CoreWorker* self = w.get();
  w->reporter_ = std::make_unique<ActorReporter>(&w->channels_, w->options_.head_address);
  w->actors_ = std::make_unique<ActorManager>(ActorManager::Options{.job_id = w->options_.job_id,
                                                                    .local_agent = w->options_.local_agent,
                                                                    .own_address = w->address_,
                                                                    .holder_pid = getpid(),
                                                                    .holder_boot_id = BootId(),
                                                                    .on_worker = w->Follower(),
                                                                    .on_state = w->ActorStateReporter()},
                                              &w->channels_, [self] { return self->nodes(); },
                                              [self](const std::string& group, const std::function<bool()>& stop) {
                                                return WaitForBundles(self->channels_, self->options_.head_address,
                                                                      group, stop);
                                              });
  w->caller_ = std::make_unique<ActorCaller>(
      absl::StrCat(w->address_, "/", Hex(NewTaskId())), w->address_, &w->table_, w->pipe_.get(),
      [self](const std::string& actor_id, const std::string& owner, int64_t wait_ms, int32_t min_incarnation) {
        return self->ResolveActor(actor_id, owner, wait_ms, min_incarnation);
      },
      w->task_events_->Sink());
  if (!w->options_.head_address.empty()) {
    if (absl::Status s = w->RefreshNodes(); !s.ok()) return s;
  }
  if (!w->options_.worker_id.empty()) {
    grpc::ClientContext ctx;
    w->channels_.Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    AnnounceWorkerRequest request;
    request.set_worker_id(w->options_.worker_id);
    request.set_port(port);
    request.set_pid(getpid());
    AnnounceWorkerReply reply;
    grpc::Status s = w->channels_.Leases(w->options_.local_agent)->AnnounceWorker(&ctx, request, &reply);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("announcing to the agent: ", s.error_message()));
  }
  return w;
}

CoreWorker::~CoreWorker() { Shutdown(); }

std::function<void(const std::string&, const std::string&, int64_t, const std::string&)> CoreWorker::Follower() {
  if (!options_.follow_output) return {};
  return [this](const std::string& agent, const std::string& worker_id, int64_t pid, const std::string& node_id) {
    output_.Follow(agent, worker_id, pid, node_id);
  };
}

std::function<void(const std::string&, const ActorInfo&, const ActorPlace&)> CoreWorker::ActorStateReporter() {
  return [this](const std::string& actor_id, const ActorInfo& info, const ActorPlace& place) {
    rpc::UpdateActorRequest update;
    update.set_actor_id(Hex(actor_id));
    update.set_state(ActorInfo::State_Name(info.state()));
    update.set_node_id(place.node_id);
    update.set_pid(place.pid);
    update.set_worker_address(info.address());
    update.set_restarts(info.restarts());
    update.set_death_cause(info.death_cause());
    reporter_->Report(std::move(update));
  };
}

absl::StatusOr<rpc::ActorView> CoreWorker::GetNamedActor(const std::string& ns, const std::string& name) {
  auto stub = rpc::HeadService::NewStub(channels_.Head(options_.head_address));
  grpc::ClientContext ctx;
  channels_.Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  rpc::GetActorRequest request;
  request.set_name(name);
  request.set_namespace_(ns);
  rpc::ActorView reply;
  const grpc::Status s = stub->GetActor(&ctx, request, &reply);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_code() == grpc::StatusCode::NOT_FOUND
                            ? s.error_message()
                            : absl::StrCat("the head at ", options_.head_address, ": ", s.error_message()));
  }
  // The head owns a detached actor: reach it the way this process reaches the head.
  if (reply.detached()) reply.set_owner_address(options_.head_address);
  return reply;
}

void CoreWorker::Shutdown() {
  if (stopping_.exchange(true)) return;
  executor_.Stop();
  if (submitter_) submitter_->Shutdown();
  // Pushes still in flight end now (their tasks fail as the submitter stops).
  if (pipe_) pipe_->Shutdown(std::chrono::seconds(3));
  output_.Stop();
  // Group watchers ask the head every 2 s at most: they see the stop by then.
  group_watchers_.Join();
  if (caller_) caller_->Shutdown();
  if (actors_) actors_->Shutdown();
  if (reporter_) reporter_->Flush(std::chrono::seconds(2));  // the actors' last states
  if (borrows_) {
    // What this process borrows, it lets go of: each owner is told now rather than when its probes fail.
    for (const auto& [owner, id] : table_.Borrowing()) borrows_->Release(owner, id);
    borrows_->Flush(std::chrono::seconds(1));
  }
  if (store_) {
    // What this process owns goes with it, escaped or not: the store frees it now rather than when it notices.
    for (const auto& [id, v] : table_.OwnedStored()) store_->Delete(v.location, id);
    store_->Flush(2000);
  }
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  handler_threads_.Join();  // their waits see stopping_ within kWaitSliceMs
}

absl::StatusOr<std::vector<LeaseNode>> FetchNodes(const std::string& head_address, const std::string& token) {
  Channels channels(token);
  auto stub = torus::rpc::HeadService::NewStub(channels.Head(head_address));
  grpc::ClientContext ctx;
  channels.Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  torus::rpc::GetClusterStatusRequest request;
  torus::rpc::ClusterStatus status;
  grpc::Status s = stub->GetClusterStatus(&ctx, request, &status);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot read the cluster's nodes from the head at ", head_address, ": ", s.error_message()));
  }
  std::vector<LeaseNode> nodes;
  for (const auto& n : status.nodes()) {
    if (n.state() != torus::rpc::ALIVE || n.info().agent_port() == 0) continue;
    nodes.push_back(LeaseNode{.node_id = n.info().node_id(),
                              .agent_address = absl::StrCat(n.info().address(), ":", n.info().agent_port()),
                              .total = {n.info().resources_total().begin(), n.info().resources_total().end()},
                              .labels = {n.info().labels().begin(), n.info().labels().end()}});
  }
  return nodes;
}

absl::Status CoreWorker::RefreshNodes() {
  auto nodes = FetchNodes(options_.head_address, options_.token);
  if (!nodes.ok()) return nodes.status();
  submitter_->SetNodes(*nodes);
  absl::MutexLock lock(&mu_);
  nodes_ = *std::move(nodes);
  return absl::OkStatus();
}

std::map<std::string, int64_t> CoreWorker::AvailableResources() {
  RefreshNodes().IgnoreError();
  std::map<std::string, int64_t> total;
  for (const LeaseNode& n : nodes()) {
    auto stub = torus::rpc::NodeService::NewStub(channels_.Agent(n.agent_address));
    grpc::ClientContext ctx;
    channels_.Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    torus::rpc::GetLedgerRequest request;
    torus::rpc::LedgerView ledger;
    if (!stub->GetLedger(&ctx, request, &ledger).ok()) continue;
    for (const auto& [name, amount] : ledger.resources_available()) total[name] += amount;
  }
  return total;
}

std::vector<LeaseNode> CoreWorker::nodes() const {
  absl::MutexLock lock(&mu_);
  return nodes_;
}

std::vector<std::string> CoreWorker::Submit(TaskSpec spec, TaskOptions options) {
  std::vector<std::string> ids;
  for (int i = 1; i <= spec.num_returns(); ++i) ids.push_back(ReturnObjectId(spec.task_id(), static_cast<uint32_t>(i)));
  HoldArgsUntilDone(spec);
  submitter_->Submit(std::move(spec), std::move(options));
  return ids;
}

absl::StatusOr<std::string> CoreWorker::CreateActor(TaskSpec creation, ActorOptions options) {
  std::string actor_id = NewTaskId();
  creation.set_actor_id(actor_id);
  creation.set_actor_creation(true);
  creation.set_job_id(options_.job_id);
  creation.set_owner_address(address_);
  creation.set_num_returns(1);
  rpc::ActorView entry;
  entry.set_actor_id(Hex(actor_id));
  entry.set_name(options.name);
  entry.set_namespace_(options.ns);
  entry.set_class_name(options.class_name);
  for (const std::string& m : options.methods) entry.add_methods(m);
  entry.set_job_id(options_.job_id);
  entry.set_owner_address(address_);
  for (const auto& [k, v] : options.shape.resources) (*entry.mutable_resources())[k] = v;
  entry.set_max_restarts(options.max_restarts);
  entry.set_max_task_retries(options.max_task_retries);
  if (options.detached) return CreateDetachedActor(std::move(creation), options, std::move(entry));
  if (absl::Status s = reporter_->Register(entry); !s.ok()) return s;
  actors_->Create(std::move(creation), std::move(options));
  return actor_id;
}

std::vector<std::string> CoreWorker::CallActor(const std::string& actor_id, const std::string& owner_address,
                                               TaskSpec spec) {
  spec.set_job_id(options_.job_id);
  std::vector<std::string> ids;
  for (int i = 1; i <= spec.num_returns(); ++i) ids.push_back(ReturnObjectId(spec.task_id(), static_cast<uint32_t>(i)));
  HoldArgsUntilDone(spec);
  caller_->Call(actor_id, owner_address, std::move(spec));
  return ids;
}

ActorInfo CoreWorker::ResolveActor(const std::string& actor_id, const std::string& owner_address, int64_t wait_ms,
                                   int32_t min_incarnation) {
  if (owner_address == address_) return actors_->Resolve(actor_id, wait_ms, min_incarnation);
  grpc::ClientContext ctx;
  channels_.Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(wait_ms + 10'000));
  ResolveActorRequest request;
  request.set_actor_id(actor_id);
  request.set_wait_ms(wait_ms);
  request.set_min_incarnation(min_incarnation);
  ActorInfo info;
  grpc::Status s = channels_.Worker(owner_address)->ResolveActor(&ctx, request, &info);
  if (!s.ok() && owner_address == options_.head_address && s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // A detached actor's owner is the head, which may be restarting: the actor lives on; ask again soon.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<int64_t>(wait_ms, 0, 500)));
    info.Clear();
    info.set_state(ActorInfo::RESTARTING);
    return info;
  }
  if (!s.ok()) {
    info.Clear();
    info.set_state(ActorInfo::DEAD);
    info.set_death_cause(absl::StrCat("its owner at ", owner_address, " cannot be reached (", s.error_message(),
                                      "): an actor dies with the process that created it"));
  }
  return info;
}

absl::Status CoreWorker::KillActor(const std::string& actor_id, const std::string& owner_address, bool no_restart) {
  caller_->Forget(actor_id);
  if (owner_address == address_) return actors_->Kill(actor_id, no_restart);
  grpc::ClientContext ctx;
  channels_.Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  KillActorRequest request;
  request.set_actor_id(actor_id);
  request.set_no_restart(no_restart);
  KillActorReply reply;
  grpc::Status s = channels_.Worker(owner_address)->KillActor(&ctx, request, &reply);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("the actor's owner: ", s.error_message()));
  return absl::OkStatus();
}

ActorInfo CoreWorker::HandleResolveActor(const ResolveActorRequest& request) {
  const auto deadline = DeadlineAfter(std::clamp<int64_t>(request.wait_ms(), 0, 60'000));
  while (true) {  // in slices, so that a stop ends the wait
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()).count();
    ActorInfo info = actors_->Resolve(request.actor_id(), std::clamp<int64_t>(left, 0, kWaitSliceMs),
                                      request.min_incarnation());
    const bool settled = info.state() == ActorInfo::DEAD ||
                         (info.state() == ActorInfo::ALIVE && info.incarnation() >= request.min_incarnation());
    if (settled || left <= kWaitSliceMs || Stopping()) return info;
  }
}

grpc::Status CoreWorker::HandleKillActor(const KillActorRequest& request) {
  absl::Status s = actors_->Kill(request.actor_id(), request.no_restart());
  if (!s.ok()) return grpc::Status(grpc::StatusCode::NOT_FOUND, std::string(s.message()));
  return grpc::Status::OK;
}

std::string CoreWorker::WhenGroupReady(const std::string& group, Value ready) {
  std::string id = PutObjectId();
  table_.AddPending(id);
  const bool started = group_watchers_.Start([this, group, id, ready = std::move(ready)]() mutable {
    auto bundles = WaitForBundles(channels_, options_.head_address, group, [this] { return Stopping(); });
    table_.Put(id, bundles.ok() ? std::move(ready)
                                : Value{.data = std::string(bundles.status().message()), .format = "unschedulable"});
  });
  if (!started) table_.Put(id, Value{.data = "this worker is stopping", .format = "unschedulable"});
  return id;
}

absl::StatusOr<std::string> CoreWorker::Put(Value value) {
  std::string id = PutObjectId();
  if (absl::Status s = table_.TryPut(id, std::move(value)); !s.ok()) return s;
  return id;
}

absl::StatusOr<std::string> CoreWorker::PutParts(const ValueParts& parts,
                                                 std::vector<std::pair<std::string, std::string>> contained) {
  if (PartsSize(parts) < kInlineMaxBytes) {
    Value value{.data = std::string(parts.data), .format = std::string(parts.format)};
    for (std::string_view b : parts.buffers) value.buffers.emplace_back(b);
    value.contained = std::move(contained);
    return Put(std::move(value));
  }
  std::string id = PutObjectId();
  auto stored = store_->Write(id, parts, store_->self());
  if (!stored.ok()) return stored.status();
  stored->contained = std::move(contained);
  if (absl::Status s = table_.TryPut(id, *std::move(stored)); !s.ok()) return s;
  return id;
}

Value CoreWorker::StoreReturn(const std::string& task_id, uint32_t index, const ValueParts& parts) {
  if (PartsSize(parts) < kInlineMaxBytes) {
    Value value{.data = std::string(parts.data), .format = std::string(parts.format)};
    for (std::string_view b : parts.buffers) value.buffers.emplace_back(b);
    return value;
  }
  auto stored = store_->Write(ReturnObjectId(task_id, index), parts,
                              OwnerIdentity{.address = executor_.OwnerOf(task_id).value_or("")});
  if (!stored.ok()) {
    return Value{.data = absl::StrCat("a return value of the task could not be stored on node ", store_->local_agent(),
                                      ": ", stored.status().message()),
                 .format = "object_store_full"};
  }
  return *std::move(stored);
}

absl::StatusOr<std::shared_ptr<MappedObject>> CoreWorker::MapStored(const Ref& ref, const Value& value) {
  return store_->Map(ref.object_id, value, ref.owner_address.empty() ? address_ : ref.owner_address);
}

grpc::Status CoreWorker::HandleGetObject(const GetObjectRequest& request, GetObjectReply* reply) {
  const auto deadline = DeadlineAfter(std::clamp<int64_t>(request.wait_ms(), 0, 60'000));
  ObjectState state;
  do {  // in slices, so that a stop ends the wait
    state = table_.WaitReady(request.object_id(),
                             std::min(deadline, DeadlineAfter(kWaitSliceMs)));
  } while (state == ObjectState::kPending && std::chrono::steady_clock::now() < deadline && !Stopping());
  if (state == ObjectState::kReady) {
    if (auto v = table_.Get(request.object_id())) {
      reply->set_status(GetObjectReply::READY);
      ToProto(*v, reply->mutable_value());
      return grpc::Status::OK;
    }
  }
  reply->set_status(state == ObjectState::kPending ? GetObjectReply::PENDING : GetObjectReply::FREED);
  return grpc::Status::OK;
}

bool CoreWorker::HandleCancel(const std::string& task_id, bool recursive) {
  switch (executor_.Cancel(task_id)) {
    case Executor::Cancelled::kNotHere:
      return false;
    case Executor::Cancelled::kDropped:
      return true;
    case Executor::Cancelled::kRunning:
      // A task runs here one at a time: what this worker submitted and has not finished is the cancelled task's.
      if (recursive) submitter_->CancelAll();
      executor_.Interrupt(task_id);
      return true;
  }
  return false;
}

}  // namespace torus::core

// CoreWorker::CreateDetachedActor: a detached actor is created by the head (HeadService.CreateActor), which owns it
// and builds it again after each death of its worker, long after this process may have exited. So everything it
// needs travels with the request: the class, and every argument as a value (refs resolved here, stored values read
// from the store).
#include <thread>

#include "absl/strings/str_cat.h"
#include "torus/core/core_worker.h"
#include "torus/core/ids.h"
#include "torus/core/value_proto.h"
#include "torus/head.grpc.pb.h"

namespace torus::core {
namespace {

constexpr size_t kMaxDetachedCreationBytes = 8 << 20;  // the head's limit (DetachedActors::kMaxCreationBytes)

}  // namespace

absl::StatusOr<std::string> CoreWorker::CreateDetachedActor(TaskSpec creation, const ActorOptions& options,
                                                            rpc::ActorView entry) {
  if (options_.head_address.empty()) return absl::FailedPreconditionError("a detached actor needs a cluster's head");
  if (!options.shape.fallback_selectors.empty()) {
    // The head places a detached actor again after each death, from ActorCreation, which carries no fallbacks.
    return absl::InvalidArgumentError(
        "fallback_strategy: label selector fallbacks are not supported for a detached actor by this torus build");
  }
  for (TaskArg& arg : *creation.mutable_args()) {
    Value value;
    if (arg.has_ref()) {
      const Ref ref{arg.ref().object_id(), arg.ref().owner_address()};
      auto got = Get({ref}, -1);
      if (!got.ok()) return got.status();
      value = std::move((*got)[0]);
      if (value.stored()) {
        auto mapped = MapStored(ref, value);
        if (!mapped.ok()) return mapped.status();
        const StoredLayout& layout = (*mapped)->layout();
        const char* base = (*mapped)->data();
        value = Value{.data = std::string(base + layout.data.offset, layout.data.size), .format = layout.format};
        for (const StoredSpan& b : layout.buffers) value.buffers.emplace_back(base + b.offset, b.size);
      }
      // A large argument this process put for the call (no handle of the language holds it) is freed now.
      const bool owned = ref.owner_address == address_ || ref.owner_address.empty();
      if (owned) {
        table_.AddRef(ref.object_id);
        table_.RemoveRef(ref.object_id);
      }
    } else {
      value = FromProto(arg.value());
    }
    MoveToProto(std::move(value), arg.mutable_value());
  }
  ActorCreation c;
  *c.mutable_creation() = std::move(creation);
  for (const auto& [k, v] : options.shape.resources) (*c.mutable_resources())[k] = v;
  c.mutable_env()->insert(options.shape.env.begin(), options.shape.env.end());
  c.set_working_dir(options.shape.working_dir);
  c.mutable_label_selector()->insert(options.shape.label_selector.begin(), options.shape.label_selector.end());
  c.set_strategy(options.shape.strategy);
  c.set_placement_group(options.shape.placement_group);
  c.set_bundle_index(options.shape.bundle_index);
  c.set_max_restarts(options.max_restarts);
  c.set_max_task_retries(options.max_task_retries);
  rpc::CreateActorRequest request;
  *request.mutable_actor() = std::move(entry);
  c.SerializeToString(request.mutable_creation());
  if (request.creation().size() > kMaxDetachedCreationBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lifetime=\"detached\": the class and constructor arguments come to ", request.creation().size() >> 10,
        " KiB; the head keeps at most ", kMaxDetachedCreationBytes >> 20,
        " MiB for a detached actor (pass large data through the object store or files the actor reads)"));
  }
  auto stub = rpc::HeadService::NewStub(channels_.Head(options_.head_address));
  rpc::ActorView created;
  grpc::Status s;
  // A head that just restarted takes no new detached actors until it has dealt with those it left unfinished.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    grpc::ClientContext ctx;
    channels_.Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    s = stub->CreateActor(&ctx, request, &created);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || s.error_message().find("head is starting") == std::string::npos ||
        std::chrono::steady_clock::now() > give_up) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!s.ok()) {
    const std::string why = s.error_message();
    switch (s.error_code()) {
      case grpc::StatusCode::ALREADY_EXISTS: return absl::AlreadyExistsError(why);
      case grpc::StatusCode::INVALID_ARGUMENT: return absl::InvalidArgumentError(why);
      default:
        return absl::UnavailableError(
            absl::StrCat("the head at ", options_.head_address, " did not create the detached actor: ", why));
    }
  }
  return c.creation().actor_id();
}

}  // namespace torus::core

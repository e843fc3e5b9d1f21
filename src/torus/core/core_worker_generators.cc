// CoreWorker's streaming generators: the executor reports each item of a generator call to the call's owner as it
// comes; the owner holds item i as ReturnObjectId(task, i + 1) and hands them to the language in order.
#include "absl/strings/str_cat.h"
#include "torus/core/core_worker.h"
#include "torus/core/ids.h"
#include "torus/core/value_proto.h"

namespace torus::core {

namespace {

std::string ItemId(const std::string& task_id, uint32_t index) { return ReturnObjectId(task_id, index + 1); }

}  // namespace

absl::Status CoreWorker::ReportGeneratorItem(const std::string& task_id, uint32_t index, const ValueParts& parts,
                                             std::vector<std::pair<std::string, std::string>> contained) {
  if (index == 0) return absl::InvalidArgumentError("index: generator items count from 1");
  const std::optional<std::string> owner_address = executor_.OwnerOf(task_id);
  if (!owner_address) {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", Hex(task_id), " is not running here: its items cannot be reported"));
  }
  const std::string& owner = *owner_address;
  std::vector<Value> item;
  item.push_back(StoreReturn(task_id, index + 1, parts));
  item.back().contained = std::move(contained);
  RegisterCallerOf(item, owner);
  ReportGeneratorItemRequest request;
  request.set_task_id(task_id);
  request.set_index(index);
  MoveToProto(std::move(item.back()), request.mutable_value());
  grpc::ClientContext ctx;
  channels_.Authorize(ctx);
  ReportGeneratorItemReply reply;
  grpc::Status s = channels_.Worker(owner)->ReportGeneratorItem(&ctx, request, &reply);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("item ", index, " of task ", Hex(task_id), " could not reach its owner ",
                                               owner, ": ", s.error_message()));
  }
  return absl::OkStatus();
}

grpc::Status CoreWorker::HandleReportGeneratorItem(const ReportGeneratorItemRequest& request) {
  if (request.task_id().size() != kTaskIdBytes || request.index() == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("a generator item needs a task id of ", kTaskIdBytes,
                                     " bytes and an index from 1; got ", request.task_id().size(), " bytes, index ",
                                     request.index()));
  }
  const std::string id = ItemId(request.task_id(), request.index());
  // An item another attempt of the task reported already keeps its first value.
  if (table_.State(id) == ObjectState::kReady) return grpc::Status::OK;
  if (table_.State(id) == ObjectState::kUnknown) table_.AddPending(id);
  table_.Put(id, FromProto(request.value()));
  return grpc::Status::OK;
}

absl::StatusOr<std::optional<std::string>> CoreWorker::NextGeneratorItem(const std::string& task_id, uint32_t index,
                                                                         int64_t timeout_ms) {
  const std::string id = ItemId(task_id, index);
  const std::string done = ReturnObjectId(task_id, 1);
  if (table_.State(done) == ObjectState::kUnknown) {
    return absl::NotFoundError(absl::StrCat("task ", Hex(task_id), " is not a generator task of this process"));
  }
  if (table_.State(id) == ObjectState::kUnknown) table_.AddPending(id);
  const auto deadline = timeout_ms < 0 ? std::chrono::steady_clock::time_point::max()
                                       : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  // Items come before the task's own return (the executor reports each before it finishes), so once that is ready
  // an item not held is one that never comes.
  std::vector<size_t> ready = table_.WaitAny({id, done}, 1, deadline);
  if (table_.State(id) == ObjectState::kReady) return std::optional<std::string>(id);
  if (table_.State(done) == ObjectState::kReady) {
    table_.RemovePending(id);
    return std::optional<std::string>();
  }
  (void)ready;
  return absl::DeadlineExceededError(absl::StrCat("item ", index, " of task ", Hex(task_id), " did not come within ",
                                                  timeout_ms, " ms"));
}

}  // namespace torus::core

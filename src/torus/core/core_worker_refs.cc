// CoreWorker's part in reference counting across processes: what a submitted task's arguments hold until it ends,
// the borrowers it registers for the refs inside values it reads and inside the returns it sends back.
#include <map>

#include "torus/core/core_worker.h"
#include "torus/core/ids.h"

namespace torus::core {

void CoreWorker::HoldArgsUntilDone(const TaskSpec& spec) {
  std::vector<std::string> held;
  for (const TaskArg& arg : spec.args()) {
    if (arg.has_value()) {
      // The refs inside a value passed by value: the worker registers as their borrower while the call holds them.
      for (const ObjectRef& inner : arg.value().contained()) held.push_back(inner.object_id());
      continue;
    }
    if (arg.ref().owner_address() != address_ && !arg.ref().owner_address().empty()) continue;
    held.push_back(arg.ref().object_id());
  }
  if (held.empty() || spec.num_returns() < 1) return;
  for (const std::string& id : held) table_.AddRef(id);
  table_.AddPending(ReturnObjectId(spec.task_id(), 1));
  table_.OnReady(ReturnObjectId(spec.task_id(), 1), [this, held](const Value&) {
    for (const std::string& id : held) table_.RemoveRef(id);
  });
}

void CoreWorker::Borrow(const std::vector<Ref>& refs) {
  std::map<std::string, std::vector<std::string>> by_owner;
  for (const Ref& ref : refs) {
    if (ref.owner_address.empty() || ref.owner_address == address_) continue;
    if (table_.MarkBorrowing(ref.object_id, ref.owner_address)) by_owner[ref.owner_address].push_back(ref.object_id);
  }
  // An object its owner no longer holds reads as lost at get, which says so.
  for (const auto& [owner, ids] : by_owner) borrows_->Register(owner, ids);
}

void CoreWorker::RegisterCallerOf(const std::vector<Value>& returns, const std::string& caller) {
  std::map<std::string, std::vector<std::string>> elsewhere;
  for (const Value& v : returns) {
    for (const auto& [id, owner] : v.contained) {
      if (owner == caller) continue;  // the caller's own: its return value holds it
      if (owner == address_ || owner.empty()) {
        table_.AddBorrower(id, caller);
      } else {
        elsewhere[owner].push_back(id);
      }
    }
  }
  for (const auto& [owner, ids] : elsewhere) borrows_->Register(owner, ids, caller);
}

}  // namespace torus::core

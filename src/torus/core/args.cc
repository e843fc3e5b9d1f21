#include "torus/core/args.h"

#include "torus/core/value_proto.h"

namespace torus::core {

void ResolveOwnedArgs(ObjectTable* table, const std::string& own_address, TaskSpec* spec, std::function<void()> done) {
  for (int i = 0; i < spec->args_size(); ++i) {
    const TaskArg& arg = spec->args(i);
    if (!arg.has_ref() || arg.ref().owner_address() != own_address) continue;
    const std::string id = arg.ref().object_id();
    if (auto value = table->Get(id)) {
      // A stored value stays a ref: the executor maps it from its node's store by the object's id.
      if (value->stored()) continue;
      ToProto(*value, spec->mutable_args(i)->mutable_value());
      continue;
    }
    // Wait for it, then look at the rest again.
    table->OnReady(id, [table, own_address, spec, done = std::move(done)](const Value&) mutable {
      ResolveOwnedArgs(table, own_address, spec, std::move(done));
    });
    return;
  }
  done();
}

}  // namespace torus::core

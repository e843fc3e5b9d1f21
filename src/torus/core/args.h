// Argument resolution shared by tasks and actor calls: a ref argument that this process owns is replaced by its
// value once that is ready (refs owned elsewhere, and values in an object store, stay refs for the executor to fetch).
// Thread-safety: as ObjectTable's; `done` runs on the thread that makes the last argument ready.
#pragma once

#include <functional>
#include <string>

#include "torus/core.pb.h"
#include "torus/core/object_table.h"

namespace torus::core {

// Calls `done` once every ref argument of `*spec` owned by `own_address` holds its value. `*spec` must live until
// then (capture its owner in `done`).
void ResolveOwnedArgs(ObjectTable* table, const std::string& own_address, TaskSpec* spec, std::function<void()> done);

}  // namespace torus::core

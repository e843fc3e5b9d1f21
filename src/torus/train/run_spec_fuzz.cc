// libFuzzer target for gang run specs as the REST API receives them (docs/fuzzing.md): the whole input is the JSON
// body. Parsing may fail, with InvalidArgument; it must never crash, and what parses prints with RunSpecToJson and
// reads back equal. The parsed spec is then planned as the head plans it: PlanRun may refuse it, but never crashes;
// the defaults (ApplyRunDefaults) never turn a plannable spec into a refused one; and a plan's worker count on every
// alternative is 1..kMaxWorkers, the primary's the plan's own.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "torus/train/run_spec.h"

namespace {

namespace train = torus::train;

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

bool IsValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  if (!(std::islower(static_cast<unsigned char>(name[0])) || std::isdigit(static_cast<unsigned char>(name[0])))) {
    return false;
  }
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (!(std::islower(u) || std::isdigit(u) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

void CheckPlan(const train::RunSpec& spec) {
  Require(IsValidName(train::DefaultRunName(spec.entrypoint)));
  absl::StatusOr<train::GangPlan> plan = train::PlanRun(spec);
  if (!plan.ok()) {
    Require(plan.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  Require(train::PlanRun(train::ApplyRunDefaults(spec)).ok());
  Require(train::WorkersForAlternative(*plan, 0) == plan->num_workers);
  const int alternatives = plan->tpu ? 1 + static_cast<int>(plan->slice_request.fallbacks.size()) : 1;
  for (int a = 0; a < alternatives; ++a) {
    const int workers = train::WorkersForAlternative(*plan, a);
    Require(workers >= 1 && workers <= train::kMaxWorkers);
  }
  Require(train::WorkersForAlternative(*plan, alternatives) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<train::RunSpec> spec = train::RunSpecFromJson(input);
  if (!spec.ok()) {
    Require(spec.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  absl::StatusOr<train::RunSpec> reparsed = train::RunSpecFromJson(train::RunSpecToJson(*spec));
  Require(reparsed.ok() && *reparsed == *spec);
  CheckPlan(*spec);
  return 0;
}

// libFuzzer target for the agent's `--resources` JSON (docs/fuzzing.md). The whole input is the flag's text.
// Parsing may fail, with InvalidArgument; it must never crash, and what parses holds valid custom names with amounts
// in range that ResourceSet::ToJson prints and ParseCustomResourcesJson reads back equal. Each amount's FormatFixed
// text also reads back (strtod, ToFixed) to the same fixed-point value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "torus/common/resources.h"

namespace {

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<torus::ResourceSet> parsed = torus::ParseCustomResourcesJson(input);
  if (!parsed.ok()) {
    Require(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  for (const auto& [name, fixed] : parsed->amounts()) {
    Require(torus::ValidateResourceName(name).ok());
    Require(name != torus::kResourceCpu && name != torus::kResourceGpu && name != torus::kResourceTpu &&
            name != torus::kResourceMemory);
    Require(fixed > 0 && fixed <= static_cast<int64_t>(torus::kMaxResourceAmount) * torus::kResourceScale);
    const std::string text = torus::FormatFixed(fixed);
    absl::StatusOr<int64_t> again = torus::ToFixed(std::strtod(text.c_str(), nullptr));
    Require(again.ok() && *again == fixed);
  }
  absl::StatusOr<torus::ResourceSet> reparsed = torus::ParseCustomResourcesJson(parsed->ToJson());
  Require(reparsed.ok() && *reparsed == *parsed);
  return 0;
}

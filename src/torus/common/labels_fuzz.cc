// libFuzzer target for user labels (docs/fuzzing.md): the whole input is read as a `--labels k=v,...` flag and as
// the contents of a `--labels-file` (YAML or JSON). Parsing may fail, with InvalidArgument; it must never crash, and
// what parses is a set of valid, canonical user labels that FormatLabels prints and ParseLabelsFlag reads back equal.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "torus/common/labels.h"

namespace {

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

void CheckLabels(const absl::StatusOr<torus::Labels>& parsed) {
  if (!parsed.ok()) {
    Require(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  for (const auto& [key, value] : *parsed) {
    Require(torus::ValidateLabelKey(key).ok());
    Require(torus::ValidateLabelValue(key, value).ok());
  }
  // Canonical already: canonicalising again changes nothing.
  absl::StatusOr<torus::Labels> canonical = torus::CanonicalUserLabels(*parsed);
  Require(canonical.ok() && *canonical == *parsed);
  // Printed as a flag and read back: the same labels.
  absl::StatusOr<torus::Labels> reparsed = torus::ParseLabelsFlag(torus::FormatLabels(*parsed));
  Require(reparsed.ok() && *reparsed == *parsed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  CheckLabels(torus::ParseLabelsFlag(input));
  CheckLabels(torus::ParseLabelsFile(input));
  return 0;
}

// libFuzzer target for label selectors (docs/fuzzing.md). The input is "key=selector text" (no '=': the whole input
// is the text of key "k"); it is parsed, matched against nodes built from its own values, and printed and read back.
// The whole input is also tried as the JSON form. Parsing may fail; it must never crash, and what parses must round
// trip through ToString and match as the grammar says.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "torus/common/label_selector.h"
#include "torus/common/labels.h"

namespace {

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

void CheckRoundTrip(const torus::LabelSelector& selector) {
  absl::StatusOr<torus::LabelSelector> reparsed = torus::LabelSelector::ParseJson(selector.ToString());
  Require(reparsed.ok());
  Require(*reparsed == selector);
}

void CheckMatches(const torus::LabelSelector& selector) {
  for (const auto& [key, expressions] : selector.expressions()) {
    // A node without the key matches unless an expression needs the key present.
    bool needs_key = false;
    for (const torus::LabelExpression& expression : expressions) {
      using Op = torus::LabelExpression::Op;
      needs_key |= expression.op == Op::kEquals || expression.op == Op::kIn || expression.op == Op::kExists;
    }
    if (selector.expressions().size() == 1) Require(selector.Matches({}) == !needs_key);

    std::vector<torus::Labels> nodes = {{{key, ""}}, {{key, "fuzz-other-value"}}};
    for (const torus::LabelExpression& expression : expressions) {
      for (const std::string& value : expression.values) nodes.push_back({{key, value}});
    }
    for (const torus::Labels& node : nodes) {
      bool matches = selector.Matches(node);
      // A node whose value is not among the allowed ones never matches.
      if (const std::vector<std::string>* allowed = selector.AllowedValues(key); allowed != nullptr && matches) {
        bool allowed_value = false;
        for (const std::string& value : *allowed) allowed_value |= value == node.begin()->second;
        Require(allowed_value);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  if (absl::StatusOr<torus::LabelSelector> from_json = torus::LabelSelector::ParseJson(input); from_json.ok()) {
    CheckRoundTrip(*from_json);
    CheckMatches(*from_json);
  }

  const size_t equals = input.find('=');
  const std::string key = equals == std::string_view::npos ? "k" : std::string(input.substr(0, equals));
  const std::string text = std::string(equals == std::string_view::npos ? input : input.substr(equals + 1));
  absl::StatusOr<torus::LabelSelector> selector = torus::LabelSelector::Parse({{key, text}});
  if (!selector.ok()) {
    Require(selector.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  CheckRoundTrip(*selector);
  CheckMatches(*selector);
  return 0;
}

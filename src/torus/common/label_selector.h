// Label selectors (reference/semantics.md §3): per label key, a list of expressions that a node's labels must all
// satisfy. Parsed from a map of key -> selector text, or from its JSON form; matched against a node's Labels.
// Immutable once parsed; thread-safe.
//
// Examples of selector text for one key:
//   spot                   the key is present with value "spot"
//   in(spot,on-demand)     present with one of the values
//   !spot                  absent, or any value but "spot"
//   !in(a,b)               absent, or neither value
//   exists() / !exists()   present (even with an empty value) / absent
//   !a,!b                  several expressions on one key are AND-ed; at most one may be positive (value or in)
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torus/common/labels.h"

namespace torus {

// One expression on one key.
struct LabelExpression {
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kNotExists };
  Op op;
  // One value for kEquals/kNotEquals; one or more, sorted and distinct, for kIn/kNotIn; none for kExists/kNotExists.
  std::vector<std::string> values;

  bool operator==(const LabelExpression&) const = default;
};

class LabelSelector {
 public:
  using Expressions = std::map<std::string, std::vector<LabelExpression>, std::less<>>;

  LabelSelector() = default;  // empty: matches every node

  // Parses a map key -> selector text (semantics.md §3 grammar). Keys are canonicalised with CanonicalLabelKey
  // (`ray.io/` aliases -> `torus.io/`), values checked with ValidateLabelValue. Errors are InvalidArgument and name
  // the key and the 0-based position within its text, e.g.
  //   `label selector for "team": position 5: empty value in in(...)`
  // for an empty expression, `in()`, an empty value, unbalanced parentheses, `!!v`, `(a,b)` without `in`, a second
  // positive expression on a key (`a,b`), an invalid value; and `label selector: label key ...` for an invalid key,
  // an unknown `ray.io/` key, or both `ray.io/x` and `torus.io/x` given.
  static absl::StatusOr<LabelSelector> Parse(const std::map<std::string, std::string>& selector);

  // Parses a JSON object text {"key": "expr", ...}. Errors: invalid JSON, not an object, a duplicate key, a value
  // that is not a string (`label selector for "team": expected a string, got number`), and everything Parse rejects.
  static absl::StatusOr<LabelSelector> ParseJson(std::string_view json);

  // True when every expression of every key holds for `labels`.
  bool Matches(const Labels& labels) const;

  bool empty() const { return expressions_.empty(); }

  // Canonical key -> its expressions, sorted by (op, values) without duplicates. Each key has at most one kEquals
  // or kIn expression; for indexed lookups, AllowedValues gives its values.
  const Expressions& expressions() const { return expressions_; }

  // The values `key` (canonical) must take, from its value or in(...) expression; nullptr when it has none.
  const std::vector<std::string>* AllowedValues(std::string_view key) const;

  // Canonical text, valid JSON that ParseJson reads back to an equal selector; keys in order, e.g.
  // {"team": "!in(a,b)", "torus.io/market-type": "spot"}. An empty selector is {}.
  std::string ToString() const;

  bool operator==(const LabelSelector&) const = default;

 private:
  Expressions expressions_;
};

}  // namespace torus

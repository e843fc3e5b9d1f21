// Node labels: key and value validation (reference/semantics.md §2), the reserved `torus.io/` namespace and its
// `ray.io/` aliases (§1), and parsing of user labels from `--labels k=v,...` and `--labels-file` (YAML or JSON).
// Pure functions; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torus {

// Ordered so that every rendering and every decision over labels is deterministic.
using Labels = std::map<std::string, std::string, std::less<>>;

// Key = optional DNS-subdomain prefix "/" name (semantics.md §2). Error quotes the key and the rule, e.g.
// `label key "a..b/x" is invalid: prefix segment 2 is empty; a prefix is dot-separated DNS labels of 1-63 ...`.
absl::Status ValidateLabelKey(std::string_view key);
// Value: empty, or a name (1–63; letter or digit at both ends; letters, digits, '-', '_', '.' between).
absl::Status ValidateLabelValue(std::string_view key, std::string_view value);

// Maps `ray.io/<well-known name>` to `torus.io/<name>`; returns other keys unchanged after validation.
// Errors: invalid key; a `ray.io/` key that is not one of the ten well-known names.
absl::StatusOr<std::string> CanonicalLabelKey(std::string_view key);

// Checks labels a user supplies: keys canonicalised and validated, values validated, and the only `torus.io/`
// keys allowed are market-type, node-group, availability-zone, availability-region. Both `ray.io/x` and
// `torus.io/x` given is an error.
// Error: `label key "torus.io/tpu-worker-id" is reserved; users may set only torus.io/market-type, ...`.
absl::StatusOr<Labels> CanonicalUserLabels(const Labels& labels);

// Parses "k=v,k2=v2" (spaces around items and around '=' trimmed, as Ray does; empty text = no labels; a value may
// be empty: "k="). Errors name the item: `invalid --labels item "foo": expected key=value`; an empty item
// ("a=b,"), an empty key, a duplicate key (also `ray.io/x` with `torus.io/x`), and everything CanonicalUserLabels
// rejects.
absl::StatusOr<Labels> ParseLabelsFlag(std::string_view text);

// Parses the contents of a labels file: a YAML or JSON map of string keys to scalar values (numbers and booleans
// are taken as written: `v: 1.10` is "1.10"). An empty file sets no labels. Errors, prefixed `--labels-file: ` and
// with the line where known: not a map, a nested value, a null value (write "" for an empty one), a duplicate
// key, more than one YAML document, a parse error with its line and column (text starting with '{' that fails is
// reported as JSON), and everything CanonicalUserLabels rejects.
absl::StatusOr<Labels> ParseLabelsFile(std::string_view contents);

// "k=v,k2=v2" in key order.
std::string FormatLabels(const Labels& labels);

}  // namespace torus

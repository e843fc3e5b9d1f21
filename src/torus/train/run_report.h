// A worker's report of one step of a gang run (POST /api/v0/runs/{id}/report, sent by torus_train and
// torus.train.report): {"rank": R, "attempt": A, "step": S, "metrics": {...}, "checkpoint": "DIR" | null}.
// Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace torus::train {

struct RunReport {
  int rank = 0;                             // 0..1,000,000; the run checks it against its ranks
  int attempt = 0;                          // 0..1,000,000; the run checks it against its current attempt
  int64_t step = 0;
  std::optional<std::string> metrics_json;  // the "metrics" object as compact JSON, when given
  std::string checkpoint;                   // the staged directory, "" when none (ValidateStagedDir checks it)
};

// Parses a report's body: InvalidArgument naming the field and what it must be ("\"rank\" must be an integer",
// "attempt 2000000 is out of range", "\"metrics\" must be an object", ...).
absl::StatusOr<RunReport> ParseRunReport(const std::string& body);

}  // namespace torus::train

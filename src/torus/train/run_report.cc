#include "torus/train/run_report.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace torus::train {

absl::StatusOr<RunReport> ParseRunReport(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("body must be a JSON object");
  for (const char* field : {"rank", "attempt", "step"}) {
    if (!j.contains(field) || !j.at(field).is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" must be an integer"));
    }
  }
  if (j.contains("metrics") && !j.at("metrics").is_object()) {
    return absl::InvalidArgumentError("\"metrics\" must be an object");
  }
  if (j.contains("checkpoint") && !j.at("checkpoint").is_null() && !j.at("checkpoint").is_string()) {
    return absl::InvalidArgumentError("\"checkpoint\" must be a string or null");
  }
  for (const char* field : {"rank", "attempt"}) {
    if (!j.at(field).is_number_unsigned() || j.at(field).get<uint64_t>() > 1'000'000) {
      return absl::InvalidArgumentError(absl::StrCat(field, " ", j.at(field).dump(), " is out of range"));
    }
  }
  // JSON integers above int64's range arrive unsigned: they would wrap.
  if (j.at("step").is_number_unsigned() &&
      j.at("step").get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("step ", j.at("step").dump(), " is out of range"));
  }
  RunReport r;
  r.rank = j.at("rank").get<int>();
  r.attempt = j.at("attempt").get<int>();
  r.step = j.at("step").get<int64_t>();
  if (j.contains("metrics")) {
    r.metrics_json = j.at("metrics").dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (j.contains("checkpoint") && j.at("checkpoint").is_string()) r.checkpoint = j.at("checkpoint").get<std::string>();
  return r;
}

}  // namespace torus::train

// libFuzzer target for what reaches the head's metrics store from outside (docs/fuzzing.md): an agent's
// ReportMetrics report, and the `since`/`until` values of GET /api/v0/metrics. The input's first line (up to 64
// bytes) is a time as the REST query gives it; the rest is a serialized MetricsReport.
//
// ParseMetricsTime may refuse the time, with InvalidArgument; what it accepts is the Unix ms written, or now less a
// positive amount. The report, when it decodes, is ingested for a node with tags (node_id, slice, worker_id) at two
// times, and what the store then holds must be what the head promises to keep: agent families only (torus_node_,
// torus_worker_, torus_tpu_, torus_gpu_), valid names, at most 16 labels of the agent's besides the tags, label
// names valid and values at most 256 bytes, keys sorted and unique, the node's tags as sent by the head (an agent
// cannot claim another node), finite values, points in time order and within the query's range; the counts of
// Names() and Stats() agree.
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "google/protobuf/stubs/logging.h"
#include "torus/head.pb.h"
#include "torus/head/metrics/metrics_store.h"

namespace {

namespace head = torus::head;

// Aborts, so that libFuzzer records the input, when a property that the store promises does not hold; says which.
void Require(bool condition, const char* what, int line) {
  if (condition) return;
  std::fprintf(stderr, "metrics_store_fuzz.cc:%d: property does not hold: %s\n", line, what);
  std::abort();
}
#define REQUIRE(condition) Require((condition), #condition, __LINE__)

constexpr int64_t kNow = 1'800'000'000'000;

void CheckTime(const std::string& text) {
  absl::StatusOr<int64_t> t = head::ParseMetricsTime(text, kNow);
  if (!t.ok()) {
    REQUIRE(t.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  if (text[0] == '-') {
    REQUIRE(*t <= kNow);
  } else {
    REQUIRE(*t >= 0 && std::to_string(*t).size() <= text.size());
  }
}

bool HasAgentFamily(const std::string& name) {
  for (const char* prefix : {"torus_node_", "torus_worker_", "torus_tpu_", "torus_gpu_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

void CheckStore(const head::MetricsStore& store, const head::MetricLabels& tags) {
  size_t named = 0;
  for (const auto& [name, count] : store.Names()) {
    REQUIRE(head::IsValidMetricName(name) && HasAgentFamily(name) && count > 0);
    named += count;
    head::MetricsQuery query{.name = name, .since_ms = 0};
    for (const head::SeriesView& view : store.Query(query, kNow)) {
      REQUIRE(view.name == name);
      REQUIRE(view.labels.size() <= tags.size() + 16);
      std::set<std::string> keys;
      for (const auto& [k, v] : view.labels) {
        REQUIRE(head::IsValidLabelName(k) && v.size() <= 256);
        REQUIRE(keys.empty() || k > *keys.rbegin());  // sorted, unique
        keys.insert(k);
      }
      for (const auto& [k, v] : tags) {
        bool found = false;
        for (const auto& [lk, lv] : view.labels) found = found || (lk == k && lv == v);
        REQUIRE(found);
      }
      int64_t last = INT64_MIN;
      for (const head::MetricPoint& p : view.points) {
        REQUIRE(std::isfinite(p.value) && p.time_ms >= last && p.time_ms <= kNow);
        last = p.time_ms;
      }
    }
    head::MetricsQuery latest{.name = name, .since_ms = kNow - 60'000, .latest_only = true};
    for (const head::SeriesView& view : store.Query(latest, kNow)) {
      REQUIRE(view.points.size() <= 1);
      for (const head::MetricPoint& p : view.points) REQUIRE(p.time_ms >= kNow - 60'000);
    }
  }
  REQUIRE(store.Stats().series == named);
  size_t latest = 0;
  store.ForEachLatest(kNow, [&](const head::LatestSample& s) {
    REQUIRE(s.name != nullptr && s.labels != nullptr && std::isfinite(s.point.value));
    ++latest;
  });
  REQUIRE(latest <= named);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf logs every string field that is not UTF-8 (the parse then fails, as it does at the head).
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline != std::string_view::npos && newline > 0 && newline <= 64) {
    CheckTime(std::string(input.substr(0, newline)));
  }
  const std::string_view proto = newline == std::string_view::npos ? input : input.substr(newline + 1);
  torus::rpc::MetricsReport report;
  if (!report.ParseFromArray(proto.data(), static_cast<int>(proto.size()))) return 0;

  head::MetricsStore store({.max_series = 1'000}, kNow - 10'000);
  const head::MetricLabels tags = {{"node_id", "node-a"}, {"slice", "v6e-0"}, {"worker_id", "1"}};
  store.Ingest(tags, report, kNow - 5'000);
  store.Ingest(tags, report, kNow);
  CheckStore(store, tags);
  return 0;
}

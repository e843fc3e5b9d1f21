// MetricsStore: the head's bounded in-memory time series of what agents sample (host, worker process, TPU chip and
// GPU metrics), plus each node's metric sources and whether they answer.
//
// A series is a metric name and a label set; the store adds the node's own tags (node_id, and slice / worker_id on
// TPU hosts) to every sample an agent reports. Each series keeps at most `max_points` points and none older than
// `retention`; a series with no point within `retention` is dropped. Points are stored compactly (0.1 s time
// resolution, float values), so 1,000 nodes x ~25 series x 720 points is ~150 MB.
//
// Sample times are the agent's (as in Prometheus remote write), clamped to the head's clock when they lie in the
// future; a point not newer than its series' latest is dropped. Freshness (for Latest) is judged by when the head
// received a series' newest point, so an agent's clock running behind does not hide it.
//
// What agents send is untrusted: names must be Prometheus names starting with one of the agent families
// (torus_node_, torus_worker_, torus_tpu_, torus_gpu_), at most 16 labels of names up to 64 and values up to 256
// bytes; other samples are refused (and counted).
//
// Thread-safety: thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/head.pb.h"

namespace torus::head {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;  // sorted by key, keys unique

struct MetricPoint {
  int64_t time_ms;
  double value;
};

struct SeriesView {
  std::string name;
  MetricLabels labels;
  std::vector<MetricPoint> points;  // oldest first
};

// The newest point of a series, for exposition.
struct LatestSample {
  const std::string* name;
  const MetricLabels* labels;
  MetricPoint point;
};

struct MetricsQuery {
  std::string name;                               // required
  std::map<std::string, std::string> label_equals;  // every one must match
  int64_t since_ms = 0;                           // points at or after
  int64_t until_ms = INT64_MAX;                   // points at or before
  bool latest_only = false;                       // only the newest point of each series
  int max_points = 0;                             // > 0: average into at most this many buckets per series
  int max_series = 10'000;
};

struct SourceState {
  std::string source;
  bool available = false;
  std::string error;
  int64_t since_ms = 0;
};

struct MetricsStoreOptions {
  int64_t retention_ms = 3'600'000;
  int max_points = 720;             // per series: the last hour at a 5 s sampling period
  size_t max_series = 500'000;      // new series beyond this are refused (counted in Stats)
  int64_t stale_after_ms = 15'000;  // a series whose newest point is older than max(this, 3 periods) is not Latest
};

struct MetricsStoreStats {
  size_t series = 0;
  size_t points = 0;
  uint64_t reports = 0;
  uint64_t samples_refused = 0;  // malformed names, the series limit, out-of-order points
};

class MetricsStore {
 public:
  MetricsStore(MetricsStoreOptions options, int64_t epoch_ms);
  ~MetricsStore();

  // Adds one report. `node_tags` (node_id first, then slice and worker_id when the node has them) are added to every
  // sample's labels, replacing any the agent sent under those keys. Replaces the node's source states.
  void Ingest(const MetricLabels& node_tags, const rpc::MetricsReport& report, int64_t now_ms);

  // Series named `query.name` matching its labels, with their points in range; sorted by labels.
  std::vector<SeriesView> Query(const MetricsQuery& query, int64_t now_ms) const;

  // Metric names with how many series each has.
  std::map<std::string, size_t> Names() const;

  // Calls `visit` for the newest point of every series that is not stale, grouped by name (names in order).
  void ForEachLatest(int64_t now_ms, const std::function<void(const LatestSample&)>& visit) const;

  // The sources of a node as its latest report gave them; empty if it never reported.
  std::vector<SourceState> Sources(const std::string& node_id) const;
  // The sources of every node that reported recently (as for ForEachLatest), by node id.
  std::map<std::string, std::vector<SourceState>> AllSources(int64_t now_ms) const;

  // Drops series with no point within the retention.
  void Sweep(int64_t now_ms);

  MetricsStoreStats Stats() const;

 private:
  struct Series;
  struct NodeData;

  // Ingest without the sweep; true when a sweep is due.
  bool AddReport(const MetricLabels& node_tags, const rpc::MetricsReport& report, int64_t now_ms);

  const MetricsStoreOptions options_;
  const int64_t epoch_ms_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<NodeData>> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, size_t> series_per_name_ ABSL_GUARDED_BY(mu_);
  size_t series_count_ ABSL_GUARDED_BY(mu_) = 0;
  size_t point_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_sweep_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

// Parses a `since`/`until` value: Unix ms ("1700000000000"), or relative to now ("-30s", "-5m", "-1h", "-250ms").
absl::StatusOr<int64_t> ParseMetricsTime(const std::string& text, int64_t now_ms);

// A valid Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) and label name ([a-zA-Z_][a-zA-Z0-9_]*).
bool IsValidMetricName(const std::string& name);
bool IsValidLabelName(const std::string& name);

}  // namespace torus::head

#include "torus/head/metrics/metrics_store.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace torus::head {
namespace {

// A point as stored: tenths of a second since the store's base time, and the value as a float.
struct CompactPoint {
  uint32_t time_ds;
  float value;
};

std::string SeriesKey(const std::string& name, const MetricLabels& labels) {
  std::string key = name;
  for (const auto& [k, v] : labels) {
    key.push_back('\x1f');
    key += k;
    key.push_back('=');
    key += v;
  }
  return key;
}

bool LabelsMatch(const MetricLabels& labels, const std::map<std::string, std::string>& wanted) {
  for (const auto& [key, value] : wanted) {
    auto it = std::lower_bound(labels.begin(), labels.end(), key,
                               [](const auto& pair, const std::string& k) { return pair.first < k; });
    if (it == labels.end() || it->first != key || it->second != value) return false;
  }
  return true;
}

}  // namespace

struct MetricsStore::Series {
  std::string name;
  MetricLabels labels;
  std::vector<CompactPoint> ring;  // grows to max_points, then wraps
  size_t next = 0;                 // where the next point goes once the ring is full
  int64_t last_ms = 0;
  int64_t received_ms = 0;         // the head's clock when the newest point arrived
  double last_value = 0;           // exact, for exposition

  template <typename F>
  void ForEachPoint(F&& f) const {  // oldest first
    const size_t n = ring.size();  // `next` stays 0 until the ring is full, then marks the oldest point
    for (size_t i = 0; i < n; ++i) f(ring[(next + i) % n]);
  }
};

struct MetricsStore::NodeData {
  std::unordered_map<std::string, std::unique_ptr<Series>> series;
  std::vector<SourceState> sources;
  int64_t period_ms = 0;
  int64_t last_report_ms = 0;
  int64_t received_ms = 0;  // the head's clock at the latest report
};

namespace {

constexpr size_t kMaxLabels = 16;
constexpr size_t kMaxLabelNameBytes = 64;
constexpr size_t kMaxLabelValueBytes = 256;
constexpr size_t kMaxNameBytes = 128;
constexpr int64_t kMinPeriodMs = 100;
constexpr int64_t kMaxPeriodMs = 3'600'000;

bool IsAgentMetricName(const std::string& name) {
  if (name.size() > kMaxNameBytes || !IsValidMetricName(name)) return false;
  for (const char* prefix : {"torus_node_", "torus_worker_", "torus_tpu_", "torus_gpu_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

MetricsStore::MetricsStore(MetricsStoreOptions options, int64_t epoch_ms)
    : options_(options), epoch_ms_(epoch_ms - 2 * options.retention_ms) {}

MetricsStore::~MetricsStore() = default;

bool IsValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void MetricsStore::Ingest(const MetricLabels& node_tags, const rpc::MetricsReport& report, int64_t now_ms) {
  if (AddReport(node_tags, report, now_ms)) Sweep(now_ms);
}

bool MetricsStore::AddReport(const MetricLabels& node_tags, const rpc::MetricsReport& report, int64_t now_ms) {
  int64_t t_ms = report.time_ms() > 0 ? std::min(report.time_ms(), now_ms) : now_ms;
  absl::MutexLock lock(&mu_);
  ++reports_;
  if (t_ms < epoch_ms_ || t_ms < now_ms - options_.retention_ms) {
    refused_ += report.samples_size();
    return false;
  }
  const auto time_ds = static_cast<uint32_t>((t_ms - epoch_ms_) / 100);
  const std::string& node_id = node_tags.empty() ? report.node_id() : node_tags.front().second;
  auto& node = nodes_[node_id];
  if (!node) node = std::make_unique<NodeData>();
  node->period_ms = std::clamp<int64_t>(report.period_ms(), kMinPeriodMs, kMaxPeriodMs);
  node->last_report_ms = t_ms;
  node->received_ms = now_ms;

  std::vector<SourceState> sources;
  for (const auto& s : report.sources()) {
    sources.push_back({.source = s.source(), .available = s.available(), .error = s.error(), .since_ms = s.since_ms()});
  }
  node->sources = std::move(sources);

  MetricLabels labels;
  for (const auto& sample : report.samples()) {
    // Values are kept as floats: one beyond a float's range would turn infinite.
    if (!IsAgentMetricName(sample.name()) || !std::isfinite(sample.value()) ||
        std::fabs(sample.value()) > std::numeric_limits<float>::max() ||
        static_cast<size_t>(sample.labels_size()) > kMaxLabels) {
      ++refused_;
      continue;
    }
    labels.assign(node_tags.begin(), node_tags.end());
    bool valid = true;
    for (const auto& label : sample.labels()) {
      const std::string& k = label.first;  // not a structured binding: the lambda below captures it
      const std::string& v = label.second;
      // Values may not hold the series key's separator, so that two label sets never share a key.
      if (!IsValidLabelName(k) || k.size() > kMaxLabelNameBytes || v.size() > kMaxLabelValueBytes ||
          v.find('\x1f') != std::string::npos) {
        valid = false;
        break;
      }
      bool is_tag = std::any_of(node_tags.begin(), node_tags.end(), [&k](const auto& t) { return t.first == k; });
      if (!is_tag) labels.emplace_back(k, v);
    }
    if (!valid) {
      ++refused_;
      continue;
    }
    std::sort(labels.begin(), labels.end());
    std::string key = SeriesKey(sample.name(), labels);
    auto it = node->series.find(key);
    if (it == node->series.end()) {
      if (series_count_ >= options_.max_series) {
        ++refused_;
        continue;
      }
      auto series = std::make_unique<Series>();
      series->name = sample.name();
      series->labels = labels;
      series->ring.reserve(options_.max_points);
      it = node->series.emplace(std::move(key), std::move(series)).first;
      ++series_count_;
      ++series_per_name_[sample.name()];
    }
    Series& s = *it->second;
    if (!s.ring.empty() && t_ms <= s.last_ms) {
      ++refused_;
      continue;
    }
    CompactPoint p{time_ds, static_cast<float>(sample.value())};
    if (s.ring.size() < static_cast<size_t>(options_.max_points)) {
      s.ring.push_back(p);
      ++point_count_;
    } else {
      s.ring[s.next] = p;
      s.next = (s.next + 1) % s.ring.size();
    }
    s.last_ms = t_ms;
    s.received_ms = now_ms;
    s.last_value = sample.value();
  }
  if (now_ms - last_sweep_ms_ < 60'000) return false;
  last_sweep_ms_ = now_ms;
  return true;
}

std::vector<SeriesView> MetricsStore::Query(const MetricsQuery& query, int64_t now_ms) const {
  std::vector<SeriesView> out;
  const int64_t since = std::max(query.since_ms, now_ms - options_.retention_ms);
  absl::MutexLock lock(&mu_);
  auto node_filter = query.label_equals.find("node_id");
  for (const auto& [node_id, node] : nodes_) {
    if (node_filter != query.label_equals.end() && node_filter->second != node_id) continue;
    for (const auto& [key, series] : node->series) {
      const Series& s = *series;
      if (s.name != query.name || !LabelsMatch(s.labels, query.label_equals)) continue;
      if (s.last_ms < since) continue;
      if (static_cast<int>(out.size()) >= query.max_series) break;
      SeriesView view{.name = s.name, .labels = s.labels, .points = {}};
      if (query.latest_only) {
        if (s.last_ms <= query.until_ms) view.points.push_back({s.last_ms, s.last_value});
      } else {
        s.ForEachPoint([&](const CompactPoint& p) {
          int64_t t = epoch_ms_ + static_cast<int64_t>(p.time_ds) * 100;
          if (t >= since && t <= query.until_ms) view.points.push_back({t, p.value});
        });
        // The newest point with its exact value, when the range reaches it.
        if (!view.points.empty() && s.last_ms <= query.until_ms) view.points.back() = {s.last_ms, s.last_value};
      }
      if (!view.points.empty()) out.push_back(std::move(view));
    }
  }
  std::sort(out.begin(), out.end(), [](const SeriesView& a, const SeriesView& b) { return a.labels < b.labels; });
  if (query.max_points > 0) {
    for (auto& view : out) {
      const size_t n = view.points.size();
      const size_t buckets = static_cast<size_t>(query.max_points);
      if (n <= buckets) continue;
      std::vector<MetricPoint> merged;
      merged.reserve(buckets);
      for (size_t b = 0; b < buckets; ++b) {
        size_t lo = b * n / buckets, hi = (b + 1) * n / buckets;
        if (lo == hi) continue;
        double sum = 0;
        for (size_t i = lo; i < hi; ++i) sum += view.points[i].value;
        merged.push_back({view.points[hi - 1].time_ms, sum / static_cast<double>(hi - lo)});
      }
      view.points = std::move(merged);
    }
  }
  return out;
}

std::map<std::string, size_t> MetricsStore::Names() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, size_t> out;
  for (const auto& [name, count] : series_per_name_) {
    if (count > 0) out[name] = count;
  }
  return out;
}

void MetricsStore::ForEachLatest(int64_t now_ms, const std::function<void(const LatestSample&)>& visit) const {
  absl::MutexLock lock(&mu_);
  std::vector<const Series*> fresh;
  fresh.reserve(series_count_);
  for (const auto& [node_id, node] : nodes_) {
    const int64_t stale_after = std::max(options_.stale_after_ms, 3 * node->period_ms);
    for (const auto& [key, series] : node->series) {
      if (now_ms - series->received_ms <= stale_after) fresh.push_back(series.get());
    }
  }
  std::stable_sort(fresh.begin(), fresh.end(), [](const Series* a, const Series* b) { return a->name < b->name; });
  for (const Series* s : fresh) visit({&s->name, &s->labels, {s->last_ms, s->last_value}});
}

std::vector<SourceState> MetricsStore::Sources(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? std::vector<SourceState>{} : it->second->sources;
}

std::map<std::string, std::vector<SourceState>> MetricsStore::AllSources(int64_t now_ms) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::vector<SourceState>> out;
  for (const auto& [node_id, node] : nodes_) {
    if (now_ms - node->received_ms <= std::max(options_.stale_after_ms, 3 * node->period_ms)) {
      out[node_id] = node->sources;
    }
  }
  return out;
}

void MetricsStore::Sweep(int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  const int64_t cutoff = now_ms - options_.retention_ms;
  for (auto node_it = nodes_.begin(); node_it != nodes_.end();) {
    auto& series = node_it->second->series;
    for (auto it = series.begin(); it != series.end();) {
      if (it->second->last_ms < cutoff) {
        --series_count_;
        point_count_ -= it->second->ring.size();
        --series_per_name_[it->second->name];
        it = series.erase(it);
      } else {
        ++it;
      }
    }
    if (series.empty() && node_it->second->last_report_ms < cutoff) {
      node_it = nodes_.erase(node_it);
    } else {
      ++node_it;
    }
  }
  for (auto it = series_per_name_.begin(); it != series_per_name_.end();) {
    it = it->second == 0 ? series_per_name_.erase(it) : std::next(it);
  }
}

MetricsStoreStats MetricsStore::Stats() const {
  absl::MutexLock lock(&mu_);
  return {.series = series_count_, .points = point_count_, .reports = reports_, .samples_refused = refused_};
}

absl::StatusOr<int64_t> ParseMetricsTime(const std::string& text, int64_t now_ms) {
  const std::string accepted = "use Unix milliseconds (1700000000000) or a time before now (-30s, -5m, -1h, -500ms)";
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat("empty time; ", accepted));
  if (text[0] != '-') {
    int64_t ms = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
    if (ec != std::errc() || ptr != text.data() + text.size() || ms < 0) {
      return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a time; ", accepted));
    }
    return ms;
  }
  int64_t amount = 0;
  const char* begin = text.data() + 1;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, amount);
  if (ec != std::errc() || ptr == begin || amount < 0) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a time; ", accepted));
  }
  std::string unit(ptr, end);
  int64_t scale = 0;
  if (unit == "ms") scale = 1;
  else if (unit == "s") scale = 1000;
  else if (unit == "m") scale = 60'000;
  else if (unit == "h") scale = 3'600'000;
  else if (unit == "d") scale = 86'400'000;
  if (scale == 0 || amount > INT64_MAX / scale / 2) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a time; ", accepted));
  }
  return now_ms - amount * scale;
}

}  // namespace torus::head

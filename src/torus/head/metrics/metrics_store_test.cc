#include "torus/head/metrics/metrics_store.h"

#include <gtest/gtest.h>

namespace torus::head {
namespace metrics_store_test {

constexpr int64_t kT0 = 1'700'000'000'000;

rpc::MetricsReport Report(int64_t t_ms, std::vector<std::tuple<std::string, MetricLabels, double>> samples) {
  rpc::MetricsReport r;
  r.set_node_id("n1");
  r.set_time_ms(t_ms);
  r.set_period_ms(5000);
  for (auto& [name, labels, value] : samples) {
    auto* s = r.add_samples();
    s->set_name(name);
    for (auto& [k, v] : labels) (*s->mutable_labels())[k] = v;
    s->set_value(value);
  }
  return r;
}

const MetricLabels kTags = {{"node_id", "n1"}, {"slice", "s1"}, {"worker_id", "2"}};

TEST(MetricsStoreTest, AddsNodeTagsAndKeepsPointsInOrder) {
  MetricsStore store({}, kT0);
  for (int i = 0; i < 3; ++i) {
    store.Ingest(kTags, Report(kT0 + i * 5000, {{"torus_tpu_duty_cycle_percent", {{"chip", "1"}, {"run_id", "r"}}, 10.0 * i}}),
                 kT0 + i * 5000);
  }
  auto series = store.Query({.name = "torus_tpu_duty_cycle_percent"}, kT0 + 10'000);
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(series[0].labels, (MetricLabels{{"chip", "1"}, {"node_id", "n1"}, {"run_id", "r"}, {"slice", "s1"},
                                            {"worker_id", "2"}}));
  ASSERT_EQ(series[0].points.size(), 3u);
  EXPECT_EQ(series[0].points[0].time_ms, kT0);
  EXPECT_DOUBLE_EQ(series[0].points[2].value, 20.0);
  EXPECT_EQ(series[0].points[2].time_ms, kT0 + 10'000);
}

TEST(MetricsStoreTest, AgentCannotOverrideNodeTags) {
  MetricsStore store({}, kT0);
  store.Ingest(kTags, Report(kT0, {{"torus_node_cpu_percent", {{"node_id", "other"}, {"slice", "x"}}, 5}}), kT0);
  auto series = store.Query({.name = "torus_node_cpu_percent"}, kT0);
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(series[0].labels, kTags);
}

TEST(MetricsStoreTest, FiltersByLabelsAndTime) {
  MetricsStore store({}, kT0);
  store.Ingest(kTags, Report(kT0, {{"torus_node_m", {{"chip", "0"}}, 1}, {"torus_node_m", {{"chip", "1"}}, 2}, {"torus_node_other", {}, 3}}), kT0);
  store.Ingest(kTags, Report(kT0 + 5000, {{"torus_node_m", {{"chip", "0"}}, 4}, {"torus_node_m", {{"chip", "1"}}, 5}}), kT0 + 5000);
  auto chip1 = store.Query({.name = "torus_node_m", .label_equals = {{"chip", "1"}}}, kT0 + 5000);
  ASSERT_EQ(chip1.size(), 1u);
  EXPECT_EQ(chip1[0].points.size(), 2u);
  auto recent = store.Query({.name = "torus_node_m", .since_ms = kT0 + 1}, kT0 + 5000);
  ASSERT_EQ(recent.size(), 2u);
  EXPECT_EQ(recent[0].points.size(), 1u);
  auto latest = store.Query({.name = "torus_node_m", .latest_only = true}, kT0 + 5000);
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_DOUBLE_EQ(latest[1].points.at(0).value, 5);
  EXPECT_TRUE(store.Query({.name = "torus_node_m", .label_equals = {{"node_id", "n2"}}}, kT0).empty());
  EXPECT_EQ(store.Names(), (std::map<std::string, size_t>{{"torus_node_m", 2}, {"torus_node_other", 1}}));
}

TEST(MetricsStoreTest, RingKeepsTheNewestPoints) {
  MetricsStore store({.max_points = 4}, kT0);
  for (int i = 0; i < 10; ++i) store.Ingest(kTags, Report(kT0 + i * 1000, {{"torus_node_m", {}, double(i)}}), kT0 + i * 1000);
  auto series = store.Query({.name = "torus_node_m"}, kT0 + 9000);
  ASSERT_EQ(series.size(), 1u);
  ASSERT_EQ(series[0].points.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(series[0].points[i].value, 6 + i);
    EXPECT_EQ(series[0].points[i].time_ms, kT0 + (6 + i) * 1000);
  }
  EXPECT_EQ(store.Stats().points, 4u);
}

TEST(MetricsStoreTest, RefusesBadSamplesAndOldOrRepeatedTimes) {
  MetricsStore store({}, kT0);
  store.Ingest(kTags, Report(kT0, {{"bad name", {}, 1}, {"torus_node_m", {{"bad-label", "x"}}, 1}, {"torus_node_m", {}, NAN}, {"torus_node_m", {}, 1}}),
               kT0);
  store.Ingest(kTags, Report(kT0, {{"torus_node_m", {}, 2}}), kT0);  // same time again
  EXPECT_EQ(store.Stats().samples_refused, 4u);
  auto series = store.Query({.name = "torus_node_m"}, kT0);
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(series[0].points.size(), 1u);
  // A time in the future is clamped to now.
  store.Ingest(kTags, Report(kT0 + 999'999, {{"torus_node_m", {}, 3}}), kT0 + 1000);
  EXPECT_EQ(store.Query({.name = "torus_node_m", .latest_only = true}, kT0 + 1000)[0].points[0].time_ms, kT0 + 1000);
}

// Points are kept as floats: a value beyond a float's range would be stored infinite, and is refused instead.
TEST(MetricsStoreTest, RefusesValuesBeyondAFloatsRange) {
  MetricsStore store({}, kT0);
  store.Ingest(kTags, Report(kT0, {{"torus_node_big", {}, 1e39}, {"torus_node_small", {}, -1e39},
                                   {"torus_node_max", {}, 3e38}}), kT0);
  EXPECT_EQ(store.Stats().samples_refused, 2u);
  EXPECT_TRUE(store.Query({.name = "torus_node_big"}, kT0).empty());
  auto kept = store.Query({.name = "torus_node_max"}, kT0);
  ASSERT_EQ(kept.size(), 1u);
  ASSERT_EQ(kept[0].points.size(), 1u);
  EXPECT_FLOAT_EQ(kept[0].points[0].value, 3e38f);
}

TEST(MetricsStoreTest, LatestSkipsStaleSeriesAndSweepDropsOldOnes) {
  MetricsStore store({.retention_ms = 60'000, .stale_after_ms = 15'000}, kT0);
  store.Ingest(kTags, Report(kT0, {{"torus_node_a", {}, 1}, {"torus_node_b", {}, 2}}), kT0);
  store.Ingest(kTags, Report(kT0 + 20'000, {{"torus_node_b", {}, 3}}), kT0 + 20'000);
  std::vector<std::string> names;
  store.ForEachLatest(kT0 + 20'000, [&](const LatestSample& s) { names.push_back(*s.name); });
  EXPECT_EQ(names, std::vector<std::string>{"torus_node_b"});
  store.Sweep(kT0 + 70'000);
  EXPECT_EQ(store.Stats().series, 1u);
  store.Sweep(kT0 + 90'000);
  EXPECT_EQ(store.Stats().series, 0u);
  EXPECT_TRUE(store.Names().empty());
}

TEST(MetricsStoreTest, SeriesLimit) {
  MetricsStore store({.max_series = 2}, kT0);
  store.Ingest(kTags, Report(kT0, {{"torus_node_a", {}, 1}, {"torus_node_b", {}, 1}, {"torus_node_c", {}, 1}}), kT0);
  EXPECT_EQ(store.Stats().series, 2u);
  EXPECT_EQ(store.Stats().samples_refused, 1u);
}

TEST(MetricsStoreTest, SourcesAreReplacedByEachReport) {
  MetricsStore store({}, kT0);
  rpc::MetricsReport r = Report(kT0, {});
  auto* s = r.add_sources();
  s->set_source("libtpu:8431");
  s->set_available(false);
  s->set_error("connection refused");
  store.Ingest(kTags, r, kT0);
  auto sources = store.Sources("n1");
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_FALSE(sources[0].available);
  EXPECT_EQ(sources[0].error, "connection refused");
  EXPECT_TRUE(store.Sources("n2").empty());
}

TEST(MetricsStoreTest, DownsamplesToMaxPoints) {
  MetricsStore store({}, kT0);
  for (int i = 0; i < 10; ++i) store.Ingest(kTags, Report(kT0 + i * 1000, {{"torus_node_m", {}, double(i)}}), kT0 + i * 1000);
  auto series = store.Query({.name = "torus_node_m", .max_points = 5}, kT0 + 9000);
  ASSERT_EQ(series[0].points.size(), 5u);
  EXPECT_DOUBLE_EQ(series[0].points[0].value, 0.5);
  EXPECT_EQ(series[0].points[4].time_ms, kT0 + 9000);
}

TEST(MetricsStoreTest, RefusesNamesOutsideTheAgentFamiliesAndOversizedLabels) {
  MetricsStore store({}, kT0);
  rpc::MetricsReport r = Report(kT0, {{"torus_nodes", {}, 1},                          // the head's own family
                                      {"torus_metrics_source_up", {}, 1},
                                      {"torus_node_x", {{"v", std::string(257, 'a')}}, 1},
                                      {"torus_node_y", {{"v", "a\x1f" "b=c"}}, 1},
                                      {"torus_node_ok", {{"v", std::string(256, 'a')}}, 1}});
  auto* crowded = r.add_samples();
  crowded->set_name("torus_node_z");
  for (int i = 0; i < 17; ++i) (*crowded->mutable_labels())["l" + std::to_string(i)] = "x";
  store.Ingest(kTags, r, kT0);
  EXPECT_EQ(store.Names(), (std::map<std::string, size_t>{{"torus_node_ok", 1}}));
  EXPECT_EQ(store.Stats().samples_refused, 5u);
}

TEST(MetricsStoreTest, FreshnessIsByArrivalNotTheAgentsClock) {
  MetricsStore store({.stale_after_ms = 15'000}, kT0);
  // The agent's clock is a minute behind the head's.
  store.Ingest(kTags, Report(kT0 - 60'000, {{"torus_node_cpu_percent", {}, 1}}), kT0);
  int latest = 0;
  store.ForEachLatest(kT0 + 1000, [&](const LatestSample&) { ++latest; });
  EXPECT_EQ(latest, 1);
  EXPECT_EQ(store.AllSources(kT0 + 1000).count("n1"), 1u);
  EXPECT_EQ(store.AllSources(kT0 + 60'000).count("n1"), 0u) << "a silent node's sources are not reported as up";
}

TEST(MetricsStoreTest, UntilExcludesNewerPoints) {
  MetricsStore store({}, kT0);
  for (int i = 0; i < 5; ++i) {
    store.Ingest(kTags, Report(kT0 + i * 1000, {{"torus_node_m", {}, double(i)}}), kT0 + i * 1000);
  }
  auto series = store.Query({.name = "torus_node_m", .until_ms = kT0 + 2000}, kT0 + 4000);
  ASSERT_EQ(series.size(), 1u);
  ASSERT_EQ(series[0].points.size(), 3u);
  EXPECT_EQ(series[0].points.back().time_ms, kT0 + 2000);
  EXPECT_DOUBLE_EQ(series[0].points.back().value, 2);
}

TEST(MetricsTimeTest, ParsesAbsoluteAndRelativeTimes) {
  EXPECT_EQ(*ParseMetricsTime("1700000000000", kT0), 1'700'000'000'000);
  EXPECT_EQ(*ParseMetricsTime("-30s", kT0), kT0 - 30'000);
  EXPECT_EQ(*ParseMetricsTime("-5m", kT0), kT0 - 300'000);
  EXPECT_EQ(*ParseMetricsTime("-1h", kT0), kT0 - 3'600'000);
  EXPECT_EQ(*ParseMetricsTime("-250ms", kT0), kT0 - 250);
  for (const char* bad : {"", "abc", "-5", "-5x", "12a", "-s", "--5s", "-99999999999999999999d"}) {
    auto t = ParseMetricsTime(bad, kT0);
    EXPECT_FALSE(t.ok()) << bad;
    if (!t.ok()) EXPECT_NE(t.status().message().find("Unix milliseconds"), std::string::npos);
  }
}

}  // namespace metrics_store_test
}  // namespace torus::head

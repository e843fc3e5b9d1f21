#include "torus/head/metrics/prometheus.h"

#include "torus/head/api/metrics_http.h"
#include "torus/head/metrics/server_metrics.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

namespace torus::head {
namespace prometheus_test {

// A strict reading of the text format: every line is a HELP, a TYPE, or a sample of the family last declared.
void ExpectValidExposition(const std::string& text) {
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (gauge|counter|histogram))");
  static const std::regex kSample(
      R"re(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? (-?[0-9.e+-]+|NaN|[+-]Inf))re");
  std::istringstream in(text);
  std::string line, family, type;
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, kHelp)) {
      family = m[1];
    } else if (std::regex_match(line, m, kType)) {
      EXPECT_EQ(m[1], family) << line;
      type = m[2];
    } else if (std::regex_match(line, m, kSample)) {
      std::string name = m[1];
      if (type == "histogram") {
        static const std::regex kSuffix("_(bucket|sum|count)$");
        name = std::regex_replace(name, kSuffix, "");
        if (std::string(m[1]).size() > 7 && std::string(m[1]).find("_bucket") != std::string::npos) {
          EXPECT_NE(line.find("le=\""), std::string::npos) << "a bucket needs le: " << line;
        }
      }
      EXPECT_EQ(name, family) << line;
    } else {
      ADD_FAILURE() << "not a valid exposition line: " << line;
    }
  }
}

TEST(PrometheusTest, WritesFamiliesAndSamples) {
  PrometheusWriter w;
  w.Family("torus_nodes", "gauge", "Nodes by state.");
  w.Sample("torus_nodes", {{"state", "ALIVE"}}, 16);
  w.Sample("torus_nodes", {{"state", "DEAD"}}, 0);
  w.Family("torus_resource_total", "gauge", "Resources of alive nodes.");
  w.Sample("torus_resource_total", {{"resource", "CPU"}}, 1.5);
  w.Family("torus_up", "gauge", "Always 1.");
  w.Sample("torus_up", {}, 1);
  EXPECT_EQ(w.Text(),
            "# HELP torus_nodes Nodes by state.\n# TYPE torus_nodes gauge\n"
            "torus_nodes{state=\"ALIVE\"} 16\ntorus_nodes{state=\"DEAD\"} 0\n"
            "# HELP torus_resource_total Resources of alive nodes.\n# TYPE torus_resource_total gauge\n"
            "torus_resource_total{resource=\"CPU\"} 1.5\n"
            "# HELP torus_up Always 1.\n# TYPE torus_up gauge\ntorus_up 1\n");
  ExpectValidExposition(w.Text());
}

TEST(PrometheusTest, NumbersReadBackExactly) {
  PrometheusWriter w;
  w.Family("torus_x", "gauge", "x");
  w.Sample("torus_x", {}, 0.1);
  w.Sample("torus_x", {}, 33550000000);
  w.Sample("torus_x", {}, -2.5);
  EXPECT_EQ(w.Text(), "# HELP torus_x x\n# TYPE torus_x gauge\ntorus_x 0.1\ntorus_x 3.355e+10\ntorus_x -2.5\n");
  ExpectValidExposition(w.Text());
}

TEST(PrometheusTest, EscapesLabelValuesAndHelp) {
  PrometheusWriter w;
  w.Family("torus_x", "counter", "a \\ b\nc");
  w.Sample("torus_x", {{"reason", "say \"hi\"\\now\n"}}, 2);
  EXPECT_EQ(w.Text(), "# HELP torus_x a \\\\ b\\nc\n# TYPE torus_x counter\ntorus_x{reason=\"say \\\"hi\\\"\\\\now\\n\"} 2\n");
  ExpectValidExposition(w.Text());
}

TEST(PrometheusTest, SpecialValues) {
  PrometheusWriter w;
  w.Family("torus_v", "gauge", "v");
  w.Sample("torus_v", {}, 1e20);
  w.Sample("torus_v", {}, 0.25);
  EXPECT_EQ(w.Text(), "# HELP torus_v v\n# TYPE torus_v gauge\ntorus_v 1e+20\ntorus_v 0.25\n");
  ExpectValidExposition(w.Text());
}

TEST(PrometheusTest, NodeAndChipMetricsAreGroupedFamiliesWithTheirTags) {
  constexpr int64_t kNow = 1'700'000'000'000;
  MetricsStore store({}, kNow);
  for (const char* node : {"b", "a"}) {
    rpc::MetricsReport r;
    r.set_node_id(node);
    r.set_time_ms(kNow);
    for (int chip = 0; chip < 2; ++chip) {
      for (const char* name : {"torus_tpu_duty_cycle_percent", "torus_tpu_hbm_used_bytes"}) {
        auto* s = r.add_samples();
        s->set_name(name);
        (*s->mutable_labels())["chip"] = std::to_string(chip);
        (*s->mutable_labels())["run_id"] = "run \"x\"";
        (*s->mutable_labels())["rank"] = "2";
        s->set_value(chip * 12.5);
      }
    }
    auto* host = r.add_samples();
    host->set_name("torus_node_cpu_percent");
    host->set_value(3);
    auto* source = r.add_sources();
    source->set_source("libtpu:8431");
    source->set_available(std::string(node) == "a");
    store.Ingest({{"node_id", node}, {"slice", "s"}, {"worker_id", "1"}}, r, kNow);
  }
  PrometheusWriter w;
  WriteNodeMetrics(w, store, kNow);
  Histogram h(PlacementLatencyBounds());
  h.Observe(0.002);
  w.Family("torus_placement_latency_seconds", "histogram", "Placement latency.");
  h.Write(w, "torus_placement_latency_seconds");
  ExpectValidExposition(w.Text());
  const std::string& text = w.Text();
  EXPECT_NE(text.find("torus_tpu_duty_cycle_percent{chip=\"1\",node_id=\"a\",rank=\"2\",run_id=\"run \\\"x\\\"\","
                      "slice=\"s\",worker_id=\"1\"} 12.5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("torus_metrics_source_up{node_id=\"a\",source=\"libtpu:8431\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("torus_metrics_source_up{node_id=\"b\",source=\"libtpu:8431\"} 0\n"), std::string::npos);
  // Stale series leave the exposition.
  PrometheusWriter later;
  WriteNodeMetrics(later, store, kNow + 60'000);
  EXPECT_EQ(later.Text().find("torus_tpu_duty_cycle_percent{"), std::string::npos);
}

}  // namespace prometheus_test
}  // namespace torus::head

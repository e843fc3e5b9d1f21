#include "torus/head/metrics/server_metrics.h"

#include <gtest/gtest.h>

namespace torus::head {
namespace server_metrics_test {

TEST(HistogramTest, WritesCumulativeBuckets) {
  Histogram h({0.01, 0.1, 1});
  h.Observe(0.005);
  h.Observe(0.05);
  h.Observe(0.05);
  h.Observe(5);
  PrometheusWriter w;
  w.Family("x_seconds", "histogram", "Latency.");
  h.Write(w, "x_seconds");
  EXPECT_EQ(w.Text(),
            "# HELP x_seconds Latency.\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.01\"} 1\nx_seconds_bucket{le=\"0.1\"} 3\nx_seconds_bucket{le=\"1\"} 3\n"
            "x_seconds_bucket{le=\"+Inf\"} 4\nx_seconds_sum 5.105\nx_seconds_count 4\n");
}

TEST(RouteFamilyTest, IdsAndUnknownWordsDoNotMakeSeries) {
  EXPECT_EQ(HttpRouteFamily("/api/v0/nodes/n1/logs"), "/api/v0/nodes/{id}/logs");
  EXPECT_EQ(HttpRouteFamily("/api/v0/nodes/n1"), "/api/v0/nodes/{id}");
  EXPECT_EQ(HttpRouteFamily("/api/v0/nodes"), "/api/v0/nodes");
  EXPECT_EQ(HttpRouteFamily("/api/jobs/raysubmit_1/logs"), "/api/jobs/{id}/logs");
  EXPECT_EQ(HttpRouteFamily("/api/v0/nodes/n1/zzz"), "/api/v0/nodes/{id}/{sub}");
  EXPECT_EQ(HttpRouteFamily("/api/v0/random123"), "other");
  EXPECT_EQ(HttpRouteFamily("/random"), "other");
  EXPECT_EQ(HttpRouteFamily("/static/app.js"), "/static");
  EXPECT_EQ(HttpRouteFamily("/metrics"), "/metrics");
}

TEST(PlacementLatencyTest, FromTheWaitStartToCreated) {
  Group view;
  view.state = PgState::kCreated;
  auto add = [&](int64_t t, const char* state) { view.history.push_back({t, state, ""}); };
  add(1000, "PENDING");
  add(1003, "CREATED");
  EXPECT_DOUBLE_EQ(*PlacementLatencySeconds(view), 0.003);
  add(5000, "RESCHEDULING");
  add(5500, "PENDING");
  add(7000, "CREATED");
  EXPECT_DOUBLE_EQ(*PlacementLatencySeconds(view), 2.0);
  view.state = PgState::kRemoved;
  EXPECT_FALSE(PlacementLatencySeconds(view).has_value());
}

TEST(GrpcCodeNameTest, Names) {
  EXPECT_EQ(GrpcCodeName(0), "OK");
  EXPECT_EQ(GrpcCodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(GrpcCodeName(99), "CODE_99");
}

}  // namespace server_metrics_test
}  // namespace torus::head

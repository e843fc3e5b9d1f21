#include "torus/train/run_report.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::train {
namespace run_report_test {

TEST(RunReportTest, ReadsEveryField) {
  auto r = ParseRunReport(R"({"rank": 3, "attempt": 2, "step": 40, "metrics": {"loss": 0.5, "step": 40},
                              "checkpoint": "/runs/a/.staging/attempt_2/step_40/rank_3"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->attempt, 2);
  EXPECT_EQ(r->step, 40);
  EXPECT_EQ(r->metrics_json, R"({"loss":0.5,"step":40})");
  EXPECT_EQ(r->checkpoint, "/runs/a/.staging/attempt_2/step_40/rank_3");
}

TEST(RunReportTest, MetricsAndCheckpointMayBeLeftOut) {
  auto r = ParseRunReport(R"({"rank": 0, "attempt": 1, "step": -1, "checkpoint": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, -1);
  EXPECT_EQ(r->metrics_json, std::nullopt);
  EXPECT_EQ(r->checkpoint, "");
}

TEST(RunReportTest, RefusesWhatIsNotAReportNamingTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "body must be a JSON object"},
      {"[1]", "body must be a JSON object"},
      {R"({"attempt": 1, "step": 1})", "\"rank\" must be an integer"},
      {R"({"rank": 0.5, "attempt": 1, "step": 1})", "\"rank\" must be an integer"},
      {R"({"rank": 0, "attempt": "1", "step": 1})", "\"attempt\" must be an integer"},
      {R"({"rank": 0, "attempt": 1})", "\"step\" must be an integer"},
      {R"({"rank": 0, "attempt": 1, "step": 1, "metrics": [1]})", "\"metrics\" must be an object"},
      {R"({"rank": 0, "attempt": 1, "step": 1, "checkpoint": 7})", "\"checkpoint\" must be a string or null"},
      {R"({"rank": -1, "attempt": 1, "step": 1})", "rank -1 is out of range"},
      {R"({"rank": 0, "attempt": 1000001, "step": 1})", "attempt 1000001 is out of range"},
      {R"({"rank": 0, "attempt": 1, "step": 9223372036854775808})", "step 9223372036854775808 is out of range"},
  };
  for (const auto& [body, message] : cases) {
    auto r = ParseRunReport(body);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(r.status().message(), message) << body;
  }
  auto largest = ParseRunReport(R"({"rank": 1000000, "attempt": 0, "step": 9223372036854775807})");
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(largest->step, 9223372036854775807);
}

}  // namespace run_report_test
}  // namespace torus::train

#include "torus/head/workloads/goodput.h"

#include <gtest/gtest.h>

namespace torus::head {
namespace goodput_test {

RunAttempt Attempt(int number, int64_t start, int64_t end, int64_t first_report, int64_t kept_until) {
  RunAttempt a;
  a.number = number;
  a.start_time_ms = start;
  a.end_time_ms = end;
  a.first_report_ms = first_report;
  a.last_report_ms = first_report;
  a.kept_until_ms = kept_until;
  return a;
}

void ExpectSums(const Goodput& g) {
  EXPECT_EQ(g.queued_ms + g.startup_ms + g.productive_ms + g.lost_ms + g.restart_ms, g.wall_ms);
}

TEST(RunGoodput, AFailedAttemptKeepsItsWorkUpToItsLastCheckpointAndLosesTheRest) {
  head::Run run;
  run.created_time_ms = 1000;
  run.status = RunStatus::kSucceeded;
  run.end_time_ms = 30'000;
  // Attempt 1: starts at 2000, reports from 5000, commits at 12000, fails at 15000.
  run.attempts.push_back(Attempt(1, 2000, 15'000, 5000, 12'000));
  // Attempt 2: starts at 17000, reports from 19000, succeeds at 30000.
  run.attempts.push_back(Attempt(2, 17'000, 30'000, 19'000, 25'000));
  const Goodput g = RunGoodput(run, 99'999);
  EXPECT_EQ(g.wall_ms, 29'000);
  EXPECT_EQ(g.queued_ms, 1000);
  EXPECT_EQ(g.startup_ms, 3000 + 2000);
  EXPECT_EQ(g.productive_ms, 7000 + 11'000);
  EXPECT_EQ(g.lost_ms, 3000);
  EXPECT_EQ(g.restart_ms, 2000);
  EXPECT_DOUBLE_EQ(g.ratio, 18'000.0 / 29'000.0);
  ExpectSums(g);
  ASSERT_EQ(g.attempts.size(), 2u);
  EXPECT_EQ(g.attempts[0].waiting_ms, 1000);
  EXPECT_EQ(g.attempts[0].lost_ms, 3000);
  EXPECT_EQ(g.attempts[1].waiting_ms, 2000);
  EXPECT_EQ(g.attempts[1].productive_ms, 11'000);
}

TEST(RunGoodput, AFailedAttemptWithoutACheckpointLosesAllItsWork) {
  head::Run run;
  run.created_time_ms = 0;
  run.status = RunStatus::kRestarting;
  run.attempts.push_back(Attempt(1, 100, 1000, 300, 0));
  const Goodput g = RunGoodput(run, 1500);
  EXPECT_EQ(g.startup_ms, 200);
  EXPECT_EQ(g.productive_ms, 0);
  EXPECT_EQ(g.lost_ms, 700);
  EXPECT_EQ(g.restart_ms, 500);  // waiting for attempt 2 until now
  ExpectSums(g);
}

TEST(RunGoodput, ARunningAttemptCountsAsProductiveUntilNowAndOneWithoutReportsAsStartup) {
  head::Run run;
  run.created_time_ms = 0;
  run.status = RunStatus::kRunning;
  run.attempts.push_back(Attempt(1, 100, 0, 400, 0));
  Goodput g = RunGoodput(run, 1000);
  EXPECT_EQ(g.productive_ms, 600);
  ExpectSums(g);
  run.attempts[0].first_report_ms = 0;
  g = RunGoodput(run, 1000);
  EXPECT_EQ(g.startup_ms, 900);
  EXPECT_EQ(g.productive_ms, 0);
  ExpectSums(g);
}

TEST(RunGoodput, APendingRunIsAllQueued) {
  head::Run run;
  run.created_time_ms = 500;
  const Goodput g = RunGoodput(run, 800);
  EXPECT_EQ(g.wall_ms, 300);
  EXPECT_EQ(g.queued_ms, 300);
  EXPECT_EQ(g.ratio, 0);
  ExpectSums(g);
}

TEST(RunGoodput, TimesOutOfOrderStillSumToTheWallTime) {
  head::Run run;
  run.created_time_ms = 1000;
  run.status = RunStatus::kFailed;
  run.end_time_ms = 2000;
  run.attempts.push_back(Attempt(1, 900, 2500, 3000, 0));  // a skewed clock
  const Goodput g = RunGoodput(run, 5000);
  EXPECT_EQ(g.wall_ms, 1000);
  ExpectSums(g);
}

}  // namespace goodput_test
}  // namespace torus::head

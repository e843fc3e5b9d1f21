#include "torus/head/api/head_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace torus::head {
namespace head_service_test {

using ::testing::ElementsAre;
using ::testing::Pair;

rpc::WorkerExitReport Report(const std::string& worker_id) {
  rpc::WorkerExitReport r;
  r.set_worker_id(worker_id);
  return r;
}

TEST(ParseWorkerExitsTest, KeepsWhatTheAgentSaidAndTheOrder) {
  rpc::WorkerExitedRequest request;
  rpc::WorkerExitReport* a = request.add_exits();
  *a = Report("w-a");
  a->set_exit_code(3);
  a->set_end_time_ms(1500);
  a->set_pid(42);
  a->set_start_time_ms(1000);
  a->set_stopped(true);
  a->set_oom_killed(true);
  a->set_peak_rss_bytes(-7);
  a->set_output_tail("boom");
  a->set_accelerator_error("TPU halted");
  rpc::WorkerExitReport* b = request.add_exits();
  *b = Report("w-b");
  b->set_signal(9);
  absl::StatusOr<ParsedExits> parsed = ParseWorkerExits(request);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->exits.size(), 2u);
  EXPECT_EQ(parsed->exits[0].worker, WorkerId("w-a"));
  EXPECT_EQ(parsed->exits[0].exit, (WorkerExit{.exit_code = 3,
                                               .wall_ms = 1500,
                                               .stopped = true,
                                               .oom_killed = true,
                                               .peak_rss_bytes = 0,
                                               .output_tail = "boom",
                                               .accelerator_error = "TPU halted"}));
  EXPECT_EQ(parsed->exits[0].pid, 42);
  EXPECT_EQ(parsed->exits[0].start_ms, 1000);
  EXPECT_EQ(parsed->exits[1].worker, WorkerId("w-b"));
  EXPECT_EQ(parsed->exits[1].exit, (WorkerExit{.signal = 9}));
  EXPECT_THAT(parsed->index, ElementsAre(0, 1));
  EXPECT_TRUE(parsed->refused.empty());
}

TEST(ParseWorkerExitsTest, AReportWithoutAWorkerIsRefusedAloneNamingIt) {
  rpc::WorkerExitedRequest request;
  *request.add_exits() = Report("w-a");
  *request.add_exits() = Report("");
  *request.add_exits() = Report("w-c");
  absl::StatusOr<ParsedExits> parsed = ParseWorkerExits(request);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->index, ElementsAre(0, 2));
  EXPECT_THAT(parsed->refused,
              ElementsAre(Pair(1, absl::InvalidArgumentError("exits[1].worker_id is required"))));
}

TEST(ParseWorkerExitsTest, LongTextsAreCut) {
  rpc::WorkerExitedRequest request;
  rpc::WorkerExitReport* a = request.add_exits();
  *a = Report("w-a");
  a->set_output_tail(std::string(5000, 'x') + "the end");
  a->set_accelerator_error(std::string(2000, 'e'));
  absl::StatusOr<ParsedExits> parsed = ParseWorkerExits(request);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::string& tail = parsed->exits[0].exit.output_tail;
  EXPECT_EQ(tail.size(), 4096u);
  EXPECT_EQ(tail.substr(tail.size() - 7), "the end");  // the last lines are kept
  EXPECT_EQ(parsed->exits[0].exit.accelerator_error, std::string(1024, 'e'));
}

TEST(ParseWorkerExitsTest, ACallWithoutReportsIsRefusedSoThatItsSenderTriesAgain) {
  EXPECT_EQ(ParseWorkerExits(rpc::WorkerExitedRequest()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ParseWorkerExitsTest, MoreThanAThousandReportsAreRefused) {
  rpc::WorkerExitedRequest request;
  for (int i = 0; i < 1000; ++i) *request.add_exits() = Report("w");
  EXPECT_TRUE(ParseWorkerExits(request).ok());
  *request.add_exits() = Report("w");
  EXPECT_EQ(ParseWorkerExits(request).status(),
            absl::InvalidArgumentError("exits: at most 1000 reports per call, not 1001"));
}

}  // namespace head_service_test
}  // namespace torus::head

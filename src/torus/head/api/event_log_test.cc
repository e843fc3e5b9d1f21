#include "torus/head/api/event_log.h"

#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/head/api/event_test_util.h"

namespace torus::head {
namespace event_log_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testutil::JobEvent;
using ::testing::IsEmpty;

Owner NoOwner(const WorkerId&) { return {}; }


std::vector<uint64_t> Revisions(const std::vector<Event>& events) {
  std::vector<uint64_t> out;
  for (const Event& e : events) out.push_back(e.revision);
  return out;
}

TEST(EventsFromRecordsTest, EachRecordIsAnEventAboutItsObjectWithTheStatusItSets) {
  Worker w;
  w.id = WorkerId("run-a-a1-r3");
  w.owner = Owner::Run(RunId("run-a"));
  w.attempt = 1;
  w.rank = 3;
  w.node = NodeId("n1");
  Job job;
  job.id = JobId("job-1");
  job.submit_time_ms = 5;
  WorkerExit exit;
  exit.exit_code = 2;
  exit.wall_ms = 9;
  const std::vector<Record> records = {
      HeadStarted{.epoch = 2, .wall_ms = 1},
      JobSubmitted{.job = job},
      JobUpdated{.job = JobId("job-1"), .status = JobStatus::kFailed, .message = "exit 2", .wall_ms = 8},
      WorkerStarting{.worker = w},
      WorkerExited{.worker = w.id, .exit = exit},
      RunFinished{.run = RunId("run-a"), .status = RunStatus::kSucceeded, .message = "done", .wall_ms = 10},
      GroupEnded{.group = GroupId("pg-1"), .state = PgState::kRemoved, .message = "removed", .wall_ms = 11},
      NodeDied{.node = NodeId("n1"), .incarnation = 1, .reason = "missed heartbeats", .wall_ms = 12},
  };
  std::vector<Event> events = EventsFromRecords(records, [&](const WorkerId& id) {
    return id == w.id ? w.owner : Owner{};
  });
  ASSERT_EQ(events.size(), 7u);  // HeadStarted is about no object
  EXPECT_EQ(EventJson(events[0]), nlohmann::json::parse(R"({"revision":0,"kind":"job","id":"job-1",
      "type":"JobSubmitted","status":"PENDING","time_ms":5})"));
  EXPECT_EQ(EventJson(events[1]), nlohmann::json::parse(R"({"revision":0,"kind":"job","id":"job-1",
      "type":"JobUpdated","status":"FAILED","message":"exit 2","time_ms":8})"));
  EXPECT_EQ(EventJson(events[2]), nlohmann::json::parse(R"({"revision":0,"kind":"worker","id":"run-a-a1-r3",
      "type":"WorkerStarting","status":"STARTING","run":"run-a","attempt":1,"rank":3,"node":"n1"})"));
  EXPECT_EQ(EventJson(events[3]), nlohmann::json::parse(R"({"revision":0,"kind":"worker","id":"run-a-a1-r3",
      "type":"WorkerExited","status":"EXITED","run":"run-a","message":"exited with code 2",
      "exit":{"exit_code":2,"lost":false,"start_failed":false},"time_ms":9})"));
  EXPECT_EQ(events[4].kind, "run");
  EXPECT_EQ(events[4].status, "SUCCEEDED");
  EXPECT_EQ(events[5].kind, "group");
  EXPECT_EQ(events[5].status, "REMOVED");
  EXPECT_EQ(events[6].kind, "node");
  EXPECT_EQ(events[6].status, "DEAD");
  EXPECT_EQ(events[6].message, "missed heartbeats");
}

TEST(EventLogTest, NumbersEventsInOrderAndReadsThoseAfterARevision) {
  EventLog log(/*epoch=*/3, /*capacity=*/100);
  log.Append({JobEvent("a", "PENDING"), JobEvent("a", "RUNNING")});
  log.Append({JobEvent("a", "SUCCEEDED")});
  EXPECT_EQ(log.revision(), 3u);
  auto all = log.Wait(0, {}, absl::Now());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(Revisions(all->events), ElementsAre(1, 2, 3));
  EXPECT_EQ(all->events[2].status, "SUCCEEDED");
  auto after = log.Wait(1, {}, absl::Now());
  ASSERT_TRUE(after.ok());
  EXPECT_THAT(Revisions(after->events), ElementsAre(2, 3));
  EXPECT_EQ(after->revision, 3u);
}

TEST(EventLogTest, FilterKeepsTheKindsAndIdsAskedForAndAnIdMatchesWhatItOwns) {
  EventLog log(1, 100);
  Event worker;
  worker.kind = "worker";
  worker.id = "w1";
  worker.owner = Owner::Job(JobId("a"));
  Event node;
  node.kind = "node";
  node.id = "n1";
  log.Append({JobEvent("a", "PENDING"), JobEvent("b", "PENDING"), worker, node});
  auto of_a = log.Wait(0, {.ids = {"a"}}, absl::Now());
  ASSERT_TRUE(of_a.ok());
  EXPECT_THAT(Revisions(of_a->events), ElementsAre(1, 3));
  EXPECT_EQ(of_a->revision, 4u);
  auto nodes = log.Wait(0, {.kinds = {"node"}}, absl::Now());
  ASSERT_TRUE(nodes.ok());
  EXPECT_THAT(Revisions(nodes->events), ElementsAre(4));
}

TEST(EventLogTest, WaitReturnsEmptyAtTheDeadlineWithTheRevisionItHasSeen) {
  EventLog log(1, 100);
  log.Append({JobEvent("b", "PENDING")});
  auto none = log.Wait(0, {.ids = {"a"}}, absl::Now() + absl::Milliseconds(20));
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(none->events, IsEmpty());
  EXPECT_EQ(none->revision, 1u);  // the reader resumes from here, past what did not match
}

TEST(EventLogTest, AWaitingReaderGetsTheEventAppendedByAnotherThread) {
  EventLog log(1, 100);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log.Append({JobEvent("b", "PENDING")});  // not what the reader waits for
    log.Append({JobEvent("a", "SUCCEEDED")});
  });
  auto got = log.Wait(0, {.ids = {"a"}}, absl::Now() + absl::Seconds(30));
  writer.join();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->events.size(), 1u);
  EXPECT_EQ(got->events[0].revision, 2u);
  EXPECT_EQ(got->events[0].status, "SUCCEEDED");
}

TEST(EventLogTest, AReaderThatFellBehindTheKeptEventsIsToldToReadAgain) {
  EventLog log(1, /*capacity=*/4);
  // The writer never waits for readers: 1,000 events go in while nobody reads.
  for (int i = 0; i < 1000; ++i) log.Append({JobEvent("a", "RUNNING")});
  EXPECT_EQ(log.oldest_since(), 996u);
  auto behind = log.Wait(10, {}, absl::Now());
  EXPECT_EQ(behind.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(behind.status().message(), HasSubstr("watch from revision 1000"));
  auto kept = log.Wait(log.oldest_since(), {}, absl::Now());
  ASSERT_TRUE(kept.ok());
  EXPECT_THAT(Revisions(kept->events), ElementsAre(997, 998, 999, 1000));
}

TEST(EventLogTest, ARevisionAheadOfTheLogIsInvalid) {
  EventLog log(2, 10);
  log.Append({JobEvent("a", "RUNNING")});
  auto ahead = log.Wait(5, {}, absl::Now());
  EXPECT_EQ(ahead.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ahead.status().message(), HasSubstr("revision 5 is ahead of this head's newest, 1 (epoch 2)"));
}

TEST(EventLogTest, CloseWakesWaitingReaders) {
  EventLog log(1, 10);
  std::atomic<bool> returned{false};
  absl::Status status;
  std::thread reader([&] {
    status = log.Wait(0, {}, absl::InfiniteFuture()).status();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned);
  log.Close();
  reader.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

}  // namespace event_log_test
}  // namespace torus::head

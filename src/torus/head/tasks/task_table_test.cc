#include "torus/head/tasks/task_table.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace torus::head {
namespace task_table_test {

rpc::TaskEvent Event(const std::string& id, const std::string& state, int64_t t, const std::string& name = "m.f") {
  rpc::TaskEvent e;
  e.set_task_id(id);
  e.set_name(name);
  e.set_state(state);
  e.set_job_id("driver-1");
  e.set_time_ms(t);
  return e;
}

google::protobuf::RepeatedPtrField<rpc::TaskEvent> Batch(std::vector<rpc::TaskEvent> events) {
  google::protobuf::RepeatedPtrField<rpc::TaskEvent> out;
  for (auto& e : events) *out.Add() = std::move(e);
  return out;
}

std::vector<std::string> Ids(const std::vector<TaskRecord>& tasks) {
  std::vector<std::string> out;
  for (const auto& t : tasks) out.push_back(t.task_id);
  return out;
}

TEST(TaskTableTest, EventsMoveTasksThroughTheirStatesAndCountThem) {
  TaskTable table({.max_tasks = 100});
  rpc::TaskEvent running = Event("t1", "RUNNING", 110);
  running.set_node_id("n1");
  running.set_pid(4321);
  rpc::TaskEvent failed = Event("t2", "FAILED", 130, "m.g");
  failed.set_error("it raised an exception");
  EXPECT_EQ(table.Apply("127.0.0.1:1", Batch({Event("t1", "PENDING", 100), running, Event("t2", "PENDING", 101, "m.g"),
                                              failed, Event("t1", "FINISHED", 150)})),
            5);
  auto tasks = table.List({});
  ASSERT_EQ(Ids(tasks), (std::vector<std::string>{"t2", "t1"}));
  const TaskRecord& t1 = tasks[1];
  EXPECT_EQ(t1.state, "FINISHED");
  EXPECT_EQ(t1.node_id, "n1");
  EXPECT_EQ(t1.pid, 4321);
  EXPECT_EQ(t1.submit_time_ms, 100);
  EXPECT_EQ(t1.start_time_ms, 110);
  EXPECT_EQ(t1.end_time_ms, 150);
  EXPECT_EQ(t1.owner_address, "127.0.0.1:1");
  EXPECT_EQ(tasks[0].error, "it raised an exception");
  EXPECT_EQ(table.Summary(), nlohmann::json::parse(R"([{"name": "m.f", "state": "FINISHED", "count": 1},
                                                       {"name": "m.g", "state": "FAILED", "count": 1}])"));
  EXPECT_EQ(table.CountsByState(),
            (std::map<std::string, int64_t>{{"PENDING", 0}, {"RUNNING", 0}, {"FINISHED", 1}, {"FAILED", 1}}));
  // A late duplicate of an ended task, and malformed events, change nothing.
  EXPECT_EQ(table.Apply("127.0.0.1:1", Batch({Event("t1", "RUNNING", 160), Event("t3", "DONE", 1), Event("", "PENDING", 1)})),
            0);
  EXPECT_EQ(table.List({})[1].state, "FINISHED");
}

TEST(TaskTableTest, ARetryGoesBackToPendingWithItsAttempt) {
  TaskTable table({});
  rpc::TaskEvent retry = Event("t1", "PENDING", 120);
  retry.set_attempt(1);
  table.Apply("o", Batch({Event("t1", "PENDING", 100), Event("t1", "RUNNING", 110), retry}));
  EXPECT_EQ(table.List({})[0].state, "PENDING");
  EXPECT_EQ(table.List({})[0].attempt, 1);
  EXPECT_EQ(table.CountsByState()["PENDING"], 1);
  EXPECT_EQ(table.CountsByState()["RUNNING"], 0);
}

TEST(TaskTableTest, FiltersLimitsAndCounts) {
  TaskTable table({});
  for (int i = 0; i < 10; ++i) {
    table.Apply("o", Batch({Event(absl::StrCat("t", i), i % 2 ? "RUNNING" : "FINISHED", i, i < 5 ? "m.f" : "m.g")}));
  }
  EXPECT_EQ(Ids(table.List({.state = "RUNNING", .limit = 2})), (std::vector<std::string>{"t9", "t7"}));
  EXPECT_EQ(table.Count({.state = "RUNNING"}), 5u);
  EXPECT_EQ(Ids(table.List({.name = "m.f", .limit = 100})), (std::vector<std::string>{"t4", "t3", "t2", "t1", "t0"}));
  EXPECT_EQ(table.List({.job_id = "other"}).size(), 0u);
}

TEST(TaskTableTest, KeepsTheNewestTasksEndedOnesGoingFirstButCountsAll) {
  TaskTable table({.max_tasks = 4});
  table.Apply("o", Batch({Event("live", "RUNNING", 1)}));
  for (int i = 0; i < 6; ++i) table.Apply("o", Batch({Event(absl::StrCat("t", i), "FINISHED", 10 + i)}));
  EXPECT_EQ(Ids(table.List({})), (std::vector<std::string>{"t5", "t4", "t3", "live"}));
  EXPECT_EQ(table.CountsByState()["FINISHED"], 6);
  // Past twice the bound, live tasks go too, and are no longer counted as live.
  for (int i = 0; i < 8; ++i) table.Apply("o", Batch({Event(absl::StrCat("p", i), "PENDING", 20 + i)}));
  EXPECT_EQ(table.List({.limit = 100}).size(), 8u);
  EXPECT_EQ(table.CountsByState()["RUNNING"], 0);
  EXPECT_EQ(table.CountsByState()["PENDING"], 8);
  EXPECT_EQ(table.CountsByState()["FINISHED"], 6);
}

TEST(TaskTableTest, TheLiveTasksOfAGoneOwnerFail) {
  TaskTable table({});
  table.Apply("a:1", Batch({Event("t1", "RUNNING", 1), Event("t2", "FINISHED", 2)}));
  table.Apply("b:2", Batch({Event("t3", "PENDING", 3)}));
  EXPECT_EQ(table.LiveOwners(), (std::set<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(table.OwnerGone("a:1", "its owner a:1 is gone (refused)", 99), 1);
  const auto tasks = table.List({});
  EXPECT_EQ(tasks[2].state, "FAILED");
  EXPECT_EQ(tasks[2].error, "its owner a:1 is gone (refused)");
  EXPECT_EQ(tasks[2].end_time_ms, 99);
  EXPECT_EQ(tasks[1].state, "FINISHED");
  EXPECT_EQ(table.LiveOwners(), (std::set<std::string>{"b:2"}));
}

}  // namespace task_table_test
}  // namespace torus::head

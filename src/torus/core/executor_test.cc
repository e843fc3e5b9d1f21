// Executor: order of pushed tasks (arrival; an actor caller's sequence), answers, cancels and stop, apart from gRPC.
#include "torus/core/executor.h"

#include <thread>

#include "gtest/gtest.h"

namespace torus::core {
namespace executor_test {

// What a push's call would send back, recorded.
class Recorded final : public TaskAnswers {
 public:
  void Answer(int index, PushTaskReply reply) override {
    absl::MutexLock lock(&mu_);
    answers_.emplace_back(index, std::move(reply));
  }
  void Abort(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    aborts_.push_back(status);
  }
  std::vector<std::pair<int, PushTaskReply>> answers() {
    absl::MutexLock lock(&mu_);
    return answers_;
  }
  std::vector<grpc::Status> aborts() {
    absl::MutexLock lock(&mu_);
    return aborts_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<int, PushTaskReply>> answers_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::Status> aborts_ ABSL_GUARDED_BY(mu_);
};

TaskSpec Task(const std::string& id, const std::string& owner = "10.0.0.1:5000") {
  TaskSpec spec;
  spec.set_task_id(id);
  spec.set_name(id);
  spec.set_owner_address(owner);
  return spec;
}

TaskSpec Call(const std::string& id, const std::string& caller, int64_t sequence) {
  TaskSpec spec = Task(id);
  spec.set_actor_id("actor-1");
  spec.set_caller_id(caller);
  spec.set_sequence(sequence);
  return spec;
}

std::vector<std::string> Drain(Executor& executor) {
  std::vector<std::string> order;
  while (auto e = executor.Next(0)) order.push_back(e->spec.task_id());
  return order;
}

TEST(ExecutorTest, TasksRunInArrivalOrderAcrossPushes) {
  Executor executor(nullptr);
  const TaskSpec a = Task("a"), b = Task("b"), c = Task("c");
  auto answers = std::make_shared<Recorded>();
  ASSERT_TRUE(executor.Push({&a, &b}, answers).ok());
  ASSERT_TRUE(executor.Push({&c}, answers).ok());
  EXPECT_EQ(Drain(executor), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(ExecutorTest, AnActorsCallsRunInEachCallersSequenceWhateverOrderTheyArriveIn) {
  Executor executor(nullptr);
  const TaskSpec x3 = Call("x3", "x", 3), x1 = Call("x1", "x", 1), y1 = Call("y1", "y", 1), x2 = Call("x2", "x", 2);
  auto answers = std::make_shared<Recorded>();
  ASSERT_TRUE(executor.Push({&x3}, answers).ok());
  EXPECT_EQ(Drain(executor), std::vector<std::string>{}) << "call 3 waits for 1 and 2";
  ASSERT_TRUE(executor.Push({&x1, &y1}, answers).ok());
  EXPECT_EQ(Drain(executor), (std::vector<std::string>{"x1", "y1"}));
  ASSERT_TRUE(executor.Push({&x2}, answers).ok());
  EXPECT_EQ(Drain(executor), (std::vector<std::string>{"x2", "x3"}));
}

TEST(ExecutorTest, APushWithARepeatedOrRunningTaskIsRefusedWhole) {
  Executor executor(nullptr);
  const TaskSpec a = Task("a"), b = Task("b");
  auto answers = std::make_shared<Recorded>();
  absl::Status twice = executor.Push({&b, &b}, answers);
  EXPECT_EQ(twice.code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(executor.Push({&a}, answers).ok());
  absl::Status again = executor.Push({&b, &a}, answers);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.message(), "task 61 is already running here");
  EXPECT_EQ(Drain(executor), std::vector<std::string>{"a"}) << "nothing of a refused push was taken";
}

TEST(ExecutorTest, FinishAnswersTheTaskAtItsIndexAfterTheOwnerHeardOfItsReturns) {
  std::vector<std::string> heard;
  Executor executor([&](const std::vector<Value>& returns, const std::string& owner) {
    heard.push_back(owner + " " + returns.at(0).data);
  });
  const TaskSpec a = Task("a", "owner-a"), b = Task("b", "owner-b");
  auto answers = std::make_shared<Recorded>();
  ASSERT_TRUE(executor.Push({&a, &b}, answers).ok());
  EXPECT_EQ(executor.OwnerOf("b"), "owner-b");
  Drain(executor);
  executor.Finish("b", {Value{.data = "B", .format = "raw"}}, /*function_unknown=*/true, /*retryable=*/false);
  executor.Finish("b", {Value{.data = "again", .format = "raw"}});  // answered already: ignored
  const auto got = answers->answers();
  ASSERT_EQ(got.size(), 1u);
  const auto& [index, reply] = got[0];
  EXPECT_EQ(index, 1);
  EXPECT_EQ(reply.returns(0).data(), "B");
  EXPECT_TRUE(reply.function_unknown());
  EXPECT_TRUE(reply.error_not_retryable());
  EXPECT_EQ(heard, std::vector<std::string>{"owner-b B"});
  EXPECT_EQ(executor.OwnerOf("b"), std::nullopt);
}

TEST(ExecutorTest, CancelDropsATaskNotStartedAndLeavesARunningOneToBeInterrupted) {
  Executor executor(nullptr);
  std::vector<std::string> interrupted;
  executor.SetCancelHandler([&](const std::string& id) { interrupted.push_back(id); });
  const TaskSpec a = Task("a"), b = Task("b");
  auto answers = std::make_shared<Recorded>();
  ASSERT_TRUE(executor.Push({&a, &b}, answers).ok());
  ASSERT_EQ(executor.Next(0)->spec.task_id(), "a");
  EXPECT_EQ(executor.Cancel("b"), Executor::Cancelled::kDropped);
  ASSERT_EQ(answers->answers().size(), 1u);
  EXPECT_EQ(answers->answers()[0].first, 1);
  EXPECT_EQ(answers->answers()[0].second.returns(0).format(), "cancelled");
  EXPECT_EQ(executor.Next(0), std::nullopt) << "a dropped task never runs";
  EXPECT_EQ(executor.Cancel("a"), Executor::Cancelled::kRunning);
  EXPECT_TRUE(interrupted.empty()) << "Cancel leaves the interrupt to its caller";
  executor.Interrupt("a");
  EXPECT_EQ(interrupted, std::vector<std::string>{"a"});
  EXPECT_EQ(executor.Cancel("zzz"), Executor::Cancelled::kNotHere);
}

TEST(ExecutorTest, StopAbortsUnansweredPushesWakesNextAndRefusesLaterPushes) {
  Executor executor(nullptr);
  const TaskSpec a = Task("a"), b = Task("b");
  auto answers = std::make_shared<Recorded>();
  ASSERT_TRUE(executor.Push({&a}, answers).ok());
  ASSERT_TRUE(executor.Next(0).has_value());
  std::optional<Execution> waited = Execution{};
  std::thread waiter([&] { waited = executor.Next(-1); });
  executor.Stop();
  waiter.join();  // a wait with no timeout ends with the stop
  EXPECT_EQ(waited, std::nullopt);
  ASSERT_EQ(answers->aborts().size(), 1u);
  EXPECT_EQ(answers->aborts()[0].error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(executor.Push({&b}, answers).code(), absl::StatusCode::kUnavailable);
  executor.Finish("a", {Value{.data = "late", .format = "raw"}});
  EXPECT_TRUE(answers->answers().empty()) << "a task finished after the stop is not answered";
  executor.Stop();
  EXPECT_EQ(answers->aborts().size(), 1u) << "Stop is idempotent";
}

TEST(ExecutorTest, TheThreadThatTookATaskIsTheTaskThreadAndAnActorCallMakesItAnActorsWorker) {
  Executor executor(nullptr);
  const TaskSpec a = Task("a"), c = Call("c", "x", 1);
  auto answers = std::make_shared<Recorded>();
  ASSERT_TRUE(executor.Push({&a}, answers).ok());
  EXPECT_FALSE(executor.OnTaskThread());
  std::thread([&] { ASSERT_TRUE(executor.Next(0)); }).join();
  EXPECT_FALSE(executor.OnTaskThread());
  EXPECT_FALSE(executor.HostsActor());
  ASSERT_TRUE(executor.Push({&c}, answers).ok());
  ASSERT_TRUE(executor.Next(0));
  EXPECT_TRUE(executor.OnTaskThread());
  EXPECT_TRUE(executor.HostsActor());
}

}  // namespace executor_test
}  // namespace torus::core

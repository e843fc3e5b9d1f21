// TaskPipe against a real CoreWorker's service: the executor side is this test, taking pushed tasks with Executor::Next
// and answering them with Executor::Finish.
#include "torus/core/task_pipe.h"

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "torus/core/core_worker.h"
#include "torus/core/ids.h"

namespace torus::core {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "pipe-test-token";

// What came back for each pushed task, by name.
class Answers {
 public:
  TaskPipe::Callback For(const std::string& name) {
    return [this, name](const grpc::Status& status, PushTaskReply& reply) {
      absl::MutexLock lock(&mu_);
      ++calls_[name];
      statuses_[name] = status;
      data_[name] = reply.returns_size() > 0 ? reply.returns(0).data() : "";
      cv_.SignalAll();
    };
  }
  bool WaitFor(const std::string& name, std::chrono::milliseconds wait = 10s) {
    absl::MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (!calls_.contains(name)) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
    }
    return calls_.contains(name);
  }
  bool WaitForCount(size_t n) {
    absl::MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (calls_.size() < n) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
    }
    return calls_.size() >= n;
  }
  bool Has(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return calls_.contains(name);
  }
  grpc::Status Status(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return statuses_.at(name);
  }
  std::string Data(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return data_.at(name);
  }
  int Calls(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return calls_.contains(name) ? calls_.at(name) : 0;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, grpc::Status> statuses_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
};

// A gate the executor waits at for a task of that name.
class Gates {
 public:
  void Close(const std::string& name) {
    absl::MutexLock lock(&mu_);
    closed_.insert(name);
  }
  void Open(const std::string& name) {
    absl::MutexLock lock(&mu_);
    closed_.erase(name);
    cv_.SignalAll();
  }
  void OpenAll() {
    absl::MutexLock lock(&mu_);
    closed_.clear();
    cv_.SignalAll();
  }
  void PassThrough(const std::string& name) {
    absl::MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (closed_.contains(name)) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
    }
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::set<std::string> closed_ ABSL_GUARDED_BY(mu_);
};

class TaskPipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = CoreWorker::Start({.job_id = "pipe-test", .local_agent = "127.0.0.1:1", .token = kToken});
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    AddExecutor();
  }
  // A thread that runs the worker's tasks, one at a time.
  void AddExecutor() {
    executors_.emplace_back([this] {
      while (!stop_) {
        std::optional<Execution> e = worker_->executor().Next(50);
        if (!e) continue;
        ++executed_;
        gates_.PassThrough(e->spec.name());
        worker_->executor().Finish(e->spec.task_id(), {Value{.data = e->spec.name() + " done", .format = "raw"}});
      }
    });
  }
  void TearDown() override {
    stop_ = true;
    gates_.OpenAll();
    for (std::thread& t : executors_) t.join();
    worker_->Shutdown();
  }
  static TaskSpec Spec(const std::string& name) {
    TaskSpec spec;
    spec.set_task_id(NewTaskId());
    spec.set_name(name);
    spec.set_num_returns(1);
    return spec;
  }

  Channels channels_{kToken};
  std::unique_ptr<CoreWorker> worker_;
  std::vector<std::thread> executors_;
  std::atomic<bool> stop_{false};
  std::atomic<int> executed_{0};
  Gates gates_;
  Answers answers_;
};

// The tests that count calls wait for no stall (60 s); the last one is about the stall.
constexpr std::chrono::milliseconds kNoStall = 60s;

TEST_F(TaskPipeTest, EveryTaskGetsItsOwnAnswerAndTasksPushedDuringACallShareTheNext) {
  TaskPipe pipe(&channels_, {.stall = kNoStall});
  gates_.Close("gate");
  pipe.Push(worker_->address(), Spec("gate"), answers_.For("gate"));
  for (int i = 0; i < 200; ++i) {
    const std::string name = "t" + std::to_string(i);
    pipe.Push(worker_->address(), Spec(name), answers_.For(name));
  }
  gates_.Open("gate");
  ASSERT_TRUE(answers_.WaitForCount(201));
  for (int i = 0; i < 200; ++i) {
    const std::string name = "t" + std::to_string(i);
    ASSERT_TRUE(answers_.Status(name).ok()) << name << ": " << answers_.Status(name).error_message();
    EXPECT_EQ(answers_.Data(name), name + " done");
    EXPECT_EQ(answers_.Calls(name), 1);
  }
  // The gate's call and one more were in flight; the other 199 waited and went in one call (at most 256 a call).
  const TaskPipe::Counts counts = pipe.counts();
  EXPECT_EQ(counts.tasks, 201);
  EXPECT_EQ(counts.calls, 3);
}

TEST_F(TaskPipeTest, AnAnswerComesAsItsTaskFinishesNotWithTheRestOfItsCall) {
  TaskPipe pipe(&channels_, {.max_calls = 1, .stall = kNoStall});
  gates_.Close("gate");
  gates_.Close("slow");
  pipe.Push(worker_->address(), Spec("gate"), answers_.For("gate"));
  pipe.Push(worker_->address(), Spec("quick"), answers_.For("quick"));  // these two wait, then go in one call
  pipe.Push(worker_->address(), Spec("slow"), answers_.For("slow"));
  gates_.Open("gate");
  ASSERT_TRUE(answers_.WaitFor("quick"));
  EXPECT_EQ(answers_.Data("quick"), "quick done");
  EXPECT_FALSE(answers_.Has("slow"));
  gates_.Open("slow");
  ASSERT_TRUE(answers_.WaitFor("slow"));
  EXPECT_EQ(answers_.Data("slow"), "slow done");
  EXPECT_EQ(pipe.counts().calls, 2);
}

TEST_F(TaskPipeTest, AWorkerThatStopsFailsTheTasksItHasNotAnswered) {
  TaskPipe pipe(&channels_, {.max_calls = 1, .stall = kNoStall});
  gates_.Close("gate");
  gates_.Close("a");
  pipe.Push(worker_->address(), Spec("gate"), answers_.For("gate"));
  pipe.Push(worker_->address(), Spec("a"), answers_.For("a"));  // these two wait, then go in one call
  pipe.Push(worker_->address(), Spec("b"), answers_.For("b"));
  gates_.Open("gate");
  ASSERT_TRUE(answers_.WaitFor("gate"));
  while (executed_ < 2) std::this_thread::sleep_for(5ms);  // "a" runs, "b" waits behind it
  worker_->Shutdown();
  ASSERT_TRUE(answers_.WaitForCount(3));
  for (const std::string name : {"a", "b"}) {
    EXPECT_EQ(answers_.Status(name).error_code(), grpc::StatusCode::UNAVAILABLE) << name;
    EXPECT_EQ(answers_.Status(name).error_message(), "this worker is stopping") << name;
    EXPECT_EQ(answers_.Calls(name), 1) << name;
  }
  EXPECT_EQ(pipe.counts().calls, 2);
}

TEST_F(TaskPipeTest, ShutdownFailsTasksInFlightAndWaitingAndLaterPushes) {
  TaskPipe pipe(&channels_, {.max_calls = 1, .stall = kNoStall});
  gates_.Close("gate");
  pipe.Push(worker_->address(), Spec("gate"), answers_.For("gate"));
  pipe.Push(worker_->address(), Spec("waiting"), answers_.For("waiting"));
  while (executed_ < 1) std::this_thread::sleep_for(5ms);
  pipe.Shutdown(5s);
  ASSERT_TRUE(answers_.Has("gate"));  // Shutdown waited for its call to end
  EXPECT_EQ(answers_.Status("gate").error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(answers_.Status("waiting").error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(answers_.Status("waiting").error_message(), "this process is shutting down");
  pipe.Push(worker_->address(), Spec("late"), answers_.For("late"));
  ASSERT_TRUE(answers_.Has("late"));
  EXPECT_EQ(answers_.Status("late").error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(pipe.counts().calls, 1);
}

TEST_F(TaskPipeTest, ATaskIsNotHeldBehindACallThatMakesNoProgress) {
  TaskPipe pipe(&channels_, {.max_calls = 1, .stall = 20ms});
  AddExecutor();  // the worker runs two tasks at once (as a threaded actor)
  gates_.Close("gate");
  pipe.Push(worker_->address(), Spec("gate"), answers_.For("gate"));
  pipe.Push(worker_->address(), Spec("free"), answers_.For("free"));
  ASSERT_TRUE(answers_.WaitFor("free"));
  EXPECT_EQ(answers_.Data("free"), "free done");
  EXPECT_FALSE(answers_.Has("gate"));
  EXPECT_EQ(pipe.counts().calls, 2);
  gates_.Open("gate");
  ASSERT_TRUE(answers_.WaitFor("gate"));
}

TEST_F(TaskPipeTest, APushWithARepeatedTaskIdIsRefusedWholeAndTakesNothing) {
  CoreWorkerService::Stub* stub = channels_.Worker(worker_->address());
  PushTasksRequest request;
  *request.add_tasks() = Spec("one");
  *request.add_tasks() = request.tasks(0);
  grpc::ClientContext ctx;
  channels_.Authorize(ctx);
  auto reader = stub->PushTasks(&ctx, request);
  PushTasksReply reply;
  EXPECT_FALSE(reader->Read(&reply));
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(status.error_message(), "task " + Hex(request.tasks(0).task_id()) + " is already running here");

  grpc::ClientContext empty_ctx;
  channels_.Authorize(empty_ctx);
  auto empty = stub->PushTasks(&empty_ctx, PushTasksRequest());
  EXPECT_FALSE(empty->Read(&reply));
  status = empty->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "tasks: a push needs at least one task");

  grpc::ClientContext no_token;
  auto refused = stub->PushTasks(&no_token, request);
  EXPECT_FALSE(refused->Read(&reply));
  EXPECT_EQ(refused->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);

  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(executed_, 0);
}

}  // namespace
}  // namespace torus::core

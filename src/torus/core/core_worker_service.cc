// The core worker's gRPC service: each method checks the cluster token and hands the call to the process's owner side
// (its CoreWorker: objects, actors, borrows, generator items) or to its executor (pushed tasks and their answers).
#include "torus/core/core_worker.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

namespace torus::core {
namespace {

bool Authorized(const grpc::CallbackServerContext* ctx, const std::string& token) {
  auto it = ctx->client_metadata().find("authorization");
  return it != ctx->client_metadata().end() &&
         std::string_view(it->second.data(), it->second.size()) == "Bearer " + token;
}

grpc::Status Unauthenticated() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong cluster token");
}

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status Stopping() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this worker is stopping"); }

// A PushTask call's reply.
class UnaryAnswer final : public TaskAnswers {
 public:
  UnaryAnswer(grpc::ServerUnaryReactor* reactor, PushTaskReply* reply) : reactor_(reactor), reply_(reply) {}
  void Answer(int, PushTaskReply reply) override {
    if (!Claim()) return;
    *reply_ = std::move(reply);
    reactor_->Finish(grpc::Status::OK);
  }
  void Abort(const grpc::Status& status) override {
    if (Claim()) reactor_->Finish(status);
  }

 private:
  // Whether this caller is the one to finish the call (the first).
  bool Claim() { return !done_.exchange(true); }
  grpc::ServerUnaryReactor* reactor_;
  PushTaskReply* reply_;
  std::atomic<bool> done_{false};
};

// A PushTasks call's answers: written as they come, those that come during a write together in the next one; the
// call finishes with the last. The reactor is gRPC's (deleted when the call is done); this outlives it while tasks
// of the call still run here, and stops touching it once it is finished.
class StreamAnswers final : public TaskAnswers {
 public:
  explicit StreamAnswers(int tasks) : unanswered_(tasks) {}
  void Bind(grpc::ServerWriteReactor<PushTasksReply>* reactor) {
    absl::MutexLock lock(&mu_);
    reactor_ = reactor;
  }
  void Answer(int index, PushTaskReply reply) override {
    Step step;
    {
      absl::MutexLock lock(&mu_);
      if (reactor_ == nullptr) return;
      PushTasksReply::Answer* a = waiting_.add_answers();
      a->set_index(index);
      *a->mutable_reply() = std::move(reply);
      --unanswered_;
      step = NextLocked();
    }
    step.Start();
  }
  void Abort(const grpc::Status& status) override {
    Step step;
    {
      absl::MutexLock lock(&mu_);
      if (reactor_ == nullptr || abort_.has_value()) return;
      abort_ = status;
      step = NextLocked();
    }
    step.Start();
  }
  void WriteDone(bool ok) {
    Step step;
    {
      absl::MutexLock lock(&mu_);
      writing_now_ = false;
      if (!ok && !abort_.has_value()) abort_ = grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
      step = NextLocked();
    }
    step.Start();
  }

 private:
  // An operation on the reactor, decided under the lock and started after it is released (a reaction may run inside
  // the call that starts an operation).
  struct Step {
    enum Kind { kNothing, kWrite, kWriteAndFinish, kFinish } kind = kNothing;
    grpc::ServerWriteReactor<PushTasksReply>* reactor = nullptr;
    const PushTasksReply* message = nullptr;
    grpc::Status status;
    void Start() {
      switch (kind) {
        case kNothing: break;
        case kWrite: reactor->StartWrite(message); break;
        case kWriteAndFinish: reactor->StartWriteAndFinish(message, grpc::WriteOptions(), grpc::Status::OK); break;
        case kFinish: reactor->Finish(status); break;
      }
    }
  };
  // The next step unless a write is in flight: a write of the answers waiting (with the finish, after the last), or
  // the finish.
  Step NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reactor_ == nullptr || writing_now_) return {};
    Step step{.reactor = reactor_};
    if (abort_.has_value()) {
      reactor_ = nullptr;
      step.kind = Step::kFinish;
      step.status = *abort_;
    } else if (waiting_.answers_size() > 0) {
      writing_.Clear();
      writing_.Swap(&waiting_);
      step.message = &writing_;
      if (unanswered_ == 0) {
        reactor_ = nullptr;
        step.kind = Step::kWriteAndFinish;
      } else {
        writing_now_ = true;
        step.kind = Step::kWrite;
      }
    } else if (unanswered_ == 0) {
      reactor_ = nullptr;
      step.kind = Step::kFinish;
    }
    return step;
  }

  absl::Mutex mu_;
  grpc::ServerWriteReactor<PushTasksReply>* reactor_ ABSL_GUARDED_BY(mu_) = nullptr;  // null once finishing
  int unanswered_ ABSL_GUARDED_BY(mu_);
  PushTasksReply waiting_ ABSL_GUARDED_BY(mu_);  // answers not written yet
  // The message being written: untouched while writing_now_ (or once finishing), so it is read outside the lock.
  PushTasksReply writing_;
  bool writing_now_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> abort_ ABSL_GUARDED_BY(mu_);
};

class PushTasksReactor final : public grpc::ServerWriteReactor<PushTasksReply> {
 public:
  explicit PushTasksReactor(std::shared_ptr<StreamAnswers> answers) : answers_(std::move(answers)) {}
  void OnWriteDone(bool ok) override { answers_->WriteDone(ok); }
  void OnCancel() override { answers_->Abort(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away")); }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<StreamAnswers> answers_;
};

class Service final : public CoreWorkerService::CallbackService {
 public:
  Service(CoreWorker* worker, std::string token) : worker_(worker), token_(std::move(token)) {}
  grpc::ServerUnaryReactor* PushTask(grpc::CallbackServerContext* ctx, const PushTaskRequest* request,
                                     PushTaskReply* reply) override {
    return Serve(ctx, [&](grpc::ServerUnaryReactor* reactor) {
      absl::Status s = worker_->executor().Push({&request->task()}, std::make_shared<UnaryAnswer>(reactor, reply));
      if (!s.ok()) reactor->Finish(ToGrpc(s));
    });
  }
  grpc::ServerWriteReactor<PushTasksReply>* PushTasks(grpc::CallbackServerContext* ctx,
                                                      const PushTasksRequest* request) override {
    auto answers = std::make_shared<StreamAnswers>(request->tasks_size());
    auto* reactor = new PushTasksReactor(answers);
    answers->Bind(reactor);
    if (!Authorized(ctx, token_)) {
      answers->Abort(Unauthenticated());
    } else if (request->tasks_size() == 0) {
      answers->Abort(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "tasks: a push needs at least one task"));
    } else {
      std::vector<const TaskSpec*> tasks;
      tasks.reserve(request->tasks_size());
      for (const TaskSpec& t : request->tasks()) tasks.push_back(&t);
      if (absl::Status s = worker_->executor().Push(tasks, answers); !s.ok()) answers->Abort(ToGrpc(s));
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* ResolveActor(grpc::CallbackServerContext* ctx, const ResolveActorRequest* request,
                                         ActorInfo* reply) override {
    return Serve(ctx, [&](grpc::ServerUnaryReactor* reactor) {
      if (!worker_->StartHandlerThread([this, reactor, request, reply] {
            *reply = worker_->HandleResolveActor(*request);
            reactor->Finish(grpc::Status::OK);
          })) {
        reactor->Finish(Stopping());
      }
    });
  }
  grpc::ServerUnaryReactor* KillActor(grpc::CallbackServerContext* ctx, const KillActorRequest* request,
                                      KillActorReply*) override {
    return Serve(ctx, [&](grpc::ServerUnaryReactor* reactor) {
      if (!worker_->StartHandlerThread([this, reactor, request] { reactor->Finish(worker_->HandleKillActor(*request)); })) {
        reactor->Finish(Stopping());
      }
    });
  }
  grpc::ServerUnaryReactor* UpdateBorrowers(grpc::CallbackServerContext* ctx, const UpdateBorrowersRequest* request,
                                            UpdateBorrowersReply* reply) override {
    return Serve(ctx, [&](grpc::ServerUnaryReactor* reactor) {
      worker_->HandleUpdateBorrowers(*request, reply);
      reactor->Finish(grpc::Status::OK);
    });
  }
  grpc::ServerUnaryReactor* ReportGeneratorItem(grpc::CallbackServerContext* ctx,
                                                const ReportGeneratorItemRequest* request,
                                                ReportGeneratorItemReply*) override {
    return Serve(ctx, [&](grpc::ServerUnaryReactor* reactor) {
      reactor->Finish(worker_->HandleReportGeneratorItem(*request));
    });
  }
  grpc::ServerUnaryReactor* CancelTask(grpc::CallbackServerContext* ctx, const CancelTaskRequest* request,
                                       CancelTaskReply* reply) override {
    return Serve(ctx, [&](grpc::ServerUnaryReactor* reactor) {
      reply->set_found(worker_->HandleCancel(request->task_id(), request->recursive()));
      reactor->Finish(grpc::Status::OK);
    });
  }
  grpc::ServerUnaryReactor* GetObject(grpc::CallbackServerContext* ctx, const GetObjectRequest* request,
                                      GetObjectReply* reply) override {
    return Serve(ctx, [&](grpc::ServerUnaryReactor* reactor) {
      if (request->wait_ms() <= 0) {
        reactor->Finish(worker_->HandleGetObject(*request, reply));
        return;
      }
      // A borrower waits for a pending object: on its own thread, not gRPC's.
      if (!worker_->StartHandlerThread(
              [this, reactor, request, reply] { reactor->Finish(worker_->HandleGetObject(*request, reply)); })) {
        reactor->Finish(Stopping());
      }
    });
  }

 private:
  // A unary call's reactor: finished UNAUTHENTICATED without the cluster token, else handed to `serve`, which
  // finishes it (now or later).
  template <typename F>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, F serve) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (!Authorized(ctx, token_)) {
      reactor->Finish(Unauthenticated());
    } else {
      serve(reactor);
    }
    return reactor;
  }

  CoreWorker* worker_;
  const std::string token_;
};

}  // namespace

std::unique_ptr<grpc::Service> NewCoreWorkerService(CoreWorker* worker, std::string token) {
  return std::make_unique<Service>(worker, std::move(token));
}

}  // namespace torus::core

#include "torus/head/api/event_service.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "torus/head/api/event_test_util.h"
#include "torus/rpc/auth.h"

namespace torus::head {
namespace event_service_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testutil::JobEvent;

constexpr char kToken[] = "events-token";


// EventService over `log` on a loopback port; the log is closed before the server stops, as the head does.
class EventServer {
 public:
  explicit EventServer(EventLog* log) : log_(log), service_(log, kToken) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials());
    stub_ = rpc::EventService::NewStub(channel_);
  }
  ~EventServer() {
    log_->Close();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  struct Watch {
    std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReader<rpc::Event>> reader;
  };
  Watch Open(const rpc::WatchRequest& request, const std::string& token = kToken) {
    Watch w;
    if (!token.empty()) w.ctx->AddMetadata(rpc::kAuthMetadataKey, std::string("Bearer ") + token);
    w.reader = stub_->Watch(w.ctx.get(), request);
    return w;
  }

 private:
  EventLog* log_;
  EventServiceImpl service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rpc::EventService::Stub> stub_;
};

// Reads `n` events (progress marks skipped).
std::vector<rpc::Event> Read(EventServer::Watch& w, size_t n) {
  std::vector<rpc::Event> out;
  rpc::Event e;
  while (out.size() < n && w.reader->Read(&e)) {
    if (!e.progress()) out.push_back(e);
  }
  return out;
}

std::vector<uint64_t> Revisions(const std::vector<rpc::Event>& events) {
  std::vector<uint64_t> out;
  for (const rpc::Event& e : events) out.push_back(e.revision());
  return out;
}

TEST(EventServiceTest, AWatchStreamsTheMatchingEventsAfterItsRevisionInOrder) {
  EventLog log(3, 100);
  EventServer server(&log);
  log.Append({JobEvent("a", "PENDING"), JobEvent("b", "PENDING"), JobEvent("a", "RUNNING")});
  rpc::WatchRequest request;
  request.set_since(1);
  request.set_epoch(3);
  request.add_kinds("job");
  request.add_ids("a");
  auto watch = server.Open(request);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    log.Append({JobEvent("b", "RUNNING"), JobEvent("a", "SUCCEEDED")});
  });
  std::vector<rpc::Event> events = Read(watch, 2);
  writer.join();
  EXPECT_THAT(Revisions(events), ElementsAre(3, 5));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].status(), "RUNNING");
  EXPECT_EQ(events[1].status(), "SUCCEEDED");
  EXPECT_EQ(events[1].epoch(), 3u);
  EXPECT_EQ(events[1].kind(), "job");
  EXPECT_EQ(events[1].id(), "a");
  watch.ctx->TryCancel();
  EXPECT_EQ(watch.reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST(EventServiceTest, AWatchWithoutARevisionStartsFromNow) {
  EventLog log(1, 100);
  EventServer server(&log);
  log.Append({JobEvent("a", "PENDING")});
  auto watch = server.Open(rpc::WatchRequest());
  rpc::Event first;
  ASSERT_TRUE(watch.reader->Read(&first));  // where it starts
  EXPECT_TRUE(first.progress());
  EXPECT_EQ(first.epoch(), 1u);
  EXPECT_EQ(first.revision(), 1u);
  log.Append({JobEvent("a", "RUNNING")});
  std::vector<rpc::Event> events = Read(watch, 1);
  EXPECT_THAT(Revisions(events), ElementsAre(2));
  watch.ctx->TryCancel();
  watch.reader->Finish();
}

TEST(EventServiceTest, RefusalsSayWhy) {
  EventLog log(2, 100);
  EventServer server(&log);
  rpc::WatchRequest other_epoch;
  other_epoch.set_since(0);
  other_epoch.set_epoch(1);
  auto gone = server.Open(other_epoch);
  rpc::Event e;
  EXPECT_FALSE(gone.reader->Read(&e));
  grpc::Status status = gone.reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(status.error_message(), HasSubstr("the head has restarted since epoch 1 (now epoch 2)"));

  rpc::WatchRequest bad_kind;
  bad_kind.add_kinds("pod");
  auto bad = server.Open(bad_kind);
  EXPECT_FALSE(bad.reader->Read(&e));
  status = bad.reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "kinds: unknown kind \"pod\"; use node, group, job, run, worker, package, actor or service");

  auto anonymous = server.Open(rpc::WatchRequest(), "");
  EXPECT_FALSE(anonymous.reader->Read(&e));
  EXPECT_EQ(anonymous.reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(EventServiceTest, AReaderThatDoesNotKeepUpNeverStallsTheLogAndIsToldItFellBehind) {
  EventLog log(1, /*capacity=*/64);
  EventServer server(&log);
  rpc::WatchRequest request;
  request.set_since(0);
  request.set_epoch(1);
  auto watch = server.Open(request);
  // The client reads nothing while 20,000 events (with long messages) go in: appends never wait for it.
  Event big = JobEvent("a", "RUNNING");
  big.message = std::string(4096, 'x');
  for (int i = 0; i < 20'000; ++i) log.Append({big});
  EXPECT_EQ(log.revision(), 20'000u);
  // Once it reads, it gets what its stream held, then the news that the rest is gone.
  rpc::Event e;
  size_t read = 0;
  while (watch.reader->Read(&e)) ++read;
  EXPECT_LT(read, 20'000u);
  grpc::Status status = watch.reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(status.error_message(), HasSubstr("no longer kept"));
}

TEST(EventServiceTest, ClosingTheLogEndsOpenWatches) {
  EventLog log(1, 10);
  EventServer server(&log);
  auto watch = server.Open(rpc::WatchRequest());
  rpc::Event first;
  ASSERT_TRUE(watch.reader->Read(&first));
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    log.Close();
  });
  rpc::Event e;
  while (watch.reader->Read(&e)) {
  }
  closer.join();
  grpc::Status status = watch.reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "the head is stopping");
}

}  // namespace event_service_test
}  // namespace torus::head

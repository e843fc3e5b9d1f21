#include "torus/core/borrows.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "grpcpp/grpcpp.h"

namespace torus::core {
namespace borrows_test {

using std::chrono::milliseconds;

// An owner's side on a real gRPC port: its table, and UpdateBorrowers handed to its Borrows.
class Owner {
 public:
  Owner() {
    class Service final : public CoreWorkerService::CallbackService {
     public:
      explicit Service(Owner* owner) : owner_(owner) {}
      grpc::ServerUnaryReactor* UpdateBorrowers(grpc::CallbackServerContext* ctx, const UpdateBorrowersRequest* request,
                                                UpdateBorrowersReply* reply) override {
        ++owner_->updates;
        owner_->borrows->Handle(*request, reply);
        grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
        reactor->Finish(grpc::Status::OK);
        return reactor;
      }

     private:
      Owner* owner_;
    };
    service_ = std::make_unique<Service>(this);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
    borrows = std::make_unique<Borrows>(&channels_, &table, address, milliseconds(100));
  }
  ~Owner() {
    borrows.reset();
    server_->Shutdown();
  }

  ObjectTable table;
  std::string address;
  std::unique_ptr<Borrows> borrows;
  std::atomic<int> updates{0};

 private:
  Channels channels_{"token"};
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 200 && !done(); ++i) std::this_thread::sleep_for(milliseconds(10));
  return done();
}

// A borrower's registration keeps the owner's object after the owner let go; its release frees it.
TEST(BorrowsTest, ARegisteredBorrowerKeepsTheObjectUntilItsReleaseArrives) {
  Owner owner;
  ASSERT_TRUE(owner.table.TryPut("obj", Value{.data = "1", .format = "raw"}).ok());
  owner.table.AddRef("obj");
  Owner other;  // the borrower: a live process, which answers the owner's probes
  Borrows& borrower = *other.borrows;
  EXPECT_TRUE(borrower.Register(owner.address, {"obj"}).empty());
  EXPECT_EQ(borrower.Register(owner.address, {"gone"}), std::vector<std::string>{"gone"});  // the owner holds none
  owner.table.RemoveRef("obj");
  std::this_thread::sleep_for(milliseconds(300));  // probes come and go: the borrower answers them
  EXPECT_EQ(owner.table.State("obj"), ObjectState::kReady);
  borrower.Release(owner.address, "obj");
  EXPECT_TRUE(WaitFor([&] { return owner.table.State("obj") == ObjectState::kUnknown; }));
}

// Let go and held again, over and over: the owner sees one borrower's changes in the order it made them, so it ends
// registered (a release sent after the registration that followed it would leave it out).
TEST(BorrowsTest, ABorrowersReleasesAndRegistrationsReachTheOwnerInOrder) {
  Owner owner;
  ASSERT_TRUE(owner.table.TryPut("obj", Value{.data = "1", .format = "raw"}).ok());
  owner.table.AddRef("obj");  // held by its owner too, as when someone hands the borrower the ref again
  Owner other;
  Borrows& borrower = *other.borrows;
  ASSERT_TRUE(borrower.Register(owner.address, {"obj"}).empty());
  for (int i = 0; i < 50; ++i) {
    borrower.Release(owner.address, "obj");
    ASSERT_TRUE(borrower.Register(owner.address, {"obj"}).empty()) << "round " << i;
  }
  borrower.Flush(milliseconds(2000));
  EXPECT_EQ(owner.table.State("obj"), ObjectState::kReady);
  EXPECT_EQ(owner.table.Borrowers(), std::set<std::string>{other.address});
}

// A borrower that no longer answers (killed) is forgotten after two failed probes, and what only it held is freed.
TEST(BorrowsTest, AnOwnerForgetsABorrowerThatFailsTwoProbes) {
  Owner owner;
  ASSERT_TRUE(owner.table.TryPut("obj", Value{.data = "1", .format = "raw"}).ok());
  // Nothing listens at this borrower's address (a port the kernel gave, then closed).
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  const std::string dead = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  ASSERT_TRUE(owner.table.AddBorrower("obj", dead));
  EXPECT_TRUE(WaitFor([&] { return owner.table.State("obj") == ObjectState::kUnknown; }));
  EXPECT_TRUE(owner.table.Borrowers().empty());
}

}  // namespace borrows_test
}  // namespace torus::core

#include "torus/core/object_table.h"

#include <gtest/gtest.h>

#include <thread>

namespace torus::core {
namespace object_table_test {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

TEST(ObjectTableTest, PendingBecomesReadyAndWakesWaiters) {
  ObjectTable table;
  table.AddPending("a");
  EXPECT_EQ(table.State("a"), ObjectState::kPending);
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    table.Put("a", Value{.data = "1", .format = "raw"});
  });
  EXPECT_EQ(table.WaitReady("a", steady_clock::now() + milliseconds(5000)), ObjectState::kReady);
  t.join();
  EXPECT_EQ(table.Get("a")->data, "1");
}

TEST(ObjectTableTest, RemovePendingForgetsOnlyAnUnheldPendingObject) {
  ObjectTable table;
  table.AddPending("never");
  table.RemovePending("never");
  EXPECT_EQ(table.State("never"), ObjectState::kUnknown);
  table.AddPending("held");
  table.AddRef("held");
  table.RemovePending("held");
  EXPECT_EQ(table.State("held"), ObjectState::kPending);
  table.AddPending("ready");
  table.Put("ready", Value{.data = "1", .format = "raw"});
  table.RemovePending("ready");
  EXPECT_EQ(table.State("ready"), ObjectState::kReady);
}

TEST(ObjectTableTest, WaitReadyTimesOutOnPending) {
  ObjectTable table;
  table.AddPending("a");
  EXPECT_EQ(table.WaitReady("a", steady_clock::now() + milliseconds(10)), ObjectState::kPending);
  EXPECT_EQ(table.WaitReady("missing", steady_clock::now() + milliseconds(10)), ObjectState::kUnknown);
}

TEST(ObjectTableTest, OnReadyRunsOnceWhenReadyOrAtOnce) {
  ObjectTable table;
  table.AddPending("a");
  int calls = 0;
  table.OnReady("a", [&](const Value& v) {
    ++calls;
    EXPECT_EQ(v.data, "x");
  });
  EXPECT_EQ(calls, 0);
  table.Put("a", Value{.data = "x"});
  table.Put("a", Value{.data = "y"});  // a second value is ignored
  EXPECT_EQ(calls, 1);
  table.OnReady("a", [&](const Value&) { ++calls; });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(table.Get("a")->data, "x");
}

TEST(ObjectTableTest, WaitAnyReturnsReadyIndices) {
  ObjectTable table;
  table.AddPending("a");
  table.AddPending("b");
  table.Put("b", Value{.data = "2"});
  EXPECT_EQ(table.WaitAny({"a", "b"}, 1, steady_clock::now() + milliseconds(10)), (std::vector<size_t>{1}));
  EXPECT_EQ(table.WaitAny({"a", "b"}, 2, steady_clock::now() + milliseconds(10)), (std::vector<size_t>{1}));
}

TEST(ObjectTableTest, LastRefFreesAReadyObjectButNotAnEscapedOne) {
  ObjectTable table;
  table.Put("a", Value{.data = "1234"});
  table.Put("b", Value{.data = "56"});
  EXPECT_EQ(table.bytes(), 6u);
  table.AddRef("a");
  table.AddRef("a");
  table.AddRef("b");
  table.MarkEscaped("b");
  table.RemoveRef("a");
  EXPECT_EQ(table.State("a"), ObjectState::kReady);
  table.RemoveRef("a");
  EXPECT_EQ(table.State("a"), ObjectState::kUnknown);
  table.RemoveRef("b");
  EXPECT_EQ(table.State("b"), ObjectState::kReady);
  EXPECT_EQ(table.bytes(), 2u);
}

TEST(ObjectTableTest, APendingObjectIsKeptWithoutRefs) {
  ObjectTable table;
  table.AddPending("a");
  table.AddRef("a");
  table.RemoveRef("a");
  EXPECT_EQ(table.State("a"), ObjectState::kPending);
}

}  // namespace object_table_test
}  // namespace torus::core

namespace torus::core {
namespace object_table_test {

// An owned object stays while a borrower holds it, and goes with the last of its handles and borrowers.
TEST(ObjectTableTest, BorrowersKeepAnOwnedObjectUntilTheLastLetsGo) {
  ObjectTable table;
  ASSERT_TRUE(table.TryPut("a", Value{.data = "1", .format = "raw"}).ok());
  table.AddRef("a");
  EXPECT_TRUE(table.AddBorrower("a", "10.0.0.2:7000"));
  EXPECT_TRUE(table.AddBorrower("a", "10.0.0.3:7000"));
  EXPECT_FALSE(table.AddBorrower("missing", "10.0.0.2:7000"));
  table.RemoveRef("a");
  EXPECT_EQ(table.State("a"), ObjectState::kReady);
  table.RemoveBorrower("a", "10.0.0.2:7000");
  EXPECT_EQ(table.Borrowers(), std::set<std::string>{"10.0.0.3:7000"});
  EXPECT_EQ(table.DropBorrower("10.0.0.3:7000"), 1);  // gone: what only it held is freed
  EXPECT_EQ(table.State("a"), ObjectState::kUnknown);
  EXPECT_FALSE(table.AddBorrower("a", "10.0.0.2:7000"));
}

// A value holds the refs inside it: an owned one contained is kept until the value goes; a borrowed one is reported
// let go (to tell its owner) once neither a handle nor a value holds it.
TEST(ObjectTableTest, AValueHoldsTheRefsInsideItUntilItIsFreed) {
  ObjectTable table;
  std::vector<std::pair<std::string, std::string>> released;
  table.SetOnBorrowReleased([&](const std::string& owner, const std::string& id) { released.emplace_back(owner, id); });
  ASSERT_TRUE(table.TryPut("inner", Value{.data = "1", .format = "raw"}).ok());
  table.AddRef("borrowed");
  EXPECT_TRUE(table.MarkBorrowing("borrowed", "10.0.0.9:7000"));
  EXPECT_FALSE(table.MarkBorrowing("borrowed", "10.0.0.9:7000"));  // told once
  EXPECT_FALSE(table.MarkBorrowing("inner", "10.0.0.9:7000"));     // owned here
  EXPECT_FALSE(table.MarkBorrowing("unheld", "10.0.0.9:7000"));    // no handle on it
  ASSERT_TRUE(table.TryPut("box", Value{.data = "2", .format = "raw",
                                        .contained = {{"inner", "self"}, {"borrowed", "10.0.0.9:7000"}}})
                  .ok());
  table.AddRef("box");
  table.RemoveRef("borrowed");
  EXPECT_TRUE(released.empty());  // the box still holds it
  EXPECT_EQ(table.State("inner"), ObjectState::kReady);
  EXPECT_EQ(table.Borrowing(), (std::vector<std::pair<std::string, std::string>>{{"10.0.0.9:7000", "borrowed"}}));
  table.RemoveRef("box");
  EXPECT_EQ(table.State("box"), ObjectState::kUnknown);
  EXPECT_EQ(table.State("inner"), ObjectState::kUnknown);
  EXPECT_EQ(released, (std::vector<std::pair<std::string, std::string>>{{"10.0.0.9:7000", "borrowed"}}));
  EXPECT_TRUE(table.Borrowing().empty());
}

// A task's return that came with refs inside: the caller was registered as their borrower by the worker, so it tells
// their owners when it lets go, though it never read the value.
TEST(ObjectTableTest, AReturnsContainedRefsAreReleasedWithIt) {
  ObjectTable table;
  std::vector<std::pair<std::string, std::string>> released;
  table.SetOnBorrowReleased([&](const std::string& owner, const std::string& id) { released.emplace_back(owner, id); });
  table.AddPending("ret");
  table.AddRef("ret");
  table.Put("ret", Value{.data = "x", .format = "raw", .contained = {{"w1", "10.0.0.4:7000"}}});
  table.RemoveRef("ret");
  EXPECT_EQ(released, (std::vector<std::pair<std::string, std::string>>{{"10.0.0.4:7000", "w1"}}));
}

TEST(ObjectTableBoundTest, APutThatDoesNotFitIsRefusedAndFreeingMakesRoom) {
  ObjectTable table(100);
  ASSERT_TRUE(table.TryPut("a", Value{.data = std::string(60, 'x'), .format = "raw"}).ok());
  table.AddRef("a");
  const absl::Status full = table.TryPut("b", Value{.data = std::string(50, 'y'), .format = "raw"});
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(),
            "the object store of this process is full: it holds 60 of 100 bytes (object_store_memory) and a value of "
            "50 bytes does not fit; drop references to objects no longer needed, or give torus.init a larger "
            "object_store_memory");
  EXPECT_EQ(table.State("b"), ObjectState::kUnknown);
  EXPECT_EQ(table.bytes(), 60u);
  table.RemoveRef("a");
  EXPECT_EQ(table.bytes(), 0u);
  EXPECT_TRUE(table.TryPut("b", Value{.data = std::string(50, 'y'), .format = "raw"}).ok());
}

TEST(ObjectTableBoundTest, AReturnThatDoesNotFitBecomesTheStoreFullFailure) {
  ObjectTable table(100);
  table.AddPending("r");
  table.Put("r", Value{.data = std::string(101, 'x'), .format = "pickle5", .buffers = {}});
  auto v = table.Get("r");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->format, "object_store_full");
  EXPECT_EQ(v->data.rfind("the object store of this process is full: it holds 0 of 100 bytes", 0), 0u) << v->data;
  // Buffers count too.
  table.AddPending("s");
  table.Put("s", Value{.data = "x", .format = "pickle5", .buffers = {std::string(99, 'b')}});
  EXPECT_EQ(table.Get("s")->format, "object_store_full");
  EXPECT_EQ(ObjectTable().max_bytes(), 0u);  // unbounded by default
}

}  // namespace object_table_test
}  // namespace torus::core

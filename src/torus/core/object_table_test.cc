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

#include "torus/serve/route_table.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::serve {
namespace route_table_test {

using ::testing::ElementsAre;
using ::testing::Pair;
using Outcome = RouteTable::Outcome;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A deadline far enough off never to be reached by a test that passes.
int64_t Later() { return NowMs() + 60'000; }

ReplicaEndpoint Rep(const std::string& id, int port = 9000) { return {id, "127.0.0.1", port}; }

ServiceRoute Route(const std::string& name, const std::string& prefix, std::vector<ReplicaEndpoint> ready = {}) {
  ServiceRoute r;
  r.name = name;
  r.prefix = prefix;
  r.ready = std::move(ready);
  return r;
}

// Polls `done` until it holds or 10 s pass.
bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

int Queued(const RouteTable& t, const std::string& service) {
  auto load = t.Load();
  auto it = load.find(service);
  return it == load.end() ? -1 : it->second.queued;
}

TEST(RouteTableTest, MatchLongestPrefix) {
  RouteTable t;
  t.Set({Route("llm", "/llm"), Route("llm-v1", "/llm/v1"), Route("all", "/"), Route("img", "/img")});
  auto name = [&](absl::string_view path) {
    std::optional<ServiceRoute> r = t.Match(path);
    return r ? r->name : std::string("<none>");
  };
  EXPECT_EQ(name("/llm"), "llm");
  EXPECT_EQ(name("/llm/"), "llm");
  EXPECT_EQ(name("/llm/v2/chat"), "llm");
  EXPECT_EQ(name("/llm/v1"), "llm-v1");
  EXPECT_EQ(name("/llm/v1/chat"), "llm-v1");
  EXPECT_EQ(name("/llmx"), "all");
  EXPECT_EQ(name("/img/a.png"), "img");
  EXPECT_EQ(name("/"), "all");
  EXPECT_EQ(name("/other"), "all");
  EXPECT_THAT(t.Prefixes(), ElementsAre("/", "/img", "/llm", "/llm/v1"));

  // Without the catch-all, an unmatched path has no route.
  t.Set({Route("llm", "/llm"), Route("img", "/img")});
  EXPECT_EQ(name("/llmx"), "<none>");
  EXPECT_EQ(name("/"), "<none>");
  EXPECT_EQ(name("/img"), "img");
  EXPECT_THAT(t.Prefixes(), ElementsAre("/img", "/llm"));

  // The route comes back with its limits, without its replicas.
  ServiceRoute full = Route("llm", "/llm", {Rep("a")});
  full.request_timeout_ms = 1234;
  full.max_request_bytes = 99;
  full.max_queued_requests = 7;
  full.queue_timeout_ms = 55;
  t.Set({full});
  std::optional<ServiceRoute> r = t.Match("/llm/x");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->name, "llm");
  EXPECT_EQ(r->prefix, "/llm");
  EXPECT_TRUE(r->ready.empty());
  EXPECT_EQ(r->request_timeout_ms, 1234);
  EXPECT_EQ(r->max_request_bytes, 99);
  EXPECT_EQ(r->max_queued_requests, 7);
  EXPECT_EQ(r->queue_timeout_ms, 55);

  t.Set({});
  EXPECT_FALSE(t.Match("/llm").has_value());
  EXPECT_TRUE(t.Prefixes().empty());
}

TEST(RouteTableTest, AcquirePicksLeastInFlight) {
  RouteTable t;
  t.Set({Route("svc", "/svc", {Rep("a", 1), Rep("b", 2)})});
  RouteTable::Pick p1 = t.Acquire("svc", {}, Later());
  RouteTable::Pick p2 = t.Acquire("svc", {}, Later());
  ASSERT_EQ(p1.outcome, Outcome::kPicked);
  ASSERT_EQ(p2.outcome, Outcome::kPicked);
  EXPECT_NE(p1.replica.id, p2.replica.id);
  EXPECT_EQ(p1.replica, p1.replica.id == "a" ? Rep("a", 1) : Rep("b", 2));

  auto load = t.Load();
  EXPECT_EQ(load["svc"].in_flight, 2);
  EXPECT_THAT(load["svc"].replicas, ElementsAre(Pair("a", 1), Pair("b", 1)));

  // After one is released, the next goes to it.
  t.Release("svc", p1.replica.id);
  RouteTable::Pick p3 = t.Acquire("svc", {}, Later());
  ASSERT_EQ(p3.outcome, Outcome::kPicked);
  EXPECT_EQ(p3.replica.id, p1.replica.id);
  t.Release("svc", p2.replica.id);
  RouteTable::Pick p4 = t.Acquire("svc", {}, Later());
  EXPECT_EQ(p4.replica.id, p2.replica.id);

  load = t.Load();
  EXPECT_EQ(load["svc"].in_flight, 2);
  EXPECT_EQ(load["svc"].served[p1.replica.id], 2);
  EXPECT_EQ(load["svc"].served[p2.replica.id], 2);
  t.Release("svc", p3.replica.id);
  t.Release("svc", p4.replica.id);
  EXPECT_EQ(t.Load()["svc"].in_flight, 0);
  // Releasing an unknown replica or service changes nothing.
  t.Release("svc", "nope");
  t.Release("nope", "a");
  EXPECT_THAT(t.Load()["svc"].replicas, ElementsAre(Pair("a", 0), Pair("b", 0)));
}

TEST(RouteTableTest, AcquireSpreadsOverManyReplicas) {
  RouteTable t;
  t.Set({Route("svc", "/svc", {Rep("a"), Rep("b"), Rep("c"), Rep("d")})});
  std::set<std::string> picked;
  for (int i = 0; i < 4; ++i) {
    RouteTable::Pick p = t.Acquire("svc", {}, Later());
    ASSERT_EQ(p.outcome, Outcome::kPicked);
    picked.insert(p.replica.id);
  }
  EXPECT_EQ(picked, (std::set<std::string>{"a", "b", "c", "d"}));
}

TEST(RouteTableTest, ExcludeAndExhausted) {
  RouteTable t;
  t.Set({Route("svc", "/svc", {Rep("a"), Rep("b")})});
  RouteTable::Pick p = t.Acquire("svc", {"a"}, Later());
  ASSERT_EQ(p.outcome, Outcome::kPicked);
  EXPECT_EQ(p.replica.id, "b");
  // Excluded even when it has fewer in flight.
  p = t.Acquire("svc", {"a"}, Later());
  ASSERT_EQ(p.outcome, Outcome::kPicked);
  EXPECT_EQ(p.replica.id, "b");
  // Every READY replica excluded: no waiting, at once.
  p = t.Acquire("svc", {"a", "b"}, Later());
  EXPECT_EQ(p.outcome, Outcome::kExhausted);
  EXPECT_EQ(t.Load()["svc"].queued, 0);
  EXPECT_EQ(t.Load()["svc"].in_flight, 2);
}

TEST(RouteTableTest, GoneForUnknownService) {
  RouteTable t;
  EXPECT_EQ(t.Acquire("svc", {}, Later()).outcome, Outcome::kGone);
  t.Set({Route("other", "/other", {Rep("a")})});
  EXPECT_EQ(t.Acquire("svc", {}, Later()).outcome, Outcome::kGone);
}

TEST(RouteTableTest, QueuedRequestWokenByReadyReplica) {
  RouteTable t;
  t.Set({Route("svc", "/svc")});
  RouteTable::Pick pick;
  std::thread waiter([&] { pick = t.Acquire("svc", {}, Later()); });
  ASSERT_TRUE(WaitFor([&] { return Queued(t, "svc") == 1; }));
  EXPECT_EQ(t.Load()["svc"].in_flight, 0);
  t.Set({Route("svc", "/svc", {Rep("a")})});
  waiter.join();
  EXPECT_EQ(pick.outcome, Outcome::kPicked);
  EXPECT_EQ(pick.replica.id, "a");
  auto load = t.Load();
  EXPECT_EQ(load["svc"].queued, 0);
  EXPECT_EQ(load["svc"].in_flight, 1);
}

TEST(RouteTableTest, QueuedRequestStaysQueuedAcrossUnrelatedSet) {
  RouteTable t;
  t.Set({Route("svc", "/svc")});
  RouteTable::Pick pick;
  std::thread waiter([&] { pick = t.Acquire("svc", {}, Later()); });
  ASSERT_TRUE(WaitFor([&] { return Queued(t, "svc") == 1; }));
  // A change that brings no replica wakes it, and it waits again, still counted.
  t.Set({Route("svc", "/svc"), Route("other", "/other", {Rep("x")})});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(Queued(t, "svc"), 1);
  t.Set({Route("svc", "/svc", {Rep("a")})});
  waiter.join();
  EXPECT_EQ(pick.outcome, Outcome::kPicked);
  EXPECT_EQ(Queued(t, "svc"), 0);
}

TEST(RouteTableTest, QueueTimeout) {
  RouteTable t;
  t.Set({Route("svc", "/svc")});
  RouteTable::Pick p = t.Acquire("svc", {}, NowMs() + 50);
  EXPECT_EQ(p.outcome, Outcome::kTimedOut);
  EXPECT_EQ(Queued(t, "svc"), 0);
  // A deadline already past times out at once.
  p = t.Acquire("svc", {}, NowMs() - 1);
  EXPECT_EQ(p.outcome, Outcome::kTimedOut);
  EXPECT_EQ(Queued(t, "svc"), 0);
}

TEST(RouteTableTest, QueueFull) {
  RouteTable t;
  ServiceRoute r = Route("svc", "/svc");
  r.max_queued_requests = 0;
  t.Set({r});
  EXPECT_EQ(t.Acquire("svc", {}, Later()).outcome, Outcome::kQueueFull);
  EXPECT_EQ(Queued(t, "svc"), 0);

  // With room for one: the second is refused while the first waits.
  r.max_queued_requests = 1;
  t.Set({r});
  RouteTable::Pick first;
  std::thread waiter([&] { first = t.Acquire("svc", {}, Later()); });
  ASSERT_TRUE(WaitFor([&] { return Queued(t, "svc") == 1; }));
  EXPECT_EQ(t.Acquire("svc", {}, Later()).outcome, Outcome::kQueueFull);
  t.Stop();
  waiter.join();
  EXPECT_EQ(first.outcome, Outcome::kStopped);
}

TEST(RouteTableTest, StopWakesWaiters) {
  RouteTable t;
  t.Set({Route("svc", "/svc"), Route("ready", "/ready", {Rep("a")})});
  std::vector<RouteTable::Pick> picks(2);
  std::vector<std::thread> waiters;
  for (int i = 0; i < 2; ++i) waiters.emplace_back([&, i] { picks[i] = t.Acquire("svc", {}, Later()); });
  ASSERT_TRUE(WaitFor([&] { return Queued(t, "svc") == 2; }));
  t.Stop();
  for (std::thread& w : waiters) w.join();
  EXPECT_EQ(picks[0].outcome, Outcome::kStopped);
  EXPECT_EQ(picks[1].outcome, Outcome::kStopped);
  EXPECT_EQ(Queued(t, "svc"), 0);
  // Later ones too, even with a READY replica.
  EXPECT_EQ(t.Acquire("ready", {}, Later()).outcome, Outcome::kStopped);
}

TEST(RouteTableTest, InFlightKeptForReplicaThatStays) {
  RouteTable t;
  t.Set({Route("svc", "/svc", {Rep("a")})});
  ASSERT_EQ(t.Acquire("svc", {}, Later()).replica.id, "a");
  ASSERT_EQ(t.Acquire("svc", {}, Later()).replica.id, "a");
  t.Set({Route("svc", "/svc", {Rep("a"), Rep("b")})});
  auto load = t.Load();
  EXPECT_EQ(load["svc"].in_flight, 2);
  EXPECT_THAT(load["svc"].replicas, ElementsAre(Pair("a", 2), Pair("b", 0)));
  EXPECT_EQ(load["svc"].served["a"], 2);
  // The new one has fewer in flight: it gets the next two.
  EXPECT_EQ(t.Acquire("svc", {}, Later()).replica.id, "b");
  EXPECT_EQ(t.Acquire("svc", {}, Later()).replica.id, "b");
  t.Release("svc", "a");
  EXPECT_EQ(t.Acquire("svc", {}, Later()).replica.id, "a");
}

TEST(RouteTableTest, InFlightKeptForReplicaThatLeavesUntilReleased) {
  RouteTable t;
  t.Set({Route("svc", "/svc", {Rep("a"), Rep("b")})});
  RouteTable::Pick p = t.Acquire("svc", {"b"}, Later());
  ASSERT_EQ(p.replica.id, "a");
  t.Set({Route("svc", "/svc", {Rep("b")})});  // a is draining
  auto load = t.Load();
  EXPECT_EQ(load["svc"].in_flight, 1);
  EXPECT_THAT(load["svc"].replicas, ElementsAre(Pair("a", 1), Pair("b", 0)));
  // A draining replica gets nothing new.
  EXPECT_EQ(t.Acquire("svc", {}, Later()).replica.id, "b");
  EXPECT_EQ(t.Acquire("svc", {}, Later()).replica.id, "b");
  t.Release("svc", "a");
  load = t.Load();
  EXPECT_THAT(load["svc"].replicas, ElementsAre(Pair("b", 2)));
  EXPECT_EQ(load["svc"].in_flight, 2);
}

TEST(RouteTableTest, InFlightKeptForServiceThatGoes) {
  RouteTable t;
  t.Set({Route("svc", "/svc", {Rep("a")})});
  ASSERT_EQ(t.Acquire("svc", {}, Later()).outcome, Outcome::kPicked);
  t.Set({});
  EXPECT_FALSE(t.Match("/svc").has_value());
  EXPECT_TRUE(t.Prefixes().empty());
  EXPECT_EQ(t.Acquire("svc", {}, Later()).outcome, Outcome::kGone);
  auto load = t.Load();
  ASSERT_TRUE(load.contains("svc"));
  EXPECT_EQ(load["svc"].in_flight, 1);
  t.Release("svc", "a");
  EXPECT_EQ(t.Load()["svc"].in_flight, 0);
  t.Set({});
  EXPECT_FALSE(t.Load().contains("svc"));
}

TEST(RouteTableTest, FinishReleasesAndRecords) {
  RouteTable t;
  t.Set({Route("svc", "/svc", {Rep("a")})});
  ASSERT_EQ(t.Acquire("svc", {}, Later()).replica.id, "a");
  ASSERT_EQ(t.Acquire("svc", {}, Later()).replica.id, "a");
  t.Finish("svc", "a", 200, 0.002, true);
  EXPECT_EQ(t.Load()["svc"].in_flight, 1);
  ServiceCounters c = t.Counters()["svc"];
  EXPECT_THAT(c.responses, ElementsAre(Pair(200, 1)));
  EXPECT_EQ(c.latency_count, 1);
  EXPECT_EQ(c.latency_buckets[2], 1);  // (0.001, 0.0025]
  EXPECT_EQ(c.retries, 1);
  t.Finish("svc", "a", 500, 0.002, false);
  EXPECT_EQ(t.Load()["svc"].in_flight, 0);
  EXPECT_THAT(t.Counters()["svc"].responses, ElementsAre(Pair(200, 1), Pair(500, 1)));
}

// A request waiting for a replica of a service that is then deleted ends kGone and is no longer counted as
// queued. Disabled: RouteTable::Acquire returns kGone without unqueue(), so the count (and with it the deleted
// service's entry, kept while it has queued requests) stays for ever. See the report for the fix.
TEST(RouteTableTest, QueuedRequestOfDeletedServiceIsUncounted) {
  RouteTable t;
  t.Set({Route("svc", "/svc")});
  RouteTable::Pick pick;
  std::thread waiter([&] { pick = t.Acquire("svc", {}, Later()); });
  ASSERT_TRUE(WaitFor([&] { return Queued(t, "svc") == 1; }));
  t.Set({});
  waiter.join();
  EXPECT_EQ(pick.outcome, Outcome::kGone);
  EXPECT_LE(Queued(t, "svc"), 0);
  t.Set({});
  EXPECT_FALSE(t.Load().contains("svc"));
}

TEST(RouteTableTest, TryAcquirePicksWithoutWaiting) {
  RouteTable t;
  t.Set({Route("svc", "/svc", {Rep("a"), Rep("b")})});
  RouteTable::Pick p = t.TryAcquire("svc", {"a"}, false);
  ASSERT_EQ(p.outcome, Outcome::kPicked);
  EXPECT_EQ(p.replica.id, "b");
  EXPECT_EQ(t.Load()["svc"].in_flight, 1);
  EXPECT_EQ(t.TryAcquire("svc", {"a", "b"}, false).outcome, Outcome::kExhausted);
  EXPECT_EQ(t.TryAcquire("nope", {}, false).outcome, Outcome::kGone);
  EXPECT_EQ(Queued(t, "svc"), 0);
  t.Stop();
  EXPECT_EQ(t.TryAcquire("svc", {}, false).outcome, Outcome::kStopped);
}

TEST(RouteTableTest, TryAcquireCountsWaitersAsQueued) {
  RouteTable t;
  ServiceRoute r = Route("svc", "/svc");
  r.max_queued_requests = 2;
  t.Set({r});
  // No READY replica: kWait, counted once however often it tries again.
  EXPECT_EQ(t.TryAcquire("svc", {}, false).outcome, Outcome::kWait);
  EXPECT_EQ(t.TryAcquire("svc", {}, true).outcome, Outcome::kWait);
  EXPECT_EQ(Queued(t, "svc"), 1);
  EXPECT_EQ(t.TryAcquire("svc", {}, false).outcome, Outcome::kWait);
  EXPECT_EQ(Queued(t, "svc"), 2);
  // Full: a third is refused and not counted; one already waiting is never refused.
  EXPECT_EQ(t.TryAcquire("svc", {}, false).outcome, Outcome::kQueueFull);
  EXPECT_EQ(t.TryAcquire("svc", {}, true).outcome, Outcome::kWait);
  EXPECT_EQ(Queued(t, "svc"), 2);
  // One gives up (its queue timeout).
  t.Unqueue("svc");
  EXPECT_EQ(Queued(t, "svc"), 1);
  // A replica becomes READY: the waiter gets it and is no longer queued.
  r.ready = {Rep("a")};
  t.Set({r});
  RouteTable::Pick p = t.TryAcquire("svc", {}, true);
  ASSERT_EQ(p.outcome, Outcome::kPicked);
  EXPECT_EQ(p.replica.id, "a");
  auto load = t.Load();
  EXPECT_EQ(load["svc"].queued, 0);
  EXPECT_EQ(load["svc"].in_flight, 1);
  // The count never goes below zero.
  t.Unqueue("svc");
  EXPECT_EQ(Queued(t, "svc"), 0);
}

TEST(RouteTableTest, TryAcquireOfDeletedServiceUnqueues) {
  RouteTable t;
  t.Set({Route("svc", "/svc")});
  ASSERT_EQ(t.TryAcquire("svc", {}, false).outcome, Outcome::kWait);
  t.Set({});
  EXPECT_EQ(Queued(t, "svc"), 1);  // kept while it waits
  EXPECT_EQ(t.TryAcquire("svc", {}, true).outcome, Outcome::kGone);
  EXPECT_LE(Queued(t, "svc"), 0);
  t.Set({});
  EXPECT_FALSE(t.Load().contains("svc"));

  // Stopped while waiting: no longer queued either.
  t.Set({Route("svc", "/svc")});
  ASSERT_EQ(t.TryAcquire("svc", {}, false).outcome, Outcome::kWait);
  t.Stop();
  EXPECT_EQ(t.TryAcquire("svc", {}, true).outcome, Outcome::kStopped);
  EXPECT_EQ(Queued(t, "svc"), 0);
}

TEST(RouteTableTest, SubscribersHearOfSetAndStopUntilUnsubscribed) {
  RouteTable t;
  int a = 0;
  int b = 0;
  const int sa = t.Subscribe([&] { ++a; });
  const int sb = t.Subscribe([&] {
    ++b;
    t.Load();  // a subscriber may call into the table
  });
  EXPECT_NE(sa, sb);
  t.Set({Route("svc", "/svc")});
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  t.Unsubscribe(sa);
  t.Set({});
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  t.Stop();
  EXPECT_EQ(b, 3);
  t.Unsubscribe(sb);
  t.Unsubscribe(sb);  // twice: nothing
  t.Set({});
  EXPECT_EQ(b, 3);
}

// Unsubscribe waits for a call under way: once it returns, the callback's state may go.
TEST(RouteTableTest, UnsubscribeWaitsForRunningCallback) {
  RouteTable t;
  std::atomic<bool> entered{false};
  std::atomic<bool> release{false};
  std::atomic<bool> finished{false};
  const int id = t.Subscribe([&] {
    entered = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    finished = true;
  });
  std::thread setter([&] { t.Set({}); });
  ASSERT_TRUE(WaitFor([&] { return entered.load(); }));
  std::atomic<bool> unsubscribed{false};
  std::thread unsubscriber([&] {
    t.Unsubscribe(id);
    unsubscribed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(unsubscribed);
  release = true;
  unsubscriber.join();
  setter.join();
  EXPECT_TRUE(finished);
}

TEST(RouteTableTest, RecordCountsByStatusAndBucket) {
  RouteTable t;
  t.Record("svc", 200, 0.0007, false);  // bucket 1: (0.0005, 0.001]
  t.Record("svc", 200, 0.001, false);   // bucket 1: bounds are inclusive
  t.Record("svc", 200, 0.0, true);      // bucket 0
  t.Record("svc", 503, 0.3, false);     // bucket 9: (0.25, 0.5]
  t.Record("svc", 504, 100, true);      // +Inf
  t.Record("other", 404, 0.01, false);
  auto counters = t.Counters();
  ASSERT_TRUE(counters.contains("svc"));
  const ServiceCounters& c = counters["svc"];
  EXPECT_THAT(c.responses, ElementsAre(Pair(200, 3), Pair(503, 1), Pair(504, 1)));
  std::array<int64_t, kLatencyBounds.size() + 1> want{};
  want[0] = 1;
  want[1] = 2;
  want[9] = 1;
  want[kLatencyBounds.size()] = 1;
  EXPECT_EQ(c.latency_buckets, want);
  EXPECT_EQ(c.latency_count, 5);
  EXPECT_DOUBLE_EQ(c.latency_sum_s, 0.0007 + 0.001 + 0.3 + 100);
  EXPECT_EQ(c.retries, 2);
  EXPECT_THAT(counters["other"].responses, ElementsAre(Pair(404, 1)));
  EXPECT_EQ(counters["other"].latency_buckets[4], 1);  // (0.005, 0.01]
  EXPECT_EQ(counters["other"].retries, 0);
}

}  // namespace route_table_test
}  // namespace torus::serve

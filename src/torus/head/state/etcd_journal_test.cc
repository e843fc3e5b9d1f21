// EtcdJournal against a real etcd: its address form, ownership of the journal and fencing of a deposed head. (The
// journal contract itself is journal_test.cc's, with etcd among its kinds.)
#include "torus/head/state/etcd_journal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "torus/head/state/etcd_test_util.h"

namespace torus::head {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseEtcdTargetTest, TakesEndpointsAndAPrefix) {
  auto t = ParseEtcdTarget("etcd://h1:2379,10.0.0.2:2380/clusters/a/");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->endpoints, ElementsAre("h1:2379", "10.0.0.2:2380"));
  EXPECT_EQ(t->prefix, "/clusters/a");
  auto plain = ParseEtcdTarget("etcd://127.0.0.1:2379");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->prefix, "/torus");
}

TEST(ParseEtcdTargetTest, NamesWhatIsWrongAndTheForm) {
  const std::string form = "the form is etcd://HOST:PORT[,HOST:PORT...][/PREFIX]";
  EXPECT_EQ(ParseEtcdTarget("http://h:2379").status().message(), "--state-store 'http://h:2379': " + form);
  EXPECT_EQ(ParseEtcdTarget("etcd://h1:2379,h2").status().message(),
            "--state-store 'etcd://h1:2379,h2': endpoint 'h2' is not HOST:PORT; " + form);
  EXPECT_EQ(ParseEtcdTarget("etcd://h:99999").status().message(),
            "--state-store 'etcd://h:99999': endpoint 'h:99999' is not HOST:PORT; " + form);
  EXPECT_EQ(ParseEtcdTarget("etcd://:2379").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseEtcdTarget("etcd://h:2379//").status().message(),
            "--state-store 'etcd://h:2379//': an empty prefix; " + form);
}

class EtcdJournalTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(etcd_.error(), ""); }
  EtcdTarget Target(const std::string& prefix) {
    auto t = ParseEtcdTarget(etcd_.Url(prefix));
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  testutil::EtcdServer etcd_;
};

TEST_F(EtcdJournalTest, ASecondHeadIsRefusedWhileTheFirstHoldsTheJournalThenTakesItOver) {
  auto first = OpenEtcdJournal(Target("/c"));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Load().ok());
  ASSERT_TRUE((*first)->Append({"r1"}).ok());

  auto second = OpenEtcdJournal(Target("/c"));
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("the journal at " + etcd_.Url("/c") + " is held by "));
  EXPECT_THAT(second.status().message(), HasSubstr(" pid " + std::to_string(getpid()) + " id "));
  // Another prefix is another journal.
  EXPECT_TRUE(OpenEtcdJournal(Target("/other")).ok());

  first->reset();  // a head that stops gives the journal up at once
  auto third = OpenEtcdJournal(Target("/c"));
  ASSERT_TRUE(third.ok()) << third.status();
  auto loaded = (*third)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(loaded->records, ElementsAre("r1"));
}

TEST_F(EtcdJournalTest, AHeadWhoseLeaseRanOutWritesNothingOnceAnotherTookTheJournal) {
  auto first = OpenEtcdJournal(Target("/c"), {.lease_ttl = std::chrono::seconds(60)});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Load().ok());
  ASSERT_TRUE((*first)->Append({"before"}).ok());
  // Its lease ends as if it had stalled past the TTL: every lease of the member goes.
  auto leases = nlohmann::json::parse(etcd_.Post("lease/leases", "{}"));
  ASSERT_FALSE(leases.value("leases", nlohmann::json::array()).empty()) << leases.dump();
  for (const auto& l : leases["leases"]) etcd_.Post("lease/revoke", nlohmann::json{{"ID", l["ID"]}}.dump());

  auto second = OpenEtcdJournal(Target("/c"));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE((*second)->Load().ok());
  ASSERT_TRUE((*second)->Append({"from the new head"}).ok());

  absl::Status stale = (*first)->Append({"from the old head"});
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.message(), HasSubstr("this head no longer holds the journal at " + etcd_.Url("/c")));
  EXPECT_EQ((*first)->Compact("old snapshot", (*first)->position()).code(), absl::StatusCode::kFailedPrecondition);

  second->reset();
  auto third = OpenEtcdJournal(Target("/c"));
  ASSERT_TRUE(third.ok()) << third.status();
  auto loaded = (*third)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->snapshot.has_value());
  EXPECT_THAT(loaded->records, ElementsAre("before", "from the new head"));
}

TEST_F(EtcdJournalTest, AStandbyWaitsUntilTheHolderLetsGo) {
  EXPECT_TRUE(WaitForJournalRelease(Target("/w"), std::chrono::seconds(1)).ok());  // nobody holds it
  auto holder = OpenEtcdJournal(Target("/w"));
  ASSERT_TRUE(holder.ok()) << holder.status();
  EXPECT_EQ(WaitForJournalRelease(Target("/w"), std::chrono::milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread stop([&holder] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    holder->reset();  // revokes its lease: the owner key goes
  });
  absl::Status released = WaitForJournalRelease(Target("/w"), std::chrono::seconds(30));
  stop.join();
  EXPECT_TRUE(released.ok()) << released;
  EXPECT_TRUE(OpenEtcdJournal(Target("/w")).ok());
}

TEST_F(EtcdJournalTest, AnEndpointThatDoesNotAnswerGivesWayToTheNext) {
  const std::string dead = "127.0.0.1:" + std::to_string(testutil::EtcdServer::FreePort());
  auto target = ParseEtcdTarget("etcd://" + dead + "," + etcd_.endpoint() + "/c");
  ASSERT_TRUE(target.ok());
  auto journal = OpenEtcdJournal(*target);
  ASSERT_TRUE(journal.ok()) << journal.status();
  ASSERT_TRUE((*journal)->Load().ok());
  EXPECT_TRUE((*journal)->Append({"r"}).ok());
  EXPECT_EQ((*journal)->location(), "etcd://" + dead + "," + etcd_.endpoint() + "/c");

  auto none = ParseEtcdTarget("etcd://" + dead + "/c");
  ASSERT_TRUE(none.ok());
  auto refused = OpenEtcdJournal(*none, {.request_timeout = std::chrono::milliseconds(500)});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(), HasSubstr("no etcd endpoint answered lease/grant (" + dead + ": "));
}

// Polls `done` every 50 ms for up to `limit`; whether it came true.
template <typename F>
bool Eventually(F done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

TEST(EtcdQuorumTest, WritesGoOnWithOneOfThreeMembersLostWaitWithTwoAndResumeWhenOneIsBack) {
  testutil::EtcdServer etcd(3);
  ASSERT_EQ(etcd.error(), "");
  auto target = ParseEtcdTarget("etcd://" + absl::StrJoin(etcd.endpoints(), ",") + "/q");
  ASSERT_TRUE(target.ok()) << target.status();
  std::atomic<bool> lost{false};
  auto journal = OpenEtcdJournal(*target, {.lease_ttl = std::chrono::seconds(20),
                                           .request_timeout = std::chrono::milliseconds(2000),
                                           .on_lost = [&lost](const std::string&) { lost = true; }});
  ASSERT_TRUE(journal.ok()) << journal.status();
  ASSERT_TRUE((*journal)->Load().ok());
  ASSERT_TRUE((*journal)->Append({"r1"}).ok());

  etcd.Kill(0);  // the member the journal was talking to
  absl::Status one_lost = (*journal)->Append({"r2"});
  EXPECT_TRUE(one_lost.ok()) << one_lost;
  EXPECT_TRUE((*journal)->Writable().ok());

  etcd.Kill(1);  // no quorum: nothing can commit, and nobody can take the journal either
  absl::Status appended = absl::UnknownError("not returned");
  std::atomic<bool> returned{false};
  std::thread writer([&] {
    appended = (*journal)->Append({"r3"});
    returned = true;
  });
  // The append waits; meanwhile the journal says why changes cannot be made.
  EXPECT_TRUE(Eventually([&] { return !(*journal)->Writable().ok(); }, std::chrono::seconds(30)));
  absl::Status writable = (*journal)->Writable();
  EXPECT_EQ(writable.code(), absl::StatusCode::kUnavailable) << writable;
  EXPECT_THAT(writable.message(), HasSubstr("the journal at " + target->url + " cannot commit now ("));
  EXPECT_THAT(writable.message(), HasSubstr("changes are refused until etcd has a quorum again"));
  EXPECT_FALSE(returned);

  etcd.Restart(1);
  ASSERT_EQ(etcd.error(), "");
  writer.join();
  EXPECT_TRUE(appended.ok()) << appended;
  EXPECT_TRUE((*journal)->Writable().ok());
  absl::Status back = (*journal)->Append({"r4"});
  EXPECT_TRUE(back.ok()) << back;
  EXPECT_FALSE(lost);

  journal->reset();
  auto again = OpenEtcdJournal(*target);
  ASSERT_TRUE(again.ok()) << again.status();
  auto loaded = (*again)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(loaded->records, ElementsAre("r1", "r2", "r3", "r4"));
}

TEST(EtcdQuorumTest, AHeadKeepsTheJournalPastItsLeaseWhileEtcdHasNoQuorumButNotWhileNoMemberAnswers) {
  testutil::EtcdServer etcd(3);
  ASSERT_EQ(etcd.error(), "");
  auto target = ParseEtcdTarget("etcd://" + absl::StrJoin(etcd.endpoints(), ",") + "/k");
  ASSERT_TRUE(target.ok()) << target.status();
  std::atomic<bool> lost{false};
  auto journal = OpenEtcdJournal(*target, {.lease_ttl = std::chrono::seconds(2),
                                           .request_timeout = std::chrono::milliseconds(1000),
                                           .on_lost = [&lost](const std::string&) { lost = true; }});
  ASSERT_TRUE(journal.ok()) << journal.status();
  ASSERT_TRUE((*journal)->Load().ok());

  etcd.Kill(0);
  etcd.Kill(1);
  // Unrenewed past its TTL, with the last member answering that it cannot commit: it stays, refusing changes.
  EXPECT_TRUE(Eventually([&] { return !(*journal)->Writable().ok(); }, std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_FALSE(lost);
  EXPECT_EQ((*journal)->Writable().code(), absl::StatusCode::kUnavailable);

  etcd.Restart(0);  // a quorum again: the lease is renewed, and changes are made
  ASSERT_EQ(etcd.error(), "");
  EXPECT_TRUE(Eventually([&] { return (*journal)->Writable().ok(); }, std::chrono::seconds(30)))
      << (*journal)->Writable();
  EXPECT_TRUE((*journal)->Append({"after"}).ok());
  EXPECT_FALSE(lost);

  // Cut off from every member (as a partitioned head is): another head may lead by now, so this one lets go.
  etcd.Kill(0);
  etcd.Kill(2);
  EXPECT_TRUE(Eventually([&] { return lost.load(); }, std::chrono::seconds(20)));
  EXPECT_EQ((*journal)->Writable().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace torus::head

#include "torus/head/state/state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "torus/head/state/codec.h"
#include "torus/head/state/journal_test_util.h"

namespace torus::head {
namespace state_store_test {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testutil::SharedJournal;
using testutil::TempDir;

constexpr int64_t kStartMs = 1'733'050'000'000;

// A journal whose appends fail, as a full disk would.
class BrokenJournal final : public Journal {
 public:
  absl::StatusOr<Contents> Load() override { return Contents{}; }
  absl::Status Append(const std::vector<std::string>&) override { return absl::UnavailableError("disk full"); }
  uint64_t position() const override { return 0; }
  absl::Status Compact(const std::string&, uint64_t) override { return absl::UnavailableError("disk full"); }
  uint64_t records_since_snapshot() const override { return 0; }
  std::string location() const override { return "broken"; }
};


NodeRegistered Reg(const std::string& id, uint64_t incarnation) {
  NodeRegistered r;
  r.info.node_id = id;
  r.info.address = "10.0.0.1";
  r.info.total.Set("CPU", 8);
  r.incarnation = incarnation;
  r.wall_ms = kStartMs + 1;
  return r;
}

Job MakeJob(const std::string& id) {
  Job j;
  j.id = JobId(id);
  j.request.entrypoint = "echo hi";
  j.request.submission_id = id;
  return j;
}

std::vector<std::string> Encoded(const std::vector<Record>& records) {
  std::vector<std::string> out;
  for (const Record& r : records) out.push_back(StateCodec::EncodeRecord(r));
  return out;
}

std::vector<std::string> Names(const std::vector<Record>& records) {
  std::vector<std::string> out;
  for (const Record& r : records) out.emplace_back(RecordName(r));
  return out;
}

// `state` with HeadStarted{epoch} applied: what a head that reopens `state` serves.
std::string WithEpoch(const std::string& state, uint64_t epoch, int64_t wall_ms) {
  auto decoded = StateCodec::DecodeState(state);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  if (!decoded.ok()) return "";
  EXPECT_TRUE(decoded->Apply(HeadStarted{epoch, wall_ms}).ok());
  return StateCodec::EncodeState(*decoded);
}

TEST(StateStoreTest, OpenOnAnEmptyJournalStartsEpochOne) {
  std::unique_ptr<Journal> journal = NewMemoryJournal();
  StateStore store(std::make_unique<SharedJournal>(journal.get()), kStartMs, {});
  auto recovery = store.Open();
  ASSERT_TRUE(recovery.ok()) << recovery.status();
  EXPECT_FALSE(recovery->snapshot);
  EXPECT_EQ(recovery->records, 0u);
  EXPECT_EQ(recovery->epoch, 1u);
  EXPECT_EQ(store.Read([](const ClusterState& s) { return s.epoch(); }), 1u);
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok());
  EXPECT_THAT(contents->records, ElementsAre(StateCodec::EncodeRecord(HeadStarted{1, kStartMs})));
  EXPECT_EQ(store.journal_location(), "in memory");
}

TEST(StateStoreTest, ReopeningTheJournalRestoresTheStateInTheNextEpoch) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string dir = tmp.path() + "/state";
  std::string before;
  {
    auto journal = OpenSqliteJournal(dir, JournalSync::kNormal);
    ASSERT_TRUE(journal.ok()) << journal.status();
    StateStore store(*std::move(journal), kStartMs, {});
    ASSERT_TRUE(store.Open().ok());
    store.Update([](Txn& txn) {
      ASSERT_TRUE(txn.Apply(Reg("a", 1)).ok());
      ASSERT_TRUE(txn.Apply(JobSubmitted{MakeJob("j1")}).ok());
    });
    store.Update([](Txn& txn) { ASSERT_TRUE(txn.Apply(JobStopRequested{JobId("j1")}).ok()); });
    before = store.EncodedState();
    EXPECT_EQ(store.journal_location(), dir + "/journal.db");
  }
  auto journal = OpenSqliteJournal(dir, JournalSync::kNormal);
  ASSERT_TRUE(journal.ok()) << journal.status();
  StateStore store(*std::move(journal), kStartMs + 500, {});
  auto recovery = store.Open();
  ASSERT_TRUE(recovery.ok()) << recovery.status();
  EXPECT_FALSE(recovery->snapshot);
  EXPECT_EQ(recovery->records, 4u);  // HeadStarted, and the three records of the two updates
  EXPECT_EQ(recovery->epoch, 2u);
  EXPECT_EQ(store.EncodedState(), WithEpoch(before, 2, kStartMs + 500));
  EXPECT_TRUE(store.Read([](const ClusterState& s) { return s.FindJob(JobId("j1"))->stop_requested; }));
}

// A record with text that is not UTF-8 is applied as the journal holds it, so the live state and the replayed one
// find the same job.
TEST(StateStoreTest, TextThatIsNotUtf8IsAppliedAsTheJournalWillReplayIt) {
  std::unique_ptr<Journal> journal = NewMemoryJournal();
  const std::string as_written = "j\xEF\xBF\xBD";
  {
    StateStore store(std::make_unique<SharedJournal>(journal.get()), kStartMs, {});
    ASSERT_TRUE(store.Open().ok());
    store.Update([](Txn& txn) { ASSERT_TRUE(txn.Apply(JobSubmitted{MakeJob("j\xff")}).ok()); });
    EXPECT_TRUE(store.Read([&](const ClusterState& s) { return s.FindJob(JobId(as_written)) != nullptr; }));
    EXPECT_FALSE(store.Read([](const ClusterState& s) { return s.FindJob(JobId("j\xff")) != nullptr; }));
  }
  StateStore replayed(std::make_unique<SharedJournal>(journal.get()), kStartMs, {});
  ASSERT_TRUE(replayed.Open().ok());
  EXPECT_TRUE(replayed.Read([&](const ClusterState& s) { return s.FindJob(JobId(as_written)) != nullptr; }));
}

TEST(StateStoreTest, CompactsOnceEnoughRecordsPassTheSnapshot) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string dir = tmp.path() + "/state";
  std::string before;
  {
    auto opened = OpenSqliteJournal(dir, JournalSync::kNormal);
    ASSERT_TRUE(opened.ok()) << opened.status();
    std::unique_ptr<Journal> journal = *std::move(opened);
    StateStore store(std::make_unique<SharedJournal>(journal.get()), kStartMs, {.compact_after = 5});
    ASSERT_TRUE(store.Open().ok());  // 1 record
    store.Update([](Txn& txn) {
      for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(txn.Apply(Reg(id, 1)).ok());
    });
    EXPECT_EQ(journal->records_since_snapshot(), 4u);
    store.Update([](Txn& txn) { ASSERT_TRUE(txn.Apply(JobSubmitted{MakeJob("j1")}).ok()); });  // 5: compacts
    store.WaitCompacted();
    EXPECT_EQ(journal->records_since_snapshot(), 0u);
    before = store.EncodedState();
  }
  {
    auto journal = OpenSqliteJournal(dir, JournalSync::kNormal);
    ASSERT_TRUE(journal.ok()) << journal.status();
    auto contents = (*journal)->Load();
    ASSERT_TRUE(contents.ok()) << contents.status();
    EXPECT_EQ(contents->snapshot, before);
    EXPECT_THAT(contents->records, IsEmpty());
  }
  auto journal = OpenSqliteJournal(dir, JournalSync::kNormal);
  ASSERT_TRUE(journal.ok()) << journal.status();
  StateStore store(*std::move(journal), kStartMs + 500, {.compact_after = 5});
  auto recovery = store.Open();
  ASSERT_TRUE(recovery.ok()) << recovery.status();
  EXPECT_TRUE(recovery->snapshot);
  EXPECT_EQ(recovery->records, 0u);
  EXPECT_EQ(recovery->epoch, 2u);
  EXPECT_EQ(store.EncodedState(), WithEpoch(before, 2, kStartMs + 500));
  EXPECT_EQ(store.Read([](const ClusterState& s) { return s.alive_nodes(); }), 3u);
}

TEST(StateStoreTest, CommitsDuringACompactionStayInTheJournalAfterTheSnapshot) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string dir = tmp.path() + "/state";
  constexpr int kThreads = 4;
  constexpr int kEach = 150;
  std::string after;
  {
    auto journal = OpenSqliteJournal(dir, JournalSync::kNormal);
    ASSERT_TRUE(journal.ok()) << journal.status();
    StateStore store(*std::move(journal), kStartMs, {.compact_after = 40});
    ASSERT_TRUE(store.Open().ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          const std::string id = "n" + std::to_string(t) + "-" + std::to_string(i);
          store.Update([&](Txn& txn) {
            ASSERT_TRUE(txn.Apply(Reg(id, 1)).ok());
            ASSERT_TRUE(txn.Apply(JobSubmitted{MakeJob("j-" + id)}).ok());
          });
        }
      });
    }
    for (std::thread& th : threads) th.join();
    store.WaitCompacted();
    after = store.EncodedState();
  }
  auto journal = OpenSqliteJournal(dir, JournalSync::kNormal);
  ASSERT_TRUE(journal.ok()) << journal.status();
  StateStore store(*std::move(journal), kStartMs + 500, {.compact_after = 40});
  auto recovery = store.Open();
  ASSERT_TRUE(recovery.ok()) << recovery.status();
  EXPECT_TRUE(recovery->snapshot);
  EXPECT_LT(recovery->records, 2u * kThreads * kEach);  // some are in the snapshot
  EXPECT_EQ(store.EncodedState(), WithEpoch(after, 2, kStartMs + 500));
  EXPECT_EQ(store.Read([](const ClusterState& s) { return s.jobs().size(); }), size_t{kThreads * kEach});
}

TEST(StateStoreTest, UpdateReturnsWhatItsFunctionReturns) {
  StateStore store(NewMemoryJournal(), kStartMs, {});
  ASSERT_TRUE(store.Open().ok());
  const size_t seen = store.Update([](Txn& txn) {
    EXPECT_TRUE(txn.Apply(Reg("a", 1)).ok());
    EXPECT_TRUE(txn.Apply(Reg("b", 2)).ok());
    // Later logic in the transaction sees what it applied.
    EXPECT_EQ(txn.state().alive_nodes(), 2u);
    return txn.records().size();
  });
  EXPECT_EQ(seen, 2u);
  const std::string none = store.Update([](Txn&) { return std::string("nothing applied"); });
  EXPECT_EQ(none, "nothing applied");
  EXPECT_EQ(store.Read([](const ClusterState& s) { return s.last_incarnation(); }), 2u);
}

TEST(StateStoreTest, RefusedRecordIsNeitherAppliedNorJournaled) {
  std::unique_ptr<Journal> journal = NewMemoryJournal();
  StateStore store(std::make_unique<SharedJournal>(journal.get()), kStartMs, {});
  ASSERT_TRUE(store.Open().ok());
  const std::string before = store.EncodedState();
  const absl::Status refused = store.Update([](Txn& txn) {
    EXPECT_TRUE(txn.Apply(Reg("a", 1)).ok());
    absl::Status st = txn.Apply(NodeDied{NodeId("ghost"), 1, "gone", kStartMs});
    EXPECT_EQ(txn.records().size(), 1u);
    return st;
  });
  EXPECT_EQ(refused.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(refused.message(), "NodeDied: unknown node ghost");
  EXPECT_EQ(store.Read([](const ClusterState& s) { return s.nodes().size(); }), 1u);
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok());
  EXPECT_THAT(contents->records,
              ElementsAre(StateCodec::EncodeRecord(HeadStarted{1, kStartMs}), StateCodec::EncodeRecord(Reg("a", 1))));
  auto expected = StateCodec::DecodeState(before);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(expected->Apply(Reg("a", 1)).ok());
  EXPECT_EQ(store.EncodedState(), StateCodec::EncodeState(*expected));
}

TEST(StateStoreTest, SubscribersGetEveryCommittedBatchInOrderOnTheDispatchThread) {
  StateStore store(NewMemoryJournal(), kStartMs, {});
  ASSERT_TRUE(store.Open().ok());  // before dispatch starts: not delivered
  absl::Mutex mu;
  std::vector<std::vector<std::string>> first, second;
  std::vector<std::thread::id> threads;
  store.Subscribe([&](const std::vector<Record>& batch) {
    absl::MutexLock lock(&mu);
    first.push_back(Names(batch));
    threads.push_back(std::this_thread::get_id());
  });
  store.Subscribe([&](const std::vector<Record>& batch) {
    absl::MutexLock lock(&mu);
    second.push_back(Names(batch));
  });
  store.StartDispatch();
  store.Update([](Txn& txn) {
    ASSERT_TRUE(txn.Apply(Reg("a", 1)).ok());
    ASSERT_TRUE(txn.Apply(JobSubmitted{MakeJob("j1")}).ok());
  });
  store.Update([](Txn&) {});  // nothing applied: nothing published
  for (int i = 0; i < 20; ++i) {
    store.Update([](Txn& txn) { ASSERT_TRUE(txn.Apply(JobStopRequested{JobId("j1")}).ok()); });
  }
  store.Update([](Txn& txn) { ASSERT_TRUE(txn.Apply(NodeDied{NodeId("a"), 1, "gone", kStartMs}).ok()); });
  store.WaitDelivered();

  absl::MutexLock lock(&mu);
  ASSERT_EQ(first.size(), 22u);
  EXPECT_THAT(first.front(), ElementsAre("NodeRegistered", "JobSubmitted"));
  for (size_t i = 1; i <= 20; ++i) EXPECT_THAT(first[i], ElementsAre("JobStopRequested"));
  EXPECT_THAT(first.back(), ElementsAre("NodeDied"));
  EXPECT_EQ(second, first);
  for (const std::thread::id& id : threads) {
    EXPECT_NE(id, std::this_thread::get_id());
    EXPECT_EQ(id, threads.front());
  }
}

// A journal that takes its time over each write and remembers what it holds, as the test sees it.
class SlowJournal final : public Journal {
 public:
  explicit SlowJournal(Journal* inner) : inner_(inner) {}
  absl::StatusOr<Contents> Load() override { return inner_->Load(); }
  absl::Status Append(const std::vector<std::string>& records) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    absl::Status st = inner_->Append(records);
    absl::MutexLock lock(&mu_);
    ++appends_;
    written_.insert(records.begin(), records.end());
    return st;
  }
  uint64_t position() const override { return inner_->position(); }
  absl::Status Compact(const std::string& snapshot, uint64_t through) override {
    return inner_->Compact(snapshot, through);
  }
  uint64_t records_since_snapshot() const override { return inner_->records_since_snapshot(); }
  std::string location() const override { return inner_->location(); }

  bool Holds(const std::string& record) {
    absl::MutexLock lock(&mu_);
    return written_.count(record) > 0;
  }
  int appends() {
    absl::MutexLock lock(&mu_);
    return appends_;
  }

 private:
  Journal* inner_;
  absl::Mutex mu_;
  std::set<std::string> written_ ABSL_GUARDED_BY(mu_);
  int appends_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(StateStoreTest, ConcurrentUpdatesShareJournalWritesAndEachReturnsOnceItsRecordsAreIn) {
  std::unique_ptr<Journal> journal = NewMemoryJournal();
  auto slow = std::make_unique<SlowJournal>(journal.get());
  SlowJournal* watch = slow.get();
  StateStore store(std::move(slow), kStartMs, {});
  ASSERT_TRUE(store.Open().ok());
  std::atomic<int> published_before_durable{0};
  std::atomic<int> published{0};
  store.Subscribe([&](const std::vector<Record>& batch) {
    for (const Record& r : batch) {
      if (!watch->Holds(StateCodec::EncodeRecord(r))) ++published_before_durable;
      ++published;
    }
  });
  store.StartDispatch();

  constexpr int kThreads = 8;
  constexpr int kEach = 25;
  std::atomic<int> returned_before_durable{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const NodeRegistered reg = Reg("n" + std::to_string(t) + "-" + std::to_string(i), 1);
        store.Update([&](Txn& txn) { ASSERT_TRUE(txn.Apply(reg).ok()); });
        if (!watch->Holds(StateCodec::EncodeRecord(reg))) ++returned_before_durable;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  store.WaitDelivered();

  EXPECT_EQ(returned_before_durable.load(), 0);
  EXPECT_EQ(published_before_durable.load(), 0);
  EXPECT_EQ(published.load(), kThreads * kEach);
  // Transactions that committed while a write was under way went in together.
  EXPECT_LT(watch->appends(), kThreads * kEach);
  // The journal holds them in the order they were applied: replaying it gives the state the store serves.
  auto contents = journal->Load();
  ASSERT_TRUE(contents.ok());
  EXPECT_EQ(contents->records.size(), 1u + kThreads * kEach);
  ClusterState replayed;
  for (const std::string& line : contents->records) {
    auto record = StateCodec::DecodeRecord(line);
    ASSERT_TRUE(record.ok()) << record.status();
    ASSERT_TRUE(replayed.Apply(*record).ok());
  }
  EXPECT_EQ(StateCodec::EncodeState(replayed), store.EncodedState());
}

TEST(StateStoreTest, StopDispatchDeliversWhatIsQueued) {
  StateStore store(NewMemoryJournal(), kStartMs, {});
  ASSERT_TRUE(store.Open().ok());
  std::atomic<int> delivered{0};
  store.Subscribe([&](const std::vector<Record>& batch) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    delivered += static_cast<int>(batch.size());
  });
  store.StartDispatch();
  for (int i = 0; i < 10; ++i) {
    store.Update([&](Txn& txn) { ASSERT_TRUE(txn.Apply(Reg("n" + std::to_string(i), 1)).ok()); });
  }
  store.StopDispatch();
  EXPECT_EQ(delivered.load(), 10);
}

TEST(StateStoreTest, OpenRefusesAJournalThatDoesNotReplay) {
  struct Case {
    std::string name;
    std::optional<std::string> snapshot;
    std::vector<std::string> records;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"record does not apply", std::nullopt,
       Encoded({HeadStarted{1, kStartMs}, Reg("a", 1), NodeDied{NodeId("ghost"), 1, "gone", kStartMs}}),
       "in memory: record 3 after the snapshot: NodeDied: unknown node ghost"},
      {"record is not JSON",
       std::nullopt,
       {"{not json"},
       "in memory: record 1 after the snapshot: record: not a JSON object"},
      {"record of unknown type",
       std::nullopt,
       {StateCodec::EncodeRecord(HeadStarted{1, kStartMs}), R"({"type":"Nope"})"},
       "in memory: record 2 after the snapshot: record: unknown type \"Nope\""},
      {"snapshot is not JSON", "garbage", {}, "in memory: snapshot: snapshot: not a JSON object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<Journal> journal = NewMemoryJournal();
    if (c.snapshot) {
      ASSERT_TRUE(journal->Compact(*c.snapshot, journal->position()).ok());
    }
    ASSERT_TRUE(journal->Append(c.records).ok());
    StateStore store(std::move(journal), kStartMs, {});
    auto recovery = store.Open();
    EXPECT_EQ(recovery.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(recovery.status().message(), c.message);
  }
}

TEST(StateStoreDeathTest, AJournalThatCannotBeWrittenStopsTheHead) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        StateStore store(std::make_unique<BrokenJournal>(), kStartMs, {});
        store.Open().IgnoreError();
      },
      "");
}

}  // namespace state_store_test
}  // namespace torus::head

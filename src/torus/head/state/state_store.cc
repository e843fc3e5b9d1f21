#include "torus/head/state/state_store.h"

#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/head/state/codec.h"

namespace torus::head {

absl::Status Txn::Apply(Record record) {
  std::optional<std::string> text = StateCodec::EncodeRecordExact(record);
  if (!text) {
    text = StateCodec::EncodeRecord(record);
    auto as_journaled = StateCodec::DecodeRecord(*text);
    if (!as_journaled.ok()) return as_journaled.status();
    record = *std::move(as_journaled);
  }
  absl::Status applied = state_.Apply(record);
  if (!applied.ok()) {
    spdlog::error("state: refused {}: {}", RecordName(record), std::string(applied.message()));
    return applied;
  }
  records_.push_back(std::move(record));
  encoded_.push_back(*std::move(text));
  return absl::OkStatus();
}

StateStore::StateStore(std::unique_ptr<Journal> journal, int64_t wall_ms_now, Options options)
    : options_(options), start_wall_ms_(wall_ms_now), journal_(std::move(journal)), journal_view_(journal_.get()) {}

StateStore::~StateStore() {
  WaitCompacted();
  {
    absl::MutexLock lock(&compact_mu_);
    if (compactor_.joinable()) compactor_.join();
  }
  StopDispatch();
}

absl::StatusOr<StateStore::Recovery> StateStore::Open() {
  const auto start = std::chrono::steady_clock::now();
  Recovery recovery;
  {
    absl::MutexLock lock(&mu_);
    absl::MutexLock io(&io_mu_);
    auto contents = journal_->Load();
    if (!contents.ok()) return contents.status();
    if (contents->snapshot) {
      auto restored = StateCodec::DecodeState(*contents->snapshot);
      if (!restored.ok()) {
        return absl::DataLossError(absl::StrCat(journal_->location(), ": snapshot: ", restored.status().message()));
      }
      state_ = *std::move(restored);
      recovery.snapshot = true;
    }
    // Decoded in parallel, applied in order.
    std::vector<absl::StatusOr<Record>> decoded(contents->records.size(), absl::UnknownError("not decoded"));
    ParallelFor(decoded.size(), [&](size_t i) { decoded[i] = StateCodec::DecodeRecord(contents->records[i]); });
    for (size_t i = 0; i < decoded.size(); ++i) {
      const absl::StatusOr<Record>& record = decoded[i];
      absl::Status applied = record.ok() ? state_.Apply(*record) : record.status();
      if (!applied.ok()) {
        return absl::DataLossError(absl::StrCat(journal_->location(), ": record ", i + 1, " after the snapshot: ",
                                                applied.message()));
      }
    }
    recovery.records = contents->records.size();
  }
  recovery.epoch = Update([this](Txn& txn) {
    const uint64_t epoch = txn.state().epoch() + 1;
    txn.Apply(HeadStarted{epoch, start_wall_ms_}).IgnoreError();
    return epoch;
  });
  recovery.micros =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
  return recovery;
}

uint64_t StateStore::StageLocked(Txn& txn) {
  if (txn.records_.empty()) return 0;
  absl::MutexLock lock(&stage_mu_);
  const uint64_t seq = ++staged_seq_;
  staged_.push_back({seq, std::move(txn.encoded_), std::move(txn.records_)});
  return seq;
}

void StateStore::WaitDurable(uint64_t seq) {
  bool compact = false;
  {
    absl::MutexLock lock(&stage_mu_);
    while (durable_seq_ < seq) {
      if (writing_) {
        stage_cv_.Wait(&stage_mu_);
        continue;
      }
      // Nobody writes: this thread writes what is staged, its own transaction and everyone else's.
      writing_ = true;
      stage_mu_.Unlock();
      {
        absl::MutexLock io(&io_mu_);
        FlushLocked();
        compact = journal_->records_since_snapshot() >= options_.compact_after;
      }
      stage_mu_.Lock();
      writing_ = false;
      stage_cv_.SignalAll();
    }
  }
  if (compact) StartCompaction();
}

void StateStore::FlushLocked() {
  std::deque<Staged> batch;
  {
    absl::MutexLock lock(&stage_mu_);
    batch.swap(staged_);
  }
  if (batch.empty()) return;
  std::vector<std::string> encoded;
  for (Staged& s : batch) {
    for (std::string& e : s.encoded) encoded.push_back(std::move(e));
  }
  absl::Status appended = journal_->Append(encoded);
  if (!appended.ok()) {
    // The state already holds these records; serving it would acknowledge what a restart would not find.
    spdlog::critical("{}; the head stops so that no acknowledged change is lost", std::string(appended.message()));
    std::abort();
  }
  {
    absl::MutexLock lock(&stage_mu_);
    durable_seq_ = std::max(durable_seq_, batch.back().seq);
  }
  // Published in sequence order: writes happen one at a time (io_mu_).
  absl::MutexLock queue_lock(&queue_mu_);
  for (Staged& s : batch) {
    ++committed_batches_;
    if (dispatching_) {
      queue_.push_back(std::move(s.records));
    } else {
      ++delivered_batches_;  // nobody listens yet (replay, start-up)
    }
  }
  queue_cv_.SignalAll();
}

void StateStore::StartCompaction() {
  absl::MutexLock lock(&compact_mu_);
  if (compacting_) return;
  compacting_ = true;
  if (compactor_.joinable()) compactor_.join();  // the last one, finished
  compactor_ = std::thread([this] {
    Compact();
    absl::MutexLock done(&compact_mu_);
    compacting_ = false;
    compact_cv_.SignalAll();
  });
}

void StateStore::WaitCompacted() {
  absl::MutexLock lock(&compact_mu_);
  while (compacting_) compact_cv_.Wait(&compact_mu_);
}

void StateStore::Compact() {
  const auto start = std::chrono::steady_clock::now();
  ClusterState copy;
  uint64_t through = 0;
  {
    absl::MutexLock lock(&mu_);  // nothing new is staged meanwhile
    absl::MutexLock io(&io_mu_);
    if (journal_->records_since_snapshot() < options_.compact_after) return;
    FlushLocked();
    {
      absl::MutexLock stage(&stage_mu_);
      stage_cv_.SignalAll();
    }
    through = journal_->position();
    copy = state_;
  }
  const auto copied = std::chrono::steady_clock::now();
  const std::string snapshot = StateCodec::EncodeState(copy);
  const auto encoded = std::chrono::steady_clock::now();
  absl::Status compacted;
  {
    absl::MutexLock io(&io_mu_);
    compacted = journal_->Compact(snapshot, through);
  }
  const auto ms = [](auto from, auto to) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
  };
  if (!compacted.ok()) {
    spdlog::warn("{} (the journal keeps its records)", std::string(compacted.message()));
    return;
  }
  spdlog::info("journal: new snapshot ({:.1f} MB): copied in {} ms, encoded in {} ms, written in {} ms",
               static_cast<double>(snapshot.size()) / 1e6, ms(start, copied), ms(copied, encoded),
               ms(encoded, std::chrono::steady_clock::now()));
}

void StateStore::Subscribe(Subscriber subscriber) { subscribers_.push_back(std::move(subscriber)); }

void StateStore::StartDispatch() {
  {
    absl::MutexLock lock(&queue_mu_);
    dispatching_ = true;
  }
  dispatcher_ = std::thread([this] { DispatchLoop(); });
}

void StateStore::StopDispatch() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
    queue_cv_.SignalAll();
  }
  if (dispatcher_.joinable()) dispatcher_.join();
  absl::MutexLock lock(&queue_mu_);
  dispatching_ = false;
}

void StateStore::DispatchLoop() {
  absl::MutexLock lock(&queue_mu_);
  while (true) {
    while (queue_.empty() && !stopping_) queue_cv_.Wait(&queue_mu_);
    if (queue_.empty()) return;
    std::vector<Record> batch = std::move(queue_.front());
    queue_.pop_front();
    queue_mu_.Unlock();
    for (const Subscriber& s : subscribers_) s(batch);
    queue_mu_.Lock();
    ++delivered_batches_;
    queue_cv_.SignalAll();
  }
}

void StateStore::WaitDelivered() {
  absl::MutexLock lock(&queue_mu_);
  const uint64_t target = committed_batches_;
  while (delivered_batches_ < target && !(stopping_ && queue_.empty())) queue_cv_.Wait(&queue_mu_);
}

std::string StateStore::EncodedState() const {
  absl::MutexLock lock(&mu_);
  return StateCodec::EncodeState(state_);
}

std::string StateStore::journal_location() const {
  absl::MutexLock io(&io_mu_);
  return journal_->location();
}

}  // namespace torus::head

#include "torus/core/object_table.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "torus/common/steady_wait.h"

namespace torus::core {
namespace {

size_t SizeOf(const Value& v) {
  size_t n = v.data.size();
  for (const std::string& b : v.buffers) n += b.size();
  return n;
}

}  // namespace

void ObjectTable::AddPending(const std::string& id) {
  absl::MutexLock lock(&mu_);
  entries_[id].owned = true;
}

void ObjectTable::RemovePending(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.state == ObjectState::kPending && it->second.refs == 0) entries_.erase(it);
}

std::string ObjectTable::NoRoomLocked(size_t size) const {
  if (max_bytes_ == 0 || bytes_ + size <= max_bytes_) return "";
  return absl::StrCat("the object store of this process is full: it holds ", bytes_, " of ", max_bytes_,
                      " bytes (object_store_memory) and a value of ", size,
                      " bytes does not fit; drop references to objects no longer needed, or give torus.init a larger "
                      "object_store_memory");
}

absl::Status ObjectTable::TryPut(const std::string& id, Value value) { return Store(id, std::move(value), true, true); }

void ObjectTable::Put(const std::string& id, Value value) { Store(id, std::move(value), false, false).IgnoreError(); }

void ObjectTable::PinContainedLocked(const Value& value) {
  for (const auto& [id, owner] : value.contained) {
    Entry& c = entries_[id];
    ++c.refs;
    if (!c.owned) {
      c.owner = owner;
      c.borrowing = true;
    }
  }
}

absl::Status ObjectTable::Store(const std::string& id, Value value, bool refuse, bool owned) {
  std::vector<std::function<void(const Value&)>> callbacks;
  Value copy;
  {
    absl::MutexLock lock(&mu_);
    if (std::string why = NoRoomLocked(SizeOf(value)); !why.empty()) {
      if (refuse) return absl::ResourceExhaustedError(why);
      value = Value{.data = std::move(why), .format = "object_store_full"};
    }
    Entry& e = entries_[id];
    if (e.state == ObjectState::kReady || e.state == ObjectState::kFreed) return absl::OkStatus();
    if (owned) e.owned = true;
    if (e.owned) PinContainedLocked(value);
    e.state = ObjectState::kReady;
    bytes_ += SizeOf(value);
    e.value = std::move(value);
    callbacks.swap(e.on_ready);
    if (!callbacks.empty()) copy = e.value;
    ready_.SignalAll();
  }
  for (auto& cb : callbacks) cb(copy);
  return absl::OkStatus();
}

ObjectState ObjectTable::State(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? ObjectState::kUnknown : it->second.state;
}

std::optional<Value> ObjectTable::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != ObjectState::kReady) return std::nullopt;
  return it->second.value;
}

void ObjectTable::OnReady(const std::string& id, std::function<void(const Value&)> callback) {
  Value copy;
  {
    absl::MutexLock lock(&mu_);
    Entry& e = entries_[id];
    if (e.state == ObjectState::kFreed) return;
    if (e.state != ObjectState::kReady) {
      e.on_ready.push_back(std::move(callback));
      return;
    }
    copy = e.value;
  }
  callback(copy);
}

ObjectState ObjectTable::WaitReady(const std::string& id, std::chrono::steady_clock::time_point deadline) const {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return ObjectState::kUnknown;
    if (it->second.state != ObjectState::kPending) return it->second.state;
    if (WaitUntil(ready_, mu_, deadline)) {
      it = entries_.find(id);
      return it == entries_.end() ? ObjectState::kUnknown : it->second.state;
    }
  }
}

std::vector<size_t> ObjectTable::WaitAny(const std::vector<std::string>& ids, size_t num,
                                         std::chrono::steady_clock::time_point deadline) const {
  absl::MutexLock lock(&mu_);
  while (true) {
    std::vector<size_t> ready;
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = entries_.find(ids[i]);
      if (it != entries_.end() && it->second.state == ObjectState::kReady) ready.push_back(i);
    }
    if (ready.size() >= num) return ready;
    if (WaitUntil(ready_, mu_, deadline)) return ready;
  }
}

void ObjectTable::AddRef(const std::string& id) {
  absl::MutexLock lock(&mu_);
  ++entries_[id].refs;
}

void ObjectTable::RemoveRef(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  --it->second.refs;
  MaybeFreeLocked(id, it->second);
}

void ObjectTable::MarkEscaped(const std::string& id) {
  absl::MutexLock lock(&mu_);
  entries_[id].escaped = true;
}

void ObjectTable::MaybeFreeLocked(const std::string& id, Entry& e) {
  if (e.refs > 0 || e.escaped) return;
  if (!e.owned) {
    // A borrowed object no longer held here: its copy goes, and its owner is told.
    if (e.borrowing && on_borrow_released_) on_borrow_released_(e.owner, id);
    if (e.state == ObjectState::kReady) bytes_ -= SizeOf(e.value);
    entries_.erase(id);
    return;
  }
  // A pending object stays: its task will still deliver it (and a retry needs the entry).
  if (e.state != ObjectState::kReady || !e.borrowers.empty()) return;
  bytes_ -= SizeOf(e.value);
  if (e.value.stored() && on_free_stored_) on_free_stored_(id, e.value);
  const std::vector<std::pair<std::string, std::string>> contained = std::move(e.value.contained);
  entries_.erase(id);
  // What it contained is held by one less value.
  for (const auto& [inner, owner] : contained) {
    if (auto it = entries_.find(inner); it != entries_.end()) {
      --it->second.refs;
      MaybeFreeLocked(inner, it->second);
    }
  }
}

bool ObjectTable::AddBorrower(const std::string& id, const std::string& borrower) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.owned || it->second.state == ObjectState::kFreed) return false;
  it->second.borrowers.insert(borrower);
  return true;
}

void ObjectTable::RemoveBorrower(const std::string& id, const std::string& borrower) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.owned || it->second.borrowers.erase(borrower) == 0) return;
  MaybeFreeLocked(id, it->second);
}

int ObjectTable::DropBorrower(const std::string& borrower) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> held;
  for (auto& [id, e] : entries_) {
    if (e.borrowers.erase(borrower) > 0) held.push_back(id);
  }
  for (const std::string& id : held) {
    if (auto it = entries_.find(id); it != entries_.end()) MaybeFreeLocked(id, it->second);
  }
  return static_cast<int>(held.size());
}

std::set<std::string> ObjectTable::Borrowers() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [id, e] : entries_) out.insert(e.borrowers.begin(), e.borrowers.end());
  return out;
}

std::vector<std::pair<std::string, std::string>> ObjectTable::Borrowing() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [id, e] : entries_) {
    if (e.borrowing) out.emplace_back(e.owner, id);
  }
  return out;
}

bool ObjectTable::MarkBorrowing(const std::string& id, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  // Nothing holds it here (any more): nothing to tell.
  if (it == entries_.end() || it->second.owned || it->second.borrowing || it->second.refs <= 0) return false;
  it->second.owner = owner;
  it->second.borrowing = true;
  return true;
}

void ObjectTable::SetOnBorrowReleased(std::function<void(const std::string&, const std::string&)> on_release) {
  absl::MutexLock lock(&mu_);
  on_borrow_released_ = std::move(on_release);
}

void ObjectTable::SetOnFreeStored(std::function<void(const std::string& id, const Value& value)> on_free) {
  absl::MutexLock lock(&mu_);
  on_free_stored_ = std::move(on_free);
}

std::vector<std::pair<std::string, Value>> ObjectTable::OwnedStored() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, Value>> out;
  for (const auto& [id, e] : entries_) {
    if (e.owned && e.state == ObjectState::kReady && e.value.stored()) out.emplace_back(id, e.value);
  }
  return out;
}

size_t ObjectTable::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

size_t ObjectTable::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace torus::core

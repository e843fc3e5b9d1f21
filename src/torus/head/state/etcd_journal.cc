#include "torus/head/state/etcd_journal.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace torus::head {

absl::StatusOr<EtcdTarget> ParseEtcdTarget(const std::string& url) {
  constexpr char kForm[] = "the form is etcd://HOST:PORT[,HOST:PORT...][/PREFIX]";
  constexpr absl::string_view kScheme = "etcd://";
  if (!absl::StartsWith(url, kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat("--state-store '", url, "': ", kForm));
  }
  EtcdTarget target{.url = url};
  absl::string_view rest = absl::string_view(url).substr(kScheme.size());
  if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    target.prefix = std::string(rest.substr(slash));
    while (target.prefix.size() > 1 && target.prefix.back() == '/') target.prefix.pop_back();
    if (target.prefix == "/") {
      return absl::InvalidArgumentError(absl::StrCat("--state-store '", url, "': an empty prefix; ", kForm));
    }
    rest = rest.substr(0, slash);
  }
  for (absl::string_view endpoint : absl::StrSplit(rest, ',')) {
    const size_t colon = endpoint.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 || !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) ||
        port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--state-store '", url, "': endpoint '", endpoint, "' is not HOST:PORT; ", kForm));
    }
    target.endpoints.emplace_back(endpoint);
  }
  return target;
}

namespace {

using nlohmann::json;

constexpr size_t kChunkBytes = 1 << 20;
// A log entry too large for one request names its parts instead of holding its records (a frame starts with a digit).
constexpr char kPartsMark[] = "@parts ";

std::string B64(absl::string_view s) { return absl::Base64Escape(s); }

std::string Unb64(const json& v) {
  std::string out;
  if (v.is_string()) absl::Base64Unescape(v.get<std::string>(), &out);
  return out;
}

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

// etcd's JSON gateway writes 64-bit integers as strings and leaves out zero values.
int64_t Int(const json& v) {
  int64_t out = 0;
  if (v.is_string()) (void)absl::SimpleAtoi(v.get<std::string>(), &out);
  if (v.is_number_integer()) out = v.get<int64_t>();
  return out;
}

// The records of one transaction in one value: for each, its length in decimal, ':', its bytes.
std::string Frame(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) absl::StrAppend(&out, r.size(), ":", r);
  return out;
}
absl::StatusOr<std::vector<std::string>> Unframe(absl::string_view s, const std::string& key) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const size_t colon = s.find(':');
    size_t n = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(s.substr(0, colon), &n) || n > s.size() - colon - 1) {
      return absl::DataLossError(absl::StrCat(key, ": a malformed journal entry"));
    }
    out.emplace_back(s.substr(colon + 1, n));
    s.remove_prefix(colon + 1 + n);
  }
  return out;
}

absl::StatusCode CodeOf(int64_t grpc_code) {
  return grpc_code > 0 && grpc_code <= 16 ? static_cast<absl::StatusCode>(grpc_code) : absl::StatusCode::kInternal;
}

// Calls of etcd's JSON gateway, moving on to the next endpoint when one does not answer. Keeps one connection per
// endpoint. Thread-safe: calls take turns.
class EtcdClient {
 public:
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
      : endpoints_(std::move(endpoints)), timeout_(timeout) {}

  absl::StatusOr<json> Call(const std::string& method, const json& body) {
    absl::MutexLock lock(&mu_);
    const std::string payload = body.dump();
    std::string failures;
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      const size_t at = (current_ + i) % endpoints_.size();
      const std::string& endpoint = endpoints_[at];
      httplib::Client& client = ClientFor(at);
      httplib::Result result = client.Post(absl::StrCat("/v3/", method), payload, "application/json");
      if (!result) {
        absl::StrAppend(&failures, failures.empty() ? "" : "; ", endpoint, ": ", httplib::to_string(result.error()));
        clients_.erase(at);  // a new connection next time
        continue;
      }
      json answer = json::parse(result->body, nullptr, /*allow_exceptions=*/false);
      if (answer.is_discarded() || !answer.is_object()) {
        return absl::InternalError(absl::StrCat("etcd at ", endpoint, " answered ", method, " with ",
                                                result->status, " and no JSON object"));
      }
      if (result->status != 200) {
        const int64_t code = Int(answer.value("code", json()));
        const std::string message = answer.value("message", answer.value("error", std::string("an error")));
        // A member without a leader (or stopping, or timing out on its way to a quorum) cannot commit: another may.
        if (code == 14 || code == 4 || (code == 2 && absl::StrContains(message, "deadline exceeded"))) {
          absl::StrAppend(&failures, failures.empty() ? "" : "; ", endpoint, ": ", message);
          continue;
        }
        return absl::Status(CodeOf(code), absl::StrCat("etcd at ", endpoint, ": ", message));
      }
      current_ = at;
      return answer;
    }
    return absl::UnavailableError(absl::StrCat("no etcd endpoint answered ", method, " (", failures, ")"));
  }

  // Whether any endpoint answers GET /health at all (healthy or not): etcd is there, though perhaps without the
  // quorum to commit, rather than out of this head's reach.
  // Asked with a short timeout of its own: a head cut off from every member learns so in a second per member.
  bool AnyAnswers() {
    for (const std::string& endpoint : endpoints_) {
      httplib::Client probe("http://" + endpoint);
      probe.set_connection_timeout(1, 0);
      probe.set_read_timeout(1, 0);
      if (probe.Get("/health")) return true;
    }
    return false;
  }

 private:
  httplib::Client& ClientFor(size_t at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::unique_ptr<httplib::Client>& c = clients_[at];
    if (c == nullptr) {
      c = std::make_unique<httplib::Client>(absl::StrCat("http://", endpoints_[at]));
      const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout_);
      const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(timeout_ - seconds);
      c->set_connection_timeout(seconds.count(), micros.count());
      c->set_read_timeout(seconds.count(), micros.count());
      c->set_write_timeout(seconds.count(), micros.count());
      c->set_keep_alive(true);
      c->set_tcp_nodelay(true);  // headers and body go in two writes: without it each call waits for a delayed ACK
    }
    return *c;
  }

  const std::vector<std::string> endpoints_;
  const std::chrono::milliseconds timeout_;
  absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<size_t, std::unique_ptr<httplib::Client>> clients_ ABSL_GUARDED_BY(mu_);  // by endpoint index
};

class EtcdJournal final : public Journal {
 public:
  EtcdJournal(EtcdTarget target, EtcdJournalOptions options)
      : target_(std::move(target)),
        options_(options),
        client_(target_.endpoints, options.request_timeout),
        keeper_client_(target_.endpoints, options.request_timeout),
        owner_key_(target_.prefix + "/owner"),
        log_prefix_(target_.prefix + "/log/"),
        snapshot_key_(target_.prefix + "/snapshot"),
        snap_prefix_(target_.prefix + "/snap/"),
        part_prefix_(target_.prefix + "/logpart/") {}

  ~EtcdJournal() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      cv_.SignalAll();
    }
    if (keeper_.joinable()) keeper_.join();
    // Revoking the lease deletes the owner key: the next head need not wait for the TTL.
    if (lease_ != 0) (void)client_.Call("lease/revoke", {{"ID", std::to_string(lease_)}});
  }

  absl::Status TakeOwnership() {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::random_device rd;
    identity_ = absl::StrFormat("%s pid %d id %08x%08x", host, getpid(), rd(), rd());
    auto granted = client_.Call("lease/grant", {{"TTL", options_.lease_ttl.count()}});
    if (!granted.ok()) return granted.status();
    lease_ = Int(granted->value("ID", json()));
    if (lease_ == 0) return absl::InternalError(absl::StrCat(target_.url, ": etcd granted no lease"));
    json txn = {
        {"compare", json::array({{{"key", B64(owner_key_)}, {"target", "CREATE"}, {"create_revision", "0"}}})},
        {"success", json::array({{{"request_put",
                                   {{"key", B64(owner_key_)}, {"value", B64(identity_)},
                                    {"lease", std::to_string(lease_)}}}}})},
        {"failure", json::array({{{"request_range", {{"key", B64(owner_key_)}}}}})}};
    auto answer = client_.Call("kv/txn", txn);
    if (!answer.ok()) return answer.status();
    if (!answer->value("succeeded", false)) {
      std::string holder = "another head";
      const json& responses = answer->value("responses", json::array());
      if (!responses.empty()) {
        const json& kvs = responses[0].value("response_range", json::object()).value("kvs", json::array());
        if (!kvs.empty()) holder = Unb64(kvs[0].value("value", json()));
      }
      (void)client_.Call("lease/revoke", {{"ID", std::to_string(lease_)}});
      lease_ = 0;
      return absl::FailedPreconditionError(
          absl::StrCat("the journal at ", target_.url, " is held by ", holder,
                       "; it is free once that head stops, or its lease runs out (", options_.lease_ttl.count(),
                       " s after it stops renewing it)"));
    }
    last_renewed_ = std::chrono::steady_clock::now();
    keeper_ = std::thread([this] { KeepAlive(); });
    return absl::OkStatus();
  }

  absl::StatusOr<Contents> Load() override {
    Contents contents;
    uint64_t through = 0;
    auto snapshot = Range(snapshot_key_, "");
    if (!snapshot.ok()) return snapshot.status();
    if (!snapshot->empty()) {
      const std::string head = Unb64((*snapshot)[0].value("value", json()));
      std::vector<std::string> parts = absl::StrSplit(head, ' ');
      uint64_t chunks = 0, bytes = 0;
      if (parts.size() != 4 || !absl::SimpleAtoi(parts[1], &through) || !absl::SimpleAtoi(parts[2], &chunks) ||
          !absl::SimpleAtoi(parts[3], &bytes)) {
        return absl::DataLossError(absl::StrCat(target_.url, ": ", snapshot_key_, " is malformed: '", head, "'"));
      }
      snapshot_generation_ = parts[0];
      const std::string prefix = absl::StrCat(snap_prefix_, snapshot_generation_, "/");
      auto pieces = Range(prefix, PrefixEnd(prefix));
      if (!pieces.ok()) return pieces.status();
      std::string body;
      for (const json& kv : *pieces) body += Unb64(kv.value("value", json()));
      if (pieces->size() != chunks || body.size() != bytes) {
        return absl::DataLossError(absl::StrCat(target_.url, ": the snapshot ", snapshot_generation_, " has ",
                                                pieces->size(), " of ", chunks, " chunks, ", body.size(), " of ",
                                                bytes, " bytes"));
      }
      contents.snapshot = std::move(body);
    }
    auto log = Range(LogKey(through + 1), PrefixEnd(log_prefix_));
    if (!log.ok()) return log.status();
    position_ = through;
    for (const json& kv : *log) {
      const std::string key = Unb64(kv.value("key", json()));
      uint64_t seq = 0;
      if (!absl::SimpleAtoi(absl::string_view(key).substr(log_prefix_.size()), &seq) || seq <= position_) {
        return absl::DataLossError(absl::StrCat(target_.url, ": unexpected journal key '", key, "'"));
      }
      std::string value = Unb64(kv.value("value", json()));
      if (absl::StartsWith(value, kPartsMark)) {
        auto whole = ReadParts(key, value.substr(std::strlen(kPartsMark)));
        if (!whole.ok()) return whole.status();
        value = *std::move(whole);
      }
      auto records = Unframe(value, key);
      if (!records.ok()) return records.status();
      counts_.emplace_back(seq, records->size());
      records_since_snapshot_ += records->size();
      for (std::string& r : *records) contents.records.push_back(std::move(r));
      position_ = seq;
    }
    return contents;
  }

  absl::Status Append(const std::vector<std::string>& records) override {
    if (records.empty()) return absl::OkStatus();
    const uint64_t seq = position_ + 1;
    std::string value = Frame(records);
    if (value.size() > kChunkBytes) {
      // Too large for one request: its parts first (under this head's lease, so that a deposed head's parts are
      // never taken for its successor's), then the entry naming them.
      const std::string prefix = absl::StrFormat("%s%020d/%016x/", part_prefix_, seq, lease_);
      auto parts = PutChunks(prefix, value);
      if (!parts.ok()) return parts.status();
      value = absl::StrCat(kPartsMark, prefix, " ", *parts, " ", value.size());
    }
    // Until etcd commits it, or this head learns that it lost the journal: a put of the same key and value again is
    // harmless when an earlier try was committed after all.
    const json put = {{{"request_put", {{"key", B64(LogKey(seq))}, {"value", B64(value)}}}}};
    for (int64_t backoff_ms = 100;; backoff_ms = std::min<int64_t>(backoff_ms * 2, 1000)) {
      absl::Status s = Txn(put);
      if (s.ok()) break;
      if (!Retryable(s)) return s;
      if (!stalled_.exchange(true)) {
        SetStall(std::string(s.message()));
        spdlog::warn("the journal at {} cannot commit ({}): changes wait until it can", target_.url,
                     std::string(s.message()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    }
    if (stalled_.exchange(false)) spdlog::info("the journal at {} commits again", target_.url);
    position_ = seq;
    counts_.emplace_back(seq, records.size());
    records_since_snapshot_ += records.size();
    return absl::OkStatus();
  }

  uint64_t position() const override { return position_; }

  absl::Status Compact(const std::string& snapshot, uint64_t through) override {
    // The chunks first, under a generation of this head's own (a deposed head's chunks can never be taken for
    // its successor's); then, in one transaction, the snapshot's head, the log it covers and the old chunks go.
    const std::string generation = absl::StrFormat("%016x-%d", lease_, ++compactions_);
    const std::string prefix = absl::StrCat(snap_prefix_, generation, "/");
    auto written = PutChunks(prefix, snapshot);
    if (!written.ok()) return written.status();
    const size_t chunks = *written;
    json ops = json::array();
    ops.push_back({{"request_put", {{"key", B64(snapshot_key_)},
                                    {"value", B64(absl::StrCat(generation, " ", through, " ", chunks, " ",
                                                               snapshot.size()))}}}});
    ops.push_back({{"request_delete_range", {{"key", B64(log_prefix_)}, {"range_end", B64(LogKey(through + 1))}}}});
    ops.push_back({{"request_delete_range",
                    {{"key", B64(part_prefix_)},
                     {"range_end", B64(absl::StrFormat("%s%020d", part_prefix_, through + 1))}}}});
    if (!snapshot_generation_.empty()) {
      const std::string old = absl::StrCat(snap_prefix_, snapshot_generation_, "/");
      ops.push_back({{"request_delete_range", {{"key", B64(old)}, {"range_end", B64(PrefixEnd(old))}}}});
    }
    if (absl::Status s = Txn(std::move(ops)); !s.ok()) {
      (void)client_.Call("kv/deleterange", {{"key", B64(prefix)}, {"range_end", B64(PrefixEnd(prefix))}});
      return s;
    }
    snapshot_generation_ = generation;
    while (!counts_.empty() && counts_.front().first <= through) {
      records_since_snapshot_ -= counts_.front().second;
      counts_.pop_front();
    }
    return absl::OkStatus();
  }

  uint64_t records_since_snapshot() const override { return records_since_snapshot_; }
  std::string location() const override { return target_.url; }

  absl::Status Writable() const override {
    if (lost_) return Lost();
    if (!stalled_) return absl::OkStatus();
    absl::MutexLock lock(&stall_mu_);
    return absl::UnavailableError(absl::StrCat("the journal at ", target_.url, " cannot commit now (", stall_,
                                               "): changes are refused until etcd has a quorum again"));
  }

 private:
  std::string LogKey(uint64_t seq) const { return absl::StrFormat("%s%020d", log_prefix_, seq); }

  // Writes `value` in chunks of kChunkBytes under `prefix` (at least one); returns how many.
  absl::StatusOr<size_t> PutChunks(const std::string& prefix, const std::string& value) {
    size_t chunks = 0;
    for (size_t at = 0; chunks == 0 || at < value.size(); at += kChunkBytes, ++chunks) {
      const std::string key = absl::StrFormat("%s%06d", prefix, chunks);
      auto put = client_.Call("kv/put", {{"key", B64(key)}, {"value", B64(absl::string_view(value).substr(at, kChunkBytes))}});
      if (!put.ok()) return put.status();
    }
    return chunks;
  }

  // The value a log entry `key` names by "<prefix> <chunks> <bytes>".
  absl::StatusOr<std::string> ReadParts(const std::string& key, const std::string& names) {
    std::vector<std::string> f = absl::StrSplit(names, ' ');
    size_t chunks = 0, bytes = 0;
    if (f.size() != 3 || !absl::StartsWith(f[0], part_prefix_) || !absl::SimpleAtoi(f[1], &chunks) ||
        !absl::SimpleAtoi(f[2], &bytes)) {
      return absl::DataLossError(absl::StrCat(target_.url, ": ", key, " names its parts wrongly"));
    }
    auto pieces = Range(f[0], PrefixEnd(f[0]));
    if (!pieces.ok()) return pieces.status();
    std::string value;
    for (const json& kv : *pieces) value += Unb64(kv.value("value", json()));
    if (pieces->size() != chunks || value.size() != bytes) {
      return absl::DataLossError(absl::StrCat(target_.url, ": ", key, " has ", pieces->size(), " of ", chunks,
                                              " parts, ", value.size(), " of ", bytes, " bytes"));
    }
    return value;
  }

  // The key-values in [key, range_end) (just `key` when range_end is empty), in key order.
  absl::StatusOr<std::vector<json>> Range(const std::string& key, const std::string& range_end) {
    json request = {{"key", B64(key)}};
    if (!range_end.empty()) request["range_end"] = B64(range_end);
    auto answer = client_.Call("kv/range", request);
    if (!answer.ok()) return answer.status();
    return answer->value("kvs", json::array()).get<std::vector<json>>();
  }

  // Runs `ops` if this head still holds the journal.
  absl::Status Txn(json ops) {
    if (lost_) return Lost();
    json txn = {{"compare", json::array({{{"key", B64(owner_key_)}, {"target", "VALUE"},
                                          {"value", B64(identity_)}}})},
                {"success", std::move(ops)}};
    auto answer = client_.Call("kv/txn", txn);
    if (!answer.ok()) return answer.status();
    if (!answer->value("succeeded", false)) {
      MarkLost();
      return Lost();
    }
    return absl::OkStatus();
  }

  static bool Retryable(const absl::Status& s) {
    return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded;
  }

  void SetStall(std::string why) {
    absl::MutexLock lock(&stall_mu_);
    stall_ = std::move(why);
  }

  void MarkLost() {
    if (!lost_.exchange(true) && options_.on_lost) options_.on_lost(std::string(Lost().message()));
  }

  absl::Status Lost() const {
    return absl::FailedPreconditionError(absl::StrCat(
        "this head no longer holds the journal at ", target_.url, " (its lease of ", options_.lease_ttl.count(),
        " s ran out; another head may have taken it): it writes nothing more"));
  }

  // Renews the lease every third of its TTL; gives up (lost_) once the lease is gone or went unrenewed for a TTL.
  void KeepAlive() {
    mu_.Lock();
    while (true) {
      // Waits up to a third of the TTL for the journal to close (spurious wakeups wait on).
      const auto until = std::chrono::steady_clock::now() + options_.lease_ttl / 3;
      for (auto now = std::chrono::steady_clock::now(); !stopping_ && now < until;
           now = std::chrono::steady_clock::now()) {
        cv_.WaitWithTimeout(&mu_, absl::FromChrono(until - now));
      }
      if (stopping_) break;
      mu_.Unlock();
      auto answer = keeper_client_.Call("lease/keepalive", {{"ID", std::to_string(lease_)}});
      const auto now = std::chrono::steady_clock::now();
      if (answer.ok()) {
        if (Int(answer->value("result", json::object()).value("TTL", json())) <= 0) {
          MarkLost();
        } else {
          last_renewed_ = now;
          if (stalled_.exchange(false)) spdlog::info("the journal at {} commits again", target_.url);
        }
      } else if (now - last_renewed_ >= options_.lease_ttl) {
        // Unrenewed for a TTL. Out of reach of every member: another head may be leading by now, so this one stops.
        // Members that answer but cannot commit (no quorum): nobody can take the journal meanwhile (taking it is a
        // write), so this head stays, serving reads and refusing changes, until etcd commits again or tells it the
        // lease is gone.
        if (!keeper_client_.AnyAnswers()) {
          MarkLost();
        } else if (!stalled_.exchange(true)) {
          SetStall(std::string(answer.status().message()));
          spdlog::warn("the journal at {} cannot renew its lease ({}): changes wait until etcd has a quorum",
                       target_.url, std::string(answer.status().message()));
        }
      }
      mu_.Lock();
      if (lost_) break;
    }
    mu_.Unlock();
  }

  const EtcdTarget target_;
  const EtcdJournalOptions options_;
  EtcdClient client_;
  EtcdClient keeper_client_;  // the keep-alive thread's own connection
  const std::string owner_key_, log_prefix_, snapshot_key_, snap_prefix_, part_prefix_;
  std::string identity_;
  int64_t lease_ = 0;
  uint64_t position_ = 0;
  uint64_t records_since_snapshot_ = 0;
  std::deque<std::pair<uint64_t, size_t>> counts_;  // (seq, records) of the log entries after the snapshot
  std::string snapshot_generation_;                 // of the snapshot in etcd; empty when none
  int compactions_ = 0;
  std::atomic<bool> lost_{false};
  std::atomic<bool> stalled_{false};  // etcd cannot commit now: changes wait (Append) or are refused (Writable)
  mutable absl::Mutex stall_mu_;
  std::string stall_ ABSL_GUARDED_BY(stall_mu_);  // why
  std::chrono::steady_clock::time_point last_renewed_;  // keeper_'s
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread keeper_;
};

}  // namespace

absl::Status WaitForJournalRelease(const EtcdTarget& target, std::chrono::milliseconds wait) {
  const std::string owner_key = target.prefix + "/owner";
  EtcdClient client(target.endpoints, std::chrono::milliseconds(5000));
  auto held = client.Call("kv/range", {{"key", B64(owner_key)}});
  if (!held.ok()) return held.status();
  if (held->value("kvs", json::array()).empty()) return absl::OkStatus();
  const int64_t revision = Int(held->value("header", json::object()).value("revision", json()));
  // Events after the read: a DELETE of the key ends the wait. The gateway streams one JSON object per line.
  httplib::Request request;
  request.method = "POST";
  request.path = "/v3/watch";
  request.headers = {{"Content-Type", "application/json"}};
  request.body = json{{"create_request", {{"key", B64(owner_key)}, {"start_revision", std::to_string(revision + 1)}}}}
                     .dump();
  bool released = false;
  std::string pending;
  request.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    pending.append(data, n);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      json message = json::parse(pending.substr(0, nl), nullptr, /*allow_exceptions=*/false);
      if (message.is_discarded()) continue;
      for (const json& event : message.value("result", json::object()).value("events", json::array())) {
        if (event.value("type", std::string()) == "DELETE") released = true;
      }
    }
    return !released;  // stop reading once it is free
  };
  for (const std::string& endpoint : target.endpoints) {
    httplib::Client c(absl::StrCat("http://", endpoint));
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(wait);
    c.set_read_timeout(seconds.count(), std::chrono::duration_cast<std::chrono::microseconds>(wait - seconds).count());
    c.set_connection_timeout(1, 0);
    httplib::Response response;
    httplib::Error error = httplib::Error::Success;
    c.send(request, response, error);
    if (released) return absl::OkStatus();
    if (error == httplib::Error::Read || error == httplib::Error::Success) break;  // the wait ran out: no release
  }
  return absl::DeadlineExceededError(absl::StrCat("the journal at ", target.url, " is still held"));
}

absl::StatusOr<std::unique_ptr<Journal>> OpenEtcdJournal(const EtcdTarget& target, EtcdJournalOptions options) {
  auto journal = std::make_unique<EtcdJournal>(target, options);
  if (absl::Status s = journal->TakeOwnership(); !s.ok()) return s;
  return journal;
}

}  // namespace torus::head

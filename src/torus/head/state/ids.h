// Typed ids of the head's domain (a NodeId is never passed where a GroupId is meant) and the injected generator
// that makes new ones, so that tests get predictable ids and nothing inside the head reads /dev/urandom itself.
//
// Thread-safety: Id is a value type. RandomIdGenerator and SequentialIdGenerator are thread-safe.
#pragma once

#include <atomic>
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

namespace torus::head {

// A string id with a tag that keeps kinds apart. Ordered, hashable through str().
template <typename Tag>
class Id {
 public:
  Id() = default;
  explicit Id(std::string value) : value_(std::move(value)) {}
  const std::string& str() const { return value_; }
  bool empty() const { return value_.empty(); }
  auto operator<=>(const Id&) const = default;
  bool operator==(const Id&) const = default;

 private:
  std::string value_;
};

using NodeId = Id<struct NodeIdTag>;
using GroupId = Id<struct GroupIdTag>;
using JobId = Id<struct JobIdTag>;
using RunId = Id<struct RunIdTag>;
using WorkerId = Id<struct WorkerIdTag>;
using ActorId = Id<struct ActorIdTag>;  // hex, as the owner made it

// Makes the random part of new ids.
class IdGenerator {
 public:
  virtual ~IdGenerator() = default;
  // `length` characters of [0-9a-z] (random in production), e.g. Suffix(10) = "4k1x0q9z2a".
  virtual std::string Suffix(int length) = 0;
  // A secret for a run's workers: 64 hex characters.
  virtual std::string Secret() = 0;
};

// The kernel's random bytes (getrandom); ids are unique with overwhelming probability, not guaranteed.
class RandomIdGenerator final : public IdGenerator {
 public:
  std::string Suffix(int length) override;
  std::string Secret() override;
};

// "0000000001", "0000000002", ... (zero-padded to the length asked); secrets "secret-1", ... For tests.
class SequentialIdGenerator final : public IdGenerator {
 public:
  std::string Suffix(int length) override;
  std::string Secret() override;

 private:
  std::atomic<uint64_t> next_{1};
};

}  // namespace torus::head

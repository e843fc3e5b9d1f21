#include "torus/core/ids.h"

#include <random>

#include "absl/strings/escaping.h"

namespace torus::core {

std::string NewTaskId() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  std::string id(kTaskIdBytes, '\0');
  for (size_t i = 0; i < kTaskIdBytes; i += 8) {
    uint64_t r = gen();
    for (size_t j = 0; j < 8; ++j) id[i + j] = static_cast<char>((r >> (8 * j)) & 0xff);
  }
  return id;
}

std::string ReturnObjectId(const std::string& task_id, uint32_t index) {
  std::string id = task_id;
  for (int shift = 24; shift >= 0; shift -= 8) id.push_back(static_cast<char>((index >> shift) & 0xff));
  return id;
}

std::string PutObjectId() { return ReturnObjectId(NewTaskId(), 0); }

std::string Hex(const std::string& bytes) { return absl::BytesToHexString(bytes); }

}  // namespace torus::core

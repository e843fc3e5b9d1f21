// Ids of tasks and objects. A task id is 16 random bytes; the object a task returns at index i is its task id
// followed by i (4 bytes, big-endian, starting at 1), and an object made by `put` is a fresh task id with index 0.
// Thread-safety: pure, except NewTaskId which reads the thread's own generator.
#pragma once

#include <cstdint>
#include <string>

namespace torus::core {

inline constexpr size_t kTaskIdBytes = 16;
inline constexpr size_t kObjectIdBytes = 20;

std::string NewTaskId();
std::string ReturnObjectId(const std::string& task_id, uint32_t index);
// The object id of a `put`.
std::string PutObjectId();
// Lowercase hex, for logs and messages.
std::string Hex(const std::string& bytes);

}  // namespace torus::core

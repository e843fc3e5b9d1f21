// libFuzzer target for the proc files the agent reads (docs/fuzzing.md): /proc/stat, /proc/meminfo and
// /proc/<pid>/stat, whose command name a process sets itself (spaces, parentheses and all). The whole input is tried
// as each. Parsing may fail, with InvalidArgument; it must never crash (the sanitizers included: no signed
// overflow), and what parses is in range: memory totals positive with 0 <= available <= total.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "torus/metrics/proc_stats.h"

namespace {

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

template <typename T>
void RequireParsedOrInvalid(const absl::StatusOr<T>& parsed) {
  Require(parsed.ok() || parsed.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<torus::metrics::HostCpuTimes> cpu = torus::metrics::ParseProcStat(input);
  RequireParsedOrInvalid(cpu);
  if (cpu.ok()) (void)torus::metrics::HostCpuPercent(*cpu, *cpu);

  absl::StatusOr<torus::metrics::HostMemory> memory = torus::metrics::ParseMeminfo(input);
  RequireParsedOrInvalid(memory);
  if (memory.ok()) {
    Require(memory->total_bytes > 0);
    Require(memory->available_bytes >= 0 && memory->available_bytes <= memory->total_bytes);
    Require(memory->used_bytes() >= 0);
  }

  RequireParsedOrInvalid(torus::metrics::ParsePidStat(input));
  return 0;
}

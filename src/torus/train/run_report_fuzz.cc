// libFuzzer target for a worker's step report as the head receives it (docs/fuzzing.md): the whole input is the
// body of POST /api/v0/runs/{id}/report. Parsing may fail, with InvalidArgument; it must never crash; rank and
// attempt are 0..1,000,000, metrics an object, and what parses, written again as a body, parses back equal.
//
// The checkpoint it names is then checked as the head checks it, against a run storage directory the target makes
// (a checkpoint starting with '@' names a path under it, so that inputs reach it; others are taken as they are):
// ValidateStagedDir may refuse it, but what it accepts must resolve, as the head's later file operations resolve it
// (the C string, through symlinks), to a directory strictly below `<storage>/.staging`. The storage holds staged
// directories, a file, and symlinks that stay inside, lead out and dangle.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "torus/train/checkpoints.h"
#include "torus/train/run_report.h"

namespace {

namespace fs = std::filesystem;
namespace train = torus::train;

// Aborts, so that libFuzzer records the input, when a property that parsing or checking promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

std::string* root = nullptr;     // the fixture's temp directory
std::string* storage = nullptr;  // <root>/storage
std::string* staging = nullptr;  // the real path of <storage>/.staging

std::string RealPath(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return "";
  std::string out(resolved);
  std::free(resolved);
  return out;
}

void MakeFixture() {
  std::string tmpl = (fs::temp_directory_path() / "run_report_fuzz.XXXXXX").string();
  Require(::mkdtemp(tmpl.data()) != nullptr);
  root = new std::string(tmpl);
  storage = new std::string(*root + "/storage");
  const fs::path s(*storage);
  fs::create_directories(s / ".staging" / "attempt_1" / "step_1" / "rank_0");
  fs::create_directories(s / ".staging" / "attempt_2");
  fs::create_directories(s / "checkpoint_1");
  fs::create_directories(fs::path(*root) / "outside");
  std::ofstream(s / ".staging" / "attempt_1" / "file") << "not a directory";
  fs::create_directory_symlink("step_1/rank_0", s / ".staging" / "attempt_1" / "inside");
  fs::create_directory_symlink("../../..", s / ".staging" / "attempt_1" / "up");  // <root>
  fs::create_directory_symlink(*root + "/outside", s / ".staging" / "attempt_2" / "out");
  fs::create_directory_symlink("nowhere", s / ".staging" / "attempt_2" / "dangling");
  staging = new std::string(RealPath(*storage + "/.staging"));
  Require(!staging->empty());
}

void CheckCheckpoint(const std::string& given) {
  const std::string checkpoint = given[0] == '@' ? *storage + given.substr(1) : given;
  const absl::Status status = train::ValidateStagedDir(*storage, checkpoint);
  if (!status.ok()) {
    Require(status.code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  const std::string resolved = RealPath(checkpoint);
  Require(resolved.size() > staging->size() + 1 && resolved.compare(0, staging->size(), *staging) == 0 &&
          resolved[staging->size()] == '/');
  Require(fs::is_directory(resolved));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  MakeFixture();
  std::atexit([] { fs::remove_all(*root); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<train::RunReport> report = train::ParseRunReport(body);
  if (!report.ok()) {
    Require(report.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  Require(report->rank >= 0 && report->rank <= 1'000'000);
  Require(report->attempt >= 0 && report->attempt <= 1'000'000);

  nlohmann::json again = {{"rank", report->rank}, {"attempt", report->attempt}, {"step", report->step}};
  if (report->metrics_json) {
    const auto metrics = nlohmann::json::parse(*report->metrics_json, nullptr, false);
    Require(metrics.is_object());
    again["metrics"] = metrics;
  }
  if (!report->checkpoint.empty()) again["checkpoint"] = report->checkpoint;
  absl::StatusOr<train::RunReport> reread =
      train::ParseRunReport(again.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  Require(reread.ok() && reread->rank == report->rank && reread->attempt == report->attempt &&
          reread->step == report->step && reread->metrics_json == report->metrics_json &&
          reread->checkpoint == report->checkpoint);

  if (!report->checkpoint.empty()) CheckCheckpoint(report->checkpoint);
  return 0;
}

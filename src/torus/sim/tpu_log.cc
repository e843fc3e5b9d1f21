#include "torus/sim/tpu_log.h"

#include <pwd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace torus::sim {
namespace {

std::string CurrentUser() {
  if (const char* user = std::getenv("USER"); user != nullptr && *user != '\0') return user;
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_name != nullptr) return pw->pw_name;
  return "unknown";
}

}  // namespace

std::string FormatGlogLine(char severity, absl::Time when, absl::TimeZone zone, pid_t tid, const std::string& text) {
  const absl::TimeZone::CivilInfo civil = zone.At(when);
  const int64_t micros = absl::ToInt64Microseconds(civil.subsecond);
  return absl::StrFormat("%c%02d%02d %02d:%02d:%02d.%06d %7d tpu_sim.cc:0] %s\n", severity, civil.cs.month(),
                         civil.cs.day(), civil.cs.hour(), civil.cs.minute(), civil.cs.second(), micros, tid, text);
}

std::string GlogFileName(const std::string& host, const std::string& user, absl::Time when, absl::TimeZone zone,
                         pid_t pid) {
  return absl::StrCat("tpu_driver.", host, ".", user, ".log.INFO.", absl::FormatTime("%Y%m%d-%H%M%S", when, zone),
                      ".", pid);
}

absl::StatusOr<std::unique_ptr<TpuLog>> TpuLog::Open(const std::string& dir, const std::string& host) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string path =
      absl::StrCat(dir, "/", GlogFileName(host, CurrentUser(), absl::Now(), absl::LocalTimeZone(), getpid()));
  std::ofstream out(path, std::ios::app);
  if (!out) return absl::InternalError(absl::StrCat("cannot open ", path));
  return std::unique_ptr<TpuLog>(new TpuLog(path, std::move(out)));
}

void TpuLog::Write(char severity, const std::string& text) {
  const std::string line = FormatGlogLine(severity, absl::Now(), absl::LocalTimeZone(),
                                          static_cast<pid_t>(syscall(SYS_gettid)), text);
  absl::MutexLock lock(&mu_);
  out_ << line;
  out_.flush();
}

}  // namespace torus::sim

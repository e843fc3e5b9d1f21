#include "torus/metrics/device_plugin.h"

#include <httplib.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "torus/common/strings.h"

namespace torus::metrics {
namespace {

bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_' || c == ':'; }
bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// A cursor over one line, producing "line N: ..." errors.
class LineParser {
 public:
  LineParser(std::string_view line, int number) : line_(line), number_(number) {}

  absl::Status Error(std::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", number_, ": ", std::string(why)));
  }
  void SkipBlanks() {
    while (pos_ < line_.size() && IsBlank(line_[pos_])) ++pos_;
  }
  bool AtEnd() const { return pos_ >= line_.size(); }
  char Peek() const { return AtEnd() ? '\0' : line_[pos_]; }

  std::string_view Name(bool allow_colon) {
    const size_t start = pos_;
    if (AtEnd() || !IsNameStart(line_[pos_]) || (!allow_colon && line_[pos_] == ':')) return {};
    ++pos_;
    while (pos_ < line_.size() && IsNameChar(line_[pos_]) && (allow_colon || line_[pos_] != ':')) ++pos_;
    return line_.substr(start, pos_ - start);
  }

  // `{name="value",...}` with the opening brace current.
  absl::Status Labels(std::vector<std::pair<std::string, std::string>>& labels) {
    ++pos_;  // '{'
    while (true) {
      SkipBlanks();
      if (Peek() == '}') {
        ++pos_;
        return absl::OkStatus();
      }
      std::string_view name = Name(/*allow_colon=*/false);
      if (name.empty()) return Error(absl::StrCat("expected a label name at column ", pos_ + 1));
      SkipBlanks();
      if (Peek() != '=') return Error(absl::StrCat("expected '=' after label ", std::string(name)));
      ++pos_;
      SkipBlanks();
      if (Peek() != '"') return Error(absl::StrCat("label ", std::string(name), ": value must be quoted"));
      ++pos_;
      std::string value;
      bool closed = false;
      while (!AtEnd()) {
        char c = line_[pos_++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          value.push_back(c);
          continue;
        }
        if (AtEnd()) break;
        char e = line_[pos_++];
        if (e == 'n') {
          value.push_back('\n');
        } else if (e == '\\' || e == '"') {
          value.push_back(e);
        } else {
          return Error(absl::StrCat("label ", std::string(name), ": unknown escape \\", std::string(1, e)));
        }
      }
      if (!closed) return Error(absl::StrCat("label ", std::string(name), ": unterminated value"));
      labels.emplace_back(std::string(name), std::move(value));
      SkipBlanks();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') continue;
      return Error(absl::StrCat("expected ',' or '}' after label ", std::string(name)));
    }
  }

  std::string_view Token() {
    const size_t start = pos_;
    while (pos_ < line_.size() && !IsBlank(line_[pos_])) ++pos_;
    return line_.substr(start, pos_ - start);
  }

 private:
  std::string_view line_;
  int number_;
  size_t pos_ = 0;
};

bool ParseValue(std::string_view token, double* out) {
  if (token.empty()) return false;
  const std::string copy(token);
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(copy.c_str(), &end);
  // Overflow to +-Inf is a value like any other here; only trailing garbage is an error.
  return end == copy.c_str() + copy.size();
}

constexpr absl::string_view kNodeSuffix = "_node";

// Debian's Abseil has its own string_view type.

}  // namespace

absl::StatusOr<std::vector<PromSample>> ParsePrometheusText(std::string_view text,
                                                            const std::set<std::string>& families) {
  std::vector<PromSample> out;
  int number = 0;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    LineParser p(line, number);
    p.SkipBlanks();
    if (p.AtEnd() || p.Peek() == '#') continue;  // blank, comment, HELP, TYPE
    std::string_view name = p.Name(/*allow_colon=*/true);
    if (name.empty()) return p.Error("expected a metric name");
    if (families.count(std::string(name)) == 0) continue;
    PromSample sample;
    sample.name = std::string(name);
    p.SkipBlanks();
    if (p.Peek() == '{') {
      if (absl::Status s = p.Labels(sample.labels); !s.ok()) return s;
    }
    p.SkipBlanks();
    std::string_view value = p.Token();
    if (value.empty()) return p.Error(absl::StrCat(sample.name, ": missing value"));
    if (!ParseValue(value, &sample.value)) {
      return p.Error(absl::StrCat(sample.name, ": bad value '", std::string(value), "'"));
    }
    p.SkipBlanks();
    if (!p.AtEnd()) {
      std::string_view ts = p.Token();
      int64_t ms = 0;
      if (!absl::SimpleAtoi(AbslView(ts), &ms)) {
        return p.Error(absl::StrCat(sample.name, ": bad timestamp '", std::string(ts), "'"));
      }
      sample.timestamp_ms = ms;
      p.SkipBlanks();
      if (!p.AtEnd()) return p.Error(absl::StrCat(sample.name, ": unexpected text after the timestamp"));
    }
    out.push_back(std::move(sample));
  }
  return out;
}

const std::set<std::string>& DevicePluginFamilies() {
  static const std::set<std::string>* families = new std::set<std::string>{
      "duty_cycle",
      "duty_cycle_node",
      "tensorcore_utilization",
      "tensorcore_utilization_node",
      "memory_bandwidth_utilization",
      "memory_bandwidth_utilization_node",
      "memory_used",
      "memory_used_node",
      "memory_total",
      "memory_total_node",
  };
  return *families;
}

PluginChips ExtractPluginChips(const std::vector<PromSample>& samples) {
  PluginChips out;
  // The `_node` variants go first so that they win.
  std::vector<const PromSample*> ordered;
  ordered.reserve(samples.size());
  for (const PromSample& s : samples) {
    if (absl::EndsWith(s.name, kNodeSuffix)) ordered.push_back(&s);
  }
  for (const PromSample& s : samples) {
    if (!absl::EndsWith(s.name, kNodeSuffix)) ordered.push_back(&s);
  }
  std::set<std::pair<std::string, int>> listed;  // (exact family name, chip): a second one is a duplicate
  std::set<std::pair<std::string, int>> filled;  // (family without suffix, chip): already has a value
  for (const PromSample* s : ordered) {
    std::string family = s->name;
    if (absl::EndsWith(family, kNodeSuffix)) family.resize(family.size() - kNodeSuffix.size());
    const std::string* id = nullptr;
    for (const auto& [k, v] : s->labels) {
      if (k == "accelerator_id") id = &v;
    }
    if (id == nullptr) {
      out.skipped.push_back(absl::StrCat(s->name, ": no accelerator_id label"));
      continue;
    }
    const size_t dash = id->rfind('-');
    int chip = -1;
    if (dash == std::string::npos || !absl::SimpleAtoi(absl::string_view(*id).substr(dash + 1), &chip) ||
        chip < 0 || chip > 4096) {
      out.skipped.push_back(
          absl::StrCat(s->name, ": accelerator_id '", *id, "' is not <instance id>-<device index>"));
      continue;
    }
    if (!listed.emplace(s->name, chip).second) {
      out.skipped.push_back(absl::StrCat(s->name, ": chip ", chip, " listed twice; the first value is kept"));
      continue;
    }
    if (std::isnan(s->value)) continue;              // no reading: another variant or source may have one
    if (!filled.emplace(family, chip).second) continue;  // the `_node` value came first
    PluginChipStats& stats = out.chips[chip];
    if (family == "duty_cycle") {
      stats.duty_cycle_percent = s->value;
    } else if (family == "tensorcore_utilization") {
      stats.tensorcore_utilization_percent = s->value;
    } else if (family == "memory_bandwidth_utilization") {
      stats.memory_bandwidth_utilization_percent = s->value;
    } else if (family == "memory_used") {
      stats.memory_used_bytes = s->value;
    } else if (family == "memory_total") {
      stats.memory_total_bytes = s->value;
    }
  }
  return out;
}

absl::StatusOr<HttpTarget> ParseDevicePluginAddr(std::string_view addr) {
  absl::string_view rest = absl::StripAsciiWhitespace(AbslView(addr));
  if (rest.empty()) return absl::InvalidArgumentError("TPU_DEVICE_PLUGIN_ADDR is empty; expected host:port or URL");
  std::string scheme = "http";
  if (const size_t sep = rest.find("://"); sep != absl::string_view::npos) {
    scheme = absl::AsciiStrToLower(std::string(rest.substr(0, sep)));
    rest.remove_prefix(sep + 3);
    if (scheme != "http") {
      return absl::InvalidArgumentError(absl::StrCat("TPU_DEVICE_PLUGIN_ADDR: scheme '", scheme,
                                                     "' is not supported; use host:port or http://host:port"));
    }
  }
  HttpTarget target;
  absl::string_view host_port = rest;
  target.path = "/metrics";
  if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    host_port = rest.substr(0, slash);
    if (rest.size() > slash + 1) target.path = std::string(rest.substr(slash));
  }
  if (host_port.empty() || host_port.front() == ':') {
    return absl::InvalidArgumentError(
        absl::StrCat("TPU_DEVICE_PLUGIN_ADDR '", std::string(addr), "' has no host; expected host:port or URL"));
  }
  target.scheme_host_port = absl::StrCat(scheme, "://", std::string(host_port));
  return target;
}

absl::StatusOr<PluginChips> DevicePluginClient::Read() const {
  httplib::Client client(target_.scheme_host_port);
  if (!client.is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot make an HTTP client for ", target_.scheme_host_port));
  }
  const time_t sec = timeout_ms_ / 1000;
  const time_t usec = (timeout_ms_ % 1000) * 1000;
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
  client.set_keep_alive(false);
  // The body is read into a bounded buffer: a plugin that keeps sending is cut off rather than let grow the agent.
  constexpr size_t kMaxBodyBytes = 16 << 20;
  std::string body;
  bool too_big = false;
  httplib::Result result = client.Get(target_.path, [&](const char* data, size_t length) {
    if (body.size() + length > kMaxBodyBytes) {
      too_big = true;
      return false;
    }
    body.append(data, length);
    return true;
  });
  const std::string url = absl::StrCat(target_.scheme_host_port, target_.path);
  if (too_big) return absl::UnavailableError(absl::StrCat("GET ", url, ": the reply exceeds 16 MiB"));
  if (!result) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", httplib::to_string(result.error())));
  }
  if (result->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": HTTP ", result->status));
  }
  absl::StatusOr<std::vector<PromSample>> samples = ParsePrometheusText(body, DevicePluginFamilies());
  if (!samples.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(url, ": ", std::string(samples.status().message())));
  }
  return ExtractPluginChips(*samples);
}

}  // namespace torus::metrics

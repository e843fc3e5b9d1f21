#include "torus/head/metrics/prometheus.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace torus::head {

std::string EscapeLabelValue(const std::string& value) {
  if (value.find_first_of("\\\"\n") == std::string::npos) return value;
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void PrometheusWriter::Family(const std::string& name, const std::string& type, const std::string& help) {
  absl::StrAppend(&text_, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusWriter::Sample(const std::string& name, const Labels& labels, double value) {
  absl::StrAppend(&text_, name);
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) text_ += ',';
      text_ += labels[i].first;
      text_ += "=\"";
      const std::string& value = labels[i].second;
      if (value.find_first_of("\\\"\n") == std::string::npos) {
        text_ += value;
      } else {
        text_ += EscapeLabelValue(value);
      }
      text_ += '"';
    }
    text_ += '}';
  }
  text_ += ' ';
  if (std::isnan(value)) {
    text_ += "NaN";
  } else if (std::isinf(value)) {
    text_ += value > 0 ? "+Inf" : "-Inf";
  } else {
    // The shortest text that reads back as the same double.
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
    text_.append(buf, end);
  }
  text_ += '\n';
}

}  // namespace torus::head

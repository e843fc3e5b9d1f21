#include "torus/head/prometheus.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace torus::head {

std::string EscapeLabelValue(const std::string& value) {
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
      absl::StrAppend(&text_, i == 0 ? "" : ",", labels[i].first, "=\"", EscapeLabelValue(labels[i].second), "\"");
    }
    text_ += '}';
  }
  std::string number;
  if (std::isnan(value)) {
    number = "NaN";
  } else if (std::isinf(value)) {
    number = value > 0 ? "+Inf" : "-Inf";
  } else if (value == std::floor(value) && std::fabs(value) < 1e15) {
    number = absl::StrFormat("%.0f", value);
  } else {
    number = absl::StrFormat("%.17g", value);
  }
  absl::StrAppend(&text_, " ", number, "\n");
}

}  // namespace torus::head

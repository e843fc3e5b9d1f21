// Small string helpers shared by the parsers and validators: std::string_view to absl::string_view (Debian's Abseil
// has its own string_view type), and quoting a user's text for an error message.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace torus {

inline absl::string_view AbslView(std::string_view text) { return absl::string_view(text.data(), text.size()); }

// `text` in double quotes with C escapes: "a\nb" -> "\"a\\nb\"".
inline std::string Quoted(std::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(AbslView(text)), "\"");
}

// `c` in single quotes with C escapes: '\t' -> "'\\t'".
inline std::string QuotedChar(char c) { return absl::StrCat("'", absl::CHexEscape(absl::string_view(&c, 1)), "'"); }

// A size for people: "1.5 GiB", "312.0 MiB", "900 KiB".
inline std::string HumanBytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", bytes / double(int64_t{1} << 30));
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", bytes / double(int64_t{1} << 20));
  return absl::StrCat(bytes / 1024, " KiB");
}

}  // namespace torus

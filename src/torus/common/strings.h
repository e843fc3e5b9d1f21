// Small string helpers shared by the parsers and validators: std::string_view to absl::string_view (Debian's Abseil
// has its own string_view type), and quoting a user's text for an error message.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace torus {

inline absl::string_view AbslView(std::string_view text) { return absl::string_view(text.data(), text.size()); }

// `text` in double quotes with C escapes: "a\nb" -> "\"a\\nb\"".
inline std::string Quoted(std::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(AbslView(text)), "\"");
}

// `c` in single quotes with C escapes: '\t' -> "'\\t'".
inline std::string QuotedChar(char c) { return absl::StrCat("'", absl::CHexEscape(absl::string_view(&c, 1)), "'"); }

}  // namespace torus

// UTF-8 checks for text that goes into protobuf `string` fields, which a receiver refuses to parse unless valid.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace torus {

// The UTF-8 sequence at the start of `text`: its length (1-4) when it is whole and well-formed; 0 when `text` is
// empty or ends inside a sequence that is well-formed so far; -1 when no well-formed sequence starts there.
int Utf8SequenceAt(std::string_view text);

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool IsValidUtf8(std::string_view text);

// `text` with every byte that is not part of a well-formed UTF-8 sequence replaced by '?'.
// Example: "ok \xff\xfe done" -> "ok ?? done"; "grüße" is unchanged.
std::string ToValidUtf8(std::string_view text);

}  // namespace torus

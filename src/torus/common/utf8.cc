#include "torus/common/utf8.h"

namespace torus {
namespace {

// The length of the well-formed sequence starting at text[i], or 0 when none starts there.
size_t SequenceLength(std::string_view text, size_t i) {
  const int n = Utf8SequenceAt(text.substr(i));
  return n > 0 ? static_cast<size_t>(n) : 0;
}

}  // namespace

int Utf8SequenceAt(std::string_view text) {
  if (text.empty()) return 0;
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  for (size_t k = 1; k < n; ++k) {
    if (k >= text.size()) return 0;  // well-formed so far, cut short
    const unsigned char c = byte(k);
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return -1;
  }
  return static_cast<int>(n);
}

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = SequenceLength(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ToValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = SequenceLength(text, i);
    if (n == 0) {
      out.push_back('?');
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace torus

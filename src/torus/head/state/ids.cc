#include "torus/head/state/ids.h"

#include <sys/random.h>

#include <cstdio>
#include <cstdlib>

namespace torus::head {
namespace {

void RandomBytes(unsigned char* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t got = getrandom(out + done, n - done, 0);
    if (got <= 0) {
      std::perror("getrandom");
      std::abort();  // no randomness at all: nothing safe can be made
    }
    done += static_cast<size_t>(got);
  }
}

}  // namespace

std::string RandomIdGenerator::Suffix(int length) {
  static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string out(static_cast<size_t>(length), '0');
  std::string bytes(static_cast<size_t>(length), '\0');
  RandomBytes(reinterpret_cast<unsigned char*>(bytes.data()), bytes.size());
  // 252 = 7 x 36: bytes above it are redrawn, so that every character is equally likely.
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned char b = static_cast<unsigned char>(bytes[i]);
    while (b >= 252) RandomBytes(&b, 1);
    out[i] = kAlphabet[b % 36];
  }
  return out;
}

std::string RandomIdGenerator::Secret() {
  unsigned char bytes[32];
  RandomBytes(bytes, sizeof(bytes));
  std::string out;
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof(hex), "%02x", b);
    out += hex;
  }
  return out;
}

std::string SequentialIdGenerator::Suffix(int length) {
  std::string n = std::to_string(next_++);
  if (static_cast<int>(n.size()) < length) n.insert(0, static_cast<size_t>(length) - n.size(), '0');
  return n;
}

std::string SequentialIdGenerator::Secret() { return "secret-" + std::to_string(next_++); }

}  // namespace torus::head

#include "torus/rpc/beat_datagram.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace torus::rpc {
namespace {

constexpr char kMagic[4] = {'T', 'B', 'T', '1'};

void PutLittle(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLittle(std::string_view in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(in[at + i])) << (8 * i);
  return value;
}

}  // namespace

std::string NewBeatKey() {
  std::string key(kBeatKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    std::fputs("RAND_bytes failed: no randomness for a heartbeat key\n", stderr);
    std::abort();  // no randomness at all: nothing safe can be made
  }
  return key;
}

BeatMac::BeatMac(std::string_view key) {
  EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  ctx_ = hmac != nullptr ? EVP_MAC_CTX_new(hmac) : nullptr;
  EVP_MAC_free(hmac);  // the context holds its own reference
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  if (ctx_ == nullptr ||
      EVP_MAC_init(ctx_, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) != 1) {
    std::fputs("OpenSSL has no HMAC-SHA256: heartbeat datagrams cannot be signed\n", stderr);
    std::abort();  // the library is broken; nothing safe can be signed
  }
}

BeatMac::~BeatMac() { EVP_MAC_CTX_free(ctx_); }

std::string BeatMac::Mac(std::string_view signed_part) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  size_t length = 0;
  // Initialising again without a key keeps the key (its padded blocks are not hashed again).
  EVP_MAC_init(ctx_, nullptr, 0, nullptr);
  EVP_MAC_update(ctx_, reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size());
  EVP_MAC_final(ctx_, digest, &length, sizeof(digest));
  return std::string(reinterpret_cast<const char*>(digest), kBeatMacBytes);
}

std::string BeatMac::Encode(const BeatDatagram& beat) {
  std::string out(kMagic, sizeof(kMagic));
  out.push_back(static_cast<char>(beat.kind));
  out.push_back(static_cast<char>(beat.action));
  PutLittle(out, beat.node_id.size(), 2);
  PutLittle(out, beat.incarnation, 8);
  PutLittle(out, beat.sequence, 8);
  out += beat.node_id;
  out += Mac(out);
  return out;
}

bool BeatMac::Signed(std::string_view bytes) {
  if (bytes.size() < kBeatMacBytes) return false;
  const std::string_view signed_part = bytes.substr(0, bytes.size() - kBeatMacBytes);
  const std::string expected = Mac(signed_part);
  return CRYPTO_memcmp(expected.data(), bytes.data() + signed_part.size(), kBeatMacBytes) == 0;
}

std::string EncodeBeat(const BeatDatagram& beat, std::string_view key) { return BeatMac(key).Encode(beat); }

absl::StatusOr<BeatDatagram> PeekBeat(std::string_view bytes) {
  if (bytes.size() < kBeatHeaderBytes + kBeatMacBytes) {
    return absl::InvalidArgumentError(absl::StrCat("heartbeat datagram: ", bytes.size(), " bytes, shorter than ",
                                                   kBeatHeaderBytes + kBeatMacBytes));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("heartbeat datagram: does not begin with TBT1");
  }
  BeatDatagram beat;
  const uint8_t kind = static_cast<uint8_t>(bytes[4]);
  const uint8_t action = static_cast<uint8_t>(bytes[5]);
  if (kind != static_cast<uint8_t>(BeatKind::kBeat) && kind != static_cast<uint8_t>(BeatKind::kAnswer)) {
    return absl::InvalidArgumentError(absl::StrCat("heartbeat datagram: kind ", kind, " is not 1 (beat) or 2 (answer)"));
  }
  if (action > static_cast<uint8_t>(BeatAction::kRefused)) {
    return absl::InvalidArgumentError(absl::StrCat("heartbeat datagram: action ", action, " is not 0, 1 or 2"));
  }
  beat.kind = static_cast<BeatKind>(kind);
  beat.action = static_cast<BeatAction>(action);
  const size_t id_length = GetLittle(bytes, 6, 2);
  if (id_length == 0 || id_length > kMaxBeatNodeIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat datagram: node id of ", id_length, " bytes (1-", kMaxBeatNodeIdBytes, ")"));
  }
  if (bytes.size() != kBeatHeaderBytes + id_length + kBeatMacBytes) {
    return absl::InvalidArgumentError(absl::StrCat("heartbeat datagram: ", bytes.size(), " bytes where its node id of ",
                                                   id_length, " makes ", kBeatHeaderBytes + id_length + kBeatMacBytes));
  }
  beat.incarnation = GetLittle(bytes, 8, 8);
  beat.sequence = GetLittle(bytes, 16, 8);
  beat.node_id.assign(bytes.substr(kBeatHeaderBytes, id_length));
  return beat;
}

bool BeatSignedWith(std::string_view bytes, std::string_view key) { return BeatMac(key).Signed(bytes); }

}  // namespace torus::rpc

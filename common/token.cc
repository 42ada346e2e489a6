#include "common/token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace tide {

namespace {
std::string Hex(const unsigned char* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}
}  // namespace

std::string RandomHex(size_t nbytes) {
  std::vector<unsigned char> buf(nbytes);
  if (RAND_bytes(buf.data(), static_cast<int>(nbytes)) != 1) {
    fprintf(stderr, "fatal: OpenSSL RAND_bytes failed\n");
    abort();  // no safe fallback for secrets
  }
  return Hex(buf.data(), nbytes);
}

std::string NewToken(std::string_view prefix) { return std::string(prefix) + RandomHex(32); }

std::string NewId(std::string_view prefix) { return std::string(prefix) + RandomHex(6); }

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return Hex(md, len);
}

std::string TokenId(std::string_view token) {
  std::string kind = "t-";
  if (token.rfind("tide_", 0) == 0 && token.size() > 6 && token[6] == '_') {
    kind = std::string(1, token[5]) + "t-";
  }
  return kind + Sha256Hex(token).substr(0, 12);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tide

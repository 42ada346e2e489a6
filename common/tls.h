// Certificates and pins for Tide's TLS, on OpenSSL's libcrypto (no
// sockets here: the server and the client do the handshake with
// Boost.Asio's ssl::stream).
//
// A pin names a server by its public key, not by a CA: "sha256:" and the
// lower-case hex SHA-256 of the certificate's DER SubjectPublicKeyInfo, as
// `kubeadm join --discovery-token-ca-cert-hash` does. A certificate renewed
// with the same key keeps its pin; a new key gets a new one, so a server
// announces the pin of its next key ahead of a rotation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tide::tls {

// "sha256:" + 64 lower-case hex digits.
bool IsPin(std::string_view s);

// Pins separated by commas; each must be IsPin. `field` names the flag or
// field in the error.
Result<std::vector<std::string>> ParsePins(std::string_view text, const std::string& field);

// A new private key (ECDSA P-256), PEM.
Result<std::string> NewKey();

struct CertificateRequest {
  std::string key_pem;             // signs the certificate and is its key
  std::vector<std::string> hosts;  // DNS names and IP addresses for subjectAltName
  int64_t not_before_s = 0;        // Unix seconds
  int64_t not_after_s = 0;
};

// A self-signed certificate (PEM) for the request's key.
Result<std::string> SelfSigned(const CertificateRequest& req);

struct CertificateInfo {
  std::string pin;          // of its public key
  std::string fingerprint;  // SHA-256 of the DER certificate, "AB:CD:..."
  int64_t not_before_s = 0;
  int64_t not_after_s = 0;
};

// The first certificate of a PEM text.
Result<CertificateInfo> Inspect(const std::string& cert_pem);

// The pin of a private key's public half (PEM).
Result<std::string> PinOfKey(const std::string& key_pem);

// A DER SubjectPublicKeyInfo's pin (for the handshake's verify callback,
// which holds the certificate in OpenSSL's own form).
std::string PinOfSpki(const unsigned char* der, size_t len);

// A join token as printed carries the pins of the server that made it, so
// an agent verifies the server it joins without any CA: the secret, then
// each pin's 64 hex digits after a "." ("tide_j_<64 hex>.<64 hex>").
struct JoinToken {
  std::string secret;             // what the server checks
  std::vector<std::string> pins;  // "sha256:..." each
};
std::string JoinTokenWithPins(std::string_view secret, const std::vector<std::string>& pins);
// A token without pins is its secret alone. Errors name `field`.
Result<JoinToken> SplitJoinToken(std::string_view token, const std::string& field);

}  // namespace tide::tls

#include "common/tls.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cctype>
#include <ctime>
#include <memory>


namespace tide::tls {

namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;

// OpenSSL's last error as text, and the queue cleared.
std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

Bio ReadBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string BioText(BIO* b) {
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : "";
}

Result<Key> LoadKey(const std::string& pem) {
  Bio b = ReadBio(pem);
  Key k(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
  if (!k) return Status::InvalidArgument("not a PEM private key: " + OpenSslError(), "key");
  return k;
}

std::string Hex(const unsigned char* p, size_t n, bool colons) {
  static const char* kLower = "0123456789abcdef";
  static const char* kUpper = "0123456789ABCDEF";
  const char* digits = colons ? kUpper : kLower;
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (colons && i > 0) out += ':';
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

std::string Sha256(const unsigned char* p, size_t n, bool colons) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(p, n, md, &len, EVP_sha256(), nullptr);
  return Hex(md, len, colons);
}

std::string PinOf(EVP_PKEY* key) {
  unsigned char* der = nullptr;
  int n = i2d_PUBKEY(key, &der);
  if (n <= 0) return "";
  std::string pin = PinOfSpki(der, static_cast<size_t>(n));
  OPENSSL_free(der);
  return pin;
}

Result<int64_t> Seconds(const ASN1_TIME* t) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return Status::InvalidArgument("bad certificate time", "cert");
  return static_cast<int64_t>(timegm(&tm));
}

bool IsIp(const std::string& host) {
  if (host.find(':') != std::string::npos) return true;  // IPv6
  for (char c : host) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') return false;
  }
  return !host.empty();
}

Status AddExtension(X509* cert, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return Status::Internal("certificate extension " + value + ": " + OpenSslError());
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return Status::Ok();
}

}  // namespace

bool IsPin(std::string_view s) {
  if (s.size() != 7 + 64 || s.substr(0, 7) != "sha256:") return false;
  for (char c : s.substr(7)) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

Result<std::vector<std::string>> ParsePins(std::string_view text, const std::string& field) {
  std::vector<std::string> pins;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view one = text.substr(0, comma);
    if (!IsPin(one)) {
      return Status::InvalidArgument(
          field + ": \"" + std::string(one) +
              "\" is not a pin (sha256: and 64 lower-case hex digits, as tide server prints it)",
          field);
    }
    pins.emplace_back(one);
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return pins;
}

Result<std::string> NewKey() {
  Key k(EVP_EC_gen("P-256"));
  if (!k) return Status::Internal("cannot make a key: " + OpenSslError());
  Bio out(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(out.get(), k.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Status::Internal("cannot write a key: " + OpenSslError());
  }
  return BioText(out.get());
}

Result<std::string> SelfSigned(const CertificateRequest& req) {
  auto key = LoadKey(req.key_pem);
  if (!key.ok()) return key.status();
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);  // v3
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return Status::Internal("no randomness for a serial");
  serial[0] &= 0x7f;  // positive
  std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>> bn(BN_bin2bn(serial, sizeof(serial), nullptr));
  BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get()));
  ASN1_TIME_set(X509_getm_notBefore(cert.get()), static_cast<time_t>(req.not_before_s));
  ASN1_TIME_set(X509_getm_notAfter(cert.get()), static_cast<time_t>(req.not_after_s));
  X509_set_pubkey(cert.get(), key->get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  std::string cn = req.hosts.empty() ? "tide" : req.hosts[0];
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("Tide"),
                             -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  // Its own trust anchor (a client may name it in --ca-file), for serving.
  Status st = AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE");
  if (st.ok()) st = AddExtension(cert.get(), NID_key_usage, "critical,digitalSignature,keyCertSign");
  if (st.ok()) st = AddExtension(cert.get(), NID_ext_key_usage, "serverAuth");
  if (st.ok()) st = AddExtension(cert.get(), NID_subject_key_identifier, "hash");
  if (st.ok() && !req.hosts.empty()) {
    std::string san;
    for (const auto& h : req.hosts) {
      if (h.empty() || h.find(',') != std::string::npos) {
        return Status::InvalidArgument("bad host name \"" + h + "\" for a certificate", "hosts");
      }
      san += (san.empty() ? "" : ",") + std::string(IsIp(h) ? "IP:" : "DNS:") + h;
    }
    st = AddExtension(cert.get(), NID_subject_alt_name, san);
  }
  if (!st.ok()) return st;
  if (X509_sign(cert.get(), key->get(), EVP_sha256()) <= 0) {
    return Status::Internal("cannot sign the certificate: " + OpenSslError());
  }
  Bio out(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(out.get(), cert.get());
  return BioText(out.get());
}

Result<CertificateInfo> Inspect(const std::string& cert_pem) {
  Bio b = ReadBio(cert_pem);
  Cert cert(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
  if (!cert) return Status::InvalidArgument("not a PEM certificate: " + OpenSslError(), "cert");
  CertificateInfo info;
  EVP_PKEY* pub = X509_get0_pubkey(cert.get());
  if (!pub) return Status::InvalidArgument("certificate has no public key", "cert");
  info.pin = PinOf(pub);
  unsigned char* der = nullptr;
  int n = i2d_X509(cert.get(), &der);
  if (n <= 0) return Status::InvalidArgument("cannot encode the certificate", "cert");
  info.fingerprint = Sha256(der, static_cast<size_t>(n), true);
  OPENSSL_free(der);
  auto from = Seconds(X509_get0_notBefore(cert.get()));
  auto to = Seconds(X509_get0_notAfter(cert.get()));
  if (!from.ok()) return from.status();
  if (!to.ok()) return to.status();
  info.not_before_s = *from;
  info.not_after_s = *to;
  return info;
}

Result<std::string> PinOfKey(const std::string& key_pem) {
  auto key = LoadKey(key_pem);
  if (!key.ok()) return key.status();
  return PinOf(key->get());
}

std::string PinOfSpki(const unsigned char* der, size_t len) {
  return "sha256:" + Sha256(der, len, false);
}

std::string JoinTokenWithPins(std::string_view secret, const std::vector<std::string>& pins) {
  std::string out(secret);
  for (const auto& pin : pins) out += "." + pin.substr(7);
  return out;
}

Result<JoinToken> SplitJoinToken(std::string_view token, const std::string& field) {
  JoinToken out;
  size_t dot = token.find('.');
  out.secret = std::string(token.substr(0, dot));
  while (dot != std::string_view::npos) {
    token = token.substr(dot + 1);
    dot = token.find('.');
    std::string pin = "sha256:" + std::string(token.substr(0, dot));
    if (!IsPin(pin)) {
      return Status::InvalidArgument(
          field + ": the part after \".\" is not a server pin (64 lower-case hex digits): copy "
                  "the whole token as tide admin join-token printed it",
          field);
    }
    out.pins.push_back(pin);
  }
  if (out.secret.empty()) return Status::InvalidArgument(field + " is empty", field);
  return out;
}

}  // namespace tide::tls

#include "server/tls_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include "common/log.h"
#include "common/paths.h"
#include "common/tls.h"

namespace tide::server {
namespace {

constexpr int64_t kDay = 86'400;
constexpr int64_t kRenewBeforeS = 30 * kDay;
constexpr int64_t kSelfSignedLifeS = 397 * kDay;  // the longest a browser accepts

// A key file made if missing (0600).
Result<std::string> EnsureKey(const std::string& path) {
  if (auto key = ReadFile(path); key.ok()) return key;
  auto made = tls::NewKey();
  if (!made.ok()) return made.status();
  TIDE_RETURN_IF_ERROR(WriteFileAtomic(path, *made, 0600));
  spdlog::info("TLS: made a new key {}", path);
  return made;
}

std::vector<std::string> CertificateHosts(const std::string& listen) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::vector<std::string> hosts;
  if (host[0]) hosts.push_back(host);
  std::string ip = listen.substr(0, listen.rfind(':'));
  if (ip.size() > 2 && ip.front() == '[' && ip.back() == ']') ip = ip.substr(1, ip.size() - 2);
  if (!ip.empty() && ip != "0.0.0.0" && ip != "::") hosts.push_back(ip);
  for (const char* h : {"localhost", "127.0.0.1", "::1"}) {
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  return hosts;
}

std::string Day(int64_t unix_s) {
  char out[32];
  time_t t = static_cast<time_t>(unix_s);
  struct tm tm {};
  gmtime_r(&t, &tm);
  strftime(out, sizeof(out), "%Y-%m-%d", &tm);
  return out;
}

}  // namespace

TlsFiles::TlsFiles(TlsFileOptions options) : options_(std::move(options)) {
  if (options_.self_signed) {
    cert_ = options_.self_signed_dir + "/cert.pem";
    key_ = options_.self_signed_dir + "/key.pem";
    next_key_ = options_.self_signed_dir + "/next-key.pem";
  } else {
    cert_ = options_.cert;
    key_ = options_.key;
    next_key_ = options_.next_key;
  }
}

Status TlsFiles::Prepare() {
  if (options_.self_signed) {
    const std::string& dir = options_.self_signed_dir;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
    ::chmod(dir.c_str(), 0700);
    auto key = EnsureKey(key_);
    if (!key.ok()) return key.status();
    if (auto next = EnsureKey(next_key_); !next.ok()) return next.status();
    int64_t now = time(nullptr);
    bool fresh = false;
    if (auto cert = ReadFile(cert_); cert.ok()) {
      auto info = tls::Inspect(*cert);
      auto pin = tls::PinOfKey(*key);
      fresh = info.ok() && pin.ok() && info->pin == *pin && info->not_after_s - now > kRenewBeforeS;
    }
    if (!fresh) {
      auto cert = tls::SelfSigned({*key, CertificateHosts(options_.listen), now - 3600,
                                   now + kSelfSignedLifeS});
      if (!cert.ok()) return cert.status();
      TIDE_RETURN_IF_ERROR(WriteFileAtomic(cert_, *cert, 0644));
    }
  }
  auto pem = ReadFile(cert_);
  if (!pem.ok()) return pem.status().WithContext("--tls-cert");
  auto info = tls::Inspect(*pem);
  if (!info.ok()) return info.status().WithContext("--tls-cert " + cert_);
  std::vector<std::string> pins = {info->pin};
  if (!next_key_.empty()) {
    auto next = ReadFile(next_key_);
    if (!next.ok()) return next.status().WithContext("--tls-next-key");
    auto pin = tls::PinOfKey(*next);
    if (!pin.ok()) return pin.status().WithContext("--tls-next-key " + next_key_);
    if (*pin != info->pin) pins.push_back(*pin);
  }
  pins_ = std::move(pins);
  not_after_s_ = info->not_after_s;
  stamp_ = Stamp();
  return Status::Ok();
}

std::string TlsFiles::Stamp() const {
  std::string stamp;
  for (const std::string* path : {&cert_, &key_, &next_key_}) {
    struct stat st {};
    if (path->empty() || ::stat(path->c_str(), &st) != 0) {
      stamp += "-;";
      continue;
    }
    stamp += std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
             std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return stamp;
}

bool TlsFiles::Changed() const {
  if (Stamp() != stamp_) return true;
  return options_.self_signed && not_after_s_ - time(nullptr) <= kRenewBeforeS;
}

void TlsFiles::Log() const {
  auto pem = ReadFile(cert_);
  auto info = pem.ok() ? tls::Inspect(*pem) : Result<tls::CertificateInfo>(pem.status());
  if (!info.ok()) return;
  spdlog::info("TLS certificate {} ({}, valid until {})", cert_,
               options_.self_signed ? "self-signed" : "given", Day(info->not_after_s));
  spdlog::info("TLS pin {} (clients: --pin; join tokens carry it)", info->pin);
  if (pins_.size() > 1) {
    spdlog::info("TLS next key's pin {} (announced to agents ahead of a rotation)", pins_[1]);
  }
  spdlog::info("TLS fingerprint SHA-256 {}", info->fingerprint);
}

}  // namespace tide::server

// TlsFiles: the certificate, key and next key that `tide server` serves
// HTTPS with, and the pins it announces (docs/security.md, "TLS").
//
// Given files (--tls-cert/--tls-key) are read as they are. A self-signed
// server keeps DATA_DIR/tls/{key,cert,next-key}.pem: the key and the next
// key are made on first start, the certificate is made for the key and
// renewed with the same key (so the same pin) when under 30 days are left.
// The pins are the certificate's and the next key's (--tls-next-key, or
// next-key.pem): agents learn both, so a rotation to the next key is
// already trusted by every agent that heard of it.
//
// Changed() notices that a file was replaced (its mtime, size or inode
// changed), so the server reloads on a file change as on SIGHUP.
//
// Thread safety: one thread uses an instance (the server's signal thread,
// after start-up).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tide::server {

struct TlsFileOptions {
  std::string cert, key;  // given files; empty with self_signed
  std::string next_key;   // given: optional; self-signed: DATA_DIR/tls/next-key.pem
  bool self_signed = false;
  std::string self_signed_dir;  // DATA_DIR/tls
  std::string listen;           // HOST:PORT, named in a self-signed certificate
};

class TlsFiles {
 public:
  explicit TlsFiles(TlsFileOptions options);

  // Makes or renews a self-signed certificate (and its keys) when needed;
  // then reads the pins and remembers the files' state for Changed().
  Status Prepare();

  const std::string& cert_file() const { return cert_; }
  const std::string& key_file() const { return key_; }
  bool self_signed() const { return options_.self_signed; }

  // The certificate's pin first, then the next key's (when there is one).
  const std::vector<std::string>& pins() const { return pins_; }

  // True when a file was replaced since the last Prepare(), or when a
  // self-signed certificate is due for renewal.
  bool Changed() const;

  // Logs the certificate, its validity and the pins.
  void Log() const;

 private:
  std::string Stamp() const;

  const TlsFileOptions options_;
  std::string cert_, key_, next_key_;
  std::vector<std::string> pins_;
  std::string stamp_;
  int64_t not_after_s_ = 0;
};

}  // namespace tide::server

// BlobStore: bytes that are not rows — job logs, outputs and code archives —
// kept as files under one directory.
//
//   DIR/logs/<job>/<attempt>.log       appended by the agent, byte offsets
//   DIR/logs/<job>/<attempt>.rank<r>.log  the same for rank r > 0 of a gang
//   DIR/outputs/<job>/<path>           written atomically per file
//   DIR/code/<owner>/<sha256>.tar.gz   uploaded archives, content-addressed
//
// Every path from a client is checked with CleanRelativePath first.
// Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace tide::server {

struct BlobFile {
  std::string path;  // relative
  int64_t size = 0;
};

class BlobStore {
 public:
  explicit BlobStore(std::string dir);

  Status Init();

  // Appends `data` to the log of (job, attempt, rank) if `offset` equals the
  // log's current size. A retry of bytes already stored (offset + size <=
  // current size) succeeds without writing; a gap is a kConflict naming the
  // size. Rank 0 is the log of a single-node job.
  Status AppendLog(const std::string& job, int attempt, int rank, int64_t offset,
                   std::string_view data);
  int64_t LogSize(const std::string& job, int attempt, int rank = 0);
  // Up to `max` bytes from `offset`.
  Result<std::string> ReadLog(const std::string& job, int attempt, int rank, int64_t offset,
                              int64_t max = 64 << 20);

  Status PutOutput(const std::string& job, const std::string& rel_path, std::string_view data);
  Result<std::vector<BlobFile>> ListOutputs(const std::string& job);
  Result<std::string> GetOutput(const std::string& job, const std::string& rel_path);

  // Stores an archive; returns its id (hex SHA-256 of the bytes).
  Result<std::string> PutCode(const std::string& owner, const std::string& archive);
  bool HasCode(const std::string& owner, const std::string& id);
  Result<std::string> GetCode(const std::string& owner, const std::string& id);

 private:
  std::string LogPath(const std::string& job, int attempt, int rank) const;

  std::string dir_;
  std::mutex mu_;  // serialises log appends
};

}  // namespace tide::server

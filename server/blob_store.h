// BlobStore: bytes that are not rows — job logs, outputs and code archives —
// kept as files under one directory.
//
//   DIR/logs/<job>/<attempt>.log       appended by the agent, byte offsets
//   DIR/logs/<job>/<attempt>.rank<r>.log  the same for rank r > 0 of a gang
//   DIR/metrics/<job>/<attempt>[.rank<r>].jsonl  the job's metric lines, the same way
//   DIR/checkpoints/<job>/rank<r>.tar.gz  the newest acknowledged checkpoint of
//                                      each rank, replaced atomically
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

// Append-only streams of an attempt, kept by byte offset.
enum class Stream : uint8_t { kLog, kMetrics };

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
                   std::string_view data, Stream stream = Stream::kLog);
  int64_t LogSize(const std::string& job, int attempt, int rank = 0, Stream stream = Stream::kLog);
  // Up to `max` bytes from `offset`.
  Result<std::string> ReadLog(const std::string& job, int attempt, int rank, int64_t offset,
                              int64_t max = 64 << 20, Stream stream = Stream::kLog);

  // Writes `archive` beside the checkpoint of (job, rank) for `attempt`;
  // CommitCheckpoint then replaces the checkpoint with it atomically (a
  // reader sees the old one or the new one, never part of one), or
  // DiscardCheckpoint drops it.
  Status StageCheckpoint(const std::string& job, int rank, int attempt, std::string_view archive);
  Status CommitCheckpoint(const std::string& job, int rank, int attempt);
  void DiscardCheckpoint(const std::string& job, int rank, int attempt);
  // NotFound if the rank has none.
  Result<std::string> GetCheckpoint(const std::string& job, int rank);

  Status PutOutput(const std::string& job, const std::string& rel_path, std::string_view data);
  Result<std::vector<BlobFile>> ListOutputs(const std::string& job);
  Result<std::string> GetOutput(const std::string& job, const std::string& rel_path);

  // Stores an archive; returns its id (hex SHA-256 of the bytes).
  Result<std::string> PutCode(const std::string& owner, const std::string& archive);
  bool HasCode(const std::string& owner, const std::string& id);
  Result<std::string> GetCode(const std::string& owner, const std::string& id);

  // Deletes every blob of the job: logs and metric lines of every attempt
  // and rank, the checkpoints, the outputs. Done already is not an error.
  Status DeleteJob(const std::string& job);
  Status DeleteCode(const std::string& owner, const std::string& id);

 private:
  std::string LogPath(const std::string& job, int attempt, int rank, Stream stream) const;
  std::string CheckpointPath(const std::string& job, int rank) const;

  std::string dir_;
  std::mutex mu_;  // serialises log appends
};

}  // namespace tide::server

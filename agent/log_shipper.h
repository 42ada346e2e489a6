// LogShipper: sends a job's log to the server from a local file, by offset.
//
// The job's output is first appended to DATA_DIR/jobs/<id>/<attempt>/log by
// the runner; the shipper sends the bytes [sent, written) in chunks, each
// POSTed with the offset of its first byte. A chunk counts as sent only when
// the server acknowledged it, so a failed or timed-out POST is simply sent
// again with the same offset (the server's log endpoint is idempotent):
// nothing is lost and nothing is appended twice, and a server outage only
// makes the local file run ahead.
//
// Masks: the values of the job's secrets are sent as '*' of the same length
// (offsets stay those of the local file). So that a value split across two
// reads is still found, Ship holds back the last (longest mask - 1) bytes
// until more follow or the caller says the file is complete.
//
// Thread safety: Ship() is called by one thread; the file may be appended to
// concurrently by another.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tide::agent {

class LogShipper {
 public:
  using PostFn = std::function<Status(int64_t offset, std::string_view data)>;

  // `fd` is read with pread and not owned. `max_chunk` bounds one POST.
  LogShipper(int fd, PostFn post, size_t max_chunk = 1 << 20)
      : fd_(fd), post_(std::move(post)), max_chunk_(max_chunk) {}

  // Values to mask; empty ones are ignored.
  void set_masks(std::vector<std::string> masks);

  // Sends bytes up to `written` (the file's length as its writer knows it),
  // or, unless `complete`, up to what may still begin a masked value. Ok
  // once everything sent is acknowledged; otherwise the first error, with
  // the unsent bytes kept for the next call.
  Status Ship(int64_t written, bool complete = false);

  int64_t sent() const { return sent_; }
  // Bytes before `written` that Ship would send now.
  bool HasToSend(int64_t written, bool complete = false) const;

 private:
  int64_t Limit(int64_t written, bool complete) const;
  // Reads [offset, offset + n) (fewer at the file's end).
  Status Read(int64_t offset, size_t n, std::string& buf) const;
  // Overwrites every masked value in `buf`, which starts at `offset`.
  void Mask(int64_t offset, std::string& buf);

  int fd_;
  PostFn post_;
  size_t max_chunk_;
  int64_t sent_ = 0;
  std::vector<std::string> masks_;
  size_t longest_ = 0;
  // Values found in earlier reads, [begin, end) in the file, that may reach
  // into bytes not yet sent.
  std::set<std::pair<int64_t, int64_t>> found_;
};

}  // namespace tide::agent

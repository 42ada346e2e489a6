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
// Thread safety: Ship() is called by one thread; the file may be appended to
// concurrently by another.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "common/status.h"

namespace tide::agent {

class LogShipper {
 public:
  using PostFn = std::function<Status(int64_t offset, std::string_view data)>;

  // `fd` is read with pread and not owned. `max_chunk` bounds one POST.
  LogShipper(int fd, PostFn post, size_t max_chunk = 1 << 20)
      : fd_(fd), post_(std::move(post)), max_chunk_(max_chunk) {}

  // Sends bytes up to `written` (the file's length as its writer knows it).
  // Ok once everything is acknowledged; otherwise the first error, with the
  // unsent bytes kept for the next call.
  Status Ship(int64_t written);

  int64_t sent() const { return sent_; }

 private:
  int fd_;
  PostFn post_;
  size_t max_chunk_;
  int64_t sent_ = 0;
};

}  // namespace tide::agent

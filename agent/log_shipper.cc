#include "agent/log_shipper.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace tide::agent {

void LogShipper::set_masks(std::vector<std::string> masks) {
  masks_.clear();
  longest_ = 0;
  for (std::string& m : masks) {
    if (m.empty()) continue;
    longest_ = std::max(longest_, m.size());
    masks_.push_back(std::move(m));
  }
}

int64_t LogShipper::Limit(int64_t written, bool complete) const {
  if (complete || longest_ <= 1) return written;
  return std::max(sent_, written - static_cast<int64_t>(longest_ - 1));
}

bool LogShipper::HasToSend(int64_t written, bool complete) const {
  return Limit(written, complete) > sent_;
}

Status LogShipper::Read(int64_t offset, size_t n, std::string& buf) const {
  buf.resize(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd_, buf.data() + got, n - got, offset + static_cast<int64_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::Internal(std::string("read job log: ") + std::strerror(errno));
    if (r == 0) break;  // the writer's count ran ahead of the file; send what is there
    got += static_cast<size_t>(r);
  }
  buf.resize(got);
  return Status::Ok();
}

void LogShipper::Mask(int64_t offset, std::string& buf) {
  const int64_t end = offset + static_cast<int64_t>(buf.size());
  // Values found before that end before this read are done with.
  for (auto it = found_.begin(); it != found_.end();) {
    it = it->second <= offset ? found_.erase(it) : std::next(it);
  }
  // Found in the bytes as read, so values that overlap are each masked.
  for (const std::string& m : masks_) {
    for (size_t at = buf.find(m); at != std::string::npos; at = buf.find(m, at + 1)) {
      found_.insert({offset + static_cast<int64_t>(at), offset + static_cast<int64_t>(at + m.size())});
    }
  }
  // Then overwritten: these and the tails of values an earlier read found.
  for (const auto& [begin, stop] : found_) {
    const int64_t from = std::max(begin, offset);
    const int64_t to = std::min(stop, end);
    if (from < to) std::fill(buf.begin() + (from - offset), buf.begin() + (to - offset), '*');
  }
}

Status LogShipper::Ship(int64_t written, bool complete) {
  const int64_t limit = Limit(written, complete);
  std::string buf;
  while (sent_ < limit) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(limit - sent_, max_chunk_));
    // With masks, read on past the chunk: a value that begins in it and
    // ends after it is masked in both.
    const size_t ahead = masks_.empty() ? 0
                                        : static_cast<size_t>(std::min<int64_t>(
                                              written - sent_ - static_cast<int64_t>(want),
                                              static_cast<int64_t>(longest_ - 1)));
    TIDE_RETURN_IF_ERROR(Read(sent_, want + ahead, buf));
    if (buf.empty()) return Status::Internal("job log is shorter than written bytes");
    if (!masks_.empty()) Mask(sent_, buf);
    buf.resize(std::min(buf.size(), want));
    Status st = post_(sent_, buf);
    if (!st.ok()) return st;
    sent_ += static_cast<int64_t>(buf.size());
  }
  return Status::Ok();
}

}  // namespace tide::agent

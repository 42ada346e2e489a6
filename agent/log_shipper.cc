#include "agent/log_shipper.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tide::agent {

Status LogShipper::Ship(int64_t written) {
  std::string buf;
  while (sent_ < written) {
    size_t want = static_cast<size_t>(std::min<int64_t>(written - sent_, max_chunk_));
    buf.resize(want);
    size_t got = 0;
    while (got < want) {
      ssize_t n = ::pread(fd_, buf.data() + got, want - got, sent_ + static_cast<int64_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::Internal(std::string("read job log: ") + std::strerror(errno));
      if (n == 0) break;  // the writer's count ran ahead of the file; send what is there
      got += static_cast<size_t>(n);
    }
    if (got == 0) return Status::Internal("job log is shorter than written bytes");
    buf.resize(got);
    Status st = post_(sent_, buf);
    if (!st.ok()) return st;
    sent_ += static_cast<int64_t>(got);
  }
  return Status::Ok();
}

}  // namespace tide::agent

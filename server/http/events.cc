// GET /v1/events: the caller's jobs as they change, as server-sent events
// (text/event-stream), which is how the console stays live without
// reloading. Each `job` event carries the job as GET /v1/jobs/{id} shows
// it. The stream ends only when its client goes, the server stops, or the
// credential it was opened with stops working (a logout, a revocation).
//
// An event's id is "BOOT.SEQ": SEQ numbers the server's writes of jobs
// (JobState::ChangedSince), BOOT names this run of the server. A client
// that reconnects with Last-Event-ID from this run gets every change it
// missed; one from an earlier run gets `event: reset` (read the list again).
#include "common/token.h"
#include "server/http/api.h"

namespace tide::server {

namespace {

const std::string& Boot() {
  static const std::string boot = RandomHex(4);
  return boot;
}

// The SEQ of "BOOT.SEQ" if BOOT is this run's.
std::optional<uint64_t> SeqOf(const std::string& id) {
  size_t dot = id.find('.');
  if (dot == std::string::npos || id.substr(0, dot) != Boot()) return std::nullopt;
  uint64_t seq = 0;
  for (size_t i = dot + 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9' || seq > (uint64_t{1} << 60)) return std::nullopt;
    seq = seq * 10 + static_cast<uint64_t>(id[i] - '0');
  }
  return seq;
}

constexpr int64_t kPingMs = 15'000;

}  // namespace

Response Api::Events(const Request& req, const Caller& caller) {
  if (!req.query.empty()) {
    return ErrorResponse(Status::InvalidArgument("unknown query parameter", req.query.begin()->first));
  }
  std::string last_id = req.Header("last-event-id");
  std::optional<uint64_t> from = SeqOf(last_id);
  const bool reset = !last_id.empty() && !from;
  const uint64_t start = from ? *from : core_->JobChangeSeq();
  Response r;
  r.content_type = "text/event-stream; charset=utf-8";
  r.headers["Cache-Control"] = "no-store";
  r.stream = [this, caller, start, reset](const ChunkWriter& write) {
    // The id says where this stream starts: a reconnect resumes there.
    std::string head = "retry: 2000\nid: " + Boot() + "." + std::to_string(start) + "\n";
    head += reset ? "event: reset\ndata: {}\n\n" : "\n";
    if (!write(head)) return;
    uint64_t seq = start;
    int64_t last_write = clock_->MonotonicMs();
    while (true) {
      // Logged out, revoked or ended: the stream ends with its credential.
      if (!core_->CredentialValid(caller)) return;
      uint64_t seen = core_->epoch();
      uint64_t next = seq;
      std::vector<api::Job> jobs = core_->JobChangesSince(caller, seq, &next);
      if (!jobs.empty()) {
        std::string out;
        for (size_t i = 0; i < jobs.size(); ++i) {
          // The id goes with the last of the changes read together.
          if (i + 1 == jobs.size()) out += "id: " + Boot() + "." + std::to_string(next) + "\n";
          out += "event: job\ndata: " + JobJson(jobs[i]).dump() + "\n\n";
        }
        if (!write(out)) return;
        last_write = clock_->MonotonicMs();
      }
      if (next != seq) {
        seq = next;
        continue;  // a thousand changes were read: there may be more
      }
      if (clock_->MonotonicMs() - last_write >= kPingMs) {
        if (!write(": ping\n\n")) return;
        last_write = clock_->MonotonicMs();
      }
      core_->WaitChange(seen, clock_->MonotonicMs() + 1000);
      if (!write("")) return;  // the client went away while nothing changed
    }
  };
  return r;
}

}  // namespace tide::server

// /v1/queue: pending and running work by requested GPU type, expected
// waits, and the caller's own queued jobs with their reasons.
#include "server/http/api.h"

namespace tide::server {

using nlohmann::json;

Response Api::Queue(const Request& req, const Caller& caller, const Segments& seg) {
  if (req.method != "GET" || seg.size() != 2) {
    return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
  }
  auto limit = QueryInt(req, "limit", 1000, 1, 10'000);
  if (!limit.ok()) return ErrorResponse(limit.status());
  QueueSummary q = core_->Queue(caller);
  json groups = json::array();
  for (const auto& g : q.groups) {
    json j = {{"gpu_type", g.gpu_type},         {"pending_jobs", g.pending_jobs},
              {"pending_gpus", g.pending_gpus}, {"running_jobs", g.running_jobs},
              {"running_gpus", g.running_gpus}};
    j["expected_wait_s"] = g.expected_wait_ms < 0 ? json(nullptr) : json(g.expected_wait_ms / 1000);
    groups.push_back(j);
  }
  json jobs = json::array();
  for (const auto& j : q.jobs) {
    if (static_cast<int64_t>(jobs.size()) == *limit) break;
    json o = {{"id", j.id}, {"name", j.name}, {"gpu_type", j.gpu_type}, {"gpus", j.gpus},
              {"pending_reason", j.pending_reason}};
    o["expected_start"] = j.expected_start > 0 ? json(j.expected_start) : json(nullptr);
    jobs.push_back(o);
  }
  return JsonResponse(200, {{"by_gpu_type", groups},
                            {"jobs", jobs},
                            {"total_gpus", q.total_gpus},
                            {"free_gpus", q.free_gpus},
                            {"estimated_at", q.estimated_at}});
}

}  // namespace tide::server

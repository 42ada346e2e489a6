// /v1/batches: submit a batch file, list, show, cancel, and the results
// table (each trial's parameters, status, attempts, cost and last metrics).
#include "api/batch.h"
#include "server/http/api.h"
#include "server/job_metrics.h"

namespace tide::server {

using nlohmann::json;

json Api::BatchJson(const BatchInfo& b) const {
  json j = api::ToJson(b.batch);
  j["status"] = b.status;
  j["counts"] = b.counts;
  j["cost"] = Credits(b.cost);
  j["escrow"] = Credits(b.escrow);
  j["finished_at"] = b.finished_at;
  j.erase("budget_micros");
  return j;
}

Response Api::Batches(const Request& req, const Caller& caller, const Segments& seg) {
  if (seg.size() == 2 && req.method == "POST") {
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    auto spec = api::BatchSpecFromJson(*body);
    if (!spec.ok()) return ErrorResponse(spec.status());
    std::string key = req.Header("idempotency-key");
    if (key.size() > 256) {
      return ErrorResponse(Status::InvalidArgument("longer than 256 characters", "Idempotency-Key"));
    }
    auto result = core_->SubmitBatch(caller, *spec, key);
    if (!result.ok()) return ErrorResponse(result.status());
    Response r = JsonResponse(result->second ? 201 : 200, BatchJson(result->first));
    r.headers["Location"] = "/v1/batches/" + result->first.batch.id;
    return r;
  }
  if (seg.size() == 2 && req.method == "GET") {
    json list = json::array();
    for (const auto& b : core_->ListBatches(caller)) list.push_back(BatchJson(b));
    return JsonResponse(200, {{"batches", list}});
  }
  if (seg.size() < 3) return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
  const std::string& id = seg[2];
  if (seg.size() == 3 && req.method == "GET") {
    auto b = core_->GetBatch(caller, id);
    if (!b.ok()) return ErrorResponse(b.status());
    return JsonResponse(200, BatchJson(*b));
  }
  if (seg.size() == 4 && seg[3] == "cancel" && req.method == "POST") {
    auto b = core_->CancelBatch(caller, id);
    if (!b.ok()) return ErrorResponse(b.status());
    return JsonResponse(200, BatchJson(*b));
  }
  if (seg.size() == 4 && seg[3] == "results" && req.method == "GET") {
    auto trials = core_->BatchTrials(caller, id);
    if (!trials.ok()) return ErrorResponse(trials.status());
    json list = json::array();
    for (const api::Job& job : *trials) {
      MetricSeries m = ReadMetrics(blobs_, job.id, job.attempt, 0, 0, /*last_only=*/true);
      JobMoney money = core_->MoneyOf(job.id);
      list.push_back({{"id", job.trial},
                      {"job", job.id},
                      {"params", job.params},
                      {"status", api::JobStatusName(job.status)},
                      {"reason", job.reason},
                      {"attempts", job.attempts.size()},
                      {"retries", job.retries},
                      {"cost", Credits(money.cost)},
                      {"metrics", m.last}});
    }
    return JsonResponse(200, {{"batch", id}, {"results", list}});
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

}  // namespace tide::server

// /v1/agent/...: what agents call. Every route but register needs a node
// token, and a node may only touch jobs leased to it.
#include <cctype>

#include "api/types.h"
#include "common/archive.h"
#include "common/token.h"
#include "server/http/api.h"

namespace tide::server {

using nlohmann::json;

Response Api::Agent(const Request& req, const Caller& caller, const Segments& seg) {
  if (seg.size() == 3 && seg[2] == "register" && req.method == "POST") {
    if (caller.scope != Scope::kJoin && caller.scope != Scope::kNode) {
      return ErrorResponse(Status::PermissionDenied("register needs a join or node token"));
    }
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    auto reg = api::RegisterRequestFromJson(*body);
    if (!reg.ok()) return ErrorResponse(reg.status());
    // Without --advertise-addr, the other nodes of a gang reach this one
    // where its registration came from.
    if (reg->address.empty()) reg->address = req.remote_addr;
    auto result = core_->RegisterNode(caller, *reg);
    if (!result.ok()) return ErrorResponse(result.status());
    return JsonResponse(200, {{"node_id", result->first}, {"node_token", result->second}});
  }
  if (caller.scope != Scope::kNode) {
    return ErrorResponse(Status::PermissionDenied("this route needs a node token"));
  }
  const std::string& node_id = caller.subject;
  if (seg.size() == 3 && seg[2] == "heartbeat" && req.method == "POST") {
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    auto hb = api::HeartbeatFromJson(*body);
    if (!hb.ok()) return ErrorResponse(hb.status());
    auto work = core_->Heartbeat(node_id, *hb);
    if (!work.ok()) return ErrorResponse(work.status());
    work->tls_pins = tls_pins();
    auto renewed = core_->RenewNodeToken(caller);
    if (!renewed.ok()) return ErrorResponse(renewed.status());
    work->node_token = *renewed;
    return JsonResponse(200, api::ToJson(*work));
  }
  if (seg.size() == 3 && seg[2] == "assignments" && req.method == "GET") {
    auto wait = QueryInt(req, "wait", 25, 0, 60);
    if (!wait.ok()) return ErrorResponse(wait.status());
    auto work = core_->PollWork(node_id, *wait * 1000);
    if (!work.ok()) return ErrorResponse(work.status());
    return JsonResponse(200, api::ToJson(*work));
  }
  if (seg.size() == 5 && seg[2] == "jobs") {
    const std::string& job_id = seg[3];
    const std::string& what = seg[4];
    if (what == "events" && req.method == "POST") {
      auto body = ParseBody(req);
      if (!body.ok()) return ErrorResponse(body.status());
      auto ev = api::JobEventFromJson(*body);
      if (!ev.ok()) return ErrorResponse(ev.status());
      Status st = core_->JobEvent(node_id, job_id, *ev);
      if (!st.ok()) return ErrorResponse(st);
      return JsonResponse(200, {{"ok", true}});
    }
    auto attempt = QueryInt(req, "attempt", 0, 0, 1'000'000);
    if (!attempt.ok()) return ErrorResponse(attempt.status());
    if ((what == "logs" || what == "metrics") && req.method == "POST") {
      // The log and the metric lines: appended by offset, per rank.
      const Stream stream = what == "logs" ? Stream::kLog : Stream::kMetrics;
      if (*attempt == 0) return ErrorResponse(Status::InvalidArgument("is required", "attempt"));
      auto offset = QueryInt(req, "offset", -1, 0, int64_t{1} << 50);
      if (!offset.ok()) return ErrorResponse(offset.status());
      if (*offset < 0) return ErrorResponse(Status::InvalidArgument("is required", "offset"));
      // A gang's ranks each have their own log; the node says which rank.
      const int att = static_cast<int>(*attempt);
      auto rank = core_->CheckAgentJob(node_id, job_id, att);
      if (!rank.ok()) return ErrorResponse(rank.status());
      Status st = blobs_->AppendLog(job_id, att, *rank, *offset, req.body, stream);
      if (!st.ok()) return ErrorResponse(st);
      if (stream == Stream::kLog) core_->NotifyChange();  // log follows wait for it
      return JsonResponse(200, {{"size", blobs_->LogSize(job_id, att, *rank, stream)}});
    }
    if (what == "checkpoint" && (req.method == "PUT" || req.method == "GET")) {
      if (*attempt == 0) return ErrorResponse(Status::InvalidArgument("is required", "attempt"));
      // Only the attempt that runs now may replace or fetch it: a stale
      // attempt must not overwrite what a newer one saved.
      auto rank = core_->CheckAgentJob(node_id, job_id, static_cast<int>(*attempt),
                                       /*current_only=*/true);
      if (!rank.ok()) return ErrorResponse(rank.status());
      if (req.method == "GET") {
        auto data = blobs_->GetCheckpoint(job_id, *rank);
        if (!data.ok()) return ErrorResponse(data.status());
        Response r;
        r.content_type = "application/gzip";
        r.body = std::move(data).value();
        return r;
      }
      // The digest proves the archive arrived whole; an archive cut off or
      // damaged on the way is refused and the previous one stays.
      std::string digest = req.Header("x-tide-sha256");
      if (digest.size() != 64) {
        return ErrorResponse(Status::InvalidArgument("is required: the SHA-256 of the archive, "
                                                     "64 hex characters",
                                                     "X-Tide-Sha256"));
      }
      for (char& c : digest) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (Sha256Hex(req.body) != digest) {
        return ErrorResponse(Status::InvalidArgument(
            "does not match the " + std::to_string(req.body.size()) +
                " bytes received: the checkpoint was damaged or cut off and is not kept",
            "X-Tide-Sha256"));
      }
      Status valid = ValidateArchive(req.body);
      if (!valid.ok()) return ErrorResponse(Status::InvalidArgument(valid.message(), "body"));
      // Written beside the current one first (the slow part, outside the
      // core), then put in place by the core once it has checked again that
      // the attempt is still this node's.
      const int att = static_cast<int>(*attempt);
      Status st = blobs_->StageCheckpoint(job_id, *rank, att, req.body);
      if (!st.ok()) return ErrorResponse(st);
      st = core_->RecordCheckpoint(node_id, job_id, att, static_cast<int64_t>(req.body.size()),
                                   [&] { return blobs_->CommitCheckpoint(job_id, *rank, att); });
      if (!st.ok()) {
        blobs_->DiscardCheckpoint(job_id, *rank, att);
        return ErrorResponse(st);
      }
      return JsonResponse(200, {{"bytes", req.body.size()}});
    }
    if (what == "outputs" && req.method == "PUT") {
      if (*attempt == 0) return ErrorResponse(Status::InvalidArgument("is required", "attempt"));
      auto rank = core_->CheckAgentJob(node_id, job_id, static_cast<int>(*attempt),
                                       /*current_only=*/true);
      if (!rank.ok()) return ErrorResponse(rank.status());
      // Rank 0's outputs are the job's; another rank's go under rank-<r>/.
      std::string path = req.Query("path");
      if (*rank > 0) path = "rank-" + std::to_string(*rank) + "/" + path;
      Status st = blobs_->PutOutput(job_id, path, req.body);
      if (!st.ok()) return ErrorResponse(st);
      return JsonResponse(200, {{"ok", true}});
    }
    if (what == "code" && req.method == "GET") {
      auto rank = core_->CheckAgentJob(node_id, job_id, 0);
      if (!rank.ok()) return ErrorResponse(rank.status());
      auto job = core_->GetJob(Caller{Scope::kAdmin, "admin"}, job_id);
      if (!job.ok()) return ErrorResponse(job.status());
      if (job->spec.code.empty()) return ErrorResponse(Status::NotFound("job has no code archive"));
      auto data = blobs_->GetCode(job->owner, job->spec.code);
      if (!data.ok()) return ErrorResponse(data.status());
      Response r;
      r.content_type = "application/gzip";
      r.body = std::move(data).value();
      return r;
    }
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

}  // namespace tide::server

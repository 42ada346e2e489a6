// /v1/jobs: submit, list, get, cancel, delete, logs (with follow), metrics, GPU telemetry, outputs;
// /v1/code.
#include <spdlog/spdlog.h>

#include <stdexcept>
#include <tuple>

#include "api/telemetry.h"
#include "api/types.h"
#include "common/archive.h"
#include "common/paths.h"
#include "server/http/api.h"
#include "server/job_metrics.h"

namespace tide::server {

using nlohmann::json;

namespace {
// The job whose data a request reads, unless its data was deleted.
Result<api::Job> WithData(Result<api::Job> job) {
  if (job.ok() && job->deleted_at > 0) {
    return Status::NotFound("the data of job " + job->id +
                            " was deleted (tide rm, or the server's retention): its logs, "
                            "metrics, outputs and checkpoints are gone");
  }
  return job;
}
}  // namespace

Response Api::Jobs(const Request& req, const Caller& caller, const Segments& seg) {
  if (seg.size() == 2) {
    if (req.method == "POST") return SubmitJob(req, caller);
    if (req.method == "GET") return ListJobs(req, caller);
    return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
  }
  const std::string& id = seg[2];
  if (seg.size() == 3 && req.method == "GET") {
    auto job = core_->GetJob(caller, id);
    if (!job.ok()) return ErrorResponse(job.status());
    return JsonResponse(200, JobJson(*job));
  }
  if (seg.size() == 3 && req.method == "DELETE") {
    auto job = core_->DeleteJob(caller, id);
    if (!job.ok()) return ErrorResponse(job.status());
    return JsonResponse(200, JobJson(*job));
  }
  if (seg.size() == 4 && seg[3] == "cancel" && req.method == "POST") {
    auto job = core_->CancelJob(caller, id);
    if (!job.ok()) return ErrorResponse(job.status());
    return JsonResponse(200, JobJson(*job));
  }
  if (seg.size() == 4 && seg[3] == "logs" && req.method == "GET") return Logs(req, caller, id);
  if (seg.size() == 4 && seg[3] == "metrics" && req.method == "GET") return Metrics(req, caller, id);
  if (seg.size() == 4 && seg[3] == "telemetry" && req.method == "GET") {
    for (auto& [k, v] : req.query) {
      if (k != "series" && k != "follow") {
        return ErrorResponse(Status::InvalidArgument("unknown query parameter", k));
      }
    }
    auto series = QueryBool(req, "series", true);
    if (!series.ok()) return ErrorResponse(series.status());
    auto follow = QueryBool(req, "follow", false);
    if (!follow.ok()) return ErrorResponse(follow.status());
    auto t = core_->JobTelemetry(caller, id, *series);
    if (t.ok() && *follow) return TelemetryStream(caller, *t);
    if (!t.ok()) return ErrorResponse(t.status());
    return JsonResponse(200, api::ToJson(*t));
  }
  if (seg.size() == 4 && seg[3] == "checkpoint" && req.method == "GET") {
    auto job = WithData(core_->GetJob(caller, id));
    if (!job.ok()) return ErrorResponse(job.status());
    auto rank = QueryInt(req, "rank", 0, 0, api::kMaxNodes - 1);
    if (!rank.ok()) return ErrorResponse(rank.status());
    auto data = blobs_->GetCheckpoint(id, static_cast<int>(*rank));
    if (!data.ok()) return ErrorResponse(data.status());
    Response r;
    r.content_type = "application/gzip";
    r.body = std::move(data).value();
    r.headers["X-Tide-Checkpoint-Attempt"] = std::to_string(job->checkpoint_attempt);
    return r;
  }
  if (seg.size() == 4 && seg[3] == "outputs.tar" && req.method == "GET") {
    return OutputsTar(caller, id);
  }
  if (seg.size() >= 4 && seg[3] == "outputs" && req.method == "GET") {
    std::string path;
    for (size_t i = 4; i < seg.size(); ++i) path += (i > 4 ? "/" : "") + seg[i];
    return Outputs(req, caller, id, path);
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

Response Api::SubmitJob(const Request& req, const Caller& caller) {
  auto body = ParseBody(req);
  if (!body.ok()) return ErrorResponse(body.status());
  auto spec = api::JobSpecFromJson(*body);
  if (!spec.ok()) return ErrorResponse(spec.status());
  std::string key = req.Header("idempotency-key");
  if (key.size() > 256) {
    return ErrorResponse(Status::InvalidArgument("longer than 256 characters", "Idempotency-Key"));
  }
  auto result = core_->SubmitJob(caller, std::move(spec).value(), key);
  if (!result.ok()) return ErrorResponse(result.status());
  Response r = JsonResponse(201, JobJson(result->first));
  r.headers["Location"] = "/v1/jobs/" + result->first.id;
  return r;
}

nlohmann::json Api::JobJson(const api::Job& job) const {
  json j = api::ToJson(job);
  JobMoney m = core_->MoneyOf(job.id);
  j["cost"] = Credits(m.cost);
  j["escrow"] = Credits(m.escrow);
  return j;
}

namespace {

// "queued,running" -> {"queued", "running"}, as `squeue -t PD,R` takes a
// list. Empty items are a 400 naming the parameter.
Result<std::set<std::string>> QueryList(const Request& req, const std::string& key) {
  std::set<std::string> out;
  std::string v = req.Query(key);
  if (v.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t end = v.find(',', start);
    std::string item = v.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (item.empty()) {
      return Status::InvalidArgument("an empty value in the list \"" + v + "\"", key);
    }
    out.insert(item);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

Response Api::ListJobs(const Request& req, const Caller& caller) {
  for (auto& [k, v] : req.query) {
    if (k != "status" && k != "tag" && k != "limit" && k != "after" && k != "batch" &&
        k != "gpu_type" && k != "q" && k != "total") {
      return ErrorResponse(Status::InvalidArgument("unknown query parameter", k));
    }
  }
  JobQuery q;
  for (auto [key, set] : {std::pair{"status", &q.statuses}, std::pair{"tag", &q.tags},
                          std::pair{"batch", &q.batches}, std::pair{"gpu_type", &q.gpu_types}}) {
    auto list = QueryList(req, key);
    if (!list.ok()) return ErrorResponse(list.status());
    *set = std::move(*list);
  }
  for (const std::string& status : q.statuses) {
    if (!api::ParseJobStatus(status)) {
      return ErrorResponse(Status::InvalidArgument(
          "\"" + status + "\" is not one of queued, starting, running, completed, failed, cancelled",
          "status"));
    }
  }
  q.text = req.Query("q");
  if (q.text.size() > 256) {
    return ErrorResponse(Status::InvalidArgument("longer than 256 characters", "q"));
  }
  std::string total = req.Query("total");
  if (!total.empty() && total != "true" && total != "false") {
    return ErrorResponse(Status::InvalidArgument("must be true or false", "total"));
  }
  q.count = total == "true";
  auto limit = QueryInt(req, "limit", 100, 1, 1000);
  if (!limit.ok()) return ErrorResponse(limit.status());
  q.limit = static_cast<size_t>(*limit);
  q.after = req.Query("after");
  JobPage page = core_->ListJobs(caller, q);
  json list = json::array();
  for (auto& j : page.jobs) list.push_back(JobJson(j));
  json out = {{"jobs", list}, {"next", page.next}};
  if (q.count) out["total"] = page.total;
  return JsonResponse(200, out);
}

// Logs of one attempt. With follow=true the answer is a chunked stream that
// ends when the job ends; when the job moves to a new attempt the stream
// continues with a marker line and the new attempt's log.
Response Api::Logs(const Request& req, const Caller& caller, const std::string& id) {
  auto job = WithData(core_->GetJob(caller, id));
  if (!job.ok()) return ErrorResponse(job.status());
  auto attempt = QueryInt(req, "attempt", 0, 0, 1'000'000);
  if (!attempt.ok()) return ErrorResponse(attempt.status());
  auto offset = QueryInt(req, "offset", 0, 0, int64_t{1} << 50);
  if (!offset.ok()) return ErrorResponse(offset.status());
  auto rank_q = QueryInt(req, "rank", 0, 0, api::kMaxNodes - 1);
  if (!rank_q.ok()) return ErrorResponse(rank_q.status());
  int rank = static_cast<int>(*rank_q);
  if (rank >= job->spec.resources.nodes) {
    return ErrorResponse(Status::InvalidArgument(
        "job " + id + " runs on " + std::to_string(job->spec.resources.nodes) +
            (job->spec.resources.nodes == 1 ? " node (rank 0)" : " nodes (ranks 0 to " +
                                                                     std::to_string(job->spec.resources.nodes - 1) + ")"),
        "rank"));
  }
  std::string follow = req.Query("follow");
  if (!follow.empty() && follow != "true" && follow != "false" && follow != "1" && follow != "0") {
    return ErrorResponse(Status::InvalidArgument("must be true or false", "follow"));
  }
  int att = *attempt > 0 ? static_cast<int>(*attempt) : job->attempt;
  if (att > job->attempt) {
    return ErrorResponse(Status::NotFound("job " + id + " has no attempt " + std::to_string(att)));
  }
  Response r;
  r.content_type = "text/plain; charset=utf-8";
  if (follow != "true" && follow != "1") {
    auto text = blobs_->ReadLog(id, att, rank, *offset);
    if (!text.ok()) return ErrorResponse(text.status());
    r.body = std::move(text).value();
    r.headers["X-Tide-Attempt"] = std::to_string(att);
    return r;
  }
  int64_t start_offset = *offset;
  bool pinned = *attempt > 0;
  r.stream = [this, caller, id, att, rank, start_offset, pinned](const ChunkWriter& write) {
    int current = att;
    int64_t pos = start_offset;
    while (true) {
      if (!core_->CredentialValid(caller)) return;  // logged out or revoked meanwhile
      uint64_t seen = core_->epoch();
      auto now = core_->GetJob(caller, id);
      if (!now.ok()) return;
      auto text = blobs_->ReadLog(id, current, rank, pos, 1 << 20);
      if (text.ok() && !text->empty()) {
        pos += static_cast<int64_t>(text->size());
        if (!write(*text)) return;
        continue;  // drain before deciding anything
      }
      if (!pinned && now->attempt > current) {
        current = now->attempt;
        pos = 0;
        std::string marker = "--- attempt " + std::to_string(current) + " ---\n";
        if (!write(marker)) return;
        continue;
      }
      bool finished = api::IsTerminal(now->status) || (pinned && now->attempt > current);
      if (finished) {
        // The agent ships the last bytes before it reports the exit, so
        // one more read after seeing the end gets everything.
        auto rest = blobs_->ReadLog(id, current, rank, pos, 64 << 20);
        if (rest.ok() && !rest->empty()) write(*rest);
        return;
      }
      core_->WaitChange(seen, clock_->MonotonicMs() + 1000);
      if (!write("")) return;  // the client went away while nothing flowed
    }
  };
  return r;
}

// GET /v1/jobs/{id}/telemetry?follow=true: server-sent events. The first,
// `telemetry`, is the whole answer (`first`); then each heartbeat that
// brings the job a reading sends `reading`, the answer without its series
// (each GPU's newest reading in `now`, and the averages), which a client
// appends to what it holds. When the job's GPUs change, or a new attempt's
// first reading replaces the history of the one before on the same GPUs,
// `telemetry` again. When the job ends: the last `reading`, then `end`.
Response Api::TelemetryStream(const Caller& caller, const api::JobTelemetry& first) {
  Response r;
  r.content_type = "text/event-stream; charset=utf-8";
  r.headers["Cache-Control"] = "no-store";
  r.stream = [this, caller, first](const ChunkWriter& write) {
    auto event = [](const char* name, const api::JobTelemetry& t) {
      return std::string("event: ") + name + "\ndata: " + api::ToJson(t).dump() + "\n\n";
    };
    auto gpus_of = [](const api::JobTelemetry& t) {
      std::vector<std::tuple<std::string, int, int>> keys;
      for (const auto& g : t.gpus) keys.emplace_back(g.node_id, g.index, g.rank);
      return keys;
    };
    // A GPU's count of readings is of the current attempt: it falls when a
    // new attempt's first reading starts its history again.
    auto restarted = [](const api::JobTelemetry& before, const api::JobTelemetry& now) {
      for (size_t i = 0; i < now.gpus.size() && i < before.gpus.size(); ++i) {
        if (now.gpus[i].readings < before.gpus[i].readings) return true;
      }
      return false;
    };
    if (!write("retry: 2000\n" + event("telemetry", first))) return;
    auto gpus = gpus_of(first);
    api::JobTelemetry last = first;
    int64_t last_at = first.last_at;
    int64_t last_write = clock_->MonotonicMs();
    while (true) {
      if (!core_->CredentialValid(caller)) return;  // logged out or revoked meanwhile
      uint64_t seen = core_->epoch();
      auto job = core_->GetJob(caller, first.job_id);
      if (!job.ok()) return;
      const bool ended = api::IsTerminal(job->status);
      auto t = core_->JobTelemetry(caller, first.job_id, /*series=*/false);
      if (!t.ok()) return;
      std::string out;
      if (gpus_of(*t) != gpus || restarted(last, *t)) {
        t = core_->JobTelemetry(caller, first.job_id, /*series=*/true);
        if (!t.ok()) return;
        out = event("telemetry", *t);
        gpus = gpus_of(*t);
      } else if (t->last_at != last_at || ended) {
        out = event("reading", *t);
      }
      last_at = t->last_at;
      last = *t;
      if (ended) out += "event: end\ndata: {}\n\n";
      if (!out.empty()) {
        if (!write(out)) return;
        last_write = clock_->MonotonicMs();
      }
      if (ended) return;
      if (clock_->MonotonicMs() - last_write >= 15'000) {
        if (!write(": ping\n\n")) return;
        last_write = clock_->MonotonicMs();
      }
      core_->WaitChange(seen, clock_->MonotonicMs() + 1000);
      if (!write("")) return;  // the client went away while nothing changed
    }
  };
  return r;
}

// The job's metric lines, every attempt in order (or one), each with its
// "attempt"; "last" holds the newest value of each metric.
Response Api::Metrics(const Request& req, const Caller& caller, const std::string& id) {
  for (auto& [k, v] : req.query) {
    if (k != "attempt" && k != "rank" && k != "last") {
      return ErrorResponse(Status::InvalidArgument("unknown query parameter", k));
    }
  }
  auto job = WithData(core_->GetJob(caller, id));
  if (!job.ok()) return ErrorResponse(job.status());
  auto attempt = QueryInt(req, "attempt", 0, 0, 1'000'000);
  if (!attempt.ok()) return ErrorResponse(attempt.status());
  if (*attempt > job->attempt) {
    return ErrorResponse(Status::NotFound("job " + id + " has no attempt " + std::to_string(*attempt)));
  }
  auto rank = QueryInt(req, "rank", 0, 0, api::kMaxNodes - 1);
  if (!rank.ok()) return ErrorResponse(rank.status());
  std::string last = req.Query("last");
  if (!last.empty() && last != "true" && last != "false") {
    return ErrorResponse(Status::InvalidArgument("must be true or false", "last"));
  }
  MetricSeries m = ReadMetrics(blobs_, id, job->attempt, static_cast<int>(*rank),
                               static_cast<int>(*attempt), last == "true");
  json out = {{"job", id}, {"last", m.last}, {"skipped", m.skipped}};
  if (last != "true") out["metrics"] = std::move(m.points);
  return JsonResponse(200, out);
}

// Every output of the job as one tar, written as it is read: the whole set
// in a download, in the memory of one file at a time.
Response Api::OutputsTar(const Caller& caller, const std::string& id) {
  auto job = WithData(core_->GetJob(caller, id));
  if (!job.ok()) return ErrorResponse(job.status());
  auto files = blobs_->ListOutputs(id);
  if (!files.ok()) return ErrorResponse(files.status());
  std::vector<std::pair<std::string, int64_t>> list;
  for (auto& f : *files) list.emplace_back(f.path, f.size);
  Response r;
  r.content_type = "application/x-tar";
  r.headers["Content-Disposition"] = "attachment; filename=\"" + id + "-outputs.tar\"";
  r.stream = [this, id, list](const ChunkWriter& write) {
    Status st = StreamTar(
        list, [&](const std::string& path) { return blobs_->GetOutput(id, path); },
        [&](std::string_view piece) { return write(piece); });
    if (!st.ok()) {
      // Thrown, the answer ends without its last chunk: the download
      // fails visibly rather than looking whole.
      throw std::runtime_error("outputs of " + id + " as a tar: " + st.ToString());
    }
  };
  return r;
}

Response Api::Outputs(const Request& req, const Caller& caller, const std::string& id,
                      const std::string& path) {
  auto job = WithData(core_->GetJob(caller, id));
  if (!job.ok()) return ErrorResponse(job.status());
  if (path.empty()) {
    auto files = blobs_->ListOutputs(id);
    if (!files.ok()) return ErrorResponse(files.status());
    json list = json::array();
    for (auto& f : *files) list.push_back({{"path", f.path}, {"size", f.size}});
    return JsonResponse(200, {{"files", list}});
  }
  auto data = blobs_->GetOutput(id, path);
  if (!data.ok()) return ErrorResponse(data.status());
  Response r;
  r.content_type = "application/octet-stream";
  r.body = std::move(data).value();
  return r;
}

Response Api::UploadCode(const Request& req, const Caller& caller) {
  if (req.body.empty()) return ErrorResponse(Status::InvalidArgument("empty archive", "body"));
  Status valid = ValidateArchive(req.body);
  if (!valid.ok()) return ErrorResponse(Status::InvalidArgument(valid.message(), "body"));
  auto id = blobs_->PutCode(caller.subject, req.body);
  if (!id.ok()) return ErrorResponse(id.status());
  return JsonResponse(201, {{"id", *id}, {"size", req.body.size()}});
}

}  // namespace tide::server

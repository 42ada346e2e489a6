// POST /v1/convert: a spec file as a user has it (YAML, or a Slurm batch
// script) turned into the JSON that POST /v1/jobs or /v1/batches takes, by
// the same code the CLI uses (api/spec_file.h, api/sbatch.h). It submits
// nothing: the console converts, shows the result, and posts it.
#include "api/batch.h"
#include "api/sbatch.h"
#include "api/spec_file.h"
#include "common/json_reader.h"
#include "server/http/api.h"

namespace tide::server {

using nlohmann::json;

Response Api::Convert(const Request& req) {
  auto body = ParseBody(req);
  if (!body.ok()) return ErrorResponse(body.status());
  JsonReader r(*body, "");
  auto format = r.String("format", true);
  auto text = r.String("text", true);
  auto filename = r.String("filename");
  if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
  const std::string file = filename && !filename->empty() ? *filename
                           : *format == "sbatch"          ? "script.sh"
                                                          : "spec.yaml";
  if (*format == "sbatch") {
    auto plan = api::PlanSbatch(*text, file, {}, {});
    if (!plan.ok()) return ErrorResponse(Status::InvalidArgument(plan.status().message(), "text"));
    json out = {{"script_path", plan->script_in_code}, {"warnings", plan->warnings}};
    if (plan->array) {
      out["batch"] = api::ToJson(plan->batch);
    } else {
      out["job"] = api::ToJson(plan->spec);
    }
    return JsonResponse(200, out);
  }
  if (*format != "yaml") {
    return ErrorResponse(Status::InvalidArgument("must be yaml or sbatch", "format"));
  }
  auto doc = api::ParseYamlDocument(*text, file);
  if (!doc.ok()) return ErrorResponse(Status::InvalidArgument(doc.status().message(), "text"));
  if (!doc->value.is_object()) {
    return ErrorResponse(Status::InvalidArgument(file + ": a spec must be a mapping of fields", "text"));
  }
  // A batch file has a template (or trials); anything else is one job.
  const bool batch = doc->value.contains("template") || doc->value.contains("jobs") ||
                     doc->value.contains("grid");
  Status checked = batch ? api::BatchSpecFromJson(doc->value).status()
                         : api::JobSpecFromJson(doc->value).status();
  if (!checked.ok()) {
    // "spec.yaml:7: resources.gpu_count: must be at least 1", at the field.
    Status at = api::AtLine(*doc, file, checked);
    return ErrorResponse(Status::InvalidArgument(at.message(), checked.field()));
  }
  return JsonResponse(200, {{batch ? "batch" : "job", doc->value}, {"warnings", json::array()}});
}

}  // namespace tide::server

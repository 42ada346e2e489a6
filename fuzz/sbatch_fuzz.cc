// `tide sbatch`'s parser (api/sbatch.h): any script is refused naming its
// line, or becomes a plan whose job spec (or batch) the server would take.
// A first line "#CLI: WORDS" gives the options of the command line.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "api/sbatch.h"
#include "api/sbatch_options.h"
#include "api/types.h"
#include "fuzz/check.h"

using tide::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string script = tide::fuzz::Text(data, size);
  std::vector<std::string> cli;
  if (script.rfind("#CLI:", 0) == 0) {
    size_t end = script.find('\n');
    cli = tide::api::sbatch::Words(script.substr(5, end == std::string::npos ? end : end - 5));
    script = end == std::string::npos ? "" : script.substr(end + 1);
  }
  auto plan = tide::api::PlanSbatch(script, "job.sh", cli, {"arg1"});
  if (!plan.ok()) {
    const std::string& m = plan.status().message();
    Check(m.rfind("job.sh", 0) == 0 || m.rfind("command line", 0) == 0,
          "an sbatch error names the script or the command line: " + m);
    return 0;
  }
  if (plan->array) {
    (void)tide::api::ToJson(plan->batch).dump();  // what `tide sbatch` sends
    for (const auto& trial : plan->batch.trials) {
      auto spec = tide::api::TrialJobSpec(plan->batch, trial);
      Check(spec.ok(), "an array task is not a job: " +
                           (spec.ok() ? std::string() : spec.status().ToString()));
    }
    return 0;
  }
  // What `tide sbatch` sends must be JSON text (dump throws on bad UTF-8).
  std::string body = tide::api::ToJson(plan->spec).dump();
  auto spec = tide::api::JobSpecFromJson(nlohmann::json::parse(body));
  Check(spec.ok(), "a planned job is refused by the server's codec: " +
                       (spec.ok() ? std::string() : spec.status().ToString()));
  return 0;
}

// The batch file (api/batch.h), what `tide batch submit sweep.yaml` and
// POST /v1/batches read: refused naming a field, or expanded into trials
// whose every job spec is valid, and whose JSON reads back to the batch.
#include <nlohmann/json.hpp>

#include "api/batch.h"
#include "api/spec_file.h"
#include "fuzz/check.h"

using tide::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto doc = tide::api::ParseYamlDocument(tide::fuzz::Text(data, size), "sweep.yaml");
  if (!doc.ok()) return 0;
  auto batch = tide::api::BatchSpecFromJson(doc->value);
  if (!batch.ok()) {
    Check(!batch.status().message().empty(), "a refusal says why");
    return 0;
  }
  for (const auto& trial : batch->trials) {
    auto spec = tide::api::TrialJobSpec(*batch, trial);
    Check(spec.ok(), "an accepted batch has a trial that is not a job: " +
                         (spec.ok() ? std::string() : spec.status().ToString()));
  }
  auto written = tide::api::ToJson(*batch);
  (void)written.dump();  // what the CLI sends: JSON text
  auto again = tide::api::BatchSpecFromJson(written);
  Check(again.ok(), "a batch's own JSON is refused: " +
                        (again.ok() ? std::string() : again.status().ToString()));
  Check(tide::api::ToJson(*again) == written, "the JSON of a batch does not read back to it");
  return 0;
}

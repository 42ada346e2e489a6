// The JSON job spec codec (api/types.h), what POST /v1/jobs reads: any body
// is either refused with an error that names its field, or read into a
// spec that writes back to JSON which reads again to the same spec.
#include <nlohmann/json.hpp>

#include "api/types.h"
#include "fuzz/check.h"

using tide::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = nlohmann::json::parse(tide::fuzz::Text(data, size), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto spec = tide::api::JobSpecFromJson(j);
  if (!spec.ok()) {
    Check(!spec.status().message().empty(), "a refusal says why");
    return 0;
  }
  auto written = tide::api::ToJson(*spec);
  auto again = tide::api::JobSpecFromJson(written);
  Check(again.ok(), "a spec's own JSON is refused: " +
                        (again.ok() ? std::string() : again.status().ToString()) + " in " +
                        written.dump());
  Check(tide::api::ToJson(*again) == written, "the JSON of a spec does not read back to it: " +
                                                   written.dump());
  return 0;
}

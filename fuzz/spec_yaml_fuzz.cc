// The YAML spec reader (api/spec_file.h), what `tide submit job.yaml`
// reads: any file is refused with FILE:LINE or read into JSON that the
// spec codec then takes or refuses naming a field and a line.
#include <nlohmann/json.hpp>

#include "api/spec_file.h"
#include "api/types.h"
#include "fuzz/check.h"

using tide::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto doc = tide::api::ParseYamlDocument(tide::fuzz::Text(data, size), "job.yaml");
  if (!doc.ok()) {
    Check(doc.status().message().rfind("job.yaml", 0) == 0,
          "a YAML error names the file: " + doc.status().message());
    return 0;
  }
  // What the reader gives is JSON that survives a trip through text.
  std::string text = doc->value.dump();
  Check(nlohmann::json::parse(text) == doc->value, "the document is not plain JSON: " + text);
  if (!doc->value.is_object()) return 0;
  auto spec = tide::api::JobSpecFromJson(doc->value);
  if (!spec.ok()) {
    auto at = tide::api::AtLine(*doc, "job.yaml", spec.status());
    Check(at.message().rfind("job.yaml", 0) == 0, "a spec error names the file");
  }
  return 0;
}

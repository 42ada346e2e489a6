// Job spec files: JSON or YAML, read into the same JSON the API takes.
//
// Errors name the file and line: "job.yaml:7: resources.gpu_count: must be
// at least 1".
#pragma once

#include <map>
#include <string>

#include "api/types.h"

namespace tide::api {

struct SpecDocument {
  json value;
  std::map<std::string, int> lines;  // field path ("resources.gpu_count") -> 1-based line
};

// Parses YAML (a superset of JSON) into JSON. Unquoted scalars become
// numbers, booleans or null where they read as such; quoted ones stay strings.
Result<SpecDocument> ParseYamlDocument(const std::string& text, const std::string& filename);

// Reads and validates a spec file. The returned JSON is ready for POST /v1/jobs.
Result<json> LoadSpecFile(const std::string& path);

// `st` (an error about the field st.field() of `doc`) as
// "FILE:LINE: FIELD: MESSAGE", with the line of the field or of the nearest
// enclosing one.
Status AtLine(const SpecDocument& doc, const std::string& filename, const Status& st);

}  // namespace tide::api

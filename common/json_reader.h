// JsonReader: strict reading of client JSON into typed fields.
//
// Every getter names the full field path in its error ("resources.gpu_count:
// must be an integer"), and Finish() rejects fields the caller never asked
// for, so a typo like "gpu_cont" is an error instead of a silent default.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace tide {

// Parses text into JSON; the error carries the byte offset of the problem.
Result<nlohmann::json> ParseJson(const std::string& text);

class JsonReader {
 public:
  // `prefix` is the path of this object ("" for the root, "resources" ...).
  // The reader refers to `obj`, which must outlive it (so no temporary).
  JsonReader(const nlohmann::json& obj, std::string prefix);
  JsonReader(nlohmann::json&& obj, std::string prefix) = delete;

  // Ok only if the value was an object.
  Status status() const { return status_; }

  bool Has(const std::string& key) const;
  std::optional<std::string> String(const std::string& key, bool required = false);
  std::optional<int64_t> Int(const std::string& key, bool required = false);
  std::optional<double> Number(const std::string& key, bool required = false);
  std::optional<bool> Bool(const std::string& key);
  // A list of strings, or with `allow_scalar` one string meaning a list of one.
  std::optional<std::vector<std::string>> StringList(const std::string& key,
                                                     bool allow_scalar = false);
  std::optional<std::map<std::string, std::string>> StringMap(const std::string& key);
  // A nested object, or nullptr if absent; errors are recorded here.
  const nlohmann::json* Object(const std::string& key);
  // The raw value (nullptr if absent or null), marked as read.
  const nlohmann::json* Raw(const std::string& key) { return Get(key); }
  std::string Path(const std::string& key) const;

  // Records an error for `key` unless one is already recorded.
  void Fail(const std::string& key, const std::string& message);
  // First error, or "unknown field" for keys nobody read.
  Status Finish();

 private:
  const nlohmann::json* Get(const std::string& key);

  const nlohmann::json& obj_;
  std::string prefix_;
  std::set<std::string> seen_;
  Status status_;
};

}  // namespace tide

#include "common/json_reader.h"

namespace tide {

using nlohmann::json;

Result<json> ParseJson(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Re-parse with exceptions to get the position of the problem.
    try {
      json ignored = json::parse(text);
      (void)ignored;
    } catch (const json::parse_error& e) {
      return Status::InvalidArgument("malformed JSON at byte " + std::to_string(e.byte) + ": " +
                                     std::string(e.what()).substr(std::string(e.what()).find(':') + 2));
    }
    return Status::InvalidArgument("malformed JSON");
  }
  return j;
}

JsonReader::JsonReader(const json& obj, std::string prefix)
    : obj_(obj), prefix_(std::move(prefix)) {
  if (!obj_.is_object()) {
    status_ = Status::InvalidArgument("must be a JSON object", prefix_.empty() ? "body" : prefix_);
  }
}

std::string JsonReader::Path(const std::string& key) const {
  return prefix_.empty() ? key : prefix_ + "." + key;
}

void JsonReader::Fail(const std::string& key, const std::string& message) {
  if (status_.ok()) status_ = Status::InvalidArgument(message, Path(key));
}

bool JsonReader::Has(const std::string& key) const {
  return obj_.is_object() && obj_.contains(key) && !obj_[key].is_null();
}

const json* JsonReader::Get(const std::string& key) {
  seen_.insert(key);
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> JsonReader::String(const std::string& key, bool required) {
  const json* v = Get(key);
  if (!v) {
    if (required) Fail(key, "is required");
    return std::nullopt;
  }
  if (!v->is_string()) {
    Fail(key, "must be a string");
    return std::nullopt;
  }
  return v->get<std::string>();
}

std::optional<int64_t> JsonReader::Int(const std::string& key, bool required) {
  const json* v = Get(key);
  if (!v) {
    if (required) Fail(key, "is required");
    return std::nullopt;
  }
  // Unsigned values above INT64_MAX would wrap, and casting a float outside
  // the int64 range is undefined: both are "not an integer" here.
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) return v->get<int64_t>();
  } else if (v->is_number_integer()) {
    return v->get<int64_t>();
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    if (d >= -9.2e18 && d <= 9.2e18 && d == static_cast<double>(static_cast<int64_t>(d))) {
      return static_cast<int64_t>(d);
    }
  }
  Fail(key, "must be an integer");
  return std::nullopt;
}

std::optional<double> JsonReader::Number(const std::string& key, bool required) {
  const json* v = Get(key);
  if (!v) {
    if (required) Fail(key, "is required");
    return std::nullopt;
  }
  if (!v->is_number()) {
    Fail(key, "must be a number");
    return std::nullopt;
  }
  return v->get<double>();
}

std::optional<bool> JsonReader::Bool(const std::string& key) {
  const json* v = Get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    Fail(key, "must be true or false");
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::vector<std::string>> JsonReader::StringList(const std::string& key,
                                                               bool allow_scalar) {
  const json* v = Get(key);
  if (!v) return std::nullopt;
  if (allow_scalar && v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  if (!v->is_array()) {
    Fail(key, allow_scalar ? "must be a string or a list of strings" : "must be a list of strings");
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      Fail(key + "[" + std::to_string(i) + "]", "must be a string");
      return std::nullopt;
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::optional<std::map<std::string, std::string>> JsonReader::StringMap(const std::string& key) {
  const json* v = Get(key);
  if (!v) return std::nullopt;
  if (!v->is_object()) {
    Fail(key, "must be an object of strings");
    return std::nullopt;
  }
  std::map<std::string, std::string> out;
  for (auto& [k, val] : v->items()) {
    if (!val.is_string()) {
      Fail(key + "." + k, "must be a string");
      return std::nullopt;
    }
    out[k] = val.get<std::string>();
  }
  return out;
}

const json* JsonReader::Object(const std::string& key) {
  const json* v = Get(key);
  if (v && !v->is_object()) {
    Fail(key, "must be an object");
    return nullptr;
  }
  return v;
}

Status JsonReader::Finish() {
  if (!status_.ok()) return status_;
  for (auto& [k, v] : obj_.items()) {
    if (!seen_.count(k)) return Status::InvalidArgument("unknown field", Path(k));
  }
  return Status::Ok();
}

}  // namespace tide

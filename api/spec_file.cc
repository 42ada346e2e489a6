#include "api/spec_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/paths.h"
#include "common/utf8.h"

namespace tide::api {

namespace {

json Scalar(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted
  if (s == "null" || s == "~" || s.empty()) return nullptr;
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  char* end = nullptr;
  errno = 0;
  long long i = std::strtoll(s.c_str(), &end, 10);
  if (end && *end == '\0' && errno == 0) return static_cast<int64_t>(i);
  // Only decimal notation is a number: strtod would also read "0x1F",
  // "-inf" and "nan", and an out-of-range "1e999" is not a JSON number.
  if (s.find_first_not_of("0123456789.eE+-") == std::string::npos &&
      s.find_first_of("0123456789") != std::string::npos) {
    errno = 0;
    double d = std::strtod(s.c_str(), &end);
    if (end && *end == '\0' && errno == 0 && std::isfinite(d)) return d;
  }
  return s;
}

// The most values a spec file may hold once its aliases are expanded: an
// alias names a node again, so a kilobyte of nested aliases can stand for
// billions of values (the "billion laughs"). A file without aliases has
// fewer values than characters.
constexpr size_t kMaxValues = 1'000'000;
size_t MaxValues(size_t text_size) { return std::min(kMaxValues, 10'000 + text_size); }

Status Convert(const YAML::Node& n, const std::string& path, SpecDocument* doc, json* out,
               const std::string& filename, size_t* left) {
  if (*left == 0) {
    return Status::InvalidArgument(filename +
                                   ": too many values once its aliases are expanded (at most " +
                                   std::to_string(kMaxValues) + ", and not many more than the "
                                   "file has characters)");
  }
  --*left;
  doc->lines[path] = n.Mark().line + 1;
  switch (n.Type()) {
    case YAML::NodeType::Null: *out = nullptr; return Status::Ok();
    case YAML::NodeType::Scalar: *out = Scalar(n); return Status::Ok();
    case YAML::NodeType::Sequence: {
      *out = json::array();
      size_t i = 0;
      for (const auto& item : n) {
        json v;
        TIDE_RETURN_IF_ERROR(
            Convert(item, path + "[" + std::to_string(i++) + "]", doc, &v, filename, left));
        out->push_back(std::move(v));
      }
      return Status::Ok();
    }
    case YAML::NodeType::Map: {
      *out = json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) {
          return Status::InvalidArgument(filename + ":" + std::to_string(kv.first.Mark().line + 1) +
                                         ": keys must be plain names");
        }
        std::string key = kv.first.Scalar();
        std::string child = path.empty() ? key : path + "." + key;
        if (out->contains(key)) {
          return Status::InvalidArgument(filename + ":" + std::to_string(kv.first.Mark().line + 1) +
                                             ": duplicate key \"" + key + "\"",
                                         child);
        }
        json v;
        TIDE_RETURN_IF_ERROR(Convert(kv.second, child, doc, &v, filename, left));
        doc->lines[child] = kv.first.Mark().line + 1;
        (*out)[key] = std::move(v);
      }
      return Status::Ok();
    }
    case YAML::NodeType::Undefined: break;
  }
  *out = nullptr;
  return Status::Ok();
}

}  // namespace

Result<SpecDocument> ParseYamlDocument(const std::string& text, const std::string& filename) {
  // What becomes JSON must be UTF-8: say where it is not, rather than fail
  // when the spec is sent.
  // A NUL is no text, and makes the YAML reader guess UTF-16 or UTF-32.
  if (size_t nul = text.find('\0'); nul != std::string::npos) {
    size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + nul, '\n'));
    return Status::InvalidArgument(filename + ":" + std::to_string(line) +
                                   ": a NUL byte: a spec file is UTF-8 text");
  }
  if (size_t bad = 0; !ValidUtf8(text, &bad)) {
    size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + bad, '\n'));
    char byte[8];
    snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[bad]));
    return Status::InvalidArgument(filename + ":" + std::to_string(line) +
                                   ": not valid UTF-8 (byte " + byte + ")");
  }
  SpecDocument doc;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(filename + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  try {
    size_t left = MaxValues(text.size());
    TIDE_RETURN_IF_ERROR(Convert(root, "", &doc, &doc.value, filename, &left));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(filename + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  return doc;
}

Result<json> LoadSpecFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto doc = ParseYamlDocument(*text, path);
  if (!doc.ok()) return doc.status();
  if (!doc->value.is_object()) {
    return Status::InvalidArgument(path + ": a job spec must be a mapping of fields");
  }
  auto spec = JobSpecFromJson(doc->value);
  if (!spec.ok()) return AtLine(*doc, path, spec.status());
  return doc->value;
}

Status AtLine(const SpecDocument& doc, const std::string& filename, const Status& st) {
  std::string where = filename;
  // The field may be nested deeper than what has a line ("command[0]").
  std::string field = st.field();
  while (!field.empty()) {
    auto it = doc.lines.find(field);
    if (it != doc.lines.end()) {
      where += ":" + std::to_string(it->second);
      break;
    }
    size_t cut = field.find_last_of(".[");
    field = cut == std::string::npos ? "" : field.substr(0, cut);
  }
  return Status::InvalidArgument(where + ": " + (st.field().empty() ? "" : st.field() + ": ") +
                                     st.message(),
                                 st.field());
}

}  // namespace tide::api

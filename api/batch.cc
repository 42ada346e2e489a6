#include "api/batch.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <set>

#include "common/json_reader.h"

namespace tide::api {

namespace {

bool IsParamName(const std::string& s) {
  if (s.empty() || s.size() > 64 || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

bool IsTrialId(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

bool IsScalar(const json& v) { return v.is_string() || v.is_number() || v.is_boolean(); }

// Replaces the placeholders of one template string (see batch.h).
// Fields whose values are text: a placeholder there is always text.
bool IsTextField(const std::string& path) {
  for (const char* p : {"template.env", "template.command", "template.tags", "template.constraints",
                        "template.name", "template.image", "template.code", "template.tier"}) {
    const size_t n = std::strlen(p);
    if (path.compare(0, n, p) == 0 && (path.size() == n || path[n] == '.' || path[n] == '[')) {
      return true;
    }
  }
  return false;
}

Result<json> SubstituteString(const std::string& s, const BatchTrial& trial, const std::string& path) {
  auto unknown = [&](const std::string& name) {
    return Status::InvalidArgument("{" + name + "} is not a parameter of trial " + trial.id +
                                       " (write {{ and }} for braces)",
                                   path);
  };
  if (!IsTextField(path) && s.size() > 2 && s.front() == '{' && s.back() == '}' &&
      IsParamName(s.substr(1, s.size() - 2))) {
    std::string name = s.substr(1, s.size() - 2);
    if (!trial.params.contains(name)) return unknown(name);
    return trial.params[name];
  }
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    if (c == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out += '}';
      ++i;
      continue;
    }
    if (c == '{' && (i == 0 || s[i - 1] != '$')) {
      size_t close = s.find('}', i + 1);
      if (close != std::string::npos) {
        std::string name = s.substr(i + 1, close - i - 1);
        if (IsParamName(name)) {
          if (!trial.params.contains(name)) return unknown(name);
          out += ParamText(trial.params[name]);
          i = close;
          continue;
        }
      }
    }
    out += c;
  }
  return json(out);
}

Result<json> Substitute(const json& t, const BatchTrial& trial, const std::string& path) {
  if (t.is_string()) return SubstituteString(t.get<std::string>(), trial, path);
  if (t.is_array()) {
    json out = json::array();
    for (size_t i = 0; i < t.size(); ++i) {
      auto v = Substitute(t[i], trial, path + "[" + std::to_string(i) + "]");
      if (!v.ok()) return v.status();
      out.push_back(std::move(v).value());
    }
    return out;
  }
  if (t.is_object()) {
    json out = json::object();
    for (auto& [k, v] : t.items()) {
      auto sub = Substitute(v, trial, path + "." + k);
      if (!sub.ok()) return sub.status();
      out[k] = std::move(sub).value();
    }
    return out;
  }
  return t;
}

}  // namespace

std::string ParamText(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

Result<JobSpec> TrialJobSpec(const BatchSpec& batch, const BatchTrial& trial) {
  // Secrets are passed as they are: a value's braces are not parameters,
  // and an error must not quote it.
  json tmpl = batch.job_template;
  json secrets;
  if (auto it = tmpl.find("secrets"); it != tmpl.end()) {
    secrets = std::move(*it);
    tmpl.erase(it);
  }
  auto sub = Substitute(tmpl, trial, "template");
  if (!sub.ok()) return sub.status();
  json j = std::move(sub).value();
  if (!secrets.is_null()) j["secrets"] = std::move(secrets);
  if (!j.contains("retry_times") && batch.retry_times > 0) j["retry_times"] = batch.retry_times;
  if (!j.contains("name")) {
    j["name"] = (batch.name.empty() ? std::string("batch") : batch.name) + "/" + trial.id;
  }
  auto spec = JobSpecFromJson(j);
  if (!spec.ok()) {
    const Status& st = spec.status();
    return Status::InvalidArgument("for trial " + trial.id + ": " + st.message(),
                                   "template" + (st.field().empty() ? "" : "." + st.field()));
  }
  return spec;
}

json ToJson(const BatchSpec& b) {
  json jobs = json::array();
  for (const BatchTrial& t : b.trials) {
    json trial = t.params.is_object() ? t.params : json::object();
    trial["id"] = t.id;
    jobs.push_back(std::move(trial));
  }
  json j = {{"template", b.job_template}, {"jobs", jobs}};
  if (!b.name.empty()) j["experiment_batch"] = b.name;
  if (b.max_concurrent > 0) j["max_concurrent"] = b.max_concurrent;
  if (b.retry_times > 0) j["retry_times"] = b.retry_times;
  if (b.budget > 0) j["budget"] = static_cast<double>(b.budget) / 1e6;
  return j;
}

Result<BatchSpec> BatchSpecFromJson(const json& j) {
  BatchSpec b;
  JsonReader r(j, "");
  TIDE_RETURN_IF_ERROR(r.status());
  if (auto v = r.String("experiment_batch")) {
    if (v->empty() || v->size() > kMaxNameLength) r.Fail("experiment_batch", "must be 1 to 128 characters");
    b.name = *v;
  }
  if (auto v = r.Int("max_concurrent")) {
    if (*v < 1 || *v > kMaxBatchConcurrency) r.Fail("max_concurrent", "must be between 1 and 100000");
    else b.max_concurrent = static_cast<int>(*v);
  }
  if (auto v = r.Int("retry_times")) {
    if (*v < 0 || *v > kMaxRetryTimes) r.Fail("retry_times", "must be between 0 and 100");
    else b.retry_times = static_cast<int>(*v);
  }
  if (auto v = r.Number("budget")) {
    if (*v <= 0 || *v > 1e12) r.Fail("budget", "must be a positive number of credits");
    else b.budget = static_cast<int64_t>(std::llround(*v * 1e6));
  }
  const json* tmpl = r.Object("template");
  if (tmpl == nullptr && r.status().ok()) r.Fail("template", "is required: the job spec of every trial");
  if (tmpl != nullptr) {
    b.job_template = *tmpl;
  }
  std::set<std::string> ids;
  const json* jobs = r.Raw("jobs");
  if (jobs != nullptr) {
    if (!jobs->is_array()) {
      r.Fail("jobs", "must be a list of trials, e.g. [{\"id\": \"run-001\", \"lr\": 0.001}]");
    } else if (jobs->size() > kMaxBatchTrials) {
      r.Fail("jobs", "at most " + std::to_string(kMaxBatchTrials) + " trials in one batch");
    } else {
      for (size_t i = 0; i < jobs->size() && r.status().ok(); ++i) {
        const std::string at = "jobs[" + std::to_string(i) + "]";
        const json& t = (*jobs)[i];
        if (!t.is_object()) {
          r.Fail(at, "must be an object of parameters");
          break;
        }
        BatchTrial trial;
        for (auto& [k, v] : t.items()) {
          if (k == "id") {
            if (!v.is_string() || !IsTrialId(v.get<std::string>())) {
              r.Fail(at + ".id", "must be 1 to 64 letters, digits, '.', '_' or '-'");
            } else {
              trial.id = v.get<std::string>();
            }
            continue;
          }
          if (!IsParamName(k)) {
            r.Fail(at + "." + k, "parameter names are letters, digits and '_', not starting with a digit");
          } else if (!IsScalar(v)) {
            r.Fail(at + "." + k, "parameter values must be strings, numbers or booleans");
          } else {
            trial.params[k] = v;
          }
        }
        if (trial.id.empty()) trial.id = "trial-" + std::to_string(i + 1);
        if (!ids.insert(trial.id).second) r.Fail(at + ".id", "\"" + trial.id + "\" is used twice");
        b.trials.push_back(std::move(trial));
      }
    }
  }
  const json* grid = r.Raw("grid");
  if (grid != nullptr && r.status().ok()) {
    if (!grid->is_object() || grid->empty()) {
      r.Fail("grid", "must map parameter names to lists of values, e.g. {\"lr\": [0.1, 0.01]}");
    } else {
      size_t product = 1;
      for (auto& [k, v] : grid->items()) {
        if (!IsParamName(k)) {
          r.Fail("grid." + k, "parameter names are letters, digits and '_', not starting with a digit");
        } else if (!v.is_array() || v.empty()) {
          r.Fail("grid." + k, "must be a non-empty list of values");
        } else {
          for (size_t i = 0; i < v.size(); ++i) {
            if (!IsScalar(v[i])) {
              r.Fail("grid." + k + "[" + std::to_string(i) + "]",
                     "parameter values must be strings, numbers or booleans");
            }
          }
          product *= v.size();
          if (product + b.trials.size() > kMaxBatchTrials) {
            r.Fail("grid", "expands to more than " + std::to_string(kMaxBatchTrials) + " trials");
          }
        }
        if (!r.status().ok()) break;
      }
      if (r.status().ok()) {
        std::vector<std::pair<std::string, const json*>> axes;
        for (auto& [k, v] : grid->items()) axes.emplace_back(k, &v);
        const size_t width = std::to_string(product).size();
        for (size_t n = 0; n < product; ++n) {
          BatchTrial trial;
          size_t rest = n;
          for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
            const json& values = *it->second;
            trial.params[it->first] = values[rest % values.size()];
            rest /= values.size();
          }
          std::string num = std::to_string(n + 1);
          trial.id = "grid-" + std::string(width - num.size(), '0') + num;
          if (!ids.insert(trial.id).second) {
            r.Fail("grid", "generated trial id \"" + trial.id + "\" is also in jobs");
            break;
          }
          b.trials.push_back(std::move(trial));
        }
      }
    }
  }
  TIDE_RETURN_IF_ERROR(r.Finish());
  if (b.trials.empty()) {
    return Status::InvalidArgument("a batch needs trials: give \"jobs\", a \"grid\", or both", "jobs");
  }
  for (const BatchTrial& t : b.trials) {
    auto spec = TrialJobSpec(b, t);
    if (!spec.ok()) return spec.status();
  }
  return b;
}

json ToJson(const Batch& b) {
  json j = {{"id", b.id},
            {"owner", b.owner},
            {"experiment_batch", b.name},
            {"max_concurrent", b.max_concurrent},
            {"retry_times", b.retry_times},
            {"template", b.job_template},
            {"trials", b.trials},
            {"created_at", b.created_at},
            {"cancel_requested", b.cancel_requested}};
  j["budget"] = b.budget > 0 ? json(static_cast<double>(b.budget) / 1e6) : json(nullptr);
  j["budget_micros"] = b.budget;
  return j;
}

Result<Batch> BatchFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("batch record must be an object");
  try {
    Batch b;
    b.id = j.value("id", "");
    b.owner = j.value("owner", "");
    b.name = j.value("experiment_batch", "");
    b.max_concurrent = j.value("max_concurrent", 0);
    b.retry_times = j.value("retry_times", 0);
    b.budget = j.value("budget_micros", int64_t{0});
    if (j.contains("template")) b.job_template = j["template"];
    b.trials = j.value("trials", 0);
    b.created_at = j.value("created_at", int64_t{0});
    b.cancel_requested = j.value("cancel_requested", false);
    return b;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("batch record: ") + e.what());
  }
}

}  // namespace tide::api

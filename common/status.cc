#include "common/status.h"

namespace tide {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kNotFound: return "not_found";
    case Code::kConflict: return "conflict";
    case Code::kUnauthenticated: return "unauthenticated";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kTooLarge: return "too_large";
    case Code::kInsufficientCredit: return "insufficient_credit";
    case Code::kUnavailable: return "unavailable";
    case Code::kInternal: return "internal";
    case Code::kRateLimited: return "rate_limited";
  }
  return "internal";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s = CodeName(code_);
  s += ": ";
  if (!field_.empty()) s += field_ + ": ";
  s += message_;
  return s;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_, field_);
}

}  // namespace tide

// Status and Result<T>: expected failures as values (after leveldb's Status).
//
// A Status is ok or carries a closed error code, a message and, for invalid
// input, the name of the offending field. Result<T> holds a T or a non-ok
// Status. Neither throws.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tide {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kConflict,
  kUnauthenticated,
  kPermissionDenied,
  kTooLarge,
  kInsufficientCredit,  // not enough balance, or a budget cap would be passed
  kUnavailable,
  kInternal,
  kRateLimited,  // too many requests from one token or address: retry later (429)
};

// Stable lowercase name of a code, as sent on the wire ("invalid_argument").
const char* CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg, std::string field = "") {
    return Status(Code::kInvalidArgument, std::move(msg), std::move(field));
  }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Conflict(std::string msg) { return Status(Code::kConflict, std::move(msg)); }
  static Status Unauthenticated(std::string msg) {
    return Status(Code::kUnauthenticated, std::move(msg));
  }
  static Status PermissionDenied(std::string msg) {
    return Status(Code::kPermissionDenied, std::move(msg));
  }
  static Status TooLarge(std::string msg) { return Status(Code::kTooLarge, std::move(msg)); }
  static Status RateLimited(std::string msg) { return Status(Code::kRateLimited, std::move(msg)); }
  static Status InsufficientCredit(std::string msg) {
    return Status(Code::kInsufficientCredit, std::move(msg));
  }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& field() const { return field_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }

  // "invalid_argument: resources.gpu_count: must be at least 1".
  std::string ToString() const;

  // Prefixes the message: "load job j-1: <message>".
  Status WithContext(const std::string& context) const;

 private:
  Status(Code code, std::string msg, std::string field = "")
      : code_(code), message_(std::move(msg)), field_(std::move(field)) {}

  Code code_ = Code::kOk;
  std::string message_;
  std::string field_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace tide

#define TIDE_RETURN_IF_ERROR(expr)         \
  do {                                     \
    ::tide::Status _st = (expr);           \
    if (!_st.ok()) return _st;             \
  } while (0)

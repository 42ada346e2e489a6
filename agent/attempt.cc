#include "agent/attempt.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "common/token.h"

namespace tide::agent {
namespace fs = std::filesystem;

void AttemptState::Stop(const std::string& reason, int64_t grace_s) {
  std::lock_guard<std::mutex> lock(mu);
  if (stop_reason.empty()) stop_reason = reason;
  grace_s = std::max<int64_t>(grace_s, 0);
  if (stop_grace_s < 0 || grace_s < stop_grace_s) stop_grace_s = grace_s;
  stop_ordered = true;
  cv.notify_all();
}

void AttemptState::SleepUnlessAbandoned(int64_t ms) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, std::chrono::milliseconds(ms), [this] { return abandoned.load(); });
}

bool AttemptState::stop_ordered_now() {
  std::lock_guard<std::mutex> lock(mu);
  return stop_ordered;
}

bool IsRejection(const Status& st) {
  return st.code() == Code::kNotFound || st.code() == Code::kConflict;
}

bool IsPermanent(const Status& st) {
  return st.code() == Code::kInvalidArgument || st.code() == Code::kPermissionDenied ||
         st.code() == Code::kTooLarge;
}

std::string CheckpointFingerprint(const std::string& dir) {
  std::vector<std::string> items;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied,
                                                  ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat sb {};
    if (::lstat(it->path().c_str(), &sb) != 0) continue;
    items.push_back(it->path().lexically_relative(dir).generic_string() + "\t" +
                    std::to_string(sb.st_mode) + "\t" + std::to_string(sb.st_size) + "\t" +
                    std::to_string(sb.st_mtim.tv_sec) + "." + std::to_string(sb.st_mtim.tv_nsec));
  }
  if (items.empty()) return "";
  std::sort(items.begin(), items.end());
  std::string all;
  for (const auto& i : items) all += i + "\n";
  return Sha256Hex(all);
}

}  // namespace tide::agent

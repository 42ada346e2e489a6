#include "scheduler/fair_share.h"

#include <cmath>

namespace tide::sched {

double FairShare::Decayed(const Entry& e, int64_t now_ms) const {
  if (half_life_ms_ <= 0 || now_ms <= e.at) return e.value;
  double halves = static_cast<double>(now_ms - e.at) / static_cast<double>(half_life_ms_);
  return e.value * std::exp2(-halves);
}

void FairShare::Charge(const std::string& account, double gpu_s, int64_t now_ms) {
  Entry& e = usage_[account];
  e.value = Decayed(e, now_ms) + gpu_s;
  if (now_ms > e.at) e.at = now_ms;
}

double FairShare::Usage(const std::string& account, int64_t now_ms) const {
  auto it = usage_.find(account);
  return it == usage_.end() ? 0 : Decayed(it->second, now_ms);
}

std::map<std::string, AccountShare> FairShare::Shares(int64_t now_ms) const {
  std::map<std::string, AccountShare> out;
  for (const auto& [name, w] : weights_) out[name].weight = w;
  for (const auto& [name, e] : usage_) out[name].usage_gpu_s = Decayed(e, now_ms);
  return out;
}

}  // namespace tide::sched

// Fair-share usage: GPU-seconds per account that decay with a half-life, so
// an account that ran a lot last month is not punished today. Pure: time is
// a parameter. The server charges running work every tick; the simulator
// charges each attempt as it ends.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "scheduler/snapshot.h"

namespace tide::sched {

class FairShare {
 public:
  explicit FairShare(int64_t half_life_ms = 7LL * 24 * 3600 * 1000) : half_life_ms_(half_life_ms) {}

  void Charge(const std::string& account, double gpu_s, int64_t now_ms);
  // Decayed usage of `account` as of `now_ms`.
  double Usage(const std::string& account, int64_t now_ms) const;
  void SetWeight(const std::string& account, double weight) { weights_[account] = weight; }
  // Every known account with its weight and usage as of `now_ms`.
  std::map<std::string, AccountShare> Shares(int64_t now_ms) const;
  int64_t half_life_ms() const { return half_life_ms_; }

 private:
  struct Entry {
    double value = 0;
    int64_t at = 0;
  };
  double Decayed(const Entry& e, int64_t now_ms) const;

  int64_t half_life_ms_;
  std::map<std::string, Entry> usage_;
  std::map<std::string, double> weights_;
};

}  // namespace tide::sched

// Prices: the operator's list per GPU model, the spot discount and the
// platform fee; a provider's own ask overrides the list for its nodes.
//
// A GPU model without a list price and without a provider ask costs
// nothing (a fresh `tide dev` runs free until the operator sets prices).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "common/status.h"
#include "ledger/money.h"

namespace tide::ledger {

struct PriceList {
  std::map<std::string, Micros> per_gpu_hour;  // canonical model -> list price
  int64_t spot_discount_ppm = 0;  // spot pays (1 - discount) of the price
  int64_t fee_ppm = 0;            // the platform's part of every charge
};
nlohmann::json ToJson(const PriceList& p);
// Strict: names the offending field.
Result<PriceList> PriceListFromJson(const nlohmann::json& j);

// Micro-credits per GPU-hour of `model` for a job of tier spot or not, on a
// node whose provider asks `ask` (0: the list price).
Micros Rate(const PriceList& prices, const std::string& model, Micros ask, bool spot);

// What a charge of `amount` splits into.
struct Split {
  Micros provider = 0;
  Micros platform = 0;
};
Split SplitCharge(const PriceList& prices, Micros amount);

}  // namespace tide::ledger

#include "ledger/prices.h"

#include "common/json_reader.h"

namespace tide::ledger {

using nlohmann::json;

json ToJson(const PriceList& p) {
  json list = json::object();
  for (const auto& [model, price] : p.per_gpu_hour) list[model] = FormatCredits(price);
  return {{"per_gpu_hour", list},
          {"spot_discount", FormatFraction(p.spot_discount_ppm)},
          {"fee", FormatFraction(p.fee_ppm)}};
}

Result<PriceList> PriceListFromJson(const json& j) {
  JsonReader r(j, "");
  TIDE_RETURN_IF_ERROR(r.status());
  PriceList p;
  if (auto list = r.StringMap("per_gpu_hour")) {
    for (const auto& [model, text] : *list) {
      auto v = ParseCredits(text, "per_gpu_hour." + model);
      if (!v.ok()) return v.status();
      p.per_gpu_hour[model] = *v;
    }
  }
  if (auto v = r.String("spot_discount")) {
    auto f = ParseFraction(*v, "spot_discount");
    if (!f.ok()) return f.status();
    p.spot_discount_ppm = *f;
  }
  if (auto v = r.String("fee")) {
    auto f = ParseFraction(*v, "fee");
    if (!f.ok()) return f.status();
    p.fee_ppm = *f;
  }
  TIDE_RETURN_IF_ERROR(r.Finish());
  return p;
}

Micros Rate(const PriceList& prices, const std::string& model, Micros ask, bool spot) {
  Micros base = ask;
  if (base <= 0) {
    auto it = prices.per_gpu_hour.find(model);
    base = it == prices.per_gpu_hour.end() ? 0 : it->second;
  }
  if (!spot) return base;
  return base - PartOf(base, prices.spot_discount_ppm);
}

Split SplitCharge(const PriceList& prices, Micros amount) {
  Split s;
  s.platform = PartOf(amount, prices.fee_ppm);
  s.provider = amount - s.platform;
  return s;
}

}  // namespace tide::ledger

// Money routes: /v1/account, /v1/cards/redeem, /v1/usage, /v1/estimate,
// /v1/prices, /v1/provider/earnings, and the admin's prices, cards and
// ledger check (docs/money.md). Amounts are JSON numbers of credits with
// at most six decimals.
#include "common/json_reader.h"
#include "ledger/money.h"
#include "server/http/api.h"

namespace tide::server {

using ledger::Micros;
using nlohmann::json;

json Credits(Micros amount) { return json::parse(ledger::FormatCredits(amount)); }

namespace {
// A number or a string of credits, strictly.
Result<Micros> ReadCredits(const json* v, const std::string& field) {
  if (v == nullptr) return Status::InvalidArgument("is required", field);
  if (v->is_string()) return ledger::ParseCredits(v->get<std::string>(), field);
  if (v->is_number()) return ledger::ParseCredits(v->dump(), field);
  return Status::InvalidArgument("must be an amount of credits", field);
}
Result<int64_t> ReadFraction(const json* v, const std::string& field) {
  if (v->is_string()) return ledger::ParseFraction(v->get<std::string>(), field);
  if (v->is_number()) return ledger::ParseFraction(v->dump(), field);
  return Status::InvalidArgument("must be a fraction between 0 and 1", field);
}

json PricesJson(const ledger::PriceList& p) {
  json list = json::object();
  for (const auto& [model, price] : p.per_gpu_hour) list[model] = Credits(price);
  return {{"per_gpu_hour", list},
          {"spot_discount", json::parse(ledger::FormatFraction(p.spot_discount_ppm))},
          {"fee", json::parse(ledger::FormatFraction(p.fee_ppm))}};
}
}  // namespace

Response Api::Money(const Request& req, const Caller& caller, const Segments& seg) {
  const std::string& what = seg[1];
  if (what == "account" && seg.size() == 2 && req.method == "GET") {
    BalanceInfo b = core_->Balance(caller);
    return JsonResponse(200, {{"user", caller.subject},
                              {"available", Credits(b.available)},
                              {"escrow", Credits(b.escrow)},
                              {"daily_cap", b.daily_cap > 0 ? json(Credits(b.daily_cap)) : json(nullptr)},
                              {"spent_today", Credits(b.spent_today)}});
  }
  if (what == "cards" && seg.size() == 3 && seg[2] == "redeem" && req.method == "POST") {
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    JsonReader r(*body, "");
    auto code = r.String("code", true);
    if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
    auto credited = core_->Redeem(caller, *code);
    if (!credited.ok()) return ErrorResponse(credited.status());
    return JsonResponse(200, {{"credited", Credits(*credited)},
                              {"available", Credits(core_->Balance(caller).available)}});
  }
  if (what == "usage" && seg.size() == 2 && req.method == "GET") {
    auto since = QueryInt(req, "since", 0, 0, int64_t{1} << 50);
    if (!since.ok()) return ErrorResponse(since.status());
    json lines = json::array();
    Micros total = 0;
    for (const auto& l : core_->Usage(caller, *since)) {
      int64_t end = l.finished_at > 0 ? l.finished_at : clock_->NowMs();
      lines.push_back({{"job_id", l.job_id}, {"name", l.name}, {"attempt", l.attempt},
                       {"rank", l.rank}, {"node_id", l.node_id}, {"gpu_model", l.gpu_model},
                       {"gpus", l.gpus}, {"started_at", l.started_at},
                       {"finished_at", l.finished_at},
                       {"seconds", static_cast<double>(std::max<int64_t>(0, end - l.started_at)) / 1000.0},
                       {"rate", Credits(l.rate)}, {"cost", Credits(l.cost)}});
      total += l.cost;
    }
    return JsonResponse(200, {{"lines", lines}, {"total", Credits(total)}});
  }
  if (what == "provider" && seg.size() == 3 && seg[2] == "earnings" && req.method == "GET") {
    json lines = json::array();
    Micros total = 0;
    for (const auto& l : core_->Earnings(caller)) {
      lines.push_back({{"job_id", l.job_id}, {"attempt", l.attempt}, {"rank", l.rank},
                       {"node_id", l.node_id}, {"started_at", l.started_at},
                       {"finished_at", l.finished_at},
                       {"gpu_seconds", static_cast<double>(l.gpu_ms) / 1000.0},
                       {"price", Credits(l.rate)}, {"gross", Credits(l.gross)},
                       {"fee", Credits(l.fee)}, {"earned", Credits(l.earned)}});
      total += l.earned;
    }
    return JsonResponse(200, {{"lines", lines}, {"total_earned", Credits(total)}});
  }
  if (what == "prices" && seg.size() == 2 && req.method == "GET") {
    return JsonResponse(200, PricesJson(core_->Prices()));
  }
  if (what == "estimate" && seg.size() == 2 && req.method == "POST") {
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    if (!body->is_object()) return ErrorResponse(Status::InvalidArgument("must be an object", "body"));
    json spec_json = *body;
    double hours = 0;
    int64_t reserve = 200'000;
    if (spec_json.contains("hours")) {
      const json& h = spec_json["hours"];
      if (!h.is_number() || h.get<double>() <= 0) {
        return ErrorResponse(Status::InvalidArgument("must be a positive number", "hours"));
      }
      hours = h.get<double>();
      spec_json.erase("hours");
    }
    if (spec_json.contains("reserve")) {
      auto f = ReadFraction(&spec_json["reserve"], "reserve");
      if (!f.ok()) return ErrorResponse(f.status());
      reserve = *f;
      spec_json.erase("reserve");
    }
    // What to run does not change the price.
    if (!spec_json.contains("command")) spec_json["command"] = "true";
    auto spec = api::JobSpecFromJson(spec_json);
    if (!spec.ok()) return ErrorResponse(spec.status());
    auto e = core_->EstimateCost(*spec, hours, reserve);
    if (!e.ok()) return ErrorResponse(e.status());
    json out = {{"rate", Credits(e->rate)},   {"gpus", e->gpus},
                {"hours", e->hours},          {"base", Credits(e->base)},
                {"reserve", Credits(e->reserve)}, {"total", Credits(e->total)},
                {"expected_start", e->expected_start > 0 ? json(e->expected_start) : json(nullptr)}};
    if (!e->never_starts.empty()) out["never_starts"] = e->never_starts;
    return JsonResponse(200, out);
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

Response Api::AdminMoney(const Request& req, const Caller& caller, const Segments& seg) {
  if (seg[2] == "prices" && seg.size() == 3 && req.method == "GET") {
    return JsonResponse(200, PricesJson(core_->Prices()));
  }
  if (seg[2] == "prices" && seg.size() == 3 && (req.method == "PUT" || req.method == "POST")) {
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    JsonReader r(*body, "");
    if (Status st = r.status(); !st.ok()) return ErrorResponse(st);
    // PUT replaces the list; POST changes what it names and keeps the rest.
    ledger::PriceList prices = req.method == "PUT" ? ledger::PriceList{} : core_->Prices();
    if (const json* list = r.Object("per_gpu_hour")) {
      for (const auto& [model, v] : list->items()) {
        std::string canonical = api::CanonicalGpuModel(model);
        if (canonical.empty() || canonical == "ANY") {
          return ErrorResponse(Status::InvalidArgument("is not a GPU model", "per_gpu_hour." + model));
        }
        if (v.is_null()) {
          prices.per_gpu_hour.erase(canonical);
          continue;
        }
        auto c = ReadCredits(&v, "per_gpu_hour." + model);
        if (!c.ok()) return ErrorResponse(c.status());
        prices.per_gpu_hour[canonical] = *c;
      }
    }
    for (const char* key : {"spot_discount", "fee"}) {
      if (const json* v = r.Raw(key)) {
        auto f = ReadFraction(v, key);
        if (!f.ok()) return ErrorResponse(f.status());
        (std::string(key) == "fee" ? prices.fee_ppm : prices.spot_discount_ppm) = *f;
      }
    }
    if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
    if (Status st = core_->SetPrices(caller, prices); !st.ok()) return ErrorResponse(st);
    return JsonResponse(200, PricesJson(prices));
  }
  if (seg[2] == "cards" && seg.size() == 3 && req.method == "POST") {
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    JsonReader r(*body, "");
    auto count = r.Int("count", true);
    const json* value_json = r.Raw("value");
    auto expires = r.Int("expires_at");
    if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
    auto value = ReadCredits(value_json, "value");
    if (!value.ok()) return ErrorResponse(value.status());
    if (*value == 0) return ErrorResponse(Status::InvalidArgument("must be positive", "value"));
    if (*count < 1 || *count > 10'000) {
      return ErrorResponse(Status::InvalidArgument("must be 1 to 10000", "count"));
    }
    auto codes = core_->MintCards(caller, static_cast<int>(*count), *value, expires.value_or(0));
    if (!codes.ok()) return ErrorResponse(codes.status());
    return JsonResponse(201, {{"codes", *codes},
                              {"value", Credits(*value)},
                              {"expires_at", expires.value_or(0)}});
  }
  if (seg[2] == "users" && seg.size() == 5 && seg[4] == "daily-cap" &&
      (req.method == "PUT" || req.method == "GET")) {
    auto user = core_->FindUser(seg[3]);
    if (!user.ok()) return ErrorResponse(user.status());
    if (req.method == "PUT") {
      auto body = ParseBody(req);
      if (!body.ok()) return ErrorResponse(body.status());
      JsonReader r(*body, "");
      const json* v = r.Raw("daily_cap");
      if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
      Micros cap = 0;  // null or absent: no cap
      if (v != nullptr) {
        auto c = ReadCredits(v, "daily_cap");
        if (!c.ok()) return ErrorResponse(c.status());
        cap = *c;
      }
      if (Status st = core_->SetDailyCap(caller, *user, cap); !st.ok()) return ErrorResponse(st);
    }
    Micros cap = core_->DailyCap(*user);
    return JsonResponse(200, {{"user", *user}, {"daily_cap", cap > 0 ? Credits(cap) : json(nullptr)}});
  }
  if (seg[2] == "ledger" && seg.size() == 4 && seg[3] == "check" && req.method == "GET") {
    ledger::Totals t;
    Status st = core_->CheckLedger(&t);
    return JsonResponse(200, {{"ok", st.ok()},
                              {"error", st.ok() ? "" : st.message()},
                              {"issued", Credits(t.issued)},
                              {"users", Credits(t.users)},
                              {"escrow", Credits(t.escrow)},
                              {"providers", Credits(t.providers)},
                              {"platform", Credits(t.platform)}});
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

}  // namespace tide::server

// The core's doors to the money (Accounts) and to the scheduler's what-if
// (EstimateCost): commands run on the core thread, views take the shared
// lock. See docs/money.md.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "ledger/cards.h"
#include "scheduler/estimate.h"
#include "scheduler/feasibility.h"
#include "server/core.h"

namespace tide::server {

using api::Job;
using ledger::Micros;

Result<Micros> Core::Redeem(const Caller& caller, const std::string& code) {
  Micros value = 0;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    auto v = accounts_.Redeem(caller.subject, code, batch);
    if (!v.ok()) return v.status();
    value = *v;
    // The card by the start of its hash: the code itself is the credit.
    auto canonical = ledger::CanonicalCardCode(code);
    audit_.Record(batch, clock_->NowMs(), caller, "card.redeem", caller.subject,
                  {{"card", canonical.ok() ? ledger::CardHash(*canonical).substr(0, 12) : ""},
                   {"credits", ledger::FormatCredits(value)}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return value;
}

Result<std::vector<std::string>> Core::MintCards(const Caller& by, int count, Micros value,
                                                 int64_t expires_at) {
  if (count < 1 || count > 10'000) return Status::InvalidArgument("must be 1 to 10000", "count");
  if (value <= 0) return Status::InvalidArgument("must be positive", "value");
  std::vector<std::string> codes;
  for (int i = 0; i < count; ++i) codes.push_back(NewCardCode());
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    TIDE_RETURN_IF_ERROR(accounts_.Mint(codes, value, expires_at, batch));
    audit_.Record(batch, clock_->NowMs(), by, "card.mint", "",
                  {{"count", count}, {"credits", ledger::FormatCredits(value)},
                   {"expires_at", expires_at}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return codes;
}

Status Core::SetPrices(const Caller& by, const ledger::PriceList& prices) {
  return Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    accounts_.SetPrices(prices, batch);  // node prices change: a full pass follows
    audit_.Record(batch, clock_->NowMs(), by, "prices.set", "",
                  nlohmann::json::parse(batch.settings.back().value, nullptr, false));
    return Status::Ok();
  });
}

ledger::PriceList Core::Prices() const {
  ReaderLock lock(state_mu_);
  return accounts_.prices();
}

Status Core::SetDailyCap(const Caller& by, const std::string& user_id, Micros cap) {
  return Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (!users_.count(user_id)) return Status::NotFound("no user " + user_id);
    accounts_.SetDailyCap(user_id, cap, batch);
    audit_.Record(batch, clock_->NowMs(), by, "user.daily_cap", user_id,
                  {{"credits", ledger::FormatCredits(cap)}});
    return Status::Ok();
  });
}

Micros Core::DailyCap(const std::string& user_id) const {
  ReaderLock lock(state_mu_);
  return accounts_.DailyCap(user_id);
}

Status Core::SetWeight(const Caller& by, const std::string& user_id, double weight) {
  if (!(weight > 0 && weight <= 1000)) {
    return Status::InvalidArgument("must be above 0 and at most 1000", "weight");
  }
  return Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (!users_.count(user_id)) return Status::NotFound("no user " + user_id);
    planner_.SetWeight(user_id, weight);
    char text[32];
    snprintf(text, sizeof text, "%.6g", weight);
    batch.settings.push_back({"weight:" + user_id, text});
    audit_.Record(batch, clock_->NowMs(), by, "user.weight", user_id, {{"weight", weight}});
    return Status::Ok();
  });
}

double Core::Weight(const std::string& user_id) const {
  ReaderLock lock(state_mu_);
  return planner_.Weight(user_id);
}

BalanceInfo Core::Balance(const Caller& caller) const {
  ReaderLock lock(state_mu_);
  return accounts_.Balance(caller.subject);
}

JobMoney Core::MoneyOf(const std::string& job_id) const {
  ReaderLock lock(state_mu_);
  return accounts_.MoneyOf(job_id);
}

std::vector<UsageLine> Core::Usage(const Caller& caller, int64_t since) const {
  ReaderLock lock(state_mu_);
  return accounts_.Usage(jobs_, [&](const Job& job) { return Visible(caller, job); }, since);
}

std::vector<EarningLine> Core::Earnings(const Caller& caller) const {
  ReaderLock lock(state_mu_);
  return accounts_.Earnings(jobs_, caller.scope == Scope::kAdmin ? "" : caller.subject);
}

Status Core::CheckLedger(ledger::Totals* totals) const {
  ReaderLock lock(state_mu_);
  if (totals) *totals = accounts_.Totals();
  return accounts_.Check();
}

std::string Core::Metrics() const {
  ReaderLock lock(state_mu_);
  std::string out;
  auto gauge = [&](const std::string& name, const std::string& help, const std::string& labels,
                   const std::string& value) {
    if (!help.empty()) out += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n";
    out += name + labels + " " + value + "\n";
  };
  ledger::Totals t = accounts_.Totals();
  const std::pair<const char*, Micros> credits[] = {{"issued", t.issued},
                                                    {"users", t.users},
                                                    {"escrow", t.escrow},
                                                    {"providers", t.providers},
                                                    {"platform", t.platform}};
  bool first = true;
  for (const auto& [account, amount] : credits) {
    gauge("tide_credits", first ? "Credit by kind of account (issued = the sum of the others)" : "",
          std::string("{account=\"") + account + "\"}", ledger::FormatCredits(amount));
    first = false;
  }
  std::map<std::string, int> by_status;
  for (const auto& [id, e] : jobs_.jobs()) ++by_status[api::JobStatusName(e.job.status)];
  first = true;
  for (const char* s : {"queued", "starting", "running", "completed", "failed", "cancelled"}) {
    gauge("tide_jobs", first ? "Jobs by status" : "", std::string("{status=\"") + s + "\"}",
          std::to_string(by_status[s]));
    first = false;
  }
  int ready = 0, lost = 0, gpus = 0, used = 0;
  for (const auto& [id, n] : jobs_.nodes()) {
    (n.node.state == api::NodeState::kReady ? ready : lost) += 1;
    if (n.node.state != api::NodeState::kReady) continue;
    gpus += static_cast<int>(n.node.gpus.size());
    for (const auto& [job, g] : n.leases) used += static_cast<int>(g.size());
  }
  gauge("tide_nodes", "Nodes by state", "{state=\"ready\"}", std::to_string(ready));
  gauge("tide_nodes", "", "{state=\"lost\"}", std::to_string(lost));
  gauge("tide_gpus", "GPUs of ready nodes, leased or free", "{state=\"leased\"}", std::to_string(used));
  gauge("tide_gpus", "", "{state=\"free\"}", std::to_string(gpus - used));
  gauge("tide_ledger_transactions", "Transactions in the ledger", "", std::to_string(accounts_.LastSeq()));
  // Each GPU of a ready node as its last heartbeat read it; unknown readings
  // (-1) are left out.
  auto label = [](const std::string& v) {
    std::string e;
    for (char c : v) {
      if (c == '\\' || c == '"') e += '\\';
      if (c == '\n') {
        e += "\\n";
        continue;
      }
      e += c;
    }
    return e;
  };
  struct GpuGauge {
    const char* name;
    const char* help;
    std::function<std::string(const api::Gpu&)> value;  // "" = unknown
  };
  const GpuGauge gpu_gauges[] = {
      {"tide_gpu_utilization_ratio", "GPU utilisation, 0 to 1, at the last heartbeat",
       [](const api::Gpu& g) {
         if (g.utilization_pct < 0) return std::string();
         char buf[16];
         std::snprintf(buf, sizeof buf, "%.2f", std::min(g.utilization_pct, 100) / 100.0);
         return std::string(buf);
       }},
      {"tide_gpu_memory_used_bytes", "GPU memory in use at the last heartbeat",
       [](const api::Gpu& g) {
         return g.memory_used_mb < 0 ? std::string() : std::to_string(g.memory_used_mb << 20);
       }},
      {"tide_gpu_memory_total_bytes", "GPU memory",
       [](const api::Gpu& g) { return std::to_string(g.memory_mb << 20); }},
      {"tide_gpu_temperature_celsius", "GPU temperature at the last heartbeat",
       [](const api::Gpu& g) {
         return g.temperature_c < 0 ? std::string() : std::to_string(g.temperature_c);
       }},
  };
  for (const GpuGauge& gg : gpu_gauges) {
    bool help = true;
    for (const auto& [id, n] : jobs_.nodes()) {
      if (n.node.state != api::NodeState::kReady) continue;
      for (const api::Gpu& g : n.node.gpus) {
        std::string v = gg.value(g);
        if (v.empty()) continue;
        gauge(gg.name, help ? gg.help : "",
              "{node=\"" + label(n.node.name) + "\",gpu=\"" + std::to_string(g.index) +
                  "\",model=\"" + label(g.model) + "\"}",
              v);
        help = false;
      }
    }
  }
  return out;
}

Result<Estimate> Core::EstimateCost(const api::JobSpec& spec, double hours, int64_t reserve_ppm) const {
  if (hours <= 0) hours = static_cast<double>(spec.max_runtime_s) / 3600.0;
  if (hours <= 0) {
    return Status::InvalidArgument("give the hours, or a max_runtime in the spec", "hours");
  }
  if (hours > 24 * 365) return Status::InvalidArgument("must be at most a year", "hours");
  const int64_t now = clock_->NowMs();
  Estimate out;
  SchedulerInput in;
  {
    ReaderLock lock(state_mu_);
    out.rate = accounts_.MaxRate(spec, jobs_);
    in = planner_.Snapshot(now);
  }
  out.gpus = spec.resources.gpu_count * spec.resources.nodes;
  out.hours = hours;
  int64_t gpu_ms = static_cast<int64_t>(std::llround(hours * 3'600'000.0)) * out.gpus;
  out.base = ledger::CostOf(out.rate, gpu_ms);
  out.reserve = ledger::PartOf(out.base, reserve_ppm);
  out.total = out.base + out.reserve;
  // When it would start: a what-if run with the job in the queue.
  sched::PendingJob p = PendingOfSpec(spec);
  p.id = "estimate";
  p.account = "estimate";
  p.max_runtime_ms = static_cast<int64_t>(hours * 3'600'000.0);
  p.submitted_at = std::numeric_limits<int64_t>::max() / 2;
  p.queued_since = now;
  sched::WaitKind kind = sched::WaitKind::kResources;
  out.never_starts = sched::Unsatisfiable(p, in.nodes, &kind);
  if (!out.never_starts.empty()) return out;
  in.queue.push_back(p);
  auto starts = sched::ExpectedStarts({in.nodes, in.queue, in.running, in.shares, in.config, now});
  auto it = starts.find("estimate");
  if (it != starts.end()) out.expected_start = it->second;
  return out;
}

}  // namespace tide::server

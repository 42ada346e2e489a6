// The core's money: admission into escrow, metering, release, cards,
// prices and the views over the ledger. See docs/money.md.
//
// Every transaction is applied to ledger_ on the core thread and its row
// goes into the same store batch as the job, node or card change it is
// for, so a crash between two steps never leaves money half-moved.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ledger/cards.h"
#include "scheduler/estimate.h"
#include "server/core.h"

namespace tide::server {

using api::Job;
using api::JobStatus;
using ledger::Micros;

namespace {
constexpr int64_t kDayMs = 86'400'000;

bool IsEscrow(const std::string& account) {
  static const std::string kPrefix = ledger::EscrowAccount("");
  return account.rfind(kPrefix, 0) == 0;
}

std::string ChargeKey(const std::string& job_id, int attempt, int rank) {
  return job_id + "#" + std::to_string(attempt) + "#" + std::to_string(rank);
}

nlohmann::json CardJson(Micros value, int64_t expires_at,
                        int64_t created_at, const std::string& redeemed_by, int64_t redeemed_at) {
  return {{"value", value},
          {"expires_at", expires_at},
          {"created_at", created_at},
          {"redeemed_by", redeemed_by},
          {"redeemed_at", redeemed_at}};
}

// One charged piece of an attempt: a single-node attempt, or one rank.
struct Piece {
  int rank = 0;
  std::string node_id;
  const std::vector<int>* gpus = nullptr;
  Micros rate = 0;
  int64_t started_at = 0;
  int64_t finished_at = 0;
};
std::vector<Piece> Pieces(const api::Attempt& a) {
  std::vector<Piece> out;
  if (a.ranks.empty()) {
    out.push_back({0, a.node_id, &a.gpus, a.rate, a.started_at, a.finished_at});
    return out;
  }
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    const api::Rank& r = a.ranks[i];
    int64_t end = r.finished_at > 0 ? r.finished_at : a.finished_at;
    out.push_back({static_cast<int>(i), r.node_id, &r.gpus, r.rate, r.started_at, end});
  }
  return out;
}
}  // namespace

// ------------------------------------------------------------------ ledger plumbing

Status Core::ApplyTxLocked(ledger::Transaction tx) {
  tx.at = clock_->NowMs();
  TIDE_RETURN_IF_ERROR(ledger_.Apply(tx));
  ledger_rows_.push_back({tx.seq, tx.at, tx.kind, tx.job_id, ledger::ToJson(tx).dump()});
  return Status::Ok();
}

void Core::RecoverMoneyLocked(const store::Contents& contents) {
  for (const auto& row : contents.settings) {
    if (row.key.rfind("daily_cap:", 0) == 0) {
      auto cap = ledger::ParseCredits(row.value, "daily_cap");
      if (cap.ok() && *cap > 0) daily_caps_[row.key.substr(10)] = *cap;
      continue;
    }
    if (row.key != "prices") continue;
    auto prices = ledger::PriceListFromJson(nlohmann::json::parse(row.value, nullptr, false));
    if (prices.ok()) prices_ = *prices;
    else spdlog::error("stored price list unreadable, using none: {}", prices.status().ToString());
  }
  for (const auto& row : contents.cards) {
    auto j = nlohmann::json::parse(row.doc, nullptr, false);
    if (!j.is_object()) continue;
    Card c;
    c.value = j.value("value", Micros{0});
    c.expires_at = j.value("expires_at", int64_t{0});
    c.created_at = j.value("created_at", int64_t{0});
    c.redeemed_by = j.value("redeemed_by", "");
    c.redeemed_at = j.value("redeemed_at", int64_t{0});
    cards_[row.hash] = c;
  }
  for (const auto& row : contents.ledger) {
    auto tx = ledger::TransactionFromJson(nlohmann::json::parse(row.doc, nullptr, false));
    Status st = tx.ok() ? ledger_.Replay(*tx) : tx.status();
    if (!st.ok()) {
      // A ledger that does not replay is not something to run on.
      spdlog::critical("ledger row {} does not replay: {}", row.seq, st.ToString());
      std::_Exit(71);
    }
    if (tx->kind == "charge") {
      Charged& c = charged_[ChargeKey(tx->job_id, tx->attempt, tx->rank)];
      Micros gross = 0;
      for (const auto& e : tx->entries) {
        if (IsEscrow(e.account)) gross += -e.amount;
        if (e.account == ledger::kPlatform) c.fee += e.amount;
      }
      c.gross += gross;
      auto job = jobs_.find(tx->job_id);
      if (job != jobs_.end()) {
        DaySpend& d = spent_today_[job->second.job.owner];
        if (tx->at / kDayMs != d.day) d = {tx->at / kDayMs, 0};
        d.spent += gross;
      }
    }
  }
  if (Status st = ledger_.Check(); !st.ok()) {
    spdlog::critical("ledger check failed after recovery: {}", st.ToString());
    std::_Exit(71);
  }
}

// ------------------------------------------------------------------ rates

Micros Core::NodeRateLocked(const api::Node& node, int gpu, const api::JobSpec& spec) const {
  std::string model;
  for (const auto& g : node.gpus) {
    if (g.index == gpu) model = g.model;
  }
  auto ask = node.prices.find(model);
  return ledger::Rate(prices_, model, ask == node.prices.end() ? 0 : ask->second,
                      spec.tier == "spot");
}

Micros Core::MaxRateLocked(const api::JobSpec& spec) const {
  const auto& types = spec.resources.gpu_types;
  auto wanted = [&](const api::Gpu& g) {
    if (!types.empty() && std::find(types.begin(), types.end(), g.model) == types.end()) return false;
    return g.memory_mb >= spec.resources.gpu_memory_mb;
  };
  Micros best = 0;
  bool any = false;
  for (const auto& [id, n] : nodes_) {
    for (const auto& g : n.node.gpus) {
      if (!wanted(g)) continue;
      Micros r = NodeRateLocked(n.node, g.index, spec);
      if (spec.max_price > 0 && r > spec.max_price) continue;  // never placed there
      best = std::max(best, r);
      any = true;
    }
  }
  if (!any) {
    // No such node yet: the list prices of the models it accepts.
    for (const auto& [model, price] : prices_.per_gpu_hour) {
      if (!types.empty() && std::find(types.begin(), types.end(), model) == types.end()) continue;
      best = std::max(best, ledger::Rate(prices_, model, 0, spec.tier == "spot"));
    }
    if (spec.max_price > 0) best = std::min(best, spec.max_price);
  }
  return best;
}

Micros Core::WorstCaseLocked(const api::JobSpec& spec, Micros rate) const {
  if (rate <= 0) return 0;
  const int64_t gpus = static_cast<int64_t>(spec.resources.gpu_count) * spec.resources.nodes;
  Micros cap = options_.default_job_cap;
  if (spec.max_runtime_s > 0) {
    // It may run max_runtime, then the grace period of the timeout notice,
    // once and once more per retry.
    cap = ledger::CostOf(rate, gpus * (spec.max_runtime_s + spec.grace_s) * 1000) *
          (1 + spec.retry_times);
  }
  if (spec.max_cost > 0) cap = spec.max_runtime_s > 0 ? std::min(cap, spec.max_cost) : spec.max_cost;
  return cap;
}

Micros Core::AttemptCapLocked(const api::JobSpec& spec, Micros rate) const {
  api::JobSpec once = spec;
  once.retry_times = 0;
  return WorstCaseLocked(once, rate);
}

Micros Core::ChargedLocked(const api::Job& job, const api::Attempt* only) const {
  Micros total = 0;
  for (const api::Attempt& a : job.attempts) {
    if (only != nullptr && &a != only) continue;
    const size_t ranks = std::max<size_t>(1, a.ranks.size());
    for (size_t r = 0; r < ranks; ++r) {
      auto it = charged_.find(ChargeKey(job.id, a.attempt, static_cast<int>(r)));
      if (it != charged_.end()) total += it->second.gross;
    }
  }
  return total;
}

Micros Core::AttemptReserveLocked(const JobEntry& e) const {
  if (e.job.attempts.empty()) return 0;
  const api::Attempt& a = e.job.attempts.back();
  const Micros charged = ChargedLocked(e.job, &a);
  Micros rate = a.rate;
  for (const auto& rank : a.ranks) rate = std::max(rate, rank.rate);
  return std::max<Micros>(0, AttemptCapLocked(e.job.spec, rate) - charged);
}

std::string Core::EscrowOf(const api::Job& job) {
  return ledger::EscrowAccount(job.batch.empty() ? job.id : job.batch);
}

Micros Core::SpendableLocked(const JobEntry& e) const {
  Micros left = ledger_.Balance(EscrowOf(e.job));
  if (!e.job.batch.empty()) {
    // A trial shares its batch's escrow but may not take more than was
    // reckoned for it: its attempt's cap, and in all its max_cost.
    left = std::min(left, AttemptReserveLocked(e));
    if (e.job.spec.max_cost > 0) {
      left = std::min(left, std::max<Micros>(0, e.job.spec.max_cost - ChargedLocked(e.job)));
    }
  }
  return left;
}

// ------------------------------------------------------------------ metering

void Core::MeterLocked(JobEntry& e, int64_t until) {
  if (e.job.attempts.empty()) return;
  api::Attempt& a = e.job.attempts.back();
  if (a.attempt != e.job.attempt) return;
  const std::string escrow = EscrowOf(e.job);
  for (const Piece& p : Pieces(a)) {
    if (p.started_at == 0 || p.rate <= 0) continue;
    int64_t end = p.finished_at > 0 ? std::min(p.finished_at, until) : until;
    auto node = nodes_.find(p.node_id);
    std::string payee = ledger::kPlatform;
    if (node != nodes_.end()) {
      // Time after a lost node's last good heartbeat is charged to nobody.
      if (node->second.node.state == api::NodeState::kLost) {
        end = std::min(end, node->second.node.last_heartbeat);
      }
      if (!node->second.node.owner.empty()) payee = ledger::ProviderAccount(node->second.node.owner);
    }
    if (end <= p.started_at) continue;
    const int64_t gpu_ms = static_cast<int64_t>(p.gpus->size()) * (end - p.started_at);
    Charged& charged = charged_[ChargeKey(e.job.id, a.attempt, p.rank)];
    Micros due = ledger::CostOf(p.rate, gpu_ms) - charged.gross;
    due = std::min(due, SpendableLocked(e));  // never past the escrow (or a trial's max_cost)
    if (due <= 0) continue;
    // The fee, like the cost, is taken of the running total: many small
    // charges round to what one charge would.
    ledger::Split split;
    split.platform = ledger::SplitCharge(prices_, charged.gross + due).platform - charged.fee;
    split.platform = std::clamp<Micros>(split.platform, 0, due);
    split.provider = due - split.platform;
    ledger::Transaction tx;
    tx.kind = "charge";
    tx.job_id = e.job.id;
    tx.attempt = a.attempt;
    tx.rank = p.rank;
    tx.memo = p.node_id;
    tx.entries.push_back({escrow, -due});
    if (split.provider > 0) tx.entries.push_back({payee, split.provider});
    if (split.platform > 0) tx.entries.push_back({ledger::kPlatform, split.platform});
    Status st = ApplyTxLocked(std::move(tx));
    if (!st.ok()) {
      spdlog::error("charging {} attempt {}: {}", e.job.id, a.attempt, st.ToString());
      continue;
    }
    charged.gross += due;
    charged.fee += split.platform;
    int64_t now = clock_->NowMs();
    DaySpend& day = spent_today_[e.job.owner];
    if (now / kDayMs != day.day) day = {now / kDayMs, 0};
    day.spent += due;
  }
}

void Core::MeterAllLocked(store::WriteBatch& batch) {
  int64_t now = clock_->NowMs();
  for (auto& [node_id, n] : nodes_) {
    // Charged up to the node's last heartbeat: the time it is proven alive.
    for (auto& [job_id, gpus] : n.leases) {
      JobEntry& e = jobs_.at(job_id);
      if (e.job.node_id != node_id) continue;  // a gang once, from rank 0's node
      MeterLocked(e, std::min(now, n.node.last_heartbeat));
    }
  }
  // Budget: a job whose escrow cannot pay for its grace period gets the
  // notice now, so it stops within what it may cost.
  for (auto& [node_id, n] : nodes_) {
    for (auto& [job_id, gpus] : n.leases) {
      JobEntry& e = jobs_.at(job_id);
      if (e.job.node_id != node_id || e.job.status != JobStatus::kRunning ||
          !StopReason(e.job).empty() || e.job.attempts.empty()) {
        continue;
      }
      const auto& spec = e.job.spec;
      Micros burn = 0;  // per hour, over all ranks
      int64_t gpus_total = 0;
      for (const Piece& p : Pieces(e.job.attempts.back())) {
        if (p.finished_at > 0) continue;
        burn += p.rate * static_cast<int64_t>(p.gpus->size());
        gpus_total += static_cast<int64_t>(p.gpus->size());
      }
      if (burn <= 0) continue;
      // A job bounded by max_runtime alone is stopped by its timeout.
      Micros runtime_cap = spec.max_runtime_s > 0
                               ? ledger::CostOf(burn, (spec.max_runtime_s + spec.grace_s) * 1000)
                               : -1;
      bool budget_bound = runtime_cap < 0 || (spec.max_cost > 0 && spec.max_cost < runtime_cap);
      Micros grace_cost = ledger::CostOf(burn, std::max<int64_t>(spec.grace_s, 1) * 1000 + 2'000);
      Micros left = SpendableLocked(e);
      // A trial also stops when its batch's budget runs out (the gate
      // makes that rare: it starts only trials the budget can pay for).
      bool batch_dry = false;
      if (!e.job.batch.empty()) {
        auto b = batches_.find(e.job.batch);
        batch_dry = b != batches_.end() && b->second.batch.budget > 0 &&
                    ledger_.Balance(EscrowOf(e.job)) <= grace_cost;
      }
      auto cap = daily_caps_.find(e.job.owner);
      bool over_day = cap != daily_caps_.end() &&
                      SpentTodayLocked(e.job.owner, now) + grace_cost >= cap->second;
      if (!over_day && !batch_dry && (!budget_bound || left > grace_cost)) continue;
      spdlog::info("job {} reached {} ({} credits left of its escrow); stopping it", job_id,
                   over_day ? "its account's daily cap" : "its budget", ledger::FormatCredits(left));
      e.job.cancel_requested = true;
      e.job.cancel_reason = "budget_exceeded";
      schedule_needed_ = true;
      PersistJob(e, batch);
    }
  }
}

void Core::ReleaseEscrowLocked(JobEntry& e) {
  if (!e.job.batch.empty()) {
    // A batch's escrow returns once its last trial has ended (the count
    // was updated before this call).
    auto b = batches_.find(e.job.batch);
    if (b == batches_.end() || b->second.open > 0) return;
  }
  const std::string escrow = EscrowOf(e.job);
  Micros left = ledger_.Balance(escrow);
  if (left <= 0) return;
  ledger::Transaction tx;
  tx.kind = "release";
  tx.job_id = e.job.batch.empty() ? e.job.id : e.job.batch;
  tx.entries = {{escrow, -left}, {ledger::UserAccount(e.job.owner), left}};
  Status st = ApplyTxLocked(std::move(tx));
  if (!st.ok()) spdlog::error("releasing the escrow of {}: {}", e.job.id, st.ToString());
}

// ------------------------------------------------------------------ commands

Result<Micros> Core::Redeem(const Caller& caller, const std::string& code) {
  auto canonical = ledger::CanonicalCardCode(code);
  if (!canonical.ok()) return canonical.status();
  const std::string hash = ledger::CardHash(*canonical);
  Micros value = 0;
  Status st = Run([&](store::WriteBatch& batch) {
    auto it = cards_.find(hash);
    if (it == cards_.end()) return Status::NotFound("no such card (check the code)");
    Card& card = it->second;
    int64_t now = clock_->NowMs();
    if (!card.redeemed_by.empty()) return Status::Conflict("this card was already redeemed");
    if (card.expires_at > 0 && now >= card.expires_at) return Status::Conflict("this card has expired");
    ledger::Transaction tx;
    tx.kind = "redeem";
    tx.memo = "card " + hash.substr(0, 12);
    tx.entries = {{ledger::kIssued, -card.value}, {ledger::UserAccount(caller.subject), card.value}};
    TIDE_RETURN_IF_ERROR(ApplyTxLocked(std::move(tx)));
    card.redeemed_by = caller.subject;
    card.redeemed_at = now;
    batch.cards.push_back({hash, CardJson(card.value, card.expires_at, card.created_at,
                                          card.redeemed_by, card.redeemed_at)
                                     .dump()});
    value = card.value;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return value;
}

Result<std::vector<std::string>> Core::MintCards(int count, Micros value, int64_t expires_at) {
  if (count < 1 || count > 10'000) return Status::InvalidArgument("must be 1 to 10000", "count");
  if (value <= 0) return Status::InvalidArgument("must be positive", "value");
  std::vector<std::string> codes;
  for (int i = 0; i < count; ++i) codes.push_back(ledger::NewCardCode());
  Status st = Run([&](store::WriteBatch& batch) {
    int64_t now = clock_->NowMs();
    if (expires_at > 0 && expires_at <= now) {
      return Status::InvalidArgument("is in the past", "expires");
    }
    for (const auto& code : codes) {
      std::string hash = ledger::CardHash(*ledger::CanonicalCardCode(code));
      Card c{value, expires_at, now, "", 0};
      cards_[hash] = c;
      batch.cards.push_back({hash, CardJson(value, expires_at, now, "", 0).dump()});
    }
    spdlog::info("minted {} cards of {} credits", codes.size(), ledger::FormatCredits(value));
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return codes;
}

Status Core::SetPrices(const ledger::PriceList& prices) {
  return Run([&](store::WriteBatch& batch) {
    prices_ = prices;
    batch.settings.push_back({"prices", ledger::ToJson(prices).dump()});
    schedule_needed_ = true;  // node prices changed
    return Status::Ok();
  });
}

Micros Core::SpentTodayLocked(const std::string& user, int64_t now) const {
  auto it = spent_today_.find(user);
  if (it == spent_today_.end() || it->second.day != now / kDayMs) return 0;
  return it->second.spent;
}

Status Core::CheckDailyCapLocked(const std::string& user, Micros hold) const {
  auto cap = daily_caps_.find(user);
  if (cap == daily_caps_.end()) return Status::Ok();
  Micros spent = SpentTodayLocked(user, clock_->NowMs());
  Micros held = 0;  // what the user's live jobs may still cost
  for (const auto& [id, e] : jobs_) {
    if (e.job.owner == user && !api::IsTerminal(e.job.status)) {
      held += ledger_.Balance(ledger::EscrowAccount(id));
    }
  }
  for (const auto& [id, b] : batches_) {
    if (b.batch.owner == user) held += ledger_.Balance(ledger::EscrowAccount(id));
  }
  if (spent + held + hold <= cap->second) return Status::Ok();
  return Status::InsufficientCredit(
      "the account's daily cap is " + ledger::FormatCredits(cap->second) + " credits: today " +
      ledger::FormatCredits(spent) + " were spent and " + ledger::FormatCredits(held) +
      " are held for running jobs, and this job may cost up to " + ledger::FormatCredits(hold));
}

Status Core::SetDailyCap(const std::string& user_id, Micros cap) {
  return Run([&](store::WriteBatch& batch) {
    if (!users_.count(user_id)) return Status::NotFound("no user " + user_id);
    if (cap > 0) daily_caps_[user_id] = cap;
    else daily_caps_.erase(user_id);
    batch.settings.push_back({"daily_cap:" + user_id, ledger::FormatCredits(cap)});
    return Status::Ok();
  });
}

Micros Core::DailyCap(const std::string& user_id) const {
  std::shared_lock lock(state_mu_);
  auto it = daily_caps_.find(user_id);
  return it == daily_caps_.end() ? 0 : it->second;
}

std::string Core::Metrics() const {
  std::shared_lock lock(state_mu_);
  std::string out;
  auto gauge = [&](const std::string& name, const std::string& help, const std::string& labels,
                   const std::string& value) {
    if (!help.empty()) out += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n";
    out += name + labels + " " + value + "\n";
  };
  ledger::Totals t = ledger_.Summary();
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
  for (const auto& [id, e] : jobs_) ++by_status[api::JobStatusName(e.job.status)];
  first = true;
  for (const char* s : {"queued", "starting", "running", "completed", "failed", "cancelled"}) {
    gauge("tide_jobs", first ? "Jobs by status" : "", std::string("{status=\"") + s + "\"}",
          std::to_string(by_status[s]));
    first = false;
  }
  int ready = 0, lost = 0, gpus = 0, used = 0;
  for (const auto& [id, n] : nodes_) {
    (n.node.state == api::NodeState::kReady ? ready : lost) += 1;
    if (n.node.state != api::NodeState::kReady) continue;
    gpus += static_cast<int>(n.node.gpus.size());
    for (const auto& [job, g] : n.leases) used += static_cast<int>(g.size());
  }
  gauge("tide_nodes", "Nodes by state", "{state=\"ready\"}", std::to_string(ready));
  gauge("tide_nodes", "", "{state=\"lost\"}", std::to_string(lost));
  gauge("tide_gpus", "GPUs of ready nodes, leased or free", "{state=\"leased\"}", std::to_string(used));
  gauge("tide_gpus", "", "{state=\"free\"}", std::to_string(gpus - used));
  gauge("tide_ledger_transactions", "Transactions in the ledger", "", std::to_string(ledger_.last_seq()));
  return out;
}

ledger::PriceList Core::Prices() const {
  std::shared_lock lock(state_mu_);
  return prices_;
}

// ------------------------------------------------------------------ views

BalanceInfo Core::Balance(const Caller& caller) const {
  std::shared_lock lock(state_mu_);
  BalanceInfo b;
  b.available = ledger_.Balance(ledger::UserAccount(caller.subject));
  for (const auto& [id, e] : jobs_) {
    if (e.job.owner != caller.subject || api::IsTerminal(e.job.status)) continue;
    b.escrow += ledger_.Balance(ledger::EscrowAccount(id));
  }
  for (const auto& [id, batch] : batches_) {
    if (batch.batch.owner == caller.subject) b.escrow += ledger_.Balance(ledger::EscrowAccount(id));
  }
  return b;
}

JobMoney Core::MoneyOf(const std::string& job_id) const {
  std::shared_lock lock(state_mu_);
  JobMoney m;
  m.escrow = ledger_.Balance(ledger::EscrowAccount(job_id));  // a trial's is its batch's
  for (const ledger::Transaction* tx : ledger_.ForJob(job_id)) {
    if (tx->kind != "charge") continue;
    for (const auto& e : tx->entries) {
      if (IsEscrow(e.account)) m.cost += -e.amount;
    }
  }
  return m;
}

std::vector<UsageLine> Core::Usage(const Caller& caller, int64_t since) const {
  std::shared_lock lock(state_mu_);
  std::vector<UsageLine> out;
  for (const auto& id : job_order_) {
    const Job& job = jobs_.at(id).job;
    if (!Visible(caller, job)) continue;
    for (const auto& a : job.attempts) {
      for (const Piece& p : Pieces(a)) {
        if (p.started_at == 0) continue;
        if (p.finished_at > 0 && p.finished_at < since) continue;
        UsageLine l;
        l.job_id = id;
        l.name = job.spec.name;
        l.attempt = a.attempt;
        l.rank = p.rank;
        l.node_id = p.node_id;
        l.gpus = static_cast<int>(p.gpus->size());
        auto node = nodes_.find(p.node_id);
        if (node != nodes_.end() && !p.gpus->empty()) {
          for (const auto& g : node->second.node.gpus) {
            if (g.index == p.gpus->front()) l.gpu_model = g.model;
          }
        }
        l.started_at = p.started_at;
        l.finished_at = p.finished_at;
        l.rate = p.rate;
        auto c = charged_.find(ChargeKey(id, a.attempt, p.rank));
        l.cost = c == charged_.end() ? 0 : c->second.gross;
        out.push_back(std::move(l));
      }
    }
  }
  return out;
}

std::vector<EarningLine> Core::Earnings(const Caller& caller) const {
  std::shared_lock lock(state_mu_);
  std::map<std::string, EarningLine> lines;  // by charge key
  std::vector<std::string> order;
  const std::string mine =
      caller.scope == Scope::kAdmin ? std::string() : ledger::ProviderAccount(caller.subject);
  for (const auto& tx : ledger_.transactions()) {
    if (tx.kind != "charge") continue;
    Micros gross = 0, fee = 0, earned = 0;
    bool ours = false;
    for (const auto& e : tx.entries) {
      if (e.amount < 0) gross += -e.amount;
      if (e.account == ledger::kPlatform) fee += e.amount;
      if (e.account.rfind("provider:", 0) == 0 && (mine.empty() || e.account == mine)) {
        ours = true;
        earned += e.amount;
      }
    }
    if (!ours) continue;
    std::string key = ChargeKey(tx.job_id, tx.attempt, tx.rank);
    auto [it, fresh] = lines.try_emplace(key);
    if (fresh) order.push_back(key);
    EarningLine& l = it->second;
    l.job_id = tx.job_id;
    l.attempt = tx.attempt;
    l.rank = tx.rank;
    l.node_id = tx.memo;
    l.gross += gross;
    l.fee += fee;
    l.earned += earned;
  }
  std::vector<EarningLine> out;
  for (const auto& key : order) {
    EarningLine l = lines.at(key);
    auto je = jobs_.find(l.job_id);
    if (je != jobs_.end()) {
      for (const auto& a : je->second.job.attempts) {
        if (a.attempt != l.attempt) continue;
        for (const Piece& p : Pieces(a)) {
          if (p.rank != l.rank) continue;
          l.rate = p.rate;
          int64_t end = p.finished_at > 0 ? p.finished_at : clock_->NowMs();
          if (p.started_at > 0) l.gpu_ms = static_cast<int64_t>(p.gpus->size()) * (end - p.started_at);
        }
      }
    }
    out.push_back(l);
  }
  return out;
}

Result<Estimate> Core::EstimateCost(const api::JobSpec& spec, double hours, int64_t reserve_ppm) const {
  if (hours <= 0) hours = static_cast<double>(spec.max_runtime_s) / 3600.0;
  if (hours <= 0) {
    return Status::InvalidArgument("give the hours, or a max_runtime in the spec", "hours");
  }
  if (hours > 24 * 365) return Status::InvalidArgument("must be at most a year", "hours");
  Estimate out;
  {
    std::shared_lock lock(state_mu_);
    out.rate = MaxRateLocked(spec);
  }
  out.gpus = spec.resources.gpu_count * spec.resources.nodes;
  out.hours = hours;
  int64_t gpu_ms = static_cast<int64_t>(std::llround(hours * 3'600'000.0)) * out.gpus;
  out.base = ledger::CostOf(out.rate, gpu_ms);
  out.reserve = ledger::PartOf(out.base, reserve_ppm);
  out.total = out.base + out.reserve;
  // When it would start: a what-if run with the job in the queue.
  Snapshot snap;
  std::map<std::string, sched::AccountShare> shares;
  int64_t now = clock_->NowMs();
  {
    std::shared_lock lock(state_mu_);
    BuildSnapshot(now, snap);
    shares = fair_.Shares(now);
  }
  sched::PendingJob p;
  p.id = "estimate";
  p.account = "estimate";
  p.tier = spec.tier == "spot" ? sched::Tier::kSpot : sched::Tier::kOnDemand;
  p.priority = spec.priority;
  p.nodes = spec.resources.nodes;
  p.gpu_count = spec.resources.gpu_count;
  p.gpu_types = spec.resources.gpu_types;
  p.gpu_memory_mb = spec.resources.gpu_memory_mb;
  p.constraints = spec.constraints;
  p.image = spec.image;
  p.max_price = spec.max_price;
  p.max_runtime_ms = static_cast<int64_t>(hours * 3'600'000.0);
  p.submitted_at = std::numeric_limits<int64_t>::max() / 2;
  p.queued_since = now;
  snap.queue.push_back(p);
  auto starts =
      sched::ExpectedStarts({snap.views, snap.queue, snap.running, shares, sched_config_, now});
  auto it = starts.find("estimate");
  if (it != starts.end()) out.expected_start = it->second;
  return out;
}

Status Core::CheckLedger(ledger::Totals* totals) const {
  std::shared_lock lock(state_mu_);
  if (totals) *totals = ledger_.Summary();
  return ledger_.Check();
}

}  // namespace tide::server

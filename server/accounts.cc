#include "server/accounts.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/token.h"
#include "ledger/cards.h"
#include "scheduler/feasibility.h"

namespace tide::server {

using api::Job;
using api::JobStatus;
using ledger::Micros;

namespace {

bool HasPrefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}
bool IsEscrow(const std::string& account) { return HasPrefix(account, ledger::EscrowAccount("")); }

std::string ChargeKey(const std::string& job_id, int attempt, int rank) {
  return job_id + "#" + std::to_string(attempt) + "#" + std::to_string(rank);
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

std::string NewCardCode() { return ledger::CardCodeFrom(RandomHex(ledger::kCardRandomBytes)); }

// ------------------------------------------------------------------ ledger plumbing

Status Accounts::Apply(ledger::Transaction tx) {
  tx.at = clock_->NowMs();
  TIDE_RETURN_IF_ERROR(ledger_.Apply(tx));
  rows_.push_back({tx.seq, tx.at, tx.kind, tx.job_id, ledger::ToJson(tx).dump()});
  return Status::Ok();
}

void Accounts::TakeRows(std::vector<store::LedgerRow>& out) {
  for (auto& row : rows_) out.push_back(std::move(row));
  rows_.clear();
}

std::string Accounts::CardDoc(const Card& c) {
  return nlohmann::json{{"value", c.value},
                        {"expires_at", c.expires_at},
                        {"created_at", c.created_at},
                        {"redeemed_by", c.redeemed_by},
                        {"redeemed_at", c.redeemed_at}}
      .dump();
}

void Accounts::Recover(const store::Contents& contents, const JobState& jobs) {
  for (const auto& row : contents.settings) {
    if (HasPrefix(row.key, "daily_cap:")) {
      auto cap = ledger::ParseCredits(row.value, "daily_cap");
      if (cap.ok() && *cap > 0) daily_caps_[row.key.substr(10)] = *cap;
      continue;
    }
    if (row.key != "prices") continue;
    auto prices = ledger::PriceListFromJson(nlohmann::json::parse(row.value, nullptr, false));
    if (prices.ok()) {
      prices_ = *prices;
    } else {
      spdlog::error("stored price list unreadable, using none: {}", prices.status().ToString());
    }
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
  const std::string user_prefix = ledger::UserAccount("");
  for (const auto& row : contents.ledger) {
    auto tx = ledger::TransactionFromJson(nlohmann::json::parse(row.doc, nullptr, false));
    Status st = tx.ok() ? ledger_.Replay(*tx) : tx.status();
    if (!st.ok()) {
      spdlog::critical("ledger row {} does not replay: {}", row.seq, st.ToString());
      std::_Exit(71);
    }
    if (tx->kind == "hold") {
      std::string user, escrow;
      for (const auto& e : tx->entries) {
        if (HasPrefix(e.account, user_prefix)) user = e.account.substr(user_prefix.size());
        if (IsEscrow(e.account)) escrow = e.account;
      }
      if (!user.empty() && !escrow.empty()) escrows_[user].insert(escrow);
    }
    if (tx->kind != "charge") continue;
    ChargedPiece& c = charged_[ChargeKey(tx->job_id, tx->attempt, tx->rank)];
    Micros gross = 0;
    for (const auto& e : tx->entries) {
      if (IsEscrow(e.account)) gross += -e.amount;
      if (e.account == ledger::kPlatform) c.fee += e.amount;
    }
    c.gross += gross;
    if (const JobEntry* job = jobs.Find(tx->job_id)) NoteSpent(job->job.owner, tx->at, gross);
  }
  if (Status st = ledger_.Check(); !st.ok()) {
    spdlog::critical("ledger check failed after recovery: {}", st.ToString());
    std::_Exit(71);
  }
  // Escrows that returned everything hold nothing a cap must count.
  for (auto& [user, escrows] : escrows_) {
    std::erase_if(escrows, [&](const std::string& e) { return ledger_.Balance(e) == 0; });
  }
}

// ------------------------------------------------------------------ rates

Micros Accounts::Rate(const api::Node& node, int gpu, const api::JobSpec& spec) const {
  std::string model;
  for (const auto& g : node.gpus) {
    if (g.index == gpu) model = g.model;
  }
  auto ask = node.prices.find(model);
  return ledger::Rate(prices_, model, ask == node.prices.end() ? 0 : ask->second,
                      spec.tier == "spot");
}

Micros Accounts::MaxRate(const api::JobSpec& spec, const JobState& jobs) const {
  const auto& types = spec.resources.gpu_types;
  // The nodes that could ever hold the job (GPU model and memory, GPUs per
  // node, labels, image, host size), whatever their state now: a lost or
  // draining node may take it later. The dearest matching GPU among them
  // that is not above max_price is the worst case.
  sched::PendingJob shape = PendingOfSpec(spec);
  shape.max_price = 0;  // prices are looked at per GPU below
  Micros best = 0;
  bool any = false;
  for (const auto& [id, n] : jobs.nodes()) {
    sched::NodeView v;
    v.labels = n.node.labels;
    v.images = n.node.images;
    v.cpus = v.cpus_free = n.node.cpus;
    v.memory_mb = v.memory_free_mb = n.node.memory_mb;
    for (const auto& g : n.node.gpus) v.gpus.push_back({g.index, g.model, g.memory_mb, true});
    if (sched::UsableGpus(shape, v) < spec.resources.gpu_count) continue;
    int affordable = 0;
    Micros dearest = 0;
    for (const auto& g : n.node.gpus) {
      if (!sched::GpuMatches(shape, {g.index, g.model, g.memory_mb, true})) continue;
      Micros r = Rate(n.node, g.index, spec);
      if (spec.max_price > 0 && r > spec.max_price) continue;  // never placed on it
      ++affordable;
      dearest = std::max(dearest, r);
    }
    if (affordable < spec.resources.gpu_count) continue;
    best = std::max(best, dearest);
    any = true;
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

ledger::Limits Accounts::LimitsOf(const api::JobSpec& spec) const {
  ledger::Limits l;
  l.gpus = static_cast<int64_t>(spec.resources.gpu_count) * spec.resources.nodes;
  l.max_runtime_s = spec.max_runtime_s;
  l.grace_s = spec.grace_s;
  l.retry_times = spec.retry_times;
  l.max_cost = spec.max_cost;
  return l;
}

Micros Accounts::WorstCase(const api::JobSpec& spec, Micros rate) const {
  return ledger::WorstCase(LimitsOf(spec), rate, default_job_cap_);
}

Micros Accounts::AttemptCap(const api::JobSpec& spec, Micros rate) const {
  return ledger::AttemptCap(LimitsOf(spec), rate, default_job_cap_);
}

Micros Accounts::Charged(const Job& job, const api::Attempt* only) const {
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

Micros Accounts::AttemptReserve(const JobEntry& e) const {
  if (e.job.attempts.empty()) return 0;
  const api::Attempt& a = e.job.attempts.back();
  Micros rate = a.rate;
  for (const auto& rank : a.ranks) rate = std::max(rate, rank.rate);
  return std::max<Micros>(0, AttemptCap(e.job.spec, rate) - Charged(e.job, &a));
}

std::string Accounts::EscrowOf(const Job& job) {
  return ledger::EscrowAccount(job.batch.empty() ? job.id : job.batch);
}

Micros Accounts::EscrowBalance(const std::string& escrow_id) const {
  return ledger_.Balance(ledger::EscrowAccount(escrow_id));
}

Micros Accounts::Spendable(const JobEntry& e) const {
  Micros left = ledger_.Balance(EscrowOf(e.job));
  if (!e.job.batch.empty()) {
    // A trial shares its batch's escrow but may not take more than was
    // reckoned for it: its attempt's cap, and in all its max_cost.
    left = std::min(left, AttemptReserve(e));
    if (e.job.spec.max_cost > 0) {
      left = std::min(left, std::max<Micros>(0, e.job.spec.max_cost - Charged(e.job)));
    }
  }
  return left;
}

// ------------------------------------------------------------------ admit

Status Accounts::Admit(const std::string& owner, const std::string& escrow_id, Micros hold,
                       const std::string& what, const std::string& because,
                       const std::string& remedy) {
  if (hold <= 0) return Status::Ok();
  const std::string user = ledger::UserAccount(owner);
  Micros available = ledger_.Balance(user);
  if (available < hold) return ledger::InsufficientFor(what, hold, because, available, remedy);
  auto cap = daily_caps_.find(owner);
  if (cap != daily_caps_.end()) {
    TIDE_RETURN_IF_ERROR(ledger::CheckDailyCap(cap->second, SpentToday(owner, clock_->NowMs()),
                                               Held(owner), hold));
  }
  ledger::Transaction tx;
  tx.kind = "hold";
  tx.job_id = escrow_id;
  tx.entries = {{user, -hold}, {ledger::EscrowAccount(escrow_id), hold}};
  TIDE_RETURN_IF_ERROR(Apply(std::move(tx)));
  escrows_[owner].insert(ledger::EscrowAccount(escrow_id));
  return Status::Ok();
}

Status Accounts::EnsureHeld(const JobEntry& e, Micros rate, const std::string& where) {
  if (!e.job.batch.empty()) return Status::Ok();
  const Micros held = ledger_.Balance(EscrowOf(e.job)) + Charged(e.job);
  const Micros need = WorstCase(e.job.spec, rate) - held;
  if (need <= 0) return Status::Ok();
  return Admit(e.job.owner, e.job.id, need,
               "placing it on " + where + " (" + ledger::FormatCredits(rate) +
                   " credits per GPU-hour)",
               "beyond the " + ledger::FormatCredits(held) +
                   " held when it was submitted, before that node joined",
               "set max_price to keep it to cheaper nodes");
}

Micros Accounts::Held(const std::string& user) const {
  Micros held = 0;
  auto it = escrows_.find(user);
  if (it == escrows_.end()) return 0;
  for (const std::string& escrow : it->second) held += ledger_.Balance(escrow);
  return held;
}

// ------------------------------------------------------------------ meter

void Accounts::NoteSpent(const std::string& user, int64_t at, Micros amount) {
  DaySpend& d = spent_today_[user];
  if (ledger::UtcDay(at) != d.day) d = {ledger::UtcDay(at), 0};
  d.spent += amount;
}

Micros Accounts::SpentToday(const std::string& user, int64_t now) const {
  auto it = spent_today_.find(user);
  if (it == spent_today_.end() || it->second.day != ledger::UtcDay(now)) return 0;
  return it->second.spent;
}

void Accounts::Meter(const JobEntry& e, int64_t until, const JobState& jobs) {
  if (e.job.attempts.empty()) return;
  const api::Attempt& a = e.job.attempts.back();
  if (a.attempt != e.job.attempt) return;
  const std::string escrow = EscrowOf(e.job);
  for (const Piece& p : Pieces(a)) {
    if (p.started_at == 0 || p.rate <= 0) continue;
    const NodeEntry* node = jobs.FindNode(p.node_id);
    // A node the server does not know proves nothing: its time is charged
    // to nobody.
    if (node == nullptr) continue;
    int64_t end = p.finished_at > 0 ? std::min(p.finished_at, until) : until;
    // Time after a lost node's last good heartbeat is charged to nobody.
    if (node->node.state == api::NodeState::kLost) end = std::min(end, node->node.last_heartbeat);
    if (end <= p.started_at) continue;
    const std::string payee =
        node->node.owner.empty() ? ledger::kPlatform : ledger::ProviderAccount(node->node.owner);
    const int64_t gpu_ms = static_cast<int64_t>(p.gpus->size()) * (end - p.started_at);
    ChargedPiece& charged = charged_[ChargeKey(e.job.id, a.attempt, p.rank)];
    ledger::PieceCharge c =
        ledger::ChargePiece(prices_, p.rate, gpu_ms, charged.gross, charged.fee, Spendable(e));
    if (c.due <= 0) continue;
    ledger::Transaction tx;
    tx.kind = "charge";
    tx.job_id = e.job.id;
    tx.attempt = a.attempt;
    tx.rank = p.rank;
    tx.memo = p.node_id;
    tx.entries.push_back({escrow, -c.due});
    if (c.split.provider > 0) tx.entries.push_back({payee, c.split.provider});
    if (c.split.platform > 0) tx.entries.push_back({ledger::kPlatform, c.split.platform});
    Status st = Apply(std::move(tx));
    if (!st.ok()) {
      spdlog::error("charging {} attempt {}: {}", e.job.id, a.attempt, st.ToString());
      continue;
    }
    charged.gross += c.due;
    charged.fee += c.split.platform;
    NoteSpent(e.job.owner, clock_->NowMs(), c.due);
  }
}

std::vector<std::string> Accounts::MeterAll(
    const JobState& jobs, const std::function<bool(const std::string&)>& batch_has_budget) {
  const int64_t now = clock_->NowMs();
  for (const auto& [node_id, n] : jobs.nodes()) {
    // Charged up to the node's last heartbeat: the time it is proven alive.
    for (const auto& [job_id, gpus] : n.leases) {
      const JobEntry& e = jobs.At(job_id);
      if (e.job.node_id != node_id) continue;  // a gang once, from rank 0's node
      Meter(e, std::min(now, n.node.last_heartbeat), jobs);
    }
  }
  // Budget: a job whose escrow cannot pay for its grace period gets the
  // notice now, so it stops within what it may cost.
  std::vector<std::string> stop;
  for (const auto& [node_id, n] : jobs.nodes()) {
    for (const auto& [job_id, gpus] : n.leases) {
      const JobEntry& e = jobs.At(job_id);
      if (e.job.node_id != node_id || e.job.status != JobStatus::kRunning ||
          !StopReason(e.job).empty() || e.job.attempts.empty()) {
        continue;
      }
      const auto& spec = e.job.spec;
      Micros burn = 0;  // per hour, over all ranks
      for (const Piece& p : Pieces(e.job.attempts.back())) {
        if (p.finished_at > 0) continue;
        burn += p.rate * static_cast<int64_t>(p.gpus->size());
      }
      if (burn <= 0) continue;
      // A job bounded by max_runtime alone is stopped by its timeout.
      Micros runtime_cap = spec.max_runtime_s > 0
                               ? ledger::CostOf(burn, (spec.max_runtime_s + spec.grace_s) * 1000)
                               : -1;
      bool budget_bound = runtime_cap < 0 || (spec.max_cost > 0 && spec.max_cost < runtime_cap);
      Micros grace_cost = ledger::CostOf(burn, std::max<int64_t>(spec.grace_s, 1) * 1000 + 2'000);
      Micros left = Spendable(e);
      // A trial also stops when its batch's budget runs out (the gate
      // makes that rare: it starts only trials the budget can pay for).
      bool batch_dry = !e.job.batch.empty() && batch_has_budget(e.job.batch) &&
                       ledger_.Balance(EscrowOf(e.job)) <= grace_cost;
      auto cap = daily_caps_.find(e.job.owner);
      bool over_day = cap != daily_caps_.end() &&
                      SpentToday(e.job.owner, now) + grace_cost >= cap->second;
      if (!over_day && !batch_dry && (!budget_bound || left > grace_cost)) continue;
      spdlog::info("job {} reached {} ({} credits left of its escrow); stopping it", job_id,
                   over_day ? "its account's daily cap" : "its budget", ledger::FormatCredits(left));
      stop.push_back(job_id);
    }
  }
  return stop;
}

// ------------------------------------------------------------------ release

void Accounts::Release(const std::string& escrow_id, const std::string& owner) {
  const std::string escrow = ledger::EscrowAccount(escrow_id);
  Micros left = ledger_.Balance(escrow);
  if (left > 0) {
    ledger::Transaction tx;
    tx.kind = "release";
    tx.job_id = escrow_id;
    tx.entries = {{escrow, -left}, {ledger::UserAccount(owner), left}};
    Status st = Apply(std::move(tx));
    if (!st.ok()) {
      spdlog::error("releasing the escrow of {}: {}", escrow_id, st.ToString());
      return;
    }
  }
  auto it = escrows_.find(owner);
  if (it != escrows_.end()) it->second.erase(escrow);
}

// ------------------------------------------------------------------ cards, prices, caps

Result<Micros> Accounts::Redeem(const std::string& user, const std::string& code,
                                store::WriteBatch& batch) {
  auto canonical = ledger::CanonicalCardCode(code);
  if (!canonical.ok()) return canonical.status();
  const std::string hash = ledger::CardHash(*canonical);
  auto it = cards_.find(hash);
  if (it == cards_.end()) return Status::NotFound("no such card (check the code)");
  Card& card = it->second;
  const int64_t now = clock_->NowMs();
  if (!card.redeemed_by.empty()) return Status::Conflict("this card was already redeemed");
  if (card.expires_at > 0 && now >= card.expires_at) return Status::Conflict("this card has expired");
  ledger::Transaction tx;
  tx.kind = "redeem";
  tx.memo = "card " + hash.substr(0, 12);
  tx.entries = {{ledger::kIssued, -card.value}, {ledger::UserAccount(user), card.value}};
  TIDE_RETURN_IF_ERROR(Apply(std::move(tx)));
  card.redeemed_by = user;
  card.redeemed_at = now;
  batch.cards.push_back({hash, CardDoc(card)});
  return card.value;
}

Status Accounts::Mint(const std::vector<std::string>& codes, Micros value, int64_t expires_at,
                      store::WriteBatch& batch) {
  const int64_t now = clock_->NowMs();
  if (expires_at > 0 && expires_at <= now) return Status::InvalidArgument("is in the past", "expires");
  for (const auto& code : codes) {
    std::string hash = ledger::CardHash(*ledger::CanonicalCardCode(code));
    Card c{value, expires_at, now, "", 0};
    cards_[hash] = c;
    batch.cards.push_back({hash, CardDoc(c)});
  }
  spdlog::info("minted {} cards of {} credits", codes.size(), ledger::FormatCredits(value));
  return Status::Ok();
}

void Accounts::SetPrices(const ledger::PriceList& prices, store::WriteBatch& batch) {
  prices_ = prices;
  batch.settings.push_back({"prices", ledger::ToJson(prices).dump()});
}

void Accounts::SetDailyCap(const std::string& user, Micros cap, store::WriteBatch& batch) {
  if (cap > 0) {
    daily_caps_[user] = cap;
  } else {
    daily_caps_.erase(user);
  }
  batch.settings.push_back({"daily_cap:" + user, ledger::FormatCredits(cap)});
}

Micros Accounts::DailyCap(const std::string& user) const {
  auto it = daily_caps_.find(user);
  return it == daily_caps_.end() ? 0 : it->second;
}

// ------------------------------------------------------------------ views

BalanceInfo Accounts::Balance(const std::string& user) const {
  return {ledger_.Balance(ledger::UserAccount(user)), Held(user), DailyCap(user),
          SpentToday(user, clock_->NowMs())};
}

JobMoney Accounts::MoneyOf(const std::string& job_id) const {
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

std::vector<UsageLine> Accounts::Usage(const JobState& jobs,
                                       const std::function<bool(const Job&)>& visible,
                                       int64_t since) const {
  std::vector<UsageLine> out;
  for (const auto& id : jobs.order()) {
    const Job& job = jobs.At(id).job;
    if (!visible(job)) continue;
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
        const NodeEntry* node = jobs.FindNode(p.node_id);
        if (node != nullptr && !p.gpus->empty()) {
          for (const auto& g : node->node.gpus) {
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

std::vector<EarningLine> Accounts::Earnings(const JobState& jobs, const std::string& provider) const {
  std::map<std::string, EarningLine> lines;  // by charge key
  std::vector<std::string> order;
  const std::string mine = provider.empty() ? std::string() : ledger::ProviderAccount(provider);
  const std::string any_provider = ledger::ProviderAccount("");
  for (const auto& tx : ledger_.transactions()) {
    if (tx.kind != "charge") continue;
    Micros gross = 0, fee = 0, earned = 0;
    bool ours = false;
    for (const auto& e : tx.entries) {
      if (e.amount < 0) gross += -e.amount;
      if (e.account == ledger::kPlatform) fee += e.amount;
      if (HasPrefix(e.account, any_provider) && (mine.empty() || e.account == mine)) {
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
    if (const JobEntry* je = jobs.Find(l.job_id)) {
      for (const auto& a : je->job.attempts) {
        if (a.attempt != l.attempt) continue;
        for (const Piece& p : Pieces(a)) {
          if (p.rank != l.rank) continue;
          l.rate = p.rate;
          l.started_at = p.started_at;
          l.finished_at = p.finished_at;
          int64_t end = p.finished_at > 0 ? p.finished_at : clock_->NowMs();
          if (p.started_at > 0) l.gpu_ms = static_cast<int64_t>(p.gpus->size()) * (end - p.started_at);
        }
      }
    }
    out.push_back(l);
  }
  return out;
}

}  // namespace tide::server

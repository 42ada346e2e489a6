#include "server/audit.h"

#include <algorithm>
#include <utility>

#include "server/core.h"

namespace tide::server {

nlohmann::json ToJson(const AuditEntry& e) {
  return {{"seq", e.seq},       {"at", e.at},         {"actor", e.actor},
          {"token", e.token},   {"address", e.address}, {"action", e.action},
          {"target", e.target}, {"detail", e.detail}};
}

void Audit::Load(const std::vector<store::AuditRow>& rows) {
  entries_.clear();
  for (const store::AuditRow& r : rows) {
    AuditEntry e{r.seq, r.at, r.actor, r.token, r.address, r.action, r.target};
    e.detail = nlohmann::json::parse(r.detail, nullptr, /*allow_exceptions=*/false);
    if (e.detail.is_discarded()) e.detail = nlohmann::json{{"text", r.detail}};
    entries_.push_back(std::move(e));
  }
}

void Audit::Record(store::WriteBatch& batch, int64_t now, const Caller& by, std::string action,
                   std::string target, nlohmann::json detail) {
  AuditEntry e;
  e.seq = last_seq() + 1;
  e.at = std::max(now, entries_.empty() ? now : entries_.back().at);  // the log stays in time order
  e.actor = by.subject;
  e.token = by.token_id;
  e.address = by.address;
  e.action = std::move(action);
  e.target = std::move(target);
  e.detail = std::move(detail);
  batch.audit.push_back(store::AuditRow{e.seq, e.at, e.actor, e.token, e.address, e.action,
                                        e.target, e.detail.dump()});
  entries_.push_back(std::move(e));
}

std::vector<AuditEntry> Audit::List(int64_t since, size_t limit) const {
  auto first = std::lower_bound(entries_.begin(), entries_.end(), since,
                                [](const AuditEntry& e, int64_t t) { return e.at < t; });
  size_t n = static_cast<size_t>(entries_.end() - first);
  if (n > limit) first += static_cast<std::ptrdiff_t>(n - limit);
  return std::vector<AuditEntry>(first, entries_.end());
}

}  // namespace tide::server

// Audit: the room of the audit log — every admin action, every movement of
// money a person asks for, and every change to a token: who (the user or
// "admin", and the token that called), what, when, and from which address.
//
// Entries are written in the same transaction as the action they record,
// so an action is never durable without its entry; the store keeps them
// append-only (its table refuses UPDATE and DELETE). Details carry the
// action's parameters, never a secret: a token is named by its id, a card
// by the last four characters of its code.
//
// Thread safety: like every room, guarded by the core's state lock.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace tide::server {

struct Caller;

struct AuditEntry {
  int64_t seq = 0;
  int64_t at = 0;  // unix ms
  std::string actor;    // user id, "admin", "server"
  std::string token;    // token id that called; "" if none
  std::string address;  // the caller's IP address; "" if not over the network
  std::string action;   // "user.create", "token.revoke", ...
  std::string target;
  nlohmann::json detail = nlohmann::json::object();
};

nlohmann::json ToJson(const AuditEntry& e);

class Audit {
 public:
  // Recovery: the stored log, by seq. An unreadable detail is kept as text.
  void Load(const std::vector<store::AuditRow>& rows);

  // Appends an entry by `by` to the log and its row to `batch`. Call it as
  // a command's last step, once nothing can fail: a failed command's rows
  // are not written.
  void Record(store::WriteBatch& batch, int64_t now, const Caller& by, std::string action,
              std::string target, nlohmann::json detail = nlohmann::json::object());

  // Entries at or after `since` (unix ms), oldest first; at most `limit`,
  // the newest of them when there are more.
  std::vector<AuditEntry> List(int64_t since, size_t limit) const;
  int64_t last_seq() const { return entries_.empty() ? 0 : entries_.back().seq; }

 private:
  std::deque<AuditEntry> entries_;  // by seq
};

}  // namespace tide::server

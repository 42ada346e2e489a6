// WriteBatch: the rows of one group commit (see store.h).
#include <iterator>
#include <utility>
#include <vector>

#include "store/store.h"

namespace tide::store {
namespace {

// Moves the elements of `from` to the end of `to`, leaving `from` empty.
template <typename T>
void MoveAppend(std::vector<T>& to, std::vector<T>& from) {
  if (to.empty()) {
    to = std::move(from);
  } else {
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  }
  from.clear();
}

}  // namespace

bool WriteBatch::empty() const {
  return jobs.empty() && nodes.empty() && users.empty() && tokens.empty() &&
         delete_tokens.empty() && idempotency.empty() && ledger.empty() && cards.empty() &&
         settings.empty() && batches.empty() && audit.empty() && secrets.empty() &&
         delete_secrets.empty();
}

void WriteBatch::Append(WriteBatch&& other) {
  if (&other == this) return;
  MoveAppend(jobs, other.jobs);
  MoveAppend(nodes, other.nodes);
  MoveAppend(users, other.users);
  MoveAppend(tokens, other.tokens);
  MoveAppend(delete_tokens, other.delete_tokens);
  MoveAppend(idempotency, other.idempotency);
  MoveAppend(ledger, other.ledger);
  MoveAppend(cards, other.cards);
  MoveAppend(settings, other.settings);
  MoveAppend(batches, other.batches);
  MoveAppend(audit, other.audit);
  MoveAppend(secrets, other.secrets);
  MoveAppend(delete_secrets, other.delete_secrets);
}

}  // namespace tide::store

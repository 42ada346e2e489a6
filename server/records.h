// The server's records in the store: how a job and a node are written to
// their rows and read back at recovery.
//
// A record is the server's, not the wire's: it carries what only the
// server needs (a job's control flags, a node's history) and is read back
// leniently, by version, so that a store written by an older server always
// opens: an unknown field is ignored, a missing one takes its default, and
// nothing a client would be refused for today stops a recovery.
#pragma once

#include <string>

#include "api/types.h"
#include "common/status.h"
#include "server/job_state.h"

namespace tide::server {

// The version JobRecordDoc and NodeRecordDoc write.
inline constexpr int kRecordVersion = 1;

std::string JobRecordDoc(const api::Job& job);
Result<api::Job> JobRecordFromDoc(const std::string& doc);

struct NodeRecord {
  api::Node node;
  NodeHistory history;
};
// Telemetry (utilisation, memory in use, temperature) is not written.
std::string NodeRecordDoc(const api::Node& node, const NodeHistory& history);
Result<NodeRecord> NodeRecordFromDoc(const std::string& doc);

}  // namespace tide::server

// Code archives: a directory packed as .tar.gz by the CLI, checked by the
// server on upload, unpacked into a job's work directory by the agent.
//
// Only regular files and directories are allowed. Symlinks, hard links,
// devices, absolute names and ".." are refused, so an archive can never
// write outside the directory it is unpacked into.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tide {

struct ArchiveLimits {
  int64_t max_unpacked_bytes = 4LL << 30;  // 4 GiB
  int64_t max_entries = 200'000;
};

struct PackOptions {
  // Leave out symlinks and special files instead of refusing them (what a
  // job left in its checkpoint directory).
  bool skip_other_files = false;
  // Refuse to build an archive larger than this.
  int64_t max_bytes = INT64_MAX;
};

// Packs the regular files and directories under `dir` (recursively) into a
// gzip-compressed tar held in memory. Symlinks and special files in the
// source are refused (or left out, see PackOptions); files are opened
// without following links.
Result<std::string> PackDirectory(const std::string& dir, const PackOptions& options = {});

// Opens the regular file `rel` ("a/b.txt") below the directory `dir_fd` for
// reading and sets *size: never through a link at any level, so a
// directory swapped for a link while a tree is read is refused, not
// followed; a FIFO or device in its place is refused without blocking.
Result<int> OpenRegularBeneath(int dir_fd, const std::string& rel, int64_t* size);

// Checks every entry of `archive` without writing anything. The error names
// the first bad entry.
Status ValidateArchive(const std::string& archive, const ArchiveLimits& limits = {});

// Unpacks into `dest` (created if missing). Validates first, so a bad archive
// leaves nothing behind.
Status UnpackArchive(const std::string& archive, const std::string& dest,
                     const ArchiveLimits& limits = {});

}  // namespace tide

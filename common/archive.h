// Code archives: a directory packed as .tar.gz by the CLI, checked by the
// server on upload, unpacked into a job's work directory by the agent.
//
// Only regular files and directories are allowed. Symlinks, hard links,
// devices, absolute names and ".." are refused, so an archive can never
// write outside the directory it is unpacked into.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
  // Leave out what this says to, by its path below the directory ("a/b.txt")
  // and whether it is a directory (whose contents are then not visited).
  std::function<bool(const std::string& rel, bool is_dir)> exclude;
  // Files to add, by path below the directory: written mode 0755, after
  // the directory's own; a path the directory also holds is refused.
  std::vector<std::pair<std::string, std::string>> extra_files;
  // With skip_other_files: receives the paths left out for being links or
  // special files.
  std::vector<std::string>* skipped = nullptr;
};

// Packs the regular files and directories under `dir` (recursively) into a
// gzip-compressed tar held in memory. Symlinks and special files in the
// source are refused (or left out, see PackOptions); files are opened
// without following links. `options.exclude` leaves entries out,
// `options.extra_files` adds some.
Result<std::string> PackDirectory(const std::string& dir, const PackOptions& options = {});

// Writes an uncompressed tar of `files` (path below the archive's root, and
// size) to `sink` piece by piece as it goes, each file's bytes read by
// `read` when its turn comes: an archive of any size passes through in
// bounded memory. A file whose size changed, or that cannot be read, ends
// the archive early with an error; false from `sink` stops it (the reader
// went away).
Status StreamTar(const std::vector<std::pair<std::string, int64_t>>& files,
                 const std::function<Result<std::string>(const std::string& path)>& read,
                 const std::function<bool(std::string_view)>& sink);

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

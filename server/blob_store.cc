#include "server/blob_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/paths.h"
#include "common/token.h"

namespace tide::server {
namespace fs = std::filesystem;

BlobStore::BlobStore(std::string dir) : dir_(std::move(dir)) {}

Status BlobStore::Init() {
  std::error_code ec;
  for (const char* sub : {"logs", "metrics", "outputs", "code", "checkpoints"}) {
    fs::create_directories(fs::path(dir_) / sub, ec);
    if (ec) return Status::Internal("create " + dir_ + "/" + sub + ": " + ec.message());
  }
  return Status::Ok();
}

std::string BlobStore::LogPath(const std::string& job, int attempt, int rank,
                               Stream stream) const {
  std::string name = std::to_string(attempt);
  if (rank > 0) name += ".rank" + std::to_string(rank);
  if (stream == Stream::kMetrics) return dir_ + "/metrics/" + job + "/" + name + ".jsonl";
  return dir_ + "/logs/" + job + "/" + name + ".log";
}

std::string BlobStore::CheckpointPath(const std::string& job, int rank) const {
  return dir_ + "/checkpoints/" + job + "/rank" + std::to_string(rank) + ".tar.gz";
}

int64_t BlobStore::LogSize(const std::string& job, int attempt, int rank, Stream stream) {
  struct stat st;
  if (::stat(LogPath(job, attempt, rank, stream).c_str(), &st) != 0) return 0;
  return st.st_size;
}

Status BlobStore::AppendLog(const std::string& job, int attempt, int rank, int64_t offset,
                            std::string_view data, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t size = LogSize(job, attempt, rank, stream);
  if (offset + static_cast<int64_t>(data.size()) <= size) return Status::Ok();  // a retry
  if (offset > size || offset < 0) {
    return Status::Conflict("log offset " + std::to_string(offset) + " but " +
                            std::to_string(size) + " bytes stored");
  }
  data.remove_prefix(static_cast<size_t>(size - offset));  // overlap with what we have
  std::string path = LogPath(job, attempt, rank, stream);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Internal("open " + path + ": " + strerror(errno));
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return Status::Internal("write " + path + ": " + strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  return Status::Ok();
}

Result<std::string> BlobStore::ReadLog(const std::string& job, int attempt, int rank,
                                       int64_t offset, int64_t max, Stream stream) {
  std::string path = LogPath(job, attempt, rank, stream);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string();
  std::string out;
  char buf[65536];
  int64_t pos = offset;
  while (static_cast<int64_t>(out.size()) < max) {
    size_t want = std::min<int64_t>(sizeof(buf), max - static_cast<int64_t>(out.size()));
    ssize_t n = ::pread(fd, buf, want, pos);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    pos += n;
  }
  ::close(fd);
  return out;
}

static std::string Staged(const std::string& path, int attempt) {
  return path + ".attempt" + std::to_string(attempt) + ".staged";
}

Status BlobStore::StageCheckpoint(const std::string& job, int rank, int attempt,
                                  std::string_view archive) {
  return WriteFileAtomic(Staged(CheckpointPath(job, rank), attempt), archive);
}

Status BlobStore::CommitCheckpoint(const std::string& job, int rank, int attempt) {
  const std::string path = CheckpointPath(job, rank);
  if (::rename(Staged(path, attempt).c_str(), path.c_str()) != 0) {
    return Status::Internal("commit checkpoint " + path + ": " + strerror(errno));
  }
  return Status::Ok();
}

void BlobStore::DiscardCheckpoint(const std::string& job, int rank, int attempt) {
  ::unlink(Staged(CheckpointPath(job, rank), attempt).c_str());
}

Result<std::string> BlobStore::GetCheckpoint(const std::string& job, int rank) {
  std::string path = CheckpointPath(job, rank);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return Status::NotFound("job " + job + " has no checkpoint for rank " + std::to_string(rank));
  }
  return ReadFile(path);
}

Status BlobStore::PutOutput(const std::string& job, const std::string& rel_path,
                            std::string_view data) {
  auto clean = CleanRelativePath(rel_path);
  if (!clean.ok()) return Status::InvalidArgument(clean.status().message(), "path");
  // A later attempt may lay files out differently ("a" was a file, now
  // "a/b" is): the newer upload wins over what is in its way.
  fs::path root = fs::path(dir_) / "outputs" / job;
  fs::path target = root / *clean;
  std::error_code ec;
  for (fs::path p = target.parent_path(); p != root && p.has_relative_path(); p = p.parent_path()) {
    if (fs::exists(fs::symlink_status(p, ec)) && !fs::is_directory(fs::symlink_status(p, ec))) {
      fs::remove(p, ec);
    }
  }
  if (fs::is_directory(fs::symlink_status(target, ec))) fs::remove_all(target, ec);
  return WriteFileAtomic(target.string(), data);
}

Result<std::vector<BlobFile>> BlobStore::ListOutputs(const std::string& job) {
  std::vector<BlobFile> out;
  fs::path root = fs::path(dir_) / "outputs" / job;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::string rel = fs::relative(it->path(), root).generic_string();
    if (rel.find(".tmp-") != std::string::npos) continue;  // a write in progress
    out.push_back({rel, static_cast<int64_t>(it->file_size())});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.path < b.path; });
  return out;
}

Result<std::string> BlobStore::GetOutput(const std::string& job, const std::string& rel_path) {
  auto clean = CleanRelativePath(rel_path);
  if (!clean.ok()) return Status::InvalidArgument(clean.status().message(), "path");
  std::string path = dir_ + "/outputs/" + job + "/" + *clean;
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(path, ec))) {
    return Status::NotFound("no output " + *clean);
  }
  return ReadFile(path);
}

Result<std::string> BlobStore::PutCode(const std::string& owner, const std::string& archive) {
  std::string id = Sha256Hex(archive);
  std::string path = dir_ + "/code/" + owner + "/" + id + ".tar.gz";
  if (HasCode(owner, id)) return id;
  TIDE_RETURN_IF_ERROR(WriteFileAtomic(path, archive));
  return id;
}

bool BlobStore::HasCode(const std::string& owner, const std::string& id) {
  std::error_code ec;
  return fs::is_regular_file(dir_ + "/code/" + owner + "/" + id + ".tar.gz", ec);
}

Result<std::string> BlobStore::GetCode(const std::string& owner, const std::string& id) {
  if (!HasCode(owner, id)) return Status::NotFound("no code archive " + id);
  return ReadFile(dir_ + "/code/" + owner + "/" + id + ".tar.gz");
}

Status BlobStore::DeleteJob(const std::string& job) {
  if (job.empty() || job.find('/') != std::string::npos || job[0] == '.') {
    return Status::InvalidArgument("bad job id \"" + job + "\"");
  }
  for (const char* sub : {"logs", "metrics", "checkpoints", "outputs"}) {
    std::error_code ec;
    fs::remove_all(fs::path(dir_) / sub / job, ec);
    if (ec) return Status::Internal("delete " + dir_ + "/" + sub + "/" + job + ": " + ec.message());
  }
  return Status::Ok();
}

Status BlobStore::DeleteCode(const std::string& owner, const std::string& id) {
  std::error_code ec;
  fs::remove(dir_ + "/code/" + owner + "/" + id + ".tar.gz", ec);
  if (ec) return Status::Internal("delete code archive " + id + ": " + ec.message());
  return Status::Ok();
}

}  // namespace tide::server

#include "common/paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/token.h"

namespace tide {

Result<std::string> CleanRelativePath(std::string_view path) {
  if (path.empty()) return Status::InvalidArgument("empty path");
  if (path.size() > 1024) return Status::InvalidArgument("path longer than 1024 bytes");
  if (path.front() == '/') {
    return Status::InvalidArgument("absolute path \"" + std::string(path) + "\" not allowed");
  }
  for (char c : path) {
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Status::InvalidArgument("path contains a backslash or control character");
    }
  }
  std::string out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view seg = path.substr(start, end - start);
    if (seg == "..") {
      return Status::InvalidArgument("path \"" + std::string(path) + "\" escapes its directory");
    }
    if (!seg.empty() && seg != ".") {
      if (!out.empty()) out += '/';
      out += seg;
    }
    start = end + 1;
  }
  if (out.empty()) return Status::InvalidArgument("path \"" + std::string(path) + "\" names no file");
  return out;
}

Status WriteFileAtomic(const std::string& path, std::string_view data, int mode) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::string tmp = path + ".tmp-" + RandomHex(4);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::Internal("open " + tmp + ": " + strerror(errno));
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::Internal("write " + tmp + ": " + strerror(e));
    }
    off += static_cast<size_t>(n);
  }
  // open() applies the umask; the caller asked for exactly `mode`.
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0 || ::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::Internal("fsync " + tmp + ": " + strerror(e));
  }
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return Status::Internal("close " + tmp + ": " + strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return Status::Internal("rename " + tmp + ": " + strerror(e));
  }
  // The rename is durable only once the directory entry is on disk.
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tide

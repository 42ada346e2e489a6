#include "common/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <vector>

#include "common/paths.h"

namespace tide {
namespace fs = std::filesystem;

namespace {

struct ReaderDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct WriterDeleter {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
using Reader = std::unique_ptr<struct archive, ReaderDeleter>;
using Writer = std::unique_ptr<struct archive, WriterDeleter>;

// libarchive may fail without setting a message (NULL).
std::string ErrorString(struct archive* a) {
  const char* msg = archive_error_string(a);
  return msg ? msg : "unknown libarchive error";
}

Result<Reader> OpenReader(const std::string& data) {
  Reader r(archive_read_new());
  archive_read_support_filter_gzip(r.get());
  archive_read_support_filter_none(r.get());
  archive_read_support_format_tar(r.get());
  if (archive_read_open_memory(r.get(), data.data(), data.size()) != ARCHIVE_OK) {
    return Status::InvalidArgument(std::string("not a tar.gz archive: ") +
                                   ErrorString(r.get()));
  }
  return r;
}

// Walks every header; `visit` gets the cleaned path and the entry.
template <typename Visit>
Status ForEachEntry(const std::string& data, const ArchiveLimits& limits, Visit visit) {
  auto reader = OpenReader(data);
  if (!reader.ok()) return reader.status();
  struct archive* a = reader->get();
  int64_t total = 0, count = 0;
  struct archive_entry* entry;
  while (true) {
    int rc = archive_read_next_header(a, &entry);
    if (rc == ARCHIVE_EOF) break;
    // ARCHIVE_WARN is not damage: e.g. a UTF-8 name that the process locale
    // cannot represent (the raw name is still returned and checked below).
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
      return Status::InvalidArgument(std::string("corrupt archive: ") + ErrorString(a));
    }
    const char* raw = archive_entry_pathname(entry);
    std::string name = raw ? raw : "";
    if (++count > limits.max_entries) {
      return Status::InvalidArgument("archive has more than " +
                                     std::to_string(limits.max_entries) + " entries");
    }
    mode_t type = archive_entry_filetype(entry);
    if (archive_entry_hardlink(entry) != nullptr) {
      return Status::InvalidArgument("archive entry \"" + name + "\" is a hard link");
    }
    if (type != AE_IFREG && type != AE_IFDIR) {
      return Status::InvalidArgument("archive entry \"" + name +
                                     "\" is not a regular file or directory (symlinks and "
                                     "devices are not allowed)");
    }
    if (!name.empty() && name.back() == '/') name.pop_back();
    if (name == "." || name.empty()) continue;
    auto clean = CleanRelativePath(name);
    if (!clean.ok()) {
      return Status::InvalidArgument("archive entry \"" + name + "\": " + clean.status().message());
    }
    total += archive_entry_size(entry);
    if (total > limits.max_unpacked_bytes) {
      return Status::InvalidArgument("archive unpacks to more than " +
                                     std::to_string(limits.max_unpacked_bytes) + " bytes");
    }
    TIDE_RETURN_IF_ERROR(visit(a, entry, *clean, type));
  }
  return Status::Ok();
}

}  // namespace

Result<int> OpenRegularBeneath(int root_fd, const std::string& rel, int64_t* size) {
  int fd = ::dup(root_fd);
  if (fd < 0) return Status::Internal(std::string("dup: ") + std::strerror(errno));
  // Each component from the directory opened before it: a directory on the
  // way (O_PATH), then the file itself; never a link.
  for (size_t start = 0;;) {
    const size_t slash = rel.find('/', start);
    const bool last = slash == std::string::npos;
    const std::string part = rel.substr(start, last ? std::string::npos : slash - start);
    if (part.empty() || part == "." || part == "..") {
      ::close(fd);
      return Status::InvalidArgument("not a path below the directory: " + rel);
    }
    const int flags = last ? O_RDONLY | O_NONBLOCK : O_PATH | O_DIRECTORY;
    const int next = ::openat(fd, part.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    ::close(fd);
    if (next < 0) return Status::NotFound("cannot read " + rel + ": " + std::strerror(err));
    fd = next;
    if (last) break;
    start = slash + 1;
  }
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(rel + " is not a regular file");
  }
  *size = sb.st_size;
  return fd;
}

Status StreamTar(const std::vector<std::pair<std::string, int64_t>>& files,
                 const std::function<Result<std::string>(const std::string& path)>& read,
                 const std::function<bool(std::string_view)>& sink) {
  struct Out {
    const std::function<bool(std::string_view)>* sink;
    bool gone = false;
  } out{&sink};
  Writer w(archive_write_new());
  archive_write_set_format_pax_restricted(w.get());
  archive_write_set_bytes_in_last_block(w.get(), 1);  // no padding past the end
  auto write_cb = [](struct archive*, void* client, const void* buf, size_t n) -> la_ssize_t {
    auto* o = static_cast<Out*>(client);
    if (o->gone || !(*o->sink)(std::string_view(static_cast<const char*>(buf), n))) {
      o->gone = true;
      return -1;
    }
    return static_cast<la_ssize_t>(n);
  };
  if (archive_write_open(w.get(), &out, nullptr, write_cb, nullptr) != ARCHIVE_OK) {
    return Status::Internal(std::string("archive: ") + ErrorString(w.get()));
  }
  for (const auto& [path, size] : files) {
    auto data = read(path);
    if (!data.ok()) return data.status();
    if (static_cast<int64_t>(data->size()) != size) {
      return Status::Conflict(path + " changed while the archive was written");
    }
    std::unique_ptr<struct archive_entry, decltype(&archive_entry_free)> e(archive_entry_new(),
                                                                          archive_entry_free);
    archive_entry_set_pathname(e.get(), path.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), 0644);
    archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
    if (archive_write_header(w.get(), e.get()) < ARCHIVE_WARN ||
        archive_write_data(w.get(), data->data(), data->size()) < 0) {
      if (out.gone) return Status::Ok();
      return Status::Internal("archive " + path + ": " + ErrorString(w.get()));
    }
  }
  if (archive_write_close(w.get()) != ARCHIVE_OK && !out.gone) {
    return Status::Internal(std::string("archive: ") + ErrorString(w.get()));
  }
  return Status::Ok();
}

Result<std::string> PackDirectory(const std::string& dir, const PackOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::InvalidArgument(dir + " is not a directory");
  std::string out;
  Writer w(archive_write_new());
  archive_write_add_filter_gzip(w.get());
  archive_write_set_format_pax_restricted(w.get());
  auto write_cb = [](struct archive*, void* client, const void* buf, size_t n) -> la_ssize_t {
    static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
  };
  if (archive_write_open(w.get(), &out, nullptr, write_cb, nullptr) != ARCHIVE_OK) {
    return Status::Internal(std::string("archive: ") + ErrorString(w.get()));
  }
  const int root_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root_fd < 0) return Status::InvalidArgument("cannot open " + dir + ": " + std::strerror(errno));
  struct CloseRoot {
    int fd;
    ~CloseRoot() { ::close(fd); }
  } close_root{root_fd};
  std::vector<fs::path> paths;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (options.exclude) {
      const bool is_dir = fs::is_directory(it->symlink_status());
      if (options.exclude(it->path().lexically_relative(dir).generic_string(), is_dir)) {
        if (is_dir) it.disable_recursion_pending();
        continue;
      }
    }
    paths.push_back(it->path());
  }
  if (ec) return Status::Internal("walk " + dir + ": " + ec.message());
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    // Lexically: a symlink is named as itself, not as what it points to.
    std::string rel = p.lexically_relative(dir).generic_string();
    auto st = fs::symlink_status(p);
    std::unique_ptr<struct archive_entry, void (*)(struct archive_entry*)> e(archive_entry_new(),
                                                                            archive_entry_free);
    archive_entry_set_pathname(e.get(), rel.c_str());
    const bool skip = options.skip_other_files;
    auto skipped = [&] {
      if (options.skipped != nullptr) options.skipped->push_back(rel);
    };
    if (fs::is_symlink(st)) {
      if (skip) {
        skipped();
        continue;
      }
      return Status::InvalidArgument("code directory contains a symlink: " + rel);
    } else if (fs::is_directory(st)) {
      archive_entry_set_filetype(e.get(), AE_IFDIR);
      archive_entry_set_perm(e.get(), 0755);
      if (archive_write_header(w.get(), e.get()) < ARCHIVE_WARN) {
        return Status::Internal("archive " + rel + ": " + ErrorString(w.get()));
      }
    } else if (fs::is_regular_file(st)) {
      int64_t size = 0;
      auto fd = OpenRegularBeneath(root_fd, rel, &size);
      if (!fd.ok()) {
        if (options.skip_other_files) continue;  // replaced by a link since the walk
        return fd.status();
      }
      // Compressed output never exceeds what is read by much: refuse
      // before reading what could not fit anyway.
      if (size > options.max_bytes || static_cast<int64_t>(out.size()) > options.max_bytes - size / 2) {
        ::close(*fd);
        return Status::TooLarge(dir + " packs to more than " +
                                std::to_string(options.max_bytes >> 20) + " MiB");
      }
      archive_entry_set_filetype(e.get(), AE_IFREG);
      bool exec = (static_cast<unsigned>(st.permissions()) & 0100) != 0;
      archive_entry_set_perm(e.get(), exec ? 0755 : 0644);
      archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
      if (archive_write_header(w.get(), e.get()) < ARCHIVE_WARN) {
        ::close(*fd);
        return Status::Internal("archive " + rel + ": " + ErrorString(w.get()));
      }
      // In pieces, never more than the size the header promised.
      std::string buf(1 << 20, '\0');
      int64_t left = size;
      while (left > 0) {
        ssize_t n = ::read(*fd, buf.data(), static_cast<size_t>(std::min<int64_t>(left, buf.size())));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // shrank while read: the rest is padded by libarchive
        if (archive_write_data(w.get(), buf.data(), static_cast<size_t>(n)) < 0) {
          ::close(*fd);
          return Status::Internal("archive " + rel + ": " + ErrorString(w.get()));
        }
        left -= n;
      }
      ::close(*fd);
    } else {
      if (skip) {
        skipped();
        continue;
      }
      return Status::InvalidArgument("code directory contains a special file: " + rel);
    }
    if (static_cast<int64_t>(out.size()) > options.max_bytes) {
      return Status::TooLarge(dir + " packs to more than " + std::to_string(options.max_bytes >> 20) +
                              " MiB");
    }
  }
  for (const auto& [rel, content] : options.extra_files) {
    // Neither the file nor a directory above it may be packed already.
    for (fs::path up = rel; !up.empty(); up = up.parent_path()) {
      if (std::binary_search(paths.begin(), paths.end(), fs::path(dir) / up)) {
        return Status::InvalidArgument(dir + " already holds " + up.generic_string());
      }
    }
    std::unique_ptr<struct archive_entry, void (*)(struct archive_entry*)> e(archive_entry_new(),
                                                                            archive_entry_free);
    archive_entry_set_pathname(e.get(), rel.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), 0755);
    archive_entry_set_size(e.get(), static_cast<la_int64_t>(content.size()));
    if (archive_write_header(w.get(), e.get()) < ARCHIVE_WARN ||
        archive_write_data(w.get(), content.data(), content.size()) < 0) {
      return Status::Internal("archive " + rel + ": " + ErrorString(w.get()));
    }
  }
  if (archive_write_close(w.get()) != ARCHIVE_OK) {
    return Status::Internal(std::string("archive: ") + ErrorString(w.get()));
  }
  if (static_cast<int64_t>(out.size()) > options.max_bytes) {
    return Status::TooLarge(dir + " packs to more than " + std::to_string(options.max_bytes >> 20) +
                            " MiB");
  }
  return out;
}

Status ValidateArchive(const std::string& archive, const ArchiveLimits& limits) {
  // A name used twice as a file, or as both a file and a directory (also
  // implicitly, as the parent of a later entry), could only half-unpack.
  std::set<std::string> files, dirs;
  return ForEachEntry(
      archive, limits,
      [&](struct archive*, struct archive_entry*, const std::string& rel, mode_t type) {
        for (size_t slash = rel.find('/'); slash != std::string::npos;
             slash = rel.find('/', slash + 1)) {
          std::string parent = rel.substr(0, slash);
          if (files.count(parent)) {
            return Status::InvalidArgument("archive entry \"" + rel + "\" is inside the file \"" +
                                           parent + "\"");
          }
          dirs.insert(parent);
        }
        bool is_dir = type == AE_IFDIR;
        if (files.count(rel) || (!is_dir && dirs.count(rel))) {
          return Status::InvalidArgument("archive entry \"" + rel + "\" appears more than once");
        }
        (is_dir ? dirs : files).insert(rel);
        return Status::Ok();
      });
}

Status UnpackArchive(const std::string& archive, const std::string& dest,
                     const ArchiveLimits& limits) {
  TIDE_RETURN_IF_ERROR(ValidateArchive(archive, limits));
  std::error_code ec;
  fs::create_directories(dest, ec);
  if (ec) return Status::Internal("create " + dest + ": " + ec.message());
  return ForEachEntry(
      archive, limits,
      [&](struct archive* a, struct archive_entry* entry, const std::string& rel, mode_t type) {
        fs::path target = fs::path(dest) / rel;
        // Parents were created by us from validated names; refuse to follow a
        // symlink planted under dest by anything else, the target included.
        fs::path p = dest;
        for (const fs::path& part : fs::path(rel)) {
          p /= part;
          if (fs::is_symlink(fs::symlink_status(p, ec))) {
            return Status::InvalidArgument("refusing to unpack through symlink " + p.string());
          }
        }
        if (type == AE_IFDIR) {
          fs::create_directories(target, ec);
          if (ec) return Status::Internal("mkdir " + target.string() + ": " + ec.message());
          return Status::Ok();
        }
        fs::create_directories(target.parent_path(), ec);
        std::ofstream out(target, std::ios::binary | std::ios::trunc);
        if (!out) return Status::Internal("cannot write " + target.string());
        char buf[65536];
        la_ssize_t n;
        while ((n = archive_read_data(a, buf, sizeof(buf))) > 0) out.write(buf, n);
        if (n < 0) return Status::InvalidArgument(std::string("corrupt archive: ") +
                                                  ErrorString(a));
        out.close();
        if (!out) return Status::Internal("write " + target.string() + " failed");
        mode_t perm = archive_entry_perm(entry) & 0755;
        fs::permissions(target, static_cast<fs::perms>(perm | 0600), ec);
        return Status::Ok();
      });
}

}  // namespace tide

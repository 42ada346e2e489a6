#include "agent/testing/busybox_image.h"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace tide::agent::testing {

namespace fs = std::filesystem;

namespace {

// Whether the ELF file at `path` needs no dynamic loader (no PT_INTERP).
bool IsStatic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Elf64_Ehdr eh{};
  if (!in.read(reinterpret_cast<char*>(&eh), sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64) {
    return false;
  }
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    in.seekg(static_cast<std::streamoff>(eh.e_phoff + static_cast<uint64_t>(i) * eh.e_phentsize));
    if (!in.read(reinterpret_cast<char*>(&ph), sizeof ph)) return false;
    if (ph.p_type == PT_INTERP) return false;
  }
  return true;
}

}  // namespace

std::string StaticBusybox() {
  // A dynamically linked busybox would need the host's libc in the image.
  for (const char* p : {"/bin/busybox", "/usr/bin/busybox"}) {
    if (::access(p, X_OK) == 0 && IsStatic(p)) return p;
  }
  return "";
}

bool MakeBusyboxImage(const std::string& dir) {
  std::string busybox = StaticBusybox();
  if (busybox.empty()) return false;
  std::error_code ec;
  for (const char* d : {"bin", "etc", "tmp", "proc", "dev", "sys", "root"}) {
    fs::create_directories(dir + "/" + d, ec);
  }
  fs::copy_file(busybox, dir + "/bin/busybox", fs::copy_options::overwrite_existing, ec);
  if (ec) return false;
  ::chmod((dir + "/bin/busybox").c_str(), 0755);
  FILE* list = ::popen((busybox + " --list").c_str(), "r");
  if (list == nullptr) return false;
  char name[256];
  while (std::fscanf(list, "%255s", name) == 1) {
    if (std::string(name) != "busybox") fs::create_symlink("busybox", dir + "/bin/" + name, ec);
  }
  ::pclose(list);
  std::ofstream(dir + "/etc/passwd") << "root:x:0:0:root:/root:/bin/sh\n";
  std::ofstream(dir + "/etc/group") << "root:x:0:\n";
  return true;
}

}  // namespace tide::agent::testing

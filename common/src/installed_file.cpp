#include "ddp/common/installed_file.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <vector>

#include "ddp/common/error.hpp"

namespace ddp {

namespace fs = std::filesystem;

std::string find_installed(const fs::path& relative, const std::string& fallback, int mode) {
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(self.parent_path().parent_path() / relative);
  candidates.emplace_back(fallback);
  for (const auto& c : candidates) {
    if (::access(c.c_str(), mode) == 0) return c.string();
  }
  return "";
}

namespace {

bool read_at(int fd, void* buf, std::size_t n, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got =
        ::pread(fd, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    done += static_cast<std::size_t>(got);
  }
  return true;
}

// The end of `offset + count * size`, or UINT64_MAX when it overflows.
std::uint64_t end_of(std::uint64_t offset, std::uint64_t count, std::uint64_t size) {
  if (size != 0 && count > (UINT64_MAX - offset) / size) return UINT64_MAX;
  return offset + count * size;
}

template <typename Ehdr, typename Phdr, typename Shdr>
std::string check_headers(int fd, std::uint64_t file_size) {
  Ehdr eh{};
  if (file_size < sizeof(eh) || !read_at(fd, &eh, sizeof(eh), 0))
    return "is " + std::to_string(file_size) + " bytes, shorter than an ELF header (cut short?)";
  std::uint64_t need = sizeof(eh);
  if (eh.e_phnum > 0) {
    if (eh.e_phentsize != sizeof(Phdr)) return "is not a loadable ELF file (program header size)";
    need = std::max(need, end_of(eh.e_phoff, eh.e_phnum, sizeof(Phdr)));
    if (need <= file_size) {
      std::vector<Phdr> ph(eh.e_phnum);
      if (!read_at(fd, ph.data(), ph.size() * sizeof(Phdr), eh.e_phoff)) return "cannot be read";
      for (const auto& p : ph) {
        if (p.p_type != PT_NULL) need = std::max(need, end_of(p.p_offset, 1, p.p_filesz));
      }
    }
  }
  if (eh.e_shoff != 0 && eh.e_shnum > 0) need = std::max(need, end_of(eh.e_shoff, eh.e_shnum, sizeof(Shdr)));
  if (need <= file_size) return "";
  return "is " + std::to_string(file_size) + " bytes, but its ELF headers place data up to byte " +
         (need == UINT64_MAX ? std::string("2^64") : std::to_string(need - 1)) +
         " (cut short: an interrupted copy or a full disk?)";
}

}  // namespace

std::string elf_file_problem(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot be opened: " + errno_text(errno);
  struct stat st {};
  std::string why;
  unsigned char ident[EI_NIDENT] = {};
  if (::fstat(fd, &st) != 0) {
    why = "cannot be examined: " + errno_text(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "is not a regular file";
  } else if (static_cast<std::uint64_t>(st.st_size) < EI_NIDENT || !read_at(fd, ident, EI_NIDENT, 0) ||
             std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    why = "is not an ELF file (" + std::to_string(st.st_size) + " bytes)";
  } else if (ident[EI_CLASS] == ELFCLASS64) {
    why = check_headers<Elf64_Ehdr, Elf64_Phdr, Elf64_Shdr>(fd, static_cast<std::uint64_t>(st.st_size));
  } else if (ident[EI_CLASS] == ELFCLASS32) {
    why = check_headers<Elf32_Ehdr, Elf32_Phdr, Elf32_Shdr>(fd, static_cast<std::uint64_t>(st.st_size));
  } else {
    why = "is not an ELF file of a known class";
  }
  ::close(fd);
  return why;
}

}  // namespace ddp

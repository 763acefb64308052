// elf_file_problem: a plugin cut short is refused before dlopen maps it.
#include "ddp/common/installed_file.hpp"

#include <catch2/catch.hpp>
#include <filesystem>

#include "test_support.hpp"

using ddp::elf_file_problem;
using namespace ddp::test;

namespace {

// This test binary: a whole ELF file with program and section headers.
std::string self() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

}  // namespace

TEST_CASE("elf_file_problem passes a whole ELF file and refuses one cut short") {
  CHECK(elf_file_problem(self()).empty());
  TempDir dir;
  const std::string whole = read_file(self());
  REQUIRE(whole.size() > 8192);
  for (std::size_t size : {std::size_t{4096}, whole.size() / 2, whole.size() - 1}) {
    const auto cut = dir / ("cut_" + std::to_string(size));
    write_file(cut, whole.substr(0, size));
    const auto why = elf_file_problem(cut.string());
    INFO(size << ": " << why);
    CHECK_THAT(why, Catch::StartsWith("is " + std::to_string(size) +
                                      " bytes, but its ELF headers place data up to byte"));
    CHECK_THAT(why, Catch::EndsWith("(cut short: an interrupted copy or a full disk?)"));
  }
  write_file(dir / "header_only", whole.substr(0, 40));
  CHECK_THAT(elf_file_problem((dir / "header_only").string()), Catch::Contains("shorter than an ELF header"));
}

TEST_CASE("elf_file_problem names a file that is no ELF file, empty, a directory or missing") {
  TempDir dir;
  write_file(dir / "text", "#!/bin/sh\necho not a library\n");
  CHECK(elf_file_problem((dir / "text").string()) == "is not an ELF file (29 bytes)");
  write_file(dir / "empty", "");
  CHECK(elf_file_problem((dir / "empty").string()) == "is not an ELF file (0 bytes)");
  CHECK(elf_file_problem(dir.path().string()) == "is not a regular file");
  CHECK_THAT(elf_file_problem((dir / "missing").string()),
             Catch::StartsWith("cannot be opened: No such file or directory"));
}

TEST_CASE("elf_file_problem refuses header counts that overflow the file offset") {
  TempDir dir;
  std::string bytes = read_file(self()).substr(0, 64);
  // e_phoff (offset 32, 8 bytes) near the top of the range.
  for (int i = 0; i < 8; ++i) bytes[32 + static_cast<std::size_t>(i)] = static_cast<char>(0xff);
  write_file(dir / "huge_phoff", bytes + std::string(4096, '\0'));
  CHECK_THAT(elf_file_problem((dir / "huge_phoff").string()), Catch::Contains("up to byte 2^64"));
}

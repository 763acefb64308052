#include "ddp/common/token_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "test_support.hpp"

using ddp::test::TempDir;
using ddp::test::write_file;

namespace {

std::string token_of(const std::string& contents) {
  TempDir dir;
  write_file(dir / "token", contents);
  return ddp::read_token_file((dir / "token").string(), "--token_file");
}

}  // namespace

TEST_CASE("a token file's trailing whitespace is not part of the token") {
  CHECK(token_of("s3cret") == "s3cret");
  CHECK(token_of("s3cret\n") == "s3cret");              // echo s3cret > file
  CHECK(token_of("s3cret\r\n") == "s3cret");            // saved on Windows
  CHECK(token_of("s3cret \t\n\n") == "s3cret");         // an editor's extra lines
  CHECK(token_of("  s3cret\n") == "  s3cret");          // leading whitespace is kept
  CHECK(token_of("line1\nline2\n") == "line1\nline2");  // the whole file, as base64 wraps it
}

TEST_CASE("an empty token file is an error naming the flag and the file") {
  TempDir dir;
  const auto path = (dir / "token").string();
  for (const char* contents : {"", "\n", " \r\n\t"}) {
    write_file(path, contents);
    CHECK_THROWS_AS(ddp::read_token_file(path, "--token-file"), ddp::ConfigError);
    CHECK_THROWS_WITH(ddp::read_token_file(path, "--token-file"),
                      "--token-file " + path + ": file is empty; put the token in it");
  }
}

TEST_CASE("an unreadable token file is an error naming the variable, the file and why") {
  TempDir dir;
  const auto missing = (dir / "missing").string();
  CHECK_THROWS_AS(ddp::read_token_file(missing, "DDP_TOKEN_FILE"), ddp::ConfigError);
  CHECK_THROWS_WITH(ddp::read_token_file(missing, "DDP_TOKEN_FILE"),
                    "DDP_TOKEN_FILE " + missing + ": cannot read: No such file or directory");
  CHECK_THROWS_WITH(ddp::read_token_file(dir.path().string(), "DDP_TOKEN_FILE"),
                    Catch::StartsWith("DDP_TOKEN_FILE " + dir.path().string() + ": cannot read: "));
  if (::geteuid() != 0) {  // root reads any file
    write_file(dir / "private", "x");
    ::chmod((dir / "private").c_str(), 0);
    CHECK_THROWS_WITH(ddp::read_token_file((dir / "private").string(), "--token-file"),
                      Catch::EndsWith(": cannot read: Permission denied"));
  }
}

// Console line prefixes as torchrun users set them, and lines of any length.
#include <algorithm>
#include <catch2/catch.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

TEST_CASE("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE sets the console prefix as under torchrun") {
  TempDir dir;
  write_file(dir / "hello.py", "print('hello')\n");
  auto r = ddprun({"--python", kPython, "--nproc_per_node=2", "--role=trainer", (dir / "hello.py").string()},
                  dir, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${role_name}${local_rank}/${rank}> "}});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("trainer0/0> hello\n"));
  CHECK_THAT(r.out, Catch::Contains("trainer1/1> hello\n"));
  auto flag = ddprun(
      {"--python", kPython, "--log-line-prefix-template=<${rank}> ", (dir / "hello.py").string()}, dir);
  CHECK_THAT(flag.out, Catch::Contains("<0> hello\n"));
}

TEST_CASE("no_prefix prints the workers' lines exactly as written") {
  TempDir dir;
  write_file(dir / "hello.py", "print('{\"step\": 1}')\n");
  auto r = ddprun({"--python", kPython, "--no_prefix", (dir / "hello.py").string()}, dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out == "{\"step\": 1}\n");
}

TEST_CASE("a line of a megabyte reaches the console in one piece") {
  TempDir dir;
  write_file(dir / "long.py", "import sys\nsys.stdout.write('x' * (1 << 20) + '\\n')\n");
  auto r = ddprun({"--python", kPython, (dir / "long.py").string()}, dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out == "[rank 0]:" + std::string(1 << 20, 'x') + "\n");
}

TEST_CASE("log_dir without rdzv_id gives each run its own directory, as torchrun") {
  TempDir dir;
  const auto logs = dir / "logs";
  for (const char* word : {"first", "second"}) {
    write_file(dir / "say.py", std::string("print('") + word + "')\n");
    auto r =
        ddprun({"--python", kPython, "--log_dir", logs.string(), "--tee=3", (dir / "say.py").string()}, dir);
    INFO(r.err);
    REQUIRE(r.code == 0);
  }
  std::vector<std::string> found;
  for (const auto& run : fs::directory_iterator(logs)) {
    CHECK_THAT(run.path().filename().string(), Catch::StartsWith("none_"));
    found.push_back(read_file(run.path() / "attempt_0" / "0" / "stdout.log"));
  }
  std::sort(found.begin(), found.end());
  CHECK(found == std::vector<std::string>{"first\n", "second\n"});
}

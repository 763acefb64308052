// ddprun --config: layering against the command line and env, key lines, and
// every malformed file, through parse_command_line as main uses it.
#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "ddp/launcher/launch_options.hpp"
#include "test_support.hpp"

using namespace ddp::launcher;
using ddp::test::TempDir;
using ddp::test::write_file;

namespace {
using Env = std::map<std::string, std::string>;

ParseOutcome parse(std::vector<std::string> args, const Env& env = {}) {
  args.insert(args.begin(), "ddprun");
  return parse_command_line(args, env);
}

std::string error_of(std::vector<std::string> args, const Env& env = {}) {
  try {
    parse(std::move(args), env);
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("config values fill flags the command line lacks and lose to it") {
  TempDir dir;
  const auto f = (dir / "c.json").string();
  write_file(f,
             "{\"nnodes\": \"1:2\", \"nproc-per-node\": 4, \"stop_timeout\": 2.5,\n"
             " \"standalone\": true, \"role\": \"file\", \"program\": \"train.py\", \"args\": [\"-x\"]}");
  auto o = parse({"--config", f, "--role=cli"}, {{"PET_NNODES", "3"}}).options;
  CHECK(o.nnodes == "1:2");
  CHECK(o.nproc_per_node == "4");
  CHECK(o.stop_timeout_s == 2.5);
  CHECK(o.standalone);
  CHECK(o.role == "cli");
  CHECK(o.program == std::vector<std::string>{"train.py", "-x"});

  o = parse({"--config", f, "other.py", "--y"}).options;
  CHECK(o.program == std::vector<std::string>{"other.py", "--y"});
}

TEST_CASE("the file beats PET_ and DDP_ env and env still fills what the file leaves out") {
  TempDir dir;
  const auto f = (dir / "c.json").string();
  write_file(f, "{\"max_restarts\": 2}");
  const Env env = {{"PET_MAX_RESTARTS", "9"}, {"DDP_STOP_TIMEOUT", "7"}, {"PET_CONFIG", f}};
  const auto o = parse({"x"}, env).options;
  CHECK(o.max_restarts == 2);
  CHECK(o.stop_timeout_s == 7.0);
  CHECK(o.config == f);
  // DDP_ names exist only for ddprun's own flags.
  CHECK(parse({"x"}, {{"DDP_NNODES", "4"}}).options.nnodes == "1:1");
}

TEST_CASE("print-config names each value's source with the file line") {
  TempDir dir;
  const auto f = (dir / "c.json").string();
  write_file(f, "{\n\n  \"rdzv_id\": \"job\"\n}\n");
  const auto out = parse({"--config", f, "--print-config", "--max_restarts=1"}, {{"PET_ROLE", "r"}});
  REQUIRE(out.kind == ParseOutcome::Kind::kPrintConfig);
  CHECK_THAT(out.text, Catch::Contains("job                      file " + f + ":3"));
  CHECK_THAT(out.text, Catch::Contains("1                        flag"));
  CHECK_THAT(out.text, Catch::Contains("r                        env PET_ROLE"));
  CHECK_THAT(out.text, Catch::Contains("program"));
}

TEST_CASE("print-config shows a switch's effective value, from env or flag") {
  const auto from_env = parse({"--print-config", "x"}, {{"PET_STANDALONE", "true"}});
  CHECK_THAT(from_env.text,
             Catch::Contains("standalone           true                     env PET_STANDALONE"));
  const auto from_flag = parse({"--print-config", "--no_python", "x"}, {});
  CHECK_THAT(from_flag.text, Catch::Contains("no_python            true                     flag"));
  CHECK_THAT(from_flag.text, Catch::Contains("standalone           false                    default"));
}

TEST_CASE("bad config files name the file, the line and the key") {
  TempDir dir;
  const auto f = (dir / "c.json").string();
  write_file(f, "{\n \"nnodes\": 1,\n \"nnodes\": 2\n}");
  CHECK_THAT(error_of({"--config", f, "x"}), Catch::Contains(f + ":3: key 'nnodes' is set twice"));
  write_file(f, "{\n \"rdzv_conf\": {\"a\": 1}\n}");
  CHECK_THAT(error_of({"--config", f, "x"}), Catch::Contains(f + ":2: key 'rdzv_conf' must be"));
  write_file(f, "{\"args\": [\"a\"]}");
  CHECK_THAT(error_of({"--config", f, "x"}), Catch::Contains("needs \"program\""));
  write_file(f, "{\"config\": \"other.json\"}");
  CHECK_THAT(error_of({"--config", f, "x"}), Catch::Contains("only accepted on the command line"));
  write_file(f, "[1, 2]");
  CHECK_THAT(error_of({"--config", f, "x"}), Catch::Contains("must be a JSON object"));
  write_file(f, "{\n\n \"nnodes\": 1,\n}");
  CHECK_THAT(error_of({"--config", f, "x"}), Catch::Contains(f + ":4: malformed JSON"));
  // A string value that looks like a key is not one; escaped key names decode.
  write_file(f, "{\"role\": \"a \\\" , \\\"zz\\\": 1\",\n \"\\u006e\\u006e\": 1}");
  CHECK_THAT(error_of({"--config", f, "x"}), Catch::Contains(":2: key 'nn' is not a ddprun option"));
}

TEST_CASE(
    "a config file nested or sized past its bound is one error naming the file, the bound and the size") {
  TempDir dir;
  const auto f = (dir / "c.json").string();
  write_file(f, R"({"nnodes": 1, "args": )" + std::string(100000, '[') + std::string(100000, ']') + "}");
  CHECK(error_of({"--config", f, "x"}) == "--config " + f + " nests 100001 levels deep; at most 64 are read");
  write_file(f, R"({"role": ")" + std::string(2000000, 'x') + R"("})");
  CHECK(error_of({"--config", f, "x"}) == "--config " + f + " is 2000012 bytes; at most 1048576 are read");
  // nlohmann alone stops at a NUL: the key after it was read by the line scanner only.
  constexpr char kWithNul[] = "{\"role\": \"a\"}\0{\"nnodes\": 1}";
  write_file(f, std::string(kWithNul, sizeof(kWithNul) - 1));
  CHECK(error_of({"--config", f, "x"}) == f + ":1: malformed JSON (a NUL byte at byte 14)");
  CHECK_THAT(error_of({"--config", (dir / "none.json").string(), "x"}),
             Catch::Contains("--config: cannot read '" + (dir / "none.json").string() + "'"));
}

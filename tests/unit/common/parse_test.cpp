#include "ddp/common/parse.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"

using namespace std::chrono_literals;
using ddp::TimeUnit;

TEST_CASE("parse_int takes a whole decimal integer and nothing else") {
  CHECK(ddp::parse_int("42") == 42);
  CHECK(ddp::parse_int("-3") == -3);
  CHECK(ddp::parse_int("0") == 0);
  CHECK(ddp::parse_int("9223372036854775807") == INT64_MAX);
  CHECK_FALSE(ddp::parse_int(""));
  CHECK_FALSE(ddp::parse_int("+1"));
  CHECK_FALSE(ddp::parse_int(" 1"));
  CHECK_FALSE(ddp::parse_int("1 "));
  CHECK_FALSE(ddp::parse_int("1x"));
  CHECK_FALSE(ddp::parse_int("0x10"));
  CHECK_FALSE(ddp::parse_int("1.5"));
  CHECK_FALSE(ddp::parse_int("9223372036854775808"));
}

TEST_CASE("parse_int refuses values outside the asked type") {
  CHECK(ddp::parse_int<int>("2147483647") == 2147483647);
  CHECK_FALSE(ddp::parse_int<int>("2147483648"));
  CHECK_FALSE(ddp::parse_int<unsigned>("-1"));
  CHECK(ddp::parse_int<std::uint16_t>("65535") == 65535);
  CHECK_FALSE(ddp::parse_int<std::uint16_t>("65536"));
}

TEST_CASE("parse_int_or_throw names the flag, the value and what is expected") {
  CHECK(ddp::parse_int_or_throw<int>("7", "--nnodes", "a positive integer", 1) == 7);
  CHECK_THROWS_AS(ddp::parse_int_or_throw<int>("x", "--nnodes", "a positive integer"), ddp::ConfigError);
  CHECK_THROWS_WITH(ddp::parse_int_or_throw<int>("x", "--nnodes", "a positive integer"),
                    "--nnodes: 'x' is not a positive integer");
  CHECK_THROWS_WITH(
      ddp::parse_int_or_throw<std::int64_t>("70000", "--port", "an integer in 0..65535", 0, 65535),
      "--port: '70000' is not an integer in 0..65535");
  CHECK_THROWS_WITH(ddp::parse_int_or_throw<int>("0", "--nnodes", "a positive integer", 1),
                    "--nnodes: '0' is not a positive integer");
  CHECK_THROWS_WITH(ddp::parse_int_or_throw<int>("", "X", "an integer"), "X: '' is not an integer");
}

TEST_CASE("parse_bool takes both spellings used so far, in any case") {
  for (const char* yes : {"1", "true", "True", "TRUE", "yes", "Yes", "on", "ON"}) {
    INFO(yes);
    CHECK(ddp::parse_bool(yes) == true);
  }
  for (const char* no : {"0", "false", "False", "FALSE", "no", "NO", "off", "Off"}) {
    INFO(no);
    CHECK(ddp::parse_bool(no) == false);
  }
  for (const char* bad : {"", "2", "maybe", "y", "n", "truee", " true", "true ", "-1"}) {
    INFO(bad);
    CHECK_FALSE(ddp::parse_bool(bad).has_value());
  }
}

TEST_CASE("parse_bool_or_throw names the key and the accepted spellings") {
  CHECK(ddp::parse_bool_or_throw("yes", "DDP_X") == true);
  CHECK_THROWS_AS(ddp::parse_bool_or_throw("maybe", "DDP_X"), ddp::ConfigError);
  CHECK_THROWS_WITH(ddp::parse_bool_or_throw("maybe", "DDP_X"),
                    "DDP_X: 'maybe' is not a boolean (true/false, 1/0, yes/no, on/off)");
}

TEST_CASE("parse_duration counts a bare number in the unit of the call site") {
  CHECK(ddp::parse_duration("30", TimeUnit::kSeconds) == 30s);
  CHECK(ddp::parse_duration("30", TimeUnit::kMilliseconds) == 30ms);
  CHECK(ddp::parse_duration("0.5", TimeUnit::kSeconds) == 500ms);
  CHECK(ddp::parse_duration("1e3", TimeUnit::kMilliseconds) == 1s);
  CHECK(ddp::parse_duration("+2", TimeUnit::kSeconds) == 2s);
  CHECK(ddp::parse_duration("0", TimeUnit::kSeconds) == 0ms);
  CHECK(ddp::parse_duration("1.0004", TimeUnit::kSeconds) == 1000ms);  // to the nearest ms
  CHECK(ddp::parse_duration("1.0006", TimeUnit::kSeconds) == 1001ms);
}

TEST_CASE("parse_duration never rounds a time above zero down to no time") {
  CHECK(ddp::parse_duration("0.0001", TimeUnit::kSeconds) == 1ms);
  CHECK(ddp::parse_duration("0.1", TimeUnit::kMilliseconds) == 1ms);
}

TEST_CASE("parse_duration refuses what is not a finite non-negative number") {
  for (const char* bad : {"", "-1", "soon", "30s", "1 ", " 1", "inf", "nan", "1e300", "0x10", "1,5"}) {
    INFO(bad);
    CHECK_FALSE(ddp::parse_duration(bad, TimeUnit::kSeconds).has_value());
  }
  CHECK(ddp::parse_duration("1e9", TimeUnit::kSeconds).has_value());        // ~31 years: the most
  CHECK_FALSE(ddp::parse_duration("2e9", TimeUnit::kSeconds).has_value());  // past kMaxDuration
}

TEST_CASE("parse_duration_or_throw names the key and the unit") {
  CHECK(ddp::parse_duration_or_throw("2", TimeUnit::kSeconds, "X") == 2s);
  CHECK_THROWS_AS(ddp::parse_duration_or_throw("soon", TimeUnit::kSeconds, "X"), ddp::ConfigError);
  CHECK_THROWS_WITH(ddp::parse_duration_or_throw("soon", TimeUnit::kSeconds, "--rdzv_conf join_timeout"),
                    "--rdzv_conf join_timeout: 'soon' is not a number of seconds >= 0");
  CHECK_THROWS_WITH(ddp::parse_duration_or_throw("-5", TimeUnit::kMilliseconds, "DDP_X"),
                    "DDP_X: '-5' is not a number of milliseconds >= 0");
}

TEST_CASE("a duration that is a number, only too long, is refused saying the longest accepted") {
  for (const char* big : {"1e12", "1e300", "1e400", "inf", "+1099511628"}) {
    INFO(big);
    CHECK_FALSE(ddp::parse_duration(big, TimeUnit::kSeconds).has_value());
    CHECK_THROWS_WITH(ddp::parse_duration_or_throw(big, TimeUnit::kSeconds, "--x"),
                      "--x: '" + std::string(big) +
                          "' is longer than 1099511627 s (about 34 years), the longest duration ddp accepts");
  }
  CHECK(ddp::parse_duration("1099511627", TimeUnit::kSeconds) == 1099511627000ms);
  CHECK(ddp::parse_duration("1e-400", TimeUnit::kSeconds) == 0ms);  // underflow: no time, not an error
  CHECK_THROWS_WITH(ddp::parse_duration_or_throw("1e400x", TimeUnit::kSeconds, "--x"),
                    "--x: '1e400x' is not a number of seconds >= 0");
}

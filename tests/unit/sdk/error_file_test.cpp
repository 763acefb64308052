#include "error_file.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

TEST_CASE("the error file has the layout of torch's @record") {
  const auto text = ddp::detail::error_file_json("std::runtime_error: boom", "#0 main\n", 1700000000);
  const auto j = nlohmann::json::parse(text);
  CHECK(j["message"]["message"] == "std::runtime_error: boom");
  CHECK(j["message"]["extraInfo"]["py_callstack"] == "#0 main\n");
  CHECK(j["message"]["extraInfo"]["timestamp"] == "1700000000");  // a string, as torch writes it
}

TEST_CASE("the error file names the exception's type only when given") {
  const auto typed = nlohmann::json::parse(
      ddp::detail::error_file_json("ddp::MembershipChanged: left", "", 1, "ddp::MembershipChanged"));
  CHECK(typed["message"]["extraInfo"]["error_type"] == "ddp::MembershipChanged");
  const auto plain = nlohmann::json::parse(ddp::detail::error_file_json("boom", "", 1));
  CHECK_FALSE(plain["message"]["extraInfo"].contains("error_type"));
}

TEST_CASE("invalid UTF-8 in a message still gives valid JSON") {
  const auto text = ddp::detail::error_file_json(std::string("bad \xff byte"), "", 1);
  CHECK_NOTHROW(nlohmann::json::parse(text));
}

TEST_CASE("the current stack has one numbered line per frame") {
  const auto stack = ddp::detail::current_stack(0);
  CHECK(stack.rfind("#0 ", 0) == 0);
  CHECK(stack.find("\n#1 ") != std::string::npos);
}

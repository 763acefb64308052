// ddp::log::run_surviving: a server loop that a handler's exception cannot end.
#include <catch2/catch.hpp>
#include <stdexcept>

#include "ddp/common/logging.hpp"

TEST_CASE("run_surviving calls the loop again after each exception it lets out, until it returns") {
  int calls = 0;
  ddp::log::run_surviving(
      [&] {
        ++calls;
        if (calls == 1) throw std::runtime_error("a handler's bug");
        if (calls == 2) throw 42;  // not a std::exception
      },
      "test", "test");
  CHECK(calls == 3);
}

// The main of every Catch2 test binary. ctest runs each case by its name
// (catch_discover_tests); a name that its spec cannot match passed unrun
// before: a ';' splits it in two as a CMake list, a backslash is an escape
// in a Catch spec. A spec that matches no case now fails (exit 2).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  Catch::Session session;
  session.configData().warnings = Catch::WarnAbout::NoTests;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  return session.run();
}

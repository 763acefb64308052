// Slurm host lists and count lists, as SLURM_JOB_NODELIST and
// SLURM_STEP_TASKS_PER_NODE carry them.
#include "ddp/common/hostlist.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"

using ddp::expand_count_list;
using ddp::expand_hostlist;
using Hosts = std::vector<std::string>;

namespace {
Hosts expand(const std::string& text) { return expand_hostlist(text, "SLURM_JOB_NODELIST"); }
std::string error_of(const std::string& text) {
  try {
    expand(text);
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("a single plain host is itself") {
  CHECK(expand("node7") == Hosts{"node7"});
  CHECK(expand("gpu-b7.cluster.example") == Hosts{"gpu-b7.cluster.example"});
}

TEST_CASE("plain hosts separated by commas keep their order") {
  CHECK(expand("b,a,c") == Hosts{"b", "a", "c"});
}

TEST_CASE("a range expands inclusively") {
  CHECK(expand("n[1-3]") == Hosts{"n1", "n2", "n3"});
  CHECK(expand("n[5-5]") == Hosts{"n5"});
  CHECK(expand("n[7]") == Hosts{"n7"});
}

TEST_CASE("zero padding follows the width of the lower bound") {
  CHECK(expand("gpu-a[001-003]") == Hosts{"gpu-a001", "gpu-a002", "gpu-a003"});
  CHECK(expand("n[08-11]") == Hosts{"n08", "n09", "n10", "n11"});
  CHECK(expand("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(expand("n[9-11]") == Hosts{"n9", "n10", "n11"});
  CHECK(expand("n[0-1]") == Hosts{"n0", "n1"});
}

TEST_CASE("ranges and single values mix inside one bracket") {
  CHECK(expand("gpu-a[001-003,007],gpu-b7") ==
        Hosts{"gpu-a001", "gpu-a002", "gpu-a003", "gpu-a007", "gpu-b7"});
  CHECK(expand("n[1,3,5-6]") == Hosts{"n1", "n3", "n5", "n6"});
}

TEST_CASE("a suffix after the bracket is kept") {
  CHECK(expand("rack[1-2]-ib") == Hosts{"rack1-ib", "rack2-ib"});
}

TEST_CASE("several bracket groups in one name multiply out left to right") {
  CHECK(expand("r[1-2]n[01-02]") == Hosts{"r1n01", "r1n02", "r2n01", "r2n02"});
  CHECK(expand("a[1-2]b[3]c[4-5]d") == Hosts{"a1b3c4d", "a1b3c5d", "a2b3c4d", "a2b3c5d"});
}

TEST_CASE("several bracketed names separated by commas") {
  CHECK(expand("a[1-2],b[10-11],c") == Hosts{"a1", "a2", "b10", "b11", "c"});
}

TEST_CASE("a name that is only a bracket is digits") { CHECK(expand("[1-2]") == Hosts{"1", "2"}); }

TEST_CASE("malformed host lists are one-line errors naming the variable") {
  for (const std::string bad : {"n[1-3", "n1-3]", "n[[1-2]]", "n[3-1]", "n[a-b]", "n[]", "n[1-]", "n[-2]",
                                "n[1,,2]", "a,,b", ",a", "a,", "", "a b", "n[1-2]]", "n[1-2000000]"}) {
    INFO(bad);
    const std::string e = error_of(bad);
    CHECK_THAT(e, Catch::StartsWith("SLURM_JOB_NODELIST='" + bad + "' is not a Slurm host list"));
    CHECK(e.find('\n') == std::string::npos);
  }
  CHECK_THAT(error_of("n[3-1]"), Catch::Contains("runs backwards"));
  CHECK_THAT(error_of("n[1-3"), Catch::Contains("'[' without ']'"));
}

TEST_CASE("a list that would expand past the host limit is refused before allocating") {
  CHECK_THAT(error_of("a[0-999]b[0-999]c[0-999]"), Catch::Contains("more than"));
}

TEST_CASE("count lists expand their repeats") {
  CHECK(expand_count_list("2(x3),1", "V") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_count_list("4", "V") == std::vector<int>{4});
  CHECK(expand_count_list("1,2,3", "V") == std::vector<int>{1, 2, 3});
  CHECK(expand_count_list("8(x2)", "V") == std::vector<int>{8, 8});
}

TEST_CASE("malformed count lists name the variable") {
  for (const std::string bad : {"", "x", "2(x)", "2(x3", "(x3)", "2,,1", "2(x0)", "-1", "2(y3)"}) {
    INFO(bad);
    CHECK_THROWS_WITH(expand_count_list(bad, "SLURM_STEP_TASKS_PER_NODE"),
                      Catch::StartsWith("SLURM_STEP_TASKS_PER_NODE='" + bad + "'"));
  }
}

TEST_CASE("the store port of a job step stays below the ephemeral range and differs per job") {
  CHECK(ddp::slurm_store_port(0, 0) == ddp::kSlurmPortBase);
  CHECK(ddp::slurm_store_port(1234, 0) != ddp::slurm_store_port(1235, 0));
  CHECK(ddp::slurm_store_port(1234, 0) != ddp::slurm_store_port(1234, 1));
  for (std::uint64_t job : {0ULL, 1ULL, 2999ULL, 3000ULL, 123456789ULL, ~0ULL}) {
    for (std::uint64_t step : {0ULL, 1ULL, 7ULL}) {
      const int port = ddp::slurm_store_port(job, step);
      CHECK(port >= 20000);
      CHECK(port < 32768);
    }
  }
}

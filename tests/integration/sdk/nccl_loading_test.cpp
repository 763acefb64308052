// NCCL and the CUDA runtime are loaded at run time, only by an NCCL group: an
// SDK program does not link them, a Gloo job never maps them, and asking for
// NCCL where it cannot work gives one line naming what was found and what is
// needed. Runs without a GPU (CUDA_VISIBLE_DEVICES="" hides any there is).
#include <catch2/catch.hpp>

#include "sdk_job.hpp"

using namespace ddp::test;

namespace {

std::string worker() { return bin("ddp_sdk_nccl_loading_worker").string(); }

// One rank asking for backend `backend` with `env`; the group fails or not.
RankResult one_rank(const std::string& backend, std::map<std::string, std::optional<std::string>> env) {
  SdkJob job;
  auto results = job.run({worker(), backend}, 1, std::move(env), std::chrono::seconds(60));
  INFO(describe(results));
  REQUIRE(results.size() == 1);
  return results[0];
}

// The test's stand-in libnccl, which reports itself as NCCL `version` (as
// ncclGetVersion encodes it: 21104 is 2.11.4).
std::string fake_nccl() { return bin("libddp_test_fake_nccl.so").string(); }

// One rank of backend nccl whose DDP_NCCL_LIBRARY is the fake NCCL `version`.
RankResult one_rank_on_fake_nccl(const std::string& version) {
  return one_rank("nccl", {{"DDP_NCCL_LIBRARY", fake_nccl()}, {"DDP_TEST_FAKE_NCCL_VERSION", version}});
}

#ifdef DDP_TEST_HAVE_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

#define SKIP_WITHOUT_NCCL()                                                           \
  if (!kHaveNccl) {                                                                   \
    WARN("SKIP: this build has no NCCL backend (configure with -DDDP_WITH_NCCL=ON)"); \
    return;                                                                           \
  }

}  // namespace

TEST_CASE("programs linked with the SDK need neither libnccl nor libcudart to load") {
  TempDir dir;
  for (const char* program : {"ddp-example-train", "ddp-bench", "ddp_sdk_nccl_loading_worker"}) {
    const auto r = run({"/usr/bin/ldd", bin(program).string()}, dir.path());
    INFO(program << ":\n" << r.out << r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("libc.so"));  // ldd did list the dependencies
    CHECK_THAT(r.out, !Catch::Contains("libnccl"));
    CHECK_THAT(r.out, !Catch::Contains("libcudart"));
  }
}

TEST_CASE("a Gloo job runs without loading NCCL or the CUDA runtime") {
  TempDir empty;
  SdkJob job;
  const auto results = job.run({worker(), "gloo"}, 2,
                               {{"LD_LIBRARY_PATH", empty.path().string()}, {"CUDA_VISIBLE_DEVICES", ""}});
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("backend=gloo") && Catch::Contains("sum=3"));
    CHECK_THAT(r.out, Catch::Contains("gpu libraries mapped: none"));
  }
}

TEST_CASE("backend auto picks gloo when the CUDA runtime cannot be loaded") {
  TempDir empty;
  const auto r = one_rank("auto", {{"DDP_CUDART_LIBRARY", (empty / "libcudart.so.13").string()}});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("backend=gloo") && Catch::Contains("sum=1"));
  CHECK_THAT(r.out, Catch::Contains("gpu libraries mapped: none"));
}

TEST_CASE("backend nccl with the libraries found but no GPU fails with one line naming the device") {
  SKIP_WITHOUT_NCCL();
  // An empty LD_LIBRARY_PATH: where NCCL is installed system-wide (ld.so.cache,
  // as on the build host) both libraries still load, and the device check is
  // what fails; where NCCL came only from LD_LIBRARY_PATH, loading it fails first.
  TempDir empty;
  const auto r = one_rank("nccl", {{"LD_LIBRARY_PATH", empty.path().string()}, {"CUDA_VISIBLE_DEVICES", ""}});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.code == 1);
  CHECK(count_lines(r.err) == 1);
  const bool no_device = r.err.find("needs a CUDA device") != std::string::npos;
  if (no_device) {
    CHECK_THAT(r.err,
               Catch::Contains("rank 0 of 1 (group 'default'): backend 'nccl' needs a CUDA device, but the "
                               "CUDA runtime ") &&
                   Catch::Contains("libcudart.so") && Catch::Contains("sees none (") &&
                   Catch::Contains("use backend 'gloo' or check CUDA_VISIBLE_DEVICES"));
  } else {
    CHECK_THAT(r.err, Catch::Contains("cannot load NCCL (libnccl.so.2: cannot open shared object file") &&
                          Catch::Contains("LD_LIBRARY_PATH") && Catch::Contains("use backend 'gloo'"));
  }
}

TEST_CASE("backend nccl without libnccl fails with one line naming the loader's error and what to install") {
  SKIP_WITHOUT_NCCL();
  TempDir empty;
  const std::string missing = (empty / "libnccl.so.2").string();
  const auto r = one_rank("nccl", {{"DDP_NCCL_LIBRARY", missing}});
  check_one_line_failure(
      r, 1,
      Catch::Contains("rank 0 of 1 (group 'default'): backend 'nccl' cannot load NCCL (" + missing +
                      ": cannot open shared object file: No such file or directory); install NCCL >= 2.14.0 "
                      "(built against ") &&
          Catch::Contains("put its libnccl.so.2 on LD_LIBRARY_PATH or name it in DDP_NCCL_LIBRARY, or use "
                          "backend 'gloo'"));
}

TEST_CASE("backend nccl with an NCCL older than 2.14 fails with one line naming both versions") {
  SKIP_WITHOUT_NCCL();
  const auto r = one_rank_on_fake_nccl("21104");
  check_one_line_failure(
      r, 1,
      Catch::Contains("rank 0 of 1 (group 'default'): NCCL 2.11.4 (" + fake_nccl() +
                      ") was loaded at run time, but backend 'nccl' needs NCCL >= 2.14.0 (built against ") &&
          Catch::Contains("put a newer libnccl.so.2 on LD_LIBRARY_PATH or name it in DDP_NCCL_LIBRARY, or "
                          "use backend 'gloo'"));
}

TEST_CASE("backend nccl with a library lacking an NCCL function fails with one line naming it") {
  SKIP_WITHOUT_NCCL();
  const auto r = one_rank_on_fake_nccl("21903");
  check_one_line_failure(r, 1,
                         Catch::Contains("NCCL 2.19.3 (" + fake_nccl() + ") lacks ncclGetErrorString (") &&
                             Catch::Contains("install NCCL >= 2.14.0"));
}

TEST_CASE("backend nccl without the CUDA runtime fails with one line naming the loader's error") {
  SKIP_WITHOUT_NCCL();
  TempDir empty;
  const std::string missing = (empty / "libcudart.so.13").string();
  const auto r = one_rank("nccl", {{"DDP_CUDART_LIBRARY", missing}});
  check_one_line_failure(
      r, 1,
      Catch::Contains("rank 0 of 1 (group 'default'): backend 'nccl' cannot load the CUDA runtime (" +
                      missing + ": cannot open shared object file") &&
          Catch::Contains("on LD_LIBRARY_PATH or name it in DDP_CUDART_LIBRARY, or use backend 'gloo'"));
}

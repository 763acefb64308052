// libddp_test_fake_nccl.so: stands in for an NCCL library that the SDK cannot
// use, to test its load-time checks without installing an old NCCL. It exports
// ncclGetVersion only, answering $DDP_TEST_FAKE_NCCL_VERSION (e.g. 21104 for
// 2.11.4): older than 2.14 fails the version check, newer fails on the first
// missing symbol.
#include <cstdlib>

extern "C" __attribute__((visibility("default"))) int ncclGetVersion(int* version) {
  const char* v = std::getenv("DDP_TEST_FAKE_NCCL_VERSION");
  *version = v != nullptr ? std::atoi(v) : 21104;
  return 0;  // ncclSuccess
}

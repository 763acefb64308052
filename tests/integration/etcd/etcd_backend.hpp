// The Store conformance suite's backend for EtcdStore: a real single-member
// etcd in a temp dir per test case. Force-included into the suite's sources
// (see CMakeLists.txt), which then run every scenario against it.
#pragma once

#include "ddp/store/etcd_store.hpp"
#include "etcd_cluster.hpp"

namespace ddp::test {

struct EtcdBackend {
  static constexpr const char* kName = "EtcdStore";
  TempDir dir;
  EtcdCluster etcd{dir.path()};
  store::EtcdStore client{etcd.options()};
  store::Store& store() { return client; }
};

}  // namespace ddp::test

// Real etcd members (Debian's etcd-server) for tests: 1 or 3 processes on
// 127.0.0.1 with free ports and their data in a test's temp dir. Every member
// is SIGKILLed and reaped by the destructor, even when the test fails, and
// dies with the test process if that is killed.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/endpoint.hpp"
#include "ddp/store/etcd_store.hpp"
#include "test_support.hpp"

namespace ddp::test {

// A self-signed certificate for 127.0.0.1 (IP SAN), made with the openssl CLI.
// It is its own CA: a client passes cert_file as its CA file.
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
};
TlsFiles make_self_signed_cert(const fs::path& dir, const std::string& name = "server");

class EtcdCluster {
 public:
  // The etcd binary ($DDP_ETCD_BIN, else /usr/bin/etcd), or "" when missing.
  static std::string binary();

  // Starts `members` members in `dir` and waits until each answers a read
  // (quorum formed). Throws std::runtime_error with the members' log tails.
  // With `tls`, members serve clients over https with that certificate.
  explicit EtcdCluster(const fs::path& dir, int members = 1, std::optional<TlsFiles> tls = std::nullopt);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  Endpoint endpoint(int i) const;
  std::vector<Endpoint> endpoints() const;
  // "127.0.0.1:P1,127.0.0.1:P2,...", as --rdzv_endpoint takes it.
  std::string endpoints_text() const;
  // Options for a store over every member, with short timeouts for tests.
  store::EtcdStoreOptions options(const std::string& prefix = "/test/") const;

  // SIGKILLs member i and reaps it.
  void kill(int i);
  bool running(int i);
  // Member i's pid (to SIGSTOP it: an etcd that stops answering).
  pid_t pid(int i) const { return members_.at(static_cast<std::size_t>(i)).pid; }
  // Compacts the history up to `revision` (to test watches that fall behind).
  void compact(std::int64_t revision);
  // Each member's stderr tail, for failure messages.
  std::string logs() const;

 private:
  // Spawned here rather than with test::Process: the child also gets
  // PR_SET_PDEATHSIG, so a test binary that aborts or is killed by ctest's
  // timeout (no destructors run) still takes its etcd members with it (the
  // signal follows the forking thread: build the cluster on the test thread).
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
    bool reaped = false;
    fs::path err_path;
  };
  void spawn(Member& m, std::vector<std::string> argv);
  void wait_ready(int i);

  fs::path dir_;
  std::optional<TlsFiles> tls_;
  std::vector<Member> members_;
};

}  // namespace ddp::test

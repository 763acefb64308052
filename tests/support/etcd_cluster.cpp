#include "etcd_cluster.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include "ddp/common/error.hpp"
#include "etcd_client.hpp"

namespace ddp::test {

std::string EtcdCluster::binary() {
  const char* env = std::getenv("DDP_ETCD_BIN");
  const std::string path = env != nullptr && *env != '\0' ? env : "/usr/bin/etcd";
  return ::access(path.c_str(), X_OK) == 0 ? path : std::string();
}

TlsFiles make_self_signed_cert(const fs::path& dir, const std::string& name) {
  TlsFiles files{(dir / (name + ".crt")).string(), (dir / (name + ".key")).string()};
  auto r = run({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                "subjectAltName=IP:127.0.0.1", "-keyout", files.key_file, "-out", files.cert_file},
               dir);
  if (r.code != 0) throw std::runtime_error("openssl req failed: " + r.err);
  return files;
}

EtcdCluster::EtcdCluster(const fs::path& dir, int members, std::optional<TlsFiles> tls)
    : dir_(dir), tls_(std::move(tls)) {
  const auto bin = binary();
  if (bin.empty())
    throw std::runtime_error("etcd not found: install Debian's etcd-server (scripts/setup.sh)");
  std::string initial;
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = "member" + std::to_string(i + 1);
    m.client_port = free_port();
    m.peer_port = free_port();
    if (!initial.empty()) initial += ",";
    initial += m.name + "=http://127.0.0.1:" + std::to_string(m.peer_port);
    members_.push_back(std::move(m));
  }
  for (auto& m : members_) {
    const auto client = (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(m.client_port);
    const auto peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
    // Short heartbeat/election times: a new leader within ~0.5 s of a kill, and
    // leases as short as 1 s, so tests stay quick.
    std::vector<std::string> argv{bin,
                                  "--name",
                                  m.name,
                                  "--data-dir",
                                  (dir_ / (m.name + ".etcd")).string(),
                                  "--listen-client-urls",
                                  client,
                                  "--advertise-client-urls",
                                  client,
                                  "--listen-peer-urls",
                                  peer,
                                  "--initial-advertise-peer-urls",
                                  peer,
                                  "--initial-cluster",
                                  initial,
                                  "--initial-cluster-state",
                                  "new",
                                  "--initial-cluster-token",
                                  "ddp-test",
                                  "--heartbeat-interval",
                                  "50",
                                  "--election-timeout",
                                  "500",
                                  "--logger",
                                  "zap",
                                  "--log-level",
                                  "warn"};
    if (tls_) {
      argv.insert(argv.end(), {"--cert-file", tls_->cert_file, "--key-file", tls_->key_file});
    }
    spawn(m, std::move(argv));
  }
  for (int i = 0; i < members; ++i) wait_ready(i);
}

void EtcdCluster::spawn(Member& m, std::vector<std::string> argv) {
  m.err_path = dir_ / (m.name + ".log");
  const int log_fd = ::open(m.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot create " + m.err_path.string());
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  m.pid = ::fork();
  if (m.pid < 0) throw std::runtime_error("fork failed");
  if (m.pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the test died before prctl took effect
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(log_fd);
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) kill(i);
}

Endpoint EtcdCluster::endpoint(int i) const {
  return Endpoint{"127.0.0.1", static_cast<std::uint16_t>(members_.at(i).client_port)};
}

std::vector<Endpoint> EtcdCluster::endpoints() const {
  std::vector<Endpoint> out;
  for (int i = 0; i < size(); ++i) out.push_back(endpoint(i));
  return out;
}

std::string EtcdCluster::endpoints_text() const {
  std::string out;
  for (int i = 0; i < size(); ++i) {
    if (i > 0) out += ',';
    out += endpoint(i).to_string();
  }
  return out;
}

store::EtcdStoreOptions EtcdCluster::options(const std::string& prefix) const {
  store::EtcdStoreOptions o;
  o.endpoints = endpoints();
  o.prefix = prefix;
  o.connect_timeout = std::chrono::seconds(5);
  o.request_timeout = std::chrono::seconds(3);
  if (tls_) o.ca_file = tls_->cert_file;
  return o;
}

void EtcdCluster::wait_ready(int i) {
  auto o = options();
  o.endpoints = {endpoint(i)};
  o.connect_timeout = std::chrono::milliseconds(0);
  o.request_timeout = std::chrono::milliseconds(1000);
  store::etcd::EtcdClient client(o);
  const bool ready = wait_until(
      [&] {
        if (!running(i)) return false;
        try {
          client.call("/v3/kv/range", {{"key", "AA=="}, {"count_only", true}}, "readiness probe");
          return true;
        } catch (const Error&) {
          return false;
        }
      },
      std::chrono::seconds(15));
  if (!ready)
    throw std::runtime_error("etcd member " + members_[i].name + " did not become ready:\n" + logs());
}

void EtcdCluster::kill(int i) {
  auto& m = members_.at(i);
  if (m.pid <= 0 || m.reaped) return;
  ::kill(m.pid, SIGKILL);
  int status = 0;
  ::waitpid(m.pid, &status, 0);
  m.reaped = true;
}

bool EtcdCluster::running(int i) {
  auto& m = members_.at(i);
  if (m.pid <= 0 || m.reaped) return false;
  int status = 0;
  if (::waitpid(m.pid, &status, WNOHANG) == m.pid) m.reaped = true;
  return !m.reaped;
}

void EtcdCluster::compact(std::int64_t revision) {
  store::etcd::EtcdClient client(options());
  client.call("/v3/kv/compaction", {{"revision", std::to_string(revision)}, {"physical", true}},
              "compaction");
}

std::string EtcdCluster::logs() const {
  std::string out;
  for (const auto& m : members_) {
    auto err = read_file(m.err_path);
    if (err.size() > 2000) err = err.substr(err.size() - 2000);
    out += "--- " + m.name + " (client port " + std::to_string(m.client_port) + ")\n" + err;
  }
  return out;
}

}  // namespace ddp::test

#include "etcd_cluster.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include "ddp/common/error.hpp"
#include "etcd_client.hpp"

namespace ddp::test {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind to a free port failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string EtcdCluster::binary() {
  const char* env = std::getenv("DDP_ETCD_BIN");
  const std::string path = env != nullptr && *env != '\0' ? env : "/usr/bin/etcd";
  return ::access(path.c_str(), X_OK) == 0 ? path : std::string();
}

TlsFiles make_self_signed_cert(const fs::path& dir, const std::string& name) {
  TlsFiles files{(dir / (name + ".crt")).string(), (dir / (name + ".key")).string()};
  auto r = run({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                "-keyout", files.key_file, "-out", files.cert_file},
               dir);
  if (r.code != 0) throw std::runtime_error("openssl req failed: " + r.err);
  return files;
}

EtcdCluster::EtcdCluster(const fs::path& dir, int members, std::optional<TlsFiles> tls)
    : dir_(dir), tls_(std::move(tls)) {
  const auto bin = binary();
  if (bin.empty()) throw std::runtime_error("etcd not found: install Debian's etcd-server (scripts/setup.sh)");
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
    std::vector<std::string> argv{bin, "--name", m.name, "--data-dir", (dir_ / (m.name + ".etcd")).string(),
                                  "--listen-client-urls", client, "--advertise-client-urls", client,
                                  "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                  "--initial-cluster", initial, "--initial-cluster-state", "new",
                                  "--initial-cluster-token", "ddp-test", "--heartbeat-interval", "50",
                                  "--election-timeout", "500", "--logger", "zap", "--log-level", "warn"};
    if (tls_) {
      argv.insert(argv.end(), {"--cert-file", tls_->cert_file, "--key-file", tls_->key_file});
    }
    m.proc = std::make_unique<Process>(std::move(argv), dir_, std::map<std::string, std::optional<std::string>>{},
                                       "etcd-" + m.name);
  }
  for (int i = 0; i < members; ++i) wait_ready(i);
}

EtcdCluster::~EtcdCluster() = default;  // each Process SIGKILLs and reaps its member

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
        if (!members_[i].proc->running()) return false;
        try {
          client.call("/v3/kv/range", {{"key", "AA=="}, {"count_only", true}}, "readiness probe");
          return true;
        } catch (const Error&) {
          return false;
        }
      },
      std::chrono::seconds(15));
  if (!ready) throw std::runtime_error("etcd member " + members_[i].name + " did not become ready:\n" + logs());
}

void EtcdCluster::kill(int i) {
  auto& p = *members_.at(i).proc;
  p.signal(SIGKILL);
  p.wait(std::chrono::seconds(5));
}

bool EtcdCluster::running(int i) { return members_.at(i).proc->running(); }

void EtcdCluster::compact(std::int64_t revision) {
  store::etcd::EtcdClient client(options());
  client.call("/v3/kv/compaction", {{"revision", std::to_string(revision)}, {"physical", true}}, "compaction");
}

std::string EtcdCluster::logs() const {
  std::string out;
  for (const auto& m : members_) {
    auto err = m.proc->err();
    if (err.size() > 2000) err = err.substr(err.size() - 2000);
    out += "--- " + m.name + " (client port " + std::to_string(m.client_port) + ")\n" + err;
  }
  return out;
}

}  // namespace ddp::test

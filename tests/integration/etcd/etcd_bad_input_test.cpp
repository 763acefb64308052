// Clear errors naming the endpoint: etcd down, not etcd at all, TLS mismatch.
#include <algorithm>
#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "ddp/store/etcd_store.hpp"
#include "etcd_cluster.hpp"
#include "fake_http_member.hpp"

using namespace ddp::store;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using namespace ddp::test;

namespace {
EtcdStoreOptions one(std::uint16_t port) {
  EtcdStoreOptions o;
  o.endpoints = {ddp::Endpoint{"127.0.0.1", port}};
  o.connect_timeout = 500ms;
  o.request_timeout = 2s;
  return o;
}

// An HTTP server that is not etcd: answers 404 to everything, and logs one line
// per request to argv[2] before it answers (FakeHttpMember serves it).
constexpr const char* kNotEtcd = R"(
import http.server, os, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", "9")
        self.end_headers()
        self.wfile.write(b"not found")
    do_GET = do_POST
    def log_message(self, *args):
        with open(sys.argv[2], "a") as f:
            f.write(self.requestline + "\n")
)";
}  // namespace

TEST_CASE("etcd bad input: an etcd that is down is a NetworkError naming the endpoint and errno text") {
  const auto port = static_cast<std::uint16_t>(ddp::test::free_port());
  EtcdStore s(one(port));
  const auto where = "etcd at 127.0.0.1:" + std::to_string(port) + " unreachable: Connection refused";
  CHECK_THROWS_AS(s.ping(), ddp::NetworkError);
  CHECK_THROWS_WITH(s.set("k", "v"), Contains(where));
  CHECK_THROWS_WITH(s.watch("", 0, [](const WatchEvent&) {}), Contains(where));
}

TEST_CASE("etcd: a member named by host name is resolved, and a name that resolves nowhere is named") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  auto named = etcd.options();
  for (auto& e : named.endpoints) e.host = "localhost";
  EtcdStore s(named);
  s.set("k", "v");
  CHECK(s.try_get("k") == std::optional<std::string>("v"));
  // RFC 2606: .invalid never resolves.
  auto nowhere = one(etcd.endpoint(0).port);
  nowhere.endpoints.front().host = "no-such-etcd.invalid";
  EtcdStore bad(nowhere);
  CHECK_THROWS_WITH(bad.ping(),
                    Contains("etcd at no-such-etcd.invalid:" + std::to_string(etcd.endpoint(0).port) +
                             " unreachable: cannot resolve host"));
}

TEST_CASE("etcd bad input: an HTTP server that is not etcd is a ConfigError naming it") {
  TempDir dir;
  const auto requests = dir / "requests";
  const FakeHttpMember server(dir, kNotEtcd, {requests.string()});
  const int port = server.port;
  EtcdStore s(one(static_cast<std::uint16_t>(port)));
  CHECK_THROWS_AS(s.ping(), ddp::ConfigError);
  // No retrying a misconfiguration: the server saw exactly one request.
  const auto log = ddp::test::read_file(requests);
  INFO(log);
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
  CHECK_THROWS_WITH(s.try_get("k"), Contains("127.0.0.1:" + std::to_string(port) +
                                             " is not an etcd v3 endpoint (HTTP 404 on /v3/kv/range)"));
  CHECK_THROWS_WITH(s.watch("", 0, [](const WatchEvent&) {}), Contains("is not an etcd v3 endpoint"));
}

TEST_CASE("etcd bad input: python's http.server (HTTP 501 to POST) is not etcd either") {
  TempDir dir;
  const int port = ddp::test::free_port();
  ddp::test::Process server(
      {"/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1", std::to_string(port)}, dir.path());
  EtcdStore s(one(static_cast<std::uint16_t>(port)));
  std::string error;
  REQUIRE(ddp::test::wait_until([&] {
    try {
      s.ping();
    } catch (const ddp::ConfigError& e) {
      error = e.what();
      return true;
    } catch (const ddp::NetworkError&) {  // not listening yet
    }
    return false;
  }));
  CHECK_THAT(error, Contains("is not an etcd v3 endpoint (HTTP 501 on /v3/kv/range)"));
}

TEST_CASE("etcd bad input: https options against a plain etcd fail the TLS handshake, naming the endpoint") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  auto o = etcd.options();
  o.connect_timeout = 500ms;
  o.ca_file = ddp::test::make_self_signed_cert(dir.path()).cert_file;
  EtcdStore s(o);
  CHECK_THROWS_AS(s.ping(), ddp::ConfigError);
  CHECK_THROWS_WITH(s.ping(),
                    Contains("TLS handshake with etcd at " + etcd.endpoint(0).to_string() + " failed"));
}

TEST_CASE("etcd TLS: a TLS etcd works with its CA, and refuses plain http or a wrong CA clearly") {
  TempDir dir;
  const auto server = ddp::test::make_self_signed_cert(dir.path());
  EtcdCluster etcd(dir.path(), 1, server);
  auto good = etcd.options();
  REQUIRE(good.tls());
  EtcdStore s(good);
  s.set("secure", "yes");
  CHECK(s.get("secure", 1s) == "yes");

  auto plain = good;
  plain.ca_file.clear();
  // No retrying a misconfiguration: were the mismatch retried like an outage,
  // ping would only return after this hour (and the ctest timeout fails it).
  plain.connect_timeout = 1h;
  const auto https_hint = "etcd at " + etcd.endpoint(0).to_string() + " serves https";
  CHECK_THROWS_AS(EtcdStore(plain).ping(), ddp::ConfigError);
  CHECK_THROWS_WITH(EtcdStore(plain).ping(), Contains(https_hint));
  CHECK_THROWS_WITH(EtcdStore(plain).watch("", 0, [](const WatchEvent&) {}), Contains(https_hint));

  auto wrong = good;
  wrong.connect_timeout = 500ms;
  wrong.ca_file = ddp::test::make_self_signed_cert(dir.path(), "other").cert_file;
  CHECK_THROWS_AS(EtcdStore(wrong).ping(), ddp::ConfigError);
  CHECK_THROWS_WITH(EtcdStore(wrong).ping(), Contains("certificate verify failed"));
}

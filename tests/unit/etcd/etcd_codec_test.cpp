#include "etcd_codec.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "ddp/store/etcd_store.hpp"
#include "test_support.hpp"

using namespace ddp::store;
using namespace ddp::store::etcd;
using Catch::Matchers::Contains;

TEST_CASE("etcd codec: base64 matches the RFC 4648 vectors and round-trips every byte") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
  CHECK(base64_decode("Zm9vYg==") == "foob");
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (std::size_t n = 0; n <= all.size(); n += 7)
    CHECK(base64_decode(base64_encode(all.substr(0, n))) == all.substr(0, n));
  CHECK_THROWS_AS(base64_decode("Zm9v!"), ddp::ProtocolError);
}

TEST_CASE("etcd codec: prefix_end is the first key after every key with the prefix") {
  CHECK(prefix_end("a/") == "a0");
  CHECK(prefix_end("ab") == "ac");
  CHECK(prefix_end(std::string("a\xff", 2)) == "b");
  CHECK(prefix_end("") == std::string(1, '\0'));
  CHECK(prefix_end(std::string("\xff\xff", 2)) == std::string(1, '\0'));
}

TEST_CASE("etcd codec: int64 fields arrive as strings, numbers or not at all") {
  const auto j = nlohmann::json::parse(R"({"revision":"42","count":7,"bad":"x1"})");
  CHECK(get_i64(j, "revision") == 42);
  CHECK(get_i64(j, "count") == 7);
  CHECK(get_i64(j, "missing") == 0);
  CHECK_THROWS_AS(get_i64(j, "bad"), ddp::ProtocolError);
  std::int64_t v = 0;
  CHECK(parse_decimal("-12", v));
  CHECK(v == -12);
  CHECK_FALSE(parse_decimal("12 ", v));
  CHECK_FALSE(parse_decimal("", v));
  CHECK_FALSE(parse_decimal("99999999999999999999", v));
}

TEST_CASE("etcd endpoints: a comma-separated list, schemes and a default port accepted") {
  auto eps = parse_etcd_endpoints("127.0.0.1:2379, http://10.0.0.2:4001/ ,https://etcd-3", "--rdzv_endpoint");
  REQUIRE(eps.size() == 3);
  CHECK(eps[0].to_string() == "127.0.0.1:2379");
  CHECK(eps[1].to_string() == "10.0.0.2:4001");
  CHECK(eps[2].to_string() == "etcd-3:2379");
}

TEST_CASE("etcd endpoints: an empty list or a bad port names the flag") {
  CHECK_THROWS_WITH(parse_etcd_endpoints(" , ", "--rdzv_endpoint"), Contains("--rdzv_endpoint"));
  CHECK_THROWS_AS(parse_etcd_endpoints("", "--rdzv_endpoint"), ddp::ConfigError);
  CHECK_THROWS_AS(parse_etcd_endpoints("h:99999", "--rdzv_endpoint"), ddp::ConfigError);
}

TEST_CASE("etcd store: unreadable or half-given TLS files are a ConfigError naming the file") {
  ddp::test::TempDir dir;
  EtcdStoreOptions o;
  o.endpoints = {ddp::Endpoint{"127.0.0.1", 2379}};
  o.ca_file = (dir / "missing-ca.pem").string();
  CHECK_THROWS_WITH(EtcdStore(o), Contains("missing-ca.pem") && Contains("etcd_cacert"));
  ddp::test::write_file(dir / "garbage.pem", "not a certificate\n");
  o.ca_file = (dir / "garbage.pem").string();
  CHECK_THROWS_AS(EtcdStore(o), ddp::ConfigError);
  o.ca_file.clear();
  o.cert_file = (dir / "garbage.pem").string();
  CHECK_THROWS_WITH(EtcdStore(o), Contains("etcd_key"));
}

TEST_CASE("etcd store: no endpoint is a ConfigError") {
  CHECK_THROWS_AS(EtcdStore(EtcdStoreOptions{}), ddp::ConfigError);
}

TEST_CASE("etcd codec: a watch message decodes its events, and a malformed one is a ProtocolError") {
  using ddp::store::etcd::decode_watch_message;
  const auto m = decode_watch_message(
      R"({"result": {"header": {"revision": "9"}, "created": true, "events": [)"
      R"({"kv": {"key": "L3Avaw==", "value": "dg==", "mod_revision": "8"}}, {"type": "DELETE", "kv": {"key": "L3AveA=="}}]}})",
      3);
  CHECK(m.has_result);
  CHECK(m.created);
  CHECK(m.header_revision == 9);
  REQUIRE(m.events.size() == 2);
  CHECK(m.events[0].key == "k");
  CHECK(m.events[0].value == "v");
  CHECK(m.events[0].revision == 8);
  CHECK(m.events[1].type == ddp::store::EventType::kDelete);
  CHECK(decode_watch_message(R"({"error": {"grpc_code": 14}})", 0).error == R"({"grpc_code":14})");
  CHECK_FALSE(decode_watch_message("{}", 0).has_result);
  CHECK_THROWS_WITH(decode_watch_message(R"({"result": {"events": [{}]}})", 0),
                    "sent a malformed watch message: an event has no 'kv' object");
  CHECK_THROWS_WITH(decode_watch_message(R"({"result": {"compact_revision": 1.5}})", 0),
                    "sent a malformed watch message: etcd sent a non-integer 'compact_revision'");
  CHECK_THROWS_WITH(decode_watch_message("[" + std::string(100, '[') + std::string(101, ']'), 0),
                    "sent a watch message that nests 101 levels deep; at most 64 are read");
}

// libFuzzer target: what an etcd member (or whatever answers in its place)
// sends: a unary answer (EtcdClient::parse_body, check_reply) and a watch
// message (decode_watch_message), within json_input::kEtcdReply. Input: the
// first byte picks the HTTP status of the answer; the rest is the body or the
// watch line. Findings: a crash, a sanitizer report or an exception other
// than the ddp errors these document.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ddp/common/error.hpp"
#include "etcd_client.hpp"
#include "etcd_codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static ddp::store::etcd::EtcdClient client([] {
    ddp::store::EtcdStoreOptions o;
    o.endpoints = {ddp::Endpoint{"127.0.0.1", 2379}};
    return o;
  }());
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  static constexpr int kStatuses[] = {200, 400, 404, 500, 502, 503};
  const int status = kStatuses[data[0] % (sizeof kStatuses / sizeof kStatuses[0])];
  try {
    if (status == 200) {
      (void)client.parse_body(0, "/v3/kv/range", body);
    } else {
      (void)client.check_reply(0, "/v3/kv/range", ddp::store::etcd::HttpReply{status, body},
                               "get of key 'k'");
    }
  } catch (const ddp::ConfigError&) {
  } catch (const ddp::ProtocolError&) {
  } catch (const ddp::StoreError&) {  // and CompactedError
  }
  try {
    (void)ddp::store::etcd::decode_watch_message(body, data[0] % 8);
  } catch (const ddp::ProtocolError&) {
  }
  return 0;
}

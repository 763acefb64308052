// Real torch clients' bytes through the server's TCPStore codec, byte for byte.
// Each capture under torch_captures/ holds what a torch client (2.0.1, 2.1.2,
// 2.2.2, 2.15.0 with use_libuv=False) sent to torch's own server on loopback
// and what that server answered. The client bytes go, connection by
// connection in the captured order, into the codec a session makes for them
// (make_codec) in the torch_legacy_protocol under test; a StoreCore answers,
// with gets/waits on missing keys parked until a later request sets them and
// CANCEL_WAIT answered as the dispatcher does; every reply must equal torch's.
#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <memory>

#include "codec.hpp"
#include "ddp/common/error.hpp"
#include "store_core.hpp"
#include "torch_capture.hpp"

using namespace ddp::store;
using namespace ddp::store::server;
using ddp::test::CaptureEvent;

namespace {

// Plays a capture's client side against one store. run() answers "" when every
// reply matched, else the first difference: the capture line, the request it
// answers, the bytes torch sent and ours.
class Replay {
 public:
  explicit Replay(TorchLegacyProtocol legacy) : legacy_(legacy) {}

  std::string run(const std::string& capture) {
    try {
      for (const auto& e : ddp::test::load_capture(capture)) {
        if (auto diff = step(e); !diff.empty()) return capture + ":" + std::to_string(e.line) + ": " + diff;
      }
    } catch (const ddp::ProtocolError& e) {
      return capture + ": the codec refused the client's bytes: " + e.what();
    }
    for (const auto& [id, c] : conns_) {
      if (!c.out.empty()) return capture + ": c" + std::to_string(id) + " got more than torch's server sent";
    }
    return "";
  }

 private:
  struct Conn {
    std::unique_ptr<Codec> codec;
    std::string out;        // reply bytes not yet matched against the capture
    std::string last_sent;  // note of the last request, for messages
  };
  struct Parked {
    int conn;
    Request req;
  };

  std::string step(const CaptureEvent& e) {
    auto& c = conns_[e.conn];
    switch (e.kind) {
      case CaptureEvent::Kind::kOpen:
      case CaptureEvent::Kind::kClose:
        return "";
      case CaptureEvent::Kind::kSend:
        if (!c.codec) {
          c.codec = make_codec(static_cast<unsigned char>(e.bytes[0]), Limits{}, true, legacy_);
          if (!c.codec) return "no codec for first byte " + ddp::test::to_hex(e.bytes.substr(0, 1));
        }
        c.last_sent = e.note;
        c.codec->feed(e.bytes, [&](Request&& req) {
          handle(e.conn, std::move(req));
          return true;
        });
        return "";
      case CaptureEvent::Kind::kReply: {
        const auto got = c.out.substr(0, e.bytes.size());
        const bool same = e.unordered
                              ? ddp::test::sorted_list_reply(got) == ddp::test::sorted_list_reply(e.bytes)
                              : got == e.bytes;
        if (!same) {
          return "reply to" + c.last_sent + ": torch's server sent " + ddp::test::to_hex(e.bytes) +
                 ", ours " + (c.out.empty() ? "nothing" : ddp::test::to_hex(c.out));
        }
        c.out.erase(0, e.bytes.size());
        return "";
      }
    }
    return "";
  }

  void handle(int conn, Request&& req) {
    if (req.op == Op::kCancel) {
      // As the dispatcher: the parked request answers CANCELLED, then the cancel OK.
      Response cancel;
      cancel.id = req.id;
      for (auto it = parked_.begin(); it != parked_.end(); ++it) {
        if (it->conn == conn && it->req.id == static_cast<std::uint32_t>(req.a)) {
          Response cancelled;
          cancelled.id = it->req.id;
          cancelled.status = Status::kCancelled;
          answer(conn, cancelled);
          parked_.erase(it);
          cancel.num = 1;
          break;
        }
      }
      answer(conn, cancel);
      return;
    }
    auto resp = core_.execute(req, ddp::Clock::now());
    if ((req.op == Op::kGet || req.op == Op::kWait) && resp.status == Status::kNotFound) {
      parked_.push_back({conn, std::move(req)});
      return;
    }
    answer(conn, resp);
    // A change may release parked gets/waits, oldest first.
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto r = core_.execute(it->req, ddp::Clock::now());
      if (r.status == Status::kNotFound) {
        ++it;
        continue;
      }
      answer(it->conn, r);
      it = parked_.erase(it);
    }
  }

  void answer(int conn, const Response& resp) {
    auto& c = conns_[conn];
    c.codec->encode(resp, c.out);
  }

  TorchLegacyProtocol legacy_;
  StoreCore core_;
  std::map<int, Conn> conns_;
  std::deque<Parked> parked_;
};

std::string replay(const std::string& capture, TorchLegacyProtocol legacy) {
  return Replay(legacy).run(capture);
}

}  // namespace

TEST_CASE("torch 2.0.1's bytes are answered as torch's own server does with torch_legacy_protocol 2.0") {
  const auto legacy = *parse_torch_legacy_protocol("2.0");
  CHECK(replay("torch-2.0.1-store-methods.txt", legacy) == "");
  CHECK(replay("torch-2.0.1-init-process-group.txt", legacy) == "");
}

TEST_CASE("torch 2.1.2's bytes are answered as torch's own server does with torch_legacy_protocol 2.1") {
  const auto legacy = *parse_torch_legacy_protocol("2.1");
  CHECK(replay("torch-2.1.2-store-methods.txt", legacy) == "");
  CHECK(replay("torch-2.1.2-init-process-group.txt", legacy) == "");
}

TEST_CASE("torch 2.2.2 and 2.15.0 (use_libuv=False) open with VALIDATE and are served whatever the setting") {
  for (const auto legacy : {TorchLegacyProtocol::kTorch1, TorchLegacyProtocol::kTorch21}) {
    CHECK(replay("torch-2.2.2-store-methods.txt", legacy) == "");
    CHECK(replay("torch-2.2.2-init-process-group.txt", legacy) == "");
    CHECK(replay("torch-2.15.0-no-libuv-store-methods.txt", legacy) == "");
  }
}

TEST_CASE("the wrong torch_legacy_protocol fails at the first op the two numberings disagree on") {
  // torch 2.0.1's DELETE_KEY (8) read as 2.1's APPEND waits for a value: no reply.
  CHECK_THAT(replay("torch-2.0.1-store-methods.txt", TorchLegacyProtocol::kTorch21),
             Catch::Contains("reply to DELETE_KEY \"/fresh\"") && Catch::Contains("ours nothing"));
  // torch 2.1.2's DELETE_KEY (7) is 1.x's WATCH_KEY: refused, naming the setting to change.
  CHECK_THAT(replay("torch-2.1.2-store-methods.txt", TorchLegacyProtocol::kTorch1),
             Catch::Contains("WATCH_KEY") && Catch::Contains("torch_legacy_protocol=2.1"));
  // torch 2.0.1's and 2.1.2's init_process_group use only the ops both share
  // (SET, GET, ADD, WAIT), so the wrong setting is not noticed there.
  CHECK(replay("torch-2.0.1-init-process-group.txt", TorchLegacyProtocol::kTorch21) == "");
  CHECK(replay("torch-2.1.2-init-process-group.txt", TorchLegacyProtocol::kTorch1) == "");
}

TEST_CASE("torch_legacy_protocol names the torch version of the clients") {
  CHECK(parse_torch_legacy_protocol("1") == TorchLegacyProtocol::kTorch1);
  CHECK(parse_torch_legacy_protocol("2.0") == TorchLegacyProtocol::kTorch1);
  CHECK(parse_torch_legacy_protocol("2.1") == TorchLegacyProtocol::kTorch21);
  for (const char* bad : {"", "2", "2.2", "2.15", "1.13", "20", " 2.0"}) {
    INFO(bad);
    CHECK_FALSE(parse_torch_legacy_protocol(bad));
  }
}

// `ddp-bench store --protocol tcpstore`: a load generator that speaks PyTorch
// 1.x's TCPStore wire protocol, so the same clients can drive torch's own
// TCPStore server and ddp-rendezvousd. Called from store_bench.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ddp/common/endpoint.hpp"

namespace ddp::bench {

struct TcpstoreRun {
  Endpoint endpoint;
  int clients = 1;
  std::int64_t ops = 0;  // per client
  std::string op;        // get|set|add
  std::size_t value_size = 16;
};

// Runs one measurement and prints one line:
//   store protocol=tcpstore op=get clients=4 ops=... seconds=... ops_per_s=... p50_us=... p99_us=...
// Throws NetworkError / ProtocolError naming the endpoint when the server fails.
void run_tcpstore(const TcpstoreRun& run);

}  // namespace ddp::bench

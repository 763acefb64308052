// Helpers for the operations tests: the ExecStart line of a generated unit, a
// TcpStore client on 127.0.0.1 (the raw HTTP GET is test_support's).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ddp/store/tcp_store.hpp"
#include "test_support.hpp"

namespace ddp::test {

// argv of the ExecStart= line of a unit generated for this build (test-units/
// point at build/bin), so the tests run exactly what systemd would run.
std::vector<std::string> unit_exec_start(const std::string& unit);

std::unique_ptr<store::TcpStore> store_client(int port);

}  // namespace ddp::test

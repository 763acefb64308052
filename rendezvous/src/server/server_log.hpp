// The "store.server" logger, looked up once per process: ddp::log::get builds
// a string and takes two locks, too much for every request and every
// connection. Loggers are never dropped (ddp::log::setup only re-levels them),
// so the one found first stays the one in use.
#pragma once

#include "ddp/common/logging.hpp"

namespace ddp::store::server {

inline spdlog::logger& server_log() {
  static const std::shared_ptr<spdlog::logger> log = ddp::log::get("store.server");
  return *log;
}

}  // namespace ddp::store::server

// A handler on a server's loop thread must not throw out of
// io_context::run(): run_contained() runs `work` and hands what it throws to
// `failed` as a log field, ` error="<what()>"`, or "" for an exception that is
// not a std::exception, so that the handler's owner logs it and drops only
// what failed (a connection, one accept).
#pragma once

#include <exception>
#include <string>

namespace ddp::store::server {

template <typename Work, typename Failed>
void run_contained(Work&& work, Failed&& failed) {
  try {
    work();
  } catch (const std::exception& e) {
    failed(std::string(" error=\"") + e.what() + "\"");
  } catch (...) {
    failed(std::string());
  }
}

}  // namespace ddp::store::server

#include "restart_limits.hpp"

#include <spdlog/logger.h>

#include <cstdio>

namespace ddp::agent {

namespace {

std::string seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%gs", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

std::string RestartLimits::judge_progress(bool progressed, spdlog::logger& log) {
  if (progressed) {
    no_progress_ = 0;
    return "";
  }
  if (!cfg_.max_no_progress_restarts) return "";
  const int limit = *cfg_.max_no_progress_restarts;
  if (no_progress_ >= limit) {
    return std::to_string(no_progress_ + 1) +
           " attempts in a row ended without progress (no heartbeat, no completed section): not restarting "
           "again (--max_no_progress_restarts=" +
           std::to_string(limit) + ")";
  }
  ++no_progress_;
  log.warn(
      "the attempt ended without progress (no heartbeat, no completed section): {}/{} restarts without "
      "progress",
      no_progress_, limit);
  return "";
}

std::string RestartLimits::count_node_failure(std::chrono::steady_clock::time_point now) {
  if (cfg_.max_node_failures <= 0) return "";
  node_failures_.push_back(now);
  while (!node_failures_.empty() && now - node_failures_.front() > cfg_.node_failure_window) {
    node_failures_.pop_front();
  }
  if (static_cast<int>(node_failures_.size()) < cfg_.max_node_failures) return "";
  const auto window = std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.node_failure_window);
  return std::to_string(node_failures_.size()) + " worker failures within " + seconds(window) +
         " (--max_node_failures=" + std::to_string(cfg_.max_node_failures) + ", --node_failure_window)";
}

}  // namespace ddp::agent

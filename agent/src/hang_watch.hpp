// Deadlines for the local workers' liveness (FileTimer scopes, heartbeats,
// sections), watched by one timer on the agent's io_context that is always
// set to the earliest deadline: detection is event-driven, there is no
// polling period, and a deadline is acted on as soon as the timer fires.
//
// Thread-safety: the io thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <tuple>

namespace ddp::agent {

// What a deadline watches; named in the failure report.
struct Deadline {
  int local_rank = 0;
  std::string source;  // "FileTimer", "heartbeat", "section"
  std::string scope;   // timer scope or section name; empty for the heartbeat
  std::chrono::steady_clock::time_point at;
  std::string detail;  // "set to expire after 2.0 s", "no heartbeat for 5.0 s"
  int signal = 9;      // FileTimer's requested signal (<= 0: do not kill)
};

class HangWatch {
 public:
  using Expired = std::function<void(const Deadline&)>;

  HangWatch(boost::asio::io_context& io, Expired expired);
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // Sets (or moves) the deadline of (local_rank, source, scope).
  void arm(const Deadline& d);
  void disarm(int local_rank, const std::string& source, const std::string& scope);
  // Every deadline of one worker (it exited or was killed), or of all.
  void clear(int local_rank);
  void clear_all();
  bool armed(int local_rank, const std::string& source, const std::string& scope) const;
  std::size_t size() const { return deadlines_.size(); }

 private:
  using Key = std::tuple<int, std::string, std::string>;
  void reschedule();
  void on_timer();

  boost::asio::steady_timer timer_;
  Expired expired_;
  std::map<Key, Deadline> deadlines_;
  std::chrono::steady_clock::time_point scheduled_ = std::chrono::steady_clock::time_point::max();
};

}  // namespace ddp::agent

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
#include <set>
#include <string>
#include <tuple>
#include <utility>

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
  // How many deadlines one worker has from one source (its live FileTimer scopes).
  std::size_t count(int local_rank, const std::string& source) const;
  std::size_t size() const { return by_key_.size(); }
  // The earliest deadline armed for one worker; max when none.
  std::chrono::steady_clock::time_point earliest(int local_rank) const;

 private:
  // Each deadline is in two ordered indexes, by what it watches and by when it
  // is due: arming, moving, disarming and expiring one are O(log n), however
  // many a worker arms (a linear scan per request made 30,000 torch scopes
  // quadratic).
  using Key = std::tuple<int, std::string, std::string>;  // local rank, source, scope
  struct Entry {
    std::chrono::steady_clock::time_point at;
    std::string detail;
    int signal = 9;
  };
  using ByKey = std::map<Key, Entry>;
  using When = std::pair<std::chrono::steady_clock::time_point, const Key*>;  // the key lives in by_key_
  struct EarlierFirst {
    bool operator()(const When& a, const When& b) const {
      if (a.first != b.first) return a.first < b.first;
      return std::less<const Key*>()(a.second, b.second);
    }
  };

  ByKey::iterator erase(ByKey::iterator it);
  void reschedule();
  void on_timer();

  boost::asio::steady_timer timer_;
  Expired expired_;
  ByKey by_key_;
  std::set<When, EarlierFirst> by_time_;
  std::map<std::pair<int, std::string>, std::size_t> counts_;  // (local rank, source) -> deadlines
  std::chrono::steady_clock::time_point scheduled_ = std::chrono::steady_clock::time_point::max();
};

}  // namespace ddp::agent

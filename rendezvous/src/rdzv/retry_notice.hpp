// Says that the rendezvous store cannot be reached yet while the first connect
// keeps retrying: once at the first failed attempt, then every kInterval, so
// that a typo in --rdzv_endpoint is seen at once instead of after the whole
// join timeout (600 s by default), and a slow store does not flood the log.
// One warning line on the `rdzv` logger:
//   cannot reach head:29400 yet (WHY); retrying until 12:41:07 (--rdzv_conf join_timeout)
//
// Thread-safety: call from one thread at a time (a client's I/O thread).
#pragma once

#include <chrono>
#include <string>

namespace ddp::rdzv::detail {

class RetryNotice {
 public:
  // Why 30 s: torchrun prints every retry; one line per half minute is
  // enough to see that it is still waiting, and what for.
  static constexpr std::chrono::seconds kInterval{30};

  // `where`: the endpoint as the user gave it; `wait`: how long the connect
  // keeps retrying from now; `wait_name`: the setting that says so.
  RetryNotice(std::string where, std::chrono::milliseconds wait, std::string wait_name);

  void operator()(const std::string& why);

 private:
  std::string where_;
  std::string wait_name_;
  std::chrono::system_clock::time_point until_;
  std::chrono::steady_clock::time_point next_{};
  bool said_ = false;
};

}  // namespace ddp::rdzv::detail

// The part of a server that runs on its own thread and that the store server
// and the torch proxy share: the listening socket, an accept loop that goes on
// after a failed accept() (EMFILE, ...) or a failed admission, and the thread
// that runs the io_context, with its start/stop.
//
// Thread-safety: start(), stop(), on_loop() and port() may be called from any
// thread but the loop's (stop() joins it); the hooks run on the loop thread.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ddp/common/error.hpp"

namespace ddp::store::server {

class AcceptLoop {
 public:
  struct Options {
    std::string logger{};        // "store.server"
    std::string name{};          // the server in messages: "store", "torch store proxy"
    std::string loop{};          // the loop in run_surviving's message: "server"
    std::string accepted{};      // what an accepted socket is, in log lines: "a connection"
    std::string error_prefix{};  // in front of a listen error: "torch store proxy: "
    bool reuse_address = false;
    std::string no_fds_hint{};  // ends the accept-failure warning when out of descriptors
  };
  struct Hooks {
    // Takes one accepted connection. May throw: the error is logged and
    // accepting goes on.
    std::function<void(boost::asio::ip::tcp::socket)> admit{};
    // Out of descriptors: closes a connection to free one for the next
    // accept; true when it did. Optional.
    std::function<bool()> make_room{};
    // At stop(), once the listening socket is closed: ends the connections
    // and stops io() (at once or when they are done).
    std::function<void()> stopping{};
  };

  AcceptLoop(Options options, Hooks hooks);
  ~AcceptLoop();  // stop()

  boost::asio::io_context& io() { return io_; }

  // Under the start lock, the first time only: `open` prepares the server and
  // calls listen(); then accepting starts on the loop thread. False when it
  // had already started.
  bool start(const std::function<void()>& open);
  // Binds `ep` and listens. Throws NetworkError "<error_prefix>cannot listen on <where>: ...".
  void listen(const boost::asio::ip::tcp::endpoint& ep, const std::string& where);
  // Stops accepting, runs the stopping hook and joins the thread. False when
  // it was not running.
  bool stop();

  std::uint16_t port() const { return port_.load(); }

  // `read()` run on the loop thread (or here once the loop has joined); `R{}`
  // before start(). TimeoutError when the loop does not answer in `timeout`.
  template <typename F>
  auto on_loop(F read, std::chrono::milliseconds timeout) -> decltype(read());

 private:
  void accept();
  void accept_failed(boost::system::error_code ec);
  void run();

  Options options_;
  Hooks hooks_;
  boost::asio::io_context io_{1};
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  std::uint64_t accept_failures_ = 0;  // in a row (loop thread)
  std::atomic<std::uint16_t> port_{0};
  std::mutex mu_;
  bool started_ = false;
  bool stopped_ = false;
  std::thread thread_;
};

template <typename F>
auto AcceptLoop::on_loop(F read, std::chrono::milliseconds timeout) -> decltype(read()) {
  using R = decltype(read());
  std::unique_lock<std::mutex> lk(mu_);
  if (!started_) return R{};
  if (stopped_) return read();  // loop joined: safe to read here
  // Shared: a caller that gave up must not leave the loop a dangling promise.
  auto p = std::make_shared<std::promise<R>>();
  auto f = p->get_future();
  boost::asio::post(io_, [p, read] {
    try {
      p->set_value(read());
    } catch (...) {
      p->set_exception(std::current_exception());
    }
  });
  lk.unlock();
  if (f.wait_for(timeout) != std::future_status::ready) {
    throw TimeoutError("the " + options_.name + "'s loop thread did not answer within " +
                       std::to_string(timeout.count()) + " ms");
  }
  return f.get();
}

}  // namespace ddp::store::server

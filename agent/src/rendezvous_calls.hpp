// The part of the agent that owns the blocking rendezvous calls: the handler,
// the thread they run on, and the way their results come back to the io
// thread. Every callback runs on the io thread, and only while the
// io_context exists (a call still blocked at destruction is abandoned, see
// BlockingCaller).
//
// Thread-safety: construct, call and destroy on the io thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "blocking_caller.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "health_check.hpp"
#include "lifecycle.hpp"

namespace ddp::agent {

class RendezvousCalls {
 public:
  using ErrorFn = std::function<void(const std::string& message)>;

  RendezvousCalls(boost::asio::io_context& io, std::shared_ptr<rdzv::RendezvousHandler> handler);
  ~RendezvousCalls();
  RendezvousCalls(const RendezvousCalls&) = delete;
  RendezvousCalls& operator=(const RendezvousCalls&) = delete;

  const std::shared_ptr<rdzv::RendezvousHandler>& handler() const { return handler_; }

  // Round events the handler raises on its own thread, delivered on the io thread.
  void on_event(rdzv::RoundEventCallback fn);
  // Members leaving the running round, delivered on the io thread instead of
  // kMembershipChanged (RendezvousHandler::set_departure_callback); an empty
  // `fn` gives them back to on_event.
  void on_departure(std::function<void(const rdzv::Departure&)> fn);
  // Newcomers to the running round, delivered on the io thread instead of
  // kNodesWaiting; an empty `fn` gives them back to on_event.
  void on_newcomer(std::function<void(std::int64_t round, const std::string& detail)> fn);
  // admit_newcomers on the rendezvous thread; an error is logged by `failed`.
  void admit_newcomers(std::int64_t round, bool admit, const std::string& detail, ErrorFn failed);
  // settle_place(d, offer, may_shrink) on the rendezvous thread.
  void settle_place(const rdzv::Departure& d, bool offer, bool may_shrink,
                    std::function<void(const rdzv::Place&)> done, ErrorFn failed);

  // next_rendezvous(); a failure comes with the exit code it means (kConfig
  // for a ConfigError, kExcluded for an ExcludedError, else kRendezvous), and
  // a job that finished while this node waited to join it with kOk.
  void next_round(std::function<void(const rdzv::RendezvousResult&)> done,
                  std::function<void(ExitCode, const std::string&)> failed);
  // report_failure(reason); `failed` may be empty (the error is then ignored).
  void report_failure(const std::string& reason, ErrorFn failed = {});
  void report_success(std::function<void()> done, ErrorFn failed);
  void all_succeeded(std::function<void(bool)> done, ErrorFn failed);
  // exclude_self(why); a failure comes as its message.
  void exclude_self(const std::string& why, std::function<void(const rdzv::Exclusion&)> done, ErrorFn failed);
  // The handler's store: set `key` (errors ignored: what is written is
  // advisory), then `done` on the io thread, whether it worked or not.
  void set_key(const std::string& key, const std::string& value, std::function<void()> done = {});
  // The values under `prefix` in the handler's store; none when it cannot be read.
  void list_values(const std::string& prefix, std::function<void(std::vector<std::string>)> done);
  // close(reason), then `done` whether it worked or not; `done` may be empty.
  void close(const std::string& reason, std::function<void()> done = {});

  // The handler's store(), made on the rendezvous thread now, so that a new
  // client's connect overlaps what the caller does next instead of starting
  // the first health check. Errors are left to the calls that need the store.
  // The destructor waits for it (a connect is bounded by its timeout).
  void connect_store();

  // check->run() with the handler's store, on the rendezvous thread (the
  // command may run for its whole timeout); `done` gets the verdict.
  void check_health(std::shared_ptr<HealthCheck> check, std::function<void(const HealthVerdict&)> done);

  // True while a call runs or waits to run.
  bool busy() const { return caller_->busy(); }

 private:
  std::shared_ptr<IoSink> sink_;
  // Shared with closures on the blocking thread, which may outlive us (abandon).
  std::shared_ptr<rdzv::RendezvousHandler> handler_;
  std::unique_ptr<BlockingCaller> caller_;  // after handler_: destroyed first
  // connect_store()'s call: never abandoned, so that the handler it holds is
  // not destroyed on the blocking thread.
  std::future<void> store_connected_;
};

}  // namespace ddp::agent

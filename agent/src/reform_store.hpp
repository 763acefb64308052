// The agent's writes to the workers' store for --on_failure=reform
// (docs/reform.md, "The contract between agent and SDK"): why a slot was
// lost, the new size and the new generation, in that order. Store calls
// block, so they run on a thread of their own, with a client of the workers'
// store made on first use; results come back on the io thread, only while
// the io_context exists.
//
// Thread-safety: construct, call and destroy on the io thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "blocking_caller.hpp"
#include "ddp/common/endpoint.hpp"

namespace ddp::agent {

class ReformStore {
 public:
  // Lost workers: one, or every worker of a lost node.
  struct Loss {
    Endpoint store;      // the round's store_endpoint, which the workers use
    std::string token;   // the store's auth token; empty: none
    std::string prefix;  // R: store::keys::reform_prefix(the round's worker_prefix)
    std::vector<int> slots;
    std::string reason;  // one line
    int delta = 0;       // added to R/size: 0 with replacements, minus the slots without
    // R/size may not fall below this: then R/generation is left alone and
    // `below_min` says so.
    std::int64_t min_size = 0;
    // Nothing is written while R/finished is above 0: `finished` says so.
    bool unless_finished = false;
  };
  struct Outcome {
    std::int64_t size = 0;        // R/size after the add
    std::int64_t generation = 0;  // R/generation after the add
    bool below_min = false;
    std::int64_t finished = 0;  // R/finished, with unless_finished; nothing written when above 0
  };

  explicit ReformStore(boost::asio::io_context& io);
  ~ReformStore();
  ReformStore(const ReformStore&) = delete;
  ReformStore& operator=(const ReformStore&) = delete;

  // set(R/lost/<slot>) for each slot, add(R/size, delta), then (unless below min_size)
  // add(R/generation, 1) (store/job_keys.hpp); `failed` gets the store's error.
  void lose(Loss loss, std::function<void(const Outcome&)> done,
            std::function<void(const std::string&)> failed);

  // add(R/finished, 1): a worker of the round exited 0. Its error, if any, is
  // dropped (a re-form then waits for the finished worker until its stall).
  void finished(Endpoint store, std::string token, std::string prefix);
  // R/finished: how many workers of the round exited 0 while it ran.
  void finished_count(Endpoint store, std::string token, std::string prefix,
                      std::function<void(std::int64_t)> done, std::function<void(const std::string&)> failed);

  // Whether a worker of the round (`prefix` is its R) ever joined a
  // ddp::ElasticGroup: R/g0/joined exists once the first generation's members
  // count themselves in. A program that never does (a torch worker) cannot
  // re-form, and its siblings would wait in their collectives.
  void probe(Endpoint store, std::string token, std::string prefix, std::function<void(bool)> done,
             std::function<void(const std::string&)> failed);

  // Watches R/stalled (`prefix` is R) from now on: `stalled` gets the
  // generation each time a member of one names it stalled (docs/reform.md,
  // "A slot that never joins"). Replaces the previous watch; `failed` gets
  // why the watch could not start or ended.
  void watch_stalled(Endpoint store, std::string token, std::string prefix,
                     std::function<void(std::int64_t generation)> stalled,
                     std::function<void(const std::string&)> failed);
  // Stops the watch of watch_stalled.
  void unwatch();
  // The slots in R/g<G>/members while G is the current generation and not
  // full; nullopt once G is full or was left (nothing is missing any more).
  // `finished`: R/finished, read with them.
  void joined(Endpoint store, std::string token, std::string prefix, std::int64_t generation,
              std::function<void(std::optional<std::vector<int>>, std::int64_t finished)> done,
              std::function<void(const std::string&)> failed);

  bool busy() const { return caller_->busy(); }

 private:
  struct Client;  // the store's client, made and used on the caller's thread only
  std::shared_ptr<IoSink> sink_;
  std::shared_ptr<Client> client_;
  std::unique_ptr<BlockingCaller> caller_;  // last: destroyed first
};

}  // namespace ddp::agent

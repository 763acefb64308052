#include "reform_store.hpp"

#include <algorithm>
#include <chrono>
#include <string_view>

#include "ddp/common/parse.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/tcp_store.hpp"

namespace ddp::agent {

namespace {
// The workers' store is up while they run; a store that does not answer in
// this long is lost, and the agent restarts the group instead.
constexpr std::chrono::seconds kStoreTimeout{10};
}  // namespace

struct ReformStore::Client {
  Endpoint endpoint;
  std::unique_ptr<store::TcpStore> store;
  std::unique_ptr<store::WatchHandle> stalled;  // after `store`: destroyed before it

  // The client for `to`, made on first use (or when the round's store moved).
  store::TcpStore& connected(const Endpoint& to, const std::string& token) {
    if (!store || endpoint.host != to.host || endpoint.port != to.port) {
      stalled.reset();
      store.reset();
      store::TcpStoreOptions o;
      o.endpoint = to;
      o.token = token;
      o.connect_timeout = kStoreTimeout;
      o.request_timeout = kStoreTimeout;
      store = std::make_unique<store::TcpStore>(o);
      endpoint = to;
    }
    return *store;
  }
};

ReformStore::ReformStore(boost::asio::io_context& io)
    : sink_(std::make_shared<IoSink>(io)),
      client_(std::make_shared<Client>()),
      caller_(std::make_unique<BlockingCaller>()) {}

ReformStore::~ReformStore() {
  sink_->close();
  caller_.reset();
}

void ReformStore::lose(Loss loss, std::function<void(const Outcome&)> done,
                       std::function<void(const std::string&)> failed) {
  caller_->call(
      [c = client_, s = sink_, loss = std::move(loss), done = std::move(done), failed = std::move(failed)] {
        try {
          auto& store = c->connected(loss.store, loss.token);
          Outcome out;
          if (loss.unless_finished) {
            out.finished = store.add(store::keys::reform_finished_key(loss.prefix), 0);
            if (out.finished > 0) {
              s->post([done, out] { done(out); });
              return;
            }
          }
          for (const int slot : loss.slots)
            store.set(store::keys::reform_lost_key(loss.prefix, slot), loss.reason);
          out.size = store.add(store::keys::reform_size_key(loss.prefix), loss.delta);
          out.below_min = out.size < loss.min_size;
          if (!out.below_min) out.generation = store.add(store::keys::reform_generation_key(loss.prefix), 1);
          s->post([done, out] { done(out); });
        } catch (const std::exception& e) {
          s->post([failed, m = std::string(e.what())] { failed(m); });
        }
      });
}

void ReformStore::finished(Endpoint endpoint, std::string token, std::string prefix) {
  caller_->call(
      [c = client_, endpoint = std::move(endpoint), token = std::move(token), prefix = std::move(prefix)] {
        try {
          c->connected(endpoint, token).add(store::keys::reform_finished_key(prefix), 1);
        } catch (const std::exception&) {
          // The job is ending or its store is gone; the stall rule still applies.
        }
      });
}

void ReformStore::finished_count(Endpoint endpoint, std::string token, std::string prefix,
                                 std::function<void(std::int64_t)> done,
                                 std::function<void(const std::string&)> failed) {
  caller_->call([c = client_, s = sink_, endpoint = std::move(endpoint), token = std::move(token),
                 prefix = std::move(prefix), done = std::move(done), failed = std::move(failed)] {
    try {
      const std::int64_t n = c->connected(endpoint, token).add(store::keys::reform_finished_key(prefix), 0);
      s->post([done, n] { done(n); });
    } catch (const std::exception& e) {
      s->post([failed, m = std::string(e.what())] { failed(m); });
    }
  });
}

void ReformStore::probe(Endpoint endpoint, std::string token, std::string prefix,
                        std::function<void(bool)> done, std::function<void(const std::string&)> failed) {
  caller_->call([c = client_, s = sink_, endpoint = std::move(endpoint), token = std::move(token),
                 prefix = std::move(prefix), done = std::move(done), failed = std::move(failed)] {
    try {
      const bool joined =
          c->connected(endpoint, token).try_get(store::keys::reform_joined_key(prefix, 0)).has_value();
      s->post([done, joined] { done(joined); });
    } catch (const std::exception& e) {
      s->post([failed, m = std::string(e.what())] { failed(m); });
    }
  });
}

void ReformStore::watch_stalled(Endpoint endpoint, std::string token, std::string prefix,
                                std::function<void(std::int64_t)> stalled,
                                std::function<void(const std::string&)> failed) {
  caller_->call([c = client_, s = sink_, endpoint = std::move(endpoint), token = std::move(token),
                 prefix = std::move(prefix), stalled = std::move(stalled), failed = std::move(failed)] {
    try {
      auto& store = c->connected(endpoint, token);
      c->stalled.reset();
      const std::string key = store::keys::reform_stalled_key(prefix);
      // On the store's thread: parse, and hand the generation to the io thread.
      auto on_event = [s, key, stalled](const store::WatchEvent& ev) {
        if (ev.type != store::EventType::kPut || ev.key != key) return;
        if (const auto g = parse_int<std::int64_t>(ev.value)) s->post([stalled, g = *g] { stalled(g); });
      };
      auto on_error = [s, failed](const std::string& why) { s->post([failed, why] { failed(why); }); };
      c->stalled = store.watch(key, 0, std::move(on_event), std::move(on_error));
    } catch (const std::exception& e) {
      s->post([failed, m = std::string(e.what())] { failed(m); });
    }
  });
}

void ReformStore::unwatch() {
  caller_->call([c = client_] { c->stalled.reset(); });
}

void ReformStore::joined(Endpoint endpoint, std::string token, std::string prefix, std::int64_t generation,
                         std::function<void(std::optional<std::vector<int>>, std::int64_t)> done,
                         std::function<void(const std::string&)> failed) {
  caller_->call([c = client_, s = sink_, endpoint = std::move(endpoint), token = std::move(token),
                 prefix = std::move(prefix), generation, done = std::move(done), failed = std::move(failed)] {
    try {
      auto& store = c->connected(endpoint, token);
      std::optional<std::vector<int>> slots;
      if (store.add(store::keys::reform_generation_key(prefix), 0) == generation &&
          !store.check({store::keys::reform_full_key(prefix, generation)})) {
        // "<slot>:<s>," per member (docs/reform.md).
        const std::string members =
            store.try_get(store::keys::reform_members_key(prefix, generation)).value_or("");
        slots.emplace();
        for (std::size_t pos = 0; pos < members.size();) {
          const std::size_t comma = std::min(members.find(',', pos), members.size());
          const std::string_view entry = std::string_view(members).substr(pos, comma - pos);
          if (const auto slot = parse_int<int>(entry.substr(0, entry.find(':')))) slots->push_back(*slot);
          pos = comma + 1;
        }
        std::sort(slots->begin(), slots->end());
      }
      const std::int64_t finished = slots ? store.add(store::keys::reform_finished_key(prefix), 0) : 0;
      s->post([done, slots = std::move(slots), finished] { done(slots, finished); });
    } catch (const std::exception& e) {
      s->post([failed, m = std::string(e.what())] { failed(m); });
    }
  });
}

}  // namespace ddp::agent

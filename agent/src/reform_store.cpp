#include "reform_store.hpp"

#include <chrono>

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

  // The client for `to`, made on first use (or when the round's store moved).
  store::TcpStore& connected(const Endpoint& to, const std::string& token) {
    if (!store || endpoint.host != to.host || endpoint.port != to.port) {
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
          store.set(store::keys::reform_lost_key(loss.prefix, loss.slot), loss.reason);
          out.size = store.add(store::keys::reform_size_key(loss.prefix), loss.delta);
          out.below_min = out.size < loss.min_size;
          if (!out.below_min) out.generation = store.add(store::keys::reform_generation_key(loss.prefix), 1);
          s->post([done, out] { done(out); });
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

}  // namespace ddp::agent

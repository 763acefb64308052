#include "reform_store.hpp"

#include <chrono>

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
          if (!c->store || c->endpoint.host != loss.store.host || c->endpoint.port != loss.store.port) {
            c->store.reset();
            store::TcpStoreOptions o;
            o.endpoint = loss.store;
            o.token = loss.token;
            o.connect_timeout = kStoreTimeout;
            o.request_timeout = kStoreTimeout;
            c->store = std::make_unique<store::TcpStore>(o);
            c->endpoint = loss.store;
          }
          Outcome out;
          c->store->set(loss.prefix + "lost/" + std::to_string(loss.slot), loss.reason);
          out.size = c->store->add(loss.prefix + "size", loss.delta);
          out.below_min = out.size < loss.min_size;
          if (!out.below_min) out.generation = c->store->add(loss.prefix + "generation", 1);
          s->post([done, out] { done(out); });
        } catch (const std::exception& e) {
          s->post([failed, m = std::string(e.what())] { failed(m); });
        }
      });
}

}  // namespace ddp::agent

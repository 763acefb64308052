#include "rendezvous_calls.hpp"

#include <boost/asio/post.hpp>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

RendezvousCalls::RendezvousCalls(boost::asio::io_context& io,
                                 std::shared_ptr<rdzv::RendezvousHandler> handler)
    : sink_(std::make_shared<IoSink>(io)),
      handler_(std::move(handler)),
      caller_(std::make_unique<BlockingCaller>()) {}

RendezvousCalls::~RendezvousCalls() {
  if (store_connected_.valid()) store_connected_.wait();
  sink_->close();
  caller_.reset();
}

void RendezvousCalls::on_event(rdzv::RoundEventCallback fn) {
  handler_->set_event_callback(
      [s = sink_, fn = std::move(fn)](std::int64_t round, rdzv::RoundEvent e, const std::string& detail) {
        s->post([fn, round, e, detail] { fn(round, e, detail); });
      });
}

void RendezvousCalls::on_departure(std::function<void(const rdzv::Departure&)> fn) {
  if (!fn) return handler_->set_departure_callback(nullptr);
  handler_->set_departure_callback(
      [s = sink_, fn = std::move(fn)](const rdzv::Departure& d) { s->post([fn, d] { fn(d); }); });
}

void RendezvousCalls::on_newcomer(std::function<void(std::int64_t, const std::string&)> fn) {
  if (!fn) return handler_->set_newcomer_callback(nullptr);
  handler_->set_newcomer_callback([s = sink_, fn = std::move(fn)](std::int64_t round, const std::string& d) {
    s->post([fn, round, d] { fn(round, d); });
  });
}

void RendezvousCalls::admit_newcomers(std::int64_t round, bool admit, const std::string& detail,
                                      ErrorFn failed) {
  caller_->call([h = handler_, s = sink_, round, admit, detail, failed = std::move(failed)] {
    try {
      h->admit_newcomers(round, admit, detail);
    } catch (const std::exception& e) {
      s->post([failed, m = std::string(e.what())] { failed(m); });
    }
  });
}

void RendezvousCalls::settle_place(const rdzv::Departure& d, bool offer, bool may_shrink,
                                   std::function<void(const rdzv::Place&)> done, ErrorFn failed) {
  caller_->call(
      [h = handler_, s = sink_, d, offer, may_shrink, done = std::move(done), failed = std::move(failed)] {
        try {
          const rdzv::Place p = h->settle_place(d, offer, may_shrink);
          s->post([done, p] { done(p); });
        } catch (const std::exception& e) {
          s->post([failed, m = std::string(e.what())] { failed(m); });
        }
      });
}

void RendezvousCalls::next_round(std::function<void(const rdzv::RendezvousResult&)> done,
                                 std::function<void(ExitCode, const std::string&)> failed) {
  caller_->call([h = handler_, s = sink_, done = std::move(done), failed = std::move(failed)] {
    try {
      auto r = h->next_rendezvous();
      log::set_status_line("");  // a "waiting for nodes" line, if one is shown
      s->post([done, r] { done(r); });
    } catch (const ConfigError& e) {
      log::set_status_line("");
      s->post([failed, m = std::string(e.what())] { failed(ExitCode::kConfig, m); });
    } catch (const ExcludedError& e) {
      log::set_status_line("");
      s->post([failed, m = std::string(e.what())] { failed(ExitCode::kExcluded, m); });
    } catch (const JobFinished& e) {
      log::set_status_line("");
      s->post([failed, m = std::string(e.what())] { failed(ExitCode::kOk, m); });
    } catch (const std::exception& e) {
      log::set_status_line("");
      s->post([failed, m = std::string(e.what())] { failed(ExitCode::kRendezvous, m); });
    }
  });
}

void RendezvousCalls::report_failure(const std::string& reason, ErrorFn failed) {
  caller_->call([h = handler_, s = sink_, reason, failed = std::move(failed)] {
    try {
      h->report_failure(reason);
    } catch (const std::exception& e) {
      if (failed) s->post([failed, m = std::string(e.what())] { failed(m); });
    }
  });
}

void RendezvousCalls::report_success(std::function<void()> done, ErrorFn failed) {
  caller_->call([h = handler_, s = sink_, done = std::move(done), failed = std::move(failed)] {
    try {
      h->report_success();
      s->post(done);
    } catch (const std::exception& e) {
      s->post([failed, m = std::string(e.what())] { failed(m); });
    }
  });
}

void RendezvousCalls::all_succeeded(std::function<void(bool)> done, ErrorFn failed) {
  caller_->call([h = handler_, s = sink_, done = std::move(done), failed = std::move(failed)] {
    try {
      const bool all = h->all_succeeded();
      s->post([done, all] { done(all); });
    } catch (const std::exception& e) {
      s->post([failed, m = std::string(e.what())] { failed(m); });
    }
  });
}

void RendezvousCalls::exclude_self(const std::string& why, std::function<void(const rdzv::Exclusion&)> done,
                                   ErrorFn failed) {
  caller_->call([h = handler_, s = sink_, why, done = std::move(done), failed = std::move(failed)] {
    try {
      auto ex = h->exclude_self(why);
      s->post([done, ex] { done(ex); });
    } catch (const std::exception& e) {
      s->post([failed, m = std::string(e.what())] { failed(m); });
    }
  });
}

void RendezvousCalls::set_key(const std::string& key, const std::string& value, std::function<void()> done) {
  caller_->call([h = handler_, s = sink_, key, value, done = std::move(done)] {
    try {
      h->store()->set(key, value);
    } catch (const std::exception&) {
      // Advisory: the failure itself travels by report_failure.
    }
    if (done) s->post(done);
  });
}

void RendezvousCalls::list_values(const std::string& prefix,
                                  std::function<void(std::vector<std::string>)> done) {
  caller_->call([h = handler_, s = sink_, prefix, done = std::move(done)] {
    std::vector<std::string> values;
    try {
      for (auto& kv : h->store()->list(prefix).kvs) values.push_back(std::move(kv.value));
    } catch (const std::exception&) {
      values.clear();
    }
    s->post([done, values = std::move(values)]() mutable { done(std::move(values)); });
  });
}

void RendezvousCalls::close(const std::string& reason, std::function<void()> done) {
  caller_->call([h = handler_, s = sink_, reason, done = std::move(done)] {
    try {
      h->close(reason);
    } catch (const std::exception&) {
      // The caller exits either way: the other nodes notice through the lease.
    }
    if (done) s->post(done);
  });
}

void RendezvousCalls::connect_store() {
  auto done = std::make_shared<std::promise<void>>();
  store_connected_ = done->get_future();
  caller_->call([h = handler_, done] {
    try {
      h->store();
    } catch (const std::exception&) {
      // The health check and the rendezvous ask again and report it.
    }
    done->set_value();
  });
}

void RendezvousCalls::check_health(std::shared_ptr<HealthCheck> check,
                                   std::function<void(const HealthVerdict&)> done) {
  caller_->call([h = handler_, s = sink_, check = std::move(check), done = std::move(done)] {
    HealthVerdict v;
    try {
      const auto store = h->store();
      v = check->run(store.get());
    } catch (const std::exception& e) {
      v.note = "no store check: " + std::string(e.what());  // the rendezvous reports it
    }
    s->post([done, v] { done(v); });
  });
}

}  // namespace ddp::agent

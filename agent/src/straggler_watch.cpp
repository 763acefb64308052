#include "straggler_watch.hpp"

#include <boost/asio/post.hpp>
#include <cstdio>

#include "ddp/common/json_input.hpp"
#include "ddp/common/json_integer.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/store/job_keys.hpp"

namespace ddp::agent {

namespace {

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

nlohmann::json to_json(const Straggler& s) {
  return {{"rank", s.rank},         {"node", s.node},     {"host", s.host},       {"step_s", s.step_s},
          {"median_s", s.median_s}, {"factor", s.factor}, {"steps", s.slow_steps}};
}

// Every rank's step numbers in the status records of `round`; records of
// other rounds, and fields of the wrong type, are left out.
std::vector<RankSteps> ranks_of(const std::vector<store::KeyValue>& records, std::int64_t round) {
  std::vector<RankSteps> out;
  for (const auto& kv : records) {
    // Anyone with access to the store can write a record: bounded before it is built.
    const auto j = try_parse_json(kv.value, json_input::kStatusRecord);
    const auto r = j.is_object() ? j.find("round") : j.end();
    if (r == j.end() || !r->is_number_integer() || r->get<std::int64_t>() != round) continue;
    const auto node = j.find("node");
    const auto h = j.find("host");
    const std::string host = h != j.end() && h->is_string() ? h->get<std::string>() : "";
    const auto workers = j.find("workers");
    if (node == j.end() || !node->is_string() || workers == j.end() || !workers->is_array()) continue;
    for (const auto& w : *workers) {
      const auto rank = w.find("rank");
      const auto steps = w.find("steps");
      const auto step_s = w.find("step_s");
      if (rank == w.end() || !rank->is_number_integer() || steps == w.end() || !steps->is_number_unsigned() ||
          step_s == w.end() || !step_s->is_number()) {
        continue;
      }
      out.push_back({rank->get<int>(), node->get<std::string>(), host, steps->get<std::uint64_t>(),
                     step_s->get<double>()});
    }
  }
  return out;
}

std::vector<Straggler> stragglers_of(const nlohmann::json& list) {
  std::vector<Straggler> out;
  if (!list.is_array()) return out;
  for (const auto& s : list) {
    try {
      out.push_back({json_integer<int>(s.at("rank")), s.at("node").get<std::string>(),
                     s.at("host").get<std::string>(), s.at("step_s").get<double>(),
                     s.at("median_s").get<double>(), s.at("factor").get<double>(),
                     json_integer<std::uint64_t>(s.at("steps"))});
    } catch (const std::exception&) {
      // Not ours to trust: a verdict entry of the wrong shape names nobody.
    }
  }
  return out;
}

}  // namespace

std::string straggler_detail(const Straggler& s, double factor) {
  return "step " + fixed(s.step_s, 3) + " s, " + fixed(s.factor, 1) + "x the job's median " +
         fixed(s.median_s, 3) + " s (over " + fixed(factor, 1) + "x for " + std::to_string(s.slow_steps) +
         " steps in a row)";
}

StragglerWatch::StragglerWatch(boost::asio::io_context& io, const AgentConfig& cfg, const Lifecycle& life,
                               std::shared_ptr<spdlog::logger> log, Hooks hooks)
    : io_(io),
      cfg_(cfg),
      life_(life),
      log_(std::move(log)),
      hooks_(std::move(hooks)),
      detector_(cfg.liveness.straggler_factor, cfg.liveness.straggler_steps) {}

StragglerWatch::~StragglerWatch() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->alive = false;
}

template <typename Fn>
void StragglerWatch::post(Fn fn) {
  boost::asio::post(io_, [weak = std::weak_ptr<Shared>(shared_), fn = std::move(fn)]() mutable {
    if (const auto s = weak.lock(); s && s->alive) fn();
  });
}

BlockingCaller& StragglerWatch::caller() {
  if (!caller_) caller_ = std::make_unique<BlockingCaller>();
  return *caller_;
}

void StragglerWatch::tick() {
  if (!(cfg_.liveness.straggler_factor > 0) || !handler_ || !life_.have_round()) return;
  if (caller_ && caller_->busy()) return;  // the last look is still out: no pile-up behind a slow store
  const auto& round = life_.round();
  const std::int64_t r = round.round;
  const std::string& run_id = cfg_.rendezvous.run_id;
  if (round.group_rank == 0) {
    caller().call([this, h = handler_, s = shared_, r, prefix = store::keys::agent_status_prefix(run_id)] {
      std::vector<store::KeyValue> records;
      try {
        records = h->store()->list(prefix).kvs;
      } catch (const std::exception&) {
        return;  // advisory: the next interval looks again
      }
      auto ranks = ranks_of(records, r);
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->alive) post([this, r, ranks = std::move(ranks)] { decide(r, ranks); });
    });
    return;
  }
  // Past list_nodes_max the rendezvous read no record but this node's: group
  // rank 0's is read here, once a round, and only when a verdict came.
  std::string rank0_key;
  if (decider(r).empty()) rank0_key = store::keys::node_key(store::keys::round_prefix(run_id, r), 0);
  caller().call([this, h = handler_, s = shared_, r, key = store::keys::stragglers_key(run_id), rank0_key] {
    std::optional<std::string> value;
    std::optional<std::string> rank0;
    try {
      value = h->store()->try_get(key);
      if (value && !rank0_key.empty()) rank0 = h->store()->try_get(rank0_key);
    } catch (const std::exception&) {
      return;
    }
    if (!value) return;
    const auto j = try_parse_json(*value, json_input::kStatusRecord);
    const auto jr = j.is_object() ? j.find("round") : j.end();
    // An older round's verdict names ranks that may not exist any more.
    if (jr == j.end() || !jr->is_number_integer() || jr->get<std::int64_t>() != r) return;
    const auto jb = j.find("by");
    std::string by = jb != j.end() && jb->is_string() ? jb->get<std::string>() : "";
    auto named = stragglers_of(j.contains("stragglers") ? j.at("stragglers") : nlohmann::json());
    std::string decider;
    if (rank0) {
      const auto rec = try_parse_json(*rank0, json_input::kStatusRecord);
      const auto id = rec.is_object() ? rec.find("id") : rec.end();
      if (id != rec.end() && id->is_string()) decider = id->get<std::string>();
    }
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->alive) {
      post([this, r, named = std::move(named), by = std::move(by), decider = std::move(decider)]() mutable {
        if (!decider.empty()) {
          decider_round_ = r;
          decider_ = std::move(decider);
        }
        apply(r, std::move(named), by);
      });
    }
  });
}

void StragglerWatch::decide(std::int64_t round, const std::vector<RankSteps>& ranks) {
  if (round != detector_round_) {
    detector_.reset();
    detector_round_ = round;
  }
  auto v = detector_.update(ranks);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : v.stragglers) list.push_back(to_json(s));
  const nlohmann::json verdict = {{"round", round},
                                  {"by", cfg_.node.node_id},
                                  {"ranks", v.ranks},
                                  {"median_s", v.median_s},
                                  {"factor", cfg_.liveness.straggler_factor},
                                  {"steps", cfg_.liveness.straggler_steps},
                                  {"stragglers", std::move(list)}};
  caller().call(
      [h = handler_, key = store::keys::stragglers_key(cfg_.rendezvous.run_id), value = verdict.dump()] {
        try {
          h->store()->set(key, value);
        } catch (const std::exception&) {
          // Advisory: the others keep the last verdict until the next interval.
        }
      });
  apply(round, std::move(v.stragglers), cfg_.node.node_id);
}

bool StragglerWatch::borne_out(const Straggler& s) {
  const auto own = hooks_.own_step_s ? hooks_.own_step_s(s.rank) : std::nullopt;
  if (!own) return true;  // another node's rank: that node checks
  // Slow by this node's own measure too: over the bar against the verdict's
  // median, and not far below the step time the verdict claims for it.
  const double bar = cfg_.liveness.straggler_factor;
  if (*own >= 0 && *own > bar * s.median_s && *own >= s.step_s / 2) return true;
  if (refused_.insert("rank " + std::to_string(s.rank)).second) {
    log_->warn(
        "not acting on the straggler verdict for rank={}: its step time here is {}, not {} s as the verdict "
        "says ({}x the median {} s needs over {} s); the verdict may be forged (docs/agent-diagnosis.md, "
        "\"Stragglers\")",
        s.rank, *own >= 0 ? fixed(*own, 3) + " s" : std::string("unmeasured"), fixed(s.step_s, 3),
        fixed(bar, 1), fixed(s.median_s, 3), fixed(bar * s.median_s, 3));
    if (hooks_.emit) {
      hooks_.emit("straggler_refused", {{"rank", s.rank},
                                        {"step_s", s.step_s},
                                        {"median_s", s.median_s},
                                        {"own_step_s", *own >= 0 ? nlohmann::json(*own) : nlohmann::json()}});
    }
  }
  return false;
}

void StragglerWatch::apply(std::int64_t round, std::vector<Straggler> named, const std::string& by) {
  if (!life_.have_round() || life_.round().round != round) return;  // a new round began meanwhile
  if (round != named_round_) {
    named_.clear();  // the old round's ranks are gone with it
    refused_.clear();
    named_round_ = round;
  }
  const std::string decider = this->decider(round);
  if (by != decider) {
    // Any client with the job's token can write the key: only the deciding
    // node's verdict counts, and the last one taken stands meanwhile.
    if (refused_.insert("by").second) {  // once a round, whatever names it claims
      log_->warn(
          "ignoring a straggler verdict of round {} written as by={}: the round's deciding node (group "
          "rank 0) is {}",
          round, by.empty() ? "(none)" : by, decider);
    }
    return;
  }
  std::erase_if(named, [&](const Straggler& s) { return !borne_out(s); });
  bool changed = false;
  const double bar = cfg_.liveness.straggler_factor;
  for (const auto& s : named) {
    const bool known =
        std::any_of(named_.begin(), named_.end(), [&](const auto& o) { return o.rank == s.rank; });
    if (known) continue;
    changed = true;
    log_->warn("straggler rank={} node={} host={}: {}", s.rank, s.node, s.host, straggler_detail(s, bar));
    // "node" in an event line is the node that writes it: the rank's own is "straggler_node".
    nlohmann::json f = {{"rank", s.rank},        {"straggler_node", s.node}, {"straggler_host", s.host},
                        {"step_s", s.step_s},    {"median_s", s.median_s},   {"factor", s.factor},
                        {"steps", s.slow_steps}, {"threshold", bar}};
    if (hooks_.emit) hooks_.emit("straggler", std::move(f));
    if (cfg_.liveness.straggler_action == LivenessConfig::StragglerAction::kRestart && hooks_.act)
      hooks_.act(s);
  }
  for (const auto& o : named_) {
    const bool still =
        std::any_of(named.begin(), named.end(), [&](const auto& s) { return s.rank == o.rank; });
    if (still) continue;
    changed = true;
    log_->info("straggler rank={} node={} is back within {}x the job's median step time", o.rank, o.node,
               fixed(bar, 1));
    if (hooks_.emit) hooks_.emit("straggler_cleared", {{"rank", o.rank}, {"straggler_node", o.node}});
  }
  named_ = std::move(named);
  if (changed && hooks_.changed) hooks_.changed();
}

std::string StragglerWatch::decider(std::int64_t round) const {
  const auto& nodes = life_.round().nodes;
  if (!nodes.empty() && !nodes.front().node_id.empty()) return nodes.front().node_id;
  return decider_round_ == round ? decider_ : std::string();
}

nlohmann::json StragglerWatch::named_json() const {
  nlohmann::json out = nlohmann::json::array();
  if (!life_.have_round() || life_.round().round != named_round_) return out;
  for (const auto& s : named_) out.push_back(to_json(s));
  return out;
}

}  // namespace ddp::agent

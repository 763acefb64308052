// ddp-example-train-reform: ddp-example-train's MLP, surviving a lost rank
// in-process (docs/reform.md).
//
//   ddprun --standalone --nproc_per_node=4 --on_failure=reform --max_restarts=3
//       build/bin/ddp-example-train-reform --kill-every 40
//
// The training state lives only in the workers' memory: parameters, the
// momentum buffer and three counters (epoch, position in the epoch, step).
// When a rank is lost, a collective (or the step-boundary check) throws
// ddp::MembershipChanged; every survivor calls reform(), the lowest-ranked
// member that holds state broadcasts it to the rest (a replacement joins
// without any), the sampler deals the rest of the epoch among the new world,
// and training goes on from the last completed step. With a replacement the
// world and so every later step's samples are unchanged: the run ends with
// the same parameters as one without the failure.
//
// Under --on_failure=restart (or without ddprun's reform mode) ElasticGroup is
// a plain group and a failure restarts every worker; then rank 0 resumes from
// the checkpoint written at each epoch's end, as ddp-example-train does.
//
// --kill-every N makes the worker of slot --kill-rank (with --kill-rotate:
// slot k % WORLD_SIZE for the k-th kill) SIGKILL itself at the end of step N,
// then 2N, ... (--kills times in all): the k-th kill happens in the k-th world
// (generation, or attempt after a restart), so a replacement never repeats its
// predecessor's kill. With --stop-rank S, slot S SIGSTOPs itself in the
// re-form that such a kill starts, a second after its siblings began it (a
// survivor that stops, or is stuck in the kernel, during a re-form). With
// --fail-at-end S, slot S exits 1 once the first world's training is done
// (a process that fails in its teardown, after its siblings finished); the
// slots of --linger-slots wait --linger-ms before they exit 0 (still in their
// teardown while the others have left). Rank 0 of the new world prints each
// re-form's (or restart's) cost: the time from the SIGKILL to the next completed step, and its own reform()
// (a replacement: its join) and state broadcast times.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ddp/sdk.hpp"
#include "ddp/store/store.hpp"
#include "example_cli.hpp"
#include "mlp.hpp"

namespace {

struct Options {
  int epochs = 4;
  std::size_t batch_size = 32;  // per rank
  float lr = 0.02f;
  float momentum = 0.9f;
  int hidden = 64;
  std::size_t dataset_size = 8192;
  std::uint64_t seed = 1234;
  std::string checkpoint;
  long kill_every = 0;
  int kill_rank = -1;        // a slot; -1: the last
  bool kill_rotate = false;  // the k-th kill hits slot k % WORLD_SIZE
  int kills = 2;
  bool no_catch = false;
  int stop_rank = -1;  // a slot that SIGSTOPs itself at each --kill-every kill
  double step_sleep_ms = 0;
  int fail_at_end = -1;           // a slot whose first world's process exits 1 once training is done
  double end_sleep_ms = 0;        // --fail-at-end's siblings wait this long before they exit
  std::vector<int> linger_slots;  // slots that wait --linger-ms after the training before they exit 0
  double linger_ms = 5000;
};

// Wall-clock nanoseconds: comparable between the processes of one machine (the
// killed worker stamps its death, a survivor its next step).
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
double ms_since(std::int64_t ns) { return static_cast<double>(now_ns() - ns) / 1e6; }

enum Counter { kEpoch, kConsumed, kStep };  // kConsumed: positions of the epoch's sequence trained on
using Counters = std::array<std::int64_t, 3>;

constexpr const char* kMagic = "ddp-example-train-reform-v1";

// The restart policy's state: parameters, momentum and counters at an epoch's end.
void save_checkpoint(const std::string& path, int hidden, const Counters& c, const std::vector<float>& params,
                     const std::vector<float>& velocity) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kMagic << ' ' << hidden << ' ' << params.size() << ' ' << c[kEpoch] << ' ' << c[kConsumed] << ' '
        << c[kStep] << '\n';
    for (const auto* v : {&params, &velocity}) {
      out.write(reinterpret_cast<const char*>(v->data()),
                static_cast<std::streamsize>(v->size() * sizeof(float)));
    }
    if (!out) throw std::runtime_error("cannot write checkpoint " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

bool load_checkpoint(const std::string& path, int hidden, Counters& c, std::vector<float>& params,
                     std::vector<float>& velocity) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::string magic;
  int saved_hidden = 0;
  std::size_t count = 0;
  in >> magic >> saved_hidden >> count >> c[kEpoch] >> c[kConsumed] >> c[kStep];
  in.get();
  if (magic != kMagic || saved_hidden != hidden || count != params.size()) {
    throw ddp::ConfigError("checkpoint " + path + " does not match this model (--hidden=" +
                           std::to_string(hidden) + "); pass another --checkpoint or delete it");
  }
  for (auto* v : {&params, &velocity}) {
    in.read(reinterpret_cast<char*>(v->data()), static_cast<std::streamsize>(v->size() * sizeof(float)));
  }
  if (!in) throw ddp::ConfigError("checkpoint " + path + " is truncated; delete it");
  return true;
}

// The state a re-form hands on, as one float buffer for broadcast_state:
// parameters, momentum, then each counter in three 21-bit pieces (a float
// holds integers below 2^24 exactly, so the counters travel bit for bit).
constexpr int kPieceBits = 21;
void pack_state(const std::vector<float>& params, const std::vector<float>& velocity, const Counters& c,
                std::vector<float>& out) {
  out.assign(params.begin(), params.end());
  out.insert(out.end(), velocity.begin(), velocity.end());
  for (std::int64_t v : c) {
    for (int piece = 0; piece < 3; ++piece) {
      out.push_back(static_cast<float>((static_cast<std::uint64_t>(v) >> (piece * kPieceBits)) & 0x1fffff));
    }
  }
}
void unpack_state(const std::vector<float>& in, std::vector<float>& params, std::vector<float>& velocity,
                  Counters& c) {
  auto it = in.begin();
  std::copy_n(it, params.size(), params.begin());
  it += static_cast<std::ptrdiff_t>(params.size());
  std::copy_n(it, velocity.size(), velocity.begin());
  it += static_cast<std::ptrdiff_t>(velocity.size());
  for (std::int64_t& v : c) {
    std::uint64_t bits = 0;
    for (int piece = 0; piece < 3; ++piece) bits |= static_cast<std::uint64_t>(*it++) << (piece * kPieceBits);
    v = static_cast<std::int64_t>(bits);
  }
}

// Mean squared error of the model over the whole dataset (rank 0 only: no collective).
double evaluate(example::Mlp& model, const example::Dataset& data) {
  std::vector<std::size_t> all(data.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  double sum = 0.0;
  constexpr std::size_t kChunk = 1024;
  for (std::size_t pos = 0; pos < all.size(); pos += kChunk) {
    const std::size_t n = std::min(kChunk, all.size() - pos);
    sum +=
        model.forward_backward(data, std::span<const std::size_t>(all.data() + pos, n), [](std::size_t) {});
  }
  model.zero_grad();
  return sum / static_cast<double>(data.size());
}

// What the killed worker leaves in the store for the survivors' report: when,
// at which step, and in which world (generation, attempt). The key is outside
// the round's prefix, so a restarted round reads it too.
struct KillRecord {
  std::int64_t ns = 0, step = 0, generation = 0, attempt = 0;
};
std::string kill_key(const ddp::Context& ctx) { return "ddp-example-train-reform/" + ctx.run_id + "/killed"; }

std::optional<KillRecord> read_kill(const ddp::Context& ctx) {
  const auto value = ctx.store->try_get(kill_key(ctx));
  if (!value) return std::nullopt;
  KillRecord r;
  std::istringstream in(*value);
  if (!(in >> r.ns >> r.step >> r.generation >> r.attempt)) return std::nullopt;
  return r;
}

// A re-form or restart whose cost rank 0 reports at the next completed step.
struct Pending {
  bool restart = false;
  std::int64_t generation = 0;
  int world = 0;
  std::int64_t resumed_step = 0;
  double reform_ms = -1, state_ms = -1;  // this process's reform() and state broadcast
  std::string slots;                     // lost and new slots
};

void report(const ddp::Context& ctx, const Pending& p, std::int64_t step) {
  const auto kill = read_kill(ctx);
  // A kill of an earlier world (a restart may follow a replacement's restart too).
  const bool ours = kill && (p.restart ? kill->attempt < ctx.restart_count : kill->generation < p.generation);
  std::string cost = "rank killed -> next step ?";
  std::string lost = "?";
  if (ours) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "rank killed -> next step %.1f ms", ms_since(kill->ns));
    cost = buf;
    lost = std::to_string(kill->step - p.resumed_step);
  }
  if (p.restart) {
    std::printf("restart %d: world %d, %s, steps lost %s (resumed after step %lld, now %lld)\n",
                ctx.restart_count, p.world, cost.c_str(), lost.c_str(),
                static_cast<long long>(p.resumed_step), static_cast<long long>(step));
  } else {
    std::printf("re-form: generation %lld, world %d%s, %s (reform() %.1f ms, state %.1f ms), steps lost %s\n",
                static_cast<long long>(p.generation), p.world, p.slots.c_str(), cost.c_str(), p.reform_ms,
                p.state_ms, lost.c_str());
  }
  std::fflush(stdout);
}

// --stop-rank: a survivor that stops in the re-form, its last heartbeat a
// second after the others began to wait for it (ddprun kills it for that).
void stop_in_reform(int slot) {
  ddp::heartbeat();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ddp::heartbeat();
  std::printf("slot %d pid %d: SIGSTOP in the re-form (--stop-rank)\n", slot, static_cast<int>(getpid()));
  std::fflush(stdout);
  std::raise(SIGSTOP);
}

std::string slot_list(const std::vector<int>& slots) {
  std::string out;
  for (int s : slots) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out.empty() ? "-" : out;
}

Pending reformed(const ddp::ReformInfo& info, double reform_ms) {
  return Pending{.generation = info.generation,
                 .world = info.world_size,
                 .reform_ms = reform_ms,
                 .slots = " (lost slots " + slot_list(info.lost_slots) + ", new slots " +
                          slot_list(info.new_slots) + ")"};
}

int train(const Options& opt) {
  std::optional<ddp::Section> setup(std::in_place, "setup");
  ddp::Context ctx = ddp::init();
  ddp::ProcessGroupOptions group_options;
  group_options.backend = "gloo";
  ddp::ElasticGroup eg(ctx, group_options);
  const int slot = eg.slot();
  std::printf("slot %d pid %d start: rank %d of %d, generation %lld%s\n", slot, static_cast<int>(getpid()),
              eg.rank(), eg.size(), static_cast<long long>(eg.generation()),
              eg.info().had_state ? "" : ", joining without state");
  std::fflush(stdout);
  const std::string checkpoint =
      !opt.checkpoint.empty()
          ? opt.checkpoint
          : (std::filesystem::temp_directory_path() / ("ddp-example-train-reform-" + ctx.run_id + ".ckpt"))
                .string();

  const example::Dataset data = example::make_dataset(opt.dataset_size, opt.seed);
  example::Mlp model(opt.hidden, opt.seed + 1);
  std::vector<float> velocity(model.flat_params().size(), 0.0f);
  Counters counters{0, 0, 0};
  std::optional<Pending> pending;

  // A round's first world after a full restart resumes from the checkpoint.
  if (ctx.restart_count > 0 && eg.generation() == 0 && eg.rank() == eg.info().state_root) {
    if (load_checkpoint(checkpoint, opt.hidden, counters, model.flat_params(), velocity)) {
      std::printf("resuming from %s after epoch %lld, step %lld (restart %d)\n", checkpoint.c_str(),
                  static_cast<long long>(counters[kEpoch]), static_cast<long long>(counters[kStep]),
                  ctx.restart_count);
    }
  }
  if (ctx.restart_count > 0 && eg.generation() == 0) {
    pending = Pending{.restart = true, .world = eg.size(), .slots = ""};
  } else if (eg.generation() > 0) {  // a replacement: the new world's rank 0 may be this process
    pending = reformed(eg.info(), static_cast<double>(eg.info().took.count()) / 1e3);
  }

  ddp::Reducer reducer(eg.group(), model.grads());
  ddp::DistributedSampler sampler(data.size(), eg.size(), eg.rank(),
                                  {.shuffle = true, .seed = opt.seed, .drop_last = true});
  const auto kill_slot = [&](std::int64_t world_index) {
    if (opt.kill_rotate) return static_cast<int>(world_index % ctx.world_size);
    return opt.kill_rank >= 0 ? opt.kill_rank : ctx.world_size - 1;
  };
  const auto mark = [&](std::size_t i) { reducer.mark_ready(i); };
  bool first_step = true;

  // After every (re)form, every member: the state root's state, and the rest of
  // the epoch dealt among this world. It is also DDP's initial broadcast. One
  // collective, not three: parameters, momentum and counters packed together.
  std::vector<float> packed;
  const auto restore = [&] {
    const std::int64_t start = now_ns();
    pack_state(model.flat_params(), velocity, counters, packed);
    ddp::broadcast_state(eg.group(), eg.info().state_root, {std::span(packed)});
    unpack_state(packed, model.flat_params(), velocity, counters);
    sampler.set_epoch(static_cast<std::uint64_t>(counters[kEpoch]));
    sampler.reshard(eg.size(), eg.rank(), static_cast<std::size_t>(counters[kConsumed]));
    if (pending) {
      pending->resumed_step = counters[kStep];
      pending->state_ms = ms_since(start);
    }
  };

  setup.reset();
  bool restored = false;
  for (;;) {
    try {
      if (!restored) {
        restore();
        restored = true;
      }
      while (counters[kEpoch] < opt.epochs) {
        const std::vector<std::size_t> indices = sampler.indices();
        const std::int64_t epoch_start = now_ns();
        const std::int64_t epoch_first_step = counters[kStep];
        for (std::size_t pos = 0; pos < indices.size();) {
          ddp::Section step_section("step");
          ddp::heartbeat();
          eg.check();  // has a peer been lost since the last step? (no round trip)
          if (opt.step_sleep_ms > 0) {
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt.step_sleep_ms));
          }
          const std::size_t n = std::min(opt.batch_size, indices.size() - pos);
          model.zero_grad();
          model.forward_backward(data, std::span<const std::size_t>(indices.data() + pos, n), mark);
          reducer.finalize();
          model.sgd_step(opt.lr, opt.momentum, velocity);
          pos += n;
          counters[kConsumed] += static_cast<std::int64_t>(n) * eg.size();
          ++counters[kStep];
          if (first_step) ddp::report_first_step(ctx);
          first_step = false;
          if (pending) {
            if (eg.rank() == 0) report(ctx, *pending, counters[kStep]);
            pending.reset();
          }
          // The k-th kill in the k-th world: a replacement does not repeat it.
          const std::int64_t world_index = std::max<std::int64_t>(eg.generation(), ctx.restart_count);
          if (opt.kill_every > 0 && slot == kill_slot(world_index) && world_index < opt.kills &&
              counters[kStep] == (world_index + 1) * opt.kill_every) {
            std::printf("slot %d pid %d: SIGKILL after step %lld (--kill-every)\n", slot,
                        static_cast<int>(getpid()), static_cast<long long>(counters[kStep]));
            std::fflush(stdout);
            std::ostringstream record;  // the clock starts here
            record << now_ns() << ' ' << counters[kStep] << ' ' << eg.generation() << ' '
                   << ctx.restart_count;
            ctx.store->set(kill_key(ctx), record.str());
            std::raise(SIGKILL);
          }
        }
        ++counters[kEpoch];
        counters[kConsumed] = 0;
        sampler.set_epoch(static_cast<std::uint64_t>(counters[kEpoch]));
        if (eg.rank() == 0) {
          // step_ms: wall time per step of this epoch's steps since the last (re)form.
          const double step_ms = ms_since(epoch_start) / static_cast<double>(std::max<std::int64_t>(
                                                             1, counters[kStep] - epoch_first_step));
          std::printf("epoch %lld/%d loss %.6f step %lld step_ms %.3f\n",
                      static_cast<long long>(counters[kEpoch]), opt.epochs, evaluate(model, data),
                      static_cast<long long>(counters[kStep]), step_ms);
          std::fflush(stdout);
          ddp::Section checkpoint_section("checkpoint");
          save_checkpoint(checkpoint, opt.hidden, counters, model.flat_params(), velocity);
        }
      }
      eg.group().barrier();  // nobody leaves before everyone is done
      break;
    } catch (const ddp::MembershipChanged&) {
      if (opt.no_catch) throw;  // exits through ddp::run: the error file names MembershipChanged
      if (opt.kill_every > 0 && slot == opt.stop_rank &&
          std::max<std::int64_t>(eg.generation(), ctx.restart_count) < opt.kills) {
        stop_in_reform(slot);
      }
      const std::int64_t caught = now_ns();
      reducer.discard_step();  // the step in flight is done again in the new world
      const ddp::ReformInfo info = eg.reform();
      pending = reformed(info, ms_since(caught));
      restored = false;
    }
  }
  if (eg.rank() == 0) {
    std::printf("final loss %.9f after %lld epochs, %lld steps, %lld re-forms, %d restarts\n",
                evaluate(model, data), static_cast<long long>(counters[kEpoch]),
                static_cast<long long>(counters[kStep]), static_cast<long long>(eg.generation()),
                ctx.restart_count);
  }
  std::printf("slot %d pid %d end: rank %d of %d, generation %lld\n", slot, static_cast<int>(getpid()),
              eg.rank(), eg.size(), static_cast<long long>(eg.generation()));
  std::fflush(stdout);
  if (std::find(opt.linger_slots.begin(), opt.linger_slots.end(), slot) != opt.linger_slots.end()) {
    // A process still in its teardown (saving, uploading) after its siblings exited.
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt.linger_ms));
  }
  if (opt.fail_at_end >= 0 && ctx.restart_count == 0 && eg.generation() == 0) {
    // A process that fails in its teardown, after the training ended.
    if (slot != opt.fail_at_end) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt.end_sleep_ms));
      return 0;
    }
    if (opt.end_sleep_ms <= 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    std::printf("slot %d pid %d: exit 1 after the training (--fail-at-end)\n", slot,
                static_cast<int>(getpid()));
    std::fflush(stdout);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run_trainer<Options>(
      argc, argv, "Train a small MLP that survives a lost rank in-process (ddprun --on_failure=reform)",
      "checkpoint written at each epoch's end, read after a full restart "
      "(default: $TMPDIR/ddp-example-train-reform-<run id>.ckpt)",
      [](CLI::App& app, Options& opt) {
        app.add_option("--momentum", opt.momentum, "SGD momentum (the optimizer state a re-form hands on)")
            ->check(CLI::Range(0.0f, 0.999f));
        app.add_option("--kill-every", opt.kill_every,
                       "slot --kill-rank SIGKILLs itself after step N, 2N, ...")
            ->check(CLI::Range(1L, 1L << 40));
        app.add_option("--kill-rank", opt.kill_rank,
                       "the slot (first RANK) that is killed (default: the last)")
            ->check(CLI::Range(0, 1 << 20));
        app.add_flag("--kill-rotate", opt.kill_rotate,
                     "the k-th kill hits slot k % WORLD_SIZE (not --kill-rank)");
        app.add_option("--kills", opt.kills, "how many times --kill-every kills in all (default 2)")
            ->check(CLI::Range(0, 1 << 20));
        app.add_flag(
            "--no-catch", opt.no_catch,
            "do not catch ddp::MembershipChanged (a trainer that cannot re-form: ddprun falls back to "
            "restart)");
        app.add_option("--stop-rank", opt.stop_rank,
                       "this slot SIGSTOPs itself in the re-form a --kill-every kill starts")
            ->check(CLI::Range(0, 1 << 20));
        app.add_option("--fail-at-end", opt.fail_at_end,
                       "this slot exits 1 after the training of the first world: 2 s after its siblings "
                       "exit 0, or at once with --end-sleep-ms")
            ->check(CLI::Range(0, 1 << 20));
        app.add_option("--end-sleep-ms", opt.end_sleep_ms,
                       "with --fail-at-end, its siblings sleep this long before they exit 0")
            ->check(CLI::Range(0.0, 1e6));
        app.add_option("--linger-slots", opt.linger_slots,
                       "these slots (comma-separated) wait --linger-ms after the training before they exit 0")
            ->delimiter(',')
            ->check(CLI::Range(0, 1 << 20));
        app.add_option("--linger-ms", opt.linger_ms, "how long --linger-slots wait (default 5000)")
            ->check(CLI::Range(0.0, 1e6));
        app.add_option("--step-sleep-ms", opt.step_sleep_ms,
                       "sleep this long in every step (steady step times)")
            ->check(CLI::Range(0.0, 1e6));
      },
      train);
}

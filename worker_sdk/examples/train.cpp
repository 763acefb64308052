// ddp-example-train: data-parallel training of a small MLP with the worker SDK.
//
//   ddprun --standalone --nproc_per_node=4 build/bin/ddp-example-train --epochs 5
//
// Every rank builds the same seeded dataset and model; DistributedSampler gives
// each rank its shard, the Reducer averages gradients (overlapping the backward
// pass), rank 0 prints the loss per epoch and checkpoints, and after an elastic
// restart (TORCHELASTIC_RESTART_COUNT > 0) every rank resumes from it.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "ddp/sdk.hpp"
#include "example_cli.hpp"
#include "mlp.hpp"

namespace {

struct Options {
  int epochs = 6;
  std::size_t batch_size = 32;  // per rank, as in torch
  float lr = 0.3f;
  int hidden = 64;
  std::size_t dataset_size = 8192;
  std::uint64_t seed = 1234;
  std::string checkpoint;
  int grad_accum = 1;
  bool no_overlap = false;
  std::size_t bucket_cap_kb = 25 * 1024;
  std::size_t first_bucket_cap_kb = 1024;
  std::string dump_params;
  int fail_at_epoch = -1;
  int fail_rank = -1;
  // Hang injection for ddprun's hang detection (first attempt only).
  int stall_rank = -1;
  long stall_at_step = 1;
  double stall_seconds = 3600;
  std::string stall_in = "end";  // "end" of the step, or "compute": before its all-reduces
  double stall_late_ms = 0;      // the stalling rank enters the stall step this late
  double step_sleep_ms = 0;      // a slower, steadier step (tests of learned timeouts)
};

constexpr const char* kMagic = "ddp-example-train-checkpoint-v1";

void save_checkpoint(const std::string& path, int epochs_done, int hidden, const std::vector<float>& params) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kMagic << ' ' << epochs_done << ' ' << hidden << ' ' << params.size() << '\n';
    out.write(reinterpret_cast<const char*>(params.data()),
              static_cast<std::streamsize>(params.size() * sizeof(float)));
    if (!out) throw std::runtime_error("cannot write checkpoint " + tmp);
  }
  std::filesystem::rename(tmp, path);  // atomic: a crash never leaves half a checkpoint
}

// Returns the number of finished epochs, or -1 when there is no checkpoint.
int load_checkpoint(const std::string& path, int hidden, std::vector<float>& params) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return -1;
  std::string magic;
  int epochs_done = 0, saved_hidden = 0;
  std::size_t count = 0;
  in >> magic >> epochs_done >> saved_hidden >> count;
  in.get();
  if (magic != kMagic || count != params.size() || saved_hidden != hidden) {
    throw ddp::ConfigError("checkpoint " + path + " does not match this model (--hidden=" +
                           std::to_string(hidden) + "); pass another --checkpoint or delete it");
  }
  in.read(reinterpret_cast<char*>(params.data()), static_cast<std::streamsize>(count * sizeof(float)));
  if (!in) throw ddp::ConfigError("checkpoint " + path + " is truncated; delete it");
  return epochs_done;
}

int train(const Options& opt) {
  // Sections and heartbeats tell ddprun this worker is making progress; with
  // --section_timeouts / --heartbeat_timeout it kills one that stops.
  std::optional<ddp::Section> setup(std::in_place, "setup");
  ddp::Context ctx = ddp::init();
  ddp::ProcessGroupOptions group_options;
  group_options.backend = "gloo";  // the model lives in CPU memory
  ddp::ProcessGroup pg(ctx, group_options);
  const std::string checkpoint =
      !opt.checkpoint.empty()
          ? opt.checkpoint
          : (std::filesystem::temp_directory_path() / ("ddp-example-train-" + ctx.run_id + ".ckpt")).string();

  const example::Dataset data = example::make_dataset(opt.dataset_size, opt.seed);
  example::Mlp model(opt.hidden, opt.seed + 1);

  // Rank 0 decides where training starts and everyone takes its parameters,
  // as DDP does at construction; after a restart that is the checkpoint.
  std::int64_t start_epoch = 0;
  if (ctx.rank == 0 && ctx.restart_count > 0) {
    const int done = load_checkpoint(checkpoint, opt.hidden, model.flat_params());
    if (done >= 0) {
      start_epoch = done;
      std::printf("resuming from %s after epoch %d (restart %d)\n", checkpoint.c_str(), done,
                  ctx.restart_count);
    }
  }
  pg.broadcast(std::span(&start_epoch, 1), 0);
  pg.broadcast(model.flat_params(), 0);

  ddp::Reducer reducer(pg, model.grads(),
                       {.bucket_cap_bytes = opt.bucket_cap_kb * 1024,
                        .first_bucket_cap_bytes = opt.first_bucket_cap_kb * 1024});
  ddp::DistributedSampler sampler(data.size(), ctx.world_size, ctx.rank,
                                  {.shuffle = true, .seed = opt.seed, .drop_last = true});
  if (ctx.rank == 0 && start_epoch == 0) {
    std::printf(
        "training: world_size=%d samples=%zu batch_size=%zu/rank hidden=%d params=%zu buckets=%zu "
        "overlap=%s\n",
        ctx.world_size, data.size(), opt.batch_size, opt.hidden, model.flat_params().size(),
        reducer.buckets().size(), opt.no_overlap ? "off" : "on");
  }
  setup.reset();
  long global_step = 0;
  const auto mark = [&](std::size_t i) { reducer.mark_ready(i); };
  const auto no_mark = [](std::size_t) {};

  for (int epoch = static_cast<int>(start_epoch); epoch < opt.epochs; ++epoch) {
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    const std::vector<std::size_t> indices = sampler.indices();
    double sums[2] = {0.0, 0.0};  // loss, samples
    std::size_t steps = 0;
    const auto start = std::chrono::steady_clock::now();
    std::size_t pos = 0;
    while (pos < indices.size()) {
      if (ctx.rank == opt.stall_rank && global_step + 1 == opt.stall_at_step && ctx.restart_count == 0 &&
          opt.stall_late_ms > 0) {
        // A slow batch before the step: the other ranks' step deadlines pass first.
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt.stall_late_ms));
      }
      ddp::Section step_section("step");
      ddp::heartbeat();
      ++global_step;
      if (opt.step_sleep_ms > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt.step_sleep_ms));
      }
      const bool stall_now =
          ctx.rank == opt.stall_rank && global_step == opt.stall_at_step && ctx.restart_count == 0;
      if (stall_now && opt.stall_in == "compute") {
        // Before this step's all-reduces: the other ranks wait in them for this one.
        std::printf("rank %d: stalling in the compute of step %ld for %.1f s (--stall-rank)\n", ctx.rank,
                    global_step, opt.stall_seconds);
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::duration<double>(opt.stall_seconds));
      }
      model.zero_grad();
      for (int micro = 0; micro < opt.grad_accum && pos < indices.size(); ++micro) {
        const std::size_t n = std::min(opt.batch_size, indices.size() - pos);
        const std::span<const std::size_t> batch(indices.data() + pos, n);
        pos += n;
        sums[1] += static_cast<double>(n);
        const bool last = micro + 1 == opt.grad_accum || pos >= indices.size();
        if (!last) {
          auto scope = reducer.no_sync();  // accumulate locally, no communication
          sums[0] += model.forward_backward(data, batch, no_mark);
        } else if (opt.no_overlap) {
          sums[0] += model.forward_backward(data, batch, no_mark);
        } else {
          sums[0] += model.forward_backward(data, batch, mark);
        }
      }
      reducer.finalize();  // with no_overlap: every bucket is reduced here, after backward
      model.sgd_step(opt.lr / static_cast<float>(opt.grad_accum));
      // At the end of the step: the other ranks go on into the next step and
      // wait there, so this rank is the one whose step runs over first.
      if (stall_now && opt.stall_in == "end") {
        std::printf("rank %d: stalling at the end of step %ld for %.1f s (--stall-rank)\n", ctx.rank,
                    global_step, opt.stall_seconds);
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::duration<double>(opt.stall_seconds));
      }
      if (steps == 0) ddp::report_first_step(ctx);  // ddprun times the attempt's startup
      ++steps;
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    pg.all_reduce(std::span(sums), ddp::ReduceOp::kSum);
    if (ctx.rank == 0) {
      std::printf("epoch %d/%d loss %.6f step_ms %.3f\n", epoch + 1, opt.epochs, sums[0] / sums[1],
                  steps ? ms / static_cast<double>(steps) : 0.0);
      std::fflush(stdout);
      ddp::Section checkpoint_section("checkpoint");
      save_checkpoint(checkpoint, epoch + 1, opt.hidden, model.flat_params());
    }
    if (epoch + 1 == opt.fail_at_epoch && ctx.restart_count == 0) {
      pg.barrier();  // every rank: the checkpoint of this epoch is on disk
      if (ctx.rank == (opt.fail_rank >= 0 ? opt.fail_rank : ctx.world_size - 1)) {
        throw std::runtime_error("injected failure after epoch " + std::to_string(epoch + 1) +
                                 " (--fail-at-epoch)");
      }
    }
  }
  pg.barrier();  // rank 0 may host the store: nobody leaves before everyone is done
  if (ctx.rank == 0) {
    std::printf("done: checkpoint %s\n", checkpoint.c_str());
    if (!opt.dump_params.empty()) {
      std::FILE* f = std::fopen(opt.dump_params.c_str(), "w");
      if (f == nullptr) throw std::runtime_error("cannot write --dump-params " + opt.dump_params);
      for (float p : model.flat_params()) std::fprintf(f, "%.9g\n", static_cast<double>(p));
      std::fclose(f);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run_trainer<Options>(
      argc, argv, "Train a small MLP data-parallel with the ddp worker SDK (run under ddprun)",
      "checkpoint path (default: $TMPDIR/ddp-example-train-<run id>.ckpt)",
      [](CLI::App& app, Options& opt) {
        app.add_option("--grad-accum", opt.grad_accum,
                       "micro-batches per step (no_sync for all but the last)")
            ->check(CLI::Range(1, 1024));
        app.add_flag("--no-overlap", opt.no_overlap, "all-reduce after backward instead of during it");
        app.add_option("--bucket-cap-kb", opt.bucket_cap_kb, "Reducer bucket cap in KiB")
            ->check(CLI::Range(1, 1 << 22));
        app.add_option("--first-bucket-cap-kb", opt.first_bucket_cap_kb, "first bucket cap in KiB")
            ->check(CLI::Range(1, 1 << 22));
        app.add_option("--dump-params", opt.dump_params,
                       "rank 0 writes the final parameters here, one per line");
        app.add_option("--fail-at-epoch", opt.fail_at_epoch,
                       "fail after this epoch on the first attempt (restart demo)");
        app.add_option("--fail-rank", opt.fail_rank, "rank that fails (default: the last)");
        app.add_option("--stall-rank", opt.stall_rank,
                       "this rank stalls inside a step on the first attempt (hang detection demo)");
        app.add_option("--stall-at-step", opt.stall_at_step,
                       "step (from 1, across epochs) the stall begins in");
        app.add_option("--stall-seconds", opt.stall_seconds, "how long the stall lasts (default 3600)");
        app.add_option("--stall-in", opt.stall_in,
                       "where the stall is: end (of the step, default) or compute (before its all-reduces, "
                       "which the other ranks then wait in)")
            ->check(CLI::IsMember({"end", "compute"}));
        app.add_option(
            "--stall-late-ms", opt.stall_late_ms,
            "the stalling rank starts its stall step this late (the others' deadlines pass first)");
        app.add_option("--step-sleep-ms", opt.step_sleep_ms,
                       "sleep this long in every step (steady step times)");
      },
      train);
}

// The command line the example trainers share (CLI11): the model and data
// options, and parsing with the exit codes of docs/errors.md.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "ddp/run.hpp"

namespace example {

// --epochs --batch-size --lr --hidden --dataset-size --seed --checkpoint of
// any Options with those members; later flags win, as in argparse.
template <class Options>
void add_training_options(CLI::App& app, Options& opt, const std::string& checkpoint_help) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--epochs", opt.epochs, "epochs to train")->check(CLI::Range(1, 1000000));
  app.add_option("--batch-size", opt.batch_size, "samples per rank per step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--lr", opt.lr, "SGD learning rate")->check(CLI::PositiveNumber);
  app.add_option("--hidden", opt.hidden, "width of the two hidden layers")->check(CLI::Range(1, 4096));
  app.add_option("--dataset-size", opt.dataset_size, "generated samples")->check(CLI::Range(1, 1 << 26));
  app.add_option("--seed", opt.seed, "seed of data, model and shuffling");
  app.add_option("--checkpoint", opt.checkpoint, checkpoint_help);
}

// nullopt: train; else the exit code (0 after --help, 2 for a bad flag, with its message).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return std::nullopt;
}

// A trainer's main(): under ddp::run (error file, exit codes), the shared
// options, then the trainer's own (add_own(app, opt)), then train(opt).
template <class Options, class AddOwn, class Train>
int run_trainer(int argc, char** argv, const char* about, const std::string& checkpoint_help, AddOwn add_own,
                Train train) {
  return ddp::run(argc, argv, [&](int ac, char** av) {
    Options opt;
    CLI::App app{about};
    add_training_options(app, opt, checkpoint_help);
    add_own(app, opt);
    if (const auto code = parse(app, ac, av)) return *code;
    return train(opt);
  });
}

}  // namespace example

// The command line the example trainers share (CLI11): the model and data
// options, and parsing with the exit codes of docs/errors.md.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace example {

// --epochs --batch-size --lr --hidden --dataset-size --seed; later flags win, as in argparse.
inline void add_training_options(CLI::App& app, int& epochs, std::size_t& batch_size, float& lr, int& hidden,
                                 std::size_t& dataset_size, std::uint64_t& seed) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--epochs", epochs, "epochs to train")->check(CLI::Range(1, 1000000));
  app.add_option("--batch-size", batch_size, "samples per rank per step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--lr", lr, "SGD learning rate")->check(CLI::PositiveNumber);
  app.add_option("--hidden", hidden, "width of the two hidden layers")->check(CLI::Range(1, 4096));
  app.add_option("--dataset-size", dataset_size, "generated samples")->check(CLI::Range(1, 1 << 26));
  app.add_option("--seed", seed, "seed of data, model and shuffling");
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

}  // namespace example

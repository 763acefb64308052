// Turns TRAINING_PROGRAM [args] into the worker's argv the way torchrun does:
// scripts and modules run under `python3 -u`, executables run directly.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddp/launcher/launch_options.hpp"

namespace ddp::launcher {

struct ProgramCommand {
  std::vector<std::string> argv;  // argv[0] absolute path of what is exec'd
  int user_args_index = 0;        // index in argv[1..] where the user's args begin
};

// Throws ConfigError naming TRAINING_PROGRAM (or --python) when the program is
// missing, not a file, or not executable.
ProgramCommand resolve_program(const LaunchOptions& options, const std::map<std::string, std::string>& env);

// The interpreter for scripts and -m: `--python` (or $PYTHON_EXEC) when given;
// else the python in the shebang of the `torchrun` on PATH, which is the
// interpreter torchrun runs workers with (its sys.executable), so a PATH whose
// first python3 lacks torch (a pyenv shim) still works; else python3 on PATH.
// nullopt when none is found.
std::optional<std::string> resolve_python(const std::string& requested,
                                          const std::map<std::string, std::string>& env);

// True when the Python script at `path` defines a --local_rank or --local-rank
// argument (a string literal naming it): a torch.distributed.launch script,
// which expects --local_rank=N on its command line.
bool script_defines_local_rank(const std::string& path);

// `name` with a '/' is taken as a path; otherwise searched in PATH. Returns the
// absolute path of an executable regular file, or nullopt.
std::optional<std::string> find_executable(const std::string& name,
                                           const std::map<std::string, std::string>& env);

}  // namespace ddp::launcher

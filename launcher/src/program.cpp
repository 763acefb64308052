#include "program.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::launcher {
namespace {

namespace fs = std::filesystem;

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_executable_file(const std::string& path) {
  return is_regular(path) && ::access(path.c_str(), X_OK) == 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A file that is neither executable nor a .py runs under python, as under
// torchrun (a Python script without the suffix). Unless its first bytes say
// it is something else: a binary, or a script whose #! line names another
// interpreter (a `#!/bin/sh` tool that lost its +x). python would only fail
// on it with a SyntaxError; say so before starting anything.
void check_runs_as_python(const std::string& program) {
  std::ifstream in(program, std::ios::binary);
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  const std::string fix =
      ": chmod +x it to run it directly (ddprun runs a file that is neither executable nor .py under python, "
      "as torchrun does)";
  if (head.rfind("\x7f"
                 "ELF",
                 0) == 0)
    throw ConfigError("TRAINING_PROGRAM: '" + program + "' is a binary but not executable" + fix);
  if (head.rfind("#!", 0) == 0) {
    std::string line =
        head.substr(2, head.find('\n') == std::string::npos ? std::string::npos : head.find('\n') - 2);
    std::istringstream words(line);
    std::string interp, arg;
    words >> interp >> arg;
    const auto name = fs::path(interp).filename().string();
    const auto runs = name == "env" ? arg : name;
    if (!runs.empty() && runs.rfind("python", 0) != 0)
      throw ConfigError("TRAINING_PROGRAM: '" + program + "' is not executable and its first line runs " +
                        (name == "env" ? interp + " " + arg : interp) + ", not python" + fix);
  }
  ddp::log::get("ddprun")->warn(
      "TRAINING_PROGRAM: '{}' is not executable and has no .py: running it as a Python script, as torchrun "
      "does (--run_path says so and hides this line; chmod +x it to run it directly)",
      program);
}

}  // namespace

std::optional<std::string> resolve_python(const std::string& requested,
                                          const std::map<std::string, std::string>& env) {
  if (!requested.empty()) return find_executable(requested, env);
  if (const auto torchrun = find_executable("torchrun", env)) {
    std::ifstream in(*torchrun);
    std::string first;
    std::getline(in, first);
    // "#!/usr/bin/python3.11" or "#!/venv/bin/python": an interpreter by path
    // (a shell-script shim or "#!/usr/bin/env python3" falls through to PATH).
    if (first.rfind("#!/", 0) == 0) {
      std::string interp = first.substr(2);
      if (const auto sp = interp.find_first_of(" \t\r"); sp != std::string::npos) interp.resize(sp);
      if (fs::path(interp).filename().string().rfind("python", 0) == 0 && is_executable_file(interp)) {
        return interp;
      }
    }
  }
  return find_executable("python3", env);
}

bool script_defines_local_rank(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  // '--local_rank' or "--local-rank" as a literal: add_argument's spelling.
  static const std::regex kArg(R"(["']--local[_-]rank["'])");
  return std::regex_search(text.str(), kArg);
}

std::optional<std::string> find_executable(const std::string& name,
                                           const std::map<std::string, std::string>& env) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (!is_executable_file(name)) return std::nullopt;
    return fs::absolute(name).lexically_normal().string();
  }
  const auto it = env.find("PATH");
  const std::string path = it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : it->second;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable_file(candidate)) return fs::absolute(candidate).lexically_normal().string();
  }
  return std::nullopt;
}

ProgramCommand resolve_program(const LaunchOptions& o, const std::map<std::string, std::string>& env) {
  if (o.program.empty()) {
    throw ConfigError(
        "TRAINING_PROGRAM: missing; usage: ddprun [options] TRAINING_PROGRAM "
        "[args...] (see ddprun --help)");
  }
  const std::string& program = o.program.front();
  const std::vector<std::string> user_args(o.program.begin() + 1, o.program.end());
  ProgramCommand cmd;

  const auto python = [&]() {
    auto py = resolve_python(o.python, env);
    if (!py) {
      throw ConfigError("--python: '" + (o.python.empty() ? std::string("python3") : o.python) +
                        "' not found or not executable (needed to run '" + program +
                        "'); install python3 or pass --no_python for an executable");
    }
    return *py;
  };

  // torchrun runs everything under python unless --no_python; we also run an
  // executable that is not a .py directly, since python could not run it anyway.
  // --run_path wins over --no_python, as in torchrun.
  bool direct = false;
  if (o.module || o.run_path) {
    direct = false;
  } else if (o.no_python) {
    direct = true;  // a .py too: the user asked for its shebang
  } else if (ends_with(program, ".py")) {
    direct = false;
  } else if (is_executable_file(program)) {
    direct = true;
  } else if (program.find('/') == std::string::npos && !is_regular(program)) {
    direct = find_executable(program, env).has_value();
  }
  if (o.module) {
    cmd.argv = {python(), "-u", "-m", program};
  } else if (direct) {
    auto exe = find_executable(program, env);
    if (!exe) {
      const bool exists = is_regular(program);
      throw ConfigError(
          "TRAINING_PROGRAM: '" + program + "' " +
          (exists ? "is not executable (chmod +x it, or drop --no_python)" : "not found (looked in PATH)"));
    }
    cmd.argv = {*exe};
  } else {
    if (!is_regular(program)) {
      throw ConfigError("TRAINING_PROGRAM: '" + program + "' not found");
    }
    if (::access(program.c_str(), R_OK) != 0) {
      throw ConfigError("TRAINING_PROGRAM: '" + program + "' is not readable");
    }
    if (!o.run_path && !ends_with(program, ".py")) check_runs_as_python(program);
    cmd.argv = {python(), "-u", program};
  }
  cmd.user_args_index = static_cast<int>(cmd.argv.size()) - 1;
  cmd.argv.insert(cmd.argv.end(), user_args.begin(), user_args.end());
  return cmd;
}

}  // namespace ddp::launcher

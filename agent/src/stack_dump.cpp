#include "stack_dump.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace ddp::agent {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kTopFrames = 5;

std::string find_hooks_dir() {
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(self.parent_path().parent_path() / "share" / "ddprun" / "python");
  candidates.emplace_back(DDP_PYTHON_HOOKS_INSTALL_DIR);
  for (const auto& c : candidates) {
    if (fs::exists(c / "sitecustomize.py", ec)) return fs::weakly_canonical(c, ec).string();
  }
  return "";
}

std::uintmax_t size_of(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? 0 : n;
}

std::string read_from(const std::string& path, std::uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// faulthandler: "  File "x.py", line 12 in fn" in the "Current thread" block
// (the main thread, which ran the signal handler), else the first block.
std::vector<std::string> python_top_frames(const std::string& text) {
  static const std::regex frame(R"re(^\s+File "(.*)", line (\d+) in (.*)$)re");
  std::vector<std::string> first, current;
  std::vector<std::string>* into = nullptr;
  bool first_done = false;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Current thread", 0) == 0) {
      into = &current;
    } else if (line.rfind("Thread ", 0) == 0) {
      first_done = first_done || !first.empty();
      into = first_done ? nullptr : &first;
    } else if (std::smatch m; into != nullptr && std::regex_match(line, m, frame)) {
      if (into->size() < kTopFrames) into->push_back(m[1].str() + ":" + m[2].str() + " in " + m[3].str());
    }
  }
  return current.empty() ? first : current;
}

// eu-stack ("#0  0x... fn") or gdb ("#0  0x... in fn () at f.c:3"): the first
// thread's frames (gdb's "Thread 1" is the main thread).
std::vector<std::string> native_top_frames(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  bool in_main = text.find("\nThread 1 ") == std::string::npos;  // no gdb thread headers
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Thread 1 ", 0) == 0) in_main = true;
    if (line.rfind("TID ", 0) == 0 && !out.empty()) break;
    if (!in_main || line.rfind('#', 0) != 0) {
      if (in_main && !out.empty() && line.empty()) break;
      continue;
    }
    // "#0  0x00007f... in fn () at f.c:3" (gdb) or "#0  0x00007f... fn" (eu-stack).
    std::istringstream words(line);
    std::string number, address;
    words >> number >> address;
    if (address.rfind("0x", 0) != 0) words.str(line.substr(line.find_first_of(' ')));
    std::string frame;
    std::getline(words >> std::ws, frame);
    if (frame.rfind("in ", 0) == 0) frame.erase(0, 3);
    if (out.size() < kTopFrames) out.push_back(frame);
  }
  return out;
}

bool on_path(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    if (!d.empty() && ::access((fs::path(d) / tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string native_note(const std::string& text) {
  if (text.find("Operation not permitted") != std::string::npos) {
    return "cannot attach to the worker (ptrace: Operation not permitted): run ddprun as root or as the "
           "workers' user with /proc/sys/kernel/yama/ptrace_scope at 0 or 1";
  }
  return "no native frames (see the stacks file)";
}

std::vector<RankStack> collect_now(std::vector<StackTarget> targets, std::chrono::milliseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  std::vector<RankStack> out(targets.size());
  std::vector<std::uintmax_t> offsets(targets.size());
  // Python workers first: one signal each, then wait for their files to settle.
  for (std::size_t i = 0; i < targets.size(); ++i) {
    out[i].target = targets[i];
    if (targets[i].python_file.empty()) continue;
    offsets[i] = size_of(targets[i].python_file);
    if (::kill(targets[i].pid, kStackDumpSignal) != 0) out[i].note = "the worker is gone";
  }
  // Native workers: every debugger at once, read in turn.
  const bool eu = on_path("eu-stack");
  const bool gdb = !eu && on_path("gdb");
  // The debugger gets the budget less a little to read its output, then SIGKILL.
  const auto ms = std::max<long>(200, static_cast<long>(budget.count()) - 300);
  const std::string limit = std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100);
  std::vector<FILE*> pipes(targets.size(), nullptr);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!targets[i].python_file.empty()) continue;
    if (!eu && !gdb) {
      out[i].note = "no native stack: install elfutils (eu-stack) or gdb, e.g. apt install elfutils";
      continue;
    }
    const std::string pid = std::to_string(targets[i].pid);
    const std::string cmd =
        "timeout -k 0.2 " + limit + " " +
        (eu ? "eu-stack -p " + pid
            : "gdb -batch -nx -iex 'set debuginfod enabled off' -iex 'set auto-load off' -p " + pid +
                  " -ex 'thread apply all bt' </dev/null") +
        " 2>&1";
    pipes[i] = ::popen(cmd.c_str(), "re");
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (pipes[i] == nullptr) continue;
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), pipes[i])) > 0) out[i].text.append(buf, n);
    const int status = ::pclose(pipes[i]);
    const bool timed_out = WIFEXITED(status) && (WEXITSTATUS(status) == 124 || WEXITSTATUS(status) == 137);
    out[i].top_frames = native_top_frames(out[i].text);
    if (out[i].top_frames.empty()) {
      out[i].note = timed_out
                        ? std::string(eu ? "eu-stack" : "gdb") + " did not finish within " + limit + " s"
                        : native_note(out[i].text);
    }
  }
  // A dump is complete once its file stops growing.
  std::vector<std::uintmax_t> last(targets.size(), 0);
  for (bool pending = true; pending && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    pending = false;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (targets[i].python_file.empty() || !out[i].note.empty()) continue;
      const auto n = size_of(targets[i].python_file);
      if (n <= offsets[i] || n != last[i]) pending = true;
      last[i] = n;
    }
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].python_file.empty() || !out[i].note.empty()) continue;
    out[i].text = read_from(targets[i].python_file, offsets[i]);
    out[i].top_frames = python_top_frames(out[i].text);
    if (out[i].top_frames.empty()) {
      out[i].note = out[i].text.empty() ? "no Python stack within the time allowed (faulthandler not "
                                          "registered: was sitecustomize replaced, or -S/-I given?)"
                                        : "no Python frames (see the stacks file)";
    }
  }
  return out;
}

}  // namespace

const std::string& python_hooks_dir() {
  static const std::string dir = find_hooks_dir();
  return dir;
}

bool is_python_command(const std::string& argv0) {
  return fs::path(argv0).filename().string().rfind("python", 0) == 0;
}

bool add_python_stack_hook(EnvMap& env, const std::string& stack_file) {
  const std::string& dir = python_hooks_dir();
  if (dir.empty()) return false;
  const auto it = env.find("PYTHONPATH");
  env["PYTHONPATH"] = it == env.end() || it->second.empty() ? dir : dir + ":" + it->second;
  env["DDPRUN_STACK_FILE"] = stack_file;
  return true;
}

std::string render_stacks(const std::vector<RankStack>& stacks) {
  std::ostringstream os;
  for (const auto& s : stacks) {
    os << "=== rank " << s.target.rank << " (local_rank " << s.target.local_rank << ", pid " << s.target.pid
       << ", " << (s.target.python_file.empty() ? "native" : "Python") << ") ===\n";
    if (!s.note.empty()) os << s.note << '\n';
    os << s.text;
    if (!s.text.empty() && s.text.back() != '\n') os << '\n';
    os << '\n';
  }
  return os.str();
}

StackCollector::StackCollector(boost::asio::io_context& io) : io_(io) {}

StackCollector::~StackCollector() {
  *alive_ = false;
  if (thread_.joinable()) thread_.join();
}

void StackCollector::collect(std::vector<StackTarget> targets, std::chrono::milliseconds budget, Done done) {
  if (thread_.joinable()) thread_.join();  // finished: its result was posted
  busy_ = true;
  std::weak_ptr<bool> alive = alive_;
  thread_ =
      std::thread([this, alive, targets = std::move(targets), budget, done = std::move(done)]() mutable {
        auto result = collect_now(std::move(targets), budget);
        boost::asio::post(io_, [this, alive, result = std::move(result), done = std::move(done)]() mutable {
          const auto a = alive.lock();
          if (!a || !*a) return;
          busy_ = false;
          done(std::move(result));
        });
      });
}

}  // namespace ddp::agent

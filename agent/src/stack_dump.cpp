#include "stack_dump.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "ddp/common/parse.hpp"

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

// The end line sitecustomize.py writes after a dump, and its Flight Recorder line.
constexpr std::string_view kEndLine = "ddprun-end-of-dump\n";
constexpr std::string_view kCollectivesLine = "ddprun-collectives: ";
// The torch module whose functions are the collectives a Python rank waits in.
constexpr std::string_view kTorchC10d = "torch/distributed/distributed_c10d.py";

struct PyFrame {
  std::string file;
  std::string line;
  std::string fn;
};

// faulthandler: "  File "x.py", line 12 in fn" in the "Current thread" block
// (the main thread, which ran the signal handler), else the first block.
std::vector<PyFrame> python_main_frames(const std::string& text) {
  static const std::regex frame(R"re(^\s+File "(.*)", line (\d+) in (.*)$)re");
  std::vector<PyFrame> first, current;
  std::vector<PyFrame>* into = nullptr;
  bool first_done = false;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Current thread", 0) == 0) {
      into = &current;
    } else if (line.rfind("Thread ", 0) == 0) {
      first_done = first_done || !first.empty();
      into = first_done ? nullptr : &first;
    } else if (std::smatch m; into != nullptr && std::regex_match(line, m, frame)) {
      into->push_back({m[1].str(), m[2].str(), m[3].str()});
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
    return "cannot attach to the worker (ptrace: Operation not permitted): another debugger may hold it, or "
           "ptrace is not allowed here: run ddprun as root or as the workers' user with "
           "/proc/sys/kernel/yama/ptrace_scope at 0 or 1";
  }
  return "no native frames (see the stacks file)";
}

// Where a native debugger's output goes while it runs.
struct NativeRun {
  FILE* pipe = nullptr;
  std::size_t index = 0;
};

// A Python dump without its end line (sitecustomize.py replaced, an older
// ddprun's, the main thread holding the GIL while stuck) is complete once
// the file has not grown for this long.
constexpr std::chrono::milliseconds kQuietEnd{20};
// A Python worker whose dump has not begun by then has no faulthandler on
// SIGURG (or is not scheduled at all): not worth the whole budget.
constexpr std::chrono::milliseconds kPythonStartBudget{1000};

std::vector<RankStack> collect_now(std::vector<StackTarget> targets, std::chrono::milliseconds budget) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto until = start + budget;
  std::vector<RankStack> out(targets.size());
  std::vector<std::uintmax_t> offsets(targets.size());
  std::vector<Clock::time_point> grew(targets.size(), Clock::time_point::min());
  std::vector<bool> pending(targets.size(), false);
  // Python workers: watched, then one signal each; their dumps come in while
  // the debuggers below run. The watch comes first so that no write is missed.
  const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    out[i].target = targets[i];
    if (targets[i].python_file.empty()) continue;
    offsets[i] = size_of(targets[i].python_file);
    if (watch >= 0) ::inotify_add_watch(watch, targets[i].python_file.c_str(), IN_MODIFY);
    if (::kill(targets[i].pid, kStackDumpSignal) != 0) {
      out[i].note = "the worker is gone";
    } else {
      pending[i] = true;
    }
  }
  // Native workers: every debugger at once, read as their output comes.
  const bool eu = on_path("eu-stack");
  const bool gdb = !eu && on_path("gdb");
  // The debugger gets the budget less a little to read its output, then SIGKILL.
  const auto ms = std::max<long>(200, static_cast<long>(budget.count()) - 300);
  const std::string limit = std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100);
  std::vector<NativeRun> runs;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!targets[i].python_file.empty()) continue;
    if (!eu && !gdb) {
      out[i].note = "no native stack: install elfutils (eu-stack) or gdb, e.g. apt install elfutils";
      continue;
    }
    const std::string pid = std::to_string(targets[i].pid);
    const bool one = targets[i].main_thread_only;
    const std::string cmd =
        "timeout -k 0.2 " + limit + " " +
        (eu ? std::string("eu-stack ") + (one ? "-1 " : "") + "-p " + pid
            : "gdb -batch -nx -iex 'set debuginfod enabled off' -iex 'set auto-load off' -p " + pid +
                  (one ? " -ex 'thread apply 1 bt'" : " -ex 'thread apply all bt'") + " </dev/null") +
        " 2>&1";
    FILE* pipe = ::popen(cmd.c_str(), "re");
    if (pipe == nullptr) {
      out[i].note = std::string("cannot run ") + (eu ? "eu-stack" : "gdb") + ": " + std::strerror(errno);
      continue;
    }
    ::fcntl(::fileno(pipe), F_SETFL, ::fcntl(::fileno(pipe), F_GETFL) | O_NONBLOCK);
    runs.push_back({pipe, i});
  }
  const auto finish_native = [&](NativeRun& run) {
    const int status = ::pclose(run.pipe);
    run.pipe = nullptr;
    auto& o = out[run.index];
    const bool timed_out = WIFEXITED(status) && (WEXITSTATUS(status) == 124 || WEXITSTATUS(status) == 137);
    o.top_frames = native_top_frames(o.text);
    if (o.top_frames.empty()) {
      o.note = timed_out ? std::string(eu ? "eu-stack" : "gdb") + " did not finish within " + limit + " s"
                         : native_note(o.text);
    }
  };
  // A Python dump is complete at its end line, or once it stopped growing.
  const auto check_python = [&](Clock::time_point now) {
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (!pending[i]) continue;
      const auto n = size_of(targets[i].python_file);
      if (n > offsets[i] + out[i].text.size()) {
        out[i].text = read_from(targets[i].python_file, offsets[i]);
        grew[i] = now;
        if (out[i].text.find(kEndLine) != std::string::npos) {
          out[i].complete = true;
          pending[i] = false;
        }
      } else if (grew[i] != Clock::time_point::min() && now - grew[i] >= kQuietEnd) {
        pending[i] = false;
      } else if (grew[i] == Clock::time_point::min() && now - start >= kPythonStartBudget) {
        pending[i] = false;
      }
    }
  };
  for (;;) {
    auto now = Clock::now();
    check_python(now);
    const bool python_left = std::find(pending.begin(), pending.end(), true) != pending.end();
    const bool native_left =
        std::any_of(runs.begin(), runs.end(), [](const NativeRun& r) { return r.pipe != nullptr; });
    if ((!python_left && !native_left) || now >= until) break;
    std::vector<pollfd> fds;
    if (python_left && watch >= 0) fds.push_back({watch, POLLIN, 0});
    for (const auto& r : runs) {
      if (r.pipe != nullptr) fds.push_back({::fileno(r.pipe), POLLIN, 0});
    }
    // Wake for the next quiet check even without an event (no inotify, a
    // dump that stopped growing without its end line).
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
    if (python_left) wait = std::min(wait, watch >= 0 ? kQuietEnd : std::chrono::milliseconds(5));
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long>(1, wait.count())));
    if (watch >= 0) {
      char events[4096];
      while (::read(watch, events, sizeof(events)) > 0) {
      }
    }
    for (auto& r : runs) {
      if (r.pipe == nullptr) continue;
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(::fileno(r.pipe), buf, sizeof(buf));
        if (n > 0) {
          out[r.index].text.append(buf, static_cast<std::size_t>(n));
          continue;
        }
        if (n == 0) finish_native(r);  // EOF: the debugger is done
        break;
      }
    }
  }
  if (watch >= 0) ::close(watch);
  // Out of time: `timeout` ends every debugger within its limit, so this waits
  // at most for that.
  for (auto& r : runs) {
    if (r.pipe == nullptr) continue;
    ::fcntl(::fileno(r.pipe), F_SETFL, ::fcntl(::fileno(r.pipe), F_GETFL) & ~O_NONBLOCK);
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), r.pipe)) > 0) out[r.index].text.append(buf, n);
    finish_native(r);
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].python_file.empty() || !out[i].note.empty()) continue;
    if (!out[i].complete) out[i].text = read_from(targets[i].python_file, offsets[i]);
    parse_python_dump(out[i]);
    if (out[i].top_frames.empty()) {
      out[i].note = out[i].text.empty() ? "no Python stack within the time allowed (faulthandler not "
                                          "registered: was sitecustomize replaced, or -S/-I given?)"
                                        : "no Python frames (see the stacks file)";
    }
  }
  return out;
}

}  // namespace

void parse_python_dump(RankStack& s) {
  // The end line is ours, not the worker's: it goes; the Flight Recorder's stays.
  if (const auto at = s.text.find(kEndLine); at != std::string::npos) {
    s.complete = true;
    s.text.erase(at, kEndLine.size());
  }
  if (const auto at = s.text.find(kCollectivesLine); at != std::string::npos) {
    std::istringstream fields(s.text.substr(at + kCollectivesLine.size(), s.text.find('\n', at) - at));
    std::uint64_t issued = 0, completed = 0;
    int found = 0;
    for (std::string kv; fields >> kv;) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = kv.substr(0, eq);
      const std::string value = kv.substr(eq + 1);
      if (key != "issued" && key != "completed") continue;
      // Ours to write, but read like any worker input: a bad number is no Flight Recorder.
      const auto n = parse_int<unsigned long long>(value);
      if (!n) continue;
      (key == "issued" ? issued : completed) = *n;
      ++found;
    }
    if (found == 2 && completed <= issued) {
      s.flight_recorder = true;
      s.issued = issued;
      s.completed = completed;
    }
  }
  const auto frames = python_main_frames(s.text);
  s.top_frames.clear();
  s.torch_call.clear();
  for (const auto& f : frames) {
    if (s.top_frames.size() < kTopFrames) s.top_frames.push_back(f.file + ":" + f.line + " in " + f.fn);
    const bool c10d = f.file.size() >= kTorchC10d.size() &&
                      f.file.compare(f.file.size() - kTorchC10d.size(), kTorchC10d.size(), kTorchC10d) == 0;
    if (c10d && s.torch_call.empty()) s.torch_call = f.fn;
  }
}

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
       << ", " << (s.target.python_file.empty() ? "native" : "Python")
       << (s.target.main_thread_only ? ", main thread only: taken just before the kill" : "") << ") ===\n";
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

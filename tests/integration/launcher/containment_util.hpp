// Process containment tests: every process a test starts carries the test's
// own environment tag, and the test fails if any process with that tag
// survives (read from /proc/PID/environ, so it finds processes that called
// setsid, double-forked or were re-parented to init).
#pragma once

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "launcher_test_util.hpp"

namespace ddp::test::launcher {

// A unique DDP_TEST_TAG value; the destructor SIGKILLs whatever still carries
// it, so a failing test leaves nothing behind for the next one.
class ProcessTag {
 public:
  ProcessTag() {
    std::random_device rd;
    std::ostringstream s;
    s << "containment-" << ::getpid() << "-" << std::hex << rd() << rd();
    value_ = s.str();
  }
  ~ProcessTag() {
    for (int i = 0; i < 3; ++i) {
      for (pid_t pid : alive()) ::kill(pid, SIGKILL);
    }
  }
  ProcessTag(const ProcessTag&) = delete;
  ProcessTag& operator=(const ProcessTag&) = delete;

  const std::string& value() const { return value_; }
  std::pair<std::string, std::optional<std::string>> env() const { return {"DDP_TEST_TAG", value_}; }

  // Live (non-zombie) processes whose environment holds the tag.
  std::vector<pid_t> alive() const {
    std::vector<pid_t> out;
    const std::string needle = "DDP_TEST_TAG=" + value_;
    DIR* d = ::opendir("/proc");
    if (d == nullptr) return out;
    while (const dirent* e = ::readdir(d)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (pid <= 0 || *end != '\0') continue;
      std::ifstream in(std::string("/proc/") + e->d_name + "/environ", std::ios::binary);
      std::string var;
      bool tagged = false;
      while (std::getline(in, var, '\0')) {
        if (var == needle) {
          tagged = true;
          break;
        }
      }
      if (tagged && pid_alive(static_cast<pid_t>(pid))) out.push_back(static_cast<pid_t>(pid));
    }
    ::closedir(d);
    return out;
  }

  // Waits (bounded) for every tagged process to be gone; false if some survive.
  bool all_gone(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    return wait_until([&] { return alive().empty(); }, timeout);
  }

  std::string describe() const {
    std::string out;
    for (pid_t pid : alive()) {
      std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
      std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (auto& c : cmd) c = c == '\0' ? ' ' : c;
      out += std::to_string(pid) + ": " + cmd + "\n";
    }
    return out.empty() ? "(none)" : out;
  }

 private:
  std::string value_;
};

}  // namespace ddp::test::launcher

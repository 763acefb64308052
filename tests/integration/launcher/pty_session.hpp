// ddprun on a real pseudo-terminal, as a user at a terminal runs it: the test
// holds the master side (the "screen" and the keyboard), ddprun gets the slave
// as its controlling terminal, stdin, stdout and stderr.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddp::test {

class PtySession {
 public:
  // Starts argv (argv[0] a path) in `dir` on a terminal of cols x rows, with
  // the test's environment plus `env` (nullopt removes a variable).
  PtySession(std::vector<std::string> argv, const std::string& dir,
             std::map<std::string, std::optional<std::string>> env, int cols = 100, int rows = 30);
  ~PtySession();  // SIGKILLs the session if still running
  PtySession(const PtySession&) = delete;
  PtySession& operator=(const PtySession&) = delete;

  // Everything written to the terminal so far (raw bytes: "\r\n" for newlines).
  const std::string& screen();
  // Waits until `text` is on the screen (after `from`); false on timeout.
  bool wait_for(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                std::size_t from = 0);
  // Types `keys` (the terminal's line discipline applies: "\x03" is Ctrl-C).
  void type(const std::string& keys);
  void resize(int cols, int rows);
  // Whether the terminal is in its usual (cooked) mode, editing lines and
  // echoing them, as a shell expects it back.
  bool cooked() const;
  // The exit code (128+N for a signal), or nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  void pump(std::chrono::milliseconds max_wait);
  int master_ = -1;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string screen_;
};

}  // namespace ddp::test

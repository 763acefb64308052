// The one byte stream a remote agent's ssh -tt session carries back, split
// into the agent's stdout, its stderr and its failure cause.
//
// A pseudo-terminal has a single output: the remote stdout and stderr arrive
// merged. So the remote ddprun (DDP_SSH_LAUNCHER set) turns its fd 2 into a
// pipe and copies each stderr line to the terminal as one tagged write:
//   RS (0x1e) "ddprun:" CHANNEL US (0x1f) LINE "\n"
// and the launcher's relay (ChannelSplitter) sends tagged lines to its own
// stderr, the rest to its stdout. One write() to a terminal is not interleaved
// with another process's or thread's write (the tty's write lock), so a tagged
// line arrives whole even in the middle of an unfinished stdout line.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace ddp::launcher {

// The channels: stderr lines, the failure cause the remote agent reports
// last when its job failed ("rank R on HOST: HOW (WHY)"), and the start of
// the launcher's own command on the host: what came before it is the host's
// login shell's (a ~/.bashrc that prints), which goes to stderr.
inline constexpr std::string_view kStderrChannel = "stderr";
inline constexpr std::string_view kCauseChannel = "cause";
inline constexpr std::string_view kStartChannel = "start";

// The shell command that writes the start mark (an empty line on
// kStartChannel), for the front of the remote command: the host's shell runs
// it, so it does not depend on the remote ddprun's version.
std::string start_mark_command();

// One tagged line: mark, channel, payload, '\n'. `payload` holds no '\n'.
std::string channel_line(std::string_view channel, std::string_view payload);

// Splits the stream into lines by channel ("" for untagged stdout text),
// dropping the '\r' the remote terminal adds. A stdout line interrupted by a
// tagged line continues after it. Not thread-safe: one relay thread feeds it.
class ChannelSplitter {
 public:
  using Sink = std::function<void(std::string_view channel, const std::string& line)>;
  explicit ChannelSplitter(Sink sink) : sink_(std::move(sink)) {}
  void feed(std::string_view bytes);
  // End of stream: what is left unfinished is emitted as a last line.
  void finish();

 private:
  enum class State { kText, kChannel, kPayload };
  Sink sink_;
  State state_ = State::kText;
  std::size_t matched_ = 0;  // bytes of the mark matched so far, in kText
  std::string text_;         // the unfinished stdout line
  std::string channel_;
  std::string payload_;
};

// The remote ddprun's side. Construction makes fd 2 a pipe whose lines a
// thread writes to the old fd 2 (the terminal) on the stderr channel; the
// destructor puts the terminal back on fd 2, copies what the pipe still
// holds, and joins. Children started meanwhile inherit the pipe as fd 2.
// Where the pipe cannot be made, stderr stays as it is. Construct it before
// any other thread exists and keep it alive until exit (std::_Exit included:
// call close() first).
class StderrChannel {
 public:
  StderrChannel();
  ~StderrChannel();
  StderrChannel(const StderrChannel&) = delete;
  StderrChannel& operator=(const StderrChannel&) = delete;

  // Writes one line on `channel` straight to the terminal.
  void send(std::string_view channel, std::string_view payload) const;
  void close();

 private:
  void pump();
  int terminal_ = -1;
  int read_ = -1;
  int wake_[2] = {-1, -1};
  std::thread pump_;
};

}  // namespace ddp::launcher

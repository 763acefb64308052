#include "file_timer_server.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

// torch's clients write at most PIPE_BUF bytes per request; a longer line is
// not one of theirs and is dropped rather than buffered without bound.
constexpr std::size_t kMaxLine = 4096;

}  // namespace

FileTimerServer::FileTimerServer(boost::asio::io_context& io, std::filesystem::path path,
                                 OnRequest on_request)
    : path_(std::move(path)), on_request_(std::move(on_request)), pipe_(io) {
  std::error_code ec;
  std::filesystem::remove(path_, ec);
  if (::mkfifo(path_.c_str(), 0600) != 0) {
    throw ConfigError("TORCHELASTIC_TIMER_FILE: cannot create the named pipe " + path_.string() + ": " +
                      std::strerror(errno) + " (choose a writable path or unset it)");
  }
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  keep_open_ = fd >= 0 ? ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC) : -1;
  if (fd < 0 || keep_open_ < 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw ConfigError("TORCHELASTIC_TIMER_FILE: cannot open the named pipe " + path_.string() + ": " + why);
  }
  pipe_.assign(fd);
  read();
}

FileTimerServer::~FileTimerServer() {
  boost::system::error_code ignored;
  pipe_.close(ignored);
  if (keep_open_ >= 0) ::close(keep_open_);
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void FileTimerServer::read() {
  pipe_.async_read_some(boost::asio::buffer(chunk_), [this](boost::system::error_code ec, std::size_t n) {
    if (ec == boost::asio::error::operation_aborted) return;
    if (ec) {
      log::get("agent")->warn(
          "file timer pipe {}: read failed: {}; FileTimer requests are "
          "no longer served",
          path_.string(), ec.message());
      return;
    }
    buf_.append(chunk_, n);
    std::size_t start = 0;
    for (auto nl = buf_.find('\n'); nl != std::string::npos; nl = buf_.find('\n', start)) {
      if (discarding_) {
        discarding_ = false;  // the tail of an overlong line: not a request of its own
      } else {
        on_line(buf_.substr(start, nl - start));
      }
      start = nl + 1;
    }
    buf_.erase(0, start);
    if (buf_.size() > kMaxLine) {
      buf_.clear();
      discarding_ = true;  // up to the line's end
    }
    read();
  });
}

void FileTimerServer::on_line(const std::string& line) {
  const auto j = try_parse_json(line, json_input::kFileTimerRequest);
  TimerRequest r;
  if (j.is_object() && j.contains("pid") && j["pid"].is_number_integer() && j.contains("scope_id") &&
      j["scope_id"].is_string() && j.contains("expiration_time") && j["expiration_time"].is_number()) {
    r.pid = j["pid"].get<int>();
    r.scope = j["scope_id"].get<std::string>();
    r.expiration_time = j["expiration_time"].get<double>();
    r.signal = j.contains("signal") && j["signal"].is_number_integer() ? j["signal"].get<int>() : 0;
    on_request_(r);
    return;
  }
  if (!warned_) {
    warned_ = true;
    log::get("agent")->warn("file timer pipe {}: ignoring a line that is not a FileTimer request",
                            path_.string());
  }
}

}  // namespace ddp::agent

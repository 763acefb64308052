#include "oom_watch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>

#include "ddp/common/parse.hpp"
#include "guard_protocol.hpp"

namespace ddp::guard {

namespace {

// Plain read(): the guard reads a few small files per worker.
std::optional<std::string> slurp(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[1024];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0 && text.size() < 65536) {
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

std::optional<std::int64_t> number(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  const auto v = parse_int<std::int64_t>(text);
  return v && *v >= 0 ? v : std::nullopt;
}

// The v1 memory cgroup in /proc/self/cgroup: "4:memory:/path".
std::string v1_memory_path(const std::string& proc_cgroup) {
  std::size_t pos = 0;
  while (pos < proc_cgroup.size()) {
    std::size_t end = proc_cgroup.find('\n', pos);
    if (end == std::string::npos) end = proc_cgroup.size();
    const std::string_view line(proc_cgroup.data() + pos, end - pos);
    const auto a = line.find(':');
    const auto b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b != std::string_view::npos) {
      const auto controllers = line.substr(a + 1, b - a - 1);
      // "memory" alone or in a comma-separated list.
      for (std::size_t s = 0; s <= controllers.size();) {
        std::size_t e = controllers.find(',', s);
        if (e == std::string_view::npos) e = controllers.size();
        if (controllers.substr(s, e - s) == "memory") return std::string(line.substr(b + 1));
        s = e + 1;
      }
    }
    pos = end + 1;
  }
  return "";
}

constexpr std::string_view kOomWords = ": killed by the kernel OOM killer";

}  // namespace

std::optional<std::uint64_t> oom_kill_count(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const auto line = text.substr(pos, end - pos);
    if (line.rfind("oom_kill ", 0) == 0) {
      const auto v = number(line.substr(9));
      if (v) return static_cast<std::uint64_t>(*v);
    }
    pos = end + 1;
  }
  return std::nullopt;
}

std::string OomWatch::proc_self_cgroup() { return slurp("/proc/self/cgroup").value_or(""); }

void OomWatch::start(const std::string& v2_cgroup, const std::string& proc_cgroup,
                     const std::string& v1_root) {
  counted_.clear();
  const auto count = [this](const std::string& dir, const char* file) {
    const auto text = slurp(dir + "/" + file);
    if (!text) return false;
    const auto n = oom_kill_count(*text);
    if (!n) return false;
    counted_.push_back({dir, file, *n});
    return true;
  };
  // v2: memory.events exists where the memory controller reaches; it counts
  // the kills of its whole subtree. The root cgroup has none.
  for (std::string dir = v2_cgroup; !dir.empty();) {
    if (count(dir, "memory.events")) break;
    const auto slash = dir.rfind('/');
    if (slash == std::string::npos || slash == 0) break;
    dir.resize(slash);
    if (::access((dir + "/cgroup.procs").c_str(), F_OK) != 0) break;  // left the hierarchy
  }
  // v1 (a hybrid host): the memory controller's own hierarchy, where a kill
  // counts in the victim's cgroup only.
  const std::string v1 = v1_memory_path(proc_cgroup);
  if (!v1.empty() && v1.find("..") == std::string::npos) {
    count(v1_root + (v1 == "/" ? "" : v1), "memory.oom_control");
  }
}

std::optional<std::string> OomWatch::killed() const {
  for (const auto& c : counted_) {
    const auto text = slurp(c.dir + "/" + c.file);
    const auto n = text ? oom_kill_count(*text) : std::nullopt;
    if (n && *n > c.at_start) return c.dir;
  }
  return std::nullopt;
}

std::int64_t OomWatch::peak_bytes(const std::string& cgroup) {
  for (const char* file : {"memory.peak", "memory.max_usage_in_bytes"}) {
    if (const auto text = slurp(cgroup + "/" + file)) {
      if (const auto v = number(*text)) return *v;
    }
  }
  return -1;
}

std::string memory_text(std::int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1LL << 30)) {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", b / (1LL << 30));
  } else if (bytes >= (1LL << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1LL << 20));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld KiB", static_cast<long long>(bytes / 1024));
  }
  return buf;
}

std::string oom_line(long worker_pid, std::int64_t peak_bytes, const std::string& cgroup) {
  std::string line = "worker pid=" + std::to_string(worker_pid) + std::string(kOomWords);
  if (peak_bytes >= 0) {
    line += " (memory peak " + memory_text(peak_bytes) + ", " + std::to_string(peak_bytes) + " bytes";
  } else {
    line += " (memory peak unknown";
  }
  return line + ", memory cgroup " + cgroup + ")";
}

std::optional<OomReport> parse_oom_line(std::string_view line) {
  if (line.rfind(kGuardLinePrefix, 0) != 0) return std::nullopt;
  line.remove_prefix(kGuardLinePrefix.size());
  if (line.rfind("worker pid=", 0) != 0) return std::nullopt;
  const auto words = line.find(kOomWords);
  if (words == std::string_view::npos) return std::nullopt;
  OomReport r;
  auto rest = line.substr(words + kOomWords.size());
  constexpr std::string_view kPeak = " (memory peak ";
  if (rest.rfind(kPeak, 0) == 0 && rest.rfind(" (memory peak unknown", 0) != 0) {
    rest.remove_prefix(kPeak.size());
    const auto comma = rest.find(", ");
    if (comma != std::string_view::npos) {
      r.peak = "memory peak " + std::string(rest.substr(0, comma));
      const auto bytes = rest.substr(comma + 2);
      const auto sp = bytes.find(" bytes");
      if (sp != std::string_view::npos) {
        if (const auto v = number(bytes.substr(0, sp))) r.peak_bytes = *v;
      }
    }
  }
  return r;
}

}  // namespace ddp::guard

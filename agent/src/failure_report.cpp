#include "ddp/agent/failure_report.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ddp/common/json_input.hpp"
#include "ddp/common/json_integer.hpp"

namespace ddp::agent {
namespace {

using nlohmann::json;

std::string format_time(std::chrono::system_clock::time_point t) {
  const auto secs = std::chrono::system_clock::to_time_t(t);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()) % 1000;
  std::tm tm{};
  ::localtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  char out[80];
  std::snprintf(out, sizeof(out), "%s.%03d", buf, static_cast<int>(ms.count()));
  return out;
}

std::string text_of(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_null()) return "";
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void indent_block(std::ostringstream& os, const std::string& text, const char* pad) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) os << pad << line << '\n';
}

}  // namespace

ErrorFileRead read_error_file(const std::filesystem::path& path) {
  json doc;
  try {
    // Regular files only: a FIFO left there would block the agent on open.
    const auto text = read_json_file(path, json_input::kErrorFile.max_bytes, /*regular_only=*/true);
    if (!text) return {};
    doc = parse_json(*text, json_input::kErrorFile);
  } catch (const JsonError& e) {
    return {std::nullopt, std::string("it ") + e.what()};
  }
  if (!doc.is_object() || !doc.contains("message")) return {std::nullopt, "it holds no \"message\""};
  const json& msg = doc["message"];
  ErrorFileContent out;
  if (msg.is_object()) {
    // torch's @record: {"message": {"message": ..., "extraInfo": {...}}}
    out.message = text_of(msg.value("message", json()));
    if (msg.contains("extraInfo") && msg["extraInfo"].is_object()) {
      const json& extra = msg["extraInfo"];
      out.traceback = text_of(extra.value("py_callstack", json()));
      out.timestamp = text_of(extra.value("timestamp", json()));
      out.error_type = text_of(extra.value("error_type", json()));
    }
  } else {
    out.message = text_of(msg);
  }
  return {std::move(out), {}};
}

std::string signal_name(int sig) {
  // sigabbrev_np is glibc >= 2.32; bookworm has 2.36.
  if (const char* name = ::sigabbrev_np(sig); name != nullptr) return std::string("SIG") + name;
  return "SIG" + std::to_string(sig);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return signal_name(WTERMSIG(status));
  return "status " + std::to_string(status);
}

std::string WorkerFailure::how() const {
  if (oom_killed)
    return "killed by the kernel OOM killer" + (memory_peak.empty() ? "" : " (" + memory_peak + ")");
  if (signal != 0) return "signal " + signal_name(signal);
  return "exit code " + std::to_string(exit_code);
}

std::string HangInfo::what() const {
  std::string out = source;
  if (!scope.empty()) out += (source == "FileTimer" ? " scope '" : " '") + scope + "'";
  out += source == "heartbeat"   ? " missed"
         : source == "straggler" ? " named"
         : source == "reform"    ? " not joined"
                                 : " expired";
  if (missed_rank >= 0) out += " on rank " + std::to_string(missed_rank) + ", which waits for it";
  if (!detail.empty()) out += " (" + detail + ")";
  return out;
}

std::size_t FailureReport::root_cause() const {
  const auto it = std::min_element(failures.begin(), failures.end(),
                                   [](const auto& a, const auto& b) { return a.time < b.time; });
  return static_cast<std::size_t>(it - failures.begin());
}

std::string interpreter_hint(const FailureReport& r, const std::string& program) {
  const auto name = std::filesystem::path(program).filename().string();
  if (name.rfind("python", 0) != 0) return "";
  for (const auto& f : r.failures) {
    for (const auto& line : f.stderr_tail) {
      if (line.find("ModuleNotFoundError") != std::string::npos ||
          line.find("ImportError") != std::string::npos) {
        return "the workers ran " + program +
               ", which could not import a module; choose the interpreter with --python PATH "
               "(or PYTHON_EXEC), e.g. the python of your venv or the one torch is installed in\n";
      }
    }
  }
  return "";
}

std::string render_text(const FailureReport& r) {
  std::ostringstream os;
  const std::string rule(72, '=');
  os << rule << '\n'
     << "ddprun: " << r.failures.size() << " worker(s) failed"
     << " (run_id=" << r.run_id << " role=" << r.role << " attempt=" << r.attempt
     << " restarts=" << r.restart_count << "/" << r.max_restarts << ")\n";
  if (r.failures.empty()) return os.str() + rule + '\n';
  const auto root = r.root_cause();
  const auto& f = r.failures[root];
  os << "Root cause (first failure):\n"
     << "  time       : " << format_time(f.time) << '\n'
     << "  host       : " << f.host << '\n'
     << "  rank       : " << f.rank << " (local_rank " << f.local_rank << ")\n"
     << "  pid        : " << f.pid << '\n'
     << "  exit       : " << (f.oom_killed ? "signal SIGKILL: " : "") << f.how() << '\n';
  if (f.hang) {
    const auto& h = *f.hang;
    os << "  hang       : " << h.what() << "; ddprun killed the worker's process tree\n";
    if (!h.waiting.empty()) os << "  waiting    : " << h.waiting << '\n';
    if (!h.culprit_rule.empty()) os << "  culprit    : " << h.culprit_rule << '\n';
    if (!h.liveness_note.empty()) os << "  liveness   : " << h.liveness_note << '\n';
    if (!h.top_frames.empty()) {
      os << "  stuck at   :\n";
      for (const auto& frame : h.top_frames) os << "    " << frame << '\n';
    } else if (!h.stack_note.empty()) {
      os << "  stuck at   : " << h.stack_note << '\n';
    }
    for (const auto& other : h.other_ranks) os << "  " << other << '\n';
    if (!h.stacks_file.empty()) os << "  stacks     : " << h.stacks_file << '\n';
  }
  if (f.error) {
    os << "  error file : " << f.error_file << '\n';
    os << "  message    : " << f.error->message << '\n';
    if (!f.error->traceback.empty()) {
      os << "  traceback  :\n";
      indent_block(os, f.error->traceback, "    ");
    }
  }
  // A Python worker's traceback in its stderr (the tail may start mid-way).
  const bool python = std::any_of(f.stderr_tail.begin(), f.stderr_tail.end(), [](const auto& l) {
    return l.rfind("Traceback (most recent call last)", 0) == 0 || l.rfind("  File \"", 0) == 0;
  });
  if (!f.error && !f.hang && !f.error_file_problem.empty()) {
    os << "  error file : " << f.error_file << " (not used: " << f.error_file_problem << ")\n";
  } else if (!f.error && !f.hang) {
    // Point it at torch's @record.
    os << "  error file : <none written> ("
       << (python ? "decorate main with torch.distributed.elastic.multiprocessing.errors.record"
                  : "wrap main with torch's @record, or ddp::run in C++")
       << " to fill it)\n";
  }
  // The error file's traceback is the one stderr shows too: print it once.
  const std::string message = f.error ? f.error->message.substr(0, f.error->message.find('\n')) : "";
  const bool traceback_shown = f.error && !f.error->traceback.empty() && python && !message.empty() &&
                               std::any_of(f.stderr_tail.begin(), f.stderr_tail.end(), [&](const auto& l) {
                                 return l.find(message) != std::string::npos;
                               });
  if (traceback_shown && !f.stderr_log.empty()) {
    os << "  stderr     : " << f.stderr_log << '\n';
  }
  if (!f.stderr_tail.empty() && !traceback_shown) {
    os << "  last stderr lines" << (f.stderr_log.empty() ? "" : " (" + f.stderr_log + ")") << ":\n";
    for (const auto& line : f.stderr_tail) os << "    " << line << '\n';
  }
  if (r.failures.size() > 1) {
    os << "Other failures:\n";
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < r.failures.size(); ++i) {
      if (i != root) order.push_back(i);
    }
    std::sort(order.begin(), order.end(),
              [&](auto a, auto b) { return r.failures[a].time < r.failures[b].time; });
    for (auto i : order) {
      const auto& o = r.failures[i];
      os << "  rank " << o.rank << " (local_rank " << o.local_rank << ", host " << o.host << ", pid " << o.pid
         << "): " << o.how() << " at " << format_time(o.time);
      if (o.hang) os << ": hung, " << o.hang->what();
      if (o.error) os << ": " << o.error->message.substr(0, o.error->message.find('\n'));
      os << '\n';
    }
  }
  os << rule << '\n';
  return os.str();
}

std::string render_json(const FailureReport& r) {
  json failures = json::array();
  std::vector<std::size_t> order(r.failures.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](auto a, auto b) { return r.failures[a].time < r.failures[b].time; });
  for (auto i : order) {
    const auto& f = r.failures[i];
    json j = {{"host", f.host},
              {"rank", f.rank},
              {"local_rank", f.local_rank},
              {"pid", f.pid},
              {"exit_code", f.signal != 0 ? json() : json(f.exit_code)},
              {"signal", f.signal != 0 ? json(signal_name(f.signal)) : json()},
              {"time", format_time(f.time)},
              {"time_unix_ms",
               std::chrono::duration_cast<std::chrono::milliseconds>(f.time.time_since_epoch()).count()},
              {"error_file", f.error_file},
              {"stderr_tail", f.stderr_tail},
              {"stderr_log", f.stderr_log}};
    if (f.hang) {
      j["hang"] = {{"source", f.hang->source},
                   {"scope", f.hang->scope},
                   {"detail", f.hang->detail},
                   {"what", f.hang->what()},
                   {"top_frames", f.hang->top_frames},
                   {"stacks_file", f.hang->stacks_file},
                   {"stack_note", f.hang->stack_note},
                   {"other_ranks", f.hang->other_ranks},
                   {"waiting", f.hang->waiting},
                   {"missed_rank", f.hang->missed_rank >= 0 ? json(f.hang->missed_rank) : json()},
                   {"culprit_rule", f.hang->culprit_rule},
                   {"liveness_note", f.hang->liveness_note}};
    }
    if (f.oom_killed) {
      j["oom_killed"] = true;
      j["memory_peak_bytes"] = f.memory_peak_bytes >= 0 ? json(f.memory_peak_bytes) : json();
    }
    if (!f.error_file_problem.empty()) j["error_file_problem"] = f.error_file_problem;
    if (f.error) {
      j["message"] = f.error->message;
      j["traceback"] = f.error->traceback;
      j["error_timestamp"] = f.error->timestamp;
    }
    failures.push_back(std::move(j));
  }
  json doc = {{"run_id", r.run_id},
              {"role", r.role},
              {"attempt", r.attempt},
              {"restart_count", r.restart_count},
              {"max_restarts", r.max_restarts},
              {"root_cause", failures.empty() ? json() : failures.front()},
              {"failures", failures}};
  // Worker output is arbitrary bytes: replace invalid UTF-8 rather than throw.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string encode_failure_record(const FailureRecord& r) {
  const json j = {{"node", r.node},
                  {"host", r.host},
                  {"round", r.round},
                  {"rank", r.rank},
                  {"time_unix_ms", r.time_unix_ms},
                  {"failure", r.failure}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<FailureRecord> decode_failure_record(const std::string& text) {
  try {
    const json j = parse_json(text, json_input::kStatusRecord);
    if (!j.is_object()) return std::nullopt;
    FailureRecord r;
    r.node = j.at("node").get<std::string>();
    r.host = j.at("host").get<std::string>();
    r.round = json_integer<std::int64_t>(j.at("round"));
    r.rank = json_integer<int>(j.at("rank"));
    r.time_unix_ms = json_integer<std::int64_t>(j.at("time_unix_ms"));
    r.failure = j.at("failure").get<std::string>();
    return r;
  } catch (const std::exception&) {
    return std::nullopt;  // not JSON, a field missing or of another type
  }
}

std::optional<FailureRecord> first_failure(const std::vector<FailureRecord>& records, std::int64_t round) {
  std::optional<FailureRecord> out;
  for (const auto& r : records) {
    if (round >= 0 && r.round != round) continue;
    if (!out || r.time_unix_ms < out->time_unix_ms) out = r;
  }
  return out;
}

std::string failure_time_text(std::int64_t time_unix_ms) {
  return format_time(std::chrono::system_clock::time_point(std::chrono::milliseconds(time_unix_ms)));
}

}  // namespace ddp::agent

#include "test_support.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_set>

extern char** environ;

namespace ddp::test {

fs::path bin_dir() { return fs::path(DDP_BIN_DIR); }
fs::path bin(const std::string& name) { return bin_dir() / name; }
fs::path source_dir() { return fs::path(DDP_SOURCE_DIR); }

namespace {

// Whether nothing listens on 127.0.0.1:`port` (bind succeeds).
bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("free_port: socket() failed");
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

int free_port() {
  // Below the kernel's ephemeral range (32768-60999 by default): a server that
  // binds port 0 or a client's connect() is given ports from there, so a port
  // handed out here and bound a moment later by the test is not taken by
  // another test running beside it. Also apart from the shell tests' range
  // (tests/support/shell_lib.sh, 10000-18999) and the ports ddprun derives for
  // Slurm jobs (20000+). Random per call, so that parallel test processes
  // rarely try the same one. Never the same port twice in one process: a
  // test that takes several before it binds them (an etcd cluster's client
  // and peer ports) was once handed one port for two members.
  static std::mutex mu;
  static std::unordered_set<int> given;
  std::lock_guard<std::mutex> lock(mu);
  if (given.size() > 2000) given.clear();  // a long loop's old ports are long bound or gone
  thread_local std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(3000, 9999);
  for (int i = 0; i < 200; ++i) {
    const int port = pick(rng);
    if (given.count(port) == 0 && bindable(port)) {
      given.insert(port);
      return port;
    }
  }
  throw std::runtime_error("free_port: no free port on 127.0.0.1 in 3000-9999 after 200 tries");
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ddp-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

ExecArgs::ExecArgs(std::vector<std::string> argv,
                   const std::map<std::string, std::optional<std::string>>& env)
    : argv_strings_(std::move(argv)) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) {
    if (v) {
      merged[k] = *v;
    } else {
      merged.erase(k);
    }
  }
  for (const auto& [k, v] : merged) env_strings_.push_back(k + "=" + v);
  for (auto& e : env_strings_) envp_.push_back(e.data());
  envp_.push_back(nullptr);
  for (auto& a : argv_strings_) args_.push_back(a.data());
  args_.push_back(nullptr);
}

Process::Process(std::vector<std::string> argv, const fs::path& dir,
                 std::map<std::string, std::optional<std::string>> env, const std::string& name) {
  // Tests start processes from several threads at once: each needs its own files.
  static std::atomic<int> counter{0};
  const auto tag = name + "." + std::to_string(++counter);
  out_path_ = dir / (tag + ".out");
  err_path_ = dir / (tag + ".err");

  ExecArgs exec(std::move(argv), env);

  const int out_fd = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::setpgid(0, 0);  // so the destructor can kill everything it started
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::chdir(dir.c_str());
    ::execve(exec.path(), exec.argv(), exec.envp());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
}

Process::~Process() {
  if (!status_ && pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
}

static int decode_status(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

std::optional<int> Process::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  wait_until(
      [&] {
        int st = 0;
        pid_t r = ::waitpid(pid_, &st, WNOHANG);
        if (r == pid_) status_ = decode_status(st);
        return status_.has_value();
      },
      timeout);
  return status_;
}

bool Process::running() {
  if (status_) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = decode_status(st);
    return false;
  }
  return true;
}

void Process::signal(int sig) {
  if (!status_) ::kill(pid_, sig);
}

RunResult run(std::vector<std::string> argv, const fs::path& dir,
              std::map<std::string, std::optional<std::string>> env, std::chrono::milliseconds timeout) {
  Process p(std::move(argv), dir, std::move(env), "run");
  RunResult r;
  auto code = p.wait(timeout);
  r.code = code ? *code : -1;
  r.out = p.out();
  r.err = p.err();
  return r;
}

ProcessTag::ProcessTag() {
  std::random_device rd;
  std::ostringstream s;
  s << "tag-" << ::getpid() << "-" << std::hex << rd() << rd();
  value_ = s.str();
}

ProcessTag::~ProcessTag() {
  for (int i = 0; i < 3; ++i) {
    for (pid_t pid : alive()) ::kill(pid, SIGKILL);
  }
}

std::vector<pid_t> ProcessTag::alive() const {
  std::vector<pid_t> out;
  const std::string needle = "DDP_TEST_TAG=" + value_;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/environ", std::ios::binary);
    for (std::string var; std::getline(in, var, '\0');) {
      if (var == needle) {
        if (pid_alive(static_cast<pid_t>(pid))) out.push_back(static_cast<pid_t>(pid));
        break;
      }
    }
  }
  ::closedir(d);
  return out;
}

bool ProcessTag::all_gone(std::chrono::milliseconds timeout) const {
  return wait_until([&] { return alive().empty(); }, timeout);
}

std::string ProcessTag::describe() const {
  std::string out;
  for (pid_t pid : alive()) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (auto& c : cmd) c = c == '\0' ? ' ' : c;
    out += std::to_string(pid) + ": " + cmd + "\n";
  }
  return out.empty() ? "(none)" : out;
}

bool pid_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  return line[close + 2] != 'Z';
}

HttpReply http_get(int port, const std::string& path, std::chrono::milliseconds timeout,
                   const std::string& extra_headers) {
  HttpReply reply;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return reply;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto ms = std::max<long>(1, static_cast<long>(timeout.count()));
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const auto req =
        "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers + "\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      std::string raw;
      char buf[4096];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<std::size_t>(n));
      if (raw.rfind("HTTP/1.", 0) == 0 && raw.size() > 12) reply.status = std::stoi(raw.substr(9, 3));
      if (auto p = raw.find("\r\n\r\n"); p != std::string::npos) {
        reply.headers = raw.substr(0, p);
        reply.body = raw.substr(p + 4);
      }
    }
  }
  ::close(fd);
  return reply;
}

int wait_for_port_file(const fs::path& path, std::chrono::milliseconds timeout) {
  int port = -1;
  wait_until(
      [&] {
        auto text = read_file(path);
        if (text.empty() || text.back() != '\n') return false;
        port = std::atoi(text.c_str());
        return port > 0;
      },
      timeout);
  return port;
}

const SavedRun& saved_run(const std::string& env, const std::function<SavedRun()>& run, bool fresh) {
  static std::map<std::string, SavedRun> runs;  // by env: one scenario per variable
  if (auto it = runs.find(env); it != runs.end()) return it->second;
  const char* dir_env = std::getenv(env.c_str());
  const fs::path dir = dir_env != nullptr ? dir_env : "";
  if (!dir.empty() && fresh) fs::remove_all(dir);
  SavedRun out;
  if (!dir.empty() && fs::exists(dir / ".done")) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename() != ".done") out[e.path().filename().string()] = read_file(e.path());
    }
  } else {
    out = run();
    if (!dir.empty()) {
      fs::remove_all(dir);
      fs::create_directories(dir);
      for (const auto& [name, text] : out) write_file(dir / name, text);
      write_file(dir / ".done", "");
    }
  }
  return runs.emplace(env, std::move(out)).first->second;
}

}  // namespace ddp::test

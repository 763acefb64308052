// One ddprun agent per host over ssh. Each ssh runs with -tt, so the remote
// ddprun has a pseudo-terminal and gets SIGHUP from sshd when the connection
// ends for any reason (this ddprun stopped, killed, or the network gone): it
// then stops its workers, and nothing is left on that host. Each ssh gets
// SIGTERM if this process dies (PR_SET_PDEATHSIG), which closes its connection.
// The terminal merges the remote stdout and stderr; the remote ddprun tags
// its stderr lines and its failure cause (remote_streams.hpp), and the relay
// sorts them back onto our stdout and stderr.
#include "ssh_launch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/common/exit_code.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/token_file.hpp"
#include "ddp/store/store_server.hpp"
#include "remote_streams.hpp"

namespace ddp::launcher {
namespace {

// After one host's workers failed, how long the others get, beyond
// --stop_timeout, to close the rendezvous and send their last lines (the failed
// host's report among them) before their ssh is stopped: they got the failure
// through the store and end on their own, and a stopped ssh loses what is
// still in flight.
constexpr std::chrono::seconds kEndOnTheirOwn{5};

// ssh's exit status for its own failures (connection refused or lost, bad
// host key; ssh(1)); the forked child uses it too when it cannot exec ssh.
constexpr int kSshFailed = 255;

// Env that follows the job to every host (besides the names in DDP_SSH_ENV):
// what changes how training and its libraries behave.
bool forwarded_by_default(const std::string& name) {
  for (const char* prefix :
       {"NCCL_", "GLOO_", "TORCH_", "PYTHONPATH", "PYTHONUNBUFFERED", "OMP_NUM_THREADS"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string random_id() {
  std::random_device rd;
  std::ostringstream out;
  out << std::hex << rd() << rd();
  return out.str();
}

struct Host {
  RemoteHost spec;
  pid_t pid = -1;
  std::thread out_reader;  // ssh's stdout: the remote terminal
  std::thread err_reader;  // ssh's stderr: ssh's own messages
  // Written by out_reader, read once it is joined: the remote ddprun's
  // failure cause, and its last "ddprun: error: " line.
  std::string failure;
  std::string error;
};

constexpr std::string_view kErrorPrefix = "ddprun: error: ";

// Copies a host's output to our stdout (`channel` "") or stderr, line by line,
// prefixed "HOST: ". One write per line: log lines of this process, written
// without `mu`, do not cut into it.
void emit(std::mutex& mu, std::string_view channel, const std::string& prefix, const std::string& line) {
  const std::string text = prefix + line + "\n";
  std::lock_guard lock(mu);
  (channel.empty() ? std::cout : std::cerr) << text << std::flush;
}

// Feeds everything read from `fd` to `splitter`, then closes `fd`.
void read_to_end(int fd, ChannelSplitter& splitter) {
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    splitter.feed(std::string_view(buf, static_cast<std::size_t>(n)));
  }
  splitter.finish();
  ::close(fd);
}

// The remote terminal: the remote stdout, its tagged stderr and failure cause.
void relay_terminal(int fd, Host& h, std::mutex& mu) {
  const std::string prefix = h.spec.name + ": ";
  ChannelSplitter splitter([&](std::string_view channel, const std::string& line) {
    if (channel == kCauseChannel) {
      h.failure = line;
      return;
    }
    if (!channel.empty() && line.rfind(kErrorPrefix, 0) == 0) h.error = line.substr(kErrorPrefix.size());
    emit(mu, channel.empty() ? "" : kStderrChannel, prefix, line);
  });
  read_to_end(fd, splitter);
}

// ssh's own messages (cannot connect, host key, connection lost): stderr.
void relay_ssh_errors(int fd, const std::string& host, std::mutex& mu) {
  const std::string prefix = host + ": ";
  ChannelSplitter splitter(
      [&](std::string_view, const std::string& line) { emit(mu, kStderrChannel, prefix, line); });
  read_to_end(fd, splitter);
}

// The job's last line when a host failed first (`rc` its ssh's code, or
// 128+N when a signal killed it): the failed worker, rank and cause as the
// remote agents reported it, else why that host ended.
std::string failure_line(const std::vector<Host>& hosts, const Host& first, int rc, int killed_by) {
  const std::string host = "host " + first.spec.name + ": ";
  if (killed_by != 0) return host + "its ssh was killed by signal " + std::to_string(killed_by);
  if (rc == kSshFailed) return host + "ssh failed or lost the connection (see its lines above)";
  if (rc == exit_code(ExitCode::kFailed)) {
    // Every host that knows the cause knows the same one (the failed node's
    // report through the store): the line is the same whichever host ended first.
    if (!first.failure.empty()) return "workers failed: " + first.failure;
    for (const auto& h : hosts) {
      if (!h.failure.empty()) return "workers failed: " + h.failure;
    }
  }
  return host + "ddprun exited with code " + std::to_string(rc) +
         (first.error.empty() ? std::string() : ": " + first.error);
}

// This process has threads (the store's, the relays): between fork and exec
// the child makes async-signal-safe calls only, and allocates nothing (a lock
// another thread held at the fork, stdio's or malloc's, would stay held).
pid_t spawn(const std::vector<std::string>& argv, int out_fd, int err_fd, const sigset_t& old_mask) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const std::string cannot_run = "cannot run " + argv.front() + ": ";
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setpgid(0, 0);  // a Ctrl-C on our terminal reaches us, and we decide
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(kSshFailed);
  const int null_fd = ::open("/dev/null", O_RDONLY);
  ::dup2(null_fd, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  ::close_range(3, ~0U, 0);  // the store's sockets stay with this process
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::execvp(cargv[0], cargv.data());
  // strerrordesc_np: a constant string, no locale (strerror may allocate).
  const char* why = ::strerrordesc_np(errno);
  if (why == nullptr) why = "unknown error";
  const iovec parts[] = {{const_cast<char*>(cannot_run.data()), cannot_run.size()},
                         {const_cast<char*>(why), std::strlen(why)},
                         {const_cast<char*>("\n"), 1}};
  [[maybe_unused]] const ssize_t n = ::writev(2, parts, 3);
  ::_exit(kSshFailed);
}

}  // namespace

std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string remote_command(const std::string& cwd, const std::map<std::string, std::string>& forwarded_env,
                           const std::vector<std::string>& argv) {
  // append(), not operator+: GCC 12 warns on the latter here (-Wrestrict, a false positive).
  std::string cmd = "cd ";
  cmd.append(shell_quote(cwd)).append(" && exec env");
  for (const auto& [k, v] : forwarded_env) cmd.append(" ").append(shell_quote(k + "=" + v));
  for (const auto& a : argv) cmd.append(" ").append(shell_quote(a));
  return cmd;
}

std::vector<std::string> forwarded_args(const std::vector<std::string>& args,
                                        const std::vector<std::string>& program) {
  // The program and its arguments are the tail of the command line (unless
  // they came from --config, which every host reads the same way).
  std::size_t end = args.size();
  if (!program.empty() && program.size() < args.size() &&
      std::equal(program.rbegin(), program.rend(), args.rbegin())) {
    end -= program.size();
  }
  std::vector<std::string> out;
  for (std::size_t i = 1; i < end; ++i) {
    const std::string& a = args[i];
    bool dropped = false;
    for (const char* name : {"--hosts", "--hostfile", "--local_addr", "--local-addr", "--rdzv_conf",
                             "--rdzv-conf", "--rdzv_id", "--rdzv-id"}) {
      if (a == name) {
        ++i;  // and its value
        dropped = true;
      } else if (a.rfind(std::string(name) + "=", 0) == 0) {
        dropped = true;
      }
    }
    if (!dropped) out.push_back(a);
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(std::min(end, args.size())), args.end());
  return out;
}

int run_over_ssh(const LaunchOptions& o, const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env) {
  if (!o.hosts.empty() && !o.hostfile.empty()) throw ConfigError("--hosts and --hostfile: give one of them");
  const std::vector<RemoteHost> specs = o.hosts.empty() ? load_hostfile(o.hostfile) : parse_hosts(o.hosts);
  const std::string flag = o.hosts.empty() ? "--hostfile" : "--hosts";
  if (o.standalone || o.rdzv_backend != "static" || !o.rdzv_endpoint.empty() || o.nnodes != "1:1" ||
      o.node_rank != 0) {
    throw ConfigError(flag +
                      " sets the rendezvous itself: drop --nnodes, --node_rank, --standalone, "
                      "--rdzv_backend and --rdzv_endpoint");
  }
  if (o.program.empty()) throw ConfigError("TRAINING_PROGRAM: missing; see ddprun --help");
  auto log = log::get("ddprun");

  store::StoreServerOptions server_options;
  server_options.host = "0.0.0.0";
  server_options.port = o.master_port_given ? static_cast<std::uint16_t>(o.master_port) : 0;
  if (!o.token_file.empty()) server_options.token = read_token_file(o.token_file, "--token_file");
  store::StoreServer server(server_options);
  server.start();
  char hostname[256] = {};
  ::gethostname(hostname, sizeof(hostname) - 1);
  const std::string addr = o.local_addr.empty() ? hostname : o.local_addr;
  const std::string endpoint = addr + ":" + std::to_string(server.port());
  const std::string run_id = o.rdzv_id == "none" ? random_id() : o.rdzv_id;

  std::map<std::string, std::string> forwarded;
  std::vector<std::string> extra_names;
  if (auto it = env.find("DDP_SSH_ENV"); it != env.end()) extra_names = split(it->second, ',');
  for (const auto& [k, v] : env) {
    if (forwarded_by_default(k) ||
        std::find(extra_names.begin(), extra_names.end(), k) != extra_names.end()) {
      forwarded[k] = v;
    }
  }
  // Marks the remote ddprun as one agent of this job: a --hosts it reads from
  // a --config file does not start another round of ssh.
  forwarded[std::string(kRemoteAgentVar)] = addr;
  std::vector<std::string> ssh = {"ssh"};
  if (auto it = env.find("DDP_SSH_COMMAND"); it != env.end() && !it->second.empty())
    ssh = split(it->second, ' ');
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::vector<std::string> user = forwarded_args(args, o.program);
  bool user_nproc = false;
  for (const auto& a : user) user_nproc = user_nproc || a.rfind("--nproc", 0) == 0;
  const std::string cwd = std::filesystem::current_path().string();
  log->info("starting {} host(s) over ssh store={} run_id={}", specs.size(), endpoint, run_id);

  // SIGINT/SIGTERM/SIGHUP/SIGQUIT are taken by a thread; children get the old mask back.
  sigset_t stop_set;
  sigset_t old_mask;
  sigemptyset(&stop_set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&stop_set, s);
  pthread_sigmask(SIG_BLOCK, &stop_set, &old_mask);
  // An ignored signal is discarded, not queued for sigwait: a shell starts
  // background jobs with SIGINT ignored, and `kill -INT` must still stop the job.
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::signal(s, SIG_DFL);

  // The user's --rdzv_conf (dropped from the forwarded flags) goes on with
  // is_host=false: no remote agent hosts a store of its own.
  const std::string rdzv_conf = (o.rdzv_conf.empty() ? "" : o.rdzv_conf + ",") + "is_host=false";

  std::mutex out_mu;
  std::vector<Host> hosts(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    Host& h = hosts[i];
    h.spec = specs[i];
    // Node ranks follow the host list, as with DeepSpeed's and MPI's
    // launchers: rank 0 runs on the first host. The store is this process's.
    std::vector<std::string> remote = {self,
                                       "--nnodes=" + std::to_string(specs.size()),
                                       "--node_rank=" + std::to_string(i),
                                       "--rdzv_backend=static",
                                       "--rdzv_endpoint=" + endpoint,
                                       "--rdzv_id=" + run_id,
                                       "--rdzv_conf=" + rdzv_conf,
                                       "--local_addr=" + h.spec.name};
    if (h.spec.slots > 0 && !user_nproc) remote.push_back("--nproc_per_node=" + std::to_string(h.spec.slots));
    remote.insert(remote.end(), user.begin(), user.end());
    std::vector<std::string> argv = ssh;
    argv.insert(argv.end(), {"-tt", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", h.spec.name, "--",
                             remote_command(cwd, forwarded, remote)});
    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
    h.pid = spawn(argv, out[1], err[1], old_mask);
    ::close(out[1]);
    ::close(err[1]);
    h.out_reader = std::thread(relay_terminal, out[0], std::ref(h), std::ref(out_mu));
    h.err_reader = std::thread(relay_ssh_errors, err[0], h.spec.name, std::ref(out_mu));
  }

  std::atomic<int> stop_signal{0};
  std::atomic<bool> done{false};
  std::mutex pid_mu;  // Host::pid: cleared by this thread when reaped, read by the signal thread
  const auto stop_all = [&hosts, &pid_mu] {
    std::lock_guard lock(pid_mu);
    for (auto& h : hosts) {
      if (h.pid > 0) ::kill(h.pid, SIGTERM);
    }
  };
  // Set when a host's workers failed: the other hosts are stopped at this time
  // unless they ended before (steady_clock ticks; 0: none).
  std::atomic<std::chrono::steady_clock::rep> stop_at{0};
  std::thread signals([&] {
    const timespec tick{0, 100'000'000};
    while (!done) {
      const int s = sigtimedwait(&stop_set, nullptr, &tick);
      if (s > 0 && stop_signal.exchange(s) == 0) stop_all();
      const auto at = stop_at.load();
      if (at != 0 && std::chrono::steady_clock::now().time_since_epoch().count() >= at) {
        stop_at = 0;
        stop_all();
      }
    }
  });

  int code = exit_code(ExitCode::kOk);
  const Host* first_failed = nullptr;
  int first_rc = 0;
  int first_signal = 0;
  // A host that ended with a rendezvous error while others run is often the
  // echo of a failure elsewhere ("rendezvous ... is closed: workers failed"):
  // a host whose workers failed, ending after it, names the job's outcome.
  bool echo_only = false;
  std::size_t running = hosts.size();
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (auto& h : hosts) {
      if (h.pid != pid) continue;
      {
        std::lock_guard lock(pid_mu);
        h.pid = -1;
      }
      --running;
      const bool killed = WIFSIGNALED(status);
      const int rc = killed ? signal_exit_code(WTERMSIG(status)) : WEXITSTATUS(status);
      const bool first =
          code == exit_code(ExitCode::kOk) || (echo_only && rc == exit_code(ExitCode::kFailed));
      if (rc != exit_code(ExitCode::kOk) && first && stop_signal == 0) {
        // ssh's own failures exit 255, and a killed ssh closed its connection:
        // the host is lost to this job (requeue-able, like a lost node).
        const bool lost = killed || rc == kSshFailed;
        code = lost ? exit_code(ExitCode::kRendezvous) : rc;
        first_failed = &h;
        first_rc = rc;
        first_signal = killed ? WTERMSIG(status) : 0;
        echo_only = !lost && rc == exit_code(ExitCode::kRendezvous) && running > 0;
        // The error line waits for every host's last lines, so that it is ours
        // last; the others end on their own first, within a grace.
        if (rc == exit_code(ExitCode::kFailed) || echo_only) {
          const auto grace = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(o.stop_timeout_s) + kEndOnTheirOwn);
          stop_at = (std::chrono::steady_clock::now() + grace).time_since_epoch().count();
          if (running > 0) {
            log->info(
                "host {} ended with code {}: the other hosts stop their workers (stopped in {:.1f} s if not)",
                h.spec.name, rc, std::chrono::duration<double>(grace).count());
          }
        } else {
          if (running > 0) log->info("host {} ended with code {}: stopping the other hosts", h.spec.name, rc);
          stop_all();
        }
      }
    }
  }
  done = true;
  signals.join();
  for (auto& h : hosts) {
    h.out_reader.join();
    h.err_reader.join();
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  server.stop();
  if (stop_signal != 0) return signal_exit_code(stop_signal);
  if (first_failed != nullptr) {
    std::cerr << kErrorPrefix << failure_line(hosts, *first_failed, first_rc, first_signal) << std::endl;
  }
  return code;
}

}  // namespace ddp::launcher

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

#include "ddp/agent/failure_report.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/exit_code.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/printable.hpp"
#include "ddp/common/token_file.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "remote_streams.hpp"
#include "ssh_hosts.hpp"

namespace ddp::launcher {
namespace {

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

// The remote terminal: the remote stdout, its tagged stderr and failure
// cause. Untagged lines before the start mark are the login shell's: stderr.
void relay_terminal(int fd, Host& h, std::mutex& mu) {
  const std::string prefix = h.spec.name + ": ";
  bool started = false;
  ChannelSplitter splitter([&](std::string_view channel, const std::string& line) {
    if (channel == kCauseChannel) {
      h.failure = line;
      return;
    }
    if (channel == kStartChannel) {
      started = true;
      return;
    }
    if (!channel.empty() && line.rfind(kErrorPrefix, 0) == 0) h.error = line.substr(kErrorPrefix.size());
    emit(mu, channel.empty() && started ? "" : kStderrChannel, prefix, line);
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

// The job's earliest failure by the agents' failure records in this
// process's store (agent::FailureRecord): of the last round any node failed
// in, the one with the earliest time of its own. Empty when there is none.
std::string first_recorded_failure(std::uint16_t port, const std::string& token, const std::string& run_id) {
  try {
    store::TcpStoreOptions options;
    options.endpoint = Endpoint{"127.0.0.1", port};
    options.token = token;
    options.connect_timeout = std::chrono::seconds(2);
    options.request_timeout = std::chrono::seconds(2);
    store::TcpStore client(options);
    std::vector<agent::FailureRecord> records;
    std::int64_t last_round = -1;
    for (const auto& kv : client.list(store::keys::agent_first_failure_prefix(run_id)).kvs) {
      if (auto r = agent::decode_failure_record(kv.value)) {
        last_round = std::max(last_round, r->round);
        records.push_back(std::move(*r));
      }
    }
    const auto first = agent::first_failure(records, last_round);
    return first ? first->failure : "";
  } catch (const std::exception&) {
    return "";  // the hosts' own word below
  }
}

// The job's last line when a host failed first (`rc` its ssh's code, or
// 128+N when a signal killed it): the failed worker, rank and cause as the
// remote agents reported it, else why that host ended. `recorded`: the job's
// first failure by the agents' records.
std::string failure_line(const std::vector<Host>& hosts, const Host& first, int rc, int killed_by,
                         const std::string& recorded) {
  const std::string host = "host " + first.spec.name + ": ";
  if (killed_by != 0) return host + "its ssh was killed by signal " + std::to_string(killed_by);
  if (rc == kSshFailed) return host + "ssh failed or lost the connection (see its lines above)";
  if (rc == exit_code(ExitCode::kFailed)) {
    // The earliest failure by its own time, not the first host to end.
    if (!recorded.empty()) return "workers failed: " + recorded;
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
  std::string cmd = start_mark_command();
  cmd.append("; cd ").append(shell_quote(cwd)).append(" && exec env");
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

namespace {

// The flags --hosts/--hostfile leaves to the user: one list of hosts, no
// rendezvous flags, a program.
std::vector<RemoteHost> hosts_of(const LaunchOptions& o) {
  if (!o.hosts.empty() && !o.hostfile.empty()) throw ConfigError("--hosts and --hostfile: give one of them");
  const std::string flag = o.hosts.empty() ? "--hostfile" : "--hosts";
  if (o.standalone || o.rdzv_backend != "static" || !o.rdzv_endpoint.empty() || o.nnodes != "1:1" ||
      o.node_rank != 0) {
    throw ConfigError(flag +
                      " sets the rendezvous itself: drop --nnodes, --node_rank, --standalone, "
                      "--rdzv_backend and --rdzv_endpoint");
  }
  if (o.program.empty()) throw ConfigError("TRAINING_PROGRAM: missing; see ddprun --help");
  return o.hosts.empty() ? load_hostfile(o.hostfile) : parse_hosts(o.hosts);
}

// What every host's ssh command line shares.
struct SshPlan {
  std::string addr;      // where the hosts reach this ddprun's store
  std::string endpoint;  // addr:port
  std::string run_id;
  std::map<std::string, std::string> forwarded;  // env set on every host
  std::vector<std::string> ssh;                  // the ssh command
  std::string self;                              // this ddprun, run on every host
  std::vector<std::string> user;                 // the user's flags and program
  bool user_nproc = false;                       // the user gave --nproc_per_node
  std::string cwd;
  std::string rdzv_conf;
};

SshPlan plan_ssh(const LaunchOptions& o, const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env, std::uint16_t port) {
  SshPlan p;
  char hostname[256] = {};
  ::gethostname(hostname, sizeof(hostname) - 1);
  p.addr = o.local_addr.empty() ? hostname : o.local_addr;
  p.endpoint = p.addr + ":" + std::to_string(port);
  p.run_id = o.rdzv_id == "none" ? random_id() : o.rdzv_id;
  std::vector<std::string> extra_names;
  if (auto it = env.find("DDP_SSH_ENV"); it != env.end()) extra_names = split(it->second, ',');
  for (const auto& [k, v] : env) {
    if (forwarded_by_default(k) ||
        std::find(extra_names.begin(), extra_names.end(), k) != extra_names.end()) {
      p.forwarded[k] = v;
    }
  }
  // Marks the remote ddprun as one agent of this job: a --hosts it reads from
  // a --config file does not start another round of ssh.
  p.forwarded[std::string(kRemoteAgentVar)] = p.addr;
  p.ssh = {"ssh"};
  if (auto it = env.find("DDP_SSH_COMMAND"); it != env.end() && !it->second.empty())
    p.ssh = split(it->second, ' ');
  p.self = std::filesystem::read_symlink("/proc/self/exe").string();
  p.user = forwarded_args(args, o.program);
  for (const auto& a : p.user) p.user_nproc = p.user_nproc || a.rfind("--nproc", 0) == 0;
  p.cwd = std::filesystem::current_path().string();
  // The user's --rdzv_conf (dropped from the forwarded flags) goes on with
  // is_host=false: no remote agent hosts a store of its own.
  p.rdzv_conf = (o.rdzv_conf.empty() ? "" : o.rdzv_conf + ",") + "is_host=false";
  return p;
}

// Starts host `i` of `n`'s ssh, and the threads that relay its output.
void start_host(Host& h, std::size_t i, std::size_t n, const SshPlan& p, const sigset_t& old_mask,
                std::mutex& out_mu) {
  // Node ranks follow the host list, as with DeepSpeed's and MPI's
  // launchers: rank 0 runs on the first host. The store is this process's.
  std::vector<std::string> remote = {p.self,
                                     "--nnodes=" + std::to_string(n),
                                     "--node_rank=" + std::to_string(i),
                                     "--rdzv_backend=static",
                                     "--rdzv_endpoint=" + p.endpoint,
                                     "--rdzv_id=" + p.run_id,
                                     "--rdzv_conf=" + p.rdzv_conf,
                                     "--local_addr=" + h.spec.name};
  if (h.spec.slots > 0 && !p.user_nproc) remote.push_back("--nproc_per_node=" + std::to_string(h.spec.slots));
  remote.insert(remote.end(), p.user.begin(), p.user.end());
  std::vector<std::string> argv = p.ssh;
  argv.insert(argv.end(), {"-tt", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", h.spec.name, "--",
                           remote_command(p.cwd, p.forwarded, remote)});
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

}  // namespace

int run_over_ssh(const LaunchOptions& o, const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env) {
  const std::vector<RemoteHost> specs = hosts_of(o);
  store::StoreServerOptions server_options;
  server_options.host = "0.0.0.0";
  server_options.port = o.master_port_given ? static_cast<std::uint16_t>(o.master_port) : 0;
  if (!o.token_file.empty()) server_options.token = read_token_file(o.token_file, "--token_file");
  store::StoreServer server(server_options);
  server.start();
  const SshPlan plan = plan_ssh(o, args, env, server.port());
  log::get("ddprun")->info("starting {} host(s) over ssh store={} run_id={}", specs.size(), plan.endpoint,
                           plan.run_id);

  sigset_t old_mask;
  const sigset_t stop_set = block_stop_signals(&old_mask);
  std::mutex out_mu;
  std::vector<Host> hosts(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    hosts[i].spec = specs[i];
    start_host(hosts[i], i, specs.size(), plan, old_mask, out_mu);
  }
  HostStopper stopper(hosts, stop_set);
  const Outcome out = wait_for_hosts(hosts, stopper, o.stop_timeout_s);
  stopper.finish();
  for (auto& h : hosts) {
    h.out_reader.join();
    h.err_reader.join();
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  const std::string recorded = out.first_failed != nullptr && out.first_rc == exit_code(ExitCode::kFailed)
                                   ? first_recorded_failure(server.port(), server_options.token, plan.run_id)
                                   : "";
  server.stop();
  if (stopper.signal() != 0) return signal_exit_code(stopper.signal());
  if (out.first_failed != nullptr) {
    // The cause came from a remote host's output: shown escaped, as its log lines are.
    std::cerr << kErrorPrefix
              << terminal_safe(
                     failure_line(hosts, *out.first_failed, out.first_rc, out.first_signal, recorded))
              << std::endl;
  }
  return out.code;
}

}  // namespace ddp::launcher

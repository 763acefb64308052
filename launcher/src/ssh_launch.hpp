// `ddprun --hosts h1,h2 PROGRAM` / `--hostfile FILE`: one agent per host over
// OpenSSH, the rendezvous store on the launching host.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/launcher/launch_options.hpp"
#include "hostfile.hpp"

namespace ddp::launcher {

// The remote command for one host, as a single shell string (ssh joins its
// arguments with spaces for the remote shell anyway): cd to this directory,
// the forwarded env, and ddprun with the rendezvous flags in front of the
// user's own flags and program. Exposed for unit tests.
std::string remote_command(const std::string& cwd, const std::map<std::string, std::string>& forwarded_env,
                           const std::vector<std::string>& argv);

// Quotes one word for a POSIX shell.
std::string shell_quote(const std::string& word);

// The user's flags and program from `args` (argv[0] dropped) minus the ones
// --hosts replaces (--hosts, --hostfile, --local_addr), passes on itself
// (--rdzv_id) or merged with its own (--rdzv_conf); `program` is the
// parsed TRAINING_PROGRAM and its arguments, passed on untouched.
std::vector<std::string> forwarded_args(const std::vector<std::string>& args,
                                        const std::vector<std::string>& program);

// Set in the env of each remote ddprun (to the launching host): that ddprun
// runs its own node even when --hosts reaches it through --config.
inline constexpr std::string_view kRemoteAgentVar = "DDP_SSH_LAUNCHER";

// Runs the job; returns ddprun's exit code: the first failing host's ddprun
// code, 3 when a host cannot be reached over ssh, 128+N when stopped by
// signal N. Throws ConfigError for bad --hosts/--hostfile or conflicting flags.
int run_over_ssh(const LaunchOptions& options, const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env);

}  // namespace ddp::launcher

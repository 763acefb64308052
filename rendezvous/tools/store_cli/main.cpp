// ddp-store: command-line client of ddp-rendezvousd. Wiring only: parse, connect,
// run one command, map the outcome to an exit code.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "ddp/common/endpoint.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/printable.hpp"
#include "ddp/common/std_fds.hpp"
#include "ddp/common/token_file.hpp"
#include "ddp/store/tcp_store.hpp"
#include "excluded_nodes.hpp"
#include "job_list.hpp"
#include "job_status.hpp"
#include "store_commands.hpp"

namespace {

using namespace ddp::store_cli;

constexpr const char* kFooter =
    "Exit codes: 0 ok; 1 key not found, timed out, or cas not applied; 2 usage error or\n"
    "wrong token; 3 store unreachable (after retrying for --timeout seconds).\n"
    "get without --timeout answers at once; with it, waits for the key.";

// Error messages can carry what a store or a server sent: escaped like its keys.
void fail(const std::exception& e) {
  std::fprintf(stderr, "ddp-store: %s\n", ddp::printable(e.what()).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  ddp::open_closed_std_fds();  // its answer must not go into its own connection
  CLI::App app{"ddp-store: command-line client of the ddp rendezvous store", "ddp-store"};
  app.footer(kFooter);
  std::string endpoint_text;
  std::string token_file;
  double timeout_s = 10.0;
  std::string log_level = "warn";
  app.add_option("--endpoint", endpoint_text, "store HOST:PORT")->required();
  app.add_option("--token-file", token_file, "file holding the auth token");
  app.add_option("--timeout", timeout_s, "seconds to keep trying to connect, and to wait for a reply");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off");
  std::string escape = "auto";
  app.add_option("--escape", escape,
                 "auto|always|never: show control characters in keys and values as escapes (\\x1b); "
                 "auto: when stdout is a terminal")
      ->check(CLI::IsMember({"auto", "always", "never"}));

  Command cmd;
  std::vector<std::string> keys;
  auto positional = [&](CLI::App* sub, const char* name, const char* help) {
    sub->add_option(name, cmd.args, help)->required();
  };
  auto* set = app.add_subcommand("set", "set KEY VALUE");
  set->add_option("key_value", cmd.args, "KEY VALUE")->required()->expected(2);
  auto* get = app.add_subcommand("get", "print the value of KEY");
  positional(get, "key", "KEY");
  get->add_option("--timeout", cmd.wait_seconds, "seconds to wait for the key to appear");
  auto* add = app.add_subcommand("add", "add N to the integer at KEY, print the result");
  add->add_option("key_n", cmd.args, "KEY N")->required()->expected(2);
  auto* cas = app.add_subcommand("cas", "set KEY to NEW if it is OLD; print the value after");
  cas->add_option("key_old_new", cmd.args, "KEY OLD NEW")->required()->expected(3);
  auto* del = app.add_subcommand("del", "delete KEY");
  positional(del, "key", "KEY");
  auto* list = app.add_subcommand("list", "print KEY<TAB>VALUE for every key under PREFIX");
  list->add_option("prefix", cmd.args, "PREFIX")->expected(0, 1);
  auto* watch = app.add_subcommand("watch", "print PUT/DELETE events under PREFIX");
  positional(watch, "prefix", "PREFIX");
  watch->add_option("--count", cmd.count, "exit after N events");
  watch->add_option("--from", cmd.from_revision, "replay from this revision");
  auto* wait = app.add_subcommand("wait", "wait until every KEY exists");
  wait->add_option("keys", cmd.args, "KEY...")->required();
  wait->add_option("--timeout", cmd.wait_seconds, "seconds to wait (default: forever)");
  app.add_subcommand("stat", "print server statistics");
  std::string rdzv_id;
  auto* status = app.add_subcommand(
      "status", "print a ddprun job's nodes: host, group rank, ranks, round, restarts, workers");
  status->add_option("--rdzv_id,--rdzv-id", rdzv_id, "the job's --rdzv_id")->required();
  // Every job on the daemon, without knowing run ids (docs/operations.md).
  bool jobs_json = false;
  auto* jobs = app.add_subcommand(
      "jobs",
      "print one row per ddprun job on the daemon: state, nodes, ranks, round, restarts, last failure");
  jobs->add_option("--rdzv_id,--rdzv-id", rdzv_id, "only this job");
  jobs->add_flag("--json", jobs_json, "a JSON array of the jobs' rows, for scripts");
  // Hosts kept out of a job by --max_node_failures (docs/operations.md).
  auto* excluded = app.add_subcommand("excluded", "list a ddprun job's excluded hosts, or re-admit one");
  excluded->require_subcommand(1);
  auto* ex_list = excluded->add_subcommand("list", "print HOST<TAB>WHY for every excluded host");
  ex_list->add_option("--rdzv_id,--rdzv-id", rdzv_id, "the job's --rdzv_id")->required();
  auto* ex_readmit = excluded->add_subcommand("readmit", "let HOST join the job again");
  ex_readmit->add_option("--rdzv_id,--rdzv-id", rdzv_id, "the job's --rdzv_id")->required();
  ex_readmit->add_option("host", cmd.args, "HOST")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ddp-store: %s; run 'ddp-store --help'\n", ddp::printable(e.what()).c_str());
    return kExitUsage;
  }
  if (app.get_subcommands().empty()) {
    std::fprintf(
        stderr,
        "ddp-store: a command is required (set get add cas del list watch wait stat status jobs excluded); "
        "run "
        "'ddp-store --help'\n");
    return kExitUsage;
  }
  // Range checks here rather than CLI11 validators, whose messages print DBL_MAX.
  const char* negative = cmd.count < 0                                 ? "--count"
                         : cmd.from_revision < 0                       ? "--from"
                         : cmd.wait_seconds && *cmd.wait_seconds < 0.0 ? "--timeout (of the command)"
                         : !(timeout_s > 0.0)                          ? "--timeout"
                                                                       : nullptr;
  if (negative != nullptr) {
    std::fprintf(stderr, "ddp-store: %s must be a positive number (seconds for timeouts)\n", negative);
    return kExitUsage;
  }
  cmd.name = app.get_subcommands().front()->get_name();
  cmd.escape = escape == "always" || (escape == "auto" && ::isatty(STDOUT_FILENO) == 1);

  try {
    ddp::log::setup(log_level, "ddp-store");
    ddp::store::TcpStoreOptions options;
    options.endpoint = ddp::parse_endpoint(endpoint_text, "--endpoint");
    if (!token_file.empty()) options.token = ddp::read_token_file(token_file, "--token-file");
    options.connect_timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    options.request_timeout = options.connect_timeout;
    ddp::store::TcpStore store(options);
    int code = 0;
    if (cmd.name == "status") {
      code = print_job_status(store, rdzv_id);
    } else if (cmd.name == "jobs") {
      code = print_jobs(store, rdzv_id, jobs_json);
    } else if (cmd.name == "excluded") {
      code = ex_list->parsed() ? list_excluded(store, rdzv_id)
                               : readmit_excluded(store, rdzv_id, cmd.args.at(0));
    } else {
      code = run_command(store, cmd);
    }
    std::fflush(stdout);
    return code;
  } catch (const ddp::ConfigError& e) {
    fail(e);
    return kExitUsage;
  } catch (const ddp::store::AuthError& e) {
    fail(e);
    return kExitUsage;
  } catch (const ddp::TimeoutError& e) {
    fail(e);
    return kExitNotFound;
  } catch (const ddp::NetworkError& e) {
    fail(e);
    return kExitUnreachable;
  } catch (const std::exception& e) {
    fail(e);
    return kExitNotFound;
  }
}

// --hosts / --hostfile parsing and the command each host runs over ssh.
#include "hostfile.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "ssh_launch.hpp"

using namespace ddp::launcher;
using Args = std::vector<std::string>;

TEST_CASE("a hostfile lists hosts with their slots, comments and blank lines ignored") {
  const auto hosts =
      parse_hostfile("# cluster\nworker-1 slots=4\n\n  worker-2   slots=8  # big\nworker-3\n", "hf");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].name == "worker-1");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[1].name == "worker-2");
  CHECK(hosts[1].slots == 8);
  CHECK(hosts[2].slots == 0);
  // Open MPI's hostfiles cap each host's slots too.
  const auto mpi = parse_hostfile("n1 slots=4 max_slots=8\nn2 max-slots=2\n", "hf");
  REQUIRE(mpi.size() == 2);
  CHECK(mpi[0].slots == 4);
  CHECK(mpi[1].slots == 0);
}

TEST_CASE("hostfile mistakes name the file and line") {
  CHECK_THROWS_WITH(parse_hostfile("a slots=2\nb slots=x\n", "hf"),
                    "hf:2: slots 'x' is not a positive integer");
  CHECK_THROWS_WITH(parse_hostfile("a slots=0\n", "hf"), "hf:1: slots '0' is not a positive integer");
  CHECK_THROWS_WITH(parse_hostfile("a gpus=2\n", "hf"),
                    "hf:1: 'gpus=2' is not understood; lines are `HOST slots=N [max_slots=M]`");
  CHECK_THROWS_WITH(parse_hostfile("a\na slots=2\n", "hf"),
                    "hf:2: host 'a' is listed twice; give it once with all its slots");
  CHECK_THROWS_WITH(parse_hostfile("# none\n", "hf"),
                    "--hostfile: hf lists no host; lines are `HOST slots=N [max_slots=M]`");
  CHECK_THROWS_WITH(parse_hostfile("a slots=8 max_slots=4\n", "hf"),
                    "hf:1: slots=8 is more than max_slots=4");
  CHECK_THROWS_WITH(parse_hostfile("a max_slots=x\n", "hf"), "hf:1: max_slots 'x' is not a positive integer");
  CHECK_THROWS_WITH(parse_hostfile("a;rm slots=1\n", "hf"), "hf:1: 'a;rm' is not a host name");
  CHECK_THROWS_WITH(load_hostfile("/nonexistent/hostfile"),
                    "--hostfile: cannot read '/nonexistent/hostfile'");
}

TEST_CASE("the hosts flag takes names with optional slots") {
  const auto hosts = parse_hosts("h1,h2:4");
  REQUIRE(hosts.size() == 2);
  CHECK(hosts[0].name == "h1");
  CHECK(hosts[0].slots == 0);
  CHECK(hosts[1].slots == 4);
  CHECK_THROWS_WITH(parse_hosts(""), "--hosts: no host given; use --hosts h1,h2");
  CHECK_THROWS_WITH(parse_hosts("h1,-oProxyCommand=x"), "--hosts: '-oProxyCommand=x' is not a host name");
  CHECK_THROWS_WITH(parse_hosts("h1,h1"), Catch::Contains("listed twice"));
}

TEST_CASE("the remote command quotes every word for the remote shell") {
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(
      remote_command("/work dir", {{"NCCL_DEBUG", "INFO"}}, {"/bin/ddprun", "a b", "$HOME"}) ==
      "printf '\\036ddprun:start\\037\\n'; cd '/work dir' && exec env 'NCCL_DEBUG=INFO' '/bin/ddprun' 'a b' "
      "'$HOME'");
}

TEST_CASE("each host gets the user's flags and program without the ones --hosts replaces") {
  const Args args = {"ddprun",       "--hosts",  "h1,h2",    "--max_restarts=2", "--hostfile=x",
                     "--local_addr", "10.0.0.1", "train.py", "--hosts",          "passed-to-the-program"};
  CHECK(forwarded_args(args, {"train.py", "--hosts", "passed-to-the-program"}) ==
        Args{"--max_restarts=2", "train.py", "--hosts", "passed-to-the-program"});
  CHECK(forwarded_args({"ddprun", "--hosts=a,b", "-m", "pkg.mod"}, {"pkg.mod"}) == Args{"-m", "pkg.mod"});
  // --rdzv_conf goes on merged with the launcher's own (is_host=false), and
  // --rdzv_id as the launcher's own.
  CHECK(forwarded_args({"ddprun", "--rdzv_conf", "join_timeout=9", "--rdzv-conf=a=1", "--rdzv_id=j",
                        "--rdzv-id", "j", "t.py", "--rdzv_conf=x"},
                       {"t.py", "--rdzv_conf=x"}) == Args{"t.py", "--rdzv_conf=x"});
}

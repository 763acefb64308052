// The Slurm layer of ddprun's configuration: inside an allocation, the job's
// env gives the rendezvous flags, so `srun --ntasks-per-node=1 ddprun train.py`
// needs none. It sits below the command line, --config and PET_*/DDP_* env,
// above the defaults (docs/deploy.md).
#pragma once

#include <functional>
#include <map>
#include <string>

namespace ddp::launcher {

// Maps a node name from a Slurm host list to an address this node can reach:
// the name itself when it resolves, else the node's NodeAddr from scontrol.
using NodeAddrLookup = std::function<std::string(const std::string& node)>;
std::string slurm_node_addr(const std::string& node);

// Option values (long flag name -> value) that the Slurm env of this process
// implies, leaving out the names in `set_above` (set by a higher layer). Empty
// outside Slurm (no SLURM_JOB_ID) or with DDP_SLURM=0. With `standalone` (the
// rendezvous is set otherwise: --standalone, --hosts) only nproc_per_node and
// signals_to_handle are derived. Throws ConfigError naming
// the variables when the env is inconsistent (a node id >= the node count, a
// host list of the wrong length), or when ddprun is started in a way that
// cannot form the job (in the batch script of a multi-node job, or as several
// tasks per node).
std::map<std::string, std::string> slurm_option_values(const std::map<std::string, std::string>& env,
                                                       const std::map<std::string, std::string>& set_above,
                                                       bool standalone,
                                                       const NodeAddrLookup& lookup = slurm_node_addr);

}  // namespace ddp::launcher

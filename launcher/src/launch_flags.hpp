// The table of ddprun's flags that a config file and PET_<FLAG> can also set
// (launch_options.cpp registers each with CLI11), and the groups of --help.
#pragma once

#include <span>
#include <string>
#include <variant>

#include "ddp/launcher/launch_options.hpp"

namespace ddp::launcher {

// The groups of ddprun --help.
inline constexpr const char* kNodeGroup = "Worker/node size";
inline constexpr const char* kRdzvGroup = "Rendezvous";
inline constexpr const char* kLaunchGroup = "User-code launch";
inline constexpr const char* kLogsGroup = "Logs";
inline constexpr const char* kLegacyGroup = "Static rendezvous (torch.distributed.launch compatible)";
inline constexpr const char* kOursGroup = "ddprun";  // ddprun's own flags: they also read DDP_<FLAG>

// One flag that a config file and PET_<FLAG> can also set: its long name (the
// `-` spelling comes with it), the option it fills (a bool one is a switch),
// its group and help, and optionally a short name and a second long name.
struct FlagSpec {
  const char* name;
  std::variant<std::string LaunchOptions::*, int LaunchOptions::*, double LaunchOptions::*,
               bool LaunchOptions::*>
      field;
  const char* group;
  const char* help;
  const char* shorthand = "";
  const char* alias = "";
};

// Every such flag, in --help and --print-config order.
std::span<const FlagSpec> launch_flags();

}  // namespace ddp::launcher

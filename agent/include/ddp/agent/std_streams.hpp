// torchrun's --redirects / --tee values: which of a worker's std streams go to
// log files (and, for --redirects, no longer to the console).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace ddp::agent {

// Bit mask, torchrun's numbering: 0 none, 1 stdout, 2 stderr, 3 both.
enum class Std : std::uint8_t { kNone = 0, kOut = 1, kErr = 2, kAll = 3 };

inline bool has(Std mask, Std bit) { return (static_cast<unsigned>(mask) & static_cast<unsigned>(bit)) != 0; }

// One value for every local rank ("3") or a map per local rank ("0:1,1:2");
// local ranks missing from a map get kNone, as in torchrun.
struct StdSpec {
  Std all = Std::kNone;
  std::map<int, Std> per_rank;  // non-empty: the map form was used

  Std for_rank(int local_rank) const;
  bool any() const;
};

// Parses "N" or "lr:N,lr:N". Throws ConfigError naming `flag`.
StdSpec parse_std_spec(std::string_view text, std::string_view flag);

}  // namespace ddp::agent

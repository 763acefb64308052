// `ddp-store excluded list|readmit --rdzv_id ID [HOST]`: the hosts a ddprun job
// keeps out of its later rounds (--max_node_failures), and re-admitting one
// (docs/operations.md, "Excluded nodes").
#pragma once

#include <string>

#include "ddp/store/store.hpp"

namespace ddp::store_cli {

// Prints "HOST<TAB>WHY" per excluded host; returns 0 (nothing printed when
// none is excluded).
int list_excluded(store::Store& store, const std::string& rdzv_id);

// Deletes HOST's exclusion: its next ddprun may join the job again (as a
// spare when the job runs at MAX). Returns 0, or 1 with a line on stderr when
// HOST is not excluded.
int readmit_excluded(store::Store& store, const std::string& rdzv_id, const std::string& host);

}  // namespace ddp::store_cli

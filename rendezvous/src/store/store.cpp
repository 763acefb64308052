// The parts of the Store interface with a default: batch() one op at a time.
#include "ddp/store/store.hpp"

namespace ddp::store {

void Store::batch(std::vector<BatchOp>& ops) {
  for (auto& op : ops) {
    try {
      switch (op.kind) {
        case BatchOp::Kind::kSet:
          op.number = set(op.key, op.value, op.lease);
          break;
        case BatchOp::Kind::kCompareSet:
          op.result = compare_set(op.key, op.expected, op.value, op.lease);
          break;
        case BatchOp::Kind::kAdd:
          op.number = add(op.key, op.delta);
          break;
      }
    } catch (const NetworkError&) {
      throw;  // the store is out of reach: so are the ops after this one
    } catch (...) {
      op.error = std::current_exception();
    }
  }
}

std::vector<std::unique_ptr<WatchHandle>> Store::watch_all(std::vector<WatchSpec> specs) {
  std::vector<std::unique_ptr<WatchHandle>> handles;
  handles.reserve(specs.size());
  // A throw destroys the handles made so far, which cancels their watches.
  for (auto& s : specs) {
    handles.push_back(watch(s.prefix, s.from_revision, std::move(s.on_event), std::move(s.on_error)));
  }
  return handles;
}

}  // namespace ddp::store

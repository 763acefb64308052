// The parts of the Store interface with a default: batch() one op at a time,
// count_children() from a list(),
// and the WatchHandle of a store whose cancelling is one call.
#include "ddp/store/store.hpp"

#include <utility>

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
        case BatchOp::Kind::kTryGet:
          if (auto v = try_get(op.key)) {
            op.found = true;
            op.result = std::move(*v);
          }
          break;
        case BatchOp::Kind::kGet:
          op.result = get(op.key, op.wait);
          op.found = true;
          break;
        case BatchOp::Kind::kLeaseGrant:
          op.number = lease_grant(op.wait);
          break;
      }
    } catch (const NetworkError&) {
      throw;  // the store is out of reach: so are the ops after this one
    } catch (...) {
      op.error = std::current_exception();
    }
  }
}

std::vector<ChildCount> Store::count_children(const std::string& prefix) {
  std::vector<ChildCount> out;
  for (const auto& kv : list(prefix).kvs) {
    const std::string_view rest = std::string_view(kv.key).substr(prefix.size());
    const auto slash = rest.find('/');
    const std::string_view child = slash == std::string_view::npos ? rest : rest.substr(0, slash + 1);
    if (out.empty() || out.back().child != child) out.push_back({std::string(child), 0});
    ++out.back().keys;
  }
  return out;
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

namespace {

class CallbackWatchHandle final : public WatchHandle {
 public:
  explicit CallbackWatchHandle(std::function<void()> cancel) : cancel_(std::move(cancel)) {}
  ~CallbackWatchHandle() override { cancel(); }
  void cancel() override {
    if (cancel_) std::exchange(cancel_, nullptr)();
  }

 private:
  std::function<void()> cancel_;
};

}  // namespace

std::unique_ptr<WatchHandle> make_watch_handle(std::function<void()> cancel) {
  return std::make_unique<CallbackWatchHandle>(std::move(cancel));
}

}  // namespace ddp::store

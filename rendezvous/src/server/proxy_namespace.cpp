#include "proxy_namespace.hpp"

namespace ddp::store::server {

std::string ProxyNamespace::to_store(std::string_view client_key) const {
  if (!client_key.empty() && client_key.front() == '/') client_key.remove_prefix(1);
  std::string out;
  out.reserve(prefix_.size() + client_key.size());
  out.append(prefix_).append(client_key);
  return out;
}

std::string ProxyNamespace::to_client(std::string_view store_key) const {
  if (store_key.substr(0, prefix_.size()) != prefix_) return std::string(store_key);
  std::string out;
  out.reserve(store_key.size() - prefix_.size() + 1);
  out.push_back('/');
  out.append(store_key.substr(prefix_.size()));
  return out;
}

void ProxyNamespace::to_store(Request& req) {
  if (req.op == Op::kNumKeys) {
    // Costs a listing of this round's keys (values included); torch calls
    // num_keys rarely, never while bootstrapping a process group.
    req.op = Op::kList;
    req.keys = {prefix_};
    num_keys_ids_.insert(req.id);
    return;
  }
  for (auto& key : req.keys) key = to_store(key);
}

void ProxyNamespace::from_store(Response& resp) {
  if (num_keys_ids_.erase(resp.id) != 0) {
    resp.num = static_cast<std::int64_t>(resp.items.size());
    resp.items.clear();
    return;
  }
  for (auto& item : resp.items) {
    if (!item.key.empty()) item.key = to_client(item.key);
  }
}

}  // namespace ddp::store::server

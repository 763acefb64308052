#include "ddp/rdzv/backend.hpp"

#include <array>

#include "ddp/store/etcd_store.hpp"

namespace ddp::rdzv {
namespace {

struct Name {
  std::string_view name;
  Backend backend;
};

// The canonical name of each backend comes first, then its aliases.
constexpr std::array kNames = {
    Name{"static", Backend::kStatic},
    Name{"c10d", Backend::kC10d},
    Name{"dynamic", Backend::kC10d},
    Name{"ddp", Backend::kC10d},
    Name{"etcd", Backend::kEtcd},
    Name{"etcd-v2", Backend::kEtcd},
    Name{"standalone", Backend::kStandalone},
};

}  // namespace

std::optional<Backend> parse_backend(std::string_view name) {
  for (const auto& n : kNames) {
    if (n.name == name) return n.backend;
  }
  return std::nullopt;
}

std::string_view backend_name(Backend b) {
  for (const auto& n : kNames) {
    if (n.backend == b) return n.name;
  }
  return "unknown";
}

std::string backend_choices() {
  std::string out;
  for (std::size_t i = 0; i < kNames.size();) {
    const auto b = kNames[i].backend;
    std::string aliases;
    std::size_t j = i + 1;
    for (; j < kNames.size() && kNames[j].backend == b; ++j) {
      aliases += (aliases.empty() ? "" : ", ") + std::string(kNames[j].name);
    }
    if (!out.empty()) out += j == kNames.size() ? " or " : ", ";
    out += kNames[i].name;
    if (!aliases.empty()) out += " (alias " + aliases + ")";
    i = j;
  }
  return out;
}

std::vector<Endpoint> parse_etcd_endpoints(std::string_view text, std::string_view what) {
  return store::parse_etcd_endpoints(text, what);
}

}  // namespace ddp::rdzv

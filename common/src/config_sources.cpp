#include "ddp/common/config_sources.hpp"

namespace ddp {

void ConfigSources::add(SourceKind kind, Lookup lookup, Prepare prepare) {
  sources_.push_back({kind, std::move(lookup), std::move(prepare)});
}

std::map<std::string, SourcedValue> ConfigSources::resolve(const std::vector<std::string>& keys) const {
  std::map<std::string, SourcedValue> out;
  for (const auto& s : sources_) {
    if (s.prepare) s.prepare(out);
    for (const auto& key : keys) {
      if (out.count(key) != 0) continue;
      if (auto v = s.lookup(key)) {
        v->kind = s.kind;
        out.emplace(key, std::move(*v));
      }
    }
  }
  return out;
}

}  // namespace ddp

#include "guard_request.hpp"

#include <cerrno>
#include <cstdlib>

#include "ddp/common/parse.hpp"

namespace ddp::guard {

namespace {

void put(std::string& out, const std::string& field) {
  out += field;
  out.push_back('\0');
}

// Reads fields off the front of a payload.
class Fields {
 public:
  explicit Fields(const std::string& p) : p_(p) {}
  bool done() const { return at_ >= p_.size(); }
  std::optional<std::string> next() {
    const auto end = p_.find('\0', at_);
    if (end == std::string::npos) return std::nullopt;  // the last field lacks its NUL
    std::string f = p_.substr(at_, end - at_);
    at_ = end + 1;
    return f;
  }
  std::optional<long long> number(long long max) {
    const auto f = next();
    if (!f || f->empty()) return std::nullopt;
    const auto v = parse_int<long long>(*f);
    if (!v || *v < 0 || *v > max) return std::nullopt;
    return v;
  }

 private:
  const std::string& p_;
  std::size_t at_ = 0;
};

}  // namespace

// Fields, in order: stop timeout (ms), fence file, cwd, CPUs (comma-separated
// indices, empty for none), session (kSessionShared + 2 .. 4: never negative),
// argc, argv..., envc, env...
std::string encode_request(const GuardRequest& r) {
  std::string out;
  put(out, std::to_string(r.stop_timeout.count()));
  put(out, r.fence_file);
  put(out, r.cwd);
  std::string cpus;
  if (r.cpus) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &*r.cpus)) continue;
      if (!cpus.empty()) cpus.push_back(',');
      cpus += std::to_string(c);
    }
    if (cpus.empty())
      cpus = "none";  // an empty set: the guard's sched_setaffinity fails, as fork_exec's does
  }
  put(out, cpus);
  put(out, std::to_string(r.session - kSessionShared));
  put(out, std::to_string(r.argv.size()));
  for (const auto& a : r.argv) put(out, a);
  put(out, std::to_string(r.env.size()));
  for (const auto& e : r.env) put(out, e);
  return out;
}

std::optional<GuardRequest> decode_request(const std::string& payload, std::string* why) {
  auto fail = [&](const char* what) -> std::optional<GuardRequest> {
    if (why != nullptr) *why = what;
    return std::nullopt;
  };
  Fields f(payload);
  GuardRequest r;
  const auto stop = f.number(1LL << 50);
  if (!stop) return fail("bad stop timeout");
  r.stop_timeout = std::chrono::milliseconds(*stop);
  auto fence = f.next();
  auto cwd = f.next();
  auto cpus = f.next();
  if (!fence || !cwd || !cpus) return fail("truncated header");
  r.fence_file = std::move(*fence);
  r.cwd = std::move(*cwd);
  if (!cpus->empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (*cpus != "none") {
      std::size_t at = 0;
      while (at <= cpus->size()) {
        const auto comma = cpus->find(',', at);
        const std::string one = cpus->substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        const auto c = parse_int<long>(one);
        if (!c || *c < 0 || *c >= CPU_SETSIZE) return fail("bad CPU list");
        CPU_SET(static_cast<int>(*c), &set);
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    }
    r.cpus = set;
  }
  const auto session = f.number(2 - kSessionShared);
  if (!session) return fail("bad session");
  r.session = static_cast<int>(*session) + kSessionShared;
  const auto argc = f.number(static_cast<long long>(kMaxRequestBytes));
  if (!argc || *argc == 0) return fail("bad argc");
  for (long long i = 0; i < *argc; ++i) {
    auto a = f.next();
    if (!a) return fail("truncated argv");
    r.argv.push_back(std::move(*a));
  }
  if (r.argv[0].empty() || r.argv[0][0] != '/') return fail("the worker's path is not absolute");
  const auto envc = f.number(static_cast<long long>(kMaxRequestBytes));
  if (!envc) return fail("bad envc");
  for (long long i = 0; i < *envc; ++i) {
    auto e = f.next();
    if (!e) return fail("truncated environment");
    r.env.push_back(std::move(*e));
  }
  if (!f.done()) return fail("bytes after the environment");
  return r;
}

}  // namespace ddp::guard

// Slurm hostlist and count-list expansion (see hostlist.hpp for the syntax).
#include "ddp/common/hostlist.hpp"

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"

namespace ddp {
namespace {

[[noreturn]] void bad(std::string_view what, std::string_view text, const std::string& why) {
  throw ConfigError(std::string(what) + "='" + std::string(text) + "' is not a Slurm host list: " + why);
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

std::uint64_t number(std::string_view s, std::string_view what, std::string_view text) {
  const auto v = all_digits(s) && s.size() <= 18 ? parse_int<std::uint64_t>(s) : std::nullopt;
  if (!v) {
    std::string why = "'";  // appended, not concatenated: GCC 12 warns on the latter (-Wrestrict)
    why.append(s).append("' is not a number in a range");
    bad(what, text, why);
  }
  return *v;
}

// "001-003,007" -> 001, 002, 003, 007.
std::vector<std::string> expand_ranges(std::string_view inside, std::string_view what,
                                       std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= inside.size()) {
    const std::size_t comma = std::min(inside.find(',', start), inside.size());
    const std::string_view item = inside.substr(start, comma - start);
    const std::size_t dash = item.find('-');
    const std::string_view lo_text = item.substr(0, dash);
    const std::string_view hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    const std::uint64_t lo = number(lo_text, what, text);
    const std::uint64_t hi = number(hi_text, what, text);
    if (hi < lo) bad(what, text, "range '" + std::string(item) + "' runs backwards");
    if (hi - lo >= kMaxHosts || out.size() + (hi - lo) >= kMaxHosts) {
      bad(what, text, "more than " + std::to_string(kMaxHosts) + " hosts");
    }
    for (std::uint64_t v = lo; v <= hi; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
    start = comma + 1;
  }
  return out;
}

// One name with any number of bracket groups, multiplied out left to right.
void expand_name(std::string_view name, std::string_view what, std::string_view text,
                 std::vector<std::string>& out) {
  if (name.empty()) bad(what, text, "empty host name");
  std::vector<std::string> partial{""};
  std::size_t pos = 0;
  while (pos < name.size()) {
    const std::size_t open = name.find('[', pos);
    const std::string_view literal = name.substr(pos, open - pos);
    if (literal.find(']') != std::string_view::npos) bad(what, text, "']' without '['");
    for (auto& p : partial) p += literal;
    if (open == std::string_view::npos) break;
    const std::size_t close = name.find(']', open);
    if (close == std::string_view::npos) bad(what, text, "'[' without ']'");
    const std::string_view inside = name.substr(open + 1, close - open - 1);
    if (inside.find('[') != std::string_view::npos) bad(what, text, "'[' inside '[...]'");
    const auto values = expand_ranges(inside, what, text);
    if (partial.size() * values.size() + out.size() > kMaxHosts) {
      bad(what, text, "more than " + std::to_string(kMaxHosts) + " hosts");
    }
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (const auto& p : partial) {
      for (const auto& v : values) next.push_back(p + v);
    }
    partial = std::move(next);
    pos = close + 1;
  }
  out.insert(out.end(), partial.begin(), partial.end());
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view text, std::string_view what) {
  std::vector<std::string> out;
  if (text.find_first_of(" \t\n") != std::string_view::npos) bad(what, text, "contains a space");
  if (text.empty()) bad(what, text, "empty");
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') {
      if (++depth > 1) bad(what, text, "'[' inside '[...]'");
    } else if (c == ']') {
      if (--depth < 0) bad(what, text, "']' without '['");
    } else if (c == ',' && depth == 0) {
      expand_name(text.substr(start, i - start), what, text, out);
      start = i + 1;
    }
  }
  if (depth != 0) bad(what, text, "'[' without ']'");
  return out;
}

std::vector<int> expand_count_list(std::string_view text, std::string_view what) {
  const auto fail = [&] {
    throw ConfigError(std::string(what) + "='" + std::string(text) +
                      "' is not a Slurm count list such as 2(x3),1");
  };
  std::vector<int> out;
  std::size_t start = 0;
  if (text.empty()) fail();
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    std::string_view item = text.substr(start, comma - start);
    std::uint64_t repeat = 1;
    if (const auto paren = item.find("(x"); paren != std::string_view::npos) {
      if (item.back() != ')') fail();
      const std::string_view times = item.substr(paren + 2, item.size() - paren - 3);
      if (!all_digits(times) || times.size() > 7) fail();
      repeat = *parse_int<std::uint64_t>(times);
      item = item.substr(0, paren);
    }
    if (!all_digits(item) || item.size() > 9 || repeat == 0 || out.size() + repeat > kMaxHosts) fail();
    out.insert(out.end(), repeat, *parse_int<int>(item));
    start = comma + 1;
  }
  return out;
}

int slurm_store_port(std::uint64_t job_id, std::uint64_t step_id) {
  return kSlurmPortBase + static_cast<int>((job_id * 4 + step_id % 4) % kSlurmPortSpan);
}

}  // namespace ddp

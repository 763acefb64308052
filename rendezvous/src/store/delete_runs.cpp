// kDeleteRuns: many deletions of one revision as one watch event item
// (docs/store-protocol.md, "Watches"). The server compacts, the client expands.
#include <algorithm>
#include <charconv>
#include <map>

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"
#include "ddp/store/protocol.hpp"

namespace ddp::store {
namespace {

// Digits beyond this could overflow int64 on the client.
constexpr std::size_t kMaxDigits = 18;

// The number ending `key` when it is canonical (no leading zero, not empty).
bool split_number(std::string_view key, std::string_view& stem, std::int64_t& number) {
  std::size_t i = key.size();
  while (i > 0 && key[i - 1] >= '0' && key[i - 1] <= '9') --i;
  const auto digits = key.substr(i);
  if (digits.empty() || digits.size() > kMaxDigits || (digits.size() > 1 && digits[0] == '0')) return false;
  const auto v = parse_int<std::int64_t>(digits);
  if (!v) return false;
  number = *v;
  stem = key.substr(0, i);
  return true;
}

std::int64_t parse_number(std::string_view s, std::string_view value) {
  const auto n =
      s.size() > kMaxDigits || (s.size() > 1 && s[0] == '0') ? std::nullopt : parse_int<std::int64_t>(s);
  if (!n) throw ProtocolError("malformed delete runs \"" + std::string(value.substr(0, 64)) + "\"");
  return *n;
}

// One stem's numbers (sorted, unique) as items of at most kMaxKeysPerDeleteRuns keys.
void append_runs(const std::string& stem, const std::vector<std::int64_t>& numbers, std::int64_t revision,
                 std::vector<Item>& out) {
  std::size_t i = 0;
  while (i < numbers.size()) {
    Item item;
    item.kind = ItemKind::kDeleteRuns;
    item.key = stem;
    item.revision = revision;
    const auto end = std::min(numbers.size(), i + kMaxKeysPerDeleteRuns);
    while (i < end) {
      std::size_t j = i;
      while (j + 1 < end && numbers[j + 1] == numbers[j] + 1) ++j;
      if (!item.value.empty()) item.value.push_back(',');
      item.value += std::to_string(numbers[i]);
      if (j > i) {
        item.value.push_back('-');
        item.value += std::to_string(numbers[j]);
      }
      i = j + 1;
    }
    out.push_back(std::move(item));
  }
}

}  // namespace

std::vector<Item> compact_deletions(std::vector<Item> items) {
  std::map<std::string_view, std::vector<std::int64_t>> by_stem;
  for (const auto& item : items) {
    std::string_view stem;
    std::int64_t n = 0;
    if (item.kind == ItemKind::kDelete && split_number(item.key, stem, n)) by_stem[stem].push_back(n);
  }
  bool any = false;
  for (auto& [stem, numbers] : by_stem) {
    std::sort(numbers.begin(), numbers.end());
    numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
    any = any || numbers.size() >= 2;
  }
  if (!any) return items;
  std::vector<Item> out;
  std::map<std::string_view, bool> placed;
  for (auto& item : items) {
    std::string_view stem;
    std::int64_t n = 0;
    if (item.kind == ItemKind::kDelete && split_number(item.key, stem, n)) {
      const auto& numbers = by_stem.at(stem);
      if (numbers.size() >= 2) {
        if (!placed[stem]) {
          placed[stem] = true;
          append_runs(std::string(stem), numbers, item.revision, out);
        }
        continue;
      }
    }
    out.push_back(std::move(item));
  }
  return out;
}

std::vector<std::pair<std::int64_t, std::int64_t>> parse_delete_runs(std::string_view value) {
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  std::uint64_t keys = 0;
  std::size_t pos = 0;
  while (pos <= value.size()) {
    auto comma = value.find(',', pos);
    if (comma == std::string_view::npos) comma = value.size();
    const auto run = value.substr(pos, comma - pos);
    const auto dash = run.find('-');
    const auto first = parse_number(run.substr(0, dash), value);
    const auto last = dash == std::string_view::npos ? first : parse_number(run.substr(dash + 1), value);
    if (last < first || (!runs.empty() && first <= runs.back().second)) {
      throw ProtocolError("delete runs not ascending and disjoint in \"" + std::string(value.substr(0, 64)) +
                          "\"");
    }
    keys += static_cast<std::uint64_t>(last - first) + 1;
    if (keys > kMaxKeysPerDeleteRuns) {
      throw ProtocolError("delete runs stand for more than " + std::to_string(kMaxKeysPerDeleteRuns) +
                          " keys");
    }
    runs.emplace_back(first, last);
    pos = comma + 1;
  }
  return runs;
}

std::uint64_t deletions_in(const Item& item) {
  if (item.kind == ItemKind::kDelete) return 1;
  if (item.kind != ItemKind::kDeleteRuns) return 0;
  std::uint64_t n = 0;
  for (const auto& [first, last] : parse_delete_runs(item.value))
    n += static_cast<std::uint64_t>(last - first) + 1;
  return n;
}

std::uint64_t plain_deletion_bytes(const Item& item) {
  if (item.kind != ItemKind::kDeleteRuns) return 0;
  // A kDelete item: kind, key length, value length, revision; then the key.
  constexpr std::uint64_t kItemHeader = 1 + 4 + 4 + 8;
  std::uint64_t bytes = 0;
  for (const auto& [first, last] : parse_delete_runs(item.value)) {
    const auto count = static_cast<std::uint64_t>(last - first) + 1;
    bytes += count * (kItemHeader + item.key.size());
    // The numbers' digits, one decade at a time (at most 18 digits each).
    std::int64_t low = 0;
    std::int64_t high = 9;
    for (std::uint64_t digits = 1; digits <= kMaxDigits; ++digits) {
      const auto from = std::max(first, low);
      const auto to = std::min(last, high);
      if (from <= to) bytes += static_cast<std::uint64_t>(to - from + 1) * digits;
      low = high + 1;
      if (digits < kMaxDigits) high = high * 10 + 9;
    }
  }
  return bytes;
}

std::vector<Item> expand_delete_runs(Item item) {
  std::vector<Item> out;
  if (item.kind != ItemKind::kDeleteRuns) {
    out.push_back(std::move(item));
    return out;
  }
  for (const auto& [first, last] : parse_delete_runs(item.value)) {
    for (auto n = first; n <= last; ++n) {
      Item d;
      d.kind = ItemKind::kDelete;
      d.key = item.key + std::to_string(n);
      d.revision = item.revision;
      out.push_back(std::move(d));
    }
  }
  return out;
}

}  // namespace ddp::store

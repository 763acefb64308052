#include "keys.hpp"

#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"

namespace ddp::rdzv::detail {

void validate_run_id(const std::string& run_id) {
  if (run_id.empty()) throw ConfigError("--rdzv_id: must not be empty");
  if (run_id.find('/') != std::string::npos) {
    throw ConfigError("--rdzv_id: '" + run_id +
                      "' contains '/', which would mix its keys with another job's; use letters, "
                      "digits, '-', '_' or '.'");
  }
}

std::string encode_node(const NodeSpec& node) {
  nlohmann::json j = {{"id", node.node_id}, {"host", node.host}, {"nproc", node.local_world_size}};
  return j.dump();
}

namespace {

NodeSpec node_of(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object() || !j.contains("id") || !j.contains("host") || !j.contains("nproc") ||
      !j["id"].is_string() || !j["host"].is_string() || !j["nproc"].is_number_integer()) {
    throw InternalError("rendezvous record " + key + " is not a node record");
  }
  NodeSpec n;
  n.node_id = j["id"].get<std::string>();
  n.host = j["host"].get<std::string>();
  n.local_world_size = j["nproc"].get<int>();
  return n;
}

nlohmann::json parse_record(std::string_view text, const std::string& key) {
  nlohmann::json j;
  try {
    j = parse_json(text, json_input::kRendezvousRecord);
  } catch (const JsonError& e) {
    if (e.kind() != JsonError::Kind::kMalformed)
      throw InternalError("rendezvous record " + key + " " + e.what());
  }
  return j;
}

}  // namespace

NodeSpec decode_node(std::string_view text, const std::string& key) {
  return node_of(parse_record(text, key), key);
}

std::string encode_offer(const NodeSpec& node, int rank_offset) {
  nlohmann::json j = {{"id", node.node_id}, {"host", node.host}, {"nproc", node.local_world_size}};
  if (rank_offset >= 0) j["offset"] = rank_offset;
  return j.dump();
}

Offer decode_offer(std::string_view text, const std::string& key) {
  const nlohmann::json j = parse_record(text, key);
  Offer o;
  o.node = node_of(j, key);
  // Anything but a rank offset a job can have reads as unknown.
  if (j.contains("offset") && j["offset"].is_number_integer()) {
    const auto offset = j["offset"].get<std::int64_t>();
    if (offset >= 0 && offset <= std::numeric_limits<int>::max()) o.rank_offset = static_cast<int>(offset);
  }
  return o;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

}  // namespace ddp::rdzv::detail

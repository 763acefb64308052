#include "persistence.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <vector>

#include "ddp/common/logging.hpp"
#include "persistence_format.hpp"

namespace ddp::store::server {
namespace {

namespace fs = std::filesystem;
std::string recover_hint() {
  return "the file is left as it is; restore the data dir from a backup, or restart once with "
         "--recover-corrupt-log to keep every intact record and drop the damaged ones";
}

}  // namespace

Persistence::Persistence(std::string dir, std::uint64_t compact_bytes, bool recover_corrupt, bool durable)
    : dir_(std::move(dir)),
      compact_bytes_(compact_bytes),
      recover_corrupt_(recover_corrupt),
      durable_(durable) {}

Persistence::~Persistence() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void Persistence::open(StoreCore& core, Clock::time_point now) {
  auto log = ddp::log::get("store.server");
  std::error_code ec;
  if (!fs::exists(dir_, ec)) {
    // Like etcd: a data dir that does not exist yet is created, private to us.
    std::vector<fs::path> missing;
    for (auto p = fs::absolute(dir_, ec).lexically_normal(); p.has_relative_path() && !fs::exists(p, ec);
         p = p.parent_path())
      missing.push_back(p);
    fs::create_directories(dir_, ec);
    if (ec) throw ConfigError("cannot create data dir " + dir_ + ": " + ec.message() + "; fix --data-dir");
    ::chmod(dir_.c_str(), 0700);
    // Its name must last as its files do: fsynced into each parent it was made in.
    for (const auto& p : missing) {
      for (const auto& d : {p, p.parent_path()}) {
        if (const int err = format::fsync_dir(d.string()); err != 0)
          throw ConfigError("cannot fsync directory " + d.string() + " after creating data dir " + dir_ +
                            ": " + errno_text(err));
      }
    }
    log->info("created data dir {} (mode 0700)", dir_);
  }
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw ConfigError("data dir " + dir_ + " is not a directory; fix --data-dir");
  if (::access(dir_.c_str(), W_OK | X_OK) != 0)
    throw ConfigError("data dir " + dir_ + " is not writable: " + errno_text(errno) +
                      "; fix its permissions or --data-dir");
  for (const char* tmp : {"snapshot.tmp", "log.tmp"}) {
    if (::unlink((dir_ + "/" + tmp).c_str()) == 0)
      log->info("removed {}/{} left by an interrupted write", dir_, tmp);
  }
  load_snapshot(core, now);
  replay_log(core, now);
  if (compact_after_open_) {
    try {
      compact(core);
    } catch (const PersistError& e) {
      throw ConfigError(std::string("cannot rewrite the data dir after loading it: ") + e.what());
    }
    compact_after_open_ = false;
  }
  // What was read back may be in the page cache only (the daemon crashed, the
  // machine did not): on disk before anything is acknowledged on top of it.
  if (durable_ && log_fd_ >= 0) {
    if (const int err = format::sync_fd(log_fd_, "log.fsync", /*data_only=*/true); err != 0)
      throw ConfigError("cannot fsync " + dir_ + "/log after reading it: " + errno_text(err));
  }
}

void Persistence::load_snapshot(StoreCore& core, Clock::time_point now) {
  const auto path = dir_ + "/snapshot";
  bool exists = false;
  const auto data = format::read_whole(path, exists);
  if (!exists) return;
  snapshot_found_ = true;
  auto corrupt = [&](std::size_t offset, const std::string& what) {
    return ConfigError("snapshot " + path + " is corrupt at byte " + std::to_string(offset) + " (" + what +
                       "); " + recover_hint());
  };
  const auto magic = std::string_view(data).substr(0, 8);
  const bool v1 = magic == format::kSnapMagicV1;
  if (!v1 && magic != format::kSnapMagicV2) {
    if (data.size() < 8) throw corrupt(0, "shorter than its header");
    throw corrupt(0, "not a ddp snapshot, or a newer format than this daemon reads");
  }
  if (data.size() < format::kSnapHeader) throw corrupt(0, "shorter than its header");
  format::Reader h{std::string_view(data).substr(8)};
  const auto crc = h.get<std::uint32_t>();
  const auto len = h.get<std::uint64_t>();
  const auto body = std::string_view(data).substr(format::kSnapHeader);
  bool salvage = false;
  if (len != body.size() || (v1 ? format::crc32_v1(body) : format::crc32c(body)) != crc) {
    const auto why = len != body.size() ? "wrong length" : "checksum mismatch";
    if (!recover_corrupt_) throw corrupt(len != body.size() ? 12 : format::kSnapHeader, why);
    salvage = true;
  }

  // A salvage keeps every entry whose own checksum holds (v2) or that parses (v1).
  format::Reader r{body};
  auto revision = r.get<std::int64_t>();
  snapshot_seq_ = r.get<std::uint64_t>();
  const auto next_lease = r.get<std::int64_t>();
  const auto nleases = r.get<std::uint32_t>();
  std::uint64_t dropped = 0, kept = 0;
  auto entry_ok = [&](std::size_t start) {
    if (v1) return r.ok;
    const auto bytes = body.substr(start, r.pos - start);
    return format::crc32c(bytes) == r.get<std::uint32_t>() && r.ok;
  };
  for (std::uint32_t i = 0; i < nleases && r.ok; ++i) {
    const auto start = r.pos;
    const auto id = r.get<std::int64_t>();
    const auto ttl = r.get<std::int64_t>();
    if (entry_ok(start) && id > 0 && ttl > 0)
      core.leases().restore(id, Millis(ttl), now);
    else if (salvage)
      ++dropped;
    else
      throw corrupt(format::kSnapHeader + start, "bad lease entry");
  }
  const auto nkeys = r.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < nkeys && r.ok; ++i) {
    const auto start = r.pos;
    auto key = r.str();
    auto value = r.str();
    const auto rev = r.get<std::int64_t>();
    const auto lease = r.get<std::int64_t>();
    if (!entry_ok(start)) {
      if (!salvage) throw corrupt(format::kSnapHeader + start, "bad key entry");
      ++dropped;
      continue;
    }
    ++kept;
    revision = std::max(revision, rev);
    core.kv().restore_put(key, std::move(value), rev, lease);
    if (lease != 0) core.leases().attach(lease, key);
  }
  if (v1) {  // v1 carried the watch history; it is no longer kept across restarts
    r.get<std::int64_t>();
    const auto nevents = r.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < nevents && r.ok; ++i) {
      r.get<std::uint8_t>();
      r.str();
      r.str();
      r.get<std::int64_t>();
    }
    compact_after_open_ = true;  // rewrite in the current format
  }
  if (!salvage && (!r.ok || r.pos != body.size()))
    throw corrupt(format::kSnapHeader + r.pos, "truncated body");
  if (salvage) {
    if (nkeys > kept + dropped) dropped += nkeys - kept - dropped;
    ddp::log::get("store.server")
        ->warn(
            "recovered corrupt snapshot path={} kept_keys={} dropped_entries={} (a copy of the damaged file "
            "is kept)",
            path, kept, dropped);
    keep_corrupt_copy("snapshot");
    compact_after_open_ = true;
  }
  core.kv().restore_revision(revision);
  core.history().reset(revision);
  core.leases().restore_next_id(next_lease);
  next_seq_ = snapshot_seq_ + 1;
}

void Persistence::replay_log(StoreCore& core, Clock::time_point now) {
  auto log = ddp::log::get("store.server");
  const auto path = dir_ + "/log";
  bool exists = false;
  const auto data = format::read_whole(path, exists);
  auto corrupt = [&](std::size_t offset, const std::string& what) {
    return ConfigError("log " + path + " is corrupt at byte " + std::to_string(offset) + " (" + what + "); " +
                       recover_hint());
  };
  if (!exists) {
    if (snapshot_found_ && !recover_corrupt_)
      throw ConfigError(
          "log " + path + " is missing beside " + dir_ +
          "/snapshot; the writes since that snapshot are gone. Restore it from a backup, or restart "
          "once with --recover-corrupt-log to start from the snapshot alone");
    start_new_log();
    return;
  }
  const auto magic = std::string_view(data).substr(0, 8);
  const bool v1 = magic == format::kLogMagicV1;
  std::size_t pos = 0;
  std::uint64_t base_seq = 0;
  if (v1) {
    pos = 8;
    compact_after_open_ = true;  // never append v2 records to a v1 file
  } else if (magic == format::kLogMagicV2 && data.size() >= format::kLogHeaderV2) {
    format::Reader h{std::string_view(data).substr(8)};
    base_seq = h.get<std::uint64_t>();
    if (format::crc32c(std::string_view(data).substr(8, 8)) != h.get<std::uint32_t>()) {
      if (!recover_corrupt_) throw corrupt(8, "header checksum mismatch");
      base_seq = snapshot_seq_;
    }
    pos = format::kLogHeaderV2;
  } else if (!recover_corrupt_) {
    throw corrupt(0, data.size() < format::kLogHeaderV2 ? "shorter than its header" : "not a ddp log");
  } else {
    log->warn("recovered corrupt log path={}: its header is damaged; dropped_bytes={}", path, data.size());
    keep_corrupt_copy("log");
    compact_after_open_ = true;
    return;
  }
  if (base_seq > 0 && !snapshot_found_ && !recover_corrupt_)
    throw ConfigError("log " + path + " continues a snapshot (up to record " + std::to_string(base_seq) +
                      ") but " + dir_ +
                      "/snapshot is missing; restore it from a backup, or restart once with "
                      "--recover-corrupt-log to keep the log's records alone");
  if (base_seq > snapshot_seq_ && !recover_corrupt_)
    throw ConfigError("log " + path + " starts after record " + std::to_string(base_seq) + " but " + dir_ +
                      "/snapshot holds records up to " + std::to_string(snapshot_seq_) +
                      "; restore the matching snapshot, or restart once with --recover-corrupt-log");

  std::size_t applied = 0, dropped_bytes = 0, damaged = 0;
  std::uint64_t last_seq = base_seq;
  while (true) {
    auto step = v1 ? format::read_record_v1(data, pos) : format::read_record_v2(data, pos);
    if (step.kind == format::Step::kRecord && !v1 && damaged == 0 && step.seq != last_seq + 1) {
      step.kind = format::Step::kCorrupt;
      step.why = "record " + std::to_string(step.seq) + " follows record " + std::to_string(last_seq);
    }
    if (step.kind == format::Step::kEnd) break;
    if (step.kind == format::Step::kTornTail) {
      log->warn(
          "log has a torn tail (an interrupted write); cutting it path={} offset={} dropped_bytes={} "
          "why=\"{}\"",
          path, pos, data.size() - pos, step.why);
      if (::truncate(path.c_str(), static_cast<off_t>(pos)) != 0)
        throw ConfigError("cannot truncate " + path + ": " + errno_text(errno));
      break;
    }
    if (step.kind == format::Step::kCorrupt) {
      if (!recover_corrupt_) throw corrupt(pos, step.why);
      const auto next = v1 ? std::string_view::npos : format::resync_v2(data, pos, last_seq);
      const auto skip_to = next == std::string_view::npos ? data.size() : next;
      log->warn("recovering corrupt log path={} offset={} dropped_bytes={} why=\"{}\"", path, pos,
                skip_to - pos, step.why);
      dropped_bytes += skip_to - pos;
      ++damaged;
      pos = skip_to;
      if (!compact_after_open_) keep_corrupt_copy("log");
      compact_after_open_ = true;
      if (next == std::string_view::npos) break;
      continue;
    }
    pos = step.next;
    if (step.seq <= snapshot_seq_) {  // already in the snapshot (crash during compaction)
      last_seq = step.seq;
      continue;
    }
    if (step.seq != last_seq + 1 && damaged > 0)
      log->warn("recovering corrupt log path={}: records {}..{} are lost", path, last_seq + 1, step.seq - 1);
    core.replay(step.mutation, now);
    last_seq = step.seq;
    next_seq_ = step.seq + 1;
    ++applied;
  }
  if (damaged > 0)
    log->warn(
        "recovered corrupt log path={} kept_records={} damaged_regions={} dropped_bytes={} "
        "(a copy of the damaged file is kept)",
        path, applied, damaged, dropped_bytes);
  log->debug("replayed log path={} records={} revision={}", path, applied, core.revision());
  log_bytes_ = pos;
  if (!compact_after_open_) open_log_for_append();
}

void Persistence::open_log_for_append() {
  const auto path = dir_ + "/log";
  log_fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (log_fd_ < 0) throw ConfigError("cannot open " + path + " for writing: " + errno_text(errno));
}

void Persistence::keep_corrupt_copy(const std::string& name) {
  const auto from = dir_ + "/" + name;
  const auto to = from + ".corrupt." + std::to_string(std::time(nullptr));
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) throw ConfigError("cannot keep a copy of " + from + " as " + to + ": " + ec.message());
  ddp::log::get("store.server")->warn("kept the damaged {} as {}", from, to);
}

}  // namespace ddp::store::server

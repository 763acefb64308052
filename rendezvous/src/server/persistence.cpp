#include "persistence.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/crc.hpp>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::store::server {
namespace {

constexpr char kSnapMagic[8] = {'D', 'D', 'P', 'S', 'N', 'A', 'P', '1'};
constexpr char kLogMagic[8] = {'D', 'D', 'P', 'L', 'O', 'G', '0', '1'};

std::uint32_t crc32(std::string_view data) {
  boost::crc_32_type crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

template <typename T>
void put(std::string& out, T v) {
  auto u = static_cast<std::make_unsigned_t<T>>(v);
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
}
void put_str(std::string& out, std::string_view s) {
  put<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

// Bounds-checked reader; `ok` turns false on the first overrun and stays false.
struct Reader {
  std::string_view data;
  std::size_t pos = 0;
  bool ok = true;
  template <typename T>
  T get() {
    if (!ok || data.size() - pos < sizeof(T)) {
      ok = false;
      return T{};
    }
    std::make_unsigned_t<T> u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
      u |= static_cast<std::make_unsigned_t<T>>(static_cast<unsigned char>(data[pos + i])) << (8 * i);
    pos += sizeof(T);
    return static_cast<T>(u);
  }
  std::string str() {
    const auto n = get<std::uint32_t>();
    if (!ok || data.size() - pos < n) {
      ok = false;
      return {};
    }
    std::string s(data.substr(pos, n));
    pos += n;
    return s;
  }
};

std::string read_whole(const std::string& path, bool& exists) {
  exists = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};
    throw ConfigError("cannot read " + path + ": " + errno_text(errno));
  }
  exists = true;
  std::string out;
  char buf[1 << 16];
  while (true) {
    const auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw ConfigError("cannot read " + path + ": " + errno_text(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const auto n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot write " + path + ": " + errno_text(errno));
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Writes `data` to path.tmp, fsyncs and renames over `path`: readers see the old
// file or the new one, never a half-written one.
void write_atomically(const std::string& dir, const std::string& name, std::string_view data) {
  const auto path = dir + "/" + name;
  const auto tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot create " + tmp + ": " + errno_text(errno));
  try {
    write_all(fd, data, tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot rename " + tmp + ": " + errno_text(errno));
  fsync_dir(dir);
}

std::string encode_record(std::uint64_t seq, const Mutation& m) {
  std::string body;
  put<std::uint64_t>(body, seq);
  put<std::int64_t>(body, m.revision);
  put<std::uint32_t>(body, static_cast<std::uint32_t>(m.changes.size()));
  for (const auto& c : m.changes) {
    put<std::uint8_t>(body, static_cast<std::uint8_t>(c.kind));
    put_str(body, c.key);
    put_str(body, c.value);
    put<std::int64_t>(body, c.lease);
    put<std::int64_t>(body, c.ttl_ms);
  }
  std::string rec;
  rec.reserve(body.size() + 8);
  put<std::uint32_t>(rec, static_cast<std::uint32_t>(body.size()));
  put<std::uint32_t>(rec, crc32(body));
  rec.append(body);
  return rec;
}

}  // namespace

Persistence::Persistence(std::string dir, std::uint64_t compact_bytes)
    : dir_(std::move(dir)), compact_bytes_(compact_bytes) {}

Persistence::~Persistence() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void Persistence::open(StoreCore& core, Clock::time_point now) {
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw ConfigError("data dir " + dir_ + " does not exist or is not a directory; create it or fix --data-dir");
  }
  if (::access(dir_.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError("data dir " + dir_ + " is not writable: " + errno_text(errno) + "; fix its permissions or --data-dir");
  }
  load_snapshot(core, now);
  replay_log(core, now);
}

void Persistence::load_snapshot(StoreCore& core, Clock::time_point now) {
  const auto path = dir_ + "/snapshot";
  bool exists = false;
  const auto data = read_whole(path, exists);
  if (!exists) return;
  auto corrupt = [&](const char* what) {
    return ConfigError("snapshot " + path + " is corrupt (" + what +
                       "); restore it from a backup or move the data dir away");
  };
  if (data.size() < 20 || std::memcmp(data.data(), kSnapMagic, 8) != 0) throw corrupt("bad header");
  Reader h{std::string_view(data).substr(8)};
  const auto crc = h.get<std::uint32_t>();
  const auto len = h.get<std::uint64_t>();
  if (len != data.size() - 20) throw corrupt("wrong length");
  const auto body = std::string_view(data).substr(20);
  if (crc32(body) != crc) throw corrupt("checksum mismatch");

  Reader r{body};
  const auto revision = r.get<std::int64_t>();
  snapshot_seq_ = r.get<std::uint64_t>();
  const auto next_lease = r.get<std::int64_t>();
  const auto nleases = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < nleases && r.ok; ++i) {
    const auto id = r.get<std::int64_t>();
    const auto ttl = r.get<std::int64_t>();
    core.leases().restore(id, Millis(ttl), now);
  }
  const auto nkeys = r.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < nkeys && r.ok; ++i) {
    auto key = r.str();
    auto value = r.str();
    const auto rev = r.get<std::int64_t>();
    const auto lease = r.get<std::int64_t>();
    core.kv().restore_put(key, std::move(value), rev, lease);
    if (lease != 0) core.leases().attach(lease, key);
  }
  // The event ring too, so watches resume across a restart instead of failing
  // as compacted.
  const auto compacted = r.get<std::int64_t>();
  const auto nevents = r.get<std::uint64_t>();
  core.history().reset(compacted);
  for (std::uint64_t i = 0; i < nevents && r.ok; ++i) {
    WatchEvent e;
    e.type = static_cast<EventType>(r.get<std::uint8_t>());
    e.key = r.str();
    e.value = r.str();
    e.revision = r.get<std::int64_t>();
    if (r.ok) core.history().append({std::move(e)});
  }
  if (!r.ok || r.pos != body.size()) throw corrupt("truncated body");
  core.kv().restore_revision(revision);
  core.leases().restore_next_id(next_lease);
  next_seq_ = snapshot_seq_ + 1;
}

void Persistence::replay_log(StoreCore& core, Clock::time_point now) {
  const auto path = dir_ + "/log";
  bool exists = false;
  const auto data = read_whole(path, exists);
  auto log = ddp::log::get("store.server");
  if (!exists || data.size() < sizeof(kLogMagic)) {
    start_new_log();
    return;
  }
  if (std::memcmp(data.data(), kLogMagic, sizeof(kLogMagic)) != 0)
    throw ConfigError("log " + path + " has a bad header; move it away to start from the snapshot alone");
  std::size_t pos = sizeof(kLogMagic);
  std::size_t applied = 0;
  while (pos < data.size()) {
    Reader h{std::string_view(data).substr(pos)};
    const auto len = h.get<std::uint32_t>();
    const auto crc = h.get<std::uint32_t>();
    if (!h.ok || data.size() - pos - 8 < len) break;
    const auto body = std::string_view(data).substr(pos + 8, len);
    if (crc32(body) != crc) break;
    Reader r{body};
    Mutation m;
    const auto seq = r.get<std::uint64_t>();
    m.revision = r.get<std::int64_t>();
    const auto n = r.get<std::uint32_t>();
    for (std::uint32_t i = 0; i < n && r.ok; ++i) {
      Change c;
      c.kind = static_cast<Change::Kind>(r.get<std::uint8_t>());
      c.key = r.str();
      c.value = r.str();
      c.lease = r.get<std::int64_t>();
      c.ttl_ms = r.get<std::int64_t>();
      m.changes.push_back(std::move(c));
    }
    if (!r.ok) break;
    pos += 8 + len;
    if (seq <= snapshot_seq_) continue;  // already in the snapshot (crash during compaction)
    core.replay(m, now);
    next_seq_ = seq + 1;
    ++applied;
  }
  if (pos < data.size()) {
    log->warn("log has a torn or corrupt tail; truncating path={} offset={} dropped_bytes={}", path, pos,
              data.size() - pos);
    if (::truncate(path.c_str(), static_cast<off_t>(pos)) != 0)
      throw ConfigError("cannot truncate " + path + ": " + errno_text(errno));
  }
  log->debug("replayed log path={} records={} revision={}", path, applied, core.revision());
  log_bytes_ = pos;
  open_log_for_append();
}

void Persistence::open_log_for_append() {
  const auto path = dir_ + "/log";
  log_fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (log_fd_ < 0) throw ConfigError("cannot open " + path + " for writing: " + errno_text(errno));
}

void Persistence::start_new_log() {
  if (log_fd_ >= 0) {
    ::close(log_fd_);
    log_fd_ = -1;
  }
  write_atomically(dir_, "log", std::string_view(kLogMagic, sizeof(kLogMagic)));
  log_bytes_ = sizeof(kLogMagic);
  open_log_for_append();
}

void Persistence::append(const Mutation& m) {
  if (log_fd_ < 0) return;
  const auto rec = encode_record(next_seq_++, m);
  write_all(log_fd_, rec, dir_ + "/log");
  log_bytes_ += rec.size();
}

void Persistence::compact(const StoreCore& core) {
  std::string body;
  put<std::int64_t>(body, core.revision());
  put<std::uint64_t>(body, next_seq_ - 1);
  put<std::int64_t>(body, core.leases().next_id());
  put<std::uint32_t>(body, static_cast<std::uint32_t>(core.leases().size()));
  for (const auto& [id, lease] : core.leases().leases()) {
    put<std::int64_t>(body, id);
    put<std::int64_t>(body, lease.ttl.count());
  }
  put<std::uint64_t>(body, core.kv().size());
  for (const auto& [key, e] : core.kv().entries()) {
    put_str(body, key);
    put_str(body, e.value);
    put<std::int64_t>(body, e.mod_revision);
    put<std::int64_t>(body, e.lease);
  }
  put<std::int64_t>(body, core.history().compacted_revision());
  put<std::uint64_t>(body, core.history().events().size());
  for (const auto& e : core.history().events()) {
    put<std::uint8_t>(body, static_cast<std::uint8_t>(e.type));
    put_str(body, e.key);
    put_str(body, e.value);
    put<std::int64_t>(body, e.revision);
  }
  std::string file(kSnapMagic, sizeof(kSnapMagic));
  put<std::uint32_t>(file, crc32(body));
  put<std::uint64_t>(file, body.size());
  file.append(body);
  write_atomically(dir_, "snapshot", file);
  snapshot_seq_ = next_seq_ - 1;
  start_new_log();
  ddp::log::get("store.server")
      ->debug("wrote snapshot dir={} keys={} revision={}", dir_, core.kv().size(), core.revision());
}

void Persistence::close(const StoreCore& core) {
  if (log_fd_ < 0) return;
  ::fsync(log_fd_);
  compact(core);
  ::close(log_fd_);
  log_fd_ = -1;
}

}  // namespace ddp::store::server

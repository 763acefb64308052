#include "persistence_format.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cerrno>

#include "ddp/common/error.hpp"
#include "failpoints.hpp"

namespace ddp::store::server::format {
namespace {

// CRC-32C (Castagnoli), as iSCSI, ext4 and etcd's WAL use.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

bool decode_changes(Reader& r, Mutation& m) {
  m.revision = r.get<std::int64_t>();
  const auto n = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < n && r.ok; ++i) {
    Change c;
    const auto kind = r.get<std::uint8_t>();
    if (kind > static_cast<std::uint8_t>(Change::Kind::kLeaseRevoke)) return false;
    c.kind = static_cast<Change::Kind>(kind);
    c.key = r.str();
    c.value = r.str();
    c.lease = r.get<std::int64_t>();
    c.ttl_ms = r.get<std::int64_t>();
    m.changes.push_back(std::move(c));
  }
  return r.ok && r.pos == r.data.size();
}

Step torn(std::string why) {
  Step s;
  s.kind = Step::kTornTail;
  s.why = std::move(why);
  return s;
}
Step corrupt(std::string why) {
  Step s;
  s.kind = Step::kCorrupt;
  s.why = std::move(why);
  return s;
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  Crc32c crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

std::uint32_t crc32_v1(std::string_view data) {
  boost::crc_32_type crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

std::string encode_log_header(std::uint64_t base_seq) {
  std::string out(kLogMagicV2);
  std::string seq;
  put<std::uint64_t>(seq, base_seq);
  out.append(seq);
  put<std::uint32_t>(out, crc32c(seq));
  return out;
}

std::string encode_record(std::uint64_t seq, const Mutation& m) {
  std::string body;
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
  rec.reserve(body.size() + kRecordHeaderV2);
  put<std::uint32_t>(rec, static_cast<std::uint32_t>(body.size()));
  put<std::uint64_t>(rec, seq);
  put<std::uint32_t>(rec, crc32c(body));
  put<std::uint32_t>(rec, crc32c(rec));
  rec.append(body);
  return rec;
}

Step read_record_v2(std::string_view log, std::size_t pos) {
  if (pos == log.size()) return {};
  const auto rest = log.substr(pos);
  if (rest.size() < kRecordHeaderV2) return torn("incomplete record header");
  Reader h{rest};
  const auto len = h.get<std::uint32_t>();
  const auto seq = h.get<std::uint64_t>();
  const auto body_crc = h.get<std::uint32_t>();
  const auto header_crc = h.get<std::uint32_t>();
  if (crc32c(rest.substr(0, 16)) != header_crc) {
    // A crash after the file grew but before its blocks were written reads as zeros.
    if (std::all_of(rest.begin(), rest.end(), [](char c) { return c == 0; })) return torn("zeroed tail");
    return corrupt("record header checksum mismatch");
  }
  if (rest.size() - kRecordHeaderV2 < len)
    return torn("record of " + std::to_string(len) + " bytes cut after " +
                std::to_string(rest.size() - kRecordHeaderV2));
  const auto body = rest.substr(kRecordHeaderV2, len);
  if (crc32c(body) != body_crc) {
    if (kRecordHeaderV2 + len == rest.size()) return torn("last record's checksum mismatch");
    return corrupt("record checksum mismatch");
  }
  Step s;
  Reader r{body};
  if (!decode_changes(r, s.mutation)) return corrupt("record body does not parse");
  s.kind = Step::kRecord;
  s.seq = seq;
  s.next = pos + kRecordHeaderV2 + len;
  return s;
}

Step read_record_v1(std::string_view log, std::size_t pos) {
  if (pos == log.size()) return {};
  const auto rest = log.substr(pos);
  if (rest.size() < 8) return torn("incomplete record header");
  Reader h{rest};
  const auto len = h.get<std::uint32_t>();
  const auto crc = h.get<std::uint32_t>();
  if (rest.size() - 8 < len) return torn("record cut short");
  const auto body = rest.substr(8, len);
  if (crc32_v1(body) != crc) {
    if (8 + len == rest.size()) return torn("last record's checksum mismatch");
    return corrupt("record checksum mismatch");
  }
  Step s;
  Reader r{body};
  s.seq = r.get<std::uint64_t>();
  Reader rr{body.substr(std::min<std::size_t>(8, body.size()))};
  if (!r.ok || !decode_changes(rr, s.mutation)) return corrupt("record body does not parse");
  s.kind = Step::kRecord;
  s.next = pos + 8 + len;
  return s;
}

std::size_t resync_v2(std::string_view log, std::size_t pos, std::uint64_t after_seq) {
  for (std::size_t p = pos + 1; p + kRecordHeaderV2 <= log.size(); ++p) {
    Reader h{log.substr(p, kRecordHeaderV2)};
    h.get<std::uint32_t>();
    const auto seq = h.get<std::uint64_t>();
    h.get<std::uint32_t>();
    if (crc32c(log.substr(p, 16)) != h.get<std::uint32_t>() || seq <= after_seq) continue;
    const auto step = read_record_v2(log, p);
    if (step.kind == Step::kRecord) return p;
  }
  return std::string_view::npos;
}

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

bool write_all(int fd, std::string_view data, std::string_view point, WriteFailure& failure) {
  failure = {};
  if (const auto fault = failpoints::check(point)) {
    if (fault.action == failpoints::Action::kError) {
      failure.err = fault.err;
      return false;
    }
    // kShort, kCrash: half of it reaches the file first.
    const auto half = data.substr(0, data.size() / 2);
    WriteFailure ignored;
    write_all(fd, half, {}, ignored);
    if (fault.action == failpoints::Action::kCrash) failpoints::crash(point);
    failure.err = fault.err;
    failure.written = half.size();
    return false;
  }
  std::size_t done = 0;
  while (done < data.size()) {
    const auto n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      failure.err = errno;
      failure.written = done;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

int sync_fd(int fd, std::string_view point, bool data_only) {
  if (const auto fault = failpoints::check(point)) {
    if (fault.action == failpoints::Action::kCrash) failpoints::crash(point);
    return fault.err;
  }
  return (data_only ? ::fdatasync(fd) : ::fsync(fd)) == 0 ? 0 : errno;
}

int fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace ddp::store::server::format

// The on-disk format of --data-dir (docs/operations.md, "Durability"): encoding
// and checked decoding of snapshot and log records, and the file primitives
// (whole reads, writes that go through the failpoints). Version 2 is written;
// version 1 (release 0.x: "DDPSNAP1", "DDPLOG01") is still read.
//
//   snapshot v2  "DDPSNAP2" | u32 crc32c(body) | u64 body length | body
//   log v2       "DDPLOG02" | u64 base seq | u32 crc32c(base seq)
//                then records: u32 body length | u64 seq | u32 crc32c(body)
//                              | u32 crc32c(the 16 header bytes before it) | body
// A record's header has its own checksum, so a damaged length is never trusted:
// replay tells a torn tail (an incomplete last record) from damage in the middle.
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mutation.hpp"

namespace ddp::store::server::format {

inline constexpr std::string_view kSnapMagicV1{"DDPSNAP1", 8};
inline constexpr std::string_view kSnapMagicV2{"DDPSNAP2", 8};
inline constexpr std::string_view kLogMagicV1{"DDPLOG01", 8};
inline constexpr std::string_view kLogMagicV2{"DDPLOG02", 8};
inline constexpr std::size_t kLogHeaderV2 = 20;
inline constexpr std::size_t kRecordHeaderV2 = 20;
inline constexpr std::size_t kSnapHeader = 20;

std::uint32_t crc32c(std::string_view data);
std::uint32_t crc32_v1(std::string_view data);

template <typename T>
void put(std::string& out, T v) {
  auto u = static_cast<std::make_unsigned_t<T>>(v);
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
}
inline void put_str(std::string& out, std::string_view s) {
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

std::string encode_log_header(std::uint64_t base_seq);
std::string encode_record(std::uint64_t seq, const Mutation& m);

// One step of log replay at `pos`.
struct Step {
  enum Kind { kRecord, kEnd, kTornTail, kCorrupt } kind = kEnd;
  std::uint64_t seq = 0;
  Mutation mutation;
  std::size_t next = 0;  // kRecord: where the next record starts
  std::string why;       // kTornTail, kCorrupt
};
Step read_record_v2(std::string_view log, std::size_t pos);
Step read_record_v1(std::string_view log, std::size_t pos);
// The first offset after `pos` where an intact v2 record with seq > `after_seq`
// starts; npos when there is none (for --recover-corrupt-log).
std::size_t resync_v2(std::string_view log, std::size_t pos, std::uint64_t after_seq);

// Whole file; `exists` false (and "") when missing. ConfigError on read errors.
std::string read_whole(const std::string& path, bool& exists);
// write(2) until done, through the failpoint `point`; false on failure, with
// the errno and the bytes already written in `failure`.
struct WriteFailure {
  int err = 0;
  std::size_t written = 0;
};
bool write_all(int fd, std::string_view data, std::string_view point, WriteFailure& failure);
// fsync (fdatasync with data_only: the file's data and size, what a reader
// of an appended log needs) through the failpoint `point`; the errno, or 0.
int sync_fd(int fd, std::string_view point, bool data_only = false);
// fsync of a directory, so that the names created or renamed in it last; the
// errno, or 0.
int fsync_dir(const std::string& dir);

}  // namespace ddp::store::server::format

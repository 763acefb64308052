// The liveness file: one small shared-memory file per worker through which a
// worker reports heartbeats and sections and the agent watches them
// (docs/agent-liveness.md, "Heartbeats and sections", has the byte layout for other
// languages). Little-endian, fixed offsets, 8-byte fields 8-byte aligned so
// every field is one atomic load or store. CLOCK_MONOTONIC nanoseconds: the
// worker and its agent share the host, so they share the clock.
//
// Writers: the worker writes the heartbeat, section and stats fields; the
// agent writes only the notify fields. Both sides use sequentially consistent
// atomics on the fields that pair a state change with a notify request, so
// either the agent sees the change or the worker sees the request.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::liveness {

static_assert(std::endian::native == std::endian::little, "the liveness file is little-endian");

inline constexpr std::uint32_t kMagic = 0x4C504444;  // bytes "DDPL"
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kFileSize = 4096;
inline constexpr std::uint32_t kMaxSections = 16;
inline constexpr std::size_t kMaxNameBytes = 32;
inline constexpr std::uint32_t kNoSection = 0xFFFFFFFF;

// Header.
inline constexpr std::size_t kOffMagic = 0;               // u32
inline constexpr std::size_t kOffVersion = 4;             // u32
inline constexpr std::size_t kOffSize = 8;                // u32, kFileSize
inline constexpr std::size_t kOffMaxSections = 12;        // u32, kMaxSections
inline constexpr std::size_t kOffBeatCount = 16;          // u64, worker: heartbeats so far
inline constexpr std::size_t kOffLastBeatNs = 24;         // u64, worker: time of the latest heartbeat
inline constexpr std::size_t kOffMaxBeatGapNs = 32;       // u64, worker: longest gap between heartbeats
inline constexpr std::size_t kOffNotifyEnterBefore = 40;  // u64, agent: notify a section entered before this
inline constexpr std::size_t kOffNotifyBeat = 48;         // u32, agent: 1 = notify the next heartbeat
inline constexpr std::size_t kOffSlotsUsed = 52;          // u32, worker: section slots claimed
inline constexpr std::size_t kOffNotifySlots = 56;  // u32, agent: bit i set = entries of slot i may notify
// Current section.
inline constexpr std::size_t kOffSectionSeq = 64;      // u64, worker: odd while being written
inline constexpr std::size_t kOffSectionEnterNs = 72;  // u64, worker: when the current section began
inline constexpr std::size_t kOffSectionSlot = 80;     // u32, worker: its slot; kNoSection outside any
// Collectives (docs/agent-diagnosis.md, "Who hung: the culprit rule"): written by a
// worker that runs its collectives through a library that counts them (the
// C++ SDK); all zero otherwise. Numbered from 1 in issue order, the same on
// every rank, so the agent can tell a rank waiting in collective #n from the
// rank that never issued it.
inline constexpr std::size_t kOffCollIssued = 88;     // u64, worker: collectives issued so far
inline constexpr std::size_t kOffCollCompleted = 96;  // u64, worker: highest collective completed
inline constexpr std::size_t kOffCollKinds = 104;     // 16 x u8, worker: kind of collective #n at n % 16
inline constexpr std::size_t kCollKindSlots = 16;
inline constexpr std::size_t kOffCollPublished = 120;  // u32, worker: 1 = it counts its collectives
// Section slots: kMaxSections of kSlotBytes from kOffSlots.
inline constexpr std::size_t kOffSlots = 128;
inline constexpr std::size_t kSlotBytes = 64;
inline constexpr std::size_t kSlotReady = 0;     // u32, 1 once the name is written
inline constexpr std::size_t kSlotNameLen = 4;   // u32
inline constexpr std::size_t kSlotName = 8;      // kMaxNameBytes bytes, UTF-8
inline constexpr std::size_t kSlotCount = 40;    // u64, completed sections
inline constexpr std::size_t kSlotMaxNs = 48;    // u64, longest completed one
inline constexpr std::size_t kSlotTotalNs = 56;  // u64, sum of completed durations
static_assert(kOffSlots + kMaxSections * kSlotBytes <= kFileSize);
static_assert(kOffCollPublished + 4 <= kOffSlots && kOffCollKinds + kCollKindSlots <= kOffCollPublished);

// Atomic access to a field of a mapped liveness file.
template <typename T>
std::atomic_ref<T> field(void* base, std::size_t off) {
  return std::atomic_ref<T>(*reinterpret_cast<T*>(static_cast<char*>(base) + off));
}
inline std::atomic_ref<std::uint64_t> u64(void* base, std::size_t off) {
  return field<std::uint64_t>(base, off);
}
inline std::atomic_ref<std::uint32_t> u32(void* base, std::size_t off) {
  return field<std::uint32_t>(base, off);
}
inline std::size_t slot_off(std::uint32_t slot) { return kOffSlots + slot * kSlotBytes; }

// Writes a fresh header into a zeroed kFileSize buffer.
inline void init_header(void* base) {
  u32(base, kOffMagic).store(kMagic);
  u32(base, kOffVersion).store(kVersion);
  u32(base, kOffSize).store(static_cast<std::uint32_t>(kFileSize));
  u32(base, kOffMaxSections).store(kMaxSections);
  u32(base, kOffSectionSlot).store(kNoSection);
}

// What a worker's collective kind byte means (kOffCollKinds).
enum class CollectiveKind : std::uint8_t {
  kUnknown = 0,
  kAllReduce = 1,
  kBroadcast = 2,
  kAllGather = 3,
  kReduceScatter = 4,
  kBarrier = 5,
};
inline const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kUnknown:
      break;
  }
  return "a collective";
}

struct SectionStats {
  std::string name;
  std::uint64_t count = 0;
  std::uint64_t max_ns = 0;
  std::uint64_t total_ns = 0;
};

// A consistent read of what a worker reported.
struct Snapshot {
  std::uint64_t beat_count = 0;
  std::uint64_t last_beat_ns = 0;
  std::uint64_t max_beat_gap_ns = 0;
  std::uint64_t section_seq = 0;
  std::uint64_t section_enter_ns = 0;
  std::uint32_t section_slot = kNoSection;
  std::string section;  // name of the current section; empty outside any
  std::vector<SectionStats> slots;
  // Collectives, when the worker publishes them (collectives_published).
  bool collectives_published = false;
  std::uint64_t coll_issued = 0;
  std::uint64_t coll_completed = 0;
  CollectiveKind coll_waiting_kind = CollectiveKind::kUnknown;  // of #coll_completed + 1, if issued
};

inline std::string slot_name(void* base, std::uint32_t slot) {
  const std::size_t off = slot_off(slot);
  const auto len = std::min<std::size_t>(u32(base, off + kSlotNameLen).load(), kMaxNameBytes);
  return std::string(static_cast<const char*>(base) + off + kSlotName, len);
}

// Reads the worker's fields; the section is read under its sequence number
// so a section changing meanwhile is never seen half-written.
inline Snapshot read_snapshot(void* base) {
  Snapshot s;
  s.beat_count = u64(base, kOffBeatCount).load();
  s.last_beat_ns = u64(base, kOffLastBeatNs).load();
  s.max_beat_gap_ns = u64(base, kOffMaxBeatGapNs).load();
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const std::uint64_t seq = u64(base, kOffSectionSeq).load();
    if (seq % 2 != 0) continue;
    s.section_enter_ns = u64(base, kOffSectionEnterNs).load();
    s.section_slot = u32(base, kOffSectionSlot).load();
    if (u64(base, kOffSectionSeq).load() != seq) continue;
    s.section_seq = seq;
    break;
  }
  const std::uint32_t used = std::min(u32(base, kOffSlotsUsed).load(), kMaxSections);
  for (std::uint32_t i = 0; i < used; ++i) {
    const std::size_t off = slot_off(i);
    SectionStats st;
    if (u32(base, off + kSlotReady).load() == 1) st.name = slot_name(base, i);
    st.count = u64(base, off + kSlotCount).load();
    st.max_ns = u64(base, off + kSlotMaxNs).load();
    st.total_ns = u64(base, off + kSlotTotalNs).load();
    s.slots.push_back(std::move(st));
  }
  if (s.section_slot < s.slots.size()) s.section = s.slots[s.section_slot].name;
  s.collectives_published = u32(base, kOffCollPublished).load() == 1;
  if (s.collectives_published) {
    // Completed first: a collective completing between the two loads then
    // reads as still waited in, never as issued-and-done without its issue.
    s.coll_completed = u64(base, kOffCollCompleted).load();
    s.coll_issued = u64(base, kOffCollIssued).load();
    if (s.coll_issued > s.coll_completed) {
      const std::uint64_t next = s.coll_completed + 1;
      s.coll_waiting_kind = static_cast<CollectiveKind>(
          field<std::uint8_t>(base, kOffCollKinds + next % kCollKindSlots).load());
    }
  }
  return s;
}

}  // namespace ddp::liveness

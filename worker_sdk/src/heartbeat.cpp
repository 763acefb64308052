// The worker's side of the liveness file (ddp/common/liveness_file.hpp): maps
// the file named by DDP_LIVENESS_FILE once, then heartbeats and sections are
// plain atomic stores into it. The agent's notify fields ask for a byte on
// DDP_LIVENESS_PIPE when it needs to hear about a change to re-arm its timer;
// otherwise nothing leaves the process.
#include "ddp/heartbeat.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ddp/common/liveness_file.hpp"
#include "ddp/common/parse.hpp"
#include "liveness_collectives.hpp"
#include "liveness_wait.hpp"

namespace ddp {
namespace {

namespace lv = ddp::liveness;

std::uint64_t now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

struct Channel {
  void* base = nullptr;
  int pipe_fd = -1;
  long world_size = 0;  // WORLD_SIZE; 0 when unset or not a number
  std::mutex names_mu;  // the name -> slot cache; taken on section entry only
  std::vector<std::pair<std::string, std::uint32_t>> names;

  void notify() const noexcept {
    if (pipe_fd < 0) return;
    const char byte = 'x';
    // Non-blocking: a full pipe already holds a wake-up for the agent.
    [[maybe_unused]] const auto n = ::write(pipe_fd, &byte, 1);
  }

  std::uint32_t claim(std::string_view name) noexcept {
    // Another process of the worker's tree may have claimed the name.
    const std::uint32_t used = std::min(lv::u32(base, lv::kOffSlotsUsed).load(), lv::kMaxSections);
    for (std::uint32_t i = 0; i < used; ++i) {
      if (lv::u32(base, lv::slot_off(i) + lv::kSlotReady).load() == 1 && lv::slot_name(base, i) == name)
        return i;
    }
    const std::uint32_t slot = lv::u32(base, lv::kOffSlotsUsed).fetch_add(1);
    if (slot >= lv::kMaxSections) return lv::kNoSection;
    char* at = static_cast<char*>(base) + lv::slot_off(slot);
    std::memcpy(at + lv::kSlotName, name.data(), name.size());
    lv::u32(base, lv::slot_off(slot) + lv::kSlotNameLen).store(static_cast<std::uint32_t>(name.size()));
    lv::u32(base, lv::slot_off(slot) + lv::kSlotReady).store(1);
    return slot;
  }

  std::uint32_t slot_for(std::string_view name) noexcept {
    name = name.substr(0, lv::kMaxNameBytes);
    std::lock_guard lock(names_mu);
    for (const auto& [n, slot] : names) {
      if (n == name) return slot;
    }
    const std::uint32_t slot = claim(name);
    try {
      names.emplace_back(std::string(name), slot);
    } catch (...) {
      // Out of memory: the next entry of this name claims again.
    }
    return slot;
  }

  // Makes `slot` (entered at `at`) the current section, then asks whether
  // the agent wants to hear about it.
  void set_section(std::uint32_t slot, std::uint64_t at) const noexcept {
    auto seq = lv::u64(base, lv::kOffSectionSeq);
    const std::uint64_t s = seq.load(std::memory_order_relaxed);
    seq.store(s + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    lv::u64(base, lv::kOffSectionEnterNs).store(at, std::memory_order_relaxed);
    lv::u32(base, lv::kOffSectionSlot).store(slot, std::memory_order_relaxed);
    seq.store(s + 2);
    if (slot != lv::kNoSection && at < lv::u64(base, lv::kOffNotifyEnterBefore).load() &&
        ((lv::u32(base, lv::kOffNotifySlots).load() >> slot) & 1U) != 0) {
      notify();
    }
  }
};

Channel* open_channel() noexcept {
  const char* path = std::getenv("DDP_LIVENESS_FILE");
  if (path == nullptr || *path == '\0') return nullptr;
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* base = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(lv::kFileSize)) {
    base = ::mmap(nullptr, lv::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (base == MAP_FAILED) return nullptr;
  if (lv::u32(base, lv::kOffMagic).load() != lv::kMagic ||
      lv::u32(base, lv::kOffVersion).load() != lv::kVersion) {
    ::munmap(base, lv::kFileSize);
    return nullptr;
  }
  auto* ch = new (std::nothrow) Channel;  // lives as long as the process
  if (ch == nullptr) {
    ::munmap(base, lv::kFileSize);
    return nullptr;
  }
  ch->base = base;
  if (const char* world = std::getenv("WORLD_SIZE"); world != nullptr) {
    if (const auto n = parse_int<long>(world); n && *n > 0) ch->world_size = *n;
  }
  if (const char* pipe = std::getenv("DDP_LIVENESS_PIPE"); pipe != nullptr && *pipe != '\0') {
    ch->pipe_fd = ::open(pipe, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  }
  return ch;
}

Channel* channel() noexcept {
  static Channel* const ch = open_channel();
  return ch;
}

}  // namespace

bool liveness_enabled() noexcept { return channel() != nullptr; }

void heartbeat() noexcept {
  Channel* const ch = channel();
  if (ch == nullptr) return;
  void* const base = ch->base;
  const std::uint64_t now = now_ns();
  auto last = lv::u64(base, lv::kOffLastBeatNs);
  const std::uint64_t prev = last.load(std::memory_order_relaxed);
  if (prev != 0 && now > prev) {
    auto gap = lv::u64(base, lv::kOffMaxBeatGapNs);
    if (now - prev > gap.load(std::memory_order_relaxed)) gap.store(now - prev, std::memory_order_relaxed);
  }
  last.store(now, std::memory_order_relaxed);
  lv::u64(base, lv::kOffBeatCount).fetch_add(1);
  // Paired with the agent's store of the request then load of the count:
  // either it sees this beat or this sees its request.
  auto want = lv::u32(base, lv::kOffNotifyBeat);
  if (want.load() != 0 && want.exchange(0) != 0) ch->notify();
}

Section::Section(std::string_view name) noexcept {
  Channel* const ch = channel();
  if (ch == nullptr) return;
  active_ = true;
  slot_ = ch->slot_for(name);
  outer_slot_ = lv::u32(ch->base, lv::kOffSectionSlot).load(std::memory_order_relaxed);
  enter_ns_ = now_ns();
  ch->set_section(slot_, enter_ns_);
}

Section::~Section() {
  if (!active_) return;
  Channel* const ch = channel();
  const std::uint64_t now = now_ns();
  if (slot_ != lv::kNoSection) {
    const std::size_t off = lv::slot_off(slot_);
    const std::uint64_t took = now > enter_ns_ ? now - enter_ns_ : 0;
    auto max = lv::u64(ch->base, off + lv::kSlotMaxNs);
    if (took > max.load(std::memory_order_relaxed)) max.store(took, std::memory_order_relaxed);
    lv::u64(ch->base, off + lv::kSlotTotalNs).fetch_add(took, std::memory_order_relaxed);
    lv::u64(ch->base, off + lv::kSlotCount).fetch_add(1);
  }
  ch->set_section(outer_slot_, outer_slot_ == lv::kNoSection ? 0 : now);
}

namespace detail {

void heartbeat_while_waiting() noexcept {
  Channel* const ch = channel();
  if (ch == nullptr || lv::u64(ch->base, lv::kOffBeatCount).load(std::memory_order_relaxed) == 0) return;
  heartbeat();
}

bool publish_collectives(int size) noexcept {
  Channel* const ch = channel();
  // A subgroup's numbers would not match the other ranks': only a group of
  // the whole job is counted.
  if (ch == nullptr || size != ch->world_size) return false;
  lv::u32(ch->base, lv::kOffCollPublished).store(1, std::memory_order_relaxed);
  return true;
}

std::uint64_t collective_issued(lv::CollectiveKind kind) noexcept {
  Channel* const ch = channel();
  if (ch == nullptr) return 0;
  // An increment: two groups may issue from two threads. The kind lands a
  // moment after the number; the agent only prints it.
  const std::uint64_t seq = lv::u64(ch->base, lv::kOffCollIssued).fetch_add(1) + 1;
  lv::field<std::uint8_t>(ch->base, lv::kOffCollKinds + seq % lv::kCollKindSlots)
      .store(static_cast<std::uint8_t>(kind), std::memory_order_relaxed);
  return seq;
}

void collective_completed(std::uint64_t seq) noexcept {
  Channel* const ch = channel();
  if (ch == nullptr || seq == 0) return;
  // The highest completed: a group's collectives complete in issue order.
  auto done = lv::u64(ch->base, lv::kOffCollCompleted);
  std::uint64_t cur = done.load(std::memory_order_relaxed);
  while (cur < seq && !done.compare_exchange_weak(cur, seq, std::memory_order_release)) {
  }
}

}  // namespace detail
}  // namespace ddp

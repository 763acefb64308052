// The worker side of the liveness file, byte for byte as docs/agent-liveness.md
// documents it for other languages: offsets, little-endian values, the
// section slots, and the notify pipe.
//
// The SDK maps the file once per process, so every case shares one file (the
// agent's side below, made on first use) and asserts changes, not absolute
// counts: the cases hold whether ctest runs each in a process of its own or
// the binary runs them all in one.
#include "ddp/common/liveness_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "ddp/heartbeat.hpp"
#include "liveness_collectives.hpp"
#include "liveness_wait.hpp"
#include "work_state.hpp"

namespace lv = ddp::liveness;
namespace fs = std::filesystem;

namespace {

template <typename T>
T at(const std::string& bytes, std::size_t off) {
  T v{};
  std::memcpy(&v, bytes.data() + off, sizeof(T));
  return v;
}

// What the agent does: a zeroed page with a header, and the notify pipe; the
// SDK finds both through the environment.
struct AgentSide {
  fs::path dir = fs::temp_directory_path() / ("ddp-liveness-test-" + std::to_string(::getpid()));
  fs::path file = dir / "liveness";
  fs::path pipe = dir / "liveness.pipe";
  void* base = nullptr;
  int reader = -1;

  AgentSide() {
    fs::create_directories(dir);
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, lv::kFileSize) == 0);
    base = ::mmap(nullptr, lv::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(base != MAP_FAILED);
    ::close(fd);
    lv::init_header(base);
    REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
    reader = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(reader >= 0);
    ::setenv("DDP_LIVENESS_FILE", file.c_str(), 1);
    ::setenv("DDP_LIVENESS_PIPE", pipe.c_str(), 1);
    ::setenv("WORLD_SIZE", "4", 1);  // read with the file: collectives of a group of 4 are counted
    REQUIRE(ddp::liveness_enabled());
  }
  ~AgentSide() {
    ::close(reader);
    ::munmap(base, lv::kFileSize);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  AgentSide(const AgentSide&) = delete;
  AgentSide& operator=(const AgentSide&) = delete;

  // The file as another language's agent reads it: bytes, not the SDK's memory.
  std::string bytes() const {
    std::string out(lv::kFileSize, '\0');
    const int fd = ::open(file.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pread(fd, out.data(), out.size(), 0) == static_cast<ssize_t>(out.size()));
    ::close(fd);
    return out;
  }
  // How many wake-up bytes wait in the pipe (and takes them).
  int wakeups() const {
    char buf[64];
    const auto n = ::read(reader, buf, sizeof(buf));
    return n < 0 ? 0 : static_cast<int>(n);
  }
  // The slot holding `name`, by the bytes.
  std::size_t slot_of(const std::string& name) const {
    const auto b = bytes();
    for (std::uint32_t i = 0; i < at<std::uint32_t>(b, 52); ++i) {
      const std::size_t off = 128 + i * 64;
      if (at<std::uint32_t>(b, off) == 1 && b.substr(off + 8, at<std::uint32_t>(b, off + 4)) == name)
        return off;
    }
    FAIL("no slot named " << name);
    return 0;
  }
};

AgentSide& agent() {
  static AgentSide side;
  return side;
}

}  // namespace

// First in the file: it needs a worker that has not heartbeat yet (Catch runs
// the cases in this order when the binary runs them all in one process).
TEST_CASE("a wait inside the SDK beats only for a worker that heartbeats itself") {
  AgentSide& a = agent();
  const auto before = at<std::uint64_t>(a.bytes(), 16);
  ddp::detail::heartbeat_while_waiting();  // a re-form's wait, say
  const auto after_wait = at<std::uint64_t>(a.bytes(), 16);
  CHECK(after_wait == (before == 0 ? 0 : before + 1));  // none yet: never under the heartbeat timeout
  ddp::heartbeat();
  ddp::detail::heartbeat_while_waiting();
  CHECK(at<std::uint64_t>(a.bytes(), 16) == after_wait + 2);
}

TEST_CASE("the header holds the magic, the version and the size at the documented offsets") {
  const auto bytes = agent().bytes();
  CHECK(bytes.substr(0, 4) == "DDPL");
  CHECK(at<std::uint32_t>(bytes, 4) == 1);
  CHECK(at<std::uint32_t>(bytes, 8) == 4096);
  CHECK(at<std::uint32_t>(bytes, 80) == 0xFFFFFFFF);  // outside any section
}

TEST_CASE("a heartbeat counts at offset 16 and stamps its time at offset 24") {
  const auto before = at<std::uint64_t>(agent().bytes(), 16);
  ddp::heartbeat();
  ddp::heartbeat();
  const auto bytes = agent().bytes();
  CHECK(at<std::uint64_t>(bytes, 16) == before + 2);
  CHECK(at<std::uint64_t>(bytes, 24) > 0);
  CHECK(lv::read_snapshot(agent().base).beat_count == before + 2);
}

TEST_CASE("a heartbeat wakes the agent with one byte only when it asked, and the request is spent") {
  AgentSide& a = agent();
  a.wakeups();
  ddp::heartbeat();
  CHECK(a.wakeups() == 0);  // nobody asked: no byte
  lv::u32(a.base, lv::kOffNotifyBeat).store(1);
  ddp::heartbeat();
  CHECK(a.wakeups() == 1);
  CHECK(lv::u32(a.base, lv::kOffNotifyBeat).load() == 0);
  ddp::heartbeat();
  CHECK(a.wakeups() == 0);
}

TEST_CASE("entering a section publishes its slot and time under an even sequence number") {
  AgentSide& a = agent();
  const auto seq_before = at<std::uint64_t>(a.bytes(), 64);
  ddp::Section step("step");
  const auto bytes = a.bytes();
  const auto seq = at<std::uint64_t>(bytes, 64);
  CHECK(seq == seq_before + 2);  // even once written
  CHECK(seq % 2 == 0);
  CHECK(at<std::uint64_t>(bytes, 72) > 0);
  const std::size_t slot = a.slot_of("step");
  CHECK(at<std::uint32_t>(bytes, 80) == (slot - 128) / 64);
  CHECK(at<std::uint32_t>(bytes, slot + 4) == 4);  // the name's length
  CHECK(lv::read_snapshot(a.base).section == "step");
}

TEST_CASE("a section entry wakes the agent only for the slots it asked for, before its deadline") {
  AgentSide& a = agent();
  a.wakeups();
  { ddp::Section claim_step("step"); }
  { ddp::Section claim_ckpt("checkpoint"); }
  CHECK(a.wakeups() == 0);  // notify_enter_before is 0
  const auto ckpt_bit = static_cast<std::uint32_t>((a.slot_of("checkpoint") - 128) / 64);
  lv::u64(a.base, lv::kOffNotifyEnterBefore).store(UINT64_MAX);
  lv::u32(a.base, lv::kOffNotifySlots).store(1U << ckpt_bit);
  { ddp::Section step("step"); }
  CHECK(a.wakeups() == 0);
  { ddp::Section ckpt("checkpoint"); }
  CHECK(a.wakeups() == 1);
  lv::u64(a.base, lv::kOffNotifyEnterBefore).store(0);
  lv::u32(a.base, lv::kOffNotifySlots).store(0);
}

TEST_CASE("leaving a nested section makes the outer one current again") {
  AgentSide& a = agent();
  {
    ddp::Section step("step");
    {
      ddp::Section ckpt("checkpoint");
      const auto snap = lv::read_snapshot(a.base);
      CHECK(snap.section == "checkpoint");
      CHECK(snap.section_slot == (a.slot_of("checkpoint") - 128) / 64);
    }
    CHECK(lv::read_snapshot(a.base).section == "step");
  }
  CHECK(lv::read_snapshot(a.base).section.empty());
  CHECK(at<std::uint32_t>(a.bytes(), 80) == 0xFFFFFFFF);
}

TEST_CASE("each slot counts its completed sections and their duration") {
  AgentSide& a = agent();
  { ddp::Section claim("step"); }
  const std::size_t step = a.slot_of("step");
  const auto count_before = at<std::uint64_t>(a.bytes(), step + 40);
  { ddp::Section s1("step"); }
  { ddp::Section s2("step"); }
  const auto bytes = a.bytes();
  CHECK(at<std::uint64_t>(bytes, step + 40) == count_before + 2);
  CHECK(at<std::uint64_t>(bytes, step + 48) > 0);                                     // the longest
  CHECK(at<std::uint64_t>(bytes, step + 56) >= at<std::uint64_t>(bytes, step + 48));  // the sum
}

TEST_CASE("a name already in a slot reuses that slot") {
  AgentSide& a = agent();
  { ddp::Section first("reused"); }
  const auto used = at<std::uint32_t>(a.bytes(), 52);
  { ddp::Section again("reused"); }
  CHECK(at<std::uint32_t>(a.bytes(), 52) == used);
  const auto snap = lv::read_snapshot(a.base);
  CHECK(std::count_if(snap.slots.begin(), snap.slots.end(),
                      [](const auto& s) { return s.name == "reused"; }) == 1);
}

TEST_CASE("collectives are published only for a group of the whole job") {
  AgentSide& a = agent();
  CHECK_FALSE(ddp::detail::publish_collectives(2));  // a subgroup's numbers would not match
  REQUIRE(ddp::detail::publish_collectives(4));
  CHECK(at<std::uint32_t>(a.bytes(), 120) == 1);
  CHECK(lv::read_snapshot(a.base).collectives_published);
}

TEST_CASE(
    "issued collectives are numbered with their kind, and the first not completed is the one waited on") {
  AgentSide& a = agent();
  REQUIRE(ddp::detail::publish_collectives(4));
  const auto first = ddp::detail::collective_issued(lv::CollectiveKind::kAllReduce);
  const auto second = ddp::detail::collective_issued(lv::CollectiveKind::kBarrier);
  CHECK(second == first + 1);
  ddp::detail::collective_completed(first);
  const auto bytes = a.bytes();
  CHECK(at<std::uint64_t>(bytes, 88) == second);           // issued
  CHECK(at<std::uint64_t>(bytes, 96) == first);            // completed
  CHECK(at<std::uint8_t>(bytes, 104 + first % 16) == 1);   // all_reduce
  CHECK(at<std::uint8_t>(bytes, 104 + second % 16) == 5);  // barrier
  const auto waiting = lv::read_snapshot(a.base);
  CHECK(waiting.coll_issued == second);
  CHECK(waiting.coll_completed == first);
  CHECK(waiting.coll_waiting_kind == lv::CollectiveKind::kBarrier);
  ddp::detail::collective_completed(second);
}

TEST_CASE("a Work completing later reports its collective's number when it completes") {
  AgentSide& a = agent();
  REQUIRE(ddp::detail::publish_collectives(4));
  const auto done_before = lv::read_snapshot(a.base).coll_completed;
  const auto n = ddp::detail::collective_issued(lv::CollectiveKind::kAllReduce);
  auto pending = std::make_shared<ddp::Work::State>();
  ddp::detail::WorkAccess::track(ddp::Work(pending), n);
  CHECK(lv::read_snapshot(a.base).coll_completed == done_before);
  pending->complete();
  CHECK(lv::read_snapshot(a.base).coll_completed == n);
}

TEST_CASE("a Work already done reports its collective's number at once") {
  AgentSide& a = agent();
  REQUIRE(ddp::detail::publish_collectives(4));
  const auto n = ddp::detail::collective_issued(lv::CollectiveKind::kBroadcast);
  ddp::detail::WorkAccess::track(ddp::Work(), n);
  CHECK(lv::read_snapshot(a.base).coll_completed == n);
}

// The worker side of the liveness file, byte for byte as docs/agent-liveness.md
// documents it for other languages: offsets, little-endian values, the
// section slots, and the notify pipe.
#include "ddp/common/liveness_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

std::string file_bytes(const fs::path& p) {
  std::string out(lv::kFileSize, '\0');
  const int fd = ::open(p.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, out.data(), out.size(), 0) == static_cast<ssize_t>(out.size()));
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("heartbeats and sections land at the documented offsets and wake the agent only when asked") {
  const fs::path dir = fs::temp_directory_path() / ("ddp-liveness-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "liveness";
  const fs::path pipe = dir / "liveness.pipe";
  // What the agent does: a zeroed page with a header, and the notify pipe.
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, lv::kFileSize) == 0);
  void* base = ::mmap(nullptr, lv::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(base != MAP_FAILED);
  ::close(fd);
  lv::init_header(base);
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  const int reader = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  ::setenv("DDP_LIVENESS_FILE", file.c_str(), 1);
  ::setenv("DDP_LIVENESS_PIPE", pipe.c_str(), 1);
  ::setenv("WORLD_SIZE", "4", 1);  // read with the file: collectives of a group of 4 are counted

  REQUIRE(ddp::liveness_enabled());
  auto bytes = file_bytes(file);
  CHECK(bytes.substr(0, 4) == "DDPL");
  CHECK(at<std::uint32_t>(bytes, 4) == 1);
  CHECK(at<std::uint32_t>(bytes, 8) == 4096);
  CHECK(at<std::uint32_t>(bytes, 80) == 0xFFFFFFFF);

  // A wait inside the SDK (a re-form) beats only for a worker that heartbeats:
  // it does not put one that never does under the heartbeat timeout.
  ddp::detail::heartbeat_while_waiting();
  CHECK(at<std::uint64_t>(file_bytes(file), 16) == 0);
  ddp::heartbeat();
  ddp::heartbeat();
  bytes = file_bytes(file);
  CHECK(at<std::uint64_t>(bytes, 16) == 2);
  CHECK(at<std::uint64_t>(bytes, 24) > 0);
  ddp::detail::heartbeat_while_waiting();
  CHECK(at<std::uint64_t>(file_bytes(file), 16) == 3);
  char buf[16];
  CHECK(::read(reader, buf, sizeof(buf)) < 0);  // nobody asked: no byte

  // The agent asks to hear of the next heartbeat: one byte, then the request is spent.
  lv::u32(base, lv::kOffNotifyBeat).store(1);
  ddp::heartbeat();
  CHECK(::read(reader, buf, sizeof(buf)) == 1);
  CHECK(lv::u32(base, lv::kOffNotifyBeat).load() == 0);
  ddp::heartbeat();
  CHECK(::read(reader, buf, sizeof(buf)) < 0);

  {
    ddp::Section step("step");
    bytes = file_bytes(file);
    CHECK(at<std::uint64_t>(bytes, 64) == 2);  // seq: even once written
    CHECK(at<std::uint64_t>(bytes, 72) > 0);
    CHECK(at<std::uint32_t>(bytes, 80) == 0);
    CHECK(at<std::uint32_t>(bytes, 52) == 1);   // slots used
    CHECK(at<std::uint32_t>(bytes, 128) == 1);  // slot 0 ready
    CHECK(at<std::uint32_t>(bytes, 132) == 4);
    CHECK(bytes.substr(136, 4) == "step");
    CHECK(::read(reader, buf, sizeof(buf)) < 0);  // notify_enter_before is 0
    {
      // The agent wants entries before its deadline, of "checkpoint" (slot 1) only.
      lv::u64(base, lv::kOffNotifyEnterBefore).store(UINT64_MAX);
      lv::u32(base, lv::kOffNotifySlots).store(0b10);
      { ddp::Section again("step"); }
      CHECK(::read(reader, buf, sizeof(buf)) < 0);
      ddp::Section ckpt("checkpoint");
      CHECK(::read(reader, buf, sizeof(buf)) == 1);
      lv::u64(base, lv::kOffNotifyEnterBefore).store(0);
      const auto snap = lv::read_snapshot(base);
      CHECK(snap.section == "checkpoint");
      CHECK(snap.section_slot == 1);
    }
    // The outer section is current again.
    CHECK(lv::read_snapshot(base).section == "step");
  }
  bytes = file_bytes(file);
  CHECK(at<std::uint32_t>(bytes, 80) == 0xFFFFFFFF);
  CHECK(at<std::uint64_t>(bytes, 64) == 12);       // six changes
  CHECK(at<std::uint64_t>(bytes, 128 + 40) == 2);  // step: two completed
  CHECK(at<std::uint64_t>(bytes, 128 + 48) > 0);   // its duration
  CHECK(at<std::uint64_t>(bytes, 192 + 40) == 1);  // checkpoint: one
  const auto snap = lv::read_snapshot(base);
  CHECK(snap.beat_count == 5);
  REQUIRE(snap.slots.size() == 2);
  CHECK(snap.slots[0].name == "step");
  CHECK(snap.slots[1].name == "checkpoint");
  CHECK(snap.section.empty());

  // Collectives (bytes 88-123): nothing until a group of the whole job counts them.
  CHECK(at<std::uint32_t>(bytes, 120) == 0);
  CHECK_FALSE(ddp::detail::publish_collectives(2));  // a subgroup's numbers would not match
  REQUIRE(ddp::detail::publish_collectives(4));
  const auto first = ddp::detail::collective_issued(lv::CollectiveKind::kAllReduce);
  const auto second = ddp::detail::collective_issued(lv::CollectiveKind::kBarrier);
  CHECK(first == 1);
  CHECK(second == 2);
  ddp::detail::collective_completed(first);
  bytes = file_bytes(file);
  CHECK(at<std::uint32_t>(bytes, 120) == 1);
  CHECK(at<std::uint64_t>(bytes, 88) == 2);      // issued
  CHECK(at<std::uint64_t>(bytes, 96) == 1);      // completed
  CHECK(at<std::uint8_t>(bytes, 104 + 1) == 1);  // #1: all_reduce
  CHECK(at<std::uint8_t>(bytes, 104 + 2) == 5);  // #2: barrier
  auto waiting = lv::read_snapshot(base);
  CHECK(waiting.collectives_published);
  CHECK(waiting.coll_issued == 2);
  CHECK(waiting.coll_completed == 1);
  CHECK(waiting.coll_waiting_kind == lv::CollectiveKind::kBarrier);
  // A Work completing later reports its number when it does; one done already, at once.
  auto pending = std::make_shared<ddp::Work::State>();
  ddp::detail::WorkAccess::track(ddp::Work(pending), second);
  CHECK(lv::read_snapshot(base).coll_completed == 1);
  pending->complete();
  CHECK(lv::read_snapshot(base).coll_completed == 2);
  const auto third = ddp::detail::collective_issued(lv::CollectiveKind::kBroadcast);
  ddp::detail::WorkAccess::track(ddp::Work(), third);
  CHECK(lv::read_snapshot(base).coll_completed == 3);

  ::close(reader);
  ::munmap(base, lv::kFileSize);
  fs::remove_all(dir);
}

// Persistence's write side: appends, compaction, graceful close and the
// degraded mode (persistence.hpp).
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ddp/common/logging.hpp"
#include "failpoints.hpp"
#include "persistence.hpp"
#include "persistence_format.hpp"

namespace ddp::store::server {
namespace {

using format::put;
using format::put_str;

constexpr std::uint64_t kProbeSlackBytes = 64 << 10;

// Writes `data` to dir/name.tmp, fsyncs and renames over dir/name: readers see
// the old file or the new one, never a half-written one. On failure the .tmp is
// gone and the old file untouched. `point` prefixes the failpoints' names.
void replace_file(const std::string& dir, const std::string& name, std::string_view data,
                  const std::string& point) {
  const auto path = dir + "/" + name;
  const auto tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw PersistError("cannot create " + tmp + ": " + errno_text(errno));
  auto fail = [&](const std::string& what, int err, bool open) {
    if (open) ::close(fd);
    ::unlink(tmp.c_str());
    return PersistError("cannot " + what + " " + tmp + ": " + errno_text(err));
  };
  format::WriteFailure wf;
  if (!format::write_all(fd, data, point + ".write", wf)) throw fail("write", wf.err, true);
  if (const int err = format::sync_fd(fd, point + ".fsync"); err != 0) throw fail("fsync", err, true);
  ::close(fd);
  int err = 0;
  if (const auto fault = failpoints::check(point + ".rename")) {
    if (fault.action == failpoints::Action::kCrash) failpoints::crash(point + ".rename");
    err = fault.err;
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
  }
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw PersistError("cannot rename " + tmp + " to " + path + ": " + errno_text(err));
  }
  if (const int derr = format::fsync_dir(dir); derr != 0)
    throw PersistError("cannot fsync directory " + dir + " after renaming " + tmp + ": " + errno_text(derr));
}

}  // namespace

bool Persistence::cut_back() {
  int err = 0;
  if (const auto fault = failpoints::check("log.truncate"))
    err = fault.err;
  else if (::ftruncate(log_fd_, static_cast<off_t>(log_bytes_)) != 0)
    err = errno;
  if (err != 0) {
    ddp::log::get("store.server")
        ->error("cannot cut the log back to its last whole record path={}/log offset={} error=\"{}\"", dir_,
                log_bytes_, errno_text(err));
    return false;
  }
  needs_cut_ = false;
  return true;
}

void Persistence::append(const Mutation& m) {
  if (log_fd_ < 0) return;
  const auto path = dir_ + "/log";
  if (failed()) throw PersistError(failed_reason_);
  if (needs_cut_ && !cut_back())
    throw PersistError("log " + path +
                       " ends in an unfinished record that cannot be cut yet; writes are refused");
  const auto rec = format::encode_record(next_seq_, m);
  format::WriteFailure f;
  if (!format::write_all(log_fd_, rec, "log.write", f)) {
    ++write_failures_;
    last_failed_bytes_ = rec.size();
    needs_cut_ = true;
    cut_back();  // never append after a torn record
    const auto why = "cannot append to " + path + ": " + errno_text(f.err);
    enter_degraded(why);
    throw PersistError(why);
  }
  ++next_seq_;
  log_bytes_ += rec.size();
  if (degraded_) leave_degraded();
}

void Persistence::synced(std::uint64_t) { ++syncs_; }

std::string Persistence::sync_failed(int err) {
  ++write_failures_;
  failed_reason_ = "an fsync of " + dir_ + "/log failed (" + errno_text(err) +
                   "); nothing is written until the daemon restarts and reads the log back";
  enter_degraded(failed_reason_);
  return failed_reason_;
}

void Persistence::compact(const StoreCore& core) {
  if (failed()) throw PersistError(failed_reason_);
  std::string body;
  put<std::int64_t>(body, core.revision());
  put<std::uint64_t>(body, next_seq_ - 1);
  put<std::int64_t>(body, core.leases().next_id());
  put<std::uint32_t>(body, static_cast<std::uint32_t>(core.leases().size()));
  for (const auto& [id, lease] : core.leases().leases()) {
    const auto start = body.size();
    put<std::int64_t>(body, id);
    put<std::int64_t>(body, lease.ttl.count());
    put<std::uint32_t>(body, format::crc32c(std::string_view(body).substr(start)));
  }
  put<std::uint64_t>(body, core.kv().size());
  for (const auto& [key, e] : core.kv().entries()) {
    const auto start = body.size();
    put_str(body, key);
    put_str(body, e.value);
    put<std::int64_t>(body, e.mod_revision);
    put<std::int64_t>(body, e.lease);
    put<std::uint32_t>(body, format::crc32c(std::string_view(body).substr(start)));
  }
  std::string file(format::kSnapMagicV2);
  put<std::uint32_t>(file, format::crc32c(body));
  put<std::uint64_t>(file, body.size());
  file.append(body);
  try {
    replace_file(dir_, "snapshot", file, "snapshot");
    snapshot_seq_ = next_seq_ - 1;
    snapshot_found_ = true;
    start_new_log();
  } catch (const PersistError& e) {
    ++write_failures_;
    last_failed_bytes_ = file.size();
    enter_degraded(e.what());
    throw;
  }
  if (degraded_) leave_degraded();
  ddp::log::get("store.server")
      ->debug("wrote snapshot dir={} keys={} revision={}", dir_, core.kv().size(), core.revision());
}

void Persistence::start_new_log() {
  replace_file(dir_, "log", format::encode_log_header(next_seq_ - 1), "log.create");
  if (log_fd_ >= 0) ::close(log_fd_);
  log_fd_ = -1;
  needs_cut_ = false;
  log_bytes_ = format::kLogHeaderV2;
  open_log_for_append();
}

void Persistence::close(const StoreCore& core) {
  if (log_fd_ < 0) return;
  if (failed()) throw PersistError(failed_reason_);
  if (const int err = format::sync_fd(log_fd_, "log.fsync"); err != 0)
    throw PersistError("cannot fsync " + dir_ + "/log: " + errno_text(err));
  compact(core);
  ::close(log_fd_);
  log_fd_ = -1;
}

bool Persistence::probe() {
  if (!degraded_) return true;
  if (failed()) return false;
  if (needs_cut_ && !cut_back()) return false;
  struct statvfs vfs {};
  if (::statvfs(dir_.c_str(), &vfs) != 0) return false;
  const auto avail = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (avail < last_failed_bytes_ + kProbeSlackBytes) return false;
  leave_degraded();
  return true;
}

void Persistence::enter_degraded(const std::string& why) {
  degraded_reason_ = why;
  if (degraded_) return;
  degraded_ = true;
  ddp::log::get("store.server")
      ->error(
          "data dir degraded: writes fail, reads go on, until the disk takes writes again dir={} "
          "error=\"{}\"",
          dir_, why);
}

void Persistence::leave_degraded() {
  if (!degraded_) return;
  degraded_ = false;
  degraded_reason_.clear();
  ddp::log::get("store.server")->warn("data dir writable again; leaving degraded mode dir={}", dir_);
}

}  // namespace ddp::store::server

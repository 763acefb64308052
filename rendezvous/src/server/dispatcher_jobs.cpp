// The job listing (kJobs, StoreServer::jobs): JobScans run in slices posted to
// the loop one after another, so requests are served between two slices.
// Requests for the same listing while one runs share it; a finished one is
// answered again while the store's revision has not moved and it is younger
// than kJobsCacheAge.
#include <boost/asio/post.hpp>

#include "ddp/common/logging.hpp"
#include "dispatcher.hpp"

namespace ddp::store::server {
namespace asio = boost::asio;

namespace {

// Distinct listings running at once, and requests waiting for them: what any
// number of clients can make the loop hold.
constexpr std::size_t kMaxJobScans = 8;
constexpr std::size_t kMaxJobWaiters = 1024;
constexpr std::chrono::milliseconds kJobsCacheAge{1000};

std::string query_key(const JobQuery& q) {
  return q.run_id + '\0' + (q.detail ? "d" : "s") + std::to_string(q.node_offset) + "," +
         std::to_string(q.node_limit);
}

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

bool Dispatcher::jobs(const JobQuery& query, JobsCallback done) {
  if (stopping_) {
    done(nullptr);
    return true;
  }
  const auto key = query_key(query);
  if (auto c = jobs_cache_.find(key); c != jobs_cache_.end()) {
    if (c->second.revision == core_.revision() && Clock::now() - c->second.at < kJobsCacheAge) {
      done(c->second.report.get());
      return true;
    }
    jobs_cache_.erase(c);
  }
  if (job_waiters_ >= kMaxJobWaiters) return false;
  auto it = job_scans_.find(key);
  if (it == job_scans_.end()) {
    if (job_scans_.size() >= kMaxJobScans) return false;
    it = job_scans_.emplace(key, JobScanRun{std::make_unique<JobScan>(query, wall_now()), {}}).first;
    asio::post(io_, [this, key] { step_scan(key); });
  }
  it->second.waiting.push_back(std::move(done));
  ++job_waiters_;
  return true;
}

void Dispatcher::step_scan(const std::string& key) {
  auto it = job_scans_.find(key);
  if (it == job_scans_.end()) return;
  bool finished = stopping_;
  if (!finished) {
    try {
      finished = it->second.scan->step(core_.kv(), job_log_);
    } catch (const std::exception& e) {
      // A bug reading some key: this listing fails, the loop goes on.
      ddp::log::get("store.server")->error("job listing failed error=\"{}\"", e.what());
      auto run = std::move(it->second);
      job_scans_.erase(it);
      job_waiters_ -= run.waiting.size();
      for (auto& done : run.waiting) done(nullptr);
      return;
    }
  }
  if (!finished) {
    asio::post(io_, [this, key] { step_scan(key); });
    return;
  }
  auto run = std::move(it->second);
  job_scans_.erase(it);
  job_waiters_ -= run.waiting.size();
  std::shared_ptr<const JobsReport> report;
  if (!stopping_) {
    report = std::make_shared<const JobsReport>(run.scan->take());
    if (jobs_cache_.size() >= kMaxJobScans) jobs_cache_.clear();
    jobs_cache_[key] = JobsCache{core_.revision(), Clock::now(), report};
  }
  for (auto& done : run.waiting) done(report.get());
}

void Dispatcher::handle_jobs(const std::shared_ptr<Session>& s, const Request& req) {
  JobQuery q;
  if (!req.keys.empty()) q.run_id = req.keys[0];
  if (q.run_id.find('/') != std::string::npos) {
    return s->send(reply(req.id, Status::kBadRequest, "a run id never contains '/'"));
  }
  const auto id = req.id;
  const auto max_frame = options_.limits.max_frame_bytes;
  const bool queued = jobs(q, [this, s, id, max_frame](const JobsReport* report) {
    if (s->closed()) return;
    if (report == nullptr) return s->send(reply(id, Status::kShuttingDown, "server is shutting down"));
    Response resp = reply(id, Status::kOk, report->truncated ? "truncated" : "");
    resp.revision = core_.revision();
    resp.num = static_cast<std::int64_t>(report->jobs.size());
    std::size_t bytes = 0;
    for (const auto& job : report->jobs) {
      resp.items.push_back({ItemKind::kPresent, job.run_id, to_json(job), 0});
      bytes += job.run_id.size() + resp.items.back().value.size() + 32;
    }
    if (bytes > max_frame) {
      resp = reply(id, Status::kLimitExceeded,
                   "the job list is " + std::to_string(bytes) + " bytes, more than max_frame_bytes " +
                       std::to_string(max_frame) + "; ask for one job (--rdzv_id)");
    }
    s->send(resp);
  });
  if (!queued) {
    s->send(reply(id, Status::kLimitExceeded, "too many job listings in progress; try again"));
  }
}

}  // namespace ddp::store::server

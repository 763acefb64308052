#include "job_scan.hpp"

#include "ddp/store/job_keys.hpp"

namespace ddp::store::server {

JobScan::JobScan(JobQuery query, double now)
    : query_(std::move(query)), now_(now), prefix_(query_.run_id.empty() ? "/" : "/" + query_.run_id + "/") {
  report_.taken_at = now;
  resume_ = prefix_;
}

void JobScan::finish_job(const KvState& kv, const JobLog& log) {
  if (!job_) return;
  auto job = std::move(job_);
  if (!job->is_job()) return;
  auto summary = job->summary(log.find(run_));
  if (query_.detail && summary.run_id == query_.run_id) {
    report_.detail = job->detail(log.find(run_), [&kv](const std::string& key) -> std::optional<std::string> {
      const auto* e = kv.find(key);
      return e ? std::optional<std::string>(e->value) : std::nullopt;
    });
  }
  if (report_.jobs.size() < kMaxJobs) {
    report_.jobs.push_back(std::move(summary));
  } else {
    report_.truncated = true;
  }
}

bool JobScan::step(const KvState& kv, const JobLog& log) {
  const auto& map = kv.entries();
  auto it = map.lower_bound(resume_);
  std::size_t keys = 0;
  std::size_t bytes = 0;
  while (it != map.end() && keys < kSliceKeys && bytes < kSliceBytes) {
    const std::string& key = it->first;
    // Every job key starts with '/'; with a run id, only that job's.
    if (!key.starts_with(prefix_)) {
      it = map.end();
      break;
    }
    ++keys;
    const auto k = keys::job_key_of(key);
    if (!k) {
      ++it;
      continue;
    }
    if (!job_ || run_ != k->run) {
      finish_job(kv, log);
      run_ = std::string(k->run);
      job_ = std::make_unique<JobAccumulator>(run_, query_.detail ? &query_ : nullptr, now_);
    }
    if (k->area == "worker") {
      // The workers' own keys tell nothing about the job: skip them all at once.
      auto past_workers = keys::worker_root(run_);
      past_workers.back() = static_cast<char>('/' + 1);
      it = map.lower_bound(past_workers);
      continue;
    }
    job_->add(k->area, k->rest, it->second.value, it->second.lease != 0);
    bytes += it->second.value.size();
    ++it;
  }
  if (it == map.end()) {
    finish_job(kv, log);
    return true;
  }
  // The next slice starts at the first key not read, or whatever follows it by then.
  resume_ = it->first;
  return false;
}

}  // namespace ddp::store::server

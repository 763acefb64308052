// The daemon's status page and the per-job metrics, rendered from a job
// listing (StoreServer::jobs) on the metrics port's render thread, never on
// the store's loop. The page is plain server-side HTML with its style inline:
// nothing is fetched from anywhere (no script, no font, no CDN), and it
// reloads itself every kRefreshSeconds. Every value from a worker, an agent or
// a store key goes through html() (ddp::printable, then HTML escaping), so a
// host name or failure text holding markup or terminal escapes is shown as
// text. A Content-Security-Policy forbids scripts besides.
//
// Paths: "/" the jobs, 200 a page ("/?page=N&state=failed"); "/job?id=RUN&page=N"
// one job, its nodes 100 a page;
// "/api/jobs" the rows as JSON (what `ddp-store jobs --json` prints).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "ddp/store/job_report.hpp"

namespace ddp::rendezvousd {

inline constexpr int kRefreshSeconds = 5;
inline constexpr std::size_t kNodesPerPage = 100;
inline constexpr std::size_t kJobsPerPage = 200;

// `s` for HTML text or an attribute: printable(), cut at `max`, then & < > " ' escaped.
// `keep_newlines`: newlines and tabs stay (inside <pre>).
std::string html(std::string_view s, std::size_t max = 4096, bool keep_newlines = false);
// Every byte but [A-Za-z0-9-._~] as %XX, and back (nullopt for a bad escape).
std::string url_encode(std::string_view s);
std::optional<std::string> url_decode(std::string_view s);
// The value of `name` in a query string "a=1&b=2" (decoded); nullopt when absent or malformed.
std::optional<std::string> query_param(std::string_view query, std::string_view name);

// What the header shows about the daemon itself.
struct DaemonFacts {
  std::string listen;                         // host:port of the store
  std::map<std::string, std::int64_t> stats;  // StoreServer::stats()
};

// The jobs, kJobsPerPage a page (`page` 0-based), only those in `state` when
// it names one ("failed"), with the count of each state on top.
std::string render_jobs_page(const store::JobsReport& report, const DaemonFacts& daemon, double now,
                             std::size_t page = 0, const std::string& state = {});
// One job; `page` is 0-based. A report without that job's detail renders "no such job".
std::string render_job_page(const store::JobsReport& report, const std::string& run_id, std::size_t page,
                            double now);
std::string render_jobs_json(const store::JobsReport& report);

// The page's answer to `path` + `query` ("/", "/job", "/api/jobs"), from a
// job listing of `server` (listening on `listen`).
}  // namespace ddp::rendezvousd
namespace ddp::store {
class StoreServer;
}
namespace ddp::rendezvousd {
struct PageReply;
PageReply answer_page(const store::StoreServer& server, const std::string& listen, const std::string& path,
                      const std::string& query);

// The per-job series of /metrics (docs/operations.md, "Metrics").
std::string render_job_metrics(const store::JobsReport& report);

}  // namespace ddp::rendezvousd

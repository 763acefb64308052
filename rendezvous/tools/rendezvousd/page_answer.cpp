// Routing of the status page's paths to a job listing and its rendering.
#include <chrono>

#include "ddp/common/parse.hpp"
#include "ddp/store/store_server.hpp"
#include "metrics_http.hpp"
#include "status_page.hpp"

namespace ddp::rendezvousd {

PageReply answer_page(const store::StoreServer& server, const std::string& listen, const std::string& path,
                      const std::string& query) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (path == "/api/jobs") return {200, "application/json; charset=utf-8", render_jobs_json(server.jobs({}))};
  if (path == "/job") {
    const auto id = query_param(query, "id");
    if (!id || id->empty() || id->find('/') != std::string::npos) {
      return {400, "text/plain; charset=utf-8", "name the job: /job?id=RUN_ID\n"};
    }
    std::size_t page = 1;
    if (const auto p = query_param(query, "page")) {
      const auto n = parse_int<std::int64_t>(*p);
      if (!n || *n < 1 || *n > 1000000) return {400, "text/plain; charset=utf-8", "page: a number from 1\n"};
      page = static_cast<std::size_t>(*n);
    }
    store::JobQuery q{*id, true, (page - 1) * kNodesPerPage, kNodesPerPage};
    const auto report = server.jobs(q);
    return {report.detail ? 200 : 404, "text/html; charset=utf-8",
            render_job_page(report, *id, page - 1, now)};
  }
  std::size_t page = 1;
  if (const auto p = query_param(query, "page")) {
    const auto n = parse_int<std::int64_t>(*p);
    if (!n || *n < 1 || *n > 1000000) return {400, "text/plain; charset=utf-8", "page: a number from 1\n"};
    page = static_cast<std::size_t>(*n);
  }
  std::string state = query_param(query, "state").value_or("");
  bool known = state.empty();
  for (const auto s : store::kJobStates) known = known || state == store::job_state_name(s);
  if (!known) {
    return {400, "text/plain; charset=utf-8",
            "state: one of forming, running, restarting, succeeded, failed, stopped\n"};
  }
  DaemonFacts facts{listen, server.stats()};
  return {200, "text/html; charset=utf-8", render_jobs_page(server.jobs({}), facts, now, page - 1, state)};
}

}  // namespace ddp::rendezvousd

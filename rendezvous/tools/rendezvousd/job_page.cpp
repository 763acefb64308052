// One job's page: its summary, failure and hang reports with their stacks,
// stragglers, recent events, spares, excluded hosts, then its nodes and ranks
// a page at a time.
#include <cstdio>
#include <sstream>

#include "page_parts.hpp"
#include "status_page.hpp"

namespace ddp::rendezvousd {
namespace {

using namespace page;

void pre(std::ostringstream& o, const std::string& title, const std::string& text) {
  if (text.empty()) return;
  o << "<div><small>" << title << "</small><pre>" << html(text, 16384, true) << "</pre></div>";
}

std::string factor_text(double f) {
  if (f < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fx", f);
  return buf;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

void failures(std::ostringstream& o, const store::JobDetail& d, double now) {
  o << "<h2>Failure reports (" << d.failures_total << ")</h2>\n";
  if (d.failures.empty()) o << "<p class=\"empty\">No node has reported a failure.</p>\n";
  for (const auto& f : d.failures) {
    o << "<div class=\"report\"><p><b>" << html(f.summary) << "</b><br><small>node " << html(f.node_id, 256)
      << " on " << html(f.host, 256) << " &middot; round " << f.round << " &middot; " << html(clock(f.time))
      << " (" << ago(f.time, now) << ")</small></p>";
    if (!f.hang.empty()) o << "<p>hung: " << html(f.hang) << "</p>";
    pre(o, "stack (innermost first)", joined(f.frames));
    pre(o, "the other ranks", joined(f.other_ranks));
    pre(o, "traceback", f.traceback);
    pre(o, "last lines of its stderr", joined(f.stderr_tail));
    o << "</div>\n";
  }
}

void node_table(std::ostringstream& o, const store::JobDetail& d, const std::string& run_id, double now) {
  const std::size_t pages = (d.nodes_total + kNodesPerPage - 1) / kNodesPerPage;
  const std::size_t page_no = d.node_offset / kNodesPerPage;
  o << "<h2>Nodes (" << d.nodes_total << ")</h2>\n";
  if (d.nodes_total == 0) {
    o << "<p class=\"empty\">No node has written a status record yet.</p>\n";
    return;
  }
  o << pager(pages, page_no, [&](std::size_t p) {
    return "/job?id=" + url_encode(run_id) + "&amp;page=" + std::to_string(p + 1);
  });
  o << "<table class=\"nodes\"><thead><tr><th>node</th><th>host</th><th>group rank</th><th>ranks</th>"
       "<th>round</th><th>restarts</th><th>state</th><th>updated</th><th>workers: rank, step time, "
       "heartbeat age</th></tr></thead><tbody>\n";
  for (const auto& n : d.nodes) {
    o << "<tr class=\"node\"><td>" << html(n.node_id, 256) << "</td>";
    if (!n.problem.empty()) {
      o << "<td colspan=\"8\" class=\"failure\">unreadable: " << html(n.problem) << "</td></tr>\n";
      continue;
    }
    const bool bad = n.state.starts_with("unhealthy") || n.state == "failed";
    o << "<td>" << html(n.host, 256) << "</td><td class=\"num\">" << count(n.group_rank) << " / "
      << n.group_world_size << "</td><td class=\"num\">"
      << (n.rank_first < 0 ? std::string("-") : count(n.rank_first) + "&ndash;" + count(n.rank_last))
      << "</td><td class=\"num\">" << count(n.round) << "</td><td class=\"num\">" << count(n.restarts)
      << " / " << count(n.max_restarts) << "</td><td" << (bad ? " class=\"bad\"" : "") << ">"
      << html(n.state, 512) << "</td><td>" << ago(n.updated, now) << "</td><td class=\"ranks\">";
    for (const auto& r : n.ranks) {
      bool slow = false;
      for (const auto& s : d.stragglers) slow = slow || s.rank == r.rank;
      const bool dead = r.state == "failed";
      o << "<span"
        << (dead   ? " class=\"dead\""
            : slow ? " class=\"slow\""
                   : "")
        << ">r" << r.rank << " " << html(r.state, 64)
        << (r.step_s >= 0 ? " &middot; step " + seconds(r.step_s) : "")
        << (r.heartbeat_age_s >= 0 ? " &middot; hb " + seconds(r.heartbeat_age_s) : "")
        << (r.section.empty() ? "" : " &middot; in " + html(r.section, 128)) << "</span>";
    }
    o << "</td></tr>\n";
  }
  o << "</tbody></table>\n";
}

}  // namespace

std::string render_job_page(const store::JobsReport& report, const std::string& run_id, std::size_t /*page*/,
                            double now) {
  std::ostringstream o;
  o << head("ddp-rendezvousd: job " + html(run_id, 128));
  o << "<header><h1><a href=\"/\">ddp-rendezvousd</a> / job " << html(run_id, 256)
    << "</h1></header>\n<main>\n";
  if (!report.detail) {
    o << "<p class=\"empty\">No ddprun job with this run id on the daemon (finished jobs go when their keys "
         "are reclaimed).</p></main>"
      << foot(now);
    return o.str();
  }
  const auto& d = *report.detail;
  const auto& s = d.summary;
  o << "<dl class=\"summary\"><dt>state</dt><dd>" << state_badge(s.state) << "</dd><dt>backend</dt><dd>"
    << html(s.backend) << (s.nnodes.empty() ? "" : " &middot; --nnodes=" + html(s.nnodes, 64))
    << "</dd><dt>round</dt><dd>" << s.round << "</dd><dt>nodes</dt><dd>" << s.nodes
    << " in the round &middot; " << s.unhealthy << " unhealthy &middot; " << s.spares << " spares &middot; "
    << s.excluded << " excluded</dd><dt>ranks</dt><dd>" << s.ranks << "</dd><dt>restarts</dt><dd>"
    << (s.restarts < 0 ? std::string("-") : count(s.restarts) + " of " + count(s.max_restarts))
    << "</dd><dt>step time</dt><dd>" << seconds(s.step_s) << " (median of running ranks)</dd>"
    << "<dt>oldest heartbeat</dt><dd>" << seconds(s.heartbeat_age_max_s) << "</dd><dt>age</dt><dd>"
    << (s.first_seen > 0 ? seconds(now - s.first_seen) + " (since " + html(clock(s.first_seen)) + ")" : "-")
    << "</dd><dt>last failure</dt><dd class=\"failure\">"
    << (s.last_failure.empty()
            ? "-"
            : html(s.last_failure) + " <small>(" + ago(s.last_failure_time, now) + ")</small>")
    << "</dd>";
  if (!s.closed_reason.empty()) o << "<dt>closed</dt><dd>" << html(s.closed_reason) << "</dd>";
  o << "</dl>\n";
  failures(o, d, now);
  if (!d.stragglers.empty()) {
    o << "<h2>Stragglers</h2><table><thead><tr><th>rank</th><th>node</th><th>host</th><th>step</th>"
         "<th>median</th><th>factor</th><th>steps</th></tr></thead><tbody>\n";
    for (const auto& st : d.stragglers) {
      o << "<tr><td class=\"num\">" << st.rank << "</td><td>" << html(st.node, 256) << "</td><td>"
        << html(st.host, 256) << "</td><td class=\"num\">" << seconds(st.step_s) << "</td><td class=\"num\">"
        << seconds(st.median_s) << "</td><td class=\"num\">" << factor_text(st.factor)
        << "</td><td class=\"num\">" << st.steps << "</td></tr>\n";
    }
    o << "</tbody></table>\n";
  }
  o << "<h2>Recent events</h2>\n";
  if (d.events.empty()) {
    o << "<p class=\"empty\">None seen since the daemon started.</p>\n";
  } else {
    o << "<ul class=\"events\">";
    for (auto it = d.events.rbegin(); it != d.events.rend(); ++it) {
      o << "<li><small>" << html(clock(it->time)) << "</small> " << html(it->text) << "</li>";
    }
    o << "</ul>\n";
  }
  if (!d.spares.empty()) {
    o << "<h2>Hot spares</h2><table><thead><tr><th>node</th><th>host</th></tr></thead><tbody>";
    for (const auto& [id, host] : d.spares)
      o << "<tr><td>" << html(id, 256) << "</td><td>" << html(host, 256) << "</td></tr>";
    o << "</tbody></table>\n";
  }
  if (!d.excluded.empty()) {
    o << "<h2>Excluded hosts</h2><table><thead><tr><th>host</th><th>why</th></tr></thead><tbody>";
    for (const auto& [host, why] : d.excluded) {
      o << "<tr><td>" << html(host, 256) << "</td><td>" << html(why) << "</td></tr>";
    }
    o << "</tbody></table>\n";
  }
  if (s.state == store::JobState::kForming || s.state == store::JobState::kRestarting) {
    o << "<h2>Joined the forming round</h2>\n";
    if (d.members.empty()) o << "<p class=\"empty\">No node yet.</p>\n";
    for (const auto& [rank, host] : d.members)
      o << html(host, 256) << " <small>(arrival " << html(rank, 32) << ")</small><br>";
  }
  node_table(o, d, run_id, now);
  o << "</main>\n" << foot(now);
  return o.str();
}

}  // namespace ddp::rendezvousd

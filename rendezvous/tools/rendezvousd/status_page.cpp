// The page's shared parts (escaping, URLs, the frame) and the jobs list.
#include "status_page.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <vector>

#include "ddp/common/printable.hpp"
#include "page_parts.hpp"

namespace ddp::rendezvousd {

std::string html(std::string_view s, std::size_t max, bool keep_newlines) {
  std::string shown = printable(s, keep_newlines ? Newlines::kKeep : Newlines::kEscape);
  if (shown.size() > max) {
    std::size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(shown[cut]) & 0xC0) == 0x80) --cut;
    shown.resize(cut);
    shown += "...";
  }
  std::string out;
  out.reserve(shown.size() + 16);
  for (char c : shown) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string url_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::optional<std::string> url_decode(std::string_view s) {
  std::string out;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (s.size() - i < 3) return std::nullopt;
      const int hi = hex(s[i + 1]);
      const int lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::optional<std::string> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto part = query.substr(0, amp);
    const auto eq = part.find('=');
    if (part.substr(0, eq) == name)
      return url_decode(eq == std::string_view::npos ? "" : part.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

namespace page {

std::string seconds(double s) {
  char buf[32];
  if (s < 0) return "-";
  if (s < 10) {
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  } else if (s < 120) {
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  } else if (s < 7200) {
    std::snprintf(buf, sizeof buf, "%.0f min", s / 60);
  } else if (s < 172800) {
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f d", s / 86400);
  }
  return buf;
}

std::string ago(double then, double now) {
  return then > 0 ? seconds(std::max(0.0, now - then)) + " ago" : "-";
}

std::string clock(double t) {
  if (t <= 0) return "-";
  const auto secs = static_cast<std::time_t>(t);
  std::tm tm{};
  ::localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string state_badge(store::JobState s) {
  const char* name = store::job_state_name(s);
  return std::string("<span class=\"state s-") + name + "\">" + name + "</span>";
}

std::string count(std::int64_t v) { return v < 0 ? "-" : std::to_string(v); }

std::string head(const std::string& title) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta http-equiv=\"refresh\" content=\"" +
         std::to_string(kRefreshSeconds) +
         "\"><meta name=\"viewport\" content=\"width=device-width\">"
         "<title>" +
         title + "</title><style>" + std::string(kStyle) + "</style></head><body>\n";
}

std::string foot(double now) {
  return "<footer>ddp-rendezvousd &middot; read-only &middot; taken " + html(clock(now)) +
         " &middot; reloads every " + std::to_string(kRefreshSeconds) + " s</footer></body></html>\n";
}

std::string pager(std::size_t pages, std::size_t page_no,
                  const std::function<std::string(std::size_t)>& href) {
  if (pages <= 1) return "";
  std::string o = "<p class=\"pager\">page ";
  for (std::size_t p = 0; p < pages; ++p) {
    if (p == page_no) {
      o += "<b>" + std::to_string(p + 1) + "</b>";
    } else if (p < 3 || p + 3 >= pages || (p + 3 > page_no && p < page_no + 3)) {
      o += "<a href=\"" + href(p) + "\">" + std::to_string(p + 1) + "</a>";
    } else if (p == 3 || p + 4 == pages) {
      o += "&hellip; ";
    }
  }
  return o + "</p>\n";
}

}  // namespace page

std::string render_jobs_page(const store::JobsReport& report, const DaemonFacts& daemon, double now,
                             std::size_t page_no, const std::string& state) {
  using namespace page;
  std::ostringstream o;
  o << head("ddp-rendezvousd: jobs");
  const auto stat = [&](const char* name) {
    const auto it = daemon.stats.find(name);
    return it == daemon.stats.end() ? std::string("-") : std::to_string(it->second);
  };
  const bool degraded = stat("degraded") == "1";
  o << "<header><h1>ddp-rendezvousd</h1><p class=\"facts\">store " << html(daemon.listen) << " &middot; "
    << report.jobs.size() << (report.truncated ? "+" : "") << " jobs &middot; " << stat("connections")
    << " connections &middot; " << stat("keys") << " keys &middot; " << stat("leases") << " leases &middot; "
    << (degraded ? "<span class=\"state s-failed\">degraded: the data dir refuses writes</span>"
                 : "<span class=\"state s-running\">ready</span>")
    << "</p></header>\n<main>\n<h2>Jobs</h2>\n";
  // The count of each state, each a link to the jobs in it.
  const auto state_link = [&](const std::string& name, const std::string& href, std::size_t n) {
    if (name == state) {
      o << "<b>" << name << ' ' << n << "</b>";
    } else {
      o << "<a href=\"" << href << "\">" << (name.empty() ? "all" : name) << ' ' << n << "</a>";
    }
  };
  o << "<p class=\"pager\">";
  if (state.empty()) {
    o << "<b>all " << report.jobs.size() << "</b>";
  } else {
    state_link("", "/", report.jobs.size());
  }
  for (const auto st : store::kJobStates) {
    std::size_t n = 0;
    for (const auto& j : report.jobs) n += j.state == st ? 1 : 0;
    const std::string name = store::job_state_name(st);
    state_link(name, "/?state=" + name, n);
  }
  o << "</p>\n";
  std::vector<const store::JobSummary*> shown;
  for (const auto& j : report.jobs) {
    if (state.empty() || state == store::job_state_name(j.state)) shown.push_back(&j);
  }
  const std::size_t pages = std::max<std::size_t>(1, (shown.size() + kJobsPerPage - 1) / kJobsPerPage);
  page_no = std::min(page_no, pages - 1);
  o << pager(pages, page_no, [&](std::size_t p) {
    return "/?page=" + std::to_string(p + 1) + (state.empty() ? "" : "&amp;state=" + state);
  });
  if (shown.empty()) {
    o << "<p class=\"empty\">No ddprun job ";
    if (!state.empty()) o << html(state) << ' ';
    o << "on this daemon.</p>\n";
  } else {
    o << "<table class=\"jobs\"><thead><tr><th>run id</th><th>backend</th><th>state</th><th>nodes</th>"
         "<th>unhealthy</th><th>spares</th><th>excluded</th><th>ranks</th><th>round</th><th>restarts</th>"
         "<th>step</th><th>age</th><th>last failure</th></tr></thead><tbody>\n";
    const auto end = std::min(shown.size(), (page_no + 1) * kJobsPerPage);
    for (auto i = page_no * kJobsPerPage; i < end; ++i) {
      const auto& j = *shown[i];
      o << "<tr class=\"job\"><td class=\"run\"><a href=\"/job?id=" << url_encode(j.run_id) << "\">"
        << html(j.run_id, 256) << "</a></td><td>" << html(j.backend) << "</td><td>" << state_badge(j.state)
        << "</td><td class=\"num\">" << j.nodes
        << (j.nnodes.empty() ? "" : " <small>of " + html(j.nnodes, 64) + "</small>") << "</td><td class=\"num"
        << (j.unhealthy > 0 ? " bad" : "") << "\">" << j.unhealthy << "</td><td class=\"num\">" << j.spares
        << "</td><td class=\"num" << (j.excluded > 0 ? " bad" : "") << "\">" << j.excluded
        << "</td><td class=\"num\">" << j.ranks << "</td><td class=\"num\">" << j.round
        << "</td><td class=\"num\">"
        << (j.restarts < 0 ? std::string("-") : count(j.restarts) + " / " + count(j.max_restarts))
        << "</td><td class=\"num\">" << seconds(j.step_s) << "</td><td>"
        << (j.first_seen > 0 ? seconds(now - j.first_seen) : "-") << "</td><td class=\"failure\">"
        << (j.last_failure.empty()
                ? "-"
                : html(j.last_failure, 200) + " <small>(" + ago(j.last_failure_time, now) + ")</small>")
        << "</td></tr>\n";
    }
    o << "</tbody></table>\n";
  }
  o << "</main>\n" << foot(now);
  return o.str();
}

std::string render_jobs_json(const store::JobsReport& report) {
  std::string out = "[";
  for (const auto& j : report.jobs) {
    if (out.size() > 1) out += ",\n";
    out += store::to_json(j);
  }
  return out + "]\n";
}

}  // namespace ddp::rendezvousd

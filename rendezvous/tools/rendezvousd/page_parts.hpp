// Pieces the status page's two views share: the inline style (the page
// fetches nothing), the frame, and how numbers and times are written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ddp/store/job_report.hpp"

namespace ddp::rendezvousd::page {

inline constexpr std::string_view kStyle = R"css(
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 20px}header h1{font-size:18px;margin:0 0 2px}
header a{color:#9cc3ff}.facts{margin:0;color:#c9cfdb;font-size:13px}
main{padding:12px 20px}h2{font-size:16px;margin:18px 0 8px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002;margin-bottom:8px}
th,td{padding:4px 8px;border-bottom:1px solid #e3e6eb;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600;font-size:12px;text-transform:uppercase;color:#4a5263}
td.num{text-align:right;font-variant-numeric:tabular-nums}td.bad{color:#b3261e;font-weight:600}
.state{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;font-weight:600;color:#fff}
.s-forming{background:#6c757d}.s-running{background:#1e8e3e}.s-restarting{background:#e37400}
.s-succeeded{background:#1a73e8}.s-failed{background:#b3261e}.s-stopped{background:#5f6368}
.failure{color:#b3261e;max-width:40em}small{color:#6b7280}
dl.summary{display:grid;grid-template-columns:max-content auto;gap:2px 14px;background:#fff;padding:10px 14px;
box-shadow:0 1px 2px #0002;margin:0}dl.summary dt{color:#4a5263}dl.summary dd{margin:0}
.report{background:#fff;border-left:4px solid #b3261e;padding:6px 12px;margin:0 0 10px;box-shadow:0 1px 2px #0002}
pre{background:#f1f3f6;padding:6px 8px;overflow-x:auto;margin:4px 0;font-size:12px;white-space:pre-wrap}
.ranks span{display:inline-block;margin:0 6px 2px 0;padding:0 5px;border-radius:4px;background:#eef0f4;
font-size:12px;font-variant-numeric:tabular-nums}.ranks span.slow{background:#fde2b8}.ranks span.dead{background:#f9d0cd}
ul.events{background:#fff;padding:8px 12px 8px 30px;margin:0;box-shadow:0 1px 2px #0002}
.pager a,.pager b{margin-right:8px}footer{color:#6b7280;font-size:12px;padding:10px 20px}.empty{color:#6b7280}
)css";

std::string head(const std::string& title);
std::string foot(double now);
// "0.15 s", "42 s", "5 min", "3.0 h", "2 d"; "-" for a negative value.
std::string seconds(double s);
std::string ago(double then, double now);
// Local time "2026-12-04 21:30:05"; "-" for 0.
std::string clock(double t);
std::string state_badge(store::JobState s);
std::string count(std::int64_t v);
// The page links of a list shown `pages` pages at a time, `page_no` (from 0)
// the current one: the first and last three and three either side of it,
// `href(p)` the already escaped link of page p (from 0); "" for one page.
std::string pager(std::size_t pages, std::size_t page_no,
                  const std::function<std::string(std::size_t)>& href);

}  // namespace ddp::rendezvousd::page

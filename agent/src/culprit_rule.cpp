#include "culprit_rule.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace ddp::agent {

namespace {

using Where = RankActivity::Where;

std::string collective_text(const RankActivity& a) {
  std::string out = a.op.empty() ? "a collective" : a.op;
  if (a.seq > 0) out += " #" + std::to_string(a.seq);
  return out;
}

// "rank 0 waits in all_reduce #6 for rank 1; ranks 2, 3 wait in barrier for
// rank 1": the waiting ranks grouped by what they wait in.
std::string describe_waiting(const std::vector<RankActivity>& ranks, const std::string& whom) {
  std::map<std::pair<std::uint64_t, std::string>, std::vector<int>> groups;
  for (const auto& r : ranks) {
    if (r.where == Where::kWaiting) groups[{r.seq, collective_text(r)}].push_back(r.rank);
  }
  std::string out;
  for (const auto& [key, members] : groups) {
    if (!out.empty()) out += "; ";
    out += (members.size() == 1 ? "rank " : "ranks ") + rank_ranges(members) +
           (members.size() == 1 ? " waits in " : " wait in ") + key.second + " for " + whom;
  }
  return out;
}

std::string state_text(const RankActivity& a) {
  std::string out;
  std::string evidence = a.evidence;
  if (a.where == Where::kOutside) {
    out = "is in no collective";
    if (a.issued > 0)
      evidence += (evidence.empty() ? "" : ": ") + std::to_string(a.issued) + " issued, all done";
  } else if (a.where == Where::kWaiting) {
    out = "waits in " + collective_text(a);
  } else {
    out = "shows nothing of its collectives";
  }
  if (!evidence.empty()) out += " (" + evidence + ")";
  return out;
}

}  // namespace

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    const auto add = [&out](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
    if (j - i >= 2) {
      add(std::to_string(ranks[i]) + "\u2013" + std::to_string(ranks[j]));
    } else {
      for (std::size_t k = i; k <= j; ++k) add(std::to_string(ranks[k]));
    }
    i = j + 1;
  }
  return out;
}

CulpritVerdict decide_culprit(int missed, const std::vector<RankActivity>& ranks, OtherNodes other_nodes) {
  CulpritVerdict v;
  const auto x =
      std::find_if(ranks.begin(), ranks.end(), [&](const auto& r) { return r.local_rank == missed; });
  if (x == ranks.end()) {
    v.culprit_local_rank = missed;
    return v;
  }
  const auto now = std::chrono::steady_clock::now();
  if (x->where != Where::kWaiting) {
    // Not waiting on anybody: its own deadline names it (and whoever waits
    // in a collective waits for it, or for a rank on another node).
    v.culprit_local_rank = missed;
    v.waiting = describe_waiting(ranks, "rank " + std::to_string(x->rank));
    return v;
  }
  // It waits for a peer. A local rank outside every collective is the one it
  // waits for, unless that rank already issued the collective waited in (a
  // rank of another group); of several, the one furthest behind, then the
  // one whose own deadline comes first. A rank nothing is known of counts
  // only once its own deadline has passed too.
  std::vector<const RankActivity*> candidates;
  for (const auto& r : ranks) {
    if (r.local_rank == missed) continue;
    const bool passed_issue = r.issued > 0 && x->seq > 0 && r.issued >= x->seq;
    if ((r.where == Where::kOutside && !passed_issue) || (r.where == Where::kUnknown && r.deadline <= now)) {
      candidates.push_back(&r);
    }
  }
  if (!candidates.empty()) {
    const auto order = [](const RankActivity* r) {
      return std::make_tuple(r->where == Where::kOutside ? 0 : 1, r->issued == 0 ? UINT64_MAX : r->issued,
                             r->deadline, r->rank);
    };
    const auto* c = *std::min_element(candidates.begin(), candidates.end(),
                                      [&](const auto* a, const auto* b) { return order(a) < order(b); });
    v.culprit_local_rank = c->local_rank;
    v.waiting = describe_waiting(ranks, "rank " + std::to_string(c->rank));
    v.why = "rank " + std::to_string(x->rank) + " missed its deadline but " + state_text(*x) + "; rank " +
            std::to_string(c->rank) + " " + state_text(*c);
    return v;
  }
  v.culprit_local_rank = missed;
  if (other_nodes == OtherNodes::kYes) {
    // Every local rank that shows anything waits: for a rank of another node,
    // whose own node names and kills it.
    v.culprit_local_rank = -1;
    v.remote = true;
    v.waiting = describe_waiting(ranks, "a rank on another node");
  } else if (other_nodes == OtherNodes::kSilent) {
    v.waiting = describe_waiting(ranks, "a rank on another node");
    v.why = "no local rank is outside " + collective_text(*x) +
            ", and no other node named the rank they wait for in time: the first to miss its deadline is "
            "named";
  } else if (std::all_of(ranks.begin(), ranks.end(),
                         [](const auto& r) { return r.where == Where::kWaiting; })) {
    // One node, every rank in the collective: the collective itself does not
    // complete (a transport or library hang). The first to miss is named.
    v.waiting = describe_waiting(ranks, "each other");
    v.why = "every rank waits in " + collective_text(*x) + ": the collective itself does not complete";
  } else {
    v.waiting = describe_waiting(ranks, "a rank that shows nothing of its collectives");
    v.why = "no other rank is known to be outside " + collective_text(*x) +
            ": the first to miss its deadline is named";
  }
  return v;
}

}  // namespace ddp::agent

// Dispatcher: watches. A watch from a past revision replays the retained
// history in chunks, paced by the client reading them, then goes live; its live
// events wait in the history meanwhile, so the order stays the revision order.
#include <boost/asio/post.hpp>

#include "ddp/common/logging.hpp"
#include "dispatcher.hpp"

namespace ddp::store::server {
namespace {

// Why 1 MiB: big enough that a replay costs few loop turns, small enough that
// a thousand watches catching up at once stay well under the memory bound.
constexpr std::size_t kReplayChunkBytes = 1u << 20;

std::string compacted_message(Revision from, Revision compacted) {
  return "revision " + std::to_string(from) + " is compacted; the oldest available is " +
         std::to_string(compacted + 1) + "; list again and watch from its revision + 1";
}

}  // namespace

void Dispatcher::handle_watch(const std::shared_ptr<Session>& s, const Request& req) {
  if (req.keys.size() != 1)
    return s->send(reply(req.id, Status::kBadRequest, "watch takes one key: the prefix"));
  if (req.b < 0) return s->send(reply(req.id, Status::kBadRequest, "watch from a negative revision"));
  if (refuse_pending(s, req)) return;
  drain();  // nothing committed may be both replayed and routed
  if (const auto compacted = core_.history().compacted_for(req.keys[0]); req.b > 0 && req.b <= compacted) {
    auto r = reply(req.id, Status::kCompacted, compacted_message(req.b, compacted));
    r.revision = core_.revision();
    return s->send(r);
  }
  const WatchId id = next_handle_++;
  hub_.add(id, req.keys[0]);
  // Other bits of `a` are ignored, as servers before kWatchDeleteRuns ignored all of it.
  watch_info_[id] = {s, req.id, req.keys[0], req.b, (req.a & kWatchDeleteRuns) != 0};
  s->pending()[req.id] = {Pending::Kind::kWatch, id};
  if ((req.a & kWatchQuiet) == 0) {
    auto ack = reply(req.id, Status::kOk);
    ack.revision = core_.revision();
    s->send(ack);
  }
  if (req.b > 0) pump_replay(id);
}

void Dispatcher::pump_replay(WatchId id) {
  auto it = watch_info_.find(id);
  if (it == watch_info_.end() || it->second.replay_from == 0) return;
  const auto session = it->second.session;  // a send can close it, which erases `it`
  const auto request_id = it->second.request_id;
  const bool delete_runs = it->second.delete_runs;
  bool paused = false;
  auto next = core_.history().visit(
      it->second.prefix, it->second.replay_from, [&](Revision, const std::vector<const WatchEvent*>& evs) {
        for (auto& frame : event_frames(evs, delete_runs)) {
          frame.id = request_id;
          session->send(frame);
        }
        // While all clients' unread replies take half the budget, a replay
        // sends one revision at a time, each once the last is read: a
        // thousand replays cost a revision each, not a chunk each.
        paused = session->closed() || session->queued_bytes() >= kReplayChunkBytes ||
                 (reply_budget_.pressed() && session->queued_bytes() > 0);
        return !paused;
      });
  if (session->closed()) return;
  it = watch_info_.find(id);
  if (it == watch_info_.end()) return;
  if (!next) {
    // The history moved past the replay while the client was reading slowly.
    const auto from = it->second.replay_from;
    const auto compacted = core_.history().compacted_for(it->second.prefix);
    hub_.remove(id);
    watch_info_.erase(it);
    session->pending().erase(request_id);
    auto r = reply(request_id, Status::kCompacted, compacted_message(from, compacted));
    r.revision = core_.revision();
    session->send(r);
    return;
  }
  if (!paused) {
    it->second.replay_from = 0;  // caught up: live from here
    return;
  }
  it->second.replay_from = *next;
  session->notify_when_drained();
}

void Dispatcher::on_drained(const std::shared_ptr<Session>& s) {
  if (stopping_ || s->closed()) return;
  try {
    drain();  // what is committed is in the history: route it before replaying
    std::vector<WatchId> replaying;
    for (const auto& [request_id, p] : s->pending()) {
      if (p.kind != Pending::Kind::kWatch) continue;
      auto it = watch_info_.find(p.handle);
      if (it != watch_info_.end() && it->second.replay_from != 0) replaying.push_back(p.handle);
    }
    for (auto id : replaying) pump_replay(id);
    after_work();
  } catch (const std::exception& e) {
    ddp::log::get("store.server")->error("watch replay failed peer={} error=\"{}\"", s->peer(), e.what());
  }
}

std::vector<Response> Dispatcher::event_frames(const std::vector<const WatchEvent*>& events,
                                               bool delete_runs) {
  std::vector<Response> frames;
  std::size_t i = 0;
  while (i < events.size()) {
    auto frame = reply(0, Status::kEvent);
    frame.revision = events[i]->revision;
    for (; i < events.size() && events[i]->revision == frame.revision; ++i) {
      const auto& e = *events[i];
      frame.items.push_back(
          {e.type == EventType::kPut ? ItemKind::kPut : ItemKind::kDelete, e.key, e.value, e.revision});
    }
    if (delete_runs) frame.items = compact_deletions(std::move(frame.items));
    frames.push_back(std::move(frame));
  }
  return frames;
}

void Dispatcher::send_frames(Session& s, std::uint32_t id, std::vector<Response>& frames) {
  for (auto& frame : frames) {
    frame.id = id;
    s.send(frame);
    ++event_frames_;
    if (s.closed()) return;
  }
}

}  // namespace ddp::store::server

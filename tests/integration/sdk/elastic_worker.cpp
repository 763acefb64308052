// A rank for elastic_test.cpp: trains against an ElasticGroup and prints what
// happens, one line per event, so the test (playing the agent) can follow it.
//   ddp_sdk_elastic_worker train   steps with a Reducer until rank 0 reads the
//                                  store key "<prefix>test/stop"; survives lost ranks
//   ddp_sdk_elastic_worker check   forms, then polls check() until it throws
//   ddp_sdk_elastic_worker check_quiet  the same, after 500 check()s once "<prefix>test/go" is set
//   ddp_sdk_elastic_worker plain   the group without DDP_REFORM=1
//   ddp_sdk_elastic_worker fds     20 re-forms driven by rank 0; prints fd counts
//   ddp_sdk_elastic_worker bcast   rank 0 broadcasts (blocking) until MembershipChanged,
//                                  then re-forms; the others only form and wait to be killed
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ddp/sdk.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/store.hpp"

namespace {

using Clock = std::chrono::steady_clock;

void say(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vprintf(fmt, args);
  va_end(args);
  std::printf("\n");
  std::fflush(stdout);
}

ddp::ProcessGroupOptions gloo_options() {
  ddp::ProcessGroupOptions o;
  o.backend = "gloo";
  o.interface = std::string("lo");
  o.timeout = std::chrono::seconds(60);
  // A test that makes a peer die while the group connects shortens Gloo's wait for it.
  if (const char* t = std::getenv("ELASTIC_TEST_GLOO_TIMEOUT_S"))
    o.timeout = std::chrono::seconds(std::atoi(t));
  return o;
}

std::string slots_text(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

void print_info(const char* what, const ddp::ElasticGroup& eg) {
  const auto& i = eg.info();
  say("%s slot=%d gen=%lld rank=%d size=%d had_state=%d state_root=%d lost=[%s] new=[%s] took_us=%lld", what,
      eg.slot(), static_cast<long long>(i.generation), i.rank, i.world_size, i.had_state ? 1 : 0,
      i.state_root, slots_text(i.lost_slots).c_str(), slots_text(i.new_slots).c_str(),
      static_cast<long long>(i.took.count()));
}

long count_fds() {
  long n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

int train(const ddp::Context& ctx) {
  ddp::ElasticGroup eg(ctx, gloo_options());
  print_info("formed", eg);
  // The state: a step counter (and one more buffer). A newcomer starts without it.
  std::vector<float> counter{eg.info().had_state ? 0.0f : -1000.0f};
  std::vector<float> weights(64, eg.info().had_state ? 1.5f : 0.0f);
  const std::vector<std::span<float>> state{counter, weights};
  if (!eg.info().new_slots.empty()) ddp::broadcast_state(eg.group(), eg.info().state_root, state);
  say("state counter=%d weight=%g", static_cast<int>(counter[0]), static_cast<double>(weights[0]));

  std::vector<float> g0(50000), g1(300), g2(7);
  ddp::Reducer reducer(eg.group(), {g0, g1, g2},
                       {.bucket_cap_bytes = 16 << 10, .first_bucket_cap_bytes = 64});
  const std::string stop_key = ctx.store_prefix + "test/stop";
  for (;;) {
    const auto started = Clock::now();
    try {
      eg.check();
      const float mine = static_cast<float>(eg.rank() + 1);
      std::fill(g0.begin(), g0.end(), mine);
      std::fill(g1.begin(), g1.end(), mine);
      std::fill(g2.begin(), g2.end(), 0.0f);
      if (eg.rank() == 0 && ctx.store->check({stop_key})) g2[0] = 1.0f;
      reducer.mark_ready(2);
      reducer.mark_ready(1);
      reducer.mark_ready(0);
      reducer.finalize();
      const float want = static_cast<float>(eg.size() + 1) / 2.0f;
      if (g0[0] != want || g0[49999] != want || g1[0] != want) {
        say("WRONG average gen=%lld size=%d got=%g want=%g", static_cast<long long>(eg.generation()),
            eg.size(), static_cast<double>(g0[0]), static_cast<double>(want));
        return 1;
      }
      counter[0] += 1.0f;
      say("step %d ok gen=%lld", static_cast<int>(counter[0]), static_cast<long long>(eg.generation()));
      if (g2[0] > 0.0f) break;
    } catch (const ddp::MembershipChanged& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
      say("membership changed left=%lld after_ms=%lld: %s", static_cast<long long>(e.generation()),
          static_cast<long long>(ms), e.what());
      reducer.discard_step();
      eg.reform();
      print_info("reformed", eg);
      if (!eg.info().new_slots.empty()) ddp::broadcast_state(eg.group(), eg.info().state_root, state);
      say("state counter=%d weight=%g", static_cast<int>(counter[0]), static_cast<double>(weights[0]));
    }
  }
  say("final slot=%d gen=%lld rank=%d size=%d counter=%d weight=%g", eg.slot(),
      static_cast<long long>(eg.generation()), eg.rank(), eg.size(), static_cast<int>(counter[0]),
      static_cast<double>(weights[0]));
  return 0;
}

// `quiet`: after forming, waits for the key "<prefix>test/go", calls check()
// 500 times in a row and says so, before polling as without it.
int check_mode(const ddp::Context& ctx, bool quiet) {
  ddp::ElasticGroup eg(ctx, gloo_options());
  eg.group().barrier();
  print_info("formed", eg);
  if (quiet) {
    ctx.store->get(ctx.store_prefix + "test/go", std::chrono::seconds(30));
    for (int i = 0; i < 500; ++i) eg.check();
    say("checked 500");
  }
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < until) {
    try {
      eg.check();
    } catch (const ddp::MembershipChanged& e) {
      say("check threw left=%lld: %s", static_cast<long long>(e.generation()), e.what());
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  say("check never threw");
  return 1;
}

int bcast(const ddp::Context& ctx) {
  ddp::ElasticGroup eg(ctx, gloo_options());
  print_info("formed", eg);
  if (eg.rank() != 0) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::vector<float> data(1 << 16, 1.0f);
  const auto started = Clock::now();
  try {
    for (;;) eg.group().broadcast(data, 0);
  } catch (const ddp::MembershipChanged& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
    say("membership changed after_ms=%lld: %s", static_cast<long long>(ms), e.what());
  }
  eg.reform();
  print_info("reformed", eg);
  return 0;
}

int plain(const ddp::Context& ctx) {
  ddp::ElasticGroup eg(ctx, gloo_options());
  std::vector<float> v{static_cast<float>(eg.rank() + 1)};
  eg.group().all_reduce(v);
  eg.check();
  say("plain enabled=%d rank=%d size=%d sum=%g", eg.enabled() ? 1 : 0, eg.rank(), eg.size(),
      static_cast<double>(v[0]));
  try {
    eg.reform();
    say("reform did not throw");
  } catch (const ddp::ConfigError& e) {
    say("reform: ConfigError: %s", e.what());
  }
  return 0;
}

// Rank 0 moves the generation on; everyone sees it at check(), re-forms, and
// reduces once through a Reducer built on the first group.
int fds(const ddp::Context& ctx) {
  ddp::ElasticGroup eg(ctx, gloo_options());
  std::vector<float> g(1000);
  ddp::Reducer reducer(eg.group(), {g});
  reducer.finalize();
  const long before = count_fds();
  std::vector<long long> took;  // microseconds per reform()
  const std::string generation_key =
      ddp::store::keys::reform_generation_key(ddp::store::keys::reform_prefix(ctx.store_prefix));
  for (int round = 0; round < 20; ++round) {
    eg.group().barrier();
    if (eg.rank() == 0) ctx.store->add(generation_key, 1);
    for (;;) {
      try {
        eg.check();
      } catch (const ddp::MembershipChanged&) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    eg.reform();
    took.push_back(eg.info().took.count());
    std::fill(g.begin(), g.end(), static_cast<float>(eg.rank()));
    reducer.finalize();
    const float want = static_cast<float>(eg.size() - 1) / 2.0f;
    if (g[0] != want) {
      say("WRONG round=%d got=%g want=%g", round, static_cast<double>(g[0]), static_cast<double>(want));
      return 1;
    }
  }
  std::sort(took.begin(), took.end());
  // The last generation's connections close on a background thread.
  for (int i = 0; i < 200 && count_fds() > before; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  say("fds before=%ld after=%ld gen=%lld reform_median_us=%lld reform_max_us=%lld", before, count_fds(),
      static_cast<long long>(eg.generation()), took[took.size() / 2], took.back());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    const ddp::Context ctx = ddp::init();
    if (mode == "train") return train(ctx);
    if (mode == "check") return check_mode(ctx, false);
    if (mode == "check_quiet") return check_mode(ctx, true);
    if (mode == "plain") return plain(ctx);
    if (mode == "fds") return fds(ctx);
    if (mode == "bcast") return bcast(ctx);
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

// The remote terminal's stream taken apart again: stdout text, tagged stderr
// lines and the failure cause, however the bytes are cut into reads.
#include "remote_streams.hpp"

#include <catch2/catch.hpp>
#include <utility>
#include <vector>

using namespace ddp::launcher;
using Lines = std::vector<std::pair<std::string, std::string>>;

namespace {

// Feeds `stream` in pieces of `step` bytes (0: all at once).
Lines split(const std::string& stream, std::size_t step = 0) {
  Lines out;
  ChannelSplitter splitter([&](std::string_view channel, const std::string& line) {
    out.emplace_back(std::string(channel), line);
  });
  if (step == 0) step = stream.size() + 1;
  for (std::size_t i = 0; i < stream.size(); i += step)
    splitter.feed(std::string_view(stream).substr(i, step));
  splitter.finish();
  return out;
}

}  // namespace

TEST_CASE("tagged lines go to their channel and the rest is stdout, at any read size") {
  // What a pseudo-terminal delivers: "\r\n" line ends.
  const std::string stream = "[rank 0]:step 1\r\n" + channel_line(kStderrChannel, "[agent] started") +
                             "[rank 0]:step 2\r\n" + channel_line(kCauseChannel, "rank 3 on h2: exit code 3");
  const Lines expected = {{"", "[rank 0]:step 1"},
                          {"stderr", "[agent] started"},
                          {"", "[rank 0]:step 2"},
                          {"cause", "rank 3 on h2: exit code 3"}};
  for (std::size_t step : {0, 1, 2, 3, 7}) {
    INFO("step " << step);
    CHECK(split(stream, step) == expected);
  }
}

TEST_CASE("a stderr line written in the middle of a stdout line leaves that line whole") {
  const std::string stream = "[rank 0]:progr" + channel_line(kStderrChannel, "log line") + "ess 50%\n";
  CHECK(split(stream, 1) == Lines{{"stderr", "log line"}, {"", "[rank 0]:progress 50%"}});
}

TEST_CASE("text that only looks like a tag stays stdout") {
  CHECK(split("a\036ddpr b\n") == Lines{{"", "a\036ddpr b"}});
  // A stray separator before a real tag: the tag still counts, the separator is text.
  CHECK(split("\036\036ddprun:stderr\037x\n", 1) == Lines{{"stderr", "x"}, {"", "\036"}});
  CHECK(split("\036ddprun:no end of channel\n") == Lines{{"", "\036ddprun:no end of channel"}});
  CHECK(split("unfinished") == Lines{{"", "unfinished"}});
}

TEST_CASE("a tagged line keeps its payload on one line") {
  CHECK(channel_line(kCauseChannel, "two\nlines") == "\036ddprun:cause\037two lines\n");
}

// DropLog: a flood of dropped messages is a handful of log lines with counts.
#include "tunehost/host/drop_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace tunehost::host {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class DropLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    previous_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("drops", sink));
    spdlog::set_pattern("%v");
  }
  void TearDown() override { spdlog::set_default_logger(previous_); }

  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
  DropLog::Clock::time_point t0_ = DropLog::Clock::time_point{} + std::chrono::hours(1);
};

TEST_F(DropLogTest, TheFirstDropIsShownAtOnceAndAFloodIsSummedPerPeer) {
  DropLog log("results socket", seconds(10));
  for (int i = 0; i < 12345; ++i) log.Drop("10.0.0.7", "bad_frame: garbage", t0_ + std::chrono::microseconds(i));
  log.Drop("10.0.0.8", "unknown_type: XX", t0_ + seconds(2));
  ASSERT_EQ(Lines().size(), 1u);
  EXPECT_EQ(Lines()[0], "results socket: dropped a message from 10.0.0.7: bad_frame: garbage");
  log.Flush(t0_ + seconds(9));
  EXPECT_EQ(Lines().size(), 1u) << "nothing until the window ends";
  log.Flush(t0_ + seconds(10));
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "results socket: dropped 12344 more message(s) from 10.0.0.7 in the last "
                      "10 s (last: bad_frame: garbage)");
  EXPECT_EQ(lines[2], "results socket: dropped 1 more message(s) from 10.0.0.8 in the last 10 s "
                      "(last: unknown_type: XX)");
  EXPECT_EQ(log.total(), 12346u);
}

TEST_F(DropLogTest, AQuietWindowClosesAndTheNextDropIsShownAtOnce) {
  DropLog log("control socket", seconds(10));
  log.Drop("", "bad_frame", t0_);
  log.Flush(t0_ + seconds(11));
  EXPECT_EQ(Lines().size(), 1u) << "no summary of nothing";
  log.Drop("", "bad_frame again", t0_ + seconds(30));
  ASSERT_EQ(Lines().size(), 2u);
  EXPECT_EQ(Lines()[1], "control socket: dropped a message from an unknown peer: bad_frame again");
}

TEST_F(DropLogTest, ManyPeersShareOneLineBeyondTheLimit) {
  DropLog log("results socket", seconds(10));
  log.Drop("first", "x", t0_);
  for (size_t i = 0; i < 10 * DropLog::kMaxPeers; ++i) {
    log.Drop("peer" + std::to_string(i), "x", t0_ + milliseconds(1));
  }
  log.Flush(t0_ + seconds(10));
  // One line shown at once, then at most kMaxPeers peer lines plus one for the rest.
  EXPECT_EQ(Lines().size(), 1 + DropLog::kMaxPeers + 1);
  EXPECT_NE(out_.str().find("from other peers"), std::string::npos);
}

}  // namespace
}  // namespace tunehost::host

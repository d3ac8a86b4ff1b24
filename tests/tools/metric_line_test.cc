#include "metric_line.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace tunehost::worker {
namespace {

using protocol::MetricType;

TEST(ParseMetricLine, NumberDefaultsToPeriodical) {
  MetricLine m;
  ASSERT_OK(ParseMetricLine(R"({"value": 0.42})", &m));
  EXPECT_EQ(m.type, MetricType::kPeriodical);
  EXPECT_DOUBLE_EQ(m.value.scalar, 0.42);
}

TEST(ParseMetricLine, FinalMapUsesDefault) {
  MetricLine m;
  ASSERT_OK(ParseMetricLine(R"({"type": "FINAL", "value": {"default": 0.9, "loss": 0.1}})", &m));
  EXPECT_EQ(m.type, MetricType::kFinal);
  EXPECT_DOUBLE_EQ(m.value.scalar, 0.9);
  EXPECT_FALSE(m.value.raw.empty());
}

TEST(ParseMetricLine, RejectsBadLines) {
  MetricLine m;
  for (const char* line : {"not json", "[1, 2]", "{}", R"({"value": "x"})", R"({"value": true})",
                           R"({"value": {"loss": 1}})", R"({"value": {"default": "a"}})",
                           R"({"type": "SOMETIMES", "value": 1})", R"({"type": 3, "value": 1})"}) {
    EXPECT_FALSE(ParseMetricLine(line, &m).ok()) << line;
  }
}

TEST(LineSplitter, SplitsAcrossChunksAndSkipsBlankLines) {
  LineSplitter splitter;
  std::vector<std::string> lines;
  size_t overlong = 0;
  splitter.Feed("{\"value\"", &lines, &overlong);
  EXPECT_TRUE(lines.empty());
  splitter.Feed(": 1}\r\n\n  \n{\"value\": 2}\n{\"va", &lines, &overlong);
  splitter.Finish(&lines, &overlong);
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"value\": 1}", "{\"value\": 2}", "{\"va"}));
  EXPECT_EQ(overlong, 0u);
}

TEST(LineSplitter, DropsOverlongLinesAndKeepsGoing) {
  LineSplitter splitter(8);
  std::vector<std::string> lines;
  size_t overlong = 0;
  splitter.Feed("12345", &lines, &overlong);
  splitter.Feed("67890abc", &lines, &overlong);
  splitter.Feed("def\nok\n123456789\n", &lines, &overlong);
  EXPECT_EQ(lines, (std::vector<std::string>{"ok"}));
  EXPECT_EQ(overlong, 2u);
}

}  // namespace
}  // namespace tunehost::worker

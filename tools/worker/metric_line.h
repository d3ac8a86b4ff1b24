// The trial side of the metric channel: a byte stream of JSON lines, one
// metric per line (format in tools/worker/README.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::worker {

inline constexpr size_t kMaxMetricLineBytes = size_t{1} << 20;

struct MetricLine {
  protocol::MetricType type = protocol::MetricType::kPeriodical;
  protocol::Metric value;
};

// Parses one line: {"type": "PERIODICAL"|"FINAL", "value": <number or map
// with numeric "default">}; "type" defaults to PERIODICAL.
Status ParseMetricLine(std::string_view line, MetricLine* out);

// Splits the pipe's byte stream into lines. A line longer than `max_bytes` is
// dropped whole (counted in `overlong`) without being buffered, so a runaway
// trial cannot grow the worker's memory.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_bytes = kMaxMetricLineBytes) : max_bytes_(max_bytes) {}

  void Feed(std::string_view data, std::vector<std::string>* lines, size_t* overlong);
  // At end of stream: the unterminated last line, if any, counts as a line.
  void Finish(std::vector<std::string>* lines, size_t* overlong);

 private:
  size_t max_bytes_;
  std::string buffer_;
  bool discarding_ = false;
};

}  // namespace tunehost::worker

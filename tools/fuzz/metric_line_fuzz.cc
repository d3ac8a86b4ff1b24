// Fuzz harness: the worker's metric channel (tools/worker/metric_line.cc).
// The splitter, fed the bytes in uneven chunks, must find the same lines as
// when fed at once and never hold a line over its limit; every line either
// parses to a metric whose scalar matches its value, or is refused.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "metric_line.h"
#include "tunehost/protocol/codec.h"

namespace w = tunehost::worker;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  constexpr size_t kLimit = 256;
  std::vector<std::string> whole, chunked;
  size_t overlong_whole = 0, overlong_chunked = 0;
  w::LineSplitter a(kLimit), b(kLimit);
  a.Feed(bytes, &whole, &overlong_whole);
  a.Finish(&whole, &overlong_whole);
  for (size_t i = 0, step = 1; i < size; i += step, step = step % 7 + 1) {
    b.Feed(bytes.substr(i, step), &chunked, &overlong_chunked);
  }
  b.Finish(&chunked, &overlong_chunked);
  if (whole != chunked || overlong_whole != overlong_chunked) std::abort();
  for (const std::string& line : whole) {
    if (line.size() > kLimit) std::abort();
    w::MetricLine m;
    if (!w::ParseMetricLine(line, &m).ok()) continue;
    tunehost::protocol::Metric again;
    if (!tunehost::protocol::ParseMetric(m.value.raw, &again).ok()) std::abort();
    if (!(again.scalar == m.value.scalar || (again.scalar != again.scalar &&
                                             m.value.scalar != m.value.scalar))) {
      std::abort();
    }
  }
  return 0;
}

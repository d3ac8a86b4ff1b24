// Values the engine tests build again and again.
#pragma once

#include <string>

#include "test_util.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host::engine_testing {

// Parameters {"x": x}.
inline protocol::Packed Params(int x) {
  protocol::Packed out;
  EXPECT_OK(protocol::JsonToPacked("{\"x\": " + std::to_string(x) + "}", &out));
  return out;
}

// A plain-number metric.
inline protocol::Metric MetricOf(double v) {
  protocol::Metric m;
  m.raw = protocol::PackDouble(v);
  m.scalar = v;
  return m;
}

}  // namespace tunehost::host::engine_testing

// Fuzz harness: the experiment file reader (host/src/experiment_config.cc, yaml_values.cc).
// Any text must be read or refused with a message naming where; never a
// crash, a hang or an exception out of the reader. A file that reads has a
// search space that is one MessagePack map and sane limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <msgpack.hpp>

#include "tunehost/host/experiment_config.h"
#include "tunehost/protocol/limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  tunehost::host::ExperimentConfig config;
  tunehost::Status st;
  try {
    st = tunehost::host::ParseExperimentConfig(yaml, "/fuzz/experiment.yaml", &config);
  } catch (...) {
    std::abort();  // the reader turns every problem into a Status
  }
  if (!st.ok()) {
    if (st.message().empty()) std::abort();
    return 0;
  }
  const auto& space = config.search_space;
  size_t offset = 0;
  msgpack::object_handle h = msgpack::unpack(space.data(), space.size(), offset);
  if (offset != space.size() || h.get().type != msgpack::type::MAP) std::abort();
  if (config.spec.concurrency < 1 || !(config.spec.max_duration_s >= 0)) std::abort();
  return 0;
}

// Fuzz harness: the SDK's search-space parser
// (sdk/include/tunehost/sdk/cpp/search_space.h) on any MessagePack value.
// Parse may refuse with sdk::Error (naming the key); anything else thrown is
// a bug. A space that parses is sampled and, when finite, enumerated a
// little, and every configuration must pack to a map that reads back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/search_space.h"

namespace sdk = tunehost::sdk;

namespace {

void CheckRoundTrip(const sdk::SearchSpace& space, const sdk::Assignment& a) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  space.Pack(a, pk);
  msgpack::object_handle h = msgpack::unpack(b.data(), b.size());
  if (h.get().type != msgpack::type::MAP) std::abort();
  (void)space.FromParameters(h.get());  // what a trial got always reads back
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  msgpack::object_handle h;
  try {
    // The host's decoder bounds: nesting and container sizes.
    msgpack::unpack_limit limit(size, size, size, size, size, 32);
    size_t offset = 0;
    h = msgpack::unpack(reinterpret_cast<const char*>(data), size, offset, nullptr, nullptr,
                        limit);
  } catch (...) {
    return 0;  // not MessagePack: the decoder's business, not the parser's
  }
  sdk::SearchSpace space;
  try {
    space = sdk::SearchSpace::Parse(h.get());
  } catch (const sdk::Error&) {
    return 0;
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 4; ++i) CheckRoundTrip(space, space.Sample(rng));
  if (std::optional<uint64_t> n = space.CountConfigurations(); n && *n > 0) {
    for (uint64_t i = 0; i < 4 && i < *n; ++i) CheckRoundTrip(space, space.ConfigurationAt(i));
    CheckRoundTrip(space, space.ConfigurationAt(*n - 1));
  }
  return 0;
}

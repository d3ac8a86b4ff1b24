// Fuzz harness: the protocol decoder (protocol/src/codec.cc, codec_decode.cc,
// codec_metric.cc), wire-format.md §3.1. Decode must never crash, hang or
// throw on any bytes; the fast path for results and the general decoder
// must agree on every input; a message that decodes must re-encode
// canonically and decode again to the same bytes; a smaller size limit must
// refuse exactly the messages over it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "codec_internal.h"
#include "tunehost/protocol/codec.h"

namespace p = tunehost::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  p::Message m;
  const tunehost::Status st = p::Decode(bytes, &m);
  // The fast path for results must agree with the general decoder.
  p::Message slow;
  const tunehost::Status slow_st = p::codec_detail::DecodeGeneral(bytes, &slow, {});
  if (slow_st.ok() != st.ok() || slow_st.message() != st.message()) std::abort();
  if (st.ok() && (p::Encode(slow) != p::Encode(m) || slow.id != m.id || slow.type != m.type)) {
    std::abort();
  }
  if (!st.ok()) {
    if (st.message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  const std::string once = p::Encode(m);
  p::Message again;
  if (!p::Decode(once, &again).ok()) std::abort();  // the canonical form decodes
  if (p::Encode(again) != once) std::abort();       // and is stable
  if (again.id != m.id || again.type != m.type) std::abort();
  p::DecodeOptions small;
  small.max_message_bytes = size / 2;
  p::Message limited;
  const tunehost::Status too_large = p::Decode(bytes, &limited, small);
  if (size > small.max_message_bytes && too_large.code() != tunehost::Status::Code::kTooLarge) {
    std::abort();
  }
  return 0;
}

// MessagePack codec for protocol v1. Decode never throws and never crashes on
// any input: bad input is a Status naming the problem (wire-format.md §3.1).
#pragma once

#include <string>
#include <string_view>

#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::protocol {

struct DecodeOptions {
  size_t max_message_bytes = kDefaultMaxMessageBytes;
};

// Decodes one envelope. On failure `out` is unspecified, except that out->id
// holds the envelope id when it could be read (so a reply can echo it).
Status Decode(std::string_view bytes, Message* out, const DecodeOptions& options = {});

// Encodes canonically (keys in wire-format.md order). Encode(Decode(x)) == x
// for every canonical x, e.g. the vectors in protocol/vectors/.
std::string Encode(const Message& message);
void EncodeTo(const Message& message, std::string* out);

// Convenience: encode a body with a fresh envelope.
inline std::string Encode(uint64_t id, Body body) {
  Message m;
  m.id = id;
  m.body = std::move(body);
  return Encode(m);
}

// Validates a metric value (number, or map with numeric "default") and
// extracts its scalar.
Status ParseMetric(std::string_view packed, Metric* out);

// Helpers for Packed values.
Packed EmptyMap();                        // "\x80"
Packed PackDouble(double v);
// Renders a Packed value as compact JSON for logs, files and people
// (non-finite floats as NaN/Infinity, bin as base64-less "<bin N>").
std::string PackedToJson(std::string_view packed);
// Parses JSON text into a Packed value (used for trial outputs and YAML/JSON
// configs). Integers stay integers.
Status JsonToPacked(std::string_view json, Packed* out);

}  // namespace tunehost::protocol

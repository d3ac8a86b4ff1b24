// MessagePack codec for protocol v1 (protocol/docs/wire-format.md): the
// public API. Each message's fields are described in codec_messages.h; the
// encoder (codec_encode.cc) and the decoder (codec_decode.cc) follow those
// descriptions. Nothing here throws past Decode.
#include "tunehost/protocol/codec.h"

#include <string>

#include <msgpack.hpp>

#include "codec_internal.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::protocol {

using namespace codec_detail;

std::string_view ToString(MetricType t) { return EnumName(t, kMetricTypes); }
std::string_view ToString(TrialStatus s) { return EnumName(s, kTrialStatuses); }
std::string_view ToString(ParameterSource s) { return EnumName(s, kSources); }
std::string_view ToString(PluginIsolation i) { return EnumName(i, kIsolations); }
bool ParsePluginIsolation(std::string_view s, PluginIsolation* out) {
  return ParseEnum(s, kIsolations, out);
}
bool ParseMetricType(std::string_view s, MetricType* out) { return ParseEnum(s, kMetricTypes, out); }
bool ParseTrialStatus(std::string_view s, TrialStatus* out) {
  return ParseEnum(s, kTrialStatuses, out);
}
bool ParseParameterSource(std::string_view s, ParameterSource* out) {
  return ParseEnum(s, kSources, out);
}

std::string_view TypeCode(const Body& body) { return kTypeCodes[body.index()]; }

bool IsControlTrialStatus(std::string_view s) {
  for (const char* name : kControlTrialStatuses) {
    if (s == name) return true;
  }
  return false;
}

// A plain result (the most frequent message) is read straight from its
// bytes; everything else, and any result the fast path does not take,
// through the general decoder, which reads it the same way or refuses it.
Status Decode(std::string_view bytes, Message* out, const DecodeOptions& options) {
  if (bytes.size() <= options.max_message_bytes && DecodeMetricFast(bytes, out)) {
    return Status::Ok();
  }
  return DecodeGeneral(bytes, out, options);
}

namespace codec_detail {

Status DecodeGeneral(std::string_view bytes, Message* out, const DecodeOptions& options) {
  out->id = 0;
  if (bytes.size() > options.max_message_bytes) {
    return Status::TooLarge("message of " + std::to_string(bytes.size()) +
                            " bytes exceeds the limit of " +
                            std::to_string(options.max_message_bytes) + " bytes");
  }
  // One zone per thread, emptied after each message: its first chunk is
  // reused instead of allocated per message. Strings, binaries and
  // extensions point into `bytes` (which outlives the tree) instead of being
  // copied into the zone; DecodeObject copies what it keeps.
  thread_local msgpack::zone zone;
  struct Clear {
    ~Clear() { zone.clear(); }
  } clear_after;
  try {
    size_t offset = 0;
    // Bounded nesting and container sizes: hostile input cannot recurse deep
    // or make the unpacker reserve more than the message could hold.
    const size_t n = bytes.size();
    msgpack::unpack_limit limit(n, n, n, n, n, kMaxDepth);
    auto reference = [](msgpack::type::object_type, size_t, void*) { return true; };
    const msgpack::object root =
        msgpack::unpack(zone, bytes.data(), bytes.size(), offset, reference, nullptr, limit);
    if (offset != bytes.size()) {
      return Status::BadFrame(std::to_string(bytes.size() - offset) +
                              " trailing bytes after the message");
    }
    return DecodeObject(root, out);
  } catch (const std::exception& e) {
    return Status::BadFrame(std::string("not a MessagePack message: ") + e.what());
  } catch (...) {
    return Status::BadFrame("not a MessagePack message");
  }
}

}  // namespace codec_detail

void EncodeTo(const Message& message, std::string* out) {
  msgpack::sbuffer buf(kEncodeBufferBytes);
  Packer pk(buf);
  pk.pack_map(4);
  Str(pk, "v");
  pk.pack_uint32(kProtocolVersion);
  Str(pk, "type");
  Str(pk, TypeCode(message.body));
  Str(pk, "id");
  pk.pack_uint64(message.id);
  Str(pk, "body");
  WriteBody(pk, buf, message.body);
  out->assign(buf.data(), buf.size());
}

std::string Encode(const Message& message) {
  std::string out;
  EncodeTo(message, &out);
  return out;
}

Status ParseMetric(std::string_view packed, Metric* out) {
  try {
    msgpack::object_handle oh = msgpack::unpack(packed.data(), packed.size());
    return MetricFrom(oh.get(), "metric", out);
  } catch (const std::exception& e) {
    return Status::BadField(std::string("metric is not MessagePack: ") + e.what());
  }
}

Packed EmptyMap() { return Packed("\x80", 1); }

Packed PackDouble(double v) {
  msgpack::sbuffer buf;
  Float(buf, v);
  return Packed(buf.data(), buf.size());
}

}  // namespace tunehost::protocol

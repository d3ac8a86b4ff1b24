// What the codec's parts share (codec.cc: the public API; codec_encode.cc;
// codec_decode.cc): the enum names, the type codes, the packing primitives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <msgpack.hpp>

#include "tunehost/protocol/codec.h"

namespace tunehost::protocol::codec_detail {

using Packer = msgpack::packer<msgpack::sbuffer>;

// First sizes of the buffers a message and a re-packed value are written to
// (they grow by doubling). msgpack's default, 8 KiB, is past malloc's
// per-thread cache: a slow allocation for each of the many small messages.
inline constexpr size_t kEncodeBufferBytes = 512;
inline constexpr size_t kRepackBufferBytes = 64;

// ---------------------------------------------------------------- strings

template <class E, size_t N>
bool ParseEnum(std::string_view s, const std::pair<E, const char*> (&table)[N], E* out) {
  for (const auto& [value, name] : table) {
    if (s == name) {
      *out = value;
      return true;
    }
  }
  return false;
}

template <class E, size_t N>
std::string_view EnumName(E v, const std::pair<E, const char*> (&table)[N]) {
  for (const auto& [value, name] : table) {
    if (value == v) return name;
  }
  return "";
}

inline const std::pair<MetricType, const char*> kMetricTypes[] = {
    {MetricType::kPeriodical, "PERIODICAL"}, {MetricType::kFinal, "FINAL"}};
inline const std::pair<TrialStatus, const char*> kTrialStatuses[] = {
    {TrialStatus::kSucceeded, "SUCCEEDED"},     {TrialStatus::kFailed, "FAILED"},
    {TrialStatus::kUserCanceled, "USER_CANCELED"}, {TrialStatus::kSysCanceled, "SYS_CANCELED"},
    {TrialStatus::kEarlyStopped, "EARLY_STOPPED"}};
inline const std::pair<PluginIsolation, const char*> kIsolations[] = {
    {PluginIsolation::kInProcess, "in-process"}, {PluginIsolation::kProcess, "process"}};
inline const std::pair<ParameterSource, const char*> kSources[] = {
    {ParameterSource::kAlgorithm, "algorithm"},
    {ParameterSource::kCustomized, "customized"},
    {ParameterSource::kResumed, "resumed"},
    {ParameterSource::kExternal, "external"}};

// Type codes, in the order of the Body variant's alternatives.
inline constexpr std::string_view kTypeCodes[] = {
    "IN", "GE", "SS", "FD", "AD", "TE", "PI", "ME", "EN", "WH", "HB", "TS", "TJ",
    "WB", "TR", "SP", "KI", "MA", "HR", "ID", "NO", "ER", "ok", "error", "ST", "LT",
    "GT", "JS", "MT", "EX", "UX", "KT", "LW"};
static_assert(std::size(kTypeCodes) == std::variant_size_v<Body>);

// ---------------------------------------------------------------- encoding

void Str(Packer& pk, std::string_view s);
// The packed value, or (when empty) an empty map if `map_default`, else nil.
void Raw(Packer& pk, msgpack::sbuffer& buf, const Packed& packed, bool map_default);
void Id(Packer& pk, const ParameterId& id);
// msgpack-c 4 packs a double with an integral value as an integer; the wire
// format writes every float as float64 (wire-format.md §2). `Buffer` is any
// stream msgpack-cxx's packer writes to (`write(const char*, size_t)`).
template <class Buffer>
void Float(Buffer& buf, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  char out[9];
  out[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
  buf.write(out, sizeof out);
}

// The body map of a message (wire-format.md §3), keys in the documented order.
void WriteBody(Packer& pk, msgpack::sbuffer& buf, const Body& body);

// ---------------------------------------------------------------- decoding

// A metric value: a number, or a map with a numeric "default" (§3.3).
Status MetricFrom(const msgpack::object& o, const std::string& field, Metric* out);

// A whole envelope (§2) with the strict checks of §2.1.
Status DecodeObject(const msgpack::object& root, Message* out);

// A plain ME read straight from the bytes (codec_metric.cc); false leaves
// the message to DecodeGeneral, which then reads it the same way or refuses
// it. Decode is the one, then the other.
bool DecodeMetricFast(std::string_view bytes, Message* out);
Status DecodeGeneral(std::string_view bytes, Message* out, const DecodeOptions& options);

}  // namespace tunehost::protocol::codec_detail

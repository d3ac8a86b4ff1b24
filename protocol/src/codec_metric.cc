// The fast path for the most frequent message, a result (`ME`, §3.3), read
// straight from its bytes. It takes only what it is sure the general decoder
// (codec_decode.cc) reads the same way: a map of the four envelope keys whose
// `body` is a map of the seven body keys of ME, each key at most once, no
// nil, a numeric value, nothing after the envelope. Anything else (a map
// value, an unknown or repeated key, any other type, any error) returns
// false and goes to the general decoder, which then gives the same message
// or the spec's error; tests compare the two on every vector, on hand-made
// shapes and on mutations, and the decode fuzz harness on any input.
//
// Written by hand rather than with msgpack-cxx's visitor parser
// (`msgpack::parse`), which this replaced: for one 140-byte result the
// visitor parser cost ~3 200 instructions of the host's loop (its generic
// state machine and stack), this reader ~700 (callgrind, tools/bench
// RESULTS.md). It reads only the formats of the msgpack spec listed in
// Reader; the values it keeps are re-packed with msgpack-cxx's packer, as
// the general decoder re-packs them.
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

#include <msgpack.hpp>

#include "codec_internal.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::protocol::codec_detail {

namespace {

enum Key : uint8_t {
  // envelope
  kV, kType, kId, kBody,
  // body
  kTrialId, kAttempt, kParameterId, kMetricTypeKey, kSequence, kValue, kWorkerId,
  kNone,
};

Key EnvelopeKey(std::string_view k) {
  if (k == "v") return kV;
  if (k == "type") return kType;
  if (k == "id") return kId;
  if (k == "body") return kBody;
  return kNone;
}

Key BodyKey(std::string_view k) {
  if (k == "trial_id") return kTrialId;
  if (k == "attempt") return kAttempt;
  if (k == "parameter_id") return kParameterId;
  if (k == "type") return kMetricTypeKey;
  if (k == "sequence") return kSequence;
  if (k == "value") return kValue;
  if (k == "worker_id") return kWorkerId;
  return kNone;
}

// One msgpack item as the fast path sees it.
struct Item {
  enum Kind : uint8_t { kMap, kStr, kUint, kInt, kFloat, kOther } kind = kOther;
  uint32_t size = 0;      // kMap: entries
  std::string_view str;   // kStr
  uint64_t u = 0;         // kUint
  int64_t i = 0;          // kInt (negative)
  double d = 0;           // kFloat
};

// Reads the msgpack formats a result is made of (spec "formats"): fixmap,
// map 16/32; fixstr, str 8/16/32; positive and negative fixint, uint 8–64,
// int 8–64 (a non-negative one reads as kUint, as msgpack-cxx reads it);
// float 32/64. Every other first byte is kOther; a length past the end fails.
class Reader {
 public:
  explicit Reader(std::string_view bytes)
      : p_(reinterpret_cast<const uint8_t*>(bytes.data())), end_(p_ + bytes.size()) {}

  bool at_end() const { return p_ == end_; }

  bool Next(Item* item) {
    if (p_ == end_) return false;
    const uint8_t b = *p_++;
    if (b <= 0x7f) return Uint(item, b);
    if (b >= 0xe0) return Int(item, static_cast<int8_t>(b));
    if ((b & 0xf0) == 0x80) return Map(item, b & 0x0fu);
    if ((b & 0xe0) == 0xa0) return Str(item, b & 0x1fu);
    uint64_t n = 0;
    switch (b) {
      case 0xde: return Be(2, &n) && Map(item, static_cast<uint32_t>(n));
      case 0xdf: return Be(4, &n) && Map(item, static_cast<uint32_t>(n));
      case 0xd9: return Be(1, &n) && Str(item, static_cast<uint32_t>(n));
      case 0xda: return Be(2, &n) && Str(item, static_cast<uint32_t>(n));
      case 0xdb: return Be(4, &n) && Str(item, static_cast<uint32_t>(n));
      case 0xcc: return Be(1, &n) && Uint(item, n);
      case 0xcd: return Be(2, &n) && Uint(item, n);
      case 0xce: return Be(4, &n) && Uint(item, n);
      case 0xcf: return Be(8, &n) && Uint(item, n);
      case 0xd0: return Be(1, &n) && Int(item, static_cast<int8_t>(n));
      case 0xd1: return Be(2, &n) && Int(item, static_cast<int16_t>(n));
      case 0xd2: return Be(4, &n) && Int(item, static_cast<int32_t>(n));
      case 0xd3: return Be(8, &n) && Int(item, static_cast<int64_t>(n));
      case 0xca: {
        if (!Be(4, &n)) return false;
        const auto bits = static_cast<uint32_t>(n);
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return Float(item, static_cast<double>(f));
      }
      case 0xcb: {
        if (!Be(8, &n)) return false;
        double d;
        std::memcpy(&d, &n, sizeof d);
        return Float(item, d);
      }
      default: return item->kind = Item::kOther, true;
    }
  }

 private:
  bool Be(size_t width, uint64_t* out) {
    if (static_cast<size_t>(end_ - p_) < width) return false;
    uint64_t n = 0;
    for (size_t k = 0; k < width; ++k) n = n << 8 | p_[k];
    p_ += width;
    *out = n;
    return true;
  }
  static bool Uint(Item* item, uint64_t n) {
    item->kind = Item::kUint;
    item->u = n;
    return true;
  }
  static bool Int(Item* item, int64_t n) {
    if (n >= 0) return Uint(item, static_cast<uint64_t>(n));
    item->kind = Item::kInt;
    item->i = n;
    return true;
  }
  static bool Float(Item* item, double d) {
    item->kind = Item::kFloat;
    item->d = d;
    return true;
  }
  static bool Map(Item* item, uint32_t n) {
    item->kind = Item::kMap;
    item->size = n;
    return true;
  }
  bool Str(Item* item, uint32_t n) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    item->kind = Item::kStr;
    item->str = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
};

// A fixed buffer for msgpack-cxx's packer: a re-packed number is at most 9
// bytes.
struct SmallBuffer {
  char data[16];
  size_t size = 0;
  void write(const char* p, size_t n) {
    std::memcpy(data + size, p, n);
    size += n;
  }
};

bool Id(std::string_view s, std::string* out) {
  if (s.size() > kMaxIdBytes) return false;
  out->assign(s);
  return true;
}

// The value of one body key into `out`; false if the fast path does not take it.
bool BodyValue(Key key, const Item& v, ReportMetricData* out) {
  switch (key) {
    case kTrialId: return v.kind == Item::kStr && Id(v.str, &out->trial_id);
    case kWorkerId: return v.kind == Item::kStr && Id(v.str, &out->worker_id);
    case kAttempt:
      if (v.kind != Item::kUint || v.u > std::numeric_limits<uint32_t>::max()) return false;
      out->attempt = static_cast<uint32_t>(v.u);
      return true;
    case kSequence:
      if (v.kind != Item::kUint) return false;
      out->sequence = v.u;
      return true;
    case kMetricTypeKey:
      if (v.kind != Item::kStr) return false;
      if (v.str == "PERIODICAL") return out->type = MetricType::kPeriodical, true;
      if (v.str == "FINAL") return out->type = MetricType::kFinal, true;
      return false;
    case kParameterId:
      if (v.kind == Item::kStr) {
        if (v.str.size() > kMaxIdBytes) return false;
        out->parameter_id = std::string(v.str);
        return true;
      }
      if (v.kind == Item::kInt) return out->parameter_id = v.i, true;
      if (v.kind != Item::kUint || v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return false;
      }
      out->parameter_id = static_cast<int64_t>(v.u);
      return true;
    case kValue: {
      SmallBuffer raw;
      msgpack::packer<SmallBuffer> pk(raw);
      if (v.kind == Item::kUint) {
        pk.pack_uint64(v.u);  // as the general decoder re-packs it: the smallest form
        out->value.scalar = static_cast<double>(v.u);
      } else if (v.kind == Item::kInt) {
        pk.pack_int64(v.i);
        out->value.scalar = static_cast<double>(v.i);
      } else if (v.kind == Item::kFloat) {
        Float(raw, v.d);  // every float as float64 (§2)
        out->value.scalar = v.d;
      } else {
        return false;
      }
      out->value.raw.assign(raw.data, raw.size);
      return true;
    }
    default: return false;
  }
}

// Reads a map of `n` keys, each known to `name_of` and seen at most once
// (`seen` holds the bits of keys read so far), handing each value to `take`.
template <class NameOf, class Take>
bool ReadMap(Reader& r, uint32_t n, NameOf name_of, uint32_t* seen, Take take) {
  Item k, v;
  for (uint32_t i = 0; i < n; ++i) {
    if (!r.Next(&k) || k.kind != Item::kStr) return false;
    const Key key = name_of(k.str);
    if (key == kNone || (*seen & (1u << key)) != 0) return false;
    *seen |= 1u << key;
    if (!r.Next(&v) || !take(key, v)) return false;
  }
  return true;
}

}  // namespace

bool DecodeMetricFast(std::string_view bytes, Message* out) {
  Reader r(bytes);
  Item envelope;
  if (!r.Next(&envelope) || envelope.kind != Item::kMap) return false;
  ReportMetricData metric;
  uint64_t id = 0;
  uint32_t seen = 0;
  const bool read = ReadMap(r, envelope.size, EnvelopeKey, &seen, [&](Key key, const Item& v) {
    switch (key) {
      case kV: return v.kind == Item::kUint && v.u == kProtocolVersion;
      case kType: return v.kind == Item::kStr && v.str == "ME";
      case kId: return v.kind == Item::kUint && (id = v.u, true);
      case kBody:
        return v.kind == Item::kMap &&
               ReadMap(r, v.size, BodyKey, &seen,
                       [&](Key body_key, const Item& bv) { return BodyValue(body_key, bv, &metric); });
      default: return false;
    }
  });
  constexpr uint32_t kEnvelope = 1u << kV | 1u << kType | 1u << kId | 1u << kBody;
  constexpr uint32_t kRequired = 1u << kTrialId | 1u << kMetricTypeKey | 1u << kSequence |
                                 1u << kValue;
  if (!read || !r.at_end() || (seen & kEnvelope) != kEnvelope || (seen & kRequired) != kRequired) {
    return false;
  }
  out->version = kProtocolVersion;
  out->type = "ME";
  out->id = id;
  out->body = std::move(metric);
  return true;
}

}  // namespace tunehost::protocol::codec_detail

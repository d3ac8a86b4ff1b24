// The fast path for the most frequent message, a result (`ME`, §3.3): read
// straight from the bytes with msgpack-cxx's visitor parser, without the
// object tree the general decoder builds. It takes only what it is sure the
// general decoder (codec_decode.cc) reads the same way: the four envelope
// keys, the seven body keys of ME, each at most once, no nil, and a numeric
// value. Anything else (a map value, an unknown or repeated key, any error)
// goes to the general decoder, which then gives the same message or the
// spec's error; tests compare the two on every vector and on mutations.
#include <cstdint>
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

// Every callback returns false (which stops the parse) on anything the fast
// path does not take.
class MetricVisitor : public msgpack::null_visitor {
 public:
  explicit MetricVisitor(ReportMetricData* out) : out_(out) {}

  // Whether the whole message was an ME with every required key.
  bool complete() const {
    constexpr uint32_t kEnvelope = 1u << kV | 1u << kType | 1u << kId | 1u << kBody;
    constexpr uint32_t kRequired = 1u << kTrialId | 1u << kMetricTypeKey | 1u << kSequence |
                                   1u << kValue;
    return depth_ == 0 && (seen_ & kEnvelope) == kEnvelope && (seen_ & kRequired) == kRequired;
  }
  uint64_t id() const { return id_; }

  bool start_map(uint32_t) {
    // The envelope, then the body as its "body" value; nothing deeper.
    if (in_key_) return false;
    if (depth_ == 0 || (depth_ == 1 && key_ == kBody)) return ++depth_, true;
    return false;
  }
  bool end_map() { return --depth_, true; }
  bool start_map_key() { return in_key_ = true; }
  bool end_map_key() {
    in_key_ = false;
    return true;
  }
  bool start_array(uint32_t) { return false; }
  bool visit_str(const char* p, uint32_t n) {
    const std::string_view s(p, n);
    if (in_key_) {
      key_ = depth_ == 1 ? EnvelopeKey(s) : BodyKey(s);
      if (key_ == kNone || (seen_ & (1u << key_)) != 0) return false;
      seen_ |= 1u << key_;
      return true;
    }
    switch (key_) {
      case kType: return s == "ME";
      case kMetricTypeKey:
        if (s == "PERIODICAL") return out_->type = MetricType::kPeriodical, true;
        if (s == "FINAL") return out_->type = MetricType::kFinal, true;
        return false;
      case kTrialId: return Id(s, &out_->trial_id);
      case kWorkerId: return Id(s, &out_->worker_id);
      case kParameterId:
        if (s.size() > kMaxIdBytes) return false;
        out_->parameter_id = std::string(s);
        return true;
      default: return false;
    }
  }
  bool visit_positive_integer(uint64_t n) {
    if (in_key_) return false;
    switch (key_) {
      case kV: return n == kProtocolVersion;
      case kId: return id_ = n, true;
      case kAttempt:
        if (n > std::numeric_limits<uint32_t>::max()) return false;
        return out_->attempt = static_cast<uint32_t>(n), true;
      case kSequence: return out_->sequence = n, true;
      case kParameterId:
        if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
        return out_->parameter_id = static_cast<int64_t>(n), true;
      case kValue: {
        // As the general decoder re-packs it: the smallest integer form.
        msgpack::sbuffer buf(16);
        msgpack::packer<msgpack::sbuffer>(buf).pack_uint64(n);
        return Value(static_cast<double>(n), buf);
      }
      default: return false;
    }
  }
  bool visit_negative_integer(int64_t n) {
    if (in_key_) return false;
    if (key_ == kParameterId) return out_->parameter_id = n, true;
    if (key_ != kValue) return false;
    msgpack::sbuffer buf(16);
    msgpack::packer<msgpack::sbuffer>(buf).pack_int64(n);
    return Value(static_cast<double>(n), buf);
  }
  bool visit_float32(float f) { return visit_float64(static_cast<double>(f)); }
  bool visit_float64(double d) {
    if (in_key_ || key_ != kValue) return false;
    msgpack::sbuffer buf(16);
    Float(buf, d);  // every float as float64 (§2)
    return Value(d, buf);
  }
  // nil (absent for the general decoder), booleans, binaries, extensions.
  bool visit_nil() { return false; }
  bool visit_boolean(bool) { return false; }
  bool visit_bin(const char*, uint32_t) { return false; }
  bool visit_ext(const char*, uint32_t) { return false; }

 private:
  static bool Id(std::string_view s, std::string* out) {
    if (s.size() > kMaxIdBytes) return false;
    out->assign(s);
    return true;
  }
  bool Value(double scalar, const msgpack::sbuffer& raw) {
    out_->value.scalar = scalar;
    out_->value.raw.assign(raw.data(), raw.size());
    return true;
  }

  ReportMetricData* out_;
  int depth_ = 0;
  bool in_key_ = false;
  Key key_ = kNone;
  uint32_t seen_ = 0;
  uint64_t id_ = 0;
};

}  // namespace

bool DecodeMetricFast(std::string_view bytes, Message* out) {
  ReportMetricData metric;
  MetricVisitor visitor(&metric);
  size_t offset = 0;
  if (!msgpack::parse(bytes.data(), bytes.size(), offset, visitor) ||
      offset != bytes.size() || !visitor.complete()) {
    return false;
  }
  out->version = kProtocolVersion;
  out->type = "ME";
  out->id = visitor.id();
  out->body = std::move(metric);
  return true;
}

}  // namespace tunehost::protocol::codec_detail

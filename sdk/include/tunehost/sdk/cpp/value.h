// tunehost SDK: small helpers for reading MessagePack values in plugins.
//
// Everything here is header-only and throws tunehost::sdk::Error with
// TH_INVALID_ARGUMENT and a message that starts with the caller's `path`
// (for example `class_args "seed"` or `history[3]`), so a user can tell which
// part of their input was wrong.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"

namespace tunehost::sdk {

// A short human name of a value's MessagePack type, for error messages.
inline const char* TypeName(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "bool";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
      return "integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "float";
    case msgpack::type::STR:
      return "string";
    case msgpack::type::BIN:
      return "binary";
    case msgpack::type::ARRAY:
      return "array";
    case msgpack::type::MAP:
      return "map";
    case msgpack::type::EXT:
      return "ext";
  }
  return "unknown";
}

inline bool IsInteger(const msgpack::object& o) {
  return o.type == msgpack::type::POSITIVE_INTEGER || o.type == msgpack::type::NEGATIVE_INTEGER;
}

inline bool IsNumber(const msgpack::object& o) {
  return IsInteger(o) || o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64;
}

inline bool IsString(const msgpack::object& o) { return o.type == msgpack::type::STR; }

inline std::string_view StringView(const msgpack::object& o) {
  return std::string_view(o.via.str.ptr, o.via.str.size);
}

// The value stored under string key `key` of a map, or nullptr when `map` is
// not a map or has no such key.
inline const msgpack::object* FindKey(const msgpack::object& map, std::string_view key) {
  if (map.type != msgpack::type::MAP) return nullptr;
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const msgpack::object_kv& kv = map.via.map.ptr[i];
    if (IsString(kv.key) && StringView(kv.key) == key) return &kv.val;
  }
  return nullptr;
}

[[noreturn]] inline void ThrowType(std::string_view path, const char* expected,
                                   const msgpack::object& got) {
  throw Error(TH_INVALID_ARGUMENT,
              std::string(path) + ": expected " + expected + ", got " + TypeName(got));
}

// Any number as a double (integers beyond 2^53 lose precision).
inline double AsDouble(const msgpack::object& o, std::string_view path) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER:
      return static_cast<double>(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
      return static_cast<double>(o.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return o.via.f64;
    default:
      ThrowType(path, "a number", o);
  }
}

// An integer that fits in int64_t. Floats are refused, as NNI refuses them
// where it wants an int.
inline int64_t AsInt64(const msgpack::object& o, std::string_view path) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw Error(TH_INVALID_ARGUMENT, std::string(path) + ": integer too large");
    }
    return static_cast<int64_t>(o.via.u64);
  }
  ThrowType(path, "an integer", o);
}

inline std::string AsString(const msgpack::object& o, std::string_view path) {
  if (!IsString(o)) ThrowType(path, "a string", o);
  return std::string(StringView(o));
}

inline bool AsBool(const msgpack::object& o, std::string_view path) {
  if (o.type != msgpack::type::BOOLEAN) ThrowType(path, "a bool", o);
  return o.via.boolean;
}

// NNI's extract_scalar_reward: a metric is a number, or a map whose
// "default" is a number.
inline double MetricScalar(const msgpack::object& o, std::string_view path) {
  if (IsNumber(o)) return AsDouble(o, path);
  if (o.type == msgpack::type::MAP) {
    const msgpack::object* d = FindKey(o, "default");
    if (d != nullptr && IsNumber(*d)) return AsDouble(*d, path);
  }
  throw Error(TH_INVALID_ARGUMENT, std::string(path) +
                                       ": a metric must be a number or a map with a numeric "
                                       "\"default\", got " + TypeName(o));
}

// A deep copy of a MessagePack value that owns its memory (msgpack::object
// borrowed from a call is only valid during that call). Cheap to copy: copies
// share the immutable storage.
class OwnedObject {
 public:
  OwnedObject() = default;
  explicit OwnedObject(const msgpack::object& o)
      : zone_(std::make_shared<msgpack::zone>()), object_(o, *zone_) {}

  const msgpack::object& get() const { return object_; }

 private:
  std::shared_ptr<msgpack::zone> zone_;
  msgpack::object object_;
};

// Packs `d` as a MessagePack float64 always. msgpack-cxx's pack_double (and
// packing a FLOAT64 object) writes integral values such as 10.0 as integers,
// but a trial must receive a float for a float parameter. pack_bin_body only
// appends raw bytes, so it is used to write the 9-byte float64 encoding.
template <class Stream>
void PackFloat64(msgpack::packer<Stream>& out, double d) {
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof bits);
  char buf[9];
  buf[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) buf[1 + i] = static_cast<char>((bits >> (56 - 8 * i)) & 0xff);
  out.pack_bin_body(buf, 9);
}

// Packs a value as it is, floats staying floats (see PackFloat64); packing
// the object with msgpack-cxx directly would turn 2.0 into 2.
template <class Stream>
void PackObject(msgpack::packer<Stream>& out, const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      PackFloat64(out, o.via.f64);
      return;
    case msgpack::type::ARRAY:
      out.pack_array(o.via.array.size);
      for (uint32_t i = 0; i < o.via.array.size; ++i) PackObject(out, o.via.array.ptr[i]);
      return;
    case msgpack::type::MAP:
      out.pack_map(o.via.map.size);
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        PackObject(out, o.via.map.ptr[i].key);
        PackObject(out, o.via.map.ptr[i].val);
      }
      return;
    default:
      out.pack(o);
      return;
  }
}

namespace detail {

inline void PackCanonical(msgpack::sbuffer& out, const msgpack::object& o) {
  msgpack::packer<msgpack::sbuffer> pk(out);
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: {
      double d = o.via.f64;
      // 5.0 and 5 are the same configuration (JSON and YAML tools disagree on
      // which one they write); -0.0 becomes 0.
      if (std::isfinite(d) && d == std::nearbyint(d) && d >= -9.2e18 && d <= 9.2e18) {
        pk.pack(static_cast<int64_t>(d));
      } else {
        PackFloat64(pk, d);
      }
      return;
    }
    case msgpack::type::ARRAY:
      pk.pack_array(o.via.array.size);
      for (uint32_t i = 0; i < o.via.array.size; ++i) PackCanonical(out, o.via.array.ptr[i]);
      return;
    case msgpack::type::MAP: {
      std::vector<std::pair<std::string, std::string>> entries;
      entries.reserve(o.via.map.size);
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        msgpack::sbuffer k;
        msgpack::sbuffer v;
        PackCanonical(k, o.via.map.ptr[i].key);
        PackCanonical(v, o.via.map.ptr[i].val);
        entries.emplace_back(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
      }
      std::sort(entries.begin(), entries.end());
      pk.pack_map(static_cast<uint32_t>(entries.size()));
      for (const auto& e : entries) {
        out.write(e.first.data(), e.first.size());
        out.write(e.second.data(), e.second.size());
      }
      return;
    }
    default:
      pk.pack(o);
      return;
  }
}

}  // namespace detail

// A byte string that is equal for equal configurations: map keys sorted,
// integral floats written as integers. Used to deduplicate parameter sets
// regardless of key order or of how a tool spelled a number.
inline std::string CanonicalKey(const msgpack::object& o) {
  msgpack::sbuffer buffer;
  detail::PackCanonical(buffer, o);
  return std::string(buffer.data(), buffer.size());
}

// Saved plugin state, by the convention of the built-in plugins: a MessagePack
// map whose first keys are "format" (a string naming the plugin's state) and
// "version" (an integer). PackStateHeader starts such a map of `entries` keys
// in all and packs those two; the caller packs the rest.
template <class Stream>
void PackStateHeader(msgpack::packer<Stream>& pk, uint32_t entries, std::string_view format,
                     int64_t version) {
  pk.pack_map(entries);
  pk.pack(std::string("format"));
  pk.pack(std::string(format));
  pk.pack(std::string("version"));
  pk.pack(version);
}

// Unpacks a state written after PackStateHeader and checks its format and
// version. Throws Error(TH_INVALID_ARGUMENT, "<plugin>: saved state: ...").
inline msgpack::object_handle OpenState(std::string_view state, std::string_view plugin,
                                        std::string_view format, int64_t version) {
  auto bad = [&](const std::string& what) {
    return Error(TH_INVALID_ARGUMENT, std::string(plugin) + ": saved state: " + what);
  };
  msgpack::object_handle h;
  try {
    h = msgpack::unpack(state.data(), state.size());
  } catch (const std::exception& e) {
    throw bad(std::string("not MessagePack: ") + e.what());
  }
  const msgpack::object* f = FindKey(h.get(), "format");
  if (f == nullptr || !IsString(*f) || StringView(*f) != format) {
    throw bad("not a state of format " + std::string(format));
  }
  const msgpack::object* v = FindKey(h.get(), "version");
  if (v == nullptr || !IsInteger(*v) || AsInt64(*v, "version") != version) {
    throw bad("unsupported version");
  }
  return h;
}

}  // namespace tunehost::sdk

// Decoding protocol v1 messages (protocol/docs/wire-format.md): reads what
// each message's description (codec_messages.h) lists from a msgpack::object
// tree, with explicit type checks, the limits of limits.h and the spec's
// errors; nothing in here throws.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "codec_internal.h"
#include "codec_messages.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::protocol::codec_detail {

namespace {

// Like msgpack::pack(buf, o), but floats stay floats (see Float). Recursion is
// bounded by the unpack depth limit.
void PackObject(Packer& pk, msgpack::sbuffer& buf, const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: Float(buf, o.via.f64); break;
    case msgpack::type::ARRAY:
      pk.pack_array(o.via.array.size);
      for (uint32_t i = 0; i < o.via.array.size; ++i) PackObject(pk, buf, o.via.array.ptr[i]);
      break;
    case msgpack::type::MAP:
      pk.pack_map(o.via.map.size);
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        PackObject(pk, buf, o.via.map.ptr[i].key);
        PackObject(pk, buf, o.via.map.ptr[i].val);
      }
      break;
    default: pk.pack(o); break;
  }
}

Packed Repack(const msgpack::object& o) {
  msgpack::sbuffer buf(kRepackBufferBytes);
  Packer pk(buf);
  PackObject(pk, buf, o);
  return Packed(buf.data(), buf.size());
}

bool IsNumber(const msgpack::object& o) {
  return o.type == msgpack::type::POSITIVE_INTEGER || o.type == msgpack::type::NEGATIVE_INTEGER ||
         o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64;
}

double AsDouble(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER: return static_cast<double>(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER: return static_cast<double>(o.via.i64);
    default: return o.via.f64;
  }
}

}  // namespace

Status MetricFrom(const msgpack::object& o, const std::string& field, Metric* out) {
  if (IsNumber(o)) {
    out->scalar = AsDouble(o);
  } else if (o.type == msgpack::type::MAP) {
    const msgpack::object* def = nullptr;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR &&
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == "default") {
        def = &kv.val;
      }
    }
    if (def == nullptr || !IsNumber(*def)) {
      return Status::BadField(field + ": a metric map needs a numeric \"default\"");
    }
    out->scalar = AsDouble(*def);
  } else {
    return Status::BadField(field + ": a metric is a number or a map with a numeric \"default\"");
  }
  out->raw = Repack(o);
  return Status::Ok();
}

namespace {

// Reads fields of one map, naming them "<prefix>.<key>" in errors.
class Fields {
 public:
  Fields(const msgpack::object& map, std::string prefix) : map_(map), prefix_(std::move(prefix)) {}

  // Whether the key is present at all (nil included).
  bool Has(std::string_view key) const {
    for (uint32_t i = 0; i < map_.via.map.size; ++i) {
      const auto& kv = map_.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR &&
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
        return true;
      }
    }
    return false;
  }
  // nullptr when absent or nil.
  const msgpack::object* Find(std::string_view key) const {
    for (uint32_t i = 0; i < map_.via.map.size; ++i) {
      const auto& kv = map_.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR &&
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
        return kv.val.type == msgpack::type::NIL ? nullptr : &kv.val;
      }
    }
    return nullptr;
  }
  std::string Name(std::string_view key) const { return prefix_ + "." + std::string(key); }

  Status Required(std::string_view key, const msgpack::object** out) const {
    *out = Find(key);
    if (*out == nullptr) return Status::MissingField(Name(key) + " is required");
    return Status::Ok();
  }
  Status Wrong(std::string_view key, const char* want) const {
    return Status::BadField(Name(key) + ": expected " + want);
  }

  Status TooLong(std::string_view key, size_t size, size_t max) const {
    return Status::BadField(Name(key) + ": " + std::to_string(size) +
                            " bytes is over the limit of " + std::to_string(max) + " bytes");
  }
  // Identifiers are at most kMaxIdBytes; free text passes kMaxTextBytes.
  Status Str(std::string_view key, std::string* out, bool required = true,
             size_t max = kMaxIdBytes) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return required ? Status::MissingField(Name(key) + " is required") : Status::Ok();
    if (o->type != msgpack::type::STR) return Wrong(key, "a string");
    if (o->via.str.size > max) return TooLong(key, o->via.str.size, max);
    out->assign(o->via.str.ptr, o->via.str.size);
    return Status::Ok();
  }
  Status Text(std::string_view key, std::string* out) const {
    return Str(key, out, /*required=*/false, kMaxTextBytes);
  }
  Status OptStr(std::string_view key, std::optional<std::string>* out) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return Status::Ok();
    if (o->type != msgpack::type::STR) return Wrong(key, "a string or nil");
    if (o->via.str.size > kMaxIdBytes) return TooLong(key, o->via.str.size, kMaxIdBytes);
    *out = std::string(o->via.str.ptr, o->via.str.size);
    return Status::Ok();
  }
  template <class T>
  Status UInt(std::string_view key, T* out, bool required = true,
              uint64_t max = std::numeric_limits<T>::max()) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return required ? Status::MissingField(Name(key) + " is required") : Status::Ok();
    if (o->type != msgpack::type::POSITIVE_INTEGER ||
        o->via.u64 > std::numeric_limits<T>::max()) {
      return Wrong(key, "a non-negative integer in range");
    }
    if (o->via.u64 > max) {
      return Status::BadField(Name(key) + ": " + std::to_string(o->via.u64) +
                              " is over the limit of " + std::to_string(max));
    }
    *out = static_cast<T>(o->via.u64);
    return Status::Ok();
  }
  Status Int(std::string_view key, int64_t* out) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return Status::MissingField(Name(key) + " is required");
    if (o->type == msgpack::type::NEGATIVE_INTEGER) {
      *out = o->via.i64;
    } else if (o->type == msgpack::type::POSITIVE_INTEGER &&
               o->via.u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      *out = static_cast<int64_t>(o->via.u64);
    } else {
      return Wrong(key, "an integer");
    }
    return Status::Ok();
  }
  Status Float(std::string_view key, double* out) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return Status::Ok();  // every float field is optional (0)
    if (!IsNumber(*o)) return Wrong(key, "a number");
    *out = AsDouble(*o);
    return Status::Ok();
  }
  // `max_keys`: parameters and search spaces are at most kMaxParameters keys.
  Status Map(std::string_view key, Packed* out, bool required = true,
             size_t max_keys = std::numeric_limits<uint32_t>::max()) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) {
      if (required) return Status::MissingField(Name(key) + " is required");
      *out = EmptyMap();
      return Status::Ok();
    }
    if (o->type != msgpack::type::MAP) return Wrong(key, "a map");
    if (o->via.map.size > max_keys) {
      return Status::BadField(Name(key) + ": " + std::to_string(o->via.map.size) +
                              " keys is over the limit of " + std::to_string(max_keys));
    }
    *out = Repack(*o);
    return Status::Ok();
  }
  Status Metric(std::string_view key, protocol::Metric* out) const {
    const msgpack::object* o;
    Status st = Required(key, &o);
    if (!st.ok()) return st;
    return MetricFrom(*o, Name(key), out);
  }
  Status Id(std::string_view key, ParameterId* out) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) {
      *out = std::monostate{};
    } else if (o->type == msgpack::type::STR) {
      if (o->via.str.size > kMaxIdBytes) return TooLong(key, o->via.str.size, kMaxIdBytes);
      *out = std::string(o->via.str.ptr, o->via.str.size);
    } else if (o->type == msgpack::type::NEGATIVE_INTEGER) {
      *out = o->via.i64;
    } else if (o->type == msgpack::type::POSITIVE_INTEGER &&
               o->via.u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      *out = static_cast<int64_t>(o->via.u64);
    } else {
      return Wrong(key, "an integer, a string or nil");
    }
    return Status::Ok();
  }
  template <class E, size_t N>
  Status Enum(std::string_view key, const std::pair<E, const char*> (&table)[N], E* out) const {
    std::string s;
    Status st = Str(key, &s);
    if (!st.ok()) return st;
    if (!ParseEnum(s, table, out)) return Status::BadField(Name(key) + ": unknown value \"" + s + "\"");
    return Status::Ok();
  }
  // A nested map (required unless `optional`); *out null when absent.
  Status Sub(std::string_view key, const msgpack::object** out, bool optional = false) const {
    *out = Find(key);
    if (*out == nullptr) {
      return optional ? Status::Ok() : Status::MissingField(Name(key) + " is required");
    }
    if ((*out)->type != msgpack::type::MAP) return Wrong(key, "a map");
    return Status::Ok();
  }
  Status Array(std::string_view key, const msgpack::object** out, size_t max_items,
               bool required = true) const {
    *out = Find(key);
    if (*out == nullptr) {
      return required ? Status::MissingField(Name(key) + " is required") : Status::Ok();
    }
    if ((*out)->type != msgpack::type::ARRAY) return Wrong(key, "an array");
    if ((*out)->via.array.size > max_items) {
      return Status::BadField(Name(key) + ": " + std::to_string((*out)->via.array.size) +
                              " items is over the limit of " + std::to_string(max_items));
    }
    return Status::Ok();
  }

 private:
  const msgpack::object& map_;
  std::string prefix_;
};

#define TH_TRY(expr)              \
  do {                            \
    Status _st = (expr);          \
    if (!_st.ok()) return _st;    \
  } while (0)

// An empty map: what an absent optional nested map reads as.
const msgpack::object& EmptyMapObject() {
  static const msgpack::object empty = [] {
    msgpack::object o;
    o.type = msgpack::type::MAP;
    o.via.map.size = 0;
    o.via.map.ptr = nullptr;
    return o;
  }();
  return empty;
}

// Reads what a description lists (codec_messages.h) from one map; the first
// error stops it.
class Decoder {
 public:
  explicit Decoder(const Fields& f) : f_(f) {}

  // `map`, named `name` in errors, into *out.
  template <class T>
  static Status Read(const msgpack::object& map, std::string name, T* out) {
    Fields f(map, std::move(name));
    Decoder d(f);
    Describe(d, *out);
    return d.st_;
  }

  void Str(std::string_view key, std::string& s, Need need = kRequired,
           size_t max = kMaxIdBytes) {
    Do([&] { return f_.Str(key, &s, need == kRequired, max); });
  }
  void Text(std::string_view key, std::string& s) {
    Do([&] { return f_.Text(key, &s); });
  }
  void OptStr(std::string_view key, std::optional<std::string>& s) {
    Do([&] { return f_.OptStr(key, &s); });
  }
  template <class T>
  void UInt(std::string_view key, T& n, Need need = kRequired,
            uint64_t max = std::numeric_limits<T>::max()) {
    Do([&] { return f_.UInt(key, &n, need == kRequired, max); });
  }
  template <class T>
  void OptUInt(std::string_view key, std::optional<T>& n,
               uint64_t max = std::numeric_limits<T>::max()) {
    Do([&] {
      if (f_.Find(key) == nullptr) return Status::Ok();
      T v = 0;
      Status st = f_.UInt(key, &v, /*required=*/true, max);
      if (st.ok()) n = v;
      return st;
    });
  }
  void Int(std::string_view key, int64_t& n, Need need) {
    Do([&] {
      if (need == kOptional && f_.Find(key) == nullptr) return Status::Ok();
      return f_.Int(key, &n);
    });
  }
  void Float(std::string_view key, double& d) {
    Do([&] { return f_.Float(key, &d); });
  }
  void OptFloat(std::string_view key, std::optional<double>& d) {
    Do([&] {
      if (f_.Find(key) == nullptr) return Status::Ok();
      double v = 0;
      Status st = f_.Float(key, &v);
      if (st.ok()) d = v;
      return st;
    });
  }
  void ParamId(std::string_view key, ParameterId& id) {
    Do([&] { return f_.Id(key, &id); });
  }
  template <class E, size_t N>
  void Enum(std::string_view key, E& e, const std::pair<E, const char*> (&table)[N]) {
    Do([&] { return f_.Enum(key, table, &e); });
  }
  template <class E, size_t N>
  void OptEnum(std::string_view key, std::optional<E>& e,
               const std::pair<E, const char*> (&table)[N]) {
    Do([&] {
      if (f_.Find(key) == nullptr) return Status::Ok();
      E v{};
      Status st = f_.Enum(key, table, &v);
      if (st.ok()) e = v;
      return st;
    });
  }
  void Metric(std::string_view key, protocol::Metric& m) {
    Do([&] { return f_.Metric(key, &m); });
  }
  void Map(std::string_view key, Packed& p, Need need = kRequired,
           size_t max_keys = std::numeric_limits<uint32_t>::max()) {
    Do([&] { return f_.Map(key, &p, need == kRequired, max_keys); });
  }
  void Value(std::string_view key, Packed& p) {
    Do([&] {
      const msgpack::object* o = f_.Find(key);
      p = o == nullptr ? EmptyMap() : Repack(*o);
      return Status::Ok();
    });
  }
  template <class T>
  void Sub(std::string_view key, T& s, Need need = kRequired) {
    Do([&] {
      const msgpack::object* o;
      Status st = f_.Sub(key, &o, /*optional=*/need == kOptional);
      if (!st.ok()) return st;
      return Read(o != nullptr ? *o : EmptyMapObject(), f_.Name(key), &s);
    });
  }
  template <class T>
  void OptSub(std::string_view key, std::optional<T>& s) {
    Do([&] {
      const msgpack::object* o;
      Status st = f_.Sub(key, &o, /*optional=*/true);
      if (!st.ok() || o == nullptr) return st;
      T value{};
      st = Read(*o, f_.Name(key), &value);
      if (st.ok()) s = std::move(value);
      return st;
    });
  }
  template <class T>
  void List(std::string_view key, std::vector<T>& items, size_t max_items, Need need) {
    Do([&] {
      const msgpack::object* arr;
      Status st = f_.Array(key, &arr, max_items, need == kRequired);
      if (!st.ok() || arr == nullptr) return st;
      for (uint32_t i = 0; i < arr->via.array.size; ++i) {
        const msgpack::object& item = arr->via.array.ptr[i];
        std::string name = f_.Name(key) + "[" + std::to_string(i) + "]";
        if (item.type != msgpack::type::MAP) return Status::BadField(name + ": expected a map");
        T value{};
        st = Read(item, std::move(name), &value);
        if (!st.ok()) return st;
        items.push_back(std::move(value));
      }
      return Status::Ok();
    });
  }
  template <class Rule>
  void Check(std::string_view key, bool ok, Rule&& rule) {
    Do([&] { return ok ? Status::Ok() : Status::BadField(f_.Name(key) + ": " + rule()); });
  }

 private:
  template <class Fn>
  void Do(Fn&& fn) {
    if (st_.ok()) st_ = fn();
  }

  const Fields& f_;
  Status st_ = Status::Ok();
};

template <size_t I = 0>
Status ReadBody(size_t index, const msgpack::object& body, Body* out) {
  if constexpr (I < std::variant_size_v<Body>) {
    if (index == I) {
      // Read in place: no second copy of the body's strings.
      return Decoder::Read(body, "body", &out->emplace<I>());
    }
    return ReadBody<I + 1>(index, body, out);
  } else {
    return Status::Internal("bad body index");
  }
}

}  // namespace

Status DecodeObject(const msgpack::object& root, Message* out) {
  if (root.type != msgpack::type::MAP) return Status::BadFrame("message is not a MessagePack map");
  Fields env(root, "envelope");
  // The id first, so even a failed request gets a reply that echoes it.
  if (const msgpack::object* id = env.Find("id");
      id != nullptr && id->type == msgpack::type::POSITIVE_INTEGER) {
    out->id = id->via.u64;
  }
  const msgpack::object* v = env.Find("v");
  if (v == nullptr || v->type != msgpack::type::POSITIVE_INTEGER) {
    return Status::UnsupportedVersion("message has no protocol version \"v\"; this host speaks v" +
                                      std::to_string(kProtocolVersion));
  }
  if (v->via.u64 != kProtocolVersion) {
    return Status::UnsupportedVersion("protocol v" + std::to_string(v->via.u64) +
                                      " is not supported; this host speaks v" +
                                      std::to_string(kProtocolVersion));
  }
  out->version = kProtocolVersion;
  TH_TRY(env.Str("type", &out->type));
  // Every envelope has exactly its four keys (§3): a nil or absent id or
  // body is refused like any required field.
  if (!env.Has("id")) return Status::MissingField(env.Name("id") + " is required");
  if (const msgpack::object* id = env.Find("id");
      id == nullptr || id->type != msgpack::type::POSITIVE_INTEGER) {
    return env.Wrong("id", "a non-negative integer");
  }
  size_t index = std::variant_size_v<Body>;
  for (size_t i = 0; i < std::size(kTypeCodes); ++i) {
    if (out->type == kTypeCodes[i]) {
      index = i;
      break;
    }
  }
  if (index == std::variant_size_v<Body>) {
    return Status::UnknownType("unknown message type \"" + out->type + "\"");
  }
  if (!env.Has("body")) return Status::MissingField(env.Name("body") + " is required");
  const msgpack::object* body = env.Find("body");
  if (body == nullptr || body->type != msgpack::type::MAP) return env.Wrong("body", "a map");
  return ReadBody(index, *body, &out->body);
}

}  // namespace tunehost::protocol::codec_detail

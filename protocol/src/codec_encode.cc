// Encoding protocol v1 messages (protocol/docs/wire-format.md): what each
// message's description (codec_messages.h) lists, keys in that order, every
// float as float64.
#include <cstring>
#include <optional>
#include <vector>

#include "codec_internal.h"
#include "codec_messages.h"

namespace tunehost::protocol::codec_detail {

void Str(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void Raw(Packer& pk, msgpack::sbuffer& buf, const Packed& packed, bool map_default) {
  if (packed.empty()) {
    if (map_default) {
      pk.pack_map(0);
    } else {
      pk.pack_nil();
    }
    return;
  }
  buf.write(packed.data(), packed.size());
}

void Id(Packer& pk, const ParameterId& id) {
  if (auto* i = std::get_if<int64_t>(&id)) {
    pk.pack_int64(*i);
  } else if (auto* s = std::get_if<std::string>(&id)) {
    Str(pk, *s);
  } else {
    pk.pack_nil();
  }
}

// msgpack-c 4 packs a double with an integral value as an integer; the wire
// format writes every float as float64 (wire-format.md §2), so write it here.
namespace {

// Counts the fields a description lists: the size of the map header.
struct FieldCount {
  uint32_t n = 0;
  template <class... A> void Str(A&&...) { ++n; }
  template <class... A> void Text(A&&...) { ++n; }
  template <class... A> void OptStr(A&&...) { ++n; }
  template <class... A> void UInt(A&&...) { ++n; }
  template <class... A> void OptUInt(A&&...) { ++n; }
  template <class... A> void Int(A&&...) { ++n; }
  template <class... A> void Float(A&&...) { ++n; }
  template <class... A> void OptFloat(A&&...) { ++n; }
  template <class... A> void ParamId(A&&...) { ++n; }
  template <class... A> void Enum(A&&...) { ++n; }
  template <class... A> void OptEnum(A&&...) { ++n; }
  template <class... A> void Metric(A&&...) { ++n; }
  template <class... A> void Map(A&&...) { ++n; }
  template <class... A> void Value(A&&...) { ++n; }
  template <class... A> void Sub(A&&...) { ++n; }
  template <class... A> void OptSub(A&&...) { ++n; }
  template <class... A> void List(A&&...) { ++n; }
  template <class... A> void Check(A&&...) {}
};

// Writes what a description lists: every field, in its order, nil for an
// empty optional (codec_messages.h).
class Encoder {
 public:
  Encoder(Packer& pk, msgpack::sbuffer& buf) : pk_(pk), buf_(buf) {}

  // A description only reads through its reference when encoding.
  template <class T>
  void Write(const T& body) {
    T& b = const_cast<T&>(body);
    FieldCount count;
    Describe(count, b);
    pk_.pack_map(count.n);
    Describe(*this, b);
  }

  void Str(std::string_view key, const std::string& s, Need = kRequired, size_t = 0) {
    Key(key);
    codec_detail::Str(pk_, s);
  }
  void Text(std::string_view key, const std::string& s) { Str(key, s); }
  void OptStr(std::string_view key, const std::optional<std::string>& s) {
    Key(key);
    s ? codec_detail::Str(pk_, *s) : Nil();
  }
  template <class T>
  void UInt(std::string_view key, T n, Need = kRequired, uint64_t = 0) {
    Key(key);
    pk_.pack_uint64(n);
  }
  template <class T>
  void OptUInt(std::string_view key, const std::optional<T>& n, uint64_t = 0) {
    Key(key);
    n ? static_cast<void>(pk_.pack_uint64(*n)) : Nil();
  }
  void Int(std::string_view key, int64_t n, Need) {
    Key(key);
    pk_.pack_int64(n);
  }
  void Float(std::string_view key, double d) {
    Key(key);
    codec_detail::Float(buf_, d);
  }
  void OptFloat(std::string_view key, const std::optional<double>& d) {
    Key(key);
    d ? codec_detail::Float(buf_, *d) : Nil();
  }
  void ParamId(std::string_view key, const ParameterId& id) {
    Key(key);
    Id(pk_, id);
  }
  template <class E, size_t N>
  void Enum(std::string_view key, E e, const std::pair<E, const char*> (&table)[N]) {
    Key(key);
    codec_detail::Str(pk_, EnumName(e, table));
  }
  template <class E, size_t N>
  void OptEnum(std::string_view key, const std::optional<E>& e,
               const std::pair<E, const char*> (&table)[N]) {
    Key(key);
    e ? codec_detail::Str(pk_, EnumName(*e, table)) : Nil();
  }
  void Metric(std::string_view key, const protocol::Metric& m) {
    Key(key);
    Raw(pk_, buf_, m.raw, /*map_default=*/false);
  }
  void Map(std::string_view key, const Packed& p, Need = kRequired, size_t = 0) {
    Key(key);
    Raw(pk_, buf_, p, /*map_default=*/true);
  }
  void Value(std::string_view key, const Packed& p) { Map(key, p); }
  template <class T>
  void Sub(std::string_view key, const T& s, Need = kRequired) {
    Key(key);
    Write(s);
  }
  template <class T>
  void OptSub(std::string_view key, const std::optional<T>& s) {
    Key(key);
    s ? Write(*s) : Nil();
  }
  template <class T>
  void List(std::string_view key, const std::vector<T>& items, size_t, Need) {
    Key(key);
    pk_.pack_array(static_cast<uint32_t>(items.size()));
    for (const T& item : items) Write(item);
  }
  template <class Rule>
  void Check(std::string_view, bool, Rule&&) {}

 private:
  void Key(std::string_view key) { codec_detail::Str(pk_, key); }
  void Nil() { pk_.pack_nil(); }

  Packer& pk_;
  msgpack::sbuffer& buf_;
};

}  // namespace

void WriteBody(Packer& pk, msgpack::sbuffer& buf, const Body& body) {
  Encoder encoder(pk, buf);
  std::visit([&](const auto& b) { encoder.Write(b); }, body);
}

}  // namespace tunehost::protocol::codec_detail

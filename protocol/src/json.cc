// JSON <-> MessagePack for people, files and configs. nlohmann_json parses
// and prints; the MessagePack side is written here so floats stay float64
// (nlohmann's own to_msgpack narrows floats that fit in 32 bits).
#include <cmath>
#include <cstring>
#include <string>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "codec_internal.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::protocol {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

using Json = nlohmann::ordered_json;  // keeps keys in the order they came

Json ToJson(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return nullptr;
    case msgpack::type::BOOLEAN: return o.via.boolean;
    case msgpack::type::POSITIVE_INTEGER: return o.via.u64;
    case msgpack::type::NEGATIVE_INTEGER: return o.via.i64;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      // JSON has no NaN or infinity: they print as null.
      if (!std::isfinite(o.via.f64)) return nullptr;
      return o.via.f64;
    case msgpack::type::STR: return std::string(o.via.str.ptr, o.via.str.size);
    case msgpack::type::BIN: return "<bin " + std::to_string(o.via.bin.size) + " bytes>";
    case msgpack::type::EXT: return "<ext " + std::to_string(o.via.ext.size) + " bytes>";
    case msgpack::type::ARRAY: {
      Json a = Json::array();
      for (uint32_t i = 0; i < o.via.array.size; ++i) a.push_back(ToJson(o.via.array.ptr[i]));
      return a;
    }
    case msgpack::type::MAP: {
      Json m = Json::object();
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        const auto& kv = o.via.map.ptr[i];
        std::string key = kv.key.type == msgpack::type::STR
                              ? std::string(kv.key.via.str.ptr, kv.key.via.str.size)
                              : ToJson(kv.key).dump();
        m[key] = ToJson(kv.val);
      }
      return m;
    }
  }
  return nullptr;
}

void FromJson(const Json& j, Packer& pk, msgpack::sbuffer& buf) {
  switch (j.type()) {
    case Json::value_t::null: pk.pack_nil(); break;
    case Json::value_t::boolean: pk.pack(j.get<bool>()); break;
    case Json::value_t::number_integer: pk.pack_int64(j.get<int64_t>()); break;
    case Json::value_t::number_unsigned: pk.pack_uint64(j.get<uint64_t>()); break;
    // JSON 1.0 stays a float64 on the wire (codec_detail::Float says why).
    case Json::value_t::number_float: codec_detail::Float(buf, j.get<double>()); break;
    case Json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      pk.pack_str(static_cast<uint32_t>(s.size()));
      pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
      break;
    }
    case Json::value_t::array:
      pk.pack_array(static_cast<uint32_t>(j.size()));
      for (const auto& v : j) FromJson(v, pk, buf);
      break;
    case Json::value_t::object:
      pk.pack_map(static_cast<uint32_t>(j.size()));
      for (const auto& [k, v] : j.items()) {
        pk.pack_str(static_cast<uint32_t>(k.size()));
        pk.pack_str_body(k.data(), static_cast<uint32_t>(k.size()));
        FromJson(v, pk, buf);
      }
      break;
    default: pk.pack_nil(); break;
  }
}

}  // namespace

std::string PackedToJson(std::string_view packed) {
  if (packed.empty()) return "null";
  try {
    msgpack::object_handle oh = msgpack::unpack(packed.data(), packed.size());
    return ToJson(oh.get()).dump(-1, ' ', false, Json::error_handler_t::replace);
  } catch (const std::exception& e) {
    return std::string("\"<not MessagePack: ") + e.what() + ">\"";
  }
}

Status JsonToPacked(std::string_view json, Packed* out) {
  Json j = Json::parse(json, nullptr, false);
  if (j.is_discarded()) return Status::BadField("not valid JSON");
  msgpack::sbuffer buf;
  Packer pk(buf);
  FromJson(j, pk, buf);
  out->assign(buf.data(), buf.size());
  return Status::Ok();
}

}  // namespace tunehost::protocol

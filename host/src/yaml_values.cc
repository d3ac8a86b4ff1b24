// YAML values for the experiment config: see yaml_values.h.
#include "yaml_values.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <msgpack.hpp>

#include "tunehost/host/experiment_config.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host::config_yaml {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

constexpr std::string_view kTagStr = "tag:yaml.org,2002:str";

bool IsQuoted(const YAML::Node& n) { return n.Tag() == "!" || n.Tag() == kTagStr; }

int IsOctalDigit(int c) { return c >= '0' && c <= '7' ? 1 : 0; }
int IsHexDigit(int c) { return isxdigit(c); }
int IsDecimalDigit(int c) { return isdigit(c); }

bool AllOf(std::string_view s, int (*pred)(int)) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!pred(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// YAML 1.2 core-schema integers: decimal with optional sign, 0x hex, 0o octal.
// `*fits` is false when the text is an integer that no 64-bit type holds.
bool ParseYamlInt(std::string_view s, int64_t* i, uint64_t* u, bool* is_unsigned, bool* fits) {
  *fits = true;
  *is_unsigned = false;
  int base = 10;
  bool negative = false;
  std::string_view digits = s;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
    base = s[1] == 'x' ? 16 : 8;
    digits = s.substr(2);
    if (!AllOf(digits, base == 16 ? IsHexDigit : IsOctalDigit)) return false;
  } else {
    if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
      negative = digits[0] == '-';
      digits.remove_prefix(1);
    }
    if (!AllOf(digits, IsDecimalDigit)) return false;
  }
  uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) {
    *fits = false;
    return true;
  }
  constexpr uint64_t kMaxInt = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (negative) {
    if (magnitude > kMaxInt + 1) {
      *fits = false;
    } else {
      *i = magnitude == kMaxInt + 1 ? std::numeric_limits<int64_t>::min()
                                    : -static_cast<int64_t>(magnitude);
    }
  } else if (magnitude > kMaxInt) {
    *is_unsigned = true;
    *u = magnitude;
  } else {
    *i = static_cast<int64_t>(magnitude);
  }
  return true;
}

}  // namespace

// YAML 1.2 core-schema floats, including .inf and .nan.
bool ParseYamlFloat(std::string_view s, double* out) {
  std::string_view body = s;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    *out = negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
    return true;
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  // [0-9]* ( . [0-9]* )? ( [eE] [-+]? [0-9]+ )?, with at least one mantissa digit.
  size_t i = 0, mantissa_digits = 0;
  while (i < body.size() && isdigit(static_cast<unsigned char>(body[i]))) ++i, ++mantissa_digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && isdigit(static_cast<unsigned char>(body[i]))) ++i, ++mantissa_digits;
  }
  if (mantissa_digits == 0) return false;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    size_t exp_start = i;
    while (i < body.size() && isdigit(static_cast<unsigned char>(body[i]))) ++i;
    if (i == exp_start) return false;
  }
  if (i != body.size()) return false;
  std::string text(s);
  *out = std::strtod(text.c_str(), nullptr);
  return true;
}

namespace {

bool ParseYamlBool(std::string_view s, bool* out) {
  if (s == "true" || s == "True" || s == "TRUE") {
    *out = true;
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    *out = false;
    return true;
  }
  return false;
}

bool IsYamlNull(std::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// YAML -> MessagePack: ints stay ints, floats floats; a quoted scalar is a
// string whatever it looks like. Map keys are strings (as in JSON and NNI).
Status PackNode(const Context& ctx, const YAML::Node& n, const std::string& key, Packer& pk) {
  switch (n.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      pk.pack_nil();
      return Status::Ok();
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (IsQuoted(n)) {
        PackStr(pk, s);
        return Status::Ok();
      }
      int64_t i = 0;
      uint64_t u = 0;
      bool is_unsigned = false, fits = true;
      double d = 0;
      bool b = false;
      if (ParseYamlInt(s, &i, &u, &is_unsigned, &fits)) {
        if (!fits) return ctx.Error(n, key, "integer out of range: " + s);
        if (is_unsigned) {
          pk.pack_uint64(u);
        } else {
          pk.pack_int64(i);
        }
      } else if (ParseYamlFloat(s, &d)) {
        pk.pack_double(d);
      } else if (ParseYamlBool(s, &b)) {
        if (b) {
          pk.pack_true();
        } else {
          pk.pack_false();
        }
      } else if (IsYamlNull(s)) {
        pk.pack_nil();
      } else {
        PackStr(pk, s);
      }
      return Status::Ok();
    }
    case YAML::NodeType::Sequence: {
      pk.pack_array(static_cast<uint32_t>(n.size()));
      size_t index = 0;
      for (const YAML::Node& item : n) {
        Status st = PackNode(ctx, item, key + "[" + std::to_string(index++) + "]", pk);
        if (!st.ok()) return st;
      }
      return Status::Ok();
    }
    case YAML::NodeType::Map: {
      pk.pack_map(static_cast<uint32_t>(n.size()));
      std::set<std::string> seen;
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (!it->first.IsScalar()) {
          return ctx.Error(it->first, key, "map keys must be strings");
        }
        const std::string& k = it->first.Scalar();
        std::string child = key.empty() ? k : key + "." + k;
        if (!seen.insert(k).second) return ctx.Error(it->first, child, "duplicate key");
        PackStr(pk, k);
        Status st = PackNode(ctx, it->second, child, pk);
        if (!st.ok()) return st;
      }
      return Status::Ok();
    }
  }
  return ctx.Error(n, key, "unsupported YAML node");
}

}  // namespace

std::string Where(const std::string& file, const YAML::Mark& mark) {
  if (mark.is_null()) return file;
  return file + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

Status ToPacked(const Context& ctx, const YAML::Node& n, const std::string& key,
                protocol::Packed* out) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  Status st = PackNode(ctx, n, key, pk);
  if (!st.ok()) return st;
  out->assign(buf.data(), buf.size());
  return Status::Ok();
}

bool IsPackedMap(const protocol::Packed& p) {
  if (p.empty()) return false;
  auto b = static_cast<unsigned char>(p[0]);
  return (b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf;
}

Status GetString(const Context& ctx, const YAML::Node& n, const std::string& key,
                 std::string* out) {
  if (!n.IsScalar()) return ctx.Error(n, key, "must be a string");
  *out = n.Scalar();
  return Status::Ok();
}

Status GetInt(const Context& ctx, const YAML::Node& n, const std::string& key, int64_t min,
              int64_t max, int64_t* out) {
  int64_t i = 0;
  uint64_t u = 0;
  bool is_unsigned = false, fits = true;
  if (!n.IsScalar() || IsQuoted(n) || !ParseYamlInt(n.Scalar(), &i, &u, &is_unsigned, &fits)) {
    return ctx.Error(n, key, "must be an integer");
  }
  if (fits && !is_unsigned && i < min) {
    return ctx.Error(n, key, "must be at least " + std::to_string(min) + ", got " + n.Scalar());
  }
  if (!fits || is_unsigned || i > max) {
    return ctx.Error(n, key, "must be at most " + std::to_string(max) + ", got " + n.Scalar());
  }
  *out = i;
  return Status::Ok();
}

Status GetBool(const Context& ctx, const YAML::Node& n, const std::string& key, bool* out) {
  if (!n.IsScalar() || IsQuoted(n) || !ParseYamlBool(n.Scalar(), out)) {
    return ctx.Error(n, key, "must be true or false");
  }
  return Status::Ok();
}

Status GetDuration(const Context& ctx, const YAML::Node& n, const std::string& key,
                   double* seconds) {
  if (!n.IsScalar() || !ParseDuration(n.Scalar(), seconds)) {
    return ctx.Error(n, key,
                     "must be a positive duration such as \"30s\", \"10m\", \"2h\", \"1d\" or "
                     "a number of seconds");
  }
  return Status::Ok();
}

Status ParseYaml(std::string_view text, const std::string& label, YAML::Node* out) {
  try {
    *out = YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    return Status::BadField(Where(label, e.mark) + ": invalid YAML: " + e.msg);
  } catch (const YAML::Exception& e) {
    return Status::BadField(label + ": invalid YAML: " + e.what());
  }
  return Status::Ok();
}

}  // namespace tunehost::host::config_yaml

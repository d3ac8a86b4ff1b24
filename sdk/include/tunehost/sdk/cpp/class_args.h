// tunehost SDK: reading NNI classArgs in a plugin constructor.
//
//   sdk::ClassArgs args("tpe", class_args, {"optimize_mode", "seed", "tpe_args"});
//   maximize_ = args.Maximize(/*default_maximize=*/false);
//   seed_ = args.SeedOrRandom(host);
//   sdk::ClassArgs tpe = args.Sub("tpe_args", {"gamma", "n_startup_jobs"});
//   gamma_ = tpe.Number("gamma", 0.25, 0.0, 1.0);
//
// Every check throws Error(TH_INVALID_ARGUMENT) with a message that names the
// plugin and the argument, e.g. `tpe: class_args "tpe_args/gamma" must be a
// number in [0, 1], got 2`, and a key the plugin does not know is refused with
// the list of accepted keys (a typo must not silently fall back to a default).
// A nil value (YAML `seed:` or `null`) counts as absent.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <locale>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::sdk {

class ClassArgs {
 public:
  // `args` must be a map (an empty map when the config gives none); it is
  // borrowed and must outlive this object (use it in the constructor).
  ClassArgs(std::string plugin, const msgpack::object& args,
            std::initializer_list<const char*> accepted)
      : ClassArgs(std::move(plugin), "", args, accepted) {}

  const std::string& plugin() const { return plugin_; }

  // The value under `key`, or nullptr when absent or nil.
  const msgpack::object* Find(std::string_view key) const {
    const msgpack::object* v = FindKey(*args_, key);
    return (v == nullptr || v->type == msgpack::type::NIL) ? nullptr : v;
  }
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  // Whether `key` is given with a nil value (NNI uses None to switch things off).
  bool IsNull(std::string_view key) const {
    const msgpack::object* v = FindKey(*args_, key);
    return v != nullptr && v->type == msgpack::type::NIL;
  }

  // An Error naming this argument: `<plugin>: class_args "<key>" <what>`.
  Error Bad(std::string_view key, const std::string& what) const {
    return Error(TH_INVALID_ARGUMENT,
                 plugin_ + ": class_args \"" + prefix_ + std::string(key) + "\" " + what);
  }

  // NNI's optimize_mode: "maximize" or "minimize". Returns true for maximize.
  bool Maximize(bool default_maximize) const {
    const msgpack::object* v = Find("optimize_mode");
    if (v == nullptr) return default_maximize;
    if (IsString(*v) && StringView(*v) == "maximize") return true;
    if (IsString(*v) && StringView(*v) == "minimize") return false;
    throw Bad("optimize_mode", "must be \"maximize\" or \"minimize\", got " + Describe(*v));
  }

  // A non-negative integer seed, when given.
  std::optional<uint64_t> Seed(std::string_view key = "seed") const {
    const msgpack::object* v = Find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != msgpack::type::POSITIVE_INTEGER) {
      throw Bad(key, "must be a non-negative integer, got " + Describe(*v));
    }
    return v->via.u64;
  }

  // The given seed, or a random one that is logged so the run can be repeated.
  uint64_t SeedOrRandom(const HostRef& host, std::string_view key = "seed") const {
    if (std::optional<uint64_t> s = Seed(key)) return *s;
    std::random_device device;
    const uint64_t seed = (static_cast<uint64_t>(device()) << 32) ^ device();
    host.Info(plugin_ + ": seed " + std::to_string(seed) + " (set class_args " + prefix_ +
              std::string(key) + " to reproduce)");
    return seed;
  }

  // An integer in [min, max].
  int64_t Int(std::string_view key, int64_t default_value, int64_t min = 0,
              int64_t max = std::numeric_limits<int64_t>::max()) const {
    const msgpack::object* v = Find(key);
    if (v == nullptr) return default_value;
    // 20.0 from a YAML/JSON tool is accepted as 20; 20.5 is not.
    int64_t x = 0;
    if (IsInteger(*v) && !(v->type == msgpack::type::POSITIVE_INTEGER &&
                           v->via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      x = v->type == msgpack::type::POSITIVE_INTEGER ? static_cast<int64_t>(v->via.u64) : v->via.i64;
    } else if ((v->type == msgpack::type::FLOAT32 || v->type == msgpack::type::FLOAT64) &&
               std::isfinite(v->via.f64) && v->via.f64 == std::nearbyint(v->via.f64) &&
               std::fabs(v->via.f64) < 9.0e15) {
      x = static_cast<int64_t>(v->via.f64);
    } else {
      throw Bad(key, "must be an integer in " + Range(min, max) + ", got " + Describe(*v));
    }
    if (x < min || x > max) {
      throw Bad(key, "must be an integer in " + Range(min, max) + ", got " + Describe(*v));
    }
    return x;
  }

  // A finite number in [min, max] (or (min, max] with min_exclusive).
  double Number(std::string_view key, double default_value,
                double min = -std::numeric_limits<double>::max(),
                double max = std::numeric_limits<double>::max(), bool min_exclusive = false) const {
    const msgpack::object* v = Find(key);
    if (v == nullptr) return default_value;
    const std::string range = std::string(min_exclusive ? "(" : "[") + Num(min) + ", " + Num(max) + "]";
    if (!IsNumber(*v)) throw Bad(key, "must be a number in " + range + ", got " + Describe(*v));
    const double x = AsDouble(*v, key);
    if (!std::isfinite(x) || x < min || x > max || (min_exclusive && x == min)) {
      throw Bad(key, "must be a number in " + range + ", got " + Describe(*v));
    }
    return x;
  }

  bool Bool(std::string_view key, bool default_value) const {
    const msgpack::object* v = Find(key);
    if (v == nullptr) return default_value;
    if (v->type != msgpack::type::BOOLEAN) throw Bad(key, "must be true or false, got " + Describe(*v));
    return v->via.boolean;
  }

  // One of `allowed` (compared case-sensitively).
  std::string Choice(std::string_view key, const std::string& default_value,
                     std::initializer_list<const char*> allowed) const {
    const msgpack::object* v = Find(key);
    if (v == nullptr) return default_value;
    std::string list;
    for (const char* a : allowed) {
      if (IsString(*v) && StringView(*v) == a) return a;
      list += list.empty() ? "" : ", ";
      list += std::string("\"") + a + "\"";
    }
    throw Bad(key, "must be one of " + list + ", got " + Describe(*v));
  }

  // A nested map of arguments (NNI's tpe_args), checked like the top level;
  // an absent key gives an empty one.
  ClassArgs Sub(std::string_view key, std::initializer_list<const char*> accepted) const {
    const msgpack::object* v = Find(key);
    if (v != nullptr && v->type != msgpack::type::MAP) {
      throw Bad(key, "must be a map, got " + Describe(*v));
    }
    return ClassArgs(plugin_, prefix_ + std::string(key) + "/", v != nullptr ? *v : EmptyMap(),
                     accepted);
  }

  // Short text of a value for messages: numbers and strings as written.
  static std::string Describe(const msgpack::object& v) {
    if (IsString(v)) return "\"" + std::string(StringView(v)) + "\"";
    if (IsNumber(v)) return Num(AsDouble(v, ""));
    if (v.type == msgpack::type::BOOLEAN) return v.via.boolean ? "true" : "false";
    return TypeName(v);
  }

 private:
  ClassArgs(std::string plugin, std::string prefix, const msgpack::object& args,
            std::initializer_list<const char*> accepted)
      : plugin_(std::move(plugin)), prefix_(std::move(prefix)), args_(&args) {
    if (args.type == msgpack::type::NIL) {
      args_ = &EmptyMap();
      return;
    }
    if (args.type != msgpack::type::MAP) {
      throw Error(TH_INVALID_ARGUMENT, plugin_ + ": class_args" +
                                           (prefix_.empty() ? "" : " \"" + prefix_ + "\"") +
                                           " must be a map, got " + TypeName(args));
    }
    for (uint32_t i = 0; i < args.via.map.size; ++i) {
      const msgpack::object& k = args.via.map.ptr[i].key;
      if (!IsString(k)) {
        throw Error(TH_INVALID_ARGUMENT, plugin_ + ": class_args keys must be strings, got " +
                                             TypeName(k));
      }
      bool known = false;
      std::string list;
      for (const char* a : accepted) {
        known = known || StringView(k) == a;
        list += list.empty() ? "" : ", ";
        list += a;
      }
      if (!known) {
        throw Error(TH_INVALID_ARGUMENT,
                    plugin_ + ": unknown class_args \"" + prefix_ + std::string(StringView(k)) +
                        "\" (accepted: " + (list.empty() ? "none" : list) + ")");
      }
    }
  }

  static const msgpack::object& EmptyMap() {
    static const msgpack::object empty = [] {
      msgpack::object o;
      o.type = msgpack::type::MAP;
      o.via.map.size = 0;
      o.via.map.ptr = nullptr;
      return o;
    }();
    return empty;
  }
  static std::string Num(double x) {
    std::ostringstream s;
    s.imbue(std::locale::classic());
    if (x >= static_cast<double>(std::numeric_limits<int64_t>::max())) return "inf";
    if (x <= -static_cast<double>(std::numeric_limits<int64_t>::max())) return "-inf";
    s << x;
    return s.str();
  }
  static std::string Range(int64_t min, int64_t max) {
    return "[" + std::to_string(min) + ", " +
           (max == std::numeric_limits<int64_t>::max() ? std::string("inf") : std::to_string(max)) +
           "]";
  }

  std::string plugin_;
  std::string prefix_;
  const msgpack::object* args_;
};

// The text form of a random engine's state (for save_state) and back; the
// classic locale keeps it independent of the user's.
inline std::string RngToString(const std::mt19937_64& rng) {
  std::ostringstream s;
  s.imbue(std::locale::classic());
  s << rng;
  return s.str();
}
inline bool RngFromString(std::string_view text, std::mt19937_64* rng) {
  std::istringstream s{std::string(text)};
  s.imbue(std::locale::classic());
  std::mt19937_64 r;
  s >> r;
  if (s.fail()) return false;
  *rng = r;
  return true;
}

// Saved states of the built-in plugins hold "seed" (the seed the plugin
// started from) and "rng" (its engine, as RngToString writes it):
// PackSavedRandom packs the two entries, ReadSavedRandom reads them back and
// throws Error(TH_INVALID_ARGUMENT, "<plugin>: saved state: ...") when
// either is missing or malformed.
struct SavedRandom {
  uint64_t seed = 0;
  std::mt19937_64 rng;
};

template <class Stream>
void PackSavedRandom(msgpack::packer<Stream>& pk, uint64_t seed, const std::mt19937_64& rng) {
  pk.pack(std::string("seed"));
  pk.pack(seed);
  pk.pack(std::string("rng"));
  pk.pack(RngToString(rng));
}

inline SavedRandom ReadSavedRandom(const msgpack::object& state, std::string_view plugin) {
  auto bad = [&](const char* what) {
    return Error(TH_INVALID_ARGUMENT, std::string(plugin) + ": saved state: " + what);
  };
  const msgpack::object* seed = FindKey(state, "seed");
  const msgpack::object* rng = FindKey(state, "rng");
  if (seed == nullptr || seed->type != msgpack::type::POSITIVE_INTEGER) throw bad("no seed");
  if (rng == nullptr || !IsString(*rng)) throw bad("no rng");
  SavedRandom out;
  out.seed = seed->via.u64;
  if (!RngFromString(StringView(*rng), &out.rng)) throw bad("bad rng");
  return out;
}

// A saved state's "maximize" (results are signed by it) must be this
// plugin's optimize_mode; throws as ReadSavedRandom otherwise.
inline void CheckSavedMaximize(const msgpack::object& state, bool maximize,
                               std::string_view plugin) {
  const msgpack::object* m = FindKey(state, "maximize");
  if (m == nullptr || m->type != msgpack::type::BOOLEAN) {
    throw Error(TH_INVALID_ARGUMENT, std::string(plugin) + ": saved state: no maximize");
  }
  if (m->via.boolean != maximize) {
    throw Error(TH_INVALID_ARGUMENT,
                std::string(plugin) + ": saved state: saved with optimize_mode " +
                    (m->via.boolean ? "maximize" : "minimize") + ", this plugin has " +
                    (maximize ? "maximize" : "minimize"));
  }
}

}  // namespace tunehost::sdk

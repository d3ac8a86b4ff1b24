// tunehost SDK: NNI search spaces, parsed, validated, sampled and packed.
//
// A search space is a MessagePack map `name -> {"_type": T, "_value": [...]}`
// with NNI's ten types (choice, randint, uniform, quniform, loguniform,
// qloguniform, normal, qnormal, lognormal, qlognormal) and NNI's nested
// choice. SearchSpace::Parse validates it with NNI's rules and flattens it
// into a list of Parameter (NNI's ParameterSpec), in declaration order with a
// nested choice before the parameters of its options.
//
// Algorithms work in NNI's "internal format": one double per parameter, an
// Assignment.
//   - choice and randint are categorical: the value is an index in [0, size);
//   - the other types hold the raw draw before q-rounding and clipping, in log
//     space for the log types (so a model sees loguniform as uniform);
//   - parameters of nested options that were not chosen are std::nullopt.
// UserValue() / SearchSpace::Pack() turn that into what a trial receives
// (NNI's deformat_parameters): randint an integer, choice the option value
// itself (any MessagePack value), everything else a float64, nested choices as
// `{"_name": <name>, <sub-parameters>...}`.
//
// Random numbers: callers pass a std::mt19937_64 they seeded. The
// distributions are written here rather than taken from <random>, whose
// distributions differ between standard libraries, so a seed gives the same
// sequence with every standard library on the same platform; values can
// differ in the last bits across platforms whose libm exp/log/cos differ.
// Each draw uses a fixed number of engine outputs per parameter type, except
// UniformIndex, which rejects a few outputs to stay unbiased.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::sdk {

enum class ParamType {
  kChoice,
  kRandint,
  kUniform,
  kQuniform,
  kLoguniform,
  kQloguniform,
  kNormal,
  kQnormal,
  kLognormal,
  kQlognormal,
};

inline const char* ParamTypeName(ParamType type) {
  switch (type) {
    case ParamType::kChoice:
      return "choice";
    case ParamType::kRandint:
      return "randint";
    case ParamType::kUniform:
      return "uniform";
    case ParamType::kQuniform:
      return "quniform";
    case ParamType::kLoguniform:
      return "loguniform";
    case ParamType::kQloguniform:
      return "qloguniform";
    case ParamType::kNormal:
      return "normal";
    case ParamType::kQnormal:
      return "qnormal";
    case ParamType::kLognormal:
      return "lognormal";
    case ParamType::kQlognormal:
      return "qlognormal";
  }
  return "unknown";
}

inline std::optional<ParamType> ParseParamType(std::string_view name) {
  static const ParamType kAll[] = {
      ParamType::kChoice,      ParamType::kRandint, ParamType::kUniform,   ParamType::kQuniform,
      ParamType::kLoguniform,  ParamType::kQloguniform, ParamType::kNormal, ParamType::kQnormal,
      ParamType::kLognormal,   ParamType::kQlognormal};
  for (ParamType t : kAll) {
    if (name == ParamTypeName(t)) return t;
  }
  return std::nullopt;
}

// One flattened parameter.
struct Parameter {
  std::string name;  // key in its (sub-)space
  std::string path;  // for messages: "optimizer/lr" (nested options add no segment)
  ParamType type = ParamType::kUniform;

  // Active only when parameter `parent` (a nested choice) picked option
  // `parent_option`; -1: always active.
  int parent = -1;
  int parent_option = -1;

  // choice, randint: the internal value is an index in [0, size).
  bool categorical = false;
  int64_t size = 0;
  int64_t randint_lower = 0;
  std::vector<OwnedObject> options;  // choice: option values; nested: their "_name"
  bool nested = false;               // choice whose options are sub-spaces
  std::vector<int> option_spaces;    // nested: index in SearchSpace::spaces() per option

  // Numeric types.
  bool normal = false;  // drawn from N(mu, sigma), else U(low, high)
  bool log = false;     // the draw is the log of the value
  double low = 0;       // uniform bounds of the draw: log of the user's bounds for log types
  double high = 0;
  double mu = 0;
  double sigma = 0;
  double q = 0;          // > 0: value rounded to a multiple of q
  bool clip = false;     // q(log)uniform: the rounded value is clipped to the user's bounds
  double clip_low = 0;   // the user's bounds, for every type but the normal ones
  double clip_high = 0;
};

// A space or the sub-space of one nested option: its parameters, in order.
struct Space {
  std::vector<int> params;  // indices in SearchSpace::params()
};

// Internal format: one entry per SearchSpace::params(); nullopt = inactive.
using Assignment = std::vector<std::optional<double>>;

// --- Random draws (see the header comment on reproducibility) ---

// Uniform in [0, 1), 53 random bits; one engine output.
inline double Uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Uniform integer in [0, n), n >= 1, without modulo bias.
inline uint64_t UniformIndex(std::mt19937_64& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n: outputs below it are rejected
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

// N(0, 1) by Box-Muller; two engine outputs, nothing cached between calls.
inline double StandardNormal(std::mt19937_64& rng) {
  const double kTwoPi = 6.283185307179586476925286766559;
  double u1 = 1.0 - Uniform01(rng);  // (0, 1]: log stays finite
  double u2 = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

// --- One parameter ---

// A draw of one parameter in internal format (NNI's suggest_parameter).
inline double SampleParameter(const Parameter& p, std::mt19937_64& rng) {
  if (p.categorical) return static_cast<double>(UniformIndex(rng, static_cast<uint64_t>(p.size)));
  if (p.normal) return p.mu + p.sigma * StandardNormal(rng);
  return p.low + (p.high - p.low) * Uniform01(rng);
}

// The numeric value a trial sees for an internal value (NNI's
// deformat_parameters): exp for log types, then clip(round(x/q)*q, low, high)
// with the clip only for q(log)uniform. Rounding is half-to-even, as Python's
// round(). randint gives lower + index; choice gives the index.
inline double UserValue(const Parameter& p, double x) {
  if (p.categorical) {
    return p.type == ParamType::kRandint ? static_cast<double>(p.randint_lower) + x : x;
  }
  if (p.log) x = std::exp(x);
  // exp(log(low)) can land one ulp below low: keep loguniform inside its bounds.
  if (p.log && !p.normal) x = std::min(std::max(x, p.clip_low), p.clip_high);
  if (p.q > 0) x = std::nearbyint(x / p.q) * p.q;
  if (p.clip) {
    x = std::max(x, p.clip_low);
    x = std::min(x, p.clip_high);
  }
  return x;
}

// Number of distinct values a parameter can take, or nullopt when infinite
// (uniform, loguniform, the normal types). A nested choice counts its options
// here; SearchSpace::CountConfigurations counts their sub-spaces too.
inline std::optional<uint64_t> ValueCount(const Parameter& p) {
  if (p.categorical) return static_cast<uint64_t>(p.size);
  if (!p.clip || !(p.q > 0)) return std::nullopt;
  // Only the lowest and highest multiples of q can fall outside [low, high],
  // so clipping never merges two multiples.
  double k_min = std::nearbyint(p.clip_low / p.q);
  double k_max = std::nearbyint(p.clip_high / p.q);
  double n = k_max - k_min + 1;
  if (!(n >= 1) || n > 9.0e15) return std::nullopt;
  return static_cast<uint64_t>(n);
}

// The internal value of the i-th distinct value (i < *ValueCount(p)), in
// increasing order; UserValue of it is that distinct value.
inline double ValueAt(const Parameter& p, uint64_t i) {
  if (p.categorical) return static_cast<double>(i);
  double v = (std::nearbyint(p.clip_low / p.q) + static_cast<double>(i)) * p.q;
  v = std::min(std::max(v, p.clip_low), p.clip_high);
  return p.log ? std::log(v) : v;
}

// Packs the value a trial sees for one active parameter. A nested choice is
// not packed here (its option opens a sub-map): see SearchSpace::Pack.
template <class Stream>
void PackValue(const Parameter& p, double x, msgpack::packer<Stream>& out) {
  if (p.type == ParamType::kChoice) {
    PackObject(out, p.options[static_cast<size_t>(x)].get());
  } else if (p.type == ParamType::kRandint) {
    out.pack(p.randint_lower + static_cast<int64_t>(x));
  } else {
    PackFloat64(out, UserValue(p, x));
  }
}

// --- The whole space ---

class SearchSpace {
 public:
  SearchSpace() : spaces_(1) {}

  // Validates and flattens a search space. Throws Error(TH_INVALID_ARGUMENT)
  // whose message names the offending key, e.g.
  // `search space key "optimizer/lr" (option "adam"): loguniform needs low > 0`.
  static SearchSpace Parse(const msgpack::object& space) {
    SearchSpace s;
    if (space.type != msgpack::type::MAP) {
      throw Error(TH_INVALID_ARGUMENT,
                  std::string("search space: expected a map of name -> {\"_type\", \"_value\"}, "
                              "got ") + TypeName(space));
    }
    s.ParseInto(0, space, "", "", -1, -1);
    return s;
  }

  const std::vector<Parameter>& params() const { return params_; }
  // spaces()[0] is the top level; the others are nested options' sub-spaces.
  const std::vector<Space>& spaces() const { return spaces_; }
  bool empty() const { return params_.empty(); }

  // Whether params()[i] takes part, given the (earlier) values of its parents.
  bool IsActive(size_t i, const Assignment& a) const {
    const Parameter& p = params_[i];
    if (p.parent < 0) return true;
    const std::optional<double>& chosen = a[static_cast<size_t>(p.parent)];
    return chosen.has_value() && static_cast<int>(*chosen) == p.parent_option;
  }

  // An independent draw of every active parameter (NNI random tuner's suggest).
  Assignment Sample(std::mt19937_64& rng) const {
    Assignment a(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      if (IsActive(i, a)) a[i] = SampleParameter(params_[i], rng);
    }
    return a;
  }

  // Packs the map a trial receives.
  template <class Stream>
  void Pack(const Assignment& a, msgpack::packer<Stream>& out) const {
    out.pack_map(static_cast<uint32_t>(spaces_[0].params.size()));
    PackEntries(0, a, out);
  }

  // The number of distinct configurations (nested options count their
  // sub-spaces), saturating at UINT64_MAX; nullopt when some parameter has
  // infinitely many values.
  std::optional<uint64_t> CountConfigurations() const { return CountSpace(0); }

  // The index-th configuration, for index < CountConfigurations() (mixed
  // radix, first parameter fastest): a way to enumerate a finite space.
  Assignment ConfigurationAt(uint64_t index) const {
    Assignment a(params_.size());
    DecodeSpace(0, index, a);
    return a;
  }

  // The internal format of a parameter map a trial received or a user
  // imported (NNI's format_parameters). Throws Error(TH_INVALID_ARGUMENT)
  // naming the key when the map does not fit this space. For q types the
  // internal value is the rounded value (or its log).
  Assignment FromParameters(const msgpack::object& params) const {
    Assignment a(params_.size());
    FromMap(0, params, a);
    return a;
  }

  // FromParameters, or nullopt when the map does not fit this space.
  std::optional<Assignment> TryFromParameters(const msgpack::object& params) const {
    try {
      return FromParameters(params);
    } catch (const Error&) {
      return std::nullopt;
    }
  }

  // An assignment of `from` as one of this space: the map a trial received
  // read with this space; nullopt when it does not fit (a search space update).
  std::optional<Assignment> Refit(const SearchSpace& from, const Assignment& a) const {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    from.Pack(a, pk);
    msgpack::object_handle h = msgpack::unpack(buffer.data(), buffer.size());
    return TryFromParameters(h.get());
  }

 private:
  static std::string Where(const std::string& path, const std::string& option) {
    std::string w = "search space key \"" + path + "\"";
    if (!option.empty()) w += " (option " + option + ")";
    return w;
  }

  [[noreturn]] static void Fail(const std::string& path, const std::string& option,
                                const std::string& what) {
    throw Error(TH_INVALID_ARGUMENT, Where(path, option) + ": " + what);
  }

  static bool IsNestedOption(const msgpack::object& o) {
    return o.type == msgpack::type::MAP && FindKey(o, "_name") != nullptr;
  }

  static std::string OptionLabel(const msgpack::object& option, size_t index) {
    const msgpack::object* name = FindKey(option, "_name");
    if (name != nullptr && IsString(*name)) return "\"" + std::string(StringView(*name)) + "\"";
    return "#" + std::to_string(index);
  }

  void ParseInto(int space_index, const msgpack::object& map, const std::string& prefix,
                 const std::string& option, int parent, int parent_option) {
    std::set<std::string_view> seen;
    for (uint32_t i = 0; i < map.via.map.size; ++i) {
      const msgpack::object_kv& kv = map.via.map.ptr[i];
      if (!IsString(kv.key)) {
        throw Error(TH_INVALID_ARGUMENT,
                    std::string("search space") + (prefix.empty() ? "" : " key \"" + prefix + "\"") +
                        ": keys must be strings, got " + TypeName(kv.key));
      }
      std::string name(StringView(kv.key));
      // NNI skips "_name" at every level: it labels a nested option.
      if (name == "_name") continue;
      std::string path = prefix.empty() ? name : prefix + "/" + name;
      // A MessagePack map may repeat a key; which one counts would be a
      // guess, and a trial's parameters could not be read back.
      if (!seen.insert(StringView(kv.key)).second) Fail(path, option, "appears twice");
      int index = ParseParameter(name, path, option, kv.val, parent, parent_option);
      spaces_[static_cast<size_t>(space_index)].params.push_back(index);
    }
  }

  int ParseParameter(const std::string& name, const std::string& path, const std::string& option,
                     const msgpack::object& spec, int parent, int parent_option) {
    if (spec.type != msgpack::type::MAP) {
      Fail(path, option,
           std::string("expected a map with \"_type\" and \"_value\", got ") + TypeName(spec));
    }
    const msgpack::object* type_obj = FindKey(spec, "_type");
    const msgpack::object* value_obj = FindKey(spec, "_value");
    if (type_obj == nullptr) Fail(path, option, "missing \"_type\"");
    if (value_obj == nullptr) Fail(path, option, "missing \"_value\"");
    if (!IsString(*type_obj)) {
      Fail(path, option, std::string("\"_type\" must be a string, got ") + TypeName(*type_obj));
    }
    std::optional<ParamType> type = ParseParamType(StringView(*type_obj));
    if (!type) {
      Fail(path, option,
           "unknown _type \"" + std::string(StringView(*type_obj)) +
               "\" (expected choice, randint, uniform, quniform, loguniform, qloguniform, normal, "
               "qnormal, lognormal or qlognormal)");
    }
    if (value_obj->type != msgpack::type::ARRAY) {
      Fail(path, option, std::string("_value must be a list, got ") + TypeName(*value_obj));
    }
    const char* tname = ParamTypeName(*type);
    const msgpack::object_array& values = value_obj->via.array;

    Parameter p;
    p.name = name;
    p.path = path;
    p.type = *type;
    p.parent = parent;
    p.parent_option = parent_option;
    const int index = static_cast<int>(params_.size());

    if (*type == ParamType::kChoice) {
      if (values.size == 0) Fail(path, option, "choice needs at least one option");
      size_t nested = 0;
      for (uint32_t i = 0; i < values.size; ++i) nested += IsNestedOption(values.ptr[i]) ? 1 : 0;
      if (nested != 0 && nested != values.size) {
        Fail(path, option,
             "choice mixes nested options (maps with \"_name\") and plain values; "
             "either every option is a sub-space with a \"_name\" or none is");
      }
      p.categorical = true;
      p.size = values.size;
      p.nested = nested != 0;
      for (uint32_t i = 0; i < values.size; ++i) {
        const msgpack::object& v = values.ptr[i];
        p.options.emplace_back(p.nested ? *FindKey(v, "_name") : v);
      }
      params_.push_back(std::move(p));
      if (params_[static_cast<size_t>(index)].nested) {
        for (uint32_t i = 0; i < values.size; ++i) {
          int sub = static_cast<int>(spaces_.size());
          spaces_.emplace_back();
          params_[static_cast<size_t>(index)].option_spaces.push_back(sub);
          ParseInto(sub, values.ptr[i], path, OptionLabel(values.ptr[i], i), index,
                    static_cast<int>(i));
        }
      }
      return index;
    }

    const bool quantized = tname[0] == 'q';
    const uint32_t want = quantized ? 3 : 2;
    if (values.size != want) {
      Fail(path, option,
           std::string(tname) + " needs " + std::to_string(want) + " values " +
               (*type == ParamType::kRandint
                    ? "[lower, upper]"
                    : std::string(std::strstr(tname, "normal") ? "[mu, sigma" : "[low, high") +
                          (quantized ? ", q]" : "]")) +
               ", got " + std::to_string(values.size));
    }

    if (*type == ParamType::kRandint) {
      for (uint32_t i = 0; i < 2; ++i) {
        if (!IsInteger(values.ptr[i])) Fail(path, option, "randint needs integer values");
      }
      int64_t lower = AsInt64(values.ptr[0], Where(path, option) + ": randint lower");
      int64_t upper = AsInt64(values.ptr[1], Where(path, option) + ": randint upper");
      if (lower >= upper) Fail(path, option, "randint needs lower < upper (upper is exclusive)");
      uint64_t size = static_cast<uint64_t>(upper) - static_cast<uint64_t>(lower);
      // Indices travel as doubles in an Assignment.
      if (size > (uint64_t{1} << 53)) Fail(path, option, "randint range is larger than 2^53");
      p.categorical = true;
      p.randint_lower = lower;
      p.size = static_cast<int64_t>(size);
      params_.push_back(std::move(p));
      return index;
    }

    double v[3] = {0, 0, 0};
    for (uint32_t i = 0; i < values.size; ++i) {
      if (!IsNumber(values.ptr[i])) {
        Fail(path, option, std::string(tname) + " needs numeric values");
      }
      v[i] = AsDouble(values.ptr[i], path);
      if (!std::isfinite(v[i])) Fail(path, option, std::string(tname) + " needs finite values");
    }
    p.log = std::strstr(tname, "log") != nullptr;
    p.normal = std::strstr(tname, "normal") != nullptr;
    if (quantized) {
      // NNI does not check q; q <= 0 would divide by zero or flip the rounding.
      if (!(v[2] > 0)) Fail(path, option, std::string(tname) + " needs q > 0");
      p.q = v[2];
    }
    if (p.normal) {
      if (!(v[1] > 0)) Fail(path, option, std::string(tname) + " needs sigma > 0");
      p.mu = v[0];
      p.sigma = v[1];
    } else {
      if (!(v[0] < v[1])) Fail(path, option, std::string(tname) + " needs low < high");
      if (p.log && !(v[0] > 0)) Fail(path, option, std::string(tname) + " needs low > 0");
      p.low = p.log ? std::log(v[0]) : v[0];
      p.high = p.log ? std::log(v[1]) : v[1];
      p.clip = quantized;
      p.clip_low = v[0];
      p.clip_high = v[1];
    }
    params_.push_back(std::move(p));
    return index;
  }

  template <class Stream>
  void PackEntries(int space_index, const Assignment& a, msgpack::packer<Stream>& out) const {
    for (int i : spaces_[static_cast<size_t>(space_index)].params) {
      const Parameter& p = params_[static_cast<size_t>(i)];
      const std::optional<double>& x = a[static_cast<size_t>(i)];
      if (!x) throw Error(TH_INTERNAL, "assignment has no value for active \"" + p.path + "\"");
      out.pack(p.name);
      if (p.nested) {
        size_t option = static_cast<size_t>(*x);
        int sub = p.option_spaces[option];
        out.pack_map(static_cast<uint32_t>(1 + spaces_[static_cast<size_t>(sub)].params.size()));
        out.pack(std::string("_name"));
        PackObject(out, p.options[option].get());
        PackEntries(sub, a, out);
      } else {
        PackValue(p, *x, out);
      }
    }
  }

  static std::optional<uint64_t> SaturatingMul(std::optional<uint64_t> a,
                                               std::optional<uint64_t> b) {
    if (!a || !b) return std::nullopt;
    if (*a != 0 && *b > std::numeric_limits<uint64_t>::max() / *a) {
      return std::numeric_limits<uint64_t>::max();
    }
    return *a * *b;
  }

  std::optional<uint64_t> CountParameter(const Parameter& p) const {
    if (!p.nested) return ValueCount(p);
    uint64_t sum = 0;
    for (int sub : p.option_spaces) {
      std::optional<uint64_t> c = CountSpace(sub);
      if (!c) return std::nullopt;
      sum = (*c > std::numeric_limits<uint64_t>::max() - sum) ? std::numeric_limits<uint64_t>::max()
                                                               : sum + *c;
    }
    return sum;
  }

  std::optional<uint64_t> CountSpace(int space_index) const {
    std::optional<uint64_t> total = 1;
    for (int i : spaces_[static_cast<size_t>(space_index)].params) {
      total = SaturatingMul(total, CountParameter(params_[static_cast<size_t>(i)]));
      if (!total) return std::nullopt;
    }
    return total;
  }

  void DecodeSpace(int space_index, uint64_t index, Assignment& a) const {
    for (int i : spaces_[static_cast<size_t>(space_index)].params) {
      const Parameter& p = params_[static_cast<size_t>(i)];
      std::optional<uint64_t> count = CountParameter(p);
      if (!count || *count == 0) throw Error(TH_INTERNAL, "ConfigurationAt on an infinite space");
      uint64_t digit = index % *count;
      index /= *count;
      if (!p.nested) {
        a[static_cast<size_t>(i)] = ValueAt(p, digit);
        continue;
      }
      for (size_t o = 0; o < p.option_spaces.size(); ++o) {
        uint64_t c = *CountSpace(p.option_spaces[o]);
        if (digit < c) {
          a[static_cast<size_t>(i)] = static_cast<double>(o);
          DecodeSpace(p.option_spaces[o], digit, a);
          break;
        }
        digit -= c;
      }
    }
  }

  void FromMap(int space_index, const msgpack::object& map, Assignment& a) const {
    for (int i : spaces_[static_cast<size_t>(space_index)].params) {
      const Parameter& p = params_[static_cast<size_t>(i)];
      const msgpack::object* v = FindKey(map, p.name);
      if (v == nullptr) Fail(p.path, "", "missing from the parameters");
      const std::string where = Where(p.path, "");
      if (p.nested) {
        const msgpack::object* name = FindKey(*v, "_name");
        if (name == nullptr) Fail(p.path, "", "expected a map with \"_name\"");
        const size_t o = FindOption(p, *name);
        a[static_cast<size_t>(i)] = static_cast<double>(o);
        FromMap(p.option_spaces[o], *v, a);
      } else if (p.type == ParamType::kChoice) {
        a[static_cast<size_t>(i)] = static_cast<double>(FindOption(p, *v));
      } else if (p.type == ParamType::kRandint) {
        double x = AsDouble(*v, where) - static_cast<double>(p.randint_lower);
        if (!(x >= 0 && x < static_cast<double>(p.size)) || x != std::floor(x)) {
          Fail(p.path, "", "value is not a randint in range");
        }
        a[static_cast<size_t>(i)] = x;
      } else {
        double x = AsDouble(*v, where);
        if (p.log) {
          if (x == 0 && p.q > 0 && !p.clip) {
            // qlognormal rounds draws below q/2 to 0; log(q/2) is a draw
            // that rounds (half to even) to exactly 0.
            x = std::log(p.q / 2);
          } else if (!(x > 0)) {
            Fail(p.path, "", "value must be > 0 for a log type");
          } else {
            x = std::log(x);
          }
        }
        a[static_cast<size_t>(i)] = x;
      }
    }
  }

  static size_t FindOption(const Parameter& p, const msgpack::object& value) {
    const std::string key = CanonicalKey(value);
    for (size_t o = 0; o < p.options.size(); ++o) {
      if (CanonicalKey(p.options[o].get()) == key) return o;
    }
    Fail(p.path, "", "value is not one of the choice's options");
  }

  std::vector<Parameter> params_;
  std::vector<Space> spaces_;
};

// --- Assignments in saved plugin state ---

// An array with one float64 per active parameter and nil for inactive ones.
template <class Stream>
void PackAssignment(msgpack::packer<Stream>& pk, const Assignment& a) {
  pk.pack_array(static_cast<uint32_t>(a.size()));
  for (const std::optional<double>& x : a) {
    if (x) {
      PackFloat64(pk, *x);
    } else {
      pk.pack_nil();
    }
  }
}

// An assignment read back from saved state, if it fits `space`: one entry per
// parameter, values exactly for the active ones, categorical indices in range.
inline std::optional<Assignment> UnpackAssignment(const msgpack::object& o,
                                                  const SearchSpace& space) {
  const std::vector<Parameter>& params = space.params();
  if (o.type != msgpack::type::ARRAY || o.via.array.size != params.size()) return std::nullopt;
  Assignment a(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const msgpack::object& x = o.via.array.ptr[i];
    const bool active = space.IsActive(i, a);
    if (x.type == msgpack::type::NIL) {
      if (active) return std::nullopt;
      continue;
    }
    if (!active || !IsNumber(x)) return std::nullopt;
    const double v = AsDouble(x, "");
    if (params[i].categorical &&
        !(v >= 0 && v < static_cast<double>(params[i].size) && v == std::floor(v))) {
      return std::nullopt;
    }
    a[i] = v;
  }
  return a;
}

}  // namespace tunehost::sdk

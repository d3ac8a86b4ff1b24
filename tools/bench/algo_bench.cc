// Algorithm benchmark: tunehost's tuners driven directly (no sockets) through
// the host's plugin registry and Tuner wrapper, i.e. real .so plugins behind
// the SDK's C ABI, exactly as the server calls them.
//
//   --cost        time per suggestion after importing H results (JSON lines;
//                 tools/bench/algorithms.py compares them with
//                 tools/bench/optuna_bench.py's)
//   --serve       drive tuners by commands on stdin: the quality suite
//                 (tools/bench/suite.py) defines the problems in Python
//
// Options: --plugins DIR, --tuners a,b (labels; see KnownTuners),
// --define label=plugin:members (a further label with extra class_args),
// --histories 100,500, --k N, --spaces cont6,mixed
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <msgpack.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "tunehost/host/plugin.h"
#include "tunehost/protocol/codec.h"

namespace {

namespace p = tunehost::protocol;
namespace th = tunehost::host;
using Clock = std::chrono::steady_clock;

// CPU time of the calling thread, in µs. The plugin runs on this thread, so
// this is the suggestion's own cost even when a busy machine preempts us
// (wall time then includes other processes' slices).
double ThreadCpuMicros() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

// ---------------------------------------------------------------------------
// Small JSON-line writer for the results.

class JsonLine {
 public:
  JsonLine& Str(const char* key, const std::string& v) {
    Key(key);
    out_ << '"' << v << '"';  // values here are identifiers: no escaping needed
    return *this;
  }
  JsonLine& Num(const char* key, double v) {
    Key(key);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out_ << (std::isfinite(v) ? buf : "null");
    return *this;
  }
  JsonLine& Int(const char* key, int64_t v) {
    Key(key);
    out_ << v;
    return *this;
  }
  JsonLine& Nums(const char* key, const std::vector<double>& v) {
    Key(key);
    out_ << '[';
    for (size_t i = 0; i < v.size(); ++i) {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.17g", v[i]);
      out_ << (i ? "," : "") << buf;
    }
    out_ << ']';
    return *this;
  }
  void Print() {
    std::printf("{%s}\n", out_.str().c_str());
    std::fflush(stdout);
  }

 private:
  void Key(const char* key) {
    if (!first_) out_ << ',';
    first_ = false;
    out_ << '"' << key << "\":";
  }
  std::ostringstream out_;
  bool first_ = true;
};

// ---------------------------------------------------------------------------
// Driving one tuner instance.

using ParamValue = std::variant<double, std::string>;
using ParamMap = std::map<std::string, ParamValue>;

ParamMap Unpack(const p::Packed& packed) {
  msgpack::object_handle h = msgpack::unpack(packed.data(), packed.size());
  const msgpack::object& o = h.get();
  if (o.type != msgpack::type::MAP) throw std::runtime_error("parameters are not a map");
  ParamMap m;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const msgpack::object_kv& kv = o.via.map.ptr[i];
    std::string key = kv.key.as<std::string>();
    switch (kv.val.type) {
      case msgpack::type::FLOAT32:
      case msgpack::type::FLOAT64:
        m[key] = kv.val.via.f64;
        break;
      case msgpack::type::POSITIVE_INTEGER:
        m[key] = static_cast<double>(kv.val.via.u64);
        break;
      case msgpack::type::NEGATIVE_INTEGER:
        m[key] = static_cast<double>(kv.val.via.i64);
        break;
      case msgpack::type::STR:
        m[key] = kv.val.as<std::string>();
        break;
      default:
        throw std::runtime_error("parameter " + key + " has an unexpected type");
    }
  }
  return m;
}

p::Packed Packed(const std::string& json) {
  p::Packed out;
  tunehost::Status st = p::JsonToPacked(json, &out);
  if (!st.ok()) throw std::runtime_error("bad JSON in the benchmark: " + st.ToString());
  return out;
}

void Check(const tunehost::Status& st, const std::string& what) {
  if (!st.ok()) throw std::runtime_error(what + ": " + st.ToString());
}

// A benchmark label ("tpe-nni") -> plugin name and extra class_args members.
struct TunerSpec {
  std::string label;
  std::string plugin;
  std::string extra_args;  // JSON members without braces, or empty
};

// The built-in labels plus those added with --define (for experiments with
// other class_args, e.g. tpe-s10=tpe:"tpe_args":{"n_startup_jobs":10}).
std::vector<TunerSpec>& KnownTuners() {
  static std::vector<TunerSpec> specs = {
      {"tpe", "tpe", ""},  // the default: the joint model
      // NNI's per-parameter model
      {"tpe-nni", "tpe", "\"tpe_args\":{\"multivariate\":false}"},
      {"anneal", "anneal", ""},
      {"evolution", "evolution", ""},
      {"random", "random", ""},
      {"cmaes", "cmaes", ""},
      {"gp", "gp", ""},
  };
  return specs;
}

const TunerSpec* FindTuner(const std::string& label) {
  for (const TunerSpec& s : KnownTuners()) {
    if (s.label == label) return &s;
  }
  return nullptr;
}

// One tuner instance plus the parameters a plugin sent late through
// send_trial (evolution serves credit that way).
class Driver {
 public:
  Driver(const Driver&) = delete;  // the send_trial callback captures `this`
  Driver& operator=(const Driver&) = delete;

  Driver(th::PluginRegistry& registry, const TunerSpec& spec, int64_t seed) {
    std::string args = "{\"optimize_mode\":\"minimize\",\"seed\":" + std::to_string(seed);
    if (!spec.extra_args.empty()) args += "," + spec.extra_args;
    args += "}";
    Check(registry.CreateTuner(spec.plugin, Packed(args),
                               [this](int64_t id, p::Packed params) {
                                 late_.emplace_back(id, std::move(params));
                                 return tunehost::Status::Ok();
                               },
                               &tuner_),
          "create " + spec.label);
  }

  void SetSpace(const std::string& json) {
    Check(tuner_->UpdateSearchSpace(Packed(json)), "update_search_space");
  }

  void Import(const std::string& records) {
    bool supported = false;
    Check(tuner_->ImportData(records, &supported), "import_data");
    if (!supported) throw std::runtime_error("the tuner does not implement import_data");
  }

  // Asks for one configuration; *wall_us / *cpu_us are the steady_clock and
  // thread CPU time spent in Generate only. False when the tuner gave none.
  bool Next(int64_t id, p::Packed* params, double* wall_us, double* cpu_us) {
    std::vector<std::pair<int64_t, p::Packed>> out;
    bool no_more = false;
    std::vector<int64_t> ids{id};
    double cpu_start = ThreadCpuMicros();
    auto start = Clock::now();
    tunehost::Status st = tuner_->Generate(ids, &out, &no_more);
    auto end = Clock::now();
    *cpu_us = ThreadCpuMicros() - cpu_start;
    *wall_us = std::chrono::duration<double, std::micro>(end - start).count();
    Check(st, "generate");
    for (auto& [got, bytes] : out) {
      if (got == id) {
        *params = std::move(bytes);
        return true;
      }
    }
    return TakeLate(id, params);
  }

  void Report(int64_t id, const p::Packed& params, double value) {
    Check(tuner_->ReceiveTrialResult(id, params, p::PackDouble(value), value, false),
          "receive_trial_result");
    Check(tuner_->TrialEnd(id, true), "trial_end");
  }

 private:
  bool TakeLate(int64_t id, p::Packed* params) {
    for (auto it = late_.begin(); it != late_.end(); ++it) {
      if (it->first == id) {
        *params = std::move(it->second);
        late_.erase(it);
        return true;
      }
    }
    return false;
  }

  std::unique_ptr<th::Tuner> tuner_;
  std::vector<std::pair<int64_t, p::Packed>> late_;
};

// ---------------------------------------------------------------------------
// --cost

struct CostSpace {
  std::string name;
  std::string json;
  // Writes one random configuration as a msgpack map.
  std::function<void(std::mt19937_64&, msgpack::packer<msgpack::sbuffer>&)> sample;
};

double U01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

const char* const kChoices[4] = {"relu", "tanh", "sigmoid", "gelu"};

// Cost objective: sum of squares of the numeric values plus the choice's
// index (any deterministic function will do for timing).
double CostObjective(const ParamMap& m) {
  double sum = 0;
  for (const auto& [key, v] : m) {
    if (const double* d = std::get_if<double>(&v)) {
      sum += *d * *d;
    } else {
      const std::string& s = std::get<std::string>(v);
      for (int i = 0; i < 4; ++i) {
        if (s == kChoices[i]) sum += i;
      }
    }
  }
  return sum;
}

std::vector<CostSpace> CostSpaces() {
  std::vector<CostSpace> spaces;
  {
    std::string json = "{";
    for (int i = 0; i < 6; ++i) {
      json += (i ? "," : "") + std::string("\"x") + std::to_string(i) +
              "\":{\"_type\":\"uniform\",\"_value\":[-5,5]}";
    }
    json += "}";
    spaces.push_back({"cont6", json, [](std::mt19937_64& rng, msgpack::packer<msgpack::sbuffer>& pk) {
                        pk.pack_map(6);
                        for (int i = 0; i < 6; ++i) {
                          pk.pack(std::string("x") + std::to_string(i));
                          pk.pack_double(-5.0 + 10.0 * U01(rng));
                        }
                      }});
  }
  spaces.push_back(
      {"mixed",
       R"({"lr0":{"_type":"loguniform","_value":[0.0001,1]},)"
       R"("lr1":{"_type":"loguniform","_value":[0.0001,1]},)"
       R"("n0":{"_type":"quniform","_value":[1,100,1]},)"
       R"("n1":{"_type":"quniform","_value":[1,100,1]},)"
       R"("act":{"_type":"choice","_value":["relu","tanh","sigmoid","gelu"]},)"
       R"("u":{"_type":"uniform","_value":[0,1]}})",
       [](std::mt19937_64& rng, msgpack::packer<msgpack::sbuffer>& pk) {
         pk.pack_map(6);
         for (const char* k : {"lr0", "lr1"}) {
           pk.pack(std::string(k));
           pk.pack_double(std::exp(std::log(1e-4) * (1.0 - U01(rng))));
         }
         for (const char* k : {"n0", "n1"}) {
           pk.pack(std::string(k));
           pk.pack_double(std::clamp(std::round(1.0 + 99.0 * U01(rng)), 1.0, 100.0));
         }
         pk.pack(std::string("act"));
         pk.pack(std::string(kChoices[rng() % 4]));
         pk.pack(std::string("u"));
         pk.pack_double(U01(rng));
       }});
  return spaces;
}

// The import records: an array of {"parameters": map, "value": objective}.
// Assembled as bytes because msgpack::packer cannot splice a packed map in.
std::string ImportRecords(const CostSpace& space, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(static_cast<uint32_t>(n));
  std::string out(buf.data(), buf.size());
  for (size_t i = 0; i < n; ++i) {
    msgpack::sbuffer params;
    msgpack::packer<msgpack::sbuffer> ppk(params);
    space.sample(rng, ppk);
    std::string bytes(params.data(), params.size());

    msgpack::sbuffer head;
    msgpack::packer<msgpack::sbuffer> hpk(head);
    hpk.pack_map(2);
    hpk.pack(std::string("parameters"));
    msgpack::sbuffer tail;
    msgpack::packer<msgpack::sbuffer> tpk(tail);
    tpk.pack(std::string("value"));
    tpk.pack_double(CostObjective(Unpack(bytes)));

    out.append(head.data(), head.size());
    out += bytes;
    out.append(tail.data(), tail.size());
  }
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  if (n == 0) return NAN;
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void RunCost(th::PluginRegistry& registry, const std::vector<const TunerSpec*>& tuners,
             const std::vector<std::string>& space_names, const std::vector<size_t>& histories,
             int k) {
  for (const TunerSpec* spec : tuners) {
    for (const CostSpace& space : CostSpaces()) {
      if (std::find(space_names.begin(), space_names.end(), space.name) == space_names.end()) {
        continue;
      }
      for (size_t h : histories) {
        Driver d(registry, *spec, 1);
        d.SetSpace(space.json);
        std::string records = ImportRecords(space, h, 12345 + h);
        auto t0 = Clock::now();
        d.Import(records);
        double import_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        std::vector<double> us, cpu;
        for (int i = 0; i < k; ++i) {
          int64_t id = static_cast<int64_t>(h) + i;
          p::Packed params;
          double wall_us = 0, cpu_us = 0;
          if (!d.Next(id, &params, &wall_us, &cpu_us)) {
            std::fprintf(stderr, "algo-bench: %s gave no parameters (cost, %s, H=%zu)\n",
                         spec->label.c_str(), space.name.c_str(), h);
            break;
          }
          us.push_back(wall_us);
          cpu.push_back(cpu_us);
          d.Report(id, params, CostObjective(Unpack(params)));
        }
        double mean = 0;
        for (double v : us) mean += v / static_cast<double>(us.size());
        JsonLine()
            .Str("mode", "cost")
            .Str("impl", "tunehost")
            .Str("tuner", spec->label)
            .Str("space", space.name)
            .Int("history", static_cast<int64_t>(h))
            .Int("k", static_cast<int64_t>(us.size()))
            .Num("median_us", Median(us))
            .Num("mean_us", mean)
            .Num("cpu_median_us", Median(cpu))
            .Num("import_ms", import_ms)
            .Nums("times_us", us)
            .Print();
      }
    }
  }
}

// ---------------------------------------------------------------------------

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Resolves labels to specs, skipping (with a note) those whose plugin is not loaded.
std::vector<const TunerSpec*> Available(th::PluginRegistry& registry,
                                        const std::vector<std::string>& labels) {
  std::vector<const TunerSpec*> out;
  std::vector<th::PluginInfo> loaded = registry.plugins();
  for (const std::string& label : labels) {
    const TunerSpec* spec = FindTuner(label);
    if (spec == nullptr) throw std::runtime_error("unknown tuner label " + label);
    bool found = std::any_of(loaded.begin(), loaded.end(), [&](const th::PluginInfo& i) {
      return i.name == spec->plugin && i.kind == "tuner";
    });
    if (!found) {
      std::fprintf(stderr, "algo-bench: skipping %s: plugin %s is not in the plugin directory\n",
                   label.c_str(), spec->plugin.c_str());
      continue;
    }
    out.push_back(spec);
  }
  return out;
}

// ---------------------------------------------------------------------------
// --serve: the problem suite (tools/bench/suite.py) defines its problems and
// objectives once, in Python, and drives tunehost's tuners through this mode
// over a pipe, one command per line and one answer line each:
//   new LABEL SEED SPACE-JSON   -> ok             a fresh tuner, minimizing
//   next ID                     -> PARAMS-JSON | none
//   report ID VALUE             -> ok             the result, then the trial's end
// A bad command answers "error: ..." and the loop goes on.

void ServeOne(th::PluginRegistry& registry, const std::string& line,
              std::unique_ptr<Driver>* driver, std::map<int64_t, p::Packed>* out) {
  std::istringstream in(line);
  std::string op;
  in >> op;
  if (op == "new") {
    std::string label, space;
    int64_t seed = 0;
    in >> label >> seed;
    std::getline(in, space);
    if (Available(registry, {label}).empty()) throw std::runtime_error("no tuner " + label);
    driver->reset();  // the old instance goes before the new one exists
    out->clear();
    *driver = std::make_unique<Driver>(registry, *FindTuner(label), seed);
    (*driver)->SetSpace(space);
    std::printf("ok\n");
    return;
  }
  if (!*driver) throw std::runtime_error("no tuner yet (send new first)");
  int64_t id = -1;
  in >> id;
  if (op == "next") {
    p::Packed params;
    double wall_us = 0, cpu_us = 0;
    if (!(*driver)->Next(id, &params, &wall_us, &cpu_us)) {
      std::printf("none\n");
      return;
    }
    std::printf("%s\n", p::PackedToJson(params).c_str());
    (*out)[id] = std::move(params);
  } else if (op == "report") {
    double value = NAN;
    in >> value;
    auto it = out->find(id);
    if (it == out->end()) throw std::runtime_error("trial " + std::to_string(id) + " is not out");
    (*driver)->Report(id, it->second, value);
    out->erase(it);
    std::printf("ok\n");
  } else {
    throw std::runtime_error("unknown command " + op);
  }
}

int Serve(th::PluginRegistry& registry) {
  std::unique_ptr<Driver> driver;
  std::map<int64_t, p::Packed> out;  // parameters handed out, not reported yet
  std::string line;
  while (std::getline(std::cin, line)) {
    try {
      ServeOne(registry, line, &driver, &out);
    } catch (const std::exception& e) {
      std::printf("error: %s\n", e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugins = TH_DEFAULT_PLUGIN_DIR;
  std::string mode;
  std::string tuners_arg;
  std::vector<size_t> histories = {100, 500, 1000, 2000, 5000};
  std::vector<std::string> spaces = {"cont6", "mixed"};
  int k = 20;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--cost" || a == "--serve") {
        mode = a;
      } else if (a == "--plugins") {
        plugins = value();
      } else if (a == "--tuners") {
        tuners_arg = value();
      } else if (a == "--histories") {
        histories.clear();
        for (const std::string& h : Split(value())) histories.push_back(std::stoul(h));
      } else if (a == "--spaces") {
        spaces = Split(value());
      } else if (a == "--define") {
        // label=plugin:members  (members: JSON object members without braces)
        std::string d = value();
        size_t eq = d.find('='), colon = d.find(':');
        if (eq == std::string::npos || colon == std::string::npos || colon < eq) {
          throw std::runtime_error("--define wants label=plugin:members, got " + d);
        }
        KnownTuners().push_back(
            {d.substr(0, eq), d.substr(eq + 1, colon - eq - 1), d.substr(colon + 1)});
      } else if (a == "--k") {
        k = std::stoi(value());
      } else {
        throw std::runtime_error("unknown argument " + a);
      }
    }
    if (mode.empty()) {
      std::fprintf(stderr, "usage: tunehost-algo-bench --cost|--serve [options]\n");
      return 2;
    }

    // Plugins log through spdlog; keep stdout for the JSON lines.
    spdlog::set_default_logger(spdlog::stderr_color_mt("algo-bench"));
    spdlog::set_level(spdlog::level::warn);
    th::PluginRegistry registry;
    registry.LoadDirectory(plugins);
    for (const std::string& e : registry.errors()) {
      std::fprintf(stderr, "algo-bench: plugin refused: %s\n", e.c_str());
    }
    if (mode == "--serve") return Serve(registry);
    if (tuners_arg.empty()) tuners_arg = "tpe,random";
    RunCost(registry, Available(registry, Split(tuners_arg)), spaces, histories, k);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tunehost-algo-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

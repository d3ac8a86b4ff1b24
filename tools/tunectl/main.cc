// tunectl: the command line for a running tunehost host (nnictl's role). Every
// command is one control request (protocol/docs/wire-format.md §4) on a
// DEALER socket; `events` subscribes to the events socket. Tables for people
// by default, `--json` prints the reply data for scripts.
//
// Exit codes: 0 ok; 1 the host answered with an error; 2 bad command line or
// bad input file; 3 no host (no answer within --timeout-ms, or no host.json).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "launch.h"
#include "tunehost/protocol/client_keys.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

namespace {

namespace fs = std::filesystem;
namespace p = tunehost::protocol;
using Json = nlohmann::ordered_json;

constexpr int kExitOk = 0;
constexpr int kExitHostError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoHost = 3;
constexpr char kDefaultControl[] = "tcp://127.0.0.1:5650";

// Ends the command: main prints "tunectl: <message>" and exits with `code`.
struct Failure {
  int code;
  std::string message;
};

[[noreturn]] void Fail(int code, std::string message) { throw Failure{code, std::move(message)}; }

// ---------------------------------------------------------------- options

struct GlobalOptions {
  std::string control;
  std::string experiment;
  std::string workdir;
  int timeout_ms = 5000;
  bool json = false;
  std::string key_file;         // --key, or $TUNEHOST_KEY: this client's .key_secret
  bool key_from_environment = false;  // key_file is $TUNEHOST_KEY's
  std::string server_key_file;  // --server-key, or $TUNEHOST_SERVER_KEY
};

// Where the host is and how to reach it.
struct HostAddress {
  std::string control;
  std::string server_key;  // Z85, from --server-key or host.json; empty: no keys
};

fs::path DefaultWorkdir() {
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : ".") / "tunehost-experiments";
}

// Whether a host process holds the experiment's lock (<dir>/lock, flock);
// true when there is no lock file (a host.json written by hand or by another
// program: only asking the host tells).
bool HostHoldsLock(const fs::path& dir) {
  int fd = open((dir / "lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  // Exclusive: a run or resume host holds it exclusively, a serving view shared.
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

// --control EP, else --experiment ID's host.json, else the default endpoint;
// the host's public key from --server-key, else from host.json.
HostAddress FindHost(const GlobalOptions& o) {
  HostAddress a;
  if (!o.server_key_file.empty()) {
    p::KeyPair server;
    tunehost::Status st = p::ReadKeyFile(o.server_key_file, /*need_secret=*/false, &server);
    if (!st.ok()) Fail(kExitUsage, st.message());
    a.server_key = server.public_key;
  }
  if (!o.control.empty() || o.experiment.empty()) {
    a.control = o.control.empty() ? kDefaultControl : o.control;
    return a;
  }
  const fs::path dir = o.workdir.empty() ? DefaultWorkdir() : fs::path(o.workdir);
  const fs::path file = dir / o.experiment / "host.json";
  std::ifstream in(file);
  if (!in) {
    Fail(kExitNoHost, "experiment " + o.experiment + " has no " + file.string() +
                          " (is its host running?)");
  }
  // host.json says where to connect and what the workers run (launch):
  // only the user's own, unwritable by others, is trusted (§9).
  for (const fs::path& path : {dir / o.experiment, file}) {
    if (tunehost::Status st = p::CheckTrustedPath(path); !st.ok()) Fail(kExitUsage, st.message());
  }
  if (!HostHoldsLock(dir / o.experiment)) {
    // host.json is removed when a host exits; left behind, its host died.
    Fail(kExitNoHost, "experiment " + o.experiment + ": CRASHED: no host holds it (its host "
                      "died); `tunehost resume " + o.experiment + "` continues it");
  }
  Json j = Json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("control") ||
      !j["control"].is_string()) {
    Fail(kExitNoHost, file.string() + " has no \"control\" endpoint");
  }
  a.control = j["control"].get<std::string>();
  if (a.server_key.empty() && j.contains("server_key") && j["server_key"].is_string()) {
    a.server_key = j["server_key"].get<std::string>();
  }
  return a;
}

// This client's keys for a host that authenticates (wire-format.md §9).
p::ClientKeys KeysFor(const GlobalOptions& o, const HostAddress& host) {
  p::ClientKeys keys;
  if (host.server_key.empty()) {
    // $TUNEHOST_KEY serves every host that authenticates; this one does not.
    if (!o.key_file.empty() && !o.key_from_environment) {
      Fail(kExitUsage, "--key needs the host's public key: --server-key FILE (or an "
                       "--experiment whose host.json has it)");
    }
    return keys;
  }
  if (o.key_file.empty()) {
    Fail(kExitUsage, "the host authenticates: give this client's key with --key FILE (or "
                     "$TUNEHOST_KEY), a .key_secret file from `tunectl keygen`");
  }
  tunehost::Status st = p::ReadKeyFile(o.key_file, /*need_secret=*/true, &keys.own);
  if (!st.ok()) Fail(kExitUsage, st.message());
  keys.server_key = host.server_key;
  return keys;
}

// ---------------------------------------------------------------- the host

class Host {
 public:
  Host(std::string endpoint, int timeout_ms, p::ClientKeys keys)
      : endpoint_(std::move(endpoint)), timeout_ms_(timeout_ms), keys_(std::move(keys)) {}

  // A socket of this client: with keys, a CURVE client of the host.
  zmq::socket_t Socket(zmq::socket_type type) {
    zmq::socket_t socket(ctx_, type);
    socket.set(zmq::sockopt::linger, 0);
    p::ApplyClientKeys(socket, keys_);
    return socket;
  }

  // One request; the ok reply's data as JSON. Error replies and silence end
  // the command (exit 1 and 3).
  Json Call(p::Body body) {
    zmq::socket_t socket = Socket(zmq::socket_type::dealer);
    try {
      socket.connect(endpoint_);
    } catch (const zmq::error_t& e) {
      Fail(kExitUsage, "cannot use endpoint " + endpoint_ + ": " + e.what());
    }
    const uint64_t id = 1;
    const std::string bytes = p::Encode(id, std::move(body));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
    if (!socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) NoAnswer();
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) NoAnswer();
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, left) == 0) NoAnswer();
      zmq::message_t msg;
      if (!socket.recv(msg, zmq::recv_flags::dontwait)) continue;
      p::Message reply;
      p::DecodeOptions options;
      options.max_message_bytes = p::kMaxReplyBytes;  // LT/MT/EX of large experiments
      tunehost::Status st = p::Decode(msg.to_string_view(), &reply, options);
      if (!st.ok()) Fail(kExitHostError, "unreadable reply from " + endpoint_ + ": " + st.ToString());
      if (reply.id != id) continue;
      if (auto* ok = std::get_if<p::OkReply>(&reply.body)) return Json::parse(p::PackedToJson(ok->data));
      if (auto* err = std::get_if<p::ErrorReply>(&reply.body)) {
        Fail(kExitHostError, err->code + ": " + err->message);
      }
      Fail(kExitHostError, "unexpected reply type " + reply.type);
    }
  }

  zmq::context_t& context() { return ctx_; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  [[noreturn]] void NoAnswer() const {
    Fail(kExitNoHost, "no answer from " + endpoint_ + " within " + std::to_string(timeout_ms_) +
                          " ms (is the host running?" +
                          (keys_.enabled() ? " Does it know this client's key, and is "
                                             "--server-key its key?)"
                                           : " Does it want a key? Then give --key and "
                                             "--server-key.)"));
  }

  std::string endpoint_;
  int timeout_ms_;
  p::ClientKeys keys_;
  zmq::context_t ctx_{1};
};

// ---------------------------------------------------------------- input

Json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) Fail(kExitUsage, "cannot read " + path);
  Json j = Json::parse(in, nullptr, false);
  if (j.is_discarded()) Fail(kExitUsage, path + " is not valid JSON");
  return j;
}

// JSON text, or "@FILE" for a file's content.
Json ParseJsonArgument(const std::string& text, const std::string& what) {
  if (!text.empty() && text[0] == '@') return ReadJsonFile(text.substr(1));
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) Fail(kExitUsage, what + " is not valid JSON: " + text);
  return j;
}

p::Packed Pack(const Json& j) {
  p::Packed out;
  tunehost::Status st = p::JsonToPacked(j.dump(), &out);
  if (!st.ok()) Fail(kExitUsage, st.message());
  return out;
}

// NNI duration ("30s", "10m", "1.5h", "2 days", a plain number of seconds);
// 0 means unlimited here. nullopt for anything else.
std::optional<double> ParseDurationText(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  double number = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  std::string unit;
  for (const char* c = end; *c != '\0'; ++c) {
    if (!std::isspace(static_cast<unsigned char>(*c))) {
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    }
  }
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},         {"s", 1},        {"sec", 1},        {"secs", 1},      {"second", 1},
      {"seconds", 1},  {"m", 60},       {"min", 60},       {"mins", 60},     {"minute", 60},
      {"minutes", 60}, {"h", 3600},     {"hr", 3600},      {"hrs", 3600},    {"hour", 3600},
      {"hours", 3600}, {"d", 86400},    {"day", 86400},    {"days", 86400}};
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) {
      double seconds = number * scale;
      if (!std::isfinite(seconds) || seconds < 0) return std::nullopt;
      return seconds;
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- output

void PrintJson(const Json& j) { std::cout << j.dump(2) << "\n"; }

std::string Compact(const Json& j) { return j.dump(); }

// A metric for tables: its number (a map's "default"), floats to 6 digits.
std::string MetricText(const Json& m) {
  if (m.is_null()) return "-";
  const Json& v = m.is_object() && m.contains("default") ? m["default"] : m;
  if (!v.is_number_float()) return Compact(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v.get<double>());
  return buf;
}

std::string DurationText(double seconds) {
  if (seconds <= 0) return "0s";
  long long s = static_cast<long long>(seconds + 0.5);
  char buf[64];
  if (s >= 86400) {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh%02lldm", s / 86400, s % 86400 / 3600,
                  s % 3600 / 60);
  } else if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm%02llds", s / 3600, s % 3600 / 60, s % 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  }
  return buf;
}

std::string TimeText(const Json& unix_seconds) {
  if (!unix_seconds.is_number() || unix_seconds.get<double>() <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds.get<double>());
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string CountsText(const Json& counts) {
  if (counts.empty()) return "none";
  std::string out;
  for (const auto& [status, n] : counts.items()) {
    if (!out.empty()) out += ", ";
    out += status + " " + Compact(n);
  }
  return out;
}

void Row(const char* key, const std::string& value) { std::printf("%-14s %s\n", key, value.c_str()); }

void PrintStatus(const Json& s) {
  Row("experiment", s.value("experiment_id", ""));
  Row("status", s.value("status", ""));
  if (!s.value("error", "").empty()) Row("error", s.value("error", ""));
  Row("started", TimeText(s["start_time"]));
  Row("elapsed", DurationText(s.value("elapsed_s", 0.0)));
  Row("concurrency", Compact(s["concurrency"]));
  const uint64_t max_trials = s.value("max_trials", uint64_t{0});
  Row("max trials", max_trials == 0 ? "unlimited" : std::to_string(max_trials));
  const double max_duration = s.value("max_duration_s", 0.0);
  Row("max duration", max_duration == 0 ? "unlimited" : DurationText(max_duration));
  Row("trials", CountsText(s["counts"]));
  const Json& best = s["best"];
  Row("best", best.is_object() ? best.value("trial_id", "") + " (#" +
                                     Compact(best["sequence_id"]) + ") " +
                                     Compact(best["metric"])
                               : "-");
  Row("optimize mode", s.value("optimize_mode", ""));
  const Json& ep = s["endpoints"];
  for (const char* name : {"control", "jobs", "results", "events"}) {
    Row((std::string(name) + " ep").c_str(), ep.value(name, ""));
  }
}

double TrialDuration(const Json& t) {
  if (!t["start_time"].is_number()) return 0;
  double end = t["end_time"].is_number()
                   ? t["end_time"].get<double>()
                   : std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  return end - t["start_time"].get<double>();
}

void PrintTrialTable(const Json& trials) {
  std::printf("%-10s %5s %-14s %-10s %7s %-12s %-10s %s\n", "TRIAL", "SEQ", "STATUS", "SOURCE",
              "ATTEMPT", "FINAL", "DURATION", "PARAMETERS");
  for (const Json& t : trials) {
    std::printf("%-10s %5s %-14s %-10s %7s %-12s %-10s %s\n", t.value("trial_id", "").c_str(),
                Compact(t["sequence_id"]).c_str(), t.value("status", "").c_str(),
                t.value("source", "").c_str(), Compact(t["attempt"]).c_str(),
                MetricText(t["final"]).c_str(),
                t["start_time"].is_number() ? DurationText(TrialDuration(t)).c_str() : "-",
                Compact(t["parameters"]).c_str());
  }
}

void PrintTrial(const Json& t) {
  Row("trial", t.value("trial_id", ""));
  Row("sequence", Compact(t["sequence_id"]));
  Row("parameter id", Compact(t["parameter_id"]));
  Row("source", t.value("source", ""));
  Row("status", t.value("status", ""));
  Row("attempt", Compact(t["attempt"]));
  Row("worker", t.value("worker_id", "").empty() ? "-" : t.value("worker_id", ""));
  Row("parameters", Compact(t["parameters"]));
  Row("final", t["final"].is_null() ? "-" : Compact(t["final"]));
  Row("intermediate", Compact(t["intermediate_count"]));
  Row("started", TimeText(t["start_time"]));
  Row("ended", TimeText(t["end_time"]));
  if (t["start_time"].is_number()) Row("duration", DurationText(TrialDuration(t)));
  if (!t.value("error", "").empty()) Row("error", t.value("error", ""));
}

// ---------------------------------------------------------------- commands

struct Args {
  GlobalOptions global;
  std::optional<std::string> status_filter;
  uint64_t offset = 0;
  uint64_t limit = 0;
  std::string trial_id;
  std::string output;
  std::string file;
  std::string params;
  std::optional<uint32_t> concurrency;
  std::optional<uint64_t> max_trials;
  std::optional<std::string> max_duration;
  uint64_t count = 0;
  // launch
  tunehost::tunectl::LaunchSpec launch;
  std::string launch_command, launch_cwd, launch_address, worker_key, script_dir;
  bool dry_run = false;
};

int Ping(Host& host, const Args& a) {
  Json d = host.Call(p::Ping{});
  if (a.global.json) {
    PrintJson(d);
  } else {
    std::printf("%s: experiment %s, %s\n", host.endpoint().c_str(),
                d.value("experiment_id", "").empty() ? "-" : d.value("experiment_id", "").c_str(),
                d.value("status", "").c_str());
  }
  return kExitOk;
}

int Status(Host& host, const Args& a) {
  Json d = host.Call(p::GetStatus{});
  a.global.json ? PrintJson(d) : PrintStatus(d);
  return kExitOk;
}

int Trials(Host& host, const Args& a) {
  Json d = host.Call(p::ListTrials{a.status_filter, a.offset, a.limit});
  if (a.global.json) {
    PrintJson(d);
    return kExitOk;
  }
  PrintTrialTable(d["trials"]);
  std::printf("%zu of %s trial(s)%s\n", d["trials"].size(), Compact(d["total"]).c_str(),
              a.status_filter ? (" " + *a.status_filter).c_str() : "");
  return kExitOk;
}

int Trial(Host& host, const Args& a) {
  Json d = host.Call(p::GetTrial{a.trial_id});
  a.global.json ? PrintJson(d) : PrintTrial(d);
  return kExitOk;
}

int Stats(Host& host, const Args& a) {
  Json d = host.Call(p::GetStatistics{});
  if (a.global.json) {
    PrintJson(d);
    return kExitOk;
  }
  std::printf("%-14s %s\n", "STATUS", "COUNT");
  for (const auto& [status, n] : d["counts"].items()) {
    std::printf("%-14s %s\n", status.c_str(), Compact(n).c_str());
  }
  return kExitOk;
}

// Where a worker runs, from what its WH said (tunehost-worker reports its
// host name and, under Slurm or Kubernetes, its job).
std::string WorkerPlace(const Json& extra) {
  std::string place = extra.value("host", "");
  if (extra.contains("slurm_job")) place += " slurm " + extra.value("slurm_job", "");
  if (extra.contains("k8s_pod")) place += " pod " + extra.value("k8s_pod", "");
  return place.empty() ? "-" : place;
}

int Workers(Host& host, const Args& a) {
  Json d = host.Call(p::ListWorkers{});
  if (a.global.json) {
    PrintJson(d);
    return kExitOk;
  }
  std::printf("%-32s %5s %7s %6s %-18s %s\n", "WORKER", "SLOTS", "RUNNING", "SEEN", "KEY",
              "WHERE");
  for (const Json& w : d["workers"]) {
    const Json extra = w.contains("extra") && w["extra"].is_object() ? w["extra"] : Json::object();
    const std::string key = w.value("key", "");
    std::printf("%-32s %5s %7zu %5.1fs %-18s %s\n", w.value("worker_id", "").c_str(),
                Compact(w["slots"]).c_str(), w["running"].size(), w.value("seen_s_ago", 0.0),
                key.empty() ? "-" : key.c_str(), WorkerPlace(extra).c_str());
  }
  std::printf("%zu worker(s)\n", d["workers"].size());
  return kExitOk;
}

int Metrics(Host& host, const Args& a) {
  std::optional<std::string> id;
  if (!a.trial_id.empty()) id = a.trial_id;
  Json d = host.Call(p::GetMetrics{id});
  if (a.global.json) {
    PrintJson(d);
    return kExitOk;
  }
  std::printf("%-10s %-10s %8s %s\n", "TRIAL", "TYPE", "SEQUENCE", "VALUE");
  for (const Json& m : d["metrics"]) {
    std::printf("%-10s %-10s %8s %s\n", m.value("trial_id", "").c_str(),
                m.value("type", "").c_str(), Compact(m["sequence"]).c_str(),
                Compact(m["value"]).c_str());
  }
  return kExitOk;
}

int Export(Host& host, const Args& a) {
  Json d = host.Call(p::ExportData{});
  // The records array is what `import` reads back.
  const Json& out = a.global.json ? d : d["records"];
  if (a.output.empty()) {
    PrintJson(out);
    return kExitOk;
  }
  std::ofstream f(a.output);
  f << out.dump(2) << "\n";
  if (!f) Fail(kExitUsage, "cannot write " + a.output);
  if (!a.global.json) std::printf("exported %zu record(s) to %s\n", d["records"].size(), a.output.c_str());
  return kExitOk;
}

// A record of an import file: {"parameters": {...}, "value": metric} (NNI's
// "parameter" and "trialJobId" are accepted too).
p::ImportRecord ImportRecordFrom(const Json& item, size_t index) {
  const std::string where = "record " + std::to_string(index);
  if (!item.is_object()) Fail(kExitUsage, where + ": expected an object");
  const char* params_key = item.contains("parameters") ? "parameters" : "parameter";
  if (!item.contains(params_key) || !item[params_key].is_object()) {
    Fail(kExitUsage, where + ": \"parameters\" must be an object");
  }
  if (!item.contains("value")) Fail(kExitUsage, where + ": \"value\" is missing");
  p::ImportRecord r;
  r.parameters = Pack(item[params_key]);
  tunehost::Status st = p::ParseMetric(Pack(item["value"]), &r.value);
  if (!st.ok()) Fail(kExitUsage, where + ": " + st.message());
  for (const char* key : {"trial_id", "trialJobId"}) {
    if (item.contains(key) && item[key].is_string()) r.trial_id = item[key].get<std::string>();
  }
  return r;
}

int Import(Host& host, const Args& a) {
  Json records = ReadJsonFile(a.file);
  if (!records.is_array()) Fail(kExitUsage, a.file + ": expected a JSON array of records");
  p::ImportData fd;
  for (size_t i = 0; i < records.size(); ++i) fd.data.push_back(ImportRecordFrom(records[i], i));
  Json d = host.Call(fd);
  if (a.global.json) {
    PrintJson(d);
  } else {
    std::printf("imported %s of %zu record(s)\n", Compact(d["imported"]).c_str(), records.size());
  }
  return kExitOk;
}

int Add(Host& host, const Args& a) {
  Json params = ParseJsonArgument(a.params, "PARAMS_JSON");
  if (!params.is_object()) Fail(kExitUsage, "PARAMS_JSON must be a JSON object");
  Json d = host.Call(p::AddCustomizedTrialJob{Pack(params)});
  if (a.global.json) {
    PrintJson(d);
  } else {
    std::printf("added trial %s (sequence %s)\n", d.value("trial_id", "").c_str(),
                Compact(d["sequence_id"]).c_str());
  }
  return kExitOk;
}

int Update(Host& host, const Args& a) {
  p::UpdateLimits ux;
  ux.concurrency = a.concurrency;
  ux.max_trials = a.max_trials;
  if (a.max_duration) {
    ux.max_duration_s = ParseDurationText(*a.max_duration);
    if (!ux.max_duration_s) {
      Fail(kExitUsage, "--max-duration: \"" + *a.max_duration +
                           "\" is not a duration (30s, 10m, 2h, 1d, seconds; 0 = unlimited)");
    }
  }
  if (!ux.concurrency && !ux.max_trials && !ux.max_duration_s) {
    Fail(kExitUsage, "update: give --concurrency, --max-trials or --max-duration");
  }
  Json d = host.Call(ux);
  a.global.json ? PrintJson(d) : PrintStatus(d);
  return kExitOk;
}

int SearchSpace(Host& host, const Args& a) {
  Json space = ReadJsonFile(a.file);
  if (!space.is_object()) Fail(kExitUsage, a.file + ": a search space is a JSON object");
  Json d = host.Call(p::UpdateSearchSpace{Pack(space)});
  a.global.json ? PrintJson(d) : void(std::printf("search space updated\n"));
  return kExitOk;
}

int Kill(Host& host, const Args& a) {
  Json d = host.Call(p::KillTrial{a.trial_id});
  if (a.global.json) {
    PrintJson(d);
  } else {
    std::printf("trial %s: killed (it ends USER_CANCELED)\n", a.trial_id.c_str());
  }
  return kExitOk;
}

int Stop(Host& host, const Args& a) {
  Json d = host.Call(p::Terminate{});
  a.global.json ? PrintJson(d) : void(std::printf("host %s is stopping\n", host.endpoint().c_str()));
  return kExitOk;
}

std::atomic<bool> g_interrupted{false};
extern "C" void OnInterrupt(int) { g_interrupted.store(true); }

// Prints each experiment event as one JSON line until `count` (0: until
// Ctrl-C). The endpoint comes from ST, so the host must answer first.
int Events(Host& host, const Args& a) {
  Json st = host.Call(p::GetStatus{});
  const std::string endpoint = st["endpoints"].value("events", "");
  zmq::socket_t sub = host.Socket(zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "event.");
  try {
    sub.connect(endpoint);
  } catch (const zmq::error_t& e) {
    Fail(kExitHostError, "cannot connect to events endpoint " + endpoint + ": " + e.what());
  }
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  uint64_t seen = 0;
  while (!g_interrupted.load() && (a.count == 0 || seen < a.count)) {
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    try {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(200)) == 0) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(sub, std::back_inserter(frames), zmq::recv_flags::dontwait) ||
        frames.size() != 2) {
      continue;
    }
    Json envelope = Json::parse(p::PackedToJson(frames[1].to_string_view()), nullptr, false);
    if (envelope.is_discarded() || !envelope.is_object()) continue;
    Json line = {{"topic", frames[0].to_string()},
                 {"type", envelope.value("type", "")},
                 {"id", envelope.value("id", uint64_t{0})},
                 {"body", envelope.contains("body") ? envelope["body"] : Json::object()}};
    std::cout << line.dump() << std::endl;  // flushed: a pipe reader sees it at once
    ++seen;
  }
  return kExitOk;
}

// ---------------------------------------------------------------- launch

// The experiment's host.json, when tunectl found the host through it.
Json HostJson(const GlobalOptions& o) {
  if (o.experiment.empty()) return Json::object();
  const fs::path dir = o.workdir.empty() ? DefaultWorkdir() : fs::path(o.workdir);
  std::ifstream in(dir / o.experiment / "host.json");
  Json j = in ? Json::parse(in, nullptr, false) : Json::object();
  return j.is_object() ? j : Json::object();
}

// Runs `argv` with `input` on its stdin; its stdout in *output. The exit code,
// or -1 when it cannot be started.
int RunTool(const std::vector<std::string>& argv, const std::string& input, std::string* output) {
  int in[2], out[2];
  if (pipe(in) != 0) return -1;
  if (pipe(out) != 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    return -1;
  }
  (void)!write(in[1], input.data(), input.size());
  close(in[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0) output->append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return -1;
  return WEXITSTATUS(status) == 127 ? -1 : WEXITSTATUS(status);
}

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What both engines need: the host as workers reach it, and their keys.
// `key_files`: the workers read the keys from files (Slurm: a shared file
// system), so the host's public key is written to one when only host.json
// has it; otherwise (Kubernetes: a Secret) their text is enough.
tunehost::tunectl::HostView PrepareLaunch(Host& host, Args& a, bool key_files) {
  namespace tl = tunehost::tunectl;
  Json st = host.Call(p::GetStatus{});
  Json info = HostJson(a.global);
  tl::HostView view;
  view.experiment_id = st.value("experiment_id", "");
  const Json endpoints = st.value("endpoints", Json::object());
  view.jobs = tl::WorkerEndpoint(endpoints.value("jobs", ""), a.launch_address);
  view.results = tl::WorkerEndpoint(endpoints.value("results", ""), a.launch_address);
  view.events = tl::WorkerEndpoint(endpoints.value("events", ""), a.launch_address);
  view.trial_command = !a.launch_command.empty() ? a.launch_command
                                                 : info.value("trial_command", "");
  view.trial_dir = !a.launch_cwd.empty() ? a.launch_cwd : info.value("trial_code_directory", "");
  if (a.launch.heartbeat_ms == 0) a.launch.heartbeat_ms = info.value("heartbeat_ms", int64_t{0});
  if (view.trial_command.empty()) {
    Fail(kExitUsage, "the workers need the trial command: give --command (a `tunehost run` "
                     "experiment found with --experiment has it)");
  }
  const std::string server_key = info.value("server_key", "");
  if (!server_key.empty() || !a.global.server_key_file.empty()) {
    if (a.worker_key.empty()) {
      Fail(kExitUsage, "the host authenticates: give the workers' key with --worker-key FILE "
                       "(a .key_secret whose .key is in the host's KEYS/workers/)");
    }
    p::KeyPair worker;
    tunehost::Status s = p::ReadKeyFile(a.worker_key, /*need_secret=*/true, &worker);
    if (!s.ok()) Fail(kExitUsage, s.message());
    a.launch.key_file = fs::absolute(a.worker_key).string();
    a.launch.key_text = ReadWhole(a.worker_key);
    if (!a.global.server_key_file.empty()) {
      a.launch.server_key_file = fs::absolute(a.global.server_key_file).string();
      a.launch.server_key_text = ReadWhole(a.global.server_key_file);
    } else if (!key_files) {
      a.launch.server_key_text = p::PublicCertificate(server_key);
    } else {
      // Only host.json has the host's key: the workers get it as a file.
      const fs::path file = fs::absolute(a.script_dir) / "server.key";
      std::error_code ec;
      fs::create_directories(file.parent_path(), ec);
      fs::remove(file, ec);
      s = p::WritePublicKey(file, server_key);
      if (!s.ok()) Fail(kExitUsage, s.message());
      a.launch.server_key_file = file.string();
      a.launch.server_key_text = ReadWhole(file.string());
    }
  }
  return view;
}

int LaunchSlurm(Host& host, const Args& args) {
  Args a = args;
  if (a.script_dir.empty()) a.script_dir = "tunehost-slurm";
  const tunehost::tunectl::HostView view = PrepareLaunch(host, a, /*key_files=*/true);
  std::error_code ec;
  const fs::path dir = fs::absolute(a.script_dir);
  fs::create_directories(dir, ec);
  a.launch.output_dir = dir.string();
  const std::string script = tunehost::tunectl::SlurmScript(a.launch, view);
  if (a.dry_run) {
    std::cout << script;
    return kExitOk;
  }
  const fs::path file = dir / ("workers-" + view.experiment_id + "-" +
                               std::to_string(std::time(nullptr)) + ".sbatch");
  std::ofstream(file) << script;
  std::string out;
  const int rc = RunTool({"sbatch", "--parsable", file.string()}, "", &out);
  if (rc != 0) {
    Fail(kExitHostError, rc < 0 ? "cannot run sbatch: is Slurm installed here?"
                                : "sbatch failed (exit " + std::to_string(rc) + "); the script "
                                  "is " + file.string());
  }
  const std::string job = out.substr(0, out.find_first_of(";\n"));
  if (a.global.json) {
    std::cout << Json{{"engine", "slurm"}, {"job", job}, {"workers", a.launch.workers},
                      {"script", file.string()}}.dump() << "\n";
  } else {
    std::printf("submitted Slurm job %s: %u worker(s) for experiment %s (script %s, logs in "
                "%s)\n`tunectl workers` shows them; `scancel %s` stops them (their trials go "
                "to other workers)\n",
                job.c_str(), a.launch.workers, view.experiment_id.c_str(), file.c_str(),
                dir.c_str(), job.c_str());
  }
  return kExitOk;
}

int LaunchKubernetes(Host& host, const Args& args) {
  Args a = args;
  if (a.launch.image.empty()) Fail(kExitUsage, "launch k8s needs --image (one with tunehost-worker and the trial code)");
  const tunehost::tunectl::HostView view = PrepareLaunch(host, a, /*key_files=*/false);
  const std::string manifests = tunehost::tunectl::KubernetesManifests(a.launch, view);
  if (a.dry_run) {
    std::cout << manifests;
    return kExitOk;
  }
  std::string out;
  const int rc = RunTool({"kubectl", "apply", "-f", "-"}, manifests, &out);
  if (rc != 0) {
    Fail(kExitHostError, rc < 0 ? "cannot run kubectl: apply the output of --dry-run where "
                                  "kubectl reaches the cluster"
                                : "kubectl apply failed (exit " + std::to_string(rc) + ")");
  }
  std::cout << out;
  return kExitOk;
}

// Writes a new key pair; no host is involved.
int Keygen(const std::string& dir, const std::string& name) {
  p::KeyPair keys;
  tunehost::Status st = p::GenerateKeyPair(&keys);
  if (st.ok()) st = p::WriteKeyPair(dir, name, keys);
  if (!st.ok()) {
    std::cerr << "tunectl: keygen: " << st.message() << "\n";
    return st.code() == tunehost::Status::Code::kUnavailable ? kExitHostError : kExitUsage;
  }
  const fs::path base = fs::path(dir) / name;
  std::cout << "public key  " << base.string() << ".key  (give it to the host: put it in "
            << "KEYS/workers, KEYS/viewers or KEYS/admins)\n"
            << "secret key  " << base.string() << ".key_secret  (0600; this peer's --key)\n";
  return kExitOk;
}

// ---------------------------------------------------------------- main

int Run(int argc, char** argv) {
  CLI::App app{"tunectl: control a running tunehost experiment"};
  app.require_subcommand(1);
  app.fallthrough();  // global options also after the command
  Args a;
  app.add_option("--control", a.global.control,
                 std::string("host control endpoint (default ") + kDefaultControl + ")");
  app.add_option("--experiment", a.global.experiment,
                 "experiment id: the host is found through <workdir>/<id>/host.json");
  app.add_option("--workdir", a.global.workdir,
                 "experiments directory (default ~/tunehost-experiments)");
  app.add_option("--timeout-ms", a.global.timeout_ms, "how long to wait for the host")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--json", a.global.json, "print the reply data as JSON");
  app.add_option("--key", a.global.key_file,
                 "this client's key pair (a .key_secret file) for a host that authenticates "
                 "(default: $TUNEHOST_KEY, used only with hosts that have keys)");
  app.add_option("--server-key", a.global.server_key_file,
                 "the host's public key (a .key file; default: from the experiment's host.json)")
      ->envname("TUNEHOST_SERVER_KEY");

  using Command = int (*)(Host&, const Args&);
  std::vector<std::pair<CLI::App*, Command>> commands;
  auto command = [&](const char* name, const char* help, Command fn) {
    CLI::App* c = app.add_subcommand(name, help);
    commands.emplace_back(c, fn);
    return c;
  };
  command("ping", "ask the host whether it is there (works before an experiment exists)", Ping);
  command("status", "experiment status, limits, trial counts, best trial", Status);
  CLI::App* trials = command("trials", "list trials in sequence order", Trials);
  trials->add_option("--status", a.status_filter, "only trials with this status")
      ->check(CLI::IsMember({"WAITING", "RUNNING", "SUCCEEDED", "FAILED", "USER_CANCELED",
                             "SYS_CANCELED", "EARLY_STOPPED"}));
  trials->add_option("--offset", a.offset, "skip this many matching trials");
  trials->add_option("--limit", a.limit, "show at most this many (0 = all)");
  command("trial", "one trial", Trial)->add_option("ID", a.trial_id, "trial id")->required();
  command("stats", "trial counts by status", Stats);
  command("workers", "the workers the host knows: slots, running trials, key, where they run",
          Workers);
  command("metrics", "metrics of one trial or of all", Metrics)
      ->add_option("ID", a.trial_id, "trial id (default: every trial)");
  command("export", "results of succeeded trials as JSON (import reads it back)", Export)
      ->add_option("--output,-o", a.output, "write to FILE instead of stdout");
  command("import", "give the tuner finished results from a JSON file", Import)
      ->add_option("FILE", a.file, "JSON array of {\"parameters\": {...}, \"value\": metric}")
      ->required();
  command("add", "queue a trial with these parameters", Add)
      ->add_option("PARAMS_JSON", a.params, "a JSON object, or @FILE")
      ->required();
  CLI::App* update = command("update", "change the experiment's limits", Update);
  update->add_option("--concurrency", a.concurrency, "trials at once")->check(CLI::PositiveNumber);
  update->add_option("--max-trials", a.max_trials, "trial budget (0 = unlimited)");
  update->add_option("--max-duration", a.max_duration,
                     "time budget: 30s, 10m, 2h, 1d or seconds (0 = unlimited)");
  command("search-space", "replace the tuner's search space from a JSON file", SearchSpace)
      ->add_option("FILE", a.file, "search space (JSON object)")
      ->required();
  command("kill", "stop one trial (it ends USER_CANCELED)", Kill)
      ->add_option("ID", a.trial_id, "trial id")
      ->required();
  command("stop", "stop the experiment and the host", Stop);
  command("events", "print experiment events as JSON lines", Events)
      ->add_option("--count", a.count, "stop after this many events (0 = until Ctrl-C)");
  CLI::App* launch = app.add_subcommand(
      "launch", "start workers with a cluster's engine, pointed at this host");
  launch->require_subcommand(1);
  auto launch_options = [&](CLI::App* c) {
    c->add_option("--workers", a.launch.workers, "workers to start")
        ->check(CLI::Range(1u, 10000u))
        ->capture_default_str();
    c->add_option("--slots", a.launch.slots, "trials each worker runs at once")
        ->check(CLI::Range(1u, 1024u))
        ->capture_default_str();
    c->add_option("--gpus-per-worker", a.launch.gpus, "GPUs each worker asks for")
        ->check(CLI::Range(0u, 1024u));
    c->add_option("--command", a.launch_command,
                  "trial command (default: the experiment's, from its host.json)");
    c->add_option("--cwd", a.launch_cwd, "trial directory on the workers' machines");
    c->add_option("--host", a.launch_address,
                  "address the workers reach the host at (default: its bound address; this "
                  "machine's name for a wildcard bind)");
    c->add_option("--worker-key", a.worker_key,
                  "the workers' key pair (a .key_secret whose .key is in the host's "
                  "KEYS/workers/)");
    c->add_option("--worker-bin", a.launch.worker_bin, "tunehost-worker on the workers' side")
        ->capture_default_str();
    c->add_option("--max-idle-ms", a.launch.max_idle_ms,
                  "a worker with no trial this long exits")
        ->capture_default_str();
    c->add_option("--heartbeat-ms", a.launch.heartbeat_ms,
                  "the host's worker heartbeat interval (default: from the experiment's "
                  "host.json, else the worker's 1000)")
        ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
    c->add_flag("--dry-run", a.dry_run, "print what would be submitted, submit nothing");
  };
  CLI::App* slurm = launch->add_subcommand("slurm", "an sbatch job array of tunehost-workers");
  launch_options(slurm);
  slurm->add_option("--partition", a.launch.partition, "Slurm partition");
  slurm->add_option("--time", a.launch.time, "Slurm time limit (e.g. 4:00:00)");
  slurm->add_option("--cpus-per-worker", a.launch.cpus_per_worker, "Slurm --cpus-per-task");
  slurm->add_option("--sbatch-arg", a.launch.sbatch_args,
                    "any other sbatch option, as an #SBATCH line (repeatable)");
  slurm->add_option("--script-dir", a.script_dir,
                    "where the script and the workers' logs go (default ./tunehost-slurm)");
  CLI::App* k8s = launch->add_subcommand("k8s", "a Kubernetes Indexed Job of tunehost-workers");
  launch_options(k8s);
  k8s->add_option("--image", a.launch.image, "container image with tunehost-worker and the "
                                             "trial code");
  k8s->add_option("--name", a.launch.name, "Job name (default tunehost-<experiment>)");
  k8s->add_option("--namespace", a.launch.ns, "Kubernetes namespace")->capture_default_str();
  commands.emplace_back(slurm, LaunchSlurm);
  commands.emplace_back(k8s, LaunchKubernetes);
  std::string keygen_name, keygen_dir = ".";
  CLI::App* keygen = app.add_subcommand(
      "keygen", "write a CURVE key pair: DIR/NAME.key (public) and DIR/NAME.key_secret (0600)");
  keygen->add_option("NAME", keygen_name, "key name (a plain file name)")->required();
  keygen->add_option("--dir", keygen_dir, "where to write it (created 0700 if missing)")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (keygen->parsed()) return Keygen(keygen_dir, keygen_name);
  if (a.global.key_file.empty()) {
    if (const char* env = std::getenv("TUNEHOST_KEY"); env != nullptr && *env != '\0') {
      a.global.key_file = env;
      a.global.key_from_environment = true;
    }
  }
  try {
    const HostAddress address = FindHost(a.global);
    Host host(address.control, a.global.timeout_ms, KeysFor(a.global, address));
    for (const auto& [cmd, fn] : commands) {
      if (cmd->parsed()) return fn(host, a);
    }
    return kExitUsage;
  } catch (const Failure& f) {
    std::cerr << "tunectl: " << f.message << "\n";
    return f.code;
  } catch (const std::exception& e) {
    std::cerr << "tunectl: " << e.what() << "\n";
    return kExitHostError;
  }
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }

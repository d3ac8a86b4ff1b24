// tunectl's commands: one control request each (wire-format.md §4.2), its
// reply printed as a table for people or, with --json, as JSON for scripts.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include <zmq_addon.hpp>

#include "tunectl.h"

namespace tunehost::tunectl {

namespace {

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
  if (const Json& named = s["objectives"]; named.is_object()) {
    // Several objectives (wire-format.md §4.2, ST): no one best trial.
    auto text_of = [](const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    std::string text;
    for (const auto& [key, direction] : named.items()) {
      text += (text.empty() ? "" : ", ") + key + " (" + text_of(direction) + ")";
    }
    Row("objectives", text);
    std::string constraints;
    if (const Json& named_constraints = s["constraints"]; named_constraints.is_array()) {
      for (const Json& c : named_constraints) {
        constraints += (constraints.empty() ? "" : ", ") + text_of(c) + " <= 0";
      }
    }
    if (!constraints.empty()) Row("constraints", constraints);
  } else {
    Row("best", best.is_object() ? best.value("trial_id", "") + " (#" +
                                       Compact(best["sequence_id"]) + ") " +
                                       Compact(best["metric"])
                                 : "-");
    Row("optimize mode", s.value("optimize_mode", ""));
  }
  if (const Json& front = s["pareto_front"]; front.is_array()) {
    // Several objectives (wire-format.md §4.2, ST): every trial on the front.
    const Json& size = s["pareto_front_size"];
    const std::string total = size.is_number_unsigned() && size.get<uint64_t>() > front.size()
                                  ? std::to_string(size.get<uint64_t>())
                                  : std::to_string(front.size());
    Row("pareto front", total + " trial(s)" +
                            (total != std::to_string(front.size())
                                 ? " (the first " + std::to_string(front.size()) + " listed)"
                                 : ""));
    for (const Json& t : front) {
      Row("", t.value("trial_id", "") + " (#" + Compact(t["sequence_id"]) + ") " +
                  t["result"].dump(-1, ' ', false, Json::error_handler_t::replace));
    }
  }
  const Json& ep = s["endpoints"];
  for (const char* name : {"control", "jobs", "results", "events"}) {
    if (!ep.value(name, "").empty()) Row((std::string(name) + " ep").c_str(), ep.value(name, ""));
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

// A CSV field (RFC 4180): strings as they are, other values as compact
// JSON; quoted when it holds a comma, a quote or a line break.
std::string CsvField(const Json& v) {
  std::string text = v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump();
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// Export records as CSV: trial_id, one column per parameter, the value (a
// dict metric's "default"), then a column per other key of dict metrics.
std::string ExportCsv(const Json& records) {
  std::vector<std::string> params, extra;
  auto add = [](std::vector<std::string>* keys, const std::string& k) {
    if (std::find(keys->begin(), keys->end(), k) == keys->end()) keys->push_back(k);
  };
  for (const Json& r : records) {
    for (const auto& [k, v] : r["parameters"].items()) add(&params, k);
    if (r["value"].is_object()) {
      for (const auto& [k, v] : r["value"].items()) {
        if (k != "default") add(&extra, k);
      }
    }
  }
  std::string out = "trial_id";
  for (const std::string& k : params) out += "," + CsvField(k);
  out += ",value";
  for (const std::string& k : extra) out += "," + CsvField("value." + k);
  out += "\n";
  for (const Json& r : records) {
    out += CsvField(r.value("trial_id", ""));
    for (const std::string& k : params) {
      out += "," + (r["parameters"].contains(k) ? CsvField(r["parameters"][k]) : "");
    }
    const Json& v = r["value"];
    out += "," + CsvField(v.is_object() ? v.value("default", Json()) : v);
    for (const std::string& k : extra) {
      out += "," + (v.is_object() && v.contains(k) ? CsvField(v[k]) : "");
    }
    out += "\n";
  }
  return out;
}

}  // namespace

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
  const std::string text = a.csv ? ExportCsv(d["records"]) : out.dump(2) + "\n";
  if (a.output.empty()) {
    std::cout << text;
    return kExitOk;
  }
  std::ofstream f(a.output);
  f << text;
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

}  // namespace tunehost::tunectl

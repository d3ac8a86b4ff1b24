// Host benchmarks, each printed as a ratio against a baseline measured in the
// same run on the same machine. This machine's speed drifts by up to x2 within
// seconds, so targets 1 and 2 interleave baseline and subjects: they take
// turns in rounds (ingest) or sample by sample (dispatch).
//
//  1. ingest: metrics/s the host accepts (decode, engine, ack) from one
//     worker, without and with the SQLite experiment store (what `tunehost
//     run` uses), vs raw ZeroMQ PUSH/PULL of the same bytes with a
//     MessagePack decode.
//  2. dispatch latency: a worker frees a slot (TrialEnd) -> the next
//     NewTrialJob arrives, without and with the store, prefetch 0 and 1, vs a
//     raw DEALER/ROUTER round trip.
//  3. per-trial host cost at growing trial counts in this loop (flat is the
//     goal; target 3 proper is measured through the binaries by scale.py).
//  4. fleets of 16 to 1000 one-slot workers: offers per trial and makespan
//     against the ideal, with offers through the jobs socket's round robin
//     and addressed to free workers (wire-format.md §5.2); "most" is the
//     most trials one worker ran, "join" when the last worker to get an
//     offer got its first (late joins stretch the makespan).
// Each target of DESIGN.md / the hot-path work is printed with met/NOT MET.
//
// Usage: tunehost-bench [--plugins DIR] [--metrics N] [--trials N] [--fleets 16,64,256,1000]
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "bench_host.h"
#include "fleet_bench.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/server.h"
#include "tunehost/host/store.h"
#include "tunehost/protocol/codec.h"

namespace {

using namespace tunehost::bench;  // NOLINT: the bench's own helpers

p::ReportMetricData MetricFor(const std::string& trial, uint64_t seq) {
  p::ReportMetricData m;
  m.trial_id = trial;
  m.attempt = 0;
  m.parameter_id = int64_t{0};
  m.type = p::MetricType::kPeriodical;
  m.sequence = seq;
  m.value.raw = p::PackDouble(0.5 + 1e-9 * static_cast<double>(seq));
  m.value.scalar = 0.5;
  m.worker_id = "bench-worker-000001";
  return m;
}

// Baseline 1: PUSH -> PULL of the same encoded metric messages, decoded with
// msgpack. Each end has its own context (its own I/O thread), as a worker and
// the host in two processes have. The pair lives across rounds.
class RawIngestPair {
 public:
  RawIngestPair()
      : ctx_(1),
        other_(1),
        pull_(ctx_, zmq::socket_type::pull),
        push_(other_, zmq::socket_type::push) {
    pull_.bind("tcp://127.0.0.1:*");
    push_.set(zmq::sockopt::sndhwm, 0);
    push_.connect(pull_.get(zmq::sockopt::last_endpoint));
  }

  // Messages per second for one round of `msgs`, sent from a thread of its own.
  double Round(const std::vector<std::string>& msgs) {
    auto start = Clock::now();
    std::thread sender([&] {
      for (const auto& m : msgs) push_.send(zmq::buffer(m), zmq::send_flags::none);
    });
    double sum = 0;
    for (size_t i = 0; i < msgs.size(); ++i) {
      zmq::message_t msg;
      (void)pull_.recv(msg);
      msgpack::object_handle oh = msgpack::unpack(static_cast<const char*>(msg.data()), msg.size());
      sum += oh.get().via.map.size;
    }
    double secs = Seconds(Clock::now() - start);
    sender.join();  // the push socket moves between threads only across a join
    if (sum < 0) std::puts("");
    return static_cast<double>(msgs.size()) / secs;
  }

 private:
  zmq::context_t ctx_, other_;
  zmq::socket_t pull_, push_;
};

// A worker played by the benchmark, with real sockets.
class FakeWorker {
 public:
  FakeWorker(zmq::context_t& ctx, const th::Endpoints& ep, const std::string& id)
      : id_(id),
        jobs_(ctx, zmq::socket_type::pull),
        results_(ctx, zmq::socket_type::push),
        events_(ctx, zmq::socket_type::sub) {
    jobs_.set(zmq::sockopt::rcvhwm, 1);
    jobs_.connect(ep.jobs);
    results_.set(zmq::sockopt::sndhwm, 0);
    results_.connect(ep.results);
    events_.set(zmq::sockopt::subscribe, "worker." + id + ".");
    events_.set(zmq::sockopt::rcvhwm, 0);
    events_.connect(ep.events);
  }

  void Send(p::Body body) {
    std::string bytes = p::Encode(++next_, std::move(body));
    results_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }
  void SendRaw(const std::string& bytes) {
    results_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }

  void Hello(uint32_t slots) {
    p::WorkerHello h;
    h.worker_id = id_;
    h.slots = slots;
    h.resources.extra = p::EmptyMap();
    h.acks = p::WorkerHello::kAckSpans;
    Send(h);
  }

  std::optional<p::NewTrialJob> NextJob(int timeout_ms = 10000) {
    zmq::pollitem_t item{jobs_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) == 0) return std::nullopt;
    zmq::message_t msg;
    (void)jobs_.recv(msg);
    p::Message m;
    if (!p::Decode(msg.to_string_view(), &m).ok()) return std::nullopt;
    return std::get<p::NewTrialJob>(m.body);
  }

  // Waits for a MetricAck that covers the given sequence (this worker takes
  // spans, wire-format.md §5.2).
  bool AwaitAck(uint64_t seq, int timeout_ms = 60000) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      zmq::pollitem_t item{events_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      std::vector<zmq::message_t> frames;
      (void)zmq::recv_multipart(events_, std::back_inserter(frames));
      p::Message m;
      if (!p::Decode(frames.at(1).to_string_view(), &m).ok()) continue;
      if (auto* a = std::get_if<p::MetricAck>(&m.body); a && a->Covers(seq)) return true;
    }
    return false;
  }

  // A trial as a worker runs it (wire-format.md §5.3): started, its FINAL
  // result, and once that is acknowledged, its end.
  void RunTrialUntilEnd(const p::NewTrialJob& job) {
    Send(p::TrialStarted{id_, job.trial_id, job.attempt, job.lease});
    p::ReportMetricData m = MetricFor(job.trial_id, 0);
    m.type = p::MetricType::kFinal;
    m.worker_id = id_;
    Send(m);
    if (!AwaitAck(0)) throw std::runtime_error("FINAL not acknowledged");
  }
  void EndTrial(const p::NewTrialJob& job) {
    Send(p::TrialEnd{job.trial_id, job.attempt, p::TrialStatus::kSucceeded, "", id_});
  }

 private:
  std::string id_;
  zmq::socket_t jobs_, results_, events_;
  uint64_t next_ = 0;
};

// One worker running one trial that reports results as fast as it can; the
// host lives across rounds, so its store and the trial's history grow as in
// a long trial.
class IngestProbe {
 public:
  IngestProbe(const std::string& plugins, bool with_store)
      : host_(plugins, 1, with_store), ctx_(1), w_(ctx_, host_.server->bound(), kWorker) {
    w_.Hello(1);
    auto job = w_.NextJob();
    if (!job) throw std::runtime_error("no job");
    trial_ = job->trial_id;
    w_.Send(p::TrialStarted{kWorker, job->trial_id, job->attempt});
  }

  // Results per second for one round of `n` results, from the first sent to
  // the acknowledgement of the last (after its commit, with the store).
  double Round(size_t n) {
    std::vector<std::string> msgs;
    msgs.reserve(n);
    for (size_t i = 0; i < n; ++i)
      msgs.push_back(p::Encode(++envelope_, MetricFor(trial_, seq_++)));
    auto start = Clock::now();
    for (const auto& m : msgs) w_.SendRaw(m);
    // Acks travel on PUB, which drops when its queue is full (best effort, as
    // the wire format says); a worker resends what was not acknowledged after
    // its ack timeout, and so does the bench (the host counts a duplicate once).
    bool acked = false;
    for (int attempt = 0; attempt < 60 && !acked; ++attempt) {
      acked = w_.AwaitAck(seq_ - 1, 1000);
      if (!acked) w_.SendRaw(msgs.back());
    }
    if (!acked) throw std::runtime_error("last metric never acknowledged");
    return static_cast<double>(n) / Seconds(Clock::now() - start);
  }

 private:
  static constexpr const char* kWorker = "bench-worker-000001";
  HostUnderTest host_;
  zmq::context_t ctx_;
  FakeWorker w_;
  std::string trial_;
  uint64_t seq_ = 0, envelope_ = 1000;
};

struct Latency {
  double mean = 0, p50 = 0, p99 = 0;  // seconds
};

Latency Summarize(std::vector<double> samples) {
  Latency l;
  if (samples.empty()) return l;
  std::sort(samples.begin(), samples.end());
  for (double v : samples) l.mean += v;
  l.mean /= static_cast<double>(samples.size());
  l.p50 = samples[samples.size() / 2];
  l.p99 = samples[std::min(samples.size() - 1, samples.size() * 99 / 100)];
  return l;
}

// Baseline 2: a DEALER/ROUTER round trip with a msgpack decode at the far
// end. Each end has its own context, so its own I/O thread, as a host and a
// worker in two processes do.
class RawRoundTripProbe {
 public:
  RawRoundTripProbe()
      : ctx_(1),
        other_(1),
        router_(ctx_, zmq::socket_type::router),
        dealer_(other_, zmq::socket_type::dealer),
        payload_(p::Encode(1, MetricFor("T00000", 0))) {
    router_.bind("tcp://127.0.0.1:*");
    dealer_.connect(router_.get(zmq::sockopt::last_endpoint));
    echo_ = std::thread([this] {
      for (;;) {
        std::vector<zmq::message_t> frames;
        (void)zmq::recv_multipart(router_, std::back_inserter(frames));
        if (frames.size() != 2 || frames[1].size() == 0) return;  // the stop message
        msgpack::object_handle oh =
            msgpack::unpack(static_cast<const char*>(frames[1].data()), frames[1].size());
        zmq::send_multipart(router_, frames);
      }
    });
    (void)Sample();  // warm-up: the connection is up
  }
  ~RawRoundTripProbe() {
    dealer_.send(zmq::message_t(), zmq::send_flags::none);
    echo_.join();
  }

  double Sample() {
    zmq::message_t reply;
    auto start = Clock::now();
    dealer_.send(zmq::buffer(payload_), zmq::send_flags::none);
    (void)dealer_.recv(reply);
    return Seconds(Clock::now() - start);
  }

 private:
  zmq::context_t ctx_, other_;
  zmq::socket_t router_, dealer_;
  std::string payload_;
  std::thread echo_;
};

// One 1-slot worker and a host with the random tuner: a sample runs a trial
// until its FINAL is acknowledged, then times its end (EN sent, as §5.3 asks
// of a worker) to the next job in the worker's hands.
class DispatchProbe {
 public:
  DispatchProbe(const std::string& plugins, size_t trials, bool with_store, uint32_t prefetch)
      : host_(plugins, trials + 1 + prefetch, with_store, 1, std::chrono::milliseconds(60000),
              std::chrono::milliseconds(60000), prefetch),
        ctx_(1),
        w_(ctx_, host_.server->bound(), "bench-worker-000001") {
    w_.Hello(1);
    job_ = w_.NextJob();
    if (!job_) throw std::runtime_error("no job");
  }

  double Sample() {
    w_.RunTrialUntilEnd(*job_);
    auto start = Clock::now();
    w_.EndTrial(*job_);
    job_ = w_.NextJob();
    if (!job_) throw std::runtime_error("no next job");
    return Seconds(Clock::now() - start);
  }

 private:
  HostUnderTest host_;
  zmq::context_t ctx_;
  FakeWorker w_;
  std::optional<p::NewTrialJob> job_;
};

Latency HostDispatch(const std::string& plugins, size_t trials) {
  DispatchProbe probe(plugins, trials, false, 0);
  std::vector<double> samples;
  samples.reserve(trials);
  for (size_t i = 0; i < trials; ++i) samples.push_back(probe.Sample());
  return Summarize(std::move(samples));
}

}  // namespace


// CPU time from /proc, to tell how much of the machine other processes used
// while the targets ran: two cores shared with a build or a test run measure
// the scheduler, not the host (ratios then drift toward 1).
struct CpuTimes {
  double busy = 0, total = 0, ours = 0;  // clock ticks
};

CpuTimes ReadCpuTimes() {
  CpuTimes t;
  if (std::FILE* f = std::fopen("/proc/stat", "r")) {
    unsigned long long v[8] = {};
    if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                    &v[4], &v[5], &v[6], &v[7]) == 8) {
      for (unsigned long long x : v) t.total += static_cast<double>(x);
      t.busy = t.total - static_cast<double>(v[3] + v[4]);  // less idle and iowait
    }
    std::fclose(f);
  }
  if (std::FILE* f = std::fopen("/proc/self/stat", "r")) {
    char buf[1024] = "";
    if (std::fgets(buf, sizeof buf, f) != nullptr) {
      // Fields 14 and 15 (utime, stime) follow the command name in parentheses.
      const char* rest = std::strrchr(buf, ')');
      unsigned long long utime = 0, stime = 0;
      if (rest != nullptr &&
          std::sscanf(rest + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                      &stime) == 2) {
        t.ours = static_cast<double>(utime + stime);
      }
    }
    std::fclose(f);
  }
  return t;
}

// The share of the machine's CPU time that other processes took since `since`.
double OthersShare(const CpuTimes& since) {
  const CpuTimes now = ReadCpuTimes();
  const double total = now.total - since.total;
  if (total <= 0) return 0;
  return std::max(0.0, (now.busy - since.busy) - (now.ours - since.ours)) / total;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Target 1. This machine's speed drifts by up to x2 within seconds, so a
// baseline taken before its subject says little about their ratio: the
// baseline and the two hosts take turns (their order rotating) in each of
// `kRounds` rounds, each round gives a ratio to that round's raw figure, and
// the verdict is on the median of those ratios.
void IngestTarget(const std::string& plugins, size_t metrics) {
  constexpr size_t kRounds = 10;
  const size_t per_round = std::max<size_t>(1, metrics / kRounds);
  std::vector<std::string> raw_msgs;
  raw_msgs.reserve(per_round);
  for (size_t i = 0; i < per_round; ++i)
    // Sequences of the size most of the host's rounds send (over 2^16).
    raw_msgs.push_back(p::Encode(100000 + i, MetricFor("T00000", 100000 + i)));
  RawIngestPair raw;
  IngestProbe host(plugins, false), stored(plugins, true);
  // Warm-up, not counted: connections, first allocations, the store's first pages.
  const size_t warm = std::max<size_t>(1, per_round / 10);
  (void)raw.Round(std::vector<std::string>(raw_msgs.begin(),
                                           raw_msgs.begin() + static_cast<std::ptrdiff_t>(warm)));
  (void)host.Round(warm);
  (void)stored.Round(warm);
  std::vector<double> rate[3], ratio[2];
  for (size_t r = 0; r < kRounds; ++r) {
    double got[3] = {0, 0, 0};
    for (size_t k = 0; k < 3; ++k) {
      const size_t who = (r + k) % 3;
      got[who] = who == 0   ? raw.Round(raw_msgs)
                 : who == 1 ? host.Round(per_round)
                            : stored.Round(per_round);
    }
    for (size_t who = 0; who < 3; ++who) rate[who].push_back(got[who]);
    ratio[0].push_back(got[1] / got[0]);
    ratio[1].push_back(got[2] / got[0]);
  }
  std::printf(
      "target 1: metric ingest, %zu ME of %zu B from one worker in %zu rounds of %zu; in each "
      "round the raw baseline and the two hosts take turns\n",
      per_round * kRounds, raw_msgs[per_round / 2].size(), kRounds, per_round);
  std::printf("  %-42s %12s   %s\n", "", "median msg/s",
              "ratio to the same round's raw: median [min, max]");
  std::printf("  %-42s %12.0f\n", "raw ZeroMQ PUSH/PULL + msgpack decode", Median(rate[0]));
  auto row = [&](const char* name, size_t who, double goal) {
    const auto& q = ratio[who - 1];
    const double median = Median(q);
    std::printf("  %-42s %12.0f   x%.2f [x%.2f, x%.2f]   goal >= %.2f: %s\n", name,
                Median(rate[who]), median, *std::min_element(q.begin(), q.end()),
                *std::max_element(q.begin(), q.end()), goal, Verdict(median >= goal));
  };
  row("tunehost, no store", 1, 0.8);
  row("tunehost, SQLite store, ack after commit", 2, 0.5);
  std::printf("\n");
}

// Target 2, interleaved the same way at a finer grain: one raw round trip,
// then one dispatch of each host configuration, `trials` times, so every
// configuration sees the same moments of the machine. p50 and p99 are over
// all samples; the block column gives the spread of the p50 ratio over
// blocks of 200 turns.
void DispatchTarget(const std::string& plugins, size_t trials) {
  struct Subject {
    const char* name;
    bool with_store;
    uint32_t prefetch;
  };
  const Subject subjects[] = {{"tunehost, no store", false, 0},
                              {"tunehost, SQLite store", true, 0},
                              {"tunehost, no store, prefetch 1", false, 1},
                              {"tunehost, SQLite store, prefetch 1", true, 1}};
  constexpr size_t kN = sizeof(subjects) / sizeof(subjects[0]);
  constexpr size_t kBlock = 200;
  RawRoundTripProbe raw;
  std::vector<std::unique_ptr<DispatchProbe>> probes;
  for (const Subject& s : subjects) {
    probes.push_back(std::make_unique<DispatchProbe>(plugins, trials, s.with_store, s.prefetch));
  }
  std::vector<double> raw_samples;
  std::vector<std::vector<double>> samples(kN);
  for (size_t i = 0; i < trials; ++i) {
    raw_samples.push_back(raw.Sample());
    for (size_t k = 0; k < kN; ++k) {
      const size_t who = (i + k) % kN;
      samples[who].push_back(probes[who]->Sample());
    }
  }
  const Latency rtt = Summarize(raw_samples);
  std::printf(
      "target 2: worker free (EN) -> next TR in its hands, %zu trials each (random tuner, one "
      "1-slot worker); a raw round trip and one dispatch of each host take turns\n",
      trials);
  std::printf("  %-36s %8s %8s %8s   %-34s %s\n", "", "mean us", "p50 us", "p99 us",
              "p50 ratio [blocks of 200: min, max]", "p99 ratio");
  std::printf("  %-36s %8.1f %8.1f %8.1f\n", "raw DEALER/ROUTER round trip", rtt.mean * 1e6,
              rtt.p50 * 1e6, rtt.p99 * 1e6);
  bool within[kN];
  for (size_t k = 0; k < kN; ++k) {
    const Latency l = Summarize(samples[k]);
    double lo = 1e300, hi = 0;
    for (size_t b = 0; b + kBlock <= trials; b += kBlock) {
      auto slice = [&](const std::vector<double>& v) {
        return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(b),
                                   v.begin() + static_cast<std::ptrdiff_t>(b + kBlock));
      };
      const double q = Median(slice(samples[k])) / Median(slice(raw_samples));
      lo = std::min(lo, q);
      hi = std::max(hi, q);
    }
    char blocks[64] = "";
    if (hi > 0) std::snprintf(blocks, sizeof blocks, "[x%.2f, x%.2f]", lo, hi);
    std::printf("  %-36s %8.1f %8.1f %8.1f   x%-5.2f %-27s x%.2f\n", subjects[k].name, l.mean * 1e6,
                l.p50 * 1e6, l.p99 * 1e6, l.p50 / rtt.p50, blocks, l.p99 / rtt.p99);
    within[k] = l.p50 <= 2 * rtt.p50 && l.p99 <= 2 * rtt.p99;
  }
  std::printf(
      "  with the store, p50 and p99 <= 2x raw: prefetch 1: %s; prefetch 0 (the default, "
      "NNI's order: the tuner hears the result before it suggests): %s\n\n",
      Verdict(within[3]), Verdict(within[1]));
}

int main(int argc, char** argv) {
  std::string plugins = TH_DEFAULT_PLUGIN_DIR;
  size_t metrics = 200000, trials = 2000, trials_per_worker = 5;
  std::vector<size_t> fleets = {16, 64, 256, 1000};
  std::string only;  // "1", "2", "3" or "4": one target alone (for profiling)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--plugins") == 0) plugins = argv[i + 1];
    if (std::strcmp(argv[i], "--metrics") == 0) metrics = std::stoul(argv[i + 1]);
    if (std::strcmp(argv[i], "--trials") == 0) trials = std::stoul(argv[i + 1]);
    if (std::strcmp(argv[i], "--fleets") == 0) {
      fleets.clear();
      std::string list = argv[i + 1];
      for (size_t pos = 0; pos < list.size();) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        fleets.push_back(std::stoul(list.substr(pos, comma - pos)));
        pos = comma + 1;
      }
    }
  }
  spdlog::set_level(spdlog::level::warn);
  // A thousand workers hold three sockets each, and the host one connection
  // per socket: far more descriptors than the default soft limit.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  try {
    auto runs = [&](const char* target) { return only.empty() || only == target; };
    const CpuTimes before = ReadCpuTimes();
    if (runs("1")) IngestTarget(plugins, metrics);
    if (runs("2")) DispatchTarget(plugins, trials);
    const double others = OthersShare(before);
    std::printf("other processes took %.0f%% of the machine's CPU during targets 1 and 2%s\n\n",
                100 * others,
                others > 0.05 ? ": the figures above are not evidence, run again on an idle "
                                "machine"
                              : "");

    if (!only.empty() && only != "3" && only != "4") return 0;
    if (runs("3")) std::printf(
        "EN -> next TR (no store) in this loop by trial count (per-trial host cost, "
        "target 3, is measured through the binaries: tools/bench/scale.py)\n");
    double first = 0;
    for (size_t n : {size_t{1000}, size_t{4000}, size_t{16000}}) {
      if (!runs("3")) break;
      double per = HostDispatch(plugins, n).mean;
      if (first == 0) first = per;
      std::printf("  %6zu trials: %8.1f us/trial   (x%.2f of 1000)\n", n, per * 1e6, per / first);
    }

    if (!runs("4")) return 0;
    FleetTarget(plugins, fleets, trials_per_worker);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tunehost-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

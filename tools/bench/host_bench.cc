// Host benchmarks, each printed as a ratio against a baseline measured in the
// same run on the same machine (timings here are noisy; ratios are not):
//
//  1. ingest: metrics/s the host accepts (decode, engine, ack) from one worker
//     vs raw ZeroMQ PUSH/PULL of the same bytes with a MessagePack decode.
//  2. dispatch latency: a worker frees a slot (TrialEnd) -> the next
//     NewTrialJob arrives, vs a raw DEALER/ROUTER round trip.
//  3. per-trial host cost at growing trial counts (flat is the goal).
//  4. the same ingest and dispatch with the SQLite experiment store (what
//     `tunehost run` uses), against the host without it.
//  5. fleets of 16 to 1000 one-slot workers: offers per trial and makespan
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

#include "tunehost/host/plugin.h"
#include "tunehost/host/server.h"
#include "tunehost/host/store.h"
#include "tunehost/protocol/codec.h"

namespace {

namespace p = tunehost::protocol;
namespace th = tunehost::host;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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
// msgpack. With `own_contexts` each end has its own context (its own I/O
// thread), as a worker and the host in two processes have; with one context
// (the figure this benchmark printed first) one I/O thread serves both ends.
double RawIngest(size_t n, size_t* bytes_per_msg, bool own_contexts) {
  zmq::context_t ctx(1), other(1);
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  pull.bind("tcp://127.0.0.1:*");
  std::string ep = pull.get(zmq::sockopt::last_endpoint);
  std::vector<std::string> msgs;
  msgs.reserve(n);
  for (size_t i = 0; i < n; ++i) msgs.push_back(p::Encode(i + 1, MetricFor("T00000", i)));
  *bytes_per_msg = msgs[n / 2].size();
  std::thread sender([&] {
    zmq::socket_t push(own_contexts ? other : ctx, zmq::socket_type::push);
    push.set(zmq::sockopt::sndhwm, 0);
    push.connect(ep);
    for (const auto& m : msgs) push.send(zmq::buffer(m), zmq::send_flags::none);
    push.set(zmq::sockopt::linger, -1);
  });
  auto start = Clock::now();
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    zmq::message_t msg;
    (void)pull.recv(msg);
    msgpack::object_handle oh = msgpack::unpack(static_cast<const char*>(msg.data()), msg.size());
    sum += oh.get().via.map.size;
  }
  double secs = Seconds(Clock::now() - start);
  sender.join();
  if (sum < 0) std::puts("");
  return static_cast<double>(n) / secs;
}

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

// A fresh store file in the temporary directory, removed at exit.
class TempStore {
 public:
  TempStore() {
    dir_ = std::filesystem::temp_directory_path() /
           ("tunehost-bench-" + std::to_string(getpid()) + "-" + std::to_string(++count_));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    tunehost::Status st = th::Store::Open(dir_ / "store.db", th::Store::Mode::kCreate, &store_);
    if (!st.ok()) throw std::runtime_error(st.ToString());
  }
  ~TempStore() {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  th::Store* get() { return store_.get(); }

 private:
  static inline int count_ = 0;
  std::filesystem::path dir_;
  std::unique_ptr<th::Store> store_;
};

struct HostUnderTest {
  th::PluginRegistry registry;
  std::unique_ptr<TempStore> store;
  std::unique_ptr<th::Server> server;
  std::thread loop;

  // The default heartbeat and ack timeout keep liveness out of the figures;
  // the fleet benchmark gives the real ones.
  HostUnderTest(const std::string& plugins, uint64_t max_trials, bool with_store,
                uint32_t concurrency = 1,
                std::chrono::milliseconds heartbeat = std::chrono::milliseconds(60000),
                std::chrono::milliseconds ack_timeout = std::chrono::milliseconds(60000),
                uint32_t prefetch = 0) {
    registry.LoadDirectory(plugins);
    th::ServerOptions o;
    o.prefetch = prefetch;
    o.endpoints = {"tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                   "tcp://127.0.0.1:*"};
    o.heartbeat_interval = heartbeat;
    o.ack_timeout = ack_timeout;
    server = std::make_unique<th::Server>(o, &registry);
    if (!server->Bind().ok()) throw std::runtime_error("bind failed");
    if (with_store) {
      store = std::make_unique<TempStore>();
      server->UseStore(store->get());
    }
    p::ExperimentSpec spec;
    spec.id = "bench";
    spec.tuner.name = "random";
    (void)p::JsonToPacked("{\"seed\": 1}", &spec.tuner.args);
    spec.concurrency = concurrency;
    spec.max_trials = max_trials;
    p::Packed space;
    (void)p::JsonToPacked(R"({"x": {"_type": "uniform", "_value": [0, 1]}})", &space);
    tunehost::Status st = server->Configure(spec, space);
    if (!st.ok()) throw std::runtime_error(st.ToString());
    loop = std::thread([this] { (void)server->Run(); });
  }
  ~HostUnderTest() { Stop(); }
  void Stop() {
    server->Stop();
    if (loop.joinable()) loop.join();
  }
};

double HostIngest(const std::string& plugins, size_t n, bool with_store) {
  HostUnderTest host(plugins, 1, with_store);
  zmq::context_t ctx(1);
  FakeWorker w(ctx, host.server->bound(), "bench-worker-000001");
  w.Hello(1);
  auto job = w.NextJob();
  if (!job) throw std::runtime_error("no job");
  w.Send(p::TrialStarted{"bench-worker-000001", job->trial_id, job->attempt});
  std::vector<std::string> msgs;
  msgs.reserve(n);
  for (size_t i = 0; i < n; ++i) msgs.push_back(p::Encode(i + 100, MetricFor(job->trial_id, i)));
  auto start = Clock::now();
  for (const auto& m : msgs) w.SendRaw(m);
  // Acks travel on PUB, which drops when its queue is full (best effort, as
  // the wire format says); a worker resends what was not acknowledged after
  // its ack timeout, and so does the bench (the host counts a duplicate once).
  bool acked = false;
  for (int attempt = 0; attempt < 60 && !acked; ++attempt) {
    acked = w.AwaitAck(n - 1, 1000);
    if (!acked) w.SendRaw(msgs.back());
  }
  if (!acked) throw std::runtime_error("last metric never acknowledged");
  return static_cast<double>(n) / Seconds(Clock::now() - start);
}

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

// A DEALER/ROUTER round trip with a msgpack decode at the far end. With
// `own_contexts` each end has its own context, so its own I/O thread, as a
// host and a worker in two processes do; with one context (the figure this
// benchmark printed first) one I/O thread serves both ends, which saves a
// thread wake-up per hop that no host and worker can share.
Latency RawRoundTrip(size_t n, bool own_contexts) {
  zmq::context_t ctx(1), other(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind("tcp://127.0.0.1:*");
  zmq::socket_t dealer(own_contexts ? other : ctx, zmq::socket_type::dealer);
  dealer.connect(router.get(zmq::sockopt::last_endpoint));
  std::string payload = p::Encode(1, MetricFor("T00000", 0));
  std::thread echo([&] {
    for (size_t i = 0; i < n + 1; ++i) {
      std::vector<zmq::message_t> frames;
      (void)zmq::recv_multipart(router, std::back_inserter(frames));
      msgpack::object_handle oh =
          msgpack::unpack(static_cast<const char*>(frames[1].data()), frames[1].size());
      zmq::send_multipart(router, frames);
    }
  });
  zmq::message_t reply;
  dealer.send(zmq::buffer(payload), zmq::send_flags::none);  // warm-up
  (void)dealer.recv(reply);
  std::vector<double> samples;
  samples.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto start = Clock::now();
    dealer.send(zmq::buffer(payload), zmq::send_flags::none);
    (void)dealer.recv(reply);
    samples.push_back(Seconds(Clock::now() - start));
  }
  echo.join();
  return Summarize(std::move(samples));
}

// From "trial ended" (EN sent, once its FINAL was acknowledged, as §5.3
// asks of a worker) to "next job arrived", over `trials` trials, with the
// random tuner generating each parameter set.
Latency HostDispatch(const std::string& plugins, size_t trials, bool with_store = false,
                     uint32_t prefetch = 0) {
  HostUnderTest host(plugins, trials + 1 + prefetch, with_store, 1,
                     std::chrono::milliseconds(60000), std::chrono::milliseconds(60000), prefetch);
  zmq::context_t ctx(1);
  FakeWorker w(ctx, host.server->bound(), "bench-worker-000001");
  w.Hello(1);
  auto job = w.NextJob();
  if (!job) throw std::runtime_error("no job");
  std::vector<double> samples;
  samples.reserve(trials);
  for (size_t i = 0; i < trials; ++i) {
    w.RunTrialUntilEnd(*job);
    auto start = Clock::now();
    w.EndTrial(*job);
    job = w.NextJob();
    if (!job) throw std::runtime_error("no next job");
    samples.push_back(Seconds(Clock::now() - start));
  }
  return Summarize(std::move(samples));
}

// --- the fleet: many one-slot workers on loopback, trials of a fixed length ---

// One simulated worker: real sockets, driven by Fleet's single thread.
struct SimWorker {
  std::string id, topic;
  zmq::socket_t jobs, results, events;
  std::optional<p::NewTrialJob> running;
  Clock::time_point ends{};
  uint64_t next_id = 0;
  size_t ran = 0;  // trials started here
  std::optional<Clock::time_point> first_offer;

  SimWorker(zmq::context_t& ctx, const th::Endpoints& ep, std::string worker_id)
      : id(std::move(worker_id)),
        topic("worker." + id + "."),
        jobs(ctx, zmq::socket_type::pull),
        results(ctx, zmq::socket_type::push),
        events(ctx, zmq::socket_type::sub) {
    jobs.set(zmq::sockopt::rcvhwm, 1);
    jobs.set(zmq::sockopt::linger, 0);
    jobs.connect(ep.jobs);
    results.set(zmq::sockopt::linger, 0);
    results.connect(ep.results);
    events.set(zmq::sockopt::subscribe, topic);
    events.set(zmq::sockopt::linger, 0);
    events.connect(ep.events);
  }
  void Send(p::Body body) {
    std::string bytes = p::Encode(++next_id, std::move(body));
    results.send(zmq::buffer(bytes), zmq::send_flags::none);
  }
};

struct FleetResult {
  size_t trials = 0;
  uint64_t offers = 0, rejects = 0, addressed = 0;
  uint64_t reoffers = 0;  // offers of a trial again (an unanswered offer, a lost worker)
  double makespan_s = 0, ideal_s = 0;
  size_t most_per_worker = 0;     // trials on the busiest worker
  double last_first_offer_s = 0;  // when the last worker to get an offer got its first
};

// `workers` one-slot workers (addressed offers or not) run `trials` trials of
// `trial` each; the host has the real heartbeat and ack timeout. Makespan runs
// from the first WH to the last EN; the ideal is ceil(trials / workers) trial
// lengths.
FleetResult RunFleet(const std::string& plugins, size_t workers, size_t trials,
                     std::chrono::milliseconds trial, bool addressed) {
  HostUnderTest host(plugins, trials, false, static_cast<uint32_t>(workers),
                     std::chrono::milliseconds(1000), std::chrono::milliseconds(2000));
  zmq::context_t ctx(1);
  ctx.set(zmq::ctxopt::max_sockets, static_cast<int>(3 * workers + 64));
  std::vector<std::unique_ptr<SimWorker>> fleet;
  char id[32];
  for (size_t i = 0; i < workers; ++i) {
    std::snprintf(id, sizeof id, "fleet-%05zu", i);
    fleet.push_back(std::make_unique<SimWorker>(ctx, host.server->bound(), id));
  }
  FleetResult r;
  const auto start = Clock::now();
  for (auto& w : fleet) {
    p::WorkerHello h;
    h.worker_id = w->id;
    h.slots = 1;
    h.resources.extra = p::EmptyMap();
    if (addressed) h.offers = p::WorkerHello::kAddressedOffers;
    w->Send(h);
  }
  std::vector<zmq::pollitem_t> items;
  for (auto& w : fleet) {
    items.push_back({w->jobs.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({w->events.handle(), 0, ZMQ_POLLIN, 0});
  }
  auto on_offer = [&](SimWorker& w, const p::NewTrialJob& job, Clock::time_point now) {
    ++r.offers;
    if (!w.first_offer) w.first_offer = now;
    if (w.running) {
      ++r.rejects;
      w.Send(p::TrialRejected{w.id, job.trial_id, job.attempt, "no free slot", job.lease});
      return;
    }
    w.Send(p::TrialStarted{w.id, job.trial_id, job.attempt, job.lease});
    w.running = job;
    ++w.ran;
    w.ends = now + trial;
  };
  size_t ended = 0;
  Clock::time_point last_end = start, next_heartbeat = start + std::chrono::milliseconds(500);
  const auto deadline =
      start + 20 * trial * ((trials + workers - 1) / workers) + std::chrono::seconds(60);
  while (ended < trials) {
    auto now = Clock::now();
    if (now > deadline) throw std::runtime_error("fleet: trials did not finish in time");
    Clock::time_point wake = next_heartbeat;
    for (auto& w : fleet) {
      if (w->running) wake = std::min(wake, w->ends);
    }
    zmq::poll(items, std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::max(wake - now, Clock::duration::zero())));
    now = Clock::now();
    for (size_t i = 0; i < fleet.size(); ++i) {
      SimWorker& w = *fleet[i];
      for (int budget = 0; budget < 16 && (items[2 * i].revents & ZMQ_POLLIN); ++budget) {
        zmq::message_t msg;
        if (!w.jobs.recv(msg, zmq::recv_flags::dontwait)) break;
        p::Message m;
        if (p::Decode(msg.to_string_view(), &m).ok()) {
          if (auto* job = std::get_if<p::NewTrialJob>(&m.body)) on_offer(w, *job, now);
        }
      }
      for (int budget = 0; budget < 16 && (items[2 * i + 1].revents & ZMQ_POLLIN); ++budget) {
        std::vector<zmq::message_t> frames;
        if (!zmq::recv_multipart(w.events, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          break;
        }
        p::Message m;
        if (frames.size() != 2 || frames[0].to_string_view() != w.topic ||
            !p::Decode(frames[1].to_string_view(), &m).ok()) {
          continue;
        }
        if (auto* job = std::get_if<p::NewTrialJob>(&m.body)) {
          ++r.addressed;
          on_offer(w, *job, now);
        } else if (auto* kill = std::get_if<p::KillTrialJob>(&m.body)) {
          if (w.running && w.running->trial_id == kill->trial_id) w.running.reset();
        }
      }
      if (w.running && w.ends <= now) {
        w.Send(p::TrialEnd{w.running->trial_id, w.running->attempt, p::TrialStatus::kSucceeded, "",
                           w.id});
        w.running.reset();
        ++ended;
        last_end = now;
      }
    }
    if (now >= next_heartbeat) {
      for (auto& w : fleet) {
        std::vector<p::RunningTrial> running;
        if (w->running) running.push_back({w->running->trial_id, w->running->attempt, -1});
        w->Send(p::Heartbeat{w->id, w->running ? 0u : 1u, std::move(running)});
      }
      next_heartbeat = now + std::chrono::milliseconds(500);
    }
  }
  r.trials = ended;
  host.Stop();
  r.reoffers = host.server->Summary().reoffers;
  r.makespan_s = Seconds(last_end - start);
  r.ideal_s = Seconds(trial) * static_cast<double>((trials + workers - 1) / workers);
  for (auto& w : fleet) {
    r.most_per_worker = std::max(r.most_per_worker, w->ran);
    if (w->first_offer) {
      r.last_first_offer_s = std::max(r.last_first_offer_s, Seconds(*w->first_offer - start));
    }
  }
  return r;
}

}  // namespace

const char* Verdict(bool met) { return met ? "met" : "NOT MET"; }

int main(int argc, char** argv) {
  std::string plugins = TH_DEFAULT_PLUGIN_DIR;
  size_t metrics = 200000, trials = 2000, trials_per_worker = 5;
  std::vector<size_t> fleets = {16, 64, 256, 1000};
  for (int i = 1; i + 1 < argc; i += 2) {
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
    size_t bytes = 0;
    double shared_raw = RawIngest(metrics, &bytes, false);
    double raw = RawIngest(metrics, &bytes, true);
    double host = HostIngest(plugins, metrics, false);
    double stored = HostIngest(plugins, metrics, true);
    std::printf("target 1: metric ingest (%zu ME of %zu B, one worker)\n", metrics, bytes);
    std::printf("  raw PUSH/PULL + decode, one context  : %10.0f msg/s  (tunehost x%.2f, x%.2f)\n",
                shared_raw, host / shared_raw, stored / shared_raw);
    std::printf("  raw ZeroMQ PUSH/PULL + msgpack decode : %10.0f msg/s\n", raw);
    std::printf(
        "  tunehost, no store                    : %10.0f msg/s  x%.2f of raw (>= 0.80: %s)\n",
        host, host / raw, Verdict(host / raw >= 0.8));
    std::printf(
        "  tunehost, SQLite store, ack after commit: %8.0f msg/s  x%.2f of raw (>= 0.50: %s)\n\n",
        stored, stored / raw, Verdict(stored / raw >= 0.5));

    Latency shared_rtt = RawRoundTrip(trials, false);
    Latency rtt = RawRoundTrip(trials, true);
    Latency dispatch = HostDispatch(plugins, trials);
    Latency stored_dispatch = HostDispatch(plugins, trials, true);
    Latency prefetched = HostDispatch(plugins, trials, false, 1);
    Latency stored_prefetched = HostDispatch(plugins, trials, true, 1);
    std::printf(
        "target 2: worker free (EN) -> next TR in its hands (%zu trials, random tuner, "
        "one 1-slot worker)\n",
        trials);
    std::printf("  %-38s %8s %8s %8s\n", "", "mean us", "p50 us", "p99 us");
    auto row = [&](const char* name, const Latency& l) {
      std::printf("  %-38s %8.1f %8.1f %8.1f", name, l.mean * 1e6, l.p50 * 1e6, l.p99 * 1e6);
      if (&l != &rtt && &l != &shared_rtt)
        std::printf("   p50 x%.2f, p99 x%.2f of raw", l.p50 / rtt.p50, l.p99 / rtt.p99);
      std::printf("\n");
    };
    row("raw DEALER/ROUTER, one context", shared_rtt);
    row("raw DEALER/ROUTER round trip", rtt);
    row("tunehost, no store", dispatch);
    row("tunehost, SQLite store", stored_dispatch);
    row("tunehost, no store, prefetch 1", prefetched);
    row("tunehost, SQLite store, prefetch 1", stored_prefetched);
    auto within = [&](const Latency& l) { return l.p50 <= 2 * rtt.p50 && l.p99 <= 2 * rtt.p99; };
    std::printf(
        "  with the store, p50 and p99 <= 2x raw: prefetch 1: %s; prefetch 0 (the default, "
        "NNI's order: the tuner hears the result before it suggests): %s\n\n",
        Verdict(within(stored_prefetched)), Verdict(within(stored_dispatch)));

    std::printf(
        "EN -> next TR (no store) in this loop by trial count (per-trial host cost, "
        "target 3, is measured through the binaries: tools/bench/scale.py)\n");
    double first = 0;
    for (size_t n : {size_t{1000}, size_t{4000}, size_t{16000}}) {
      double per = HostDispatch(plugins, n).mean;
      if (first == 0) first = per;
      std::printf("  %6zu trials: %8.1f us/trial   (x%.2f of 1000)\n", n, per * 1e6, per / first);
    }

    std::printf(
        "\ntarget 4: fleets of one-slot workers, %zu trials each, trials of max(100 ms, "
        "workers x 4 ms)\n",
        trials_per_worker);
    std::printf("  %-8s %-10s %8s %8s %10s %10s %8s %6s %7s %10s %10s  %s\n", "workers",
                "offers", "trials", "offers", "rejects", "addressed", "again", "most",
                "join", "makespan", "ideal",
                "offers/trial <= 1.05, "
                "makespan <= 1.1x ideal");
    for (size_t n : fleets) {
      const auto length = std::chrono::milliseconds(std::max<size_t>(100, n * 4));
      for (bool addressed : {false, true}) {
        FleetResult f = RunFleet(plugins, n, n * trials_per_worker, length, addressed);
        const double per = static_cast<double>(f.offers) / static_cast<double>(f.trials);
        const double span = f.makespan_s / f.ideal_s;
        std::printf(
            "  %-8zu %-10s %8zu %8llu %10llu %10llu %8llu %6zu %6.2fs %9.2fs %9.2fs  %.2f, x%.2f: "
            "%s\n",
            n, addressed ? "addressed" : "jobs PUSH", f.trials,
            static_cast<unsigned long long>(f.offers), static_cast<unsigned long long>(f.rejects),
            static_cast<unsigned long long>(f.addressed),
            static_cast<unsigned long long>(f.reoffers), f.most_per_worker, f.last_first_offer_s,
            f.makespan_s, f.ideal_s, per, span, Verdict(per <= 1.05 && span <= 1.1));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tunehost-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

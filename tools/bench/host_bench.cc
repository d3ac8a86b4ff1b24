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
//
// Usage: tunehost-bench [--plugins DIR] [--metrics N] [--trials N]
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>
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

// Baseline 1: PUSH -> PULL of the same encoded metric messages, decoded with msgpack.
double RawIngest(size_t n, size_t* bytes_per_msg) {
  zmq::context_t ctx(1);
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  pull.bind("tcp://127.0.0.1:*");
  std::string ep = pull.get(zmq::sockopt::last_endpoint);
  std::vector<std::string> msgs;
  msgs.reserve(n);
  for (size_t i = 0; i < n; ++i) msgs.push_back(p::Encode(i + 1, MetricFor("T00000", i)));
  *bytes_per_msg = msgs[n / 2].size();
  std::thread sender([&] {
    zmq::socket_t push(ctx, zmq::socket_type::push);
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
    msgpack::object_handle oh =
        msgpack::unpack(static_cast<const char*>(msg.data()), msg.size());
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
  void SendRaw(const std::string& bytes) { results_.send(zmq::buffer(bytes), zmq::send_flags::none); }

  void Hello(uint32_t slots) {
    p::WorkerHello h;
    h.worker_id = id_;
    h.slots = slots;
    h.resources.extra = p::EmptyMap();
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

  // Waits for MetricAck with the given sequence.
  bool AwaitAck(uint64_t seq, int timeout_ms = 60000) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      zmq::pollitem_t item{events_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      std::vector<zmq::message_t> frames;
      (void)zmq::recv_multipart(events_, std::back_inserter(frames));
      p::Message m;
      if (!p::Decode(frames.at(1).to_string_view(), &m).ok()) continue;
      if (auto* a = std::get_if<p::MetricAck>(&m.body); a && a->sequence == seq) return true;
    }
    return false;
  }

  void RunTrial(const p::NewTrialJob& job) {
    Send(p::TrialStarted{id_, job.trial_id, job.attempt});
    p::ReportMetricData m = MetricFor(job.trial_id, 0);
    m.type = p::MetricType::kFinal;
    m.worker_id = id_;
    Send(m);
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

  HostUnderTest(const std::string& plugins, uint64_t max_trials, bool with_store) {
    registry.LoadDirectory(plugins);
    th::ServerOptions o;
    o.endpoints = {"tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                   "tcp://127.0.0.1:*"};
    o.heartbeat_interval = std::chrono::milliseconds(60000);  // no liveness noise
    o.ack_timeout = std::chrono::milliseconds(60000);
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
    spec.concurrency = 1;
    spec.max_trials = max_trials;
    p::Packed space;
    (void)p::JsonToPacked(R"({"x": {"_type": "uniform", "_value": [0, 1]}})", &space);
    tunehost::Status st = server->Configure(spec, space);
    if (!st.ok()) throw std::runtime_error(st.ToString());
    loop = std::thread([this] { (void)server->Run(); });
  }
  ~HostUnderTest() {
    server->Stop();
    loop.join();
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

double RawRoundTrip(size_t n) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind("tcp://127.0.0.1:*");
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.connect(router.get(zmq::sockopt::last_endpoint));
  std::string payload = p::Encode(1, MetricFor("T00000", 0));
  std::thread echo([&] {
    for (size_t i = 0; i < n + 1; ++i) {
      std::vector<zmq::message_t> frames;
      (void)zmq::recv_multipart(router, std::back_inserter(frames));
      msgpack::object_handle oh = msgpack::unpack(static_cast<const char*>(frames[1].data()),
                                                  frames[1].size());
      zmq::send_multipart(router, frames);
    }
  });
  zmq::message_t reply;
  dealer.send(zmq::buffer(payload), zmq::send_flags::none);  // warm-up
  (void)dealer.recv(reply);
  auto start = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    dealer.send(zmq::buffer(payload), zmq::send_flags::none);
    (void)dealer.recv(reply);
  }
  double per = Seconds(Clock::now() - start) / static_cast<double>(n);
  echo.join();
  return per;
}

// Mean seconds from "trial ended" to "next job arrived", over `trials` trials,
// with the random tuner generating each parameter set.
double HostDispatch(const std::string& plugins, size_t trials, bool with_store = false) {
  HostUnderTest host(plugins, trials + 1, with_store);
  zmq::context_t ctx(1);
  FakeWorker w(ctx, host.server->bound(), "bench-worker-000001");
  w.Hello(1);
  auto job = w.NextJob();
  if (!job) throw std::runtime_error("no job");
  double total = 0;
  for (size_t i = 0; i < trials; ++i) {
    auto start = Clock::now();
    w.RunTrial(*job);
    job = w.NextJob();
    if (!job) throw std::runtime_error("no next job");
    total += Seconds(Clock::now() - start);
  }
  return total / static_cast<double>(trials);
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugins = TH_DEFAULT_PLUGIN_DIR;
  size_t metrics = 200000, trials = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--plugins") == 0) plugins = argv[i + 1];
    if (std::strcmp(argv[i], "--metrics") == 0) metrics = std::stoul(argv[i + 1]);
    if (std::strcmp(argv[i], "--trials") == 0) trials = std::stoul(argv[i + 1]);
  }
  spdlog::set_level(spdlog::level::warn);
  try {
    size_t bytes = 0;
    double raw = RawIngest(metrics, &bytes);
    double host = HostIngest(plugins, metrics, false);
    std::printf("ingest (%zu metrics of %zu B, one worker)\n", metrics, bytes);
    std::printf("  raw ZeroMQ PUSH/PULL + msgpack decode : %10.0f msg/s\n", raw);
    std::printf("  tunehost (decode, engine, ack)        : %10.0f msg/s\n", host);
    std::printf("  ratio host/raw                        : %10.2f   (target >= 0.50)\n\n",
                host / raw);

    double rtt = RawRoundTrip(trials);
    double dispatch = HostDispatch(plugins, trials);
    std::printf("dispatch (%zu trials, random tuner, one 1-slot worker)\n", trials);
    std::printf("  raw DEALER/ROUTER round trip          : %10.1f us\n", rtt * 1e6);
    std::printf("  TrialEnd -> next NewTrialJob          : %10.1f us\n", dispatch * 1e6);
    std::printf("  ratio host/raw                        : %10.2f   (target <= 2.00 for\n"
                "                                                  ready -> job)\n\n",
                dispatch / rtt);

    std::printf("per-trial host cost by trial count (same loop as above)\n");
    double first = 0;
    for (size_t n : {size_t{1000}, size_t{4000}, size_t{16000}}) {
      double per = HostDispatch(plugins, n);
      if (first == 0) first = per;
      std::printf("  %6zu trials: %8.1f us/trial   (x%.2f of 1000)\n", n, per * 1e6, per / first);
    }

    double stored = HostIngest(plugins, metrics, true);
    double stored_dispatch = HostDispatch(plugins, trials, true);
    std::printf("\nwith the SQLite store (WAL, one commit per loop turn, acks after commit)\n");
    std::printf("  ingest                                : %10.0f msg/s  (x%.2f of no store)\n",
                stored, stored / host);
    std::printf("  TrialEnd -> next NewTrialJob          : %10.1f us     (x%.2f of no store)\n",
                stored_dispatch * 1e6, stored_dispatch / dispatch);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tunehost-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

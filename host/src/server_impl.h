// Server::Impl: the loop that joins the server's parts (DESIGN.md), each a
// class with one job in its own file:
//   ServerSockets  (server_sockets.cc)  the sockets, sending, subscriptions
//   ResultRouter   (result_router.cc)   the results socket's messages
//   ControlRouter  (control_router.cc)  the control socket's requests
//   ServerPlugins  (server_plugins.cc)  plugin calls, watchdog, checkpoints
//   ServerStore    (server_store.cc)    a turn's writes and their commit
//   ExperimentLoader (experiment_loader.cc) resume and view from a store
// Impl (server.cc) owns them and the engine, runs the poll loop, and is the
// engine's EngineSink, handing each call to the part that does it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/host/ack_batch.h"
#include "tunehost/host/engine.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/server.h"
#include "tunehost/host/store.h"
#include "tunehost/protocol/codec.h"

#include "control_router.h"
#include "experiment_loader.h"
#include "loop_signal.h"
#include "result_router.h"
#include "server_plugins.h"
#include "server_sockets.h"
#include "server_store.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

// Helpers more than one part of the server uses.
namespace server_detail {

// TUNEHOST_FAILPOINT=NAME:N, for the tests that crash the host at an exact
// point (the way SQLite's and etcd's tests inject faults): N for NAME, else 0.
inline uint64_t FailpointCount(std::string_view name) {
  const char* env = std::getenv("TUNEHOST_FAILPOINT");
  if (env == nullptr) return 0;
  std::string_view spec(env);
  if (spec.size() <= name.size() + 1 || spec.substr(0, name.size()) != name ||
      spec[name.size()] != ':') {
    return 0;
  }
  return std::strtoull(env + name.size() + 1, nullptr, 10);
}

TrialSummary SummaryOf(const Trial& t, double duration_s);
// The engine options an experiment's spec sets (the server's own are added
// by the caller).
EngineOptions EngineOptionsFor(const p::ExperimentSpec& spec);

using Packer = msgpack::packer<msgpack::sbuffer>;

inline void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

inline p::Packed ToPacked(const msgpack::sbuffer& b) { return p::Packed(b.data(), b.size()); }

}  // namespace server_detail

// Where the experiment is; the control router and the loader change it.
struct ExperimentState {
  p::ExperimentSpec spec;
  bool configured = false;
  bool configuring = false;  // IN's search space is being applied
  bool read_only = false;    // a viewed experiment: IsMutatingRequest requests are refused
  bool viewed = false;
};

class Server::Impl final : public EngineSink {
 public:
  Impl(ServerOptions options, PluginRegistry* registry);
  ~Impl() override;

  // Server's API (server.h).
  bool abandoned() const;
  Status Bind();
  const Endpoints& bound() const { return sockets_.bound(); }
  Status Configure(const p::ExperimentSpec& spec, const p::Packed& search_space);
  void UseStore(Store* store) { batch_.Use(store); }
  Status Restore(std::chrono::milliseconds grace) { return loader_.Resume(grace); }
  Status View(const p::ExperimentSpec& spec, const Store& store);
  Status AnswerQuery(const p::Body& request, p::Packed* data) {
    return control_.AnswerQuery(request, data);
  }
  void Ask(p::Body request, ControlRouter::DoneFn done) {
    control_.Ask(std::move(request), std::move(done));
  }
  Status Run();
  void Stop();
  void OnTrialEnd(std::function<void(const TrialSummary&)> cb) { on_trial_end_ = std::move(cb); }
  void OnTick(std::function<void()> cb) { on_tick_ = std::move(cb); }
  ProgressInfo Progress() const;
  ExperimentSummary Summary() const;

  // EngineSink: the transport's calls here, the others handed to a part.
  bool SendJob(const p::NewTrialJob& job) override;
  bool SendJobTo(const std::string& worker_id, const p::NewTrialJob& job) override;
  void SendToWorker(const std::string& worker_id, p::Body body) override;
  void Publish(p::Body body) override;
  bool WantsEvent(std::string_view type) const override;
  void TrialFinished(const Trial& t) override;
  void RequestParameters(std::vector<int64_t> ids) override {
    plugins_.RequestParameters(std::move(ids));
  }
  void TunerResult(const Trial& t, const p::Metric& metric) override {
    plugins_.TunerResult(t, metric);
  }
  void TunerTrialEnd(const Trial& t, bool success) override { plugins_.TunerTrialEnd(t, success); }
  void TunerBarrier() override { plugins_.TunerBarrier(); }
  void AssessorAssess(const Trial& t, p::Packed history) override {
    plugins_.AssessorAssess(t, std::move(history));
  }
  void AssessorTrialEnd(const Trial& t, bool success) override {
    plugins_.AssessorTrialEnd(t, success);
  }
  void TrialChanged(const Trial& t, std::string_view event, std::string_view detail) override {
    batch_.TrialChanged(t, event, detail);
  }
  void MetricAccepted(const Trial& t, const p::ReportMetricData& m) override {
    batch_.MetricAccepted(t, m);
  }

  // For the parts.
  const ServerOptions& options() const { return options_; }
  ExperimentState& state() { return state_; }
  Engine& engine() { return engine_; }
  ServerSockets& sockets() { return sockets_; }
  LoopSignal& loop() { return loop_; }
  ServerStore& batch() { return batch_; }
  ServerPlugins& plugins() { return plugins_; }
  WorkerKeys& workers_by_key() { return workers_by_key_; }
  // Creates the plugins of `spec` and sets the engine up for it.
  Status CreatePlugins(const p::ExperimentSpec& spec);
  void StartExperiment();
  // A trial that ended before a resume, in the run's summary.
  void AddFinished(TrialSummary s) { finished_.push_back(std::move(s)); }

 private:
  void OfferSent();
  void SendAcks();
  void StoreFailed(const Status& st, bool first);

  ServerOptions options_;
  ServerSockets sockets_{options_};
  LoopSignal loop_;
  std::atomic<bool> stop_requested_{false};
  const uint64_t kill_after_offers_ = server_detail::FailpointCount("kill-after-offers");
  uint64_t offers_sent_ = 0;
  ExperimentState state_;
  WorkerKeys workers_by_key_;
  Engine engine_;
  ServerStore batch_;
  // After the loop, the store and the stop flag they use; stopped first in
  // ~Impl.
  ServerPlugins plugins_;
  ResultRouter results_;
  ControlRouter control_{*this};
  ExperimentLoader loader_{*this};
  AckBatch acks_;  // MA of this turn (with a store: of this commit)
  bool running_ = false;
  bool deduplicating_ = false;  // the DeduplicateMiddleware is in the engine
  std::vector<TrialSummary> finished_;
  std::function<void(const TrialSummary&)> on_trial_end_;
  std::function<void()> on_tick_;
  Clock::time_point ticked_at_{};
};

}  // namespace tunehost::host

// Server::Impl, the server's one class, shared by the four files that define it (server*.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <msgpack.hpp>
#include <zmq.hpp>

#include "tunehost/host/ack_batch.h"
#include "tunehost/host/connection_gate.h"
#include "tunehost/host/drop_log.h"
#include "tunehost/host/engine.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/server.h"
#include "tunehost/host/store.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

#include "pending_replies.h"
#include "plugin_strands.h"

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

inline TrialSummary SummaryOf(const Trial& t, double duration_s) {
  TrialSummary s;
  s.trial_id = t.id;
  s.sequence_id = t.sequence_id;
  s.status = t.status.value_or(p::TrialStatus::kFailed);
  s.parameters_json = p::PackedToJson(t.parameters);
  if (t.final_metric) {
    s.final_metric = t.final_metric->scalar;
    s.final_metric_json = p::PackedToJson(t.final_metric->raw);
  }
  s.attempts = t.offers;
  s.error = t.error;
  s.duration_s = duration_s;
  return s;
}

using Packer = msgpack::packer<msgpack::sbuffer>;

inline void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

inline p::Packed ToPacked(const msgpack::sbuffer& b) { return p::Packed(b.data(), b.size()); }

}  // namespace server_detail

class Server::Impl final : public EngineSink {
 public:
  // server.cc: the transport (the sockets, the poll loop, wake-ups and
  // completions) and the EngineSink calls that send on it.
  Impl(ServerOptions options, PluginRegistry* registry);
  ~Impl() override;
  bool abandoned() const;
  Status Bind();
  const Endpoints& bound() const;
  Status Run();
  void Stop();
  void OnTrialEnd(std::function<void(const TrialSummary&)> cb);
  void OnTick(std::function<void()> cb);
  ProgressInfo Progress() const;
  ExperimentSummary Summary() const;
  bool SendJob(const p::NewTrialJob& job) override;
  bool SendJobTo(const std::string& worker_id, const p::NewTrialJob& job) override;
  bool Offerable(const p::NewTrialJob& job);
  void OfferSent();
  void SendToWorker(const std::string& worker_id, p::Body body) override;
  void Publish(p::Body body) override;
  bool WantsEvent(std::string_view type) const override;
  void TrialFinished(const Trial& t) override;

  // server_plugins.cc: the plugins, and the EngineSink calls handed to their
  // strands.
  Status CreatePlugins(const p::ExperimentSpec& spec);
  Status CreateFailed(const std::string& source, const Status& st);
  Status Configure(const p::ExperimentSpec& spec, const p::Packed& search_space);
  Status SetupCall(PluginStrands::Kind kind, const char* call, std::function<Status()> fn);
  void NoteTimeout(PluginStrands::Kind kind, const Status& st);
  void CheckWatchdog(Clock::time_point now);
  void RequestParameters(std::vector<int64_t> ids) override;
  void TunerResult(const Trial& t, const p::Metric& metric) override;
  void TunerTrialEnd(const Trial& t, bool success) override;
  void TunerBarrier() override;
  void AssessorAssess(const Trial& t, p::Packed history) override;
  void AssessorTrialEnd(const Trial& t, bool success) override;

  // server_store.cc: persistence (restore, view, and the EngineSink calls
  // that write to the store).
  void UseStore(Store* store);
  void RestoreTrials(const std::vector<StoredTrial>& stored, bool resume,
                     std::chrono::milliseconds grace);
  Status Restore(std::chrono::milliseconds grace);
  Status AnswerQuery(const protocol::Body& request, protocol::Packed* data);
  void Ask(p::Body request, std::function<void(const Status&, const p::Packed&)> done);
  Status View(const p::ExperimentSpec& spec, const Store& store);
  void TrialChanged(const Trial& t, std::string_view event, std::string_view detail) override;
  void MetricAccepted(const Trial& t, const p::ReportMetricData& m) override;

 private:
  // Who sent a control request: its one reply goes back there.
  struct Peer {
    std::string identity;
    bool delimiter = false;  // REQ clients send an empty frame first
    uint64_t request_id = 0;
  };

  // server.cc
  void SendEvent(const std::string& topic, p::Body body);
  void Complete(std::function<void()> fn);
  void Wake();
  void DrainWake();
  void RunCompletions();
  void StartExperiment();
  void Secure(zmq::socket_t& socket);
  void ConfigureEvents();
  void RebindEvents();

  // server_routing.cc: the control, results and events sockets' input.
  void DrainResults();
  Status HandleResult(std::string_view bytes, const std::string& user);
  void DrainSubscriptions();
  void DrainControl();
  void SendReply(const Peer& peer, p::Body body);
  void Reply(const Peer& peer, const Status& st);
  void ReplyOk(const Peer& peer, p::Packed data = p::EmptyMap());
  void HandleControl(Peer peer, std::string_view bytes, const std::string& address,
                     const std::string& user);
  bool PostRequest(const Peer& peer, std::function<void(uint64_t)> fn, const char* call);
  void HandleInitialize(const Peer& peer, const p::Initialize& in);
  void HandleRequestTrialJobs(const Peer& peer, uint32_t count);
  void HandleImport(const Peer& peer, const p::ImportData& fd);
  // The control API's requests, from the socket or Ask: `done` after the commit.
  void ControlRequest(const p::Body& request,
                      std::function<void(const Status&, const p::Packed&)> done);

  // server_plugins.cc
  void PostTuner(std::function<void()> fn, const char* call);
  void PostAssessor(std::function<void()> fn, const char* call);
  Status SendTrial(int64_t id, p::Packed params);
  void PluginFailed(const char* kind, const Status& st);

  // server_store.cc: plugin calls and acknowledgements wait for the commit.
  void AfterCommit(std::function<void()> fn);
  void SendAcks();
  bool CommitStore();
  void FlushStore(bool final);
  std::chrono::milliseconds PollTimeout(std::chrono::milliseconds idle) const;
  uint64_t CheckpointKey() const;
  void Checkpoint(std::optional<Clock::time_point> wait_until = std::nullopt);

  ServerOptions options_;
  PluginRegistry* registry_;
  zmq::context_t ctx_;
  zmq::socket_t control_, jobs_, results_, events_;
  // After the context and sockets: stops (and closes its sockets) first.
  std::unique_ptr<ConnectionGate> gate_;
  size_t subscription_bytes_ = 0;  // of the distinct topics subscribed on events_
  // Distinct subscribed topics that event.ME matches (a prefix of it): with
  // none, a metric's event is neither encoded nor sent (one per result).
  size_t metric_event_topics_ = 0;
  DropLog control_drops_{"control socket"};
  DropLog results_drops_{"results socket"};
  DropLog events_drops_{"events socket"};
  Endpoints bound_{"", "", "", ""};  // nothing until Bind()
  int wake_[2] = {-1, -1};
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> stop_requested_{false};
  std::mutex completions_mu_;
  std::deque<std::function<void()>> completions_;
  uint64_t next_id_ = 0;
  bool jobs_blocked_ = false;  // the last job send hit the HWM
  const uint64_t kill_after_offers_ = server_detail::FailpointCount("kill-after-offers");
  uint64_t offers_sent_ = 0;

  p::ExperimentSpec spec_;
  // After the sockets and the stop flag it uses; stopped first in ~Impl.
  PluginStrands plugins_{registry_, &stop_requested_};
  std::map<std::string, bool> checkpoint_failing_;  // by kind
  Engine engine_;
  bool configured_ = false;
  bool configuring_ = false;
  bool read_only_ = false;  // a viewed experiment: IsMutatingRequest requests are refused
  bool running_ = false;
  std::vector<TrialSummary> finished_;
  std::function<void(const TrialSummary&)> on_trial_end_;
  std::function<void()> on_tick_;
  Clock::time_point ticked_at_{};

  Store* store_ = nullptr;
  bool store_failed_ = false;
  bool viewed_ = false;
  bool deduplicating_ = false;
  std::vector<std::function<void()>> after_commit_;
  // Trials written in the batch not committed yet: an offer of one of them
  // is journaled first, an offer of any other trial is not (§5.3).
  std::unordered_set<std::string> uncommitted_trials_;
  bool journal_failing_ = false;  // the store's offer journal refused a record
  AckBatch acks_;  // MA of this turn (with a store: of this commit)
  PendingReplies<Peer> waiting_requests_{p::kMaxQueuedPluginRequests};
  WorkerKeys workers_by_key_;
  ExperimentStatus stored_status_ = ExperimentStatus::kInitialized;
  Clock::time_point meta_written_{};
  Clock::time_point checkpointed_at_ = Clock::now();
  uint64_t checkpointed_key_ = 0;
  bool checkpoint_due_ = false;  // after an import
  int64_t results_handed_ = 0;   // results (and imports) given to the tuner, ever
  int64_t stored_next_id_ = -1;
  // Tuner generate calls posted and not answered yet, since when the turn's
  // commit waits for one, since when a journaled offer waits for its commit,
  // and when the commit is due (server_store.cc, FlushStore).
  int generates_in_flight_ = 0;
  std::optional<Clock::time_point> commit_deferred_since_;
  std::optional<Clock::time_point> offer_journaled_at_;
  std::optional<Clock::time_point> commit_due_;
};

}  // namespace tunehost::host

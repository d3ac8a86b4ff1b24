// The server's loop and Server's API; the parts it joins are listed in
// server_impl.h.
#include "tunehost/host/server.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <utility>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "server_impl.h"

namespace tunehost::host {

namespace server_detail {

TrialSummary SummaryOf(const Trial& t, double duration_s) {
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

EngineOptions EngineOptionsFor(const p::ExperimentSpec& spec) {
  EngineOptions eo;
  eo.experiment_id = spec.id;
  eo.concurrency = spec.concurrency;
  eo.max_trials = spec.max_trials;
  eo.max_duration = std::chrono::milliseconds(static_cast<int64_t>(spec.max_duration_s * 1000));
  eo.objectives = ObjectivesOf(spec.tuner.args);
  return eo;
}

}  // namespace server_detail

using server_detail::SummaryOf;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);
// After a stop, plugins get this long to finish what they were handed
// (trial ends, the last checkpoint); then the host goes without them.
constexpr auto kShutdownGrace = std::chrono::seconds(5);

}  // namespace

Server::Impl::Impl(ServerOptions options, PluginRegistry* registry)
    : options_(std::move(options)),
      engine_(EngineOptions{}, this),
      batch_(&engine_, &workers_by_key_,
             [this](const Status& st, bool first) { StoreFailed(st, first); }),
      plugins_(registry, &stop_requested_, &engine_, &loop_, &batch_, this),
      results_(options_, sockets_, engine_, workers_by_key_) {}

Server::Impl::~Impl() {
  // The strands first: their tasks use this server.
  plugins_.strands().Stop(kShutdownGrace);
}

// Whether a plugin call never returned (the host must leave the process
// with _exit: nothing the call uses may be destroyed).
bool Server::Impl::abandoned() const { return plugins_.strands().abandoned(); }

Status Server::Impl::Bind() { return sockets_.Bind(); }

// Creates the strands and, on them, the plugins; the search space is
// applied by the caller. Not initialized on failure: a later IN may try
// again.
Status Server::Impl::CreatePlugins(const p::ExperimentSpec& spec) {
  state_.spec = spec;
  if (spec.plugin_timeout_s) {
    options_.plugin_call_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(std::ceil(*spec.plugin_timeout_s * 1000)));
  }
  Status st = plugins_.Create(spec, options_.plugin_call_timeout, options_.plugin_runner);
  if (!st.ok()) return st;
  if (state_.spec.id.empty()) state_.spec.id = "exp";
  EngineOptions eo = server_detail::EngineOptionsFor(state_.spec);
  eo.ack_timeout = options_.ack_timeout;
  eo.heartbeat_interval = options_.heartbeat_interval;
  eo.liveness = options_.liveness;
  eo.has_assessor = plugins_.assessor() != nullptr;
  eo.require_lease = options_.keys != nullptr;
  eo.max_consecutive_failures = options_.max_consecutive_failures;
  eo.prefetch = options_.prefetch;
  engine_.SetOptions(std::move(eo));
  if (options_.deduplicate && !deduplicating_) {
    deduplicating_ = true;
    engine_.AddMiddleware(std::make_unique<DeduplicateMiddleware>());
  }
  return Status::Ok();
}

Status Server::Impl::Configure(const p::ExperimentSpec& spec, const p::Packed& search_space) {
  if (state_.configured) return Status::BadState("experiment already configured");
  Status st = CreatePlugins(spec);
  if (!st.ok()) return st;
  st = plugins_.SetupCall(PluginStrands::kTuner, "update_search_space",
                          [tuner = plugins_.tuner(), search_space] {
                            return tuner->UpdateSearchSpace(search_space);
                          });
  if (!st.ok()) return st;
  state_.configured = true;
  Store* store = batch_.store();
  if (store && store->LatestSearchSpace() != search_space) {
    store->AddSearchSpace(search_space);
    batch_.Commit();
  }
  return Status::Ok();
}

Status Server::Impl::View(const p::ExperimentSpec& spec, const Store& store) {
  if (state_.configured) return Status::BadState("experiment already configured");
  std::vector<StoredTrial> stored;
  Status st = store.Trials(&stored);
  if (!st.ok()) return st;
  state_.spec = spec;
  engine_.SetOptions(server_detail::EngineOptionsFor(spec));
  double elapsed_s = 0;
  if (auto m = store.Meta("elapsed_s")) elapsed_s = std::strtod(m->c_str(), nullptr);
  engine_.RestoreCounters(0, std::chrono::milliseconds(static_cast<int64_t>(elapsed_s * 1000)));
  loader_.RestoreTrials(stored, /*resume=*/false, std::chrono::milliseconds(0));
  engine_.SetViewed();
  state_.viewed = true;
  state_.read_only = true;
  state_.configured = true;
  return Status::Ok();
}

void Server::Impl::StartExperiment() {
  Publish(p::Initialized{state_.spec.id});
  engine_.Start(Clock::now());
}

Status Server::Impl::Run() {
  running_ = true;
  if (state_.configured) StartExperiment();
  zmq::pollitem_t items[] = {
      {sockets_.control().handle(), 0, ZMQ_POLLIN, 0},
      {sockets_.results().handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, loop_.fd(), ZMQ_POLLIN, 0},
      {sockets_.jobs().handle(), 0, 0, 0},
      {nullptr, 0, ZMQ_POLLIN, 0},  // events: subscriptions
  };
  while (!stop_requested_.load()) {
    // A job the jobs socket refused (HWM 1) is retried as soon as it can
    // take one, not at the next tick.
    items[3].events = sockets_.jobs_blocked() ? ZMQ_POLLOUT : 0;
    items[4].socket = sockets_.events().handle();  // a new socket after a rebind
    try {
      zmq::poll(items, 5, batch_.PollTimeout(kPollInterval));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return Status::Internal(std::string("poll failed: ") + e.what());
    }
    if (items[0].revents & ZMQ_POLLIN) control_.Drain();
    if (items[1].revents & ZMQ_POLLIN) results_.Drain();
    if (items[2].revents & ZMQ_POLLIN) loop_.Drain();
    if (items[3].revents & ZMQ_POLLOUT) sockets_.JobsWritable();
    if (items[4].revents & ZMQ_POLLIN) {
      sockets_.DrainSubscriptions(
          [this](const std::string& worker, bool subscribed) {
            engine_.OnSubscription(worker, subscribed, Clock::now());
          },
          [this] { engine_.ClearSubscriptions(); });
    }
    loop_.RunAll();
    const auto turn = Clock::now();
    if (!state_.viewed) {
      for (const std::string& stuck : plugins_.CheckWatchdog(turn)) {
        // Nothing queued behind the stuck call will run: answer now.
        control_.AnswerWaiting(Status::PluginError(stuck));
      }
    }
    sockets_.FlushDrops(turn);
    if (!state_.viewed) engine_.Tick(Clock::now());
    if (batch_.Flush(false, plugins_.generating())) plugins_.CheckpointIfDue(Clock::now());
    if (!batch_.store()) SendAcks();
    if (on_tick_ && Clock::now() - ticked_at_ >= std::chrono::seconds(1)) {
      ticked_at_ = Clock::now();
      on_tick_();
    }
    if (options_.exit_when_finished && state_.configured && engine_.finished()) break;
  }
  if (stop_requested_.load()) engine_.Stop("stopped");
  batch_.Flush(true, false);
  // One budget for the plugins at exit: the last checkpoint and what the
  // strands were handed before it (trial ends) share kShutdownGrace; a
  // hung plugin never holds the host longer (wire-format.md §4.3).
  const auto deadline = Clock::now() + kShutdownGrace;
  if (batch_.writable()) plugins_.Checkpoint(deadline);
  plugins_.strands().Stop(std::chrono::duration_cast<std::chrono::milliseconds>(
      std::max(Clock::duration::zero(), deadline - Clock::now())));
  loop_.RunAll();
  // Requests whose tuner call never ran (or never returned) still get
  // their one reply.
  control_.AnswerWaiting(Status::BadState("the host stopped before the tuner answered"));
  batch_.Flush(true, false);
  if (!batch_.store()) SendAcks();
  running_ = false;
  spdlog::info("experiment {} {}", state_.spec.id, ToString(engine_.status()));
  return Status::Ok();
}

void Server::Impl::Stop() {
  stop_requested_.store(true);
  loop_.Wake();
}

// A commit failed: nothing can be acknowledged any more; the experiment
// fails and stops (running trials are killed; their workers keep what was
// not acknowledged).
void Server::Impl::StoreFailed(const Status& st, bool first) {
  acks_.Clear();
  if (!first) return;
  Publish(p::ErrorEvent{"internal", st.message(), "store"});
  engine_.Fail("store failed: " + st.message());
  Stop();
}

ProgressInfo Server::Impl::Progress() const {
  ProgressInfo p;
  p.status = engine_.status();
  for (auto& [status, n] : engine_.CountsByStatus()) p.counts[status] = n;
  p.elapsed_s = std::chrono::duration<double>(engine_.elapsed(Clock::now())).count();
  p.concurrency = engine_.options().concurrency;
  p.max_trials = engine_.options().max_trials;
  p.max_duration_s = std::chrono::duration<double>(engine_.options().max_duration).count();
  return p;
}

ExperimentSummary Server::Impl::Summary() const {
  ExperimentSummary s;
  s.experiment_id = state_.spec.id;
  s.status = engine_.status();
  s.error = engine_.error();
  s.trials = finished_;
  s.offers = engine_.stats().offers;
  s.rejects = engine_.stats().rejects;
  s.reoffers = engine_.stats().reoffers;
  for (const Trial* t : engine_.pareto_front().members()) s.pareto_front.push_back(t->id);
  return s;
}

// --- EngineSink: the transport ---
// An offer leaves once its trial is durable (ServerStore::Offerable).
bool Server::Impl::SendJob(const p::NewTrialJob& job) {
  if (!batch_.Offerable(job.trial_id)) return false;
  const bool sent = sockets_.SendJob(job);
  if (sent) OfferSent();
  return sent;
}

// An addressed offer (wire-format.md §5.2): on the worker's events topic,
// which the engine knows is subscribed. The same commit rule as SendJob.
bool Server::Impl::SendJobTo(const std::string& worker_id, const p::NewTrialJob& job) {
  if (!batch_.Offerable(job.trial_id)) return false;
  sockets_.SendEvent("worker." + worker_id + ".", job);
  OfferSent();
  return true;
}

void Server::Impl::OfferSent() {
  if (kill_after_offers_ != 0 && ++offers_sent_ == kill_after_offers_) {
    // Fault injection for the tests (TUNEHOST_FAILPOINT): die the way
    // a host killed right after an offer does.
    raise(SIGKILL);
  }
}

void Server::Impl::SendToWorker(const std::string& worker_id, p::Body body) {
  if (const auto* ack = std::get_if<p::MetricAck>(&body)) {
    // Acknowledged means stored: acks wait for the batch's commit, then
    // leave together, in spans for workers that take them (§5.2); without
    // a store, at the end of the loop turn.
    if (acks_.empty() && batch_.store()) batch_.AfterCommit([this] { SendAcks(); });
    const auto& workers = engine_.workers();
    const auto w = workers.find(worker_id);
    acks_.Add(worker_id, *ack, w != workers.end() && w->second.ack_spans);
    return;
  }
  sockets_.SendEvent("worker." + worker_id + ".", std::move(body));
}

void Server::Impl::SendAcks() {
  acks_.Flush([this](const std::string& worker_id, p::MetricAck ack) {
    sockets_.SendEvent("worker." + worker_id + ".", std::move(ack));
  });
}

// Metrics are not stored as events (the metrics table has them) and not
// built when no subscribed topic takes "event.ME".
bool Server::Impl::WantsEvent(std::string_view type) const {
  return type != "ME" || sockets_.metric_event_topics() > 0;
}

void Server::Impl::Publish(p::Body body) {
  std::string_view type = p::TypeCode(body);
  if (!WantsEvent(type)) return;
  if (Store* store = batch_.store(); store && type != "ME") store->AddEvent(type, p::Encode(0, body));
  std::string topic = "event." + std::string(type);
  sockets_.SendEvent(topic, std::move(body));
}

void Server::Impl::TrialFinished(const Trial& t) {
  double duration_s = 0;
  if (t.started_at != Clock::time_point{}) {
    duration_s = std::chrono::duration<double>(t.ended_at - t.started_at).count();
  }
  finished_.push_back(SummaryOf(t, duration_s));
  if (on_trial_end_) on_trial_end_(finished_.back());
}

Server::Server(ServerOptions options, PluginRegistry* registry)
    : impl_(std::make_unique<Impl>(std::move(options), registry)) {}
Server::~Server() {
  // A thread still runs inside a plugin and will touch the server when (if)
  // the call returns: keep everything alive (see abandoned_plugin).
  if (impl_ && impl_->abandoned()) (void)impl_.release();
}
bool Server::abandoned_plugin() const { return impl_->abandoned(); }
Status Server::Bind() { return impl_->Bind(); }
const Endpoints& Server::bound() const { return impl_->bound(); }
Status Server::Configure(const p::ExperimentSpec& spec, const p::Packed& search_space) {
  return impl_->Configure(spec, search_space);
}
void Server::UseStore(Store* store) { impl_->UseStore(store); }
Status Server::Restore(std::chrono::milliseconds reattach_grace) {
  return impl_->Restore(reattach_grace);
}
Status Server::View(const p::ExperimentSpec& spec, const Store& store) {
  return impl_->View(spec, store);
}
Status Server::AnswerQuery(const p::Body& request, p::Packed* data) {
  return impl_->AnswerQuery(request, data);
}
void Server::Ask(p::Body request, std::function<void(const Status&, const p::Packed&)> done) {
  impl_->Ask(std::move(request), std::move(done));
}
void Server::OnTick(std::function<void()> callback) { impl_->OnTick(std::move(callback)); }
ProgressInfo Server::Progress() const { return impl_->Progress(); }
void Server::OnTrialEnd(std::function<void(const TrialSummary&)> callback) {
  impl_->OnTrialEnd(std::move(callback));
}
Status Server::Run() { return impl_->Run(); }
void Server::Stop() { impl_->Stop(); }
ExperimentSummary Server::Summary() const { return impl_->Summary(); }

}  // namespace tunehost::host

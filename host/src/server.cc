// The server's transport: the sockets, the poll loop, wake-ups and completions, and Server's API.
#include "tunehost/host/server.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "tunehost/host/connection_gate.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/store.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

#include "server_impl.h"

namespace tunehost::host {

using server_detail::SummaryOf;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);
// Per-connection queues (messages): with the size limits below they bound
// what one peer can make the host hold (wire-format.md §1.1).
constexpr int kControlReceiveQueue = 64;
// The results socket queues as many messages as fill kResultsQueueBytes at
// its size limit, within [64, 1024]: 512 at the default limit. A queue of 64
// made the loop and the I/O thread hand over every 32 results; ingest went
// from x0.67-0.73 of raw ZeroMQ to x0.92-1.06 with 512 (tools/bench
// RESULTS.md).
constexpr int64_t kResultsQueueBytes = int64_t{128} << 20;
constexpr int64_t kResultsReceiveQueueMin = 64;
constexpr int64_t kResultsReceiveQueueMax = 1024;
constexpr int kEventsReceiveQueue = 64;
// Workers never send on the jobs socket.
constexpr int64_t kJobsMaxInbound = 1024;
// Room for CurveZMQ's handshake commands (INITIATE: 257 bytes plus the
// peer's metadata) on sockets whose messages are smaller.
constexpr int64_t kCurveHandshakeBytes = 1024;
constexpr auto kHandshakeInterval = std::chrono::seconds(10);
// Pending TCP connections per listening socket (the kernel caps it at
// net.core.somaxconn). libzmq's default of 100 drops the SYNs of a fleet
// that connects at once (a worker opens three connections), and a dropped
// SYN is retried only after TCP's 1 s initial timeout: the last workers of
// 256 then got their first trial a whole second late.
constexpr int kListenBacklog = 4096;
// After a stop, plugins get this long to finish what they were handed
// (trial ends, the last checkpoint); then the host goes without them.
constexpr auto kShutdownGrace = std::chrono::seconds(5);

}  // namespace

Server::Impl::Impl(ServerOptions options, PluginRegistry* registry)
    : options_(std::move(options)),
      registry_(registry),
      ctx_(1),
      control_(ctx_, zmq::socket_type::router),
      jobs_(ctx_, zmq::socket_type::push),
      results_(ctx_, zmq::socket_type::pull),
      events_(ctx_, zmq::socket_type::xpub),
      engine_(EngineOptions{}, this) {
  if (pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
}

Server::Impl::~Impl() {
  // The strands first: their tasks use this server.
  plugins_.Stop(kShutdownGrace);
  close(wake_[0]);
  close(wake_[1]);
}

// Whether a plugin call never returned (the host must leave the process
// with _exit: nothing the call uses may be destroyed).
bool Server::Impl::abandoned() const { return plugins_.abandoned(); }

Status Server::Impl::Bind() {
  // Every bound socket has a size limit and bounded queues (§1.1): a
  // message up to twice the limit is still read (and answered too_large
  // on control, dropped on results); ZeroMQ drops a connection that sends
  // more. Nothing a peer sends can make the host hold more than
  // connections x queue x size.
  const int64_t hard_limit = static_cast<int64_t>(options_.max_message_bytes) * 2;
  gate_ = std::make_unique<ConnectionGate>(
      ctx_,
      ConnectionGate::Options{options_.max_connections, kHandshakeInterval, options_.keys});
  for (zmq::socket_t* s : {&control_, &jobs_, &results_}) Secure(*s);
  control_.set(zmq::sockopt::maxmsgsize, hard_limit);
  control_.set(zmq::sockopt::rcvhwm, kControlReceiveQueue);
  const int64_t results_hard_limit = static_cast<int64_t>(options_.max_result_bytes) * 2;
  results_.set(zmq::sockopt::maxmsgsize, results_hard_limit);
  results_.set(zmq::sockopt::rcvhwm,
               static_cast<int>(std::clamp(kResultsQueueBytes / results_hard_limit,
                                           kResultsReceiveQueueMin, kResultsReceiveQueueMax)));
  jobs_.set(zmq::sockopt::maxmsgsize, kJobsMaxInbound);
  // Replies already sent get a moment to leave when the host stops.
  control_.set(zmq::sockopt::linger, 100);
  jobs_.set(zmq::sockopt::linger, 0);
  jobs_.set(zmq::sockopt::sndhwm, 1);  // busy workers' pipes fill: PUSH skips them
  results_.set(zmq::sockopt::linger, 0);
  ConfigureEvents();
  gate_->Attach(control_, "control");
  gate_->Attach(jobs_, "jobs");
  gate_->Attach(results_, "results");
  gate_->Attach(events_, "events");
  struct {
    zmq::socket_t* socket;
    const std::string* endpoint;
    std::string* bound;
    const char* name;
  } binds[] = {
      {&control_, &options_.endpoints.control, &bound_.control, "control"},
      {&jobs_, &options_.endpoints.jobs, &bound_.jobs, "jobs"},
      {&results_, &options_.endpoints.results, &bound_.results, "results"},
      {&events_, &options_.endpoints.events, &bound_.events, "events"},
  };
  for (auto& b : binds) {
    try {
      b.socket->set(zmq::sockopt::backlog, kListenBacklog);
      b.socket->bind(*b.endpoint);
      *b.bound = b.socket->get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return Status::Unavailable(std::string("cannot bind ") + b.name + " socket to " +
                                 *b.endpoint + ": " + e.what());
    }
  }
  spdlog::info("listening: control {} jobs {} results {} events {}", bound_.control,
               bound_.jobs, bound_.results, bound_.events);
  return Status::Ok();
}

const Endpoints& Server::Impl::bound() const { return bound_; }

Status Server::Impl::Run() {
  running_ = true;
  if (configured_) StartExperiment();
  zmq::pollitem_t items[] = {
      {control_.handle(), 0, ZMQ_POLLIN, 0},
      {results_.handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, wake_[0], ZMQ_POLLIN, 0},
      {jobs_.handle(), 0, 0, 0},
      {nullptr, 0, ZMQ_POLLIN, 0},  // events: subscriptions
  };
  while (!stop_requested_.load()) {
    // A job the jobs socket refused (HWM 1) is retried as soon as it can
    // take one, not at the next tick.
    items[3].events = jobs_blocked_ ? ZMQ_POLLOUT : 0;
    items[4].socket = events_.handle();  // a new socket after a rebind
    try {
      zmq::poll(items, 5, PollTimeout(kPollInterval));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return Status::Internal(std::string("poll failed: ") + e.what());
    }
    if (items[0].revents & ZMQ_POLLIN) DrainControl();
    if (items[1].revents & ZMQ_POLLIN) DrainResults();
    if (items[2].revents & ZMQ_POLLIN) DrainWake();
    if (items[3].revents & ZMQ_POLLOUT) jobs_blocked_ = false;
    if (items[4].revents & ZMQ_POLLIN) DrainSubscriptions();
    RunCompletions();
    const auto turn = Clock::now();
    if (!viewed_) CheckWatchdog(turn);
    control_drops_.Flush(turn);
    results_drops_.Flush(turn);
    events_drops_.Flush(turn);
    if (!viewed_) engine_.Tick(Clock::now());
    FlushStore(false);
    if (!store_) SendAcks();
    if (on_tick_ && Clock::now() - ticked_at_ >= std::chrono::seconds(1)) {
      ticked_at_ = Clock::now();
      on_tick_();
    }
    if (options_.exit_when_finished && configured_ && engine_.finished()) break;
  }
  if (stop_requested_.load()) engine_.Stop("stopped");
  FlushStore(true);
  // One budget for the plugins at exit: the last checkpoint and what the
  // strands were handed before it (trial ends) share kShutdownGrace; a
  // hung plugin never holds the host longer (wire-format.md §4.3).
  const auto deadline = Clock::now() + kShutdownGrace;
  if (store_ && !store_failed_) Checkpoint(deadline);
  plugins_.Stop(std::chrono::duration_cast<std::chrono::milliseconds>(
      std::max(Clock::duration::zero(), deadline - Clock::now())));
  RunCompletions();
  // Requests whose tuner call never ran (or never returned) still get
  // their one reply.
  for (const Peer& peer : waiting_requests_.TakeAll()) {
    Reply(peer, Status::BadState("the host stopped before the tuner answered"));
  }
  FlushStore(true);
  if (!store_) SendAcks();
  running_ = false;
  spdlog::info("experiment {} {}", spec_.id, ToString(engine_.status()));
  return Status::Ok();
}

void Server::Impl::Stop() {
  stop_requested_.store(true);
  Wake();
}

void Server::Impl::OnTrialEnd(std::function<void(const TrialSummary&)> cb) {
  on_trial_end_ = std::move(cb);
}

void Server::Impl::OnTick(std::function<void()> cb) { on_tick_ = std::move(cb); }

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
  s.experiment_id = spec_.id;
  s.status = engine_.status();
  s.error = engine_.error();
  s.trials = finished_;
  s.offers = engine_.stats().offers;
  s.rejects = engine_.stats().rejects;
  s.reoffers = engine_.stats().reoffers;
  for (const Trial* t : engine_.pareto_front().members()) s.pareto_front.push_back(t->id);
  return s;
}

// --- EngineSink ---
bool Server::Impl::SendJob(const p::NewTrialJob& job) {
  if (!Offerable(job)) return false;
  std::string bytes = p::Encode(++next_id_, job);
  auto sent = jobs_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  jobs_blocked_ = !sent.has_value();
  if (sent) OfferSent();
  return sent.has_value();
}

// An addressed offer (wire-format.md §5.2): on the worker's events topic,
// which the engine knows is subscribed. The same commit rule as SendJob.
bool Server::Impl::SendJobTo(const std::string& worker_id, const p::NewTrialJob& job) {
  if (!Offerable(job)) return false;
  SendEvent("worker." + worker_id + ".", job);
  OfferSent();
  return true;
}

// An offer leaves only once the trial and the attempt it names are durable:
// a resume must know every attempt a worker may have been handed
// (wire-format.md §5.3). A trial committed before (generated ahead,
// re-queued in an earlier turn) leaves at once; one written in this turn is
// appended to the store's offer journal (a copy into a mapped file, where a
// commit is several locks and writes) and committed with the turn's other
// writes after the offer has left. When the journal fails, the turn commits
// first.
bool Server::Impl::Offerable(const p::NewTrialJob& job) {
  if (uncommitted_trials_.count(job.trial_id) == 0) return true;
  const Status st = store_->JournalTrial(job.trial_id);
  if (st.ok()) {
    if (!offer_journaled_at_) offer_journaled_at_ = Clock::now();
    return true;
  }
  if (!journal_failing_) spdlog::warn("offers wait for commits: {}", st.message());
  journal_failing_ = true;
  return CommitStore();
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
    if (acks_.empty() && store_) AfterCommit([this] { SendAcks(); });
    const auto& workers = engine_.workers();
    const auto w = workers.find(worker_id);
    acks_.Add(worker_id, *ack, w != workers.end() && w->second.ack_spans);
    return;
  }
  SendEvent("worker." + worker_id + ".", std::move(body));
}

void Server::Impl::SendAcks() {
  acks_.Flush([this](const std::string& worker_id, p::MetricAck ack) {
    SendEvent("worker." + worker_id + ".", std::move(ack));
  });
}

// Metrics are not stored as events (the metrics table has them) and not
// built when no subscribed topic takes "event.ME".
bool Server::Impl::WantsEvent(std::string_view type) const {
  return type != "ME" || metric_event_topics_ > 0;
}

void Server::Impl::Publish(p::Body body) {
  std::string_view type = p::TypeCode(body);
  if (!WantsEvent(type)) return;
  if (store_ && type != "ME") store_->AddEvent(type, p::Encode(0, body));
  std::string topic = "event." + std::string(type);
  SendEvent(topic, std::move(body));
}

void Server::Impl::TrialFinished(const Trial& t) {
  double duration_s = 0;
  if (t.started_at != Clock::time_point{}) {
    duration_s = std::chrono::duration<double>(t.ended_at - t.started_at).count();
  }
  finished_.push_back(SummaryOf(t, duration_s));
  if (on_trial_end_) on_trial_end_(finished_.back());
}

void Server::Impl::SendEvent(const std::string& topic, p::Body body) {
  std::string bytes = p::Encode(++next_id_, std::move(body));
  try {
    events_.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    events_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("events socket: {}", e.what());
  }
}

// Completions run on the loop thread; strands hand results back through here.
void Server::Impl::Complete(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(completions_mu_);
    completions_.push_back(std::move(fn));
  }
  Wake();
}

void Server::Impl::Wake() {
  if (!wake_pending_.exchange(true)) {
    char c = 1;
    ssize_t n = write(wake_[1], &c, 1);
    (void)n;  // EAGAIN means a wake-up is already pending
  }
}

void Server::Impl::DrainWake() {
  char buf[64];
  while (read(wake_[0], buf, sizeof buf) > 0) {
  }
  wake_pending_.store(false);
}

void Server::Impl::RunCompletions() {
  std::deque<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(completions_mu_);
    batch.swap(completions_);
  }
  for (auto& fn : batch) fn();
}

void Server::Impl::StartExperiment() {
  Publish(p::Initialized{spec_.id});
  engine_.Start(Clock::now());
}

// --- events socket: subscriptions (an XPUB, so they can be counted) ---
// With keys, a CURVE server: ZAP admits known keys only (§9).
void Server::Impl::Secure(zmq::socket_t& socket) {
  if (options_.keys == nullptr) return;
  socket.set(zmq::sockopt::curve_server, true);
  socket.set(zmq::sockopt::curve_secretkey, options_.keys->server().secret_key);
}

void Server::Impl::ConfigureEvents() {
  Secure(events_);
  events_.set(zmq::sockopt::backlog, kListenBacklog);
  events_.set(zmq::sockopt::linger, 100);
  // A subscription is a topic ("worker.<id>.", "event.<code>"): short. The
  // limit applies to handshake commands too, and CURVE's INITIATE is
  // longer than any topic.
  events_.set(zmq::sockopt::maxmsgsize,
              static_cast<int64_t>(options_.keys != nullptr ? kCurveHandshakeBytes
                                                            : p::kMaxSubscriptionBytes));
  // Subscriptions reach libzmq's trie in batches of at most this many per
  // connection before the host counts them.
  events_.set(zmq::sockopt::rcvhwm, kEventsReceiveQueue);
}

// libzmq cannot drop one subscriber's subscriptions: a new socket on the
// same endpoint frees them all; subscribers reconnect by themselves.
void Server::Impl::RebindEvents() {
  gate_->Detach(events_, "events");
  events_.close();
  events_ = zmq::socket_t(ctx_, zmq::socket_type::xpub);
  ConfigureEvents();
  gate_->Attach(events_, "events");
  subscription_bytes_ = 0;
  metric_event_topics_ = 0;
  engine_.ClearSubscriptions();
  // The old listener closes asynchronously: the port may be busy a moment.
  for (int tries = 0;; ++tries) {
    try {
      events_.bind(bound_.events);
      return;
    } catch (const zmq::error_t& e) {
      if (tries == 50) {
        spdlog::error("events socket: cannot bind {} again: {}", bound_.events, e.what());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
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
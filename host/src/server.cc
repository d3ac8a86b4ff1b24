#include "tunehost/host/server.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tunehost/host/connection_gate.h"
#include "tunehost/host/control_queries.h"
#include "tunehost/host/drop_log.h"
#include "tunehost/host/engine.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/store.h"
#include "tunehost/host/strand.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

#include "pending_replies.h"
#include "plugin_strands.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);
constexpr size_t kMaxBatch = 1024;  // messages per socket per loop turn, for fairness
constexpr auto kCheckpointInterval = std::chrono::seconds(5);
constexpr auto kMetaInterval = std::chrono::seconds(1);
// Per-connection queues (messages): with the size limits below they bound
// what one peer can make the host hold (wire-format.md §1.1).
constexpr int kControlReceiveQueue = 64;
constexpr int kResultsReceiveQueue = 64;
constexpr int kEventsReceiveQueue = 64;
// Workers never send on the jobs socket.
constexpr int64_t kJobsMaxInbound = 1024;
// Room for CurveZMQ's handshake commands (INITIATE: 257 bytes plus the
// peer's metadata) on sockets whose messages are smaller.
constexpr int64_t kCurveHandshakeBytes = 1024;
constexpr auto kHandshakeInterval = std::chrono::seconds(10);
// After a stop, plugins get this long to finish what they were handed
// (trial ends, the last checkpoint); then the host goes without them.
constexpr auto kShutdownGrace = std::chrono::seconds(5);

// The address a message came from ("" when the transport has none).
std::string PeerOf(const zmq::message_t& m) {
  const char* address = zmq_msg_gets(const_cast<zmq_msg_t*>(m.handle()), "Peer-Address");
  return address ? address : "";
}

// The User-Id ZAP gave the message's connection ("worker:node7"; "" without
// authentication).
std::string UserOf(const zmq::message_t& m) {
  const char* user = zmq_msg_gets(const_cast<zmq_msg_t*>(m.handle()), "User-Id");
  return user ? user : "";
}

// TUNEHOST_FAILPOINT=NAME:N, for the tests that crash the host at an exact
// point (the way SQLite's and etcd's tests inject faults): N for NAME, else 0.
uint64_t FailpointCount(std::string_view name) {
  const char* env = std::getenv("TUNEHOST_FAILPOINT");
  if (env == nullptr) return 0;
  std::string_view spec(env);
  if (spec.size() <= name.size() + 1 || spec.substr(0, name.size()) != name ||
      spec[name.size()] != ':') {
    return 0;
  }
  return std::strtoull(env + name.size() + 1, nullptr, 10);
}

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A trial the host itself ended because the experiment stopped: a resumed
// experiment runs it again.
bool StoppedWithExperiment(const StoredTrial& s) {
  return s.state == "ENDED" && s.status == p::TrialStatus::kUserCanceled &&
         s.error == "experiment stopped";
}

Trial ToTrial(const StoredTrial& s) {
  Trial t;
  t.id = s.trial_id;
  t.sequence_id = s.sequence_id;
  t.parameter_id = s.parameter_id;
  t.source = s.source;
  t.parameters = s.parameters;
  t.state = s.state == "ENDED"     ? TrialState::kEnded
            : s.state == "RUNNING" ? TrialState::kRunning
                                   : TrialState::kWaiting;
  t.attempt = s.attempt;
  t.offers = s.offers;
  t.worker_id = s.worker_id;
  t.periodical = s.periodical;
  t.final_metric = s.final_metric;
  t.final_synthesized = s.final_synthesized;
  if (t.final_synthesized && !t.final_metric && !t.periodical.empty()) {
    t.final_metric = t.periodical.rbegin()->second;
  }
  t.status = s.status;
  t.error = s.error;
  // Stored wall-clock times as the engine's steady clock.
  const auto steady_now = Clock::now();
  const double wall_now = WallNow();
  auto steady = [&](double wall) {
    return steady_now - std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(wall_now - wall));
  };
  if (s.started > 0) t.started_at = steady(s.started);
  if (s.ended > 0) t.ended_at = steady(s.ended);
  return t;
}

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

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

p::Packed ToPacked(const msgpack::sbuffer& b) { return p::Packed(b.data(), b.size()); }

// The body map of a message, encoded alone (for records inside reply data).
void PackBody(Packer& pk, p::Body body) {
  std::string env = p::Encode(0, std::move(body));
  msgpack::object_handle oh = msgpack::unpack(env.data(), env.size());
  const msgpack::object& o = oh.get();
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && kv.key.as<std::string>() == "body") {
      pk.pack(kv.val);
      return;
    }
  }
  pk.pack_map(0);
}

}  // namespace

class Server::Impl final : public EngineSink {
 public:
  Impl(ServerOptions options, PluginRegistry* registry)
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

  ~Impl() override {
    // The strands first: their tasks use this server.
    plugins_.Stop(kShutdownGrace);
    close(wake_[0]);
    close(wake_[1]);
  }

  // Whether a plugin call never returned (the host must leave the process
  // with _exit: nothing the call uses may be destroyed).
  bool abandoned() const { return plugins_.abandoned(); }

  Status Bind() {
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
    results_.set(zmq::sockopt::maxmsgsize, hard_limit);
    results_.set(zmq::sockopt::rcvhwm, kResultsReceiveQueue);
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

  const Endpoints& bound() const { return bound_; }

  // Creates the strands and, on them, the plugins (a create that hangs is
  // caught like any plugin call); the search space is applied by the caller.
  Status CreatePlugins(const p::ExperimentSpec& spec) {
    spec_ = spec;
    if (spec_.plugin_timeout_s) {
      options_.plugin_call_timeout = std::chrono::milliseconds(
          static_cast<int64_t>(std::ceil(*spec_.plugin_timeout_s * 1000)));
    }
    PluginStrands::Kind failed = PluginStrands::kTuner;
    Status st = plugins_.Create(
        spec, options_.plugin_call_timeout, options_.plugin_runner,
        [this](int64_t id, p::Packed params) { return SendTrial(id, std::move(params)); },
        // An isolated plugin's crash or timeout, from its strand.
        [this](const std::string& code, const std::string& message, const std::string& source) {
          Complete([this, code, message, source] { Publish(p::ErrorEvent{code, message, source}); });
        },
        &failed);
    if (!st.ok()) {
      // Not initialized: a later IN may try again.
      NoteTimeout(failed, st);
      return CreateFailed(failed == PluginStrands::kTuner ? "tuner:" + spec.tuner.name
                                                          : "assessor:" + spec.assessor->name,
                          st);
    }
    if (spec_.id.empty()) spec_.id = "exp";
    EngineOptions eo;
    eo.experiment_id = spec_.id;
    eo.concurrency = spec_.concurrency;
    eo.max_trials = spec_.max_trials;
    eo.max_duration = std::chrono::milliseconds(static_cast<int64_t>(spec_.max_duration_s * 1000));
    eo.ack_timeout = options_.ack_timeout;
    eo.heartbeat_interval = options_.heartbeat_interval;
    eo.liveness = options_.liveness;
    eo.has_assessor = plugins_.assessor() != nullptr;
    eo.require_lease = options_.keys != nullptr;
    engine_.SetOptions(std::move(eo));
    if (options_.deduplicate && !deduplicating_) {
      deduplicating_ = true;
      engine_.AddMiddleware(std::make_unique<DeduplicateMiddleware>());
    }
    return Status::Ok();
  }

  // A plugin that refused to be created (bad class arguments, a throwing
  // constructor) is an ER event as well as a failed reply; an unknown name is
  // only the caller's error.
  Status CreateFailed(const std::string& source, const Status& st) {
    if (st.code() == Status::Code::kPluginError) {
      spdlog::error("{} failed: {}", source, st.message());
      Publish(p::ErrorEvent{std::string(st.CodeName()), st.message(), source});
    }
    return st;
  }

  Status Configure(const p::ExperimentSpec& spec, const p::Packed& search_space) {
    if (configured_) return Status::BadState("experiment already configured");
    Status st = CreatePlugins(spec);
    if (!st.ok()) return st;
    st = SetupCall(PluginStrands::kTuner, "update_search_space",
                   [tuner = plugins_.tuner(), search_space] {
                     return tuner->UpdateSearchSpace(search_space);
                   });
    if (!st.ok()) return st;
    configured_ = true;
    if (store_ && store_->LatestSearchSpace() != search_space) {
      store_->AddSearchSpace(search_space);
      CommitStore();
    }
    return Status::Ok();
  }

  void UseStore(Store* store) { store_ = store; }

  // A setup call (configure, resume): waited for at most the call limit and
  // only while no stop was asked (PluginStrands::Wait).
  Status SetupCall(PluginStrands::Kind kind, const char* call, std::function<Status()> fn) {
    Status st = plugins_.Wait(kind, call, std::move(fn));
    NoteTimeout(kind, st);
    return st;
  }

  // A call waited for that never returned is an ER event plugin_timeout.
  void NoteTimeout(PluginStrands::Kind kind, const Status& st) {
    if (plugins_.stuck(kind) && !stop_requested_.load() &&
        st.code() == Status::Code::kPluginError) {
      Publish(p::ErrorEvent{"plugin_timeout", st.message(), plugins_.Source(kind)});
    }
  }

  // The watchdog, once per loop turn: a plugin call that overran its limit
  // is an ER event, once per call. An in-process tuner cannot be
  // interrupted: the experiment fails (no new trials; what runs finishes).
  // A hung in-process assessor is left alone: trials run on without
  // assessment.
  void CheckWatchdog(Clock::time_point now) {
    for (const PluginStrands::Overrun& o : plugins_.Overruns(now)) {
      spdlog::error("{}", o.message);
      Publish(p::ErrorEvent{"plugin_timeout", o.message, o.source});
      if (o.kind == PluginStrands::kTuner) {
        engine_.Fail(o.message + "; an in-process plugin cannot be interrupted (isolation: "
                                 "process restarts it instead)");
        // Nothing queued behind the stuck call will run: answer now.
        for (const Peer& peer : waiting_requests_.TakeAll()) {
          Reply(peer, Status::PluginError(o.message));
        }
      } else {
        spdlog::error("assessment stops: trials run to their end without it");
      }
    }
  }

  // Rebuilds the engine's trials from stored ones. With `resume`, trials the
  // experiment's stop ended are queued again (source "resumed").
  void RestoreTrials(const std::vector<StoredTrial>& stored, bool resume,
                     std::chrono::milliseconds grace) {
    std::vector<const StoredTrial*> ended, open;
    for (const StoredTrial& s : stored) {
      bool again = resume && StoppedWithExperiment(s);
      (s.state == "ENDED" && !again ? ended : open).push_back(&s);
    }
    std::stable_sort(ended.begin(), ended.end(),
                     [](auto* a, auto* b) { return a->end_order < b->end_order; });
    const auto now = Clock::now();
    for (const StoredTrial* s : ended) {
      Trial t = ToTrial(*s);
      finished_.push_back(SummaryOf(t, s->started > 0 ? s->ended - s->started : 0));
      engine_.Restore(std::move(t), now, grace);
    }
    for (const StoredTrial* s : open) {
      Trial t = ToTrial(*s);
      if (t.state == TrialState::kRunning && !s->worker_key.empty()) {
        // Only the key its worker spoke with may take it back (§9).
        workers_by_key_.Tie(s->worker_id, s->worker_key);
      }
      if (t.state == TrialState::kEnded) {
        t.state = TrialState::kWaiting;
        t.status.reset();
        t.error.clear();
        t.worker_id.clear();
        t.NextAttempt();
        t.source = p::ParameterSource::kResumed;
        TrialChanged(t, "requeued", "experiment resumed");
      } else if (resume && t.state == TrialState::kWaiting) {
        // Its last offer may still be in a worker's hands (answered after
        // the host died, or queued in a socket); offers are not written to
        // the store before they are sent, so any trial that was not running
        // may have one out. That attempt is never run again: a new one is
        // (wire-format.md §5.3), and a worker that announces the old one is
        // told it is superseded.
        t.worker_id.clear();
        t.NextAttempt();
        TrialChanged(t, "requeued", "host restarted: an offer may be out");
      }
      engine_.Restore(std::move(t), now, grace);
    }
  }

  Status Restore(std::chrono::milliseconds grace) {
    if (!configured_ || store_ == nullptr) {
      return Status::BadState("restore needs a configured experiment and a store");
    }
    std::vector<StoredTrial> stored;
    Status st = store_->Trials(&stored);
    if (!st.ok()) return st;
    int64_t next_id = 0;
    for (const StoredTrial& s : stored) next_id = std::max(next_id, s.parameter_id + 1);
    if (auto m = store_->Meta("next_parameter_id")) {
      next_id = std::max<int64_t>(next_id, std::strtoll(m->c_str(), nullptr, 10));
    }
    double elapsed_s = 0;
    if (auto m = store_->Meta("elapsed_s")) elapsed_s = std::strtod(m->c_str(), nullptr);
    engine_.RestoreCounters(next_id,
                            std::chrono::milliseconds(static_cast<int64_t>(elapsed_s * 1000)));

    // What the tuner knew: its checkpoint, then every result (and import)
    // numbered from the count it had seen (all of them without a checkpoint).
    uint64_t known = 0;
    bool from_checkpoint = false;
    if (auto cp = store_->Checkpoint("tuner"); cp && cp->plugin == plugins_.tuner()->info().name) {
      auto supported = std::make_shared<bool>(false);
      st = SetupCall(PluginStrands::kTuner, "load_state",
                     [tuner = plugins_.tuner(), state = cp->state, supported] {
        return tuner->LoadState(state, supported.get());
      });
      if (st.ok() && *supported) {
        known = cp->seen_results;
        from_checkpoint = true;
      } else {
        spdlog::warn("tuner {}: checkpoint not restored ({}); importing every result instead",
                     plugins_.tuner()->info().name, st.ok() ? "load_state not supported" : st.message());
      }
    }
    if (plugins_.assessor() != nullptr) {
      if (auto cp = store_->Checkpoint("assessor"); cp && cp->plugin == plugins_.assessor()->info().name) {
        auto supported = std::make_shared<bool>(false);
        st = SetupCall(PluginStrands::kAssessor, "load_state",
                       [assessor = plugins_.assessor(), state = cp->state, supported] {
                         return assessor->LoadState(state, supported.get());
                       });
        if (!st.ok()) spdlog::warn("assessor checkpoint not restored: {}", st.message());
      }
    }
    std::vector<std::pair<int64_t, p::Packed>> imports;
    st = store_->Imports(&imports);
    if (!st.ok()) return st;
    // (order, one record) for everything the tuner has not seen, in order.
    std::vector<std::pair<int64_t, msgpack::object_handle>> replay;
    auto record = [](const p::Packed& parameters, const p::Metric& value) {
      msgpack::sbuffer b;
      Packer pk(b);
      pk.pack_map(2);
      PackStr(pk, "parameters");
      b.write(parameters.data(), parameters.size());
      PackStr(pk, "value");
      b.write(value.raw.data(), value.raw.size());
      return msgpack::unpack(b.data(), b.size());
    };
    for (const StoredTrial& s : stored) {
      results_handed_ = std::max(results_handed_, s.result_order + 1);
      if (s.result_order < 0 || static_cast<uint64_t>(s.result_order) < known) continue;
      Trial t = ToTrial(s);
      if (t.final_metric) replay.emplace_back(s.result_order, record(t.parameters, *t.final_metric));
    }
    for (auto& [order, records] : imports) {
      results_handed_ = std::max(results_handed_, order + 1);
      if (order < 0 || static_cast<uint64_t>(order) < known) continue;
      msgpack::object_handle oh = msgpack::unpack(records.data(), records.size());
      if (oh.get().type != msgpack::type::ARRAY) continue;
      for (uint32_t i = 0; i < oh.get().via.array.size; ++i) {
        msgpack::sbuffer b;
        Packer pk(b);
        pk.pack(oh.get().via.array.ptr[i]);
        replay.emplace_back(order, msgpack::unpack(b.data(), b.size()));
      }
    }
    std::stable_sort(replay.begin(), replay.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    msgpack::sbuffer records;
    Packer pk(records);
    pk.pack_array(static_cast<uint32_t>(replay.size()));
    for (const auto& [order, oh] : replay) pk.pack(oh.get());
    const size_t n = replay.size();
    if (n > 0) {
      auto supported = std::make_shared<bool>(true);
      st = SetupCall(PluginStrands::kTuner, "import_data",
                     [tuner = plugins_.tuner(), data = ToPacked(records), supported] {
                       return tuner->ImportData(data, supported.get());
                     });
      if (!st.ok()) return st;
      if (!*supported) {
        spdlog::warn("tuner {} neither keeps state nor imports data: it starts from scratch "
                     "({} results not replayed)",
                     plugins_.tuner()->info().name, n);
      }
    }
    RestoreTrials(stored, /*resume=*/true, grace);
    spdlog::info("experiment {} resumed: {} trial(s) in the store, {} result(s) replayed to the "
                 "tuner{}",
                 spec_.id, stored.size(), n, from_checkpoint ? " after its checkpoint" : "");
    CommitStore();
    return Status::Ok();
  }

  Status View(const p::ExperimentSpec& spec, const Store& store) {
    if (configured_) return Status::BadState("experiment already configured");
    std::vector<StoredTrial> stored;
    Status st = store.Trials(&stored);
    if (!st.ok()) return st;
    spec_ = spec;
    EngineOptions eo;
    eo.experiment_id = spec_.id;
    eo.concurrency = spec_.concurrency;
    eo.max_trials = spec_.max_trials;
    eo.max_duration = std::chrono::milliseconds(static_cast<int64_t>(spec_.max_duration_s * 1000));
    engine_.SetOptions(std::move(eo));
    double elapsed_s = 0;
    if (auto m = store.Meta("elapsed_s")) elapsed_s = std::strtod(m->c_str(), nullptr);
    engine_.RestoreCounters(0, std::chrono::milliseconds(static_cast<int64_t>(elapsed_s * 1000)));
    RestoreTrials(stored, /*resume=*/false, std::chrono::milliseconds(0));
    engine_.SetViewed();
    viewed_ = true;
    read_only_ = true;
    configured_ = true;
    return Status::Ok();
  }

  Status Run() {
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
        zmq::poll(items, 5, kPollInterval);
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
    running_ = false;
    spdlog::info("experiment {} {}", spec_.id, ToString(engine_.status()));
    return Status::Ok();
  }

  void Stop() {
    stop_requested_.store(true);
    Wake();
  }

  void OnTrialEnd(std::function<void(const TrialSummary&)> cb) { on_trial_end_ = std::move(cb); }
  void OnTick(std::function<void()> cb) { on_tick_ = std::move(cb); }

  ProgressInfo Progress() const {
    ProgressInfo p;
    p.status = engine_.status();
    for (auto& [status, n] : engine_.CountsByStatus()) p.counts[status] = n;
    p.elapsed_s = std::chrono::duration<double>(engine_.elapsed(Clock::now())).count();
    p.concurrency = engine_.options().concurrency;
    p.max_trials = engine_.options().max_trials;
    p.max_duration_s = std::chrono::duration<double>(engine_.options().max_duration).count();
    return p;
  }

  ExperimentSummary Summary() const {
    ExperimentSummary s;
    s.experiment_id = spec_.id;
    s.status = engine_.status();
    s.error = engine_.error();
    s.trials = finished_;
    s.offers = engine_.stats().offers;
    s.rejects = engine_.stats().rejects;
    s.reoffers = engine_.stats().reoffers;
    return s;
  }

  // --- EngineSink ---
  bool SendJob(const p::NewTrialJob& job) override {
    // An offer leaves only once the store holds the trial and the attempt
    // it names: a resume must know every attempt a worker may have been
    // handed (wire-format.md §5.3). Nothing is written per offer, so this
    // commits at most once per loop turn.
    if (!CommitStore()) return false;
    std::string bytes = p::Encode(++next_id_, job);
    auto sent = jobs_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    jobs_blocked_ = !sent.has_value();
    if (sent) OfferSent();
    return sent.has_value();
  }

  // An addressed offer (wire-format.md §5.2): on the worker's events topic,
  // which the engine knows is subscribed. The same commit rule as SendJob.
  bool SendJobTo(const std::string& worker_id, const p::NewTrialJob& job) override {
    if (!CommitStore()) return false;
    SendEvent("worker." + worker_id + ".", job);
    OfferSent();
    return true;
  }

  void OfferSent() {
    if (kill_after_offers_ != 0 && ++offers_sent_ == kill_after_offers_) {
      // Fault injection for the tests (TUNEHOST_FAILPOINT): die the way
      // a host killed right after an offer does.
      raise(SIGKILL);
    }
  }

  void SendToWorker(const std::string& worker_id, p::Body body) override {
    if (std::holds_alternative<p::MetricAck>(body)) {
      // Acknowledged means stored: the ack waits for the batch's commit.
      AfterCommit([this, topic = "worker." + worker_id + ".", body = std::move(body)]() mutable {
        SendEvent(topic, std::move(body));
      });
      return;
    }
    SendEvent("worker." + worker_id + ".", std::move(body));
  }

  void Publish(p::Body body) override {
    std::string_view type = p::TypeCode(body);
    if (store_ && type != "ME") store_->AddEvent(type, p::Encode(0, body));
    std::string topic = "event." + std::string(type);
    SendEvent(topic, std::move(body));
  }

  void TrialChanged(const Trial& t, std::string_view event, std::string_view detail) override {
    if (!store_) return;
    const double now = WallNow();
    const bool started = event == "started" || event == "reattached";
    const bool ended = event == "ended";
    store_->PutTrial(t, event == "created" ? now : 0, started ? now : 0, ended ? now : 0,
                     ended ? static_cast<int64_t>(engine_.ended_order().size()) - 1 : -1,
                     workers_by_key_.KeyOf(t.worker_id));
    store_->AddTrialEvent(t.id, event, t.attempt, t.worker_id, detail);
    // Earlier attempts' results stay in the store for the record, marked
    // superseded; nothing reads them back into a trial (wire-format.md §5.3).
    if (event == "requeued") store_->SupersedeMetrics(t.id, t.attempt);
  }

  void MetricAccepted(const Trial& t, const p::ReportMetricData& m) override {
    if (store_) store_->PutMetric(t.id, m);
  }

  void RequestParameters(std::vector<int64_t> ids) override {
    PostTuner([this, ids] {
      std::vector<std::pair<int64_t, p::Packed>> out;
      bool no_more = false;
      Status st = plugins_.tuner()->Generate(ids, &out, &no_more);
      Complete([this, ids, out = std::move(out), no_more, st]() mutable {
        if (!st.ok()) PluginFailed("tuner", st);
        engine_.OnParameters(ids, std::move(out), no_more, st, Clock::now());
      });
    }, "generate");
  }

  void TunerResult(const Trial& t, const p::Metric& metric) override {
    // Results are numbered in the order the tuner gets them; a checkpoint
    // says how many it had seen, so a resume replays exactly the rest.
    if (store_) store_->SetResultOrder(t.id, results_handed_);
    ++results_handed_;
    bool customized = t.source != p::ParameterSource::kAlgorithm &&
                      t.source != p::ParameterSource::kExternal;
    PostTuner([this, id = t.parameter_id, params = t.parameters, metric, customized] {
      Status st = plugins_.tuner()->ReceiveTrialResult(id, params, metric.raw, metric.scalar, customized);
      if (!st.ok()) Complete([this, st] { PluginFailed("tuner", st); });
    }, "receive_trial_result");
  }

  void TunerTrialEnd(const Trial& t, bool success) override {
    PostTuner([this, id = t.parameter_id, success] {
      Status st = plugins_.tuner()->TrialEnd(id, success);
      if (!st.ok()) Complete([this, st] { PluginFailed("tuner", st); });
    }, "trial_end");
  }

  void TunerBarrier() override {
    PostTuner([this] { Complete([this] { engine_.OnTunerBarrier(Clock::now()); }); }, "");
  }

  void AssessorAssess(const Trial& t, p::Packed history) override {
    PostAssessor([this, id = t.id, attempt = t.attempt, history = std::move(history)] {
      bool good = true;
      Status st = plugins_.assessor()->AssessTrial(id, history, &good);
      Complete([this, id, attempt, good, st] {
        if (!st.ok()) {
          PluginFailed("assessor", st);
          return;  // a failing assessor never stops a trial
        }
        engine_.OnAssessment(id, attempt, good);
      });
    }, "assess_trial");
  }

  void AssessorTrialEnd(const Trial& t, bool success) override {
    PostAssessor([this, id = t.id, success] {
      Status st = plugins_.assessor()->TrialEnd(id, success);
      if (!st.ok()) Complete([this, st] { PluginFailed("assessor", st); });
    }, "trial_end");
  }

  void TrialFinished(const Trial& t) override {
    double duration_s = 0;
    if (t.started_at != Clock::time_point{}) {
      duration_s = std::chrono::duration<double>(t.ended_at - t.started_at).count();
    }
    finished_.push_back(SummaryOf(t, duration_s));
    if (on_trial_end_) on_trial_end_(finished_.back());
  }

 private:
  // --- the store: plugin calls and acknowledgements wait for the commit ---
  void AfterCommit(std::function<void()> fn) {
    if (store_) {
      after_commit_.push_back(std::move(fn));
    } else {
      fn();
    }
  }

  // `call` names the plugin call for the watchdog.
  void PostTuner(std::function<void()> fn, const char* call) {
    AfterCommit([this, fn = std::move(fn), call]() mutable {
      plugins_.Post(PluginStrands::kTuner, std::move(fn), call);
    });
  }

  void PostAssessor(std::function<void()> fn, const char* call) {
    AfterCommit([this, fn = std::move(fn), call]() mutable {
      plugins_.Post(PluginStrands::kAssessor, std::move(fn), call);
    });
  }

  // Commits what the store holds; false (and the experiment fails) when it
  // cannot: nothing more is acknowledged, workers keep their results.
  bool CommitStore() {
    if (!store_) return true;
    Status st = store_->Commit();
    if (st.ok()) return true;
    after_commit_.clear();
    if (!store_failed_) {
      store_failed_ = true;
      Publish(p::ErrorEvent{"internal", st.message(), "store"});
      engine_.Fail("store failed: " + st.message());
      // Nothing can be acknowledged any more: stop (running trials are
      // killed; their workers keep what was not acknowledged).
      Stop();
    }
    return false;
  }

  // Once per loop turn: experiment metadata now and then, the batch's commit,
  // then what waited for it; a tuner checkpoint every kCheckpointInterval.
  void FlushStore(bool final) {
    if (!store_ || store_failed_) return;
    const auto now = Clock::now();
    const ExperimentStatus status = engine_.status();
    if (final || status != stored_status_ || now - meta_written_ >= kMetaInterval) {
      meta_written_ = now;
      stored_status_ = status;
      store_->SetMeta("status", ToString(status));
      store_->SetMeta("error", engine_.error());
      store_->SetMeta("elapsed_s",
                      std::chrono::duration<double>(engine_.elapsed(now)).count());
    }
    // Ids handed to the tuner are never handed out again after a resume,
    // even when its checkpoint is newer than the last metadata write.
    if (const int64_t next = engine_.ids().next(); next != stored_next_id_) {
      stored_next_id_ = next;
      store_->SetMeta("next_parameter_id", std::to_string(next));
    }
    if (!CommitStore()) return;
    std::vector<std::function<void()>> batch;
    batch.swap(after_commit_);
    for (auto& fn : batch) fn();
    if (!final && (checkpoint_due_ || (now - checkpointed_at_ >= kCheckpointInterval &&
                                       CheckpointKey() != checkpointed_key_))) {
      Checkpoint();
    }
  }

  // Changes when the tuner has seen something new since the last checkpoint.
  uint64_t CheckpointKey() const {
    return engine_.stats().created * 1000003 + static_cast<uint64_t>(results_handed_);
  }

  // Asks the plugins for their state after every call posted so far.
  // Asks each plugin for its state; with `wait_until`, waits for the
  // answers until then and commits them (at exit).
  void Checkpoint(std::optional<Clock::time_point> wait_until = std::nullopt) {
    if (!plugins_.created() || viewed_) return;
    checkpointed_at_ = Clock::now();
    checkpointed_key_ = CheckpointKey();
    checkpoint_due_ = false;
    auto save = [this](const char* kind, auto* plugin, uint64_t seen) {
      std::string state;
      bool supported = false;
      Status st = plugin->SaveState(&state, &supported);
      Complete([this, kind, st, supported, seen, name = plugin->info().name,
                state = std::move(state)]() mutable {
        bool& failing = checkpoint_failing_[kind];
        if (!st.ok()) {
          // An ER event when checkpoints start failing, not one per attempt:
          // a resume then replays from the last good one.
          if (!failing) {
            PluginFailed(kind, Status::PluginError("save_state failed (the last good checkpoint "
                                                   "stays; a resume replays from it): " +
                                                   st.message()));
          }
          failing = true;
        } else {
          if (failing) spdlog::info("{} {}: checkpoints work again", kind, name);
          failing = false;
          if (supported && store_ && !store_failed_) {
            store_->PutCheckpoint(kind, StoredCheckpoint{name, std::move(state), seen});
          }
        }
      });
    };
    std::vector<std::future<void>> done;
    auto post = [&](PluginStrands::Kind kind, auto fn) {
      if (plugins_.stuck(kind)) return;
      auto task = std::make_shared<std::packaged_task<void()>>(std::move(fn));
      done.push_back(task->get_future());
      plugins_.Post(kind, [task] { (*task)(); }, "save_state");
    };
    // Called after the loop turn's batch ran: every result numbered below
    // this was posted to the tuner before its save_state.
    const uint64_t seen = static_cast<uint64_t>(results_handed_);
    post(PluginStrands::kTuner, [save, this, seen] { save("tuner", plugins_.tuner(), seen); });
    if (plugins_.assessor() != nullptr) {
      post(PluginStrands::kAssessor,
           [save, this, seen] { save("assessor", plugins_.assessor(), seen); });
    }
    if (!wait_until) return;
    for (auto& f : done) f.wait_until(*wait_until);
    RunCompletions();
    CommitStore();
  }

  void SendEvent(const std::string& topic, p::Body body) {
    std::string bytes = p::Encode(++next_id_, std::move(body));
    try {
      events_.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      events_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("events socket: {}", e.what());
    }
  }

  Status SendTrial(int64_t id, p::Packed params) {
    if (!engine_.ids().Claim(id)) {
      return Status::BadField("parameter id " + std::to_string(id) +
                              " was not handed to the tuner or was already used");
    }
    Complete([this, id, params = std::move(params)]() mutable {
      engine_.OnSentTrial(id, std::move(params), Clock::now());
    });
    return Status::Ok();
  }

  void PluginFailed(const char* kind, const Status& st) {
    const std::string source = plugins_.Source(std::string(kind) == "tuner"
                                                   ? PluginStrands::kTuner
                                                   : PluginStrands::kAssessor);
    spdlog::error("{} failed: {}", source, st.message());
    Publish(p::ErrorEvent{std::string(st.CodeName()), st.message(), source});
  }

  // Completions run on the loop thread; strands hand results back through here.
  void Complete(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(completions_mu_);
      completions_.push_back(std::move(fn));
    }
    Wake();
  }

  void Wake() {
    if (!wake_pending_.exchange(true)) {
      char c = 1;
      ssize_t n = write(wake_[1], &c, 1);
      (void)n;  // EAGAIN means a wake-up is already pending
    }
  }

  void DrainWake() {
    char buf[64];
    while (read(wake_[0], buf, sizeof buf) > 0) {
    }
    wake_pending_.store(false);
  }

  void RunCompletions() {
    std::deque<std::function<void()>> batch;
    {
      std::lock_guard<std::mutex> lock(completions_mu_);
      batch.swap(completions_);
    }
    for (auto& fn : batch) fn();
  }

  void StartExperiment() {
    Publish(p::Initialized{spec_.id});
    engine_.Start(Clock::now());
  }

  // --- results socket ---
  void DrainResults() {
    for (size_t i = 0; i < kMaxBatch; ++i) {
      zmq::message_t msg;
      auto got = results_.recv(msg, zmq::recv_flags::dontwait);
      if (!got) return;
      if (msg.more()) {
        // Workers send single frames; skip the rest of a multi-frame message.
        const std::string peer = PeerOf(msg);
        while (msg.more() && results_.recv(msg, zmq::recv_flags::dontwait)) {
        }
        results_drops_.Drop(peer, "multi-frame message", Clock::now());
        continue;
      }
      Status st = HandleResult(
          std::string_view(static_cast<const char*>(msg.data()), msg.size()), UserOf(msg));
      if (!st.ok()) results_drops_.Drop(PeerOf(msg), st.ToString(), Clock::now());
    }
  }

  // Not OK: the message was dropped (the caller logs it, rate-limited).
  Status HandleResult(std::string_view bytes, const std::string& user) {
    p::Message m;
    p::DecodeOptions opts{options_.max_message_bytes};
    Status st = p::Decode(bytes, &m, opts);
    if (!st.ok()) return st;
    // Every message on the results socket names its worker (§5.1).
    const std::optional<std::string> worker = WorkerIdOf(m.body);
    if (!worker) {
      return Status::UnknownType("type " + m.type + " is not sent on the results socket");
    }
    if (worker->empty()) {
      return Status::MissingField(m.type + " on the results socket without a worker_id");
    }
    if (options_.keys != nullptr) {
      // A worker's messages come from the key it first spoke with (§9).
      st = workers_by_key_.Check(*worker, user, [this](const std::string& id) {
        return engine_.WorkerInUse(id);
      });
      if (!st.ok()) return st;
    }
    auto now = Clock::now();
    if (auto* b = std::get_if<p::WorkerHello>(&m.body)) {
      return engine_.OnHello(*b, now);
    } else if (auto* b = std::get_if<p::Heartbeat>(&m.body)) {
      engine_.OnHeartbeat(*b, now);
    } else if (auto* b = std::get_if<p::TrialStarted>(&m.body)) {
      return engine_.OnStarted(*b, now);
    } else if (auto* b = std::get_if<p::TrialRejected>(&m.body)) {
      engine_.OnRejected(*b, now);
    } else if (auto* b = std::get_if<p::ReportMetricData>(&m.body)) {
      return engine_.OnMetric(*b, now);
    } else if (auto* b = std::get_if<p::TrialEnd>(&m.body)) {
      return engine_.OnTrialEnd(*b, now);
    } else if (auto* b = std::get_if<p::WorkerBye>(&m.body)) {
      engine_.OnBye(*b, now);
    } else {
      return Status::UnknownType("type " + m.type + " is not sent on the results socket");
    }
    return Status::Ok();
  }

  // --- events socket: subscriptions (an XPUB, so they can be counted) ---
  // With keys, a CURVE server: ZAP admits known keys only (§9).
  void Secure(zmq::socket_t& socket) {
    if (options_.keys == nullptr) return;
    socket.set(zmq::sockopt::curve_server, true);
    socket.set(zmq::sockopt::curve_secretkey, options_.keys->server().secret_key);
  }

  void ConfigureEvents() {
    Secure(events_);
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

  // Reads every notification there is: libzmq adds a topic to its trie
  // before the host hears of it, so the host must keep up with a flood.
  void DrainSubscriptions() {
    for (;;) {
      zmq::message_t msg;
      if (!events_.recv(msg, zmq::recv_flags::dontwait)) return;
      const auto* data = static_cast<const unsigned char*>(msg.data());
      if (msg.size() == 0 || (data[0] != 0 && data[0] != 1) || msg.more()) {
        events_drops_.Drop(PeerOf(msg), "not a subscription", Clock::now());
        while (msg.more() && events_.recv(msg, zmq::recv_flags::dontwait)) {
        }
        continue;
      }
      // The XPUB reports a topic when its first subscriber comes and when
      // its last one leaves (disconnects included).
      const size_t topic = msg.size() - 1;
      if (data[0] == 1) {
        subscription_bytes_ += topic;
      } else {
        subscription_bytes_ -= std::min(subscription_bytes_, topic);
      }
      // A worker's own topic "worker.<id>.": offers may be addressed to it.
      const std::string_view name(reinterpret_cast<const char*>(data) + 1, topic);
      constexpr std::string_view kWorkerTopic = "worker.";
      if (name.size() > kWorkerTopic.size() + 1 &&
          name.substr(0, kWorkerTopic.size()) == kWorkerTopic && name.back() == '.') {
        engine_.OnSubscription(
            std::string(name.substr(kWorkerTopic.size(), name.size() - kWorkerTopic.size() - 1)),
            data[0] == 1, Clock::now());
      }
      if (subscription_bytes_ > p::kMaxSubscriptionTopicBytes) {
        spdlog::error("events socket: distinct subscriptions over {} bytes; dropping every "
                      "subscriber (they reconnect and subscribe again)",
                      p::kMaxSubscriptionTopicBytes);
        RebindEvents();
        return;
      }
    }
  }

  // libzmq cannot drop one subscriber's subscriptions: a new socket on the
  // same endpoint frees them all; subscribers reconnect by themselves.
  void RebindEvents() {
    gate_->Detach(events_, "events");
    events_.close();
    events_ = zmq::socket_t(ctx_, zmq::socket_type::xpub);
    ConfigureEvents();
    gate_->Attach(events_, "events");
    subscription_bytes_ = 0;
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

  // --- control socket ---
  struct Peer {
    std::string identity;
    bool delimiter = false;  // REQ clients send an empty frame first
    uint64_t request_id = 0;
  };

  void DrainControl() {
    for (size_t i = 0; i < kMaxBatch; ++i) {
      std::vector<zmq::message_t> frames;
      auto got = zmq::recv_multipart(control_, std::back_inserter(frames),
                                     zmq::recv_flags::dontwait);
      if (!got) return;
      if (frames.size() < 2) continue;  // no identity: cannot answer
      Peer peer;
      peer.identity = frames[0].to_string();
      size_t payload = 1;
      if (frames.size() == 3 && frames[1].size() == 0) {
        peer.delimiter = true;
        payload = 2;
      }
      if (frames.size() != payload + 1) {
        Status st = Status::BadFrame("expected one payload frame, got " +
                                     std::to_string(frames.size() - 1));
        control_drops_.Drop(PeerOf(frames.back()), st.ToString(), Clock::now());
        Reply(peer, st);
        continue;
      }
      HandleControl(peer, std::string_view(static_cast<const char*>(frames[payload].data()),
                                           frames[payload].size()),
                    PeerOf(frames[payload]), UserOf(frames[payload]));
    }
  }

  void SendReply(const Peer& peer, p::Body body) {
    std::string bytes = p::Encode(peer.request_id, std::move(body));
    try {
      control_.send(zmq::buffer(peer.identity), zmq::send_flags::sndmore);
      if (peer.delimiter) control_.send(zmq::message_t(), zmq::send_flags::sndmore);
      control_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("control: reply to request {} lost: {}", peer.request_id, e.what());
    }
  }

  void Reply(const Peer& peer, const Status& st) {
    SendReply(peer, p::ErrorReply{std::string(st.CodeName()), st.message()});
  }

  void ReplyOk(const Peer& peer, p::Packed data = p::EmptyMap()) {
    SendReply(peer, p::OkReply{std::move(data)});
  }

  void HandleControl(Peer peer, std::string_view bytes, const std::string& address,
                     const std::string& user) {
    p::Message m;
    p::DecodeOptions opts{options_.max_message_bytes};
    Status st = p::Decode(bytes, &m, opts);
    peer.request_id = m.id;
    if (!st.ok()) {
      control_drops_.Drop(address, st.ToString(), Clock::now());
      Reply(peer, st);
      return;
    }
    if (options_.keys != nullptr) {
      // Roles (§9): the key's role must allow the request.
      const std::optional<Role> role = RoleOfUserId(user);
      if (!role || !RoleMayRequest(*role, m.body)) {
        Reply(peer, Status::Forbidden(
                        m.type + " needs the " +
                        (RoleMayRequest(Role::kViewer, m.body) ? "viewer or admin" : "admin") +
                        " role; key '" + user.substr(user.find(':') + 1) + "' has " +
                        (role ? "the " + std::string(RoleName(*role)) + " role" : "no role")));
        return;
      }
    }
    auto now = Clock::now();
    if (std::holds_alternative<p::Ping>(m.body)) {
      msgpack::sbuffer b;
      Packer pk(b);
      pk.pack_map(2);
      PackStr(pk, "status");
      PackStr(pk, ToString(engine_.status()));
      PackStr(pk, "experiment_id");
      PackStr(pk, spec_.id);
      ReplyOk(peer, ToPacked(b));
    } else if (std::holds_alternative<p::Terminate>(m.body)) {
      ReplyOk(peer);
      Stop();
    } else if (auto* b = std::get_if<p::Initialize>(&m.body)) {
      HandleInitialize(peer, *b);
    } else if (read_only_ && IsMutatingRequest(m.body)) {
      Reply(peer, Status::BadState("experiment is viewed read-only"));
    } else if (!configured_) {
      Reply(peer, Status::BadState("no experiment yet: send IN with an experiment first"));
    } else if (IsControlRequest(m.body)) {
      // The control API (wire-format.md §4.2): ST LT GT JS MT EX UX KT LW.
      p::Packed data;
      Status r = AnswerControl(engine_,
                               ControlContext{spec_, bound_, ControlClock::Now(),
                                              options_.keys ? &workers_by_key_ : nullptr},
                               m.body, &data);
      if (r.ok() && store_ && std::holds_alternative<p::UpdateLimits>(m.body)) {
        // A resumed experiment keeps the limits it was changed to.
        const EngineOptions& o = engine_.options();
        store_->SetMeta("concurrency", static_cast<double>(o.concurrency));
        store_->SetMeta("max_trials", static_cast<double>(o.max_trials));
        store_->SetMeta("max_duration_s",
                        std::chrono::duration<double>(o.max_duration).count());
      }
      AfterCommit([this, peer, r, data = std::move(data)] {
        r.ok() ? ReplyOk(peer, data) : Reply(peer, r);
      });
    } else if (auto* b = std::get_if<p::RequestTrialJobs>(&m.body)) {
      HandleRequestTrialJobs(peer, b->count);
    } else if (auto* b = std::get_if<p::UpdateSearchSpace>(&m.body)) {
      PostRequest(peer, [this, space = b->search_space](uint64_t token) {
        Status st = plugins_.tuner()->UpdateSearchSpace(space);
        Complete([this, token, st, space] {
          if (!st.ok()) PluginFailed("tuner", st);
          std::optional<Peer> peer = waiting_requests_.Take(token);
          if (!peer) return;  // answered by the watchdog
          if (!st.ok()) {
            Reply(*peer, st);
          } else {
            if (store_) store_->AddSearchSpace(space);
            AfterCommit([this, peer = *peer] { ReplyOk(peer); });
          }
        });
      }, "update_search_space");
    } else if (auto* b = std::get_if<p::ImportData>(&m.body)) {
      HandleImport(peer, *b);
    } else if (auto* b = std::get_if<p::AddCustomizedTrialJob>(&m.body)) {
      const Trial* t = nullptr;
      Status r = engine_.AddCustomized(b->parameters, now, &t);
      if (!r.ok()) {
        Reply(peer, r);
        return;
      }
      msgpack::sbuffer buf;
      Packer pk(buf);
      pk.pack_map(2);
      PackStr(pk, "trial_id");
      PackStr(pk, t->id);
      PackStr(pk, "sequence_id");
      pk.pack_uint64(t->sequence_id);
      // The reply names a trial the store must hold first.
      AfterCommit([this, peer, data = ToPacked(buf)] { ReplyOk(peer, data); });
    } else if (auto* b = std::get_if<p::ReportMetricData>(&m.body)) {
      Status r = engine_.OnMetric(*b, now);
      // Like a worker's ack, the reply says the metric is stored.
      AfterCommit([this, peer, r] { r.ok() ? ReplyOk(peer) : Reply(peer, r); });
    } else if (auto* b = std::get_if<p::TrialEnd>(&m.body)) {
      Status r = engine_.OnTrialEnd(*b, now);
      AfterCommit([this, peer, r] { r.ok() ? ReplyOk(peer) : Reply(peer, r); });
    } else {
      Reply(peer, Status::UnknownType("type " + m.type + " is not a control request"));
    }
  }

  // Queues a tuner call that a control request waits for; `fn` gets the
  // token its completion takes the peer back with (PendingReplies). False
  // (and the request answered) when the tuner is stuck in a call or too many
  // requests wait for it already.
  bool PostRequest(const Peer& peer, std::function<void(uint64_t)> fn, const char* call) {
    if (plugins_.stuck(PluginStrands::kTuner)) {
      Reply(peer, Status::PluginError(plugins_.Source(PluginStrands::kTuner) +
                                      " is stuck in a call that never returned"));
      return false;
    }
    if (waiting_requests_.full()) {
      Reply(peer, Status::Unavailable(std::to_string(waiting_requests_.size()) +
                                      " requests already wait for " +
                                      plugins_.Source(PluginStrands::kTuner) +
                                      " (the limit): try again when they are answered"));
      return false;
    }
    const uint64_t token = waiting_requests_.Add(peer);
    plugins_.Post(PluginStrands::kTuner, [fn = std::move(fn), token] { fn(token); }, call);
    return true;
  }

  void HandleInitialize(const Peer& peer, const p::Initialize& in) {
    if (configured_ || configuring_) {
      Reply(peer, Status::BadState("experiment " + spec_.id + " is already initialized"));
      return;
    }
    if (!in.experiment) {
      Reply(peer, Status::BadState("IN needs an experiment: this host has none configured"));
      return;
    }
    Status st = CreatePlugins(*in.experiment);
    if (!st.ok()) {
      Reply(peer, st);
      return;
    }
    configuring_ = PostRequest(peer, [this, space = in.search_space](uint64_t token) {
      Status st = plugins_.tuner()->UpdateSearchSpace(space);
      Complete([this, token, st] {
        configuring_ = false;
        std::optional<Peer> peer = waiting_requests_.Take(token);
        if (!st.ok()) {
          PluginFailed("tuner", st);
          if (peer) Reply(*peer, st);
          return;
        }
        if (!peer) return;  // the watchdog gave up on it: the experiment failed
        configured_ = true;
        msgpack::sbuffer b;
        Packer pk(b);
        pk.pack_map(1);
        PackStr(pk, "experiment_id");
        PackStr(pk, spec_.id);
        ReplyOk(*peer, ToPacked(b));
        StartExperiment();
      });
    }, "update_search_space");
  }

  // GE: trials the client runs itself, within the trial budget (§4.2).
  void HandleRequestTrialJobs(const Peer& peer, uint32_t count) {
    std::vector<int64_t> ids;
    Status st = engine_.ReserveExternal(count, Clock::now(), &ids);
    if (!st.ok()) {
      Reply(peer, st);
      return;
    }
    auto answer = [this, count](const Peer& peer, const std::vector<p::NewTrialJob>& jobs,
                                bool no_more) {
      msgpack::sbuffer b;
      Packer pk(b);
      pk.pack_map(2);
      PackStr(pk, "trials");
      pk.pack_array(static_cast<uint32_t>(jobs.size()));
      for (const auto& job : jobs) PackBody(pk, job);
      PackStr(pk, "no_more");
      pk.pack(no_more || jobs.size() < count);
      if (jobs.size() < count) {
        Publish(p::NoMoreTrialJobs{count, static_cast<uint32_t>(jobs.size())});
      }
      // The reply names trials the store must hold first.
      AfterCommit([this, peer, data = ToPacked(b)] { ReplyOk(peer, data); });
    };
    if (ids.empty()) {  // the budget is used up
      answer(peer, {}, true);
      return;
    }
    if (!PostRequest(peer, [this, ids, answer](uint64_t token) {
          std::vector<std::pair<int64_t, p::Packed>> out;
          bool no_more = false;
          Status st = plugins_.tuner()->Generate(ids, &out, &no_more);
          Complete([this, token, ids, answer, out = std::move(out), no_more, st]() mutable {
            if (!st.ok()) {
              PluginFailed("tuner", st);
              out.clear();
            }
            // The trials exist even when the watchdog answered the client:
            // they count, and the client may list them (LT).
            std::vector<p::NewTrialJob> jobs;
            for (const Trial* t :
                 engine_.OnExternalParameters(ids, std::move(out), Clock::now())) {
              jobs.push_back(engine_.JobFor(*t));
            }
            std::optional<Peer> peer = waiting_requests_.Take(token);
            if (!peer) return;
            if (!st.ok() && jobs.empty()) {
              Reply(*peer, st);  // nothing to hand out: the client gets the plugin's error
              return;
            }
            answer(*peer, jobs, no_more);
          });
        }, "generate")) {
      engine_.OnExternalParameters(ids, {}, Clock::now());  // releases the ids
    }
  }

  void HandleImport(const Peer& peer, const p::ImportData& fd) {
    msgpack::sbuffer b;
    Packer pk(b);
    pk.pack_array(static_cast<uint32_t>(fd.data.size()));
    for (const auto& r : fd.data) {
      pk.pack_map(2);
      PackStr(pk, "parameters");
      b.write(r.parameters.data(), r.parameters.size());
      PackStr(pk, "value");
      b.write(r.value.raw.data(), r.value.raw.size());
    }
    size_t n = fd.data.size();
    PostRequest(peer, [this, records = ToPacked(b), n](uint64_t token) {
      bool supported = true;
      Status st = plugins_.tuner()->ImportData(records, &supported);
      Complete([this, token, st, supported, n, records] {
        std::optional<Peer> peer = waiting_requests_.Take(token);
        if (!st.ok()) {
          PluginFailed("tuner", st);
          if (peer) Reply(*peer, st);
          return;
        }
        if (!supported) spdlog::warn("tuner {} does not import data", plugins_.tuner()->info().name);
        if (supported) {
          // Kept like a result, so a resume replays it unless the tuner's
          // checkpoint already holds it; a checkpoint follows this turn.
          if (store_) store_->AddImport(results_handed_, records);
          ++results_handed_;
          checkpoint_due_ = true;
        }
        msgpack::sbuffer out;
        Packer pk(out);
        pk.pack_map(1);
        PackStr(pk, "imported");
        pk.pack_uint64(supported ? n : 0);
        if (peer) AfterCommit([this, peer = *peer, data = ToPacked(out)] { ReplyOk(peer, data); });
      });
    }, "import_data");
  }

  ServerOptions options_;
  PluginRegistry* registry_;
  zmq::context_t ctx_;
  zmq::socket_t control_, jobs_, results_, events_;
  // After the context and sockets: stops (and closes its sockets) first.
  std::unique_ptr<ConnectionGate> gate_;
  size_t subscription_bytes_ = 0;  // of the distinct topics subscribed on events_
  DropLog control_drops_{"control socket"};
  DropLog results_drops_{"results socket"};
  DropLog events_drops_{"events socket"};
  Endpoints bound_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> stop_requested_{false};
  std::mutex completions_mu_;
  std::deque<std::function<void()>> completions_;
  uint64_t next_id_ = 0;
  bool jobs_blocked_ = false;  // the last job send hit the HWM
  const uint64_t kill_after_offers_ = FailpointCount("kill-after-offers");
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
  PendingReplies<Peer> waiting_requests_{p::kMaxQueuedPluginRequests};
  WorkerKeys workers_by_key_;
  ExperimentStatus stored_status_ = ExperimentStatus::kInitialized;
  Clock::time_point meta_written_{};
  Clock::time_point checkpointed_at_ = Clock::now();
  uint64_t checkpointed_key_ = 0;
  bool checkpoint_due_ = false;  // after an import
  int64_t results_handed_ = 0;   // results (and imports) given to the tuner, ever
  int64_t stored_next_id_ = -1;
};

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
void Server::OnTick(std::function<void()> callback) { impl_->OnTick(std::move(callback)); }
ProgressInfo Server::Progress() const { return impl_->Progress(); }
void Server::OnTrialEnd(std::function<void(const TrialSummary&)> callback) {
  impl_->OnTrialEnd(std::move(callback));
}
Status Server::Run() { return impl_->Run(); }
void Server::Stop() { impl_->Stop(); }
ExperimentSummary Server::Summary() const { return impl_->Summary(); }

}  // namespace tunehost::host

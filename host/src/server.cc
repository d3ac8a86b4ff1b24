#include "tunehost/host/server.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <deque>
#include <future>
#include <mutex>
#include <utility>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tunehost/host/engine.h"
#include "tunehost/host/strand.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);
constexpr size_t kMaxBatch = 1024;  // messages per socket per loop turn, for fairness

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
        events_(ctx_, zmq::socket_type::pub),
        engine_(EngineOptions{}, this) {
    if (pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe2 failed");
    }
  }

  ~Impl() override {
    tuner_strand_.reset();
    assessor_strand_.reset();
    tuner_.reset();
    assessor_.reset();
    close(wake_[0]);
    close(wake_[1]);
  }

  Status Bind() {
    const int64_t hard_limit = static_cast<int64_t>(options_.max_message_bytes) * 64;
    control_.set(zmq::sockopt::maxmsgsize, hard_limit);
    results_.set(zmq::sockopt::maxmsgsize, hard_limit);
    control_.set(zmq::sockopt::linger, 0);
    jobs_.set(zmq::sockopt::linger, 0);
    jobs_.set(zmq::sockopt::sndhwm, 1);  // busy workers' pipes fill: PUSH skips them
    events_.set(zmq::sockopt::linger, 100);
    results_.set(zmq::sockopt::linger, 0);
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

  // Creates the plugins and the strands; the search space is applied by the caller.
  Status CreatePlugins(const p::ExperimentSpec& spec) {
    std::unique_ptr<Tuner> tuner;
    Status st = registry_->CreateTuner(
        spec.tuner.name, spec.tuner.args,
        [this](int64_t id, p::Packed params) { return SendTrial(id, std::move(params)); },
        &tuner);
    if (!st.ok()) return CreateFailed("tuner:" + spec.tuner.name, st);
    std::unique_ptr<Assessor> assessor;
    if (spec.assessor) {
      st = registry_->CreateAssessor(spec.assessor->name, spec.assessor->args, &assessor);
      if (!st.ok()) return CreateFailed("assessor:" + spec.assessor->name, st);
    }
    spec_ = spec;
    if (spec_.id.empty()) spec_.id = "exp";
    tuner_ = std::move(tuner);
    assessor_ = std::move(assessor);
    tuner_strand_ = std::make_unique<Strand>("tuner " + tuner_->info().name);
    if (assessor_) assessor_strand_ = std::make_unique<Strand>("assessor " + assessor_->info().name);
    EngineOptions eo;
    eo.experiment_id = spec_.id;
    eo.concurrency = spec_.concurrency;
    eo.max_trials = spec_.max_trials;
    eo.max_duration = std::chrono::milliseconds(static_cast<int64_t>(spec_.max_duration_s * 1000));
    eo.ack_timeout = options_.ack_timeout;
    eo.heartbeat_interval = options_.heartbeat_interval;
    eo.liveness = options_.liveness;
    eo.has_assessor = assessor_ != nullptr;
    engine_.SetOptions(std::move(eo));
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
    std::promise<Status> done;
    tuner_strand_->Post([&] { done.set_value(tuner_->UpdateSearchSpace(search_space)); });
    st = done.get_future().get();
    if (!st.ok()) return st;
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
    };
    while (!stop_requested_.load()) {
      // A job the jobs socket refused (HWM 1) is retried as soon as it can
      // take one, not at the next tick.
      items[3].events = jobs_blocked_ ? ZMQ_POLLOUT : 0;
      try {
        zmq::poll(items, 4, kPollInterval);
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        return Status::Internal(std::string("poll failed: ") + e.what());
      }
      if (items[0].revents & ZMQ_POLLIN) DrainControl();
      if (items[1].revents & ZMQ_POLLIN) DrainResults();
      if (items[2].revents & ZMQ_POLLIN) DrainWake();
      if (items[3].revents & ZMQ_POLLOUT) jobs_blocked_ = false;
      RunCompletions();
      engine_.Tick(Clock::now());
      if (options_.exit_when_finished && configured_ && engine_.finished()) break;
    }
    if (stop_requested_.load()) engine_.Stop("stopped");
    // Let strands finish what the engine already handed them (trial ends).
    if (tuner_strand_) tuner_strand_->Stop();
    if (assessor_strand_) assessor_strand_->Stop();
    RunCompletions();
    running_ = false;
    spdlog::info("experiment {} {}", spec_.id, ToString(engine_.status()));
    return Status::Ok();
  }

  void Stop() {
    stop_requested_.store(true);
    Wake();
  }

  void OnTrialEnd(std::function<void(const TrialSummary&)> cb) { on_trial_end_ = std::move(cb); }

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
    std::string bytes = p::Encode(++next_id_, job);
    auto sent = jobs_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    jobs_blocked_ = !sent.has_value();
    return sent.has_value();
  }

  void SendToWorker(const std::string& worker_id, p::Body body) override {
    SendEvent("worker." + worker_id + ".", std::move(body));
  }

  void Publish(p::Body body) override {
    std::string topic = "event." + std::string(p::TypeCode(body));
    SendEvent(topic, std::move(body));
  }

  void RequestParameters(std::vector<int64_t> ids) override {
    tuner_strand_->Post([this, ids] {
      std::vector<std::pair<int64_t, p::Packed>> out;
      bool no_more = false;
      Status st = tuner_->Generate(ids, &out, &no_more);
      Complete([this, ids, out = std::move(out), no_more, st]() mutable {
        if (!st.ok()) PluginFailed("tuner", st);
        engine_.OnParameters(ids, std::move(out), no_more, st, Clock::now());
      });
    });
  }

  void TunerResult(const Trial& t, const p::Metric& metric) override {
    bool customized = t.source != p::ParameterSource::kAlgorithm &&
                      t.source != p::ParameterSource::kExternal;
    tuner_strand_->Post([this, id = t.parameter_id, params = t.parameters, metric, customized] {
      Status st = tuner_->ReceiveTrialResult(id, params, metric.raw, metric.scalar, customized);
      if (!st.ok()) Complete([this, st] { PluginFailed("tuner", st); });
    });
  }

  void TunerTrialEnd(const Trial& t, bool success) override {
    tuner_strand_->Post([this, id = t.parameter_id, success] {
      Status st = tuner_->TrialEnd(id, success);
      if (!st.ok()) Complete([this, st] { PluginFailed("tuner", st); });
    });
  }

  void TunerBarrier() override {
    tuner_strand_->Post([this] { Complete([this] { engine_.OnTunerBarrier(Clock::now()); }); });
  }

  void AssessorAssess(const Trial& t, p::Packed history) override {
    assessor_strand_->Post([this, id = t.id, attempt = t.attempt, history = std::move(history)] {
      bool good = true;
      Status st = assessor_->AssessTrial(id, history, &good);
      Complete([this, id, attempt, good, st] {
        if (!st.ok()) {
          PluginFailed("assessor", st);
          return;  // a failing assessor never stops a trial
        }
        engine_.OnAssessment(id, attempt, good);
      });
    });
  }

  void AssessorTrialEnd(const Trial& t, bool success) override {
    assessor_strand_->Post([this, id = t.id, success] {
      Status st = assessor_->TrialEnd(id, success);
      if (!st.ok()) Complete([this, st] { PluginFailed("assessor", st); });
    });
  }

  void TrialFinished(const Trial& t) override {
    TrialSummary s;
    s.trial_id = t.id;
    s.sequence_id = t.sequence_id;
    s.status = *t.status;
    s.parameters_json = p::PackedToJson(t.parameters);
    if (t.final_metric) {
      s.final_metric = t.final_metric->scalar;
      s.final_metric_json = p::PackedToJson(t.final_metric->raw);
    }
    s.attempts = t.offers;
    s.error = t.error;
    if (t.started_at != Clock::time_point{}) {
      s.duration_s = std::chrono::duration<double>(t.ended_at - t.started_at).count();
    }
    finished_.push_back(s);
    if (on_trial_end_) on_trial_end_(finished_.back());
  }

 private:
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
    std::string source = std::string(kind) + ":" +
                         (std::string(kind) == "tuner" ? tuner_->info().name
                                                       : assessor_->info().name);
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
        while (msg.more() && results_.recv(msg, zmq::recv_flags::dontwait)) {
        }
        spdlog::warn("results: multi-frame message dropped");
        continue;
      }
      HandleResult(std::string_view(static_cast<const char*>(msg.data()), msg.size()));
    }
  }

  void HandleResult(std::string_view bytes) {
    p::Message m;
    p::DecodeOptions opts{options_.max_message_bytes};
    Status st = p::Decode(bytes, &m, opts);
    if (!st.ok()) {
      spdlog::warn("results: dropped {}-byte message: {}", bytes.size(), st.ToString());
      return;
    }
    auto now = Clock::now();
    if (auto* b = std::get_if<p::WorkerHello>(&m.body)) {
      engine_.OnHello(*b, now);
    } else if (auto* b = std::get_if<p::Heartbeat>(&m.body)) {
      engine_.OnHeartbeat(*b, now);
    } else if (auto* b = std::get_if<p::TrialStarted>(&m.body)) {
      engine_.OnStarted(*b, now);
    } else if (auto* b = std::get_if<p::TrialRejected>(&m.body)) {
      engine_.OnRejected(*b, now);
    } else if (auto* b = std::get_if<p::ReportMetricData>(&m.body)) {
      if (b->worker_id.empty()) {
        spdlog::warn("results: metric without worker_id dropped (trial {})", b->trial_id);
        return;
      }
      engine_.OnMetric(*b, now);
    } else if (auto* b = std::get_if<p::TrialEnd>(&m.body)) {
      if (b->worker_id.empty()) {
        spdlog::warn("results: trial end without worker_id dropped (trial {})", b->trial_id);
        return;
      }
      engine_.OnTrialEnd(*b, now);
    } else if (auto* b = std::get_if<p::WorkerBye>(&m.body)) {
      engine_.OnBye(*b, now);
    } else {
      spdlog::warn("results: unexpected message type {} dropped", m.type);
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
        Reply(peer, Status::BadFrame("expected one payload frame, got " +
                                     std::to_string(frames.size() - 1)));
        continue;
      }
      HandleControl(peer, std::string_view(static_cast<const char*>(frames[payload].data()),
                                           frames[payload].size()));
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

  void HandleControl(Peer peer, std::string_view bytes) {
    p::Message m;
    p::DecodeOptions opts{options_.max_message_bytes};
    Status st = p::Decode(bytes, &m, opts);
    peer.request_id = m.id;
    if (!st.ok()) {
      spdlog::warn("control: bad request: {}", st.ToString());
      Reply(peer, st);
      return;
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
    } else if (!configured_) {
      Reply(peer, Status::BadState("no experiment yet: send IN with an experiment first"));
    } else if (auto* b = std::get_if<p::RequestTrialJobs>(&m.body)) {
      HandleRequestTrialJobs(peer, b->count);
    } else if (auto* b = std::get_if<p::UpdateSearchSpace>(&m.body)) {
      tuner_strand_->Post([this, peer, space = b->search_space] {
        Status st = tuner_->UpdateSearchSpace(space);
        Complete([this, peer, st] {
          if (!st.ok()) {
            PluginFailed("tuner", st);
            Reply(peer, st);
          } else {
            ReplyOk(peer);
          }
        });
      });
    } else if (auto* b = std::get_if<p::ImportData>(&m.body)) {
      HandleImport(peer, *b);
    } else if (auto* b = std::get_if<p::AddCustomizedTrialJob>(&m.body)) {
      const Trial& t = engine_.AddCustomized(b->parameters, now);
      msgpack::sbuffer buf;
      Packer pk(buf);
      pk.pack_map(2);
      PackStr(pk, "trial_id");
      PackStr(pk, t.id);
      PackStr(pk, "sequence_id");
      pk.pack_uint64(t.sequence_id);
      ReplyOk(peer, ToPacked(buf));
    } else if (auto* b = std::get_if<p::ReportMetricData>(&m.body)) {
      Status r = engine_.OnMetric(*b, now);
      r.ok() ? ReplyOk(peer) : Reply(peer, r);
    } else if (auto* b = std::get_if<p::TrialEnd>(&m.body)) {
      Status r = engine_.OnTrialEnd(*b, now);
      r.ok() ? ReplyOk(peer) : Reply(peer, r);
    } else {
      Reply(peer, Status::UnknownType("type " + m.type + " is not a control request"));
    }
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
    configuring_ = true;
    tuner_strand_->Post([this, peer, space = in.search_space] {
      Status st = tuner_->UpdateSearchSpace(space);
      Complete([this, peer, st] {
        configuring_ = false;
        if (!st.ok()) {
          PluginFailed("tuner", st);
          Reply(peer, st);
          return;
        }
        configured_ = true;
        msgpack::sbuffer b;
        Packer pk(b);
        pk.pack_map(1);
        PackStr(pk, "experiment_id");
        PackStr(pk, spec_.id);
        ReplyOk(peer, ToPacked(b));
        StartExperiment();
      });
    });
  }

  void HandleRequestTrialJobs(const Peer& peer, uint32_t count) {
    std::vector<int64_t> ids = engine_.ids().Allocate(count);
    tuner_strand_->Post([this, peer, ids] {
      std::vector<std::pair<int64_t, p::Packed>> out;
      bool no_more = false;
      Status st = tuner_->Generate(ids, &out, &no_more);
      Complete([this, peer, ids, out = std::move(out), no_more, st]() mutable {
        if (!st.ok()) {
          PluginFailed("tuner", st);
          Reply(peer, st);
          return;
        }
        msgpack::sbuffer b;
        Packer pk(b);
        std::vector<p::NewTrialJob> jobs;
        for (auto& [id, params] : out) {
          if (!engine_.ids().Claim(id)) continue;
          jobs.push_back(engine_.JobFor(engine_.AddExternal(id, std::move(params), Clock::now())));
        }
        pk.pack_map(2);
        PackStr(pk, "trials");
        pk.pack_array(static_cast<uint32_t>(jobs.size()));
        for (auto& job : jobs) PackBody(pk, job);
        PackStr(pk, "no_more");
        pk.pack(no_more || jobs.size() < ids.size());
        if (jobs.size() < ids.size()) {
          Publish(p::NoMoreTrialJobs{static_cast<uint32_t>(ids.size()),
                                     static_cast<uint32_t>(jobs.size())});
        }
        ReplyOk(peer, ToPacked(b));
      });
    });
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
    tuner_strand_->Post([this, peer, records = ToPacked(b), n] {
      bool supported = true;
      Status st = tuner_->ImportData(records, &supported);
      Complete([this, peer, st, supported, n] {
        if (!st.ok()) {
          PluginFailed("tuner", st);
          Reply(peer, st);
          return;
        }
        if (!supported) spdlog::warn("tuner {} does not import data", tuner_->info().name);
        msgpack::sbuffer out;
        Packer pk(out);
        pk.pack_map(1);
        PackStr(pk, "imported");
        pk.pack_uint64(supported ? n : 0);
        ReplyOk(peer, ToPacked(out));
      });
    });
  }

  ServerOptions options_;
  PluginRegistry* registry_;
  zmq::context_t ctx_;
  zmq::socket_t control_, jobs_, results_, events_;
  Endpoints bound_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> stop_requested_{false};
  std::mutex completions_mu_;
  std::deque<std::function<void()>> completions_;
  uint64_t next_id_ = 0;
  bool jobs_blocked_ = false;  // the last job send hit the HWM

  p::ExperimentSpec spec_;
  std::unique_ptr<Tuner> tuner_;
  std::unique_ptr<Assessor> assessor_;
  // Declared after the plugins: strands stop (join) before plugins are destroyed.
  std::unique_ptr<Strand> tuner_strand_;
  std::unique_ptr<Strand> assessor_strand_;
  Engine engine_;
  bool configured_ = false;
  bool configuring_ = false;
  bool running_ = false;
  std::vector<TrialSummary> finished_;
  std::function<void(const TrialSummary&)> on_trial_end_;
};

Server::Server(ServerOptions options, PluginRegistry* registry)
    : impl_(std::make_unique<Impl>(std::move(options), registry)) {}
Server::~Server() = default;
Status Server::Bind() { return impl_->Bind(); }
const Endpoints& Server::bound() const { return impl_->bound(); }
Status Server::Configure(const p::ExperimentSpec& spec, const p::Packed& search_space) {
  return impl_->Configure(spec, search_space);
}
void Server::OnTrialEnd(std::function<void(const TrialSummary&)> callback) {
  impl_->OnTrialEnd(std::move(callback));
}
Status Server::Run() { return impl_->Run(); }
void Server::Stop() { impl_->Stop(); }
ExperimentSummary Server::Summary() const { return impl_->Summary(); }

}  // namespace tunehost::host

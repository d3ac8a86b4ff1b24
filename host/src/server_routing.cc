// Message routing: the control socket's requests, the results socket's messages, subscriptions.
#include "server_impl.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tunehost/host/control_queries.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/store.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

using server_detail::Packer;
using server_detail::PackStr;
using server_detail::ToPacked;

namespace {

constexpr size_t kMaxBatch = 1024;  // messages per socket per loop turn, for fairness
// The topic a metric's event goes out on (wire-format.md §6).
constexpr std::string_view kMetricEventTopic = "event.ME";

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

// --- results socket ---
void Server::Impl::DrainResults() {
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
    // The ZAP user matters only with a key ring (§9); reading it costs a
    // metadata lookup and a string per message.
    Status st = HandleResult(std::string_view(static_cast<const char*>(msg.data()), msg.size()),
                             options_.keys != nullptr ? UserOf(msg) : std::string());
    if (!st.ok()) results_drops_.Drop(PeerOf(msg), st.ToString(), Clock::now());
  }
}

// Not OK: the message was dropped (the caller logs it, rate-limited).
Status Server::Impl::HandleResult(std::string_view bytes, const std::string& user) {
  p::Message m;
  p::DecodeOptions opts{options_.max_result_bytes};
  Status st = p::Decode(bytes, &m, opts);
  if (st.code() == Status::Code::kTooLarge) {
    return Status::TooLarge(st.message() +
                            " (the results socket's limit: maxResultBytes, --max-result-bytes)");
  }
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
// Reads every notification there is: libzmq adds a topic to its trie
// before the host hears of it, so the host must keep up with a flood.
void Server::Impl::DrainSubscriptions() {
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
    const std::string_view name(reinterpret_cast<const char*>(data) + 1, topic);
    if (kMetricEventTopic.substr(0, name.size()) == name) {
      if (data[0] == 1) {
        ++metric_event_topics_;
      } else if (metric_event_topics_ > 0) {
        --metric_event_topics_;
      }
    }
    // A worker's own topic "worker.<id>.": offers may be addressed to it.
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

// --- control socket ---
void Server::Impl::DrainControl() {
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

void Server::Impl::SendReply(const Peer& peer, p::Body body) {
  std::string bytes = p::Encode(peer.request_id, std::move(body));
  try {
    control_.send(zmq::buffer(peer.identity), zmq::send_flags::sndmore);
    if (peer.delimiter) control_.send(zmq::message_t(), zmq::send_flags::sndmore);
    control_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("control: reply to request {} lost: {}", peer.request_id, e.what());
  }
}

void Server::Impl::Reply(const Peer& peer, const Status& st) {
  SendReply(peer, p::ErrorReply{std::string(st.CodeName()), st.message()});
}

void Server::Impl::ReplyOk(const Peer& peer, p::Packed data) {
  SendReply(peer, p::OkReply{std::move(data)});
}

Status Server::Impl::AnswerQuery(const p::Body& request, p::Packed* data) {
  if (!configured_) return Status::BadState("no experiment yet");
  if (read_only_ && IsMutatingRequest(request)) {
    return Status::BadState("experiment is viewed read-only");
  }
  if (!IsControlRequest(request)) return Status::BadState("not a query of the control API");
  return AnswerControl(engine_, ControlContext{spec_, bound_, ControlClock::Now(), nullptr},
                       request, data);
}

void Server::Impl::ControlRequest(const p::Body& request,
                                  std::function<void(const Status&, const p::Packed&)> done) {
  // The control API (wire-format.md §4.2): ST LT GT JS MT EX UX KT LW.
  p::Packed data;
  Status r = AnswerControl(engine_,
                           ControlContext{spec_, bound_, ControlClock::Now(),
                                          options_.keys ? &workers_by_key_ : nullptr},
                           request, &data);
  if (r.ok() && store_ && std::holds_alternative<p::UpdateLimits>(request)) {
    // A resumed experiment keeps the limits it was changed to.
    const EngineOptions& o = engine_.options();
    store_->SetMeta("concurrency", static_cast<double>(o.concurrency));
    store_->SetMeta("max_trials", static_cast<double>(o.max_trials));
    store_->SetMeta("max_duration_s", std::chrono::duration<double>(o.max_duration).count());
  }
  AfterCommit([r, data = std::move(data), done = std::move(done)] { done(r, data); });
}

void Server::Impl::Ask(p::Body request,
                       std::function<void(const Status&, const p::Packed&)> done) {
  Complete([this, request = std::move(request), done = std::move(done)]() mutable {
    if (!configured_) {
      done(Status::BadState("no experiment yet"), {});
    } else if (read_only_ && IsMutatingRequest(request)) {
      done(Status::BadState("experiment is viewed read-only"), {});
    } else if (!IsControlRequest(request)) {
      done(Status::BadState("not a query of the control API"), {});
    } else {
      ControlRequest(request, std::move(done));
    }
  });
}

void Server::Impl::HandleControl(Peer peer, std::string_view bytes, const std::string& address,
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
    ControlRequest(m.body, [this, peer](const Status& r, const p::Packed& data) {
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
bool Server::Impl::PostRequest(const Peer& peer, std::function<void(uint64_t)> fn,
                               const char* call) {
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

void Server::Impl::HandleInitialize(const Peer& peer, const p::Initialize& in) {
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
void Server::Impl::HandleRequestTrialJobs(const Peer& peer, uint32_t count) {
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

void Server::Impl::HandleImport(const Peer& peer, const p::ImportData& fd) {
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

}  // namespace tunehost::host

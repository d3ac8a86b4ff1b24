#include "control_router.h"

#include <iterator>
#include <optional>
#include <utility>
#include <variant>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tunehost/host/control_queries.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/store.h"

#include "server_impl.h"

namespace tunehost::host {

using server_detail::Packer;
using server_detail::PackStr;
using server_detail::ToPacked;

namespace {

constexpr size_t kMaxBatch = 1024;  // requests per loop turn, for fairness

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

void ControlRouter::Drain() {
  zmq::socket_t& socket = server_.sockets().control();
  for (size_t i = 0; i < kMaxBatch; ++i) {
    std::vector<zmq::message_t> frames;
    auto got = zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait);
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
      server_.sockets().control_drops().Drop(PeerOf(frames.back()), st.ToString(), Clock::now());
      Reply(peer, st);
      continue;
    }
    Handle(peer, std::string_view(static_cast<const char*>(frames[payload].data()),
                                  frames[payload].size()),
           PeerOf(frames[payload]), UserOf(frames[payload]));
  }
}

void ControlRouter::Reply(const Peer& peer, const Status& st) {
  server_.sockets().SendReply(peer.identity, peer.delimiter, peer.request_id,
                              p::ErrorReply{std::string(st.CodeName()), st.message()});
}

void ControlRouter::ReplyOk(const Peer& peer, p::Packed data) {
  server_.sockets().SendReply(peer.identity, peer.delimiter, peer.request_id,
                              p::OkReply{std::move(data)});
}

void ControlRouter::ReplyAfterCommit(const Peer& peer, Status st, p::Packed data) {
  server_.batch().AfterCommit([this, peer, st = std::move(st), data = std::move(data)] {
    st.ok() ? ReplyOk(peer, data) : Reply(peer, st);
  });
}

void ControlRouter::AnswerWaiting(const Status& st) {
  for (const Peer& peer : waiting_.TakeAll()) Reply(peer, st);
}

Status ControlRouter::Refusal(const p::Body& request) const {
  const ExperimentState& state = server_.state();
  if (!state.configured) return Status::BadState("no experiment yet");
  if (state.read_only && IsMutatingRequest(request)) {
    return Status::BadState("experiment is viewed read-only");
  }
  if (!IsControlRequest(request)) return Status::BadState("not a query of the control API");
  return Status::Ok();
}

Status ControlRouter::AnswerQuery(const p::Body& request, p::Packed* data) {
  if (Status st = Refusal(request); !st.ok()) return st;
  return AnswerControl(server_.engine(),
                       ControlContext{server_.state().spec, server_.bound(), ControlClock::Now(),
                                      nullptr},
                       request, data);
}

void ControlRouter::Ask(p::Body request, DoneFn done) {
  server_.loop().Post([this, request = std::move(request), done = std::move(done)]() mutable {
    if (Status st = Refusal(request); !st.ok()) {
      done(st, {});
    } else {
      ControlRequest(request, std::move(done));
    }
  });
}

// The control API (wire-format.md §4.2): ST LT GT JS MT EX UX KT LW.
void ControlRouter::ControlRequest(const p::Body& request, DoneFn done) {
  p::Packed data;
  Engine& engine = server_.engine();
  Status r = AnswerControl(engine,
                           ControlContext{server_.state().spec, server_.bound(),
                                          ControlClock::Now(),
                                          server_.options().keys ? &server_.workers_by_key()
                                                                 : nullptr},
                           request, &data);
  Store* store = server_.batch().store();
  if (r.ok() && store && std::holds_alternative<p::UpdateLimits>(request)) {
    // A resumed experiment keeps the limits it was changed to.
    const EngineOptions& o = engine.options();
    store->SetMeta("concurrency", static_cast<double>(o.concurrency));
    store->SetMeta("max_trials", static_cast<double>(o.max_trials));
    store->SetMeta("max_duration_s", std::chrono::duration<double>(o.max_duration).count());
  }
  server_.batch().AfterCommit([r, data = std::move(data), done = std::move(done)] {
    done(r, data);
  });
}

void ControlRouter::Handle(Peer peer, std::string_view bytes, const std::string& address,
                           const std::string& user) {
  p::Message m;
  p::DecodeOptions opts{server_.options().max_message_bytes};
  Status st = p::Decode(bytes, &m, opts);
  peer.request_id = m.id;
  if (!st.ok()) {
    server_.sockets().control_drops().Drop(address, st.ToString(), Clock::now());
    Reply(peer, st);
    return;
  }
  if (server_.options().keys != nullptr) {
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
  const ExperimentState& state = server_.state();
  Engine& engine = server_.engine();
  auto now = Clock::now();
  if (std::holds_alternative<p::Ping>(m.body)) {
    msgpack::sbuffer b;
    Packer pk(b);
    pk.pack_map(2);
    PackStr(pk, "status");
    PackStr(pk, ToString(engine.status()));
    PackStr(pk, "experiment_id");
    PackStr(pk, state.spec.id);
    ReplyOk(peer, ToPacked(b));
  } else if (std::holds_alternative<p::Terminate>(m.body)) {
    ReplyOk(peer);
    server_.Stop();
  } else if (auto* b = std::get_if<p::Initialize>(&m.body)) {
    HandleInitialize(peer, *b);
  } else if (state.read_only && IsMutatingRequest(m.body)) {
    Reply(peer, Status::BadState("experiment is viewed read-only"));
  } else if (!state.configured) {
    Reply(peer, Status::BadState("no experiment yet: send IN with an experiment first"));
  } else if (IsControlRequest(m.body)) {
    ControlRequest(m.body, [this, peer](const Status& r, const p::Packed& data) {
      r.ok() ? ReplyOk(peer, data) : Reply(peer, r);
    });
  } else if (auto* b = std::get_if<p::RequestTrialJobs>(&m.body)) {
    HandleRequestTrialJobs(peer, b->count);
  } else if (auto* b = std::get_if<p::UpdateSearchSpace>(&m.body)) {
    HandleUpdateSearchSpace(peer, b->search_space);
  } else if (auto* b = std::get_if<p::ImportData>(&m.body)) {
    HandleImport(peer, *b);
  } else if (auto* b = std::get_if<p::AddCustomizedTrialJob>(&m.body)) {
    HandleCustomized(peer, *b);
  } else if (auto* b = std::get_if<p::ReportMetricData>(&m.body)) {
    // Like a worker's ack, the reply says the metric is stored.
    ReplyAfterCommit(peer, engine.OnMetric(*b, now));
  } else if (auto* b = std::get_if<p::TrialEnd>(&m.body)) {
    ReplyAfterCommit(peer, engine.OnTrialEnd(*b, now));
  } else {
    Reply(peer, Status::UnknownType("type " + m.type + " is not a control request"));
  }
}

// Queues a tuner call that a control request waits for; `fn` gets the
// token its completion takes the peer back with (PendingReplies). False
// (and the request answered) when the tuner is stuck in a call or too many
// requests wait for it already.
bool ControlRouter::PostRequest(const Peer& peer, std::function<void(uint64_t)> fn,
                                const char* call) {
  PluginStrands& strands = server_.plugins().strands();
  if (strands.stuck(PluginStrands::kTuner)) {
    Reply(peer, Status::PluginError(strands.Source(PluginStrands::kTuner) +
                                    " is stuck in a call that never returned"));
    return false;
  }
  if (waiting_.full()) {
    Reply(peer, Status::Unavailable(std::to_string(waiting_.size()) +
                                    " requests already wait for " +
                                    strands.Source(PluginStrands::kTuner) +
                                    " (the limit): try again when they are answered"));
    return false;
  }
  const uint64_t token = waiting_.Add(peer);
  strands.Post(PluginStrands::kTuner, [fn = std::move(fn), token] { fn(token); }, call);
  return true;
}

void ControlRouter::HandleInitialize(const Peer& peer, const p::Initialize& in) {
  ExperimentState& state = server_.state();
  if (state.configured || state.configuring) {
    Reply(peer, Status::BadState("experiment " + state.spec.id + " is already initialized"));
    return;
  }
  if (!in.experiment) {
    Reply(peer, Status::BadState("IN needs an experiment: this host has none configured"));
    return;
  }
  Status st = server_.CreatePlugins(*in.experiment);
  if (!st.ok()) {
    Reply(peer, st);
    return;
  }
  state.configuring = PostRequest(peer, [this, space = in.search_space](uint64_t token) {
    Status st = server_.plugins().tuner()->UpdateSearchSpace(space);
    server_.loop().Post([this, token, st] {
      ExperimentState& state = server_.state();
      state.configuring = false;
      std::optional<Peer> peer = waiting_.Take(token);
      if (!st.ok()) {
        server_.plugins().Failed("tuner", st);
        if (peer) Reply(*peer, st);
        return;
      }
      if (!peer) return;  // the watchdog gave up on it: the experiment failed
      state.configured = true;
      msgpack::sbuffer b;
      Packer pk(b);
      pk.pack_map(1);
      PackStr(pk, "experiment_id");
      PackStr(pk, state.spec.id);
      ReplyOk(*peer, ToPacked(b));
      server_.StartExperiment();
    });
  }, "update_search_space");
}

void ControlRouter::HandleUpdateSearchSpace(const Peer& peer, const p::Packed& space) {
  PostRequest(peer, [this, space](uint64_t token) {
    Status st = server_.plugins().tuner()->UpdateSearchSpace(space);
    server_.loop().Post([this, token, st, space] {
      if (!st.ok()) server_.plugins().Failed("tuner", st);
      std::optional<Peer> peer = waiting_.Take(token);
      if (!peer) return;  // answered by the watchdog
      if (!st.ok()) {
        Reply(*peer, st);
        return;
      }
      if (Store* store = server_.batch().store()) store->AddSearchSpace(space);
      ReplyAfterCommit(*peer, Status::Ok());
    });
  }, "update_search_space");
}

void ControlRouter::HandleCustomized(const Peer& peer, const p::AddCustomizedTrialJob& job) {
  const Trial* t = nullptr;
  Status r = server_.engine().AddCustomized(job.parameters, Clock::now(), &t);
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
  ReplyAfterCommit(peer, Status::Ok(), ToPacked(buf));
}

// GE: trials the client runs itself, within the trial budget (§4.2).
void ControlRouter::HandleRequestTrialJobs(const Peer& peer, uint32_t count) {
  std::vector<int64_t> ids;
  Status st = server_.engine().ReserveExternal(count, Clock::now(), &ids);
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
      server_.Publish(p::NoMoreTrialJobs{count, static_cast<uint32_t>(jobs.size())});
    }
    // The reply names trials the store must hold first.
    ReplyAfterCommit(peer, Status::Ok(), ToPacked(b));
  };
  if (ids.empty()) {  // the budget is used up
    answer(peer, {}, true);
    return;
  }
  if (!PostRequest(peer, [this, ids, answer](uint64_t token) {
        std::vector<std::pair<int64_t, p::Packed>> out;
        bool no_more = false;
        Status st = server_.plugins().tuner()->Generate(ids, &out, &no_more);
        server_.loop().Post([this, token, ids, answer, out = std::move(out), no_more,
                             st]() mutable {
          if (!st.ok()) {
            server_.plugins().Failed("tuner", st);
            out.clear();
          }
          // The trials exist even when the watchdog answered the client:
          // they count, and the client may list them (LT).
          Engine& engine = server_.engine();
          std::vector<p::NewTrialJob> jobs;
          for (const Trial* t : engine.OnExternalParameters(ids, std::move(out), Clock::now())) {
            jobs.push_back(engine.JobFor(*t));
          }
          std::optional<Peer> peer = waiting_.Take(token);
          if (!peer) return;
          if (!st.ok() && jobs.empty()) {
            Reply(*peer, st);  // nothing to hand out: the client gets the plugin's error
            return;
          }
          answer(*peer, jobs, no_more);
        });
      }, "generate")) {
    server_.engine().OnExternalParameters(ids, {}, Clock::now());  // releases the ids
  }
}

void ControlRouter::HandleImport(const Peer& peer, const p::ImportData& fd) {
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
    Status st = server_.plugins().tuner()->ImportData(records, &supported);
    server_.loop().Post([this, token, st, supported, n, records] {
      ServerPlugins& plugins = server_.plugins();
      std::optional<Peer> peer = waiting_.Take(token);
      if (!st.ok()) {
        plugins.Failed("tuner", st);
        if (peer) Reply(*peer, st);
        return;
      }
      if (supported) {
        plugins.Imported(records);
      } else {
        spdlog::warn("tuner {} does not import data", plugins.tuner()->info().name);
      }
      msgpack::sbuffer out;
      Packer pk(out);
      pk.pack_map(1);
      PackStr(pk, "imported");
      pk.pack_uint64(supported ? n : 0);
      if (peer) ReplyAfterCommit(*peer, Status::Ok(), ToPacked(out));
    });
  }, "import_data");
}

}  // namespace tunehost::host

#include "result_router.h"

#include <optional>
#include <utility>
#include <variant>

#include <zmq.hpp>

#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

namespace {
constexpr size_t kMaxBatch = 1024;  // messages per loop turn, for fairness
}  // namespace

void ResultRouter::Drain() {
  zmq::socket_t& socket = sockets_.results();
  for (size_t i = 0; i < kMaxBatch; ++i) {
    zmq::message_t msg;
    auto got = socket.recv(msg, zmq::recv_flags::dontwait);
    if (!got) return;
    if (msg.more()) {
      // Workers send single frames; skip the rest of a multi-frame message.
      const std::string peer = PeerOf(msg);
      while (msg.more() && socket.recv(msg, zmq::recv_flags::dontwait)) {
      }
      sockets_.results_drops().Drop(peer, "multi-frame message", Clock::now());
      continue;
    }
    // The ZAP user matters only with a key ring (§9); reading it costs a
    // metadata lookup and a string per message.
    Status st = Handle(std::string_view(static_cast<const char*>(msg.data()), msg.size()),
                       options_.keys != nullptr ? UserOf(msg) : std::string());
    if (!st.ok()) sockets_.results_drops().Drop(PeerOf(msg), st.ToString(), Clock::now());
  }
}

Status ResultRouter::Handle(std::string_view bytes, const std::string& user) {
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
    st = keys_.Check(*worker, user, [this](const std::string& id) {
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

}  // namespace tunehost::host

#include "server_sockets.h"

#include <algorithm>
#include <string_view>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "tunehost/host/key_ring.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

namespace {

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
// The topic a metric's event goes out on (wire-format.md §6).
constexpr std::string_view kMetricEventTopic = "event.ME";

}  // namespace

std::string PeerOf(const zmq::message_t& m) {
  const char* address = zmq_msg_gets(const_cast<zmq_msg_t*>(m.handle()), "Peer-Address");
  return address ? address : "";
}

std::string UserOf(const zmq::message_t& m) {
  const char* user = zmq_msg_gets(const_cast<zmq_msg_t*>(m.handle()), "User-Id");
  return user ? user : "";
}

ServerSockets::ServerSockets(const ServerOptions& options)
    : options_(options),
      ctx_(1),
      control_(ctx_, zmq::socket_type::router),
      jobs_(ctx_, zmq::socket_type::push),
      results_(ctx_, zmq::socket_type::pull),
      events_(ctx_, zmq::socket_type::xpub) {}

Status ServerSockets::Bind() {
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

bool ServerSockets::SendJob(const p::NewTrialJob& job) {
  std::string bytes = p::Encode(++next_id_, job);
  auto sent = jobs_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  jobs_blocked_ = !sent.has_value();
  return sent.has_value();
}

void ServerSockets::SendEvent(const std::string& topic, p::Body body) {
  std::string bytes = p::Encode(++next_id_, std::move(body));
  try {
    events_.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    events_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("events socket: {}", e.what());
  }
}

void ServerSockets::SendReply(const std::string& identity, bool delimiter, uint64_t request_id,
                              p::Body body) {
  std::string bytes = p::Encode(request_id, std::move(body));
  try {
    control_.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    if (delimiter) control_.send(zmq::message_t(), zmq::send_flags::sndmore);
    control_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("control: reply to request {} lost: {}", request_id, e.what());
  }
}

void ServerSockets::FlushDrops(Clock::time_point now) {
  control_drops_.Flush(now);
  results_drops_.Flush(now);
  events_drops_.Flush(now);
}

// --- events socket: subscriptions (an XPUB, so they can be counted) ---
// Reads every notification there is: libzmq adds a topic to its trie
// before the host hears of it, so the host must keep up with a flood.
void ServerSockets::DrainSubscriptions(const WorkerTopicFn& on_worker_topic,
                                       const std::function<void()>& on_rebind) {
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
      on_worker_topic(
          std::string(name.substr(kWorkerTopic.size(), name.size() - kWorkerTopic.size() - 1)),
          data[0] == 1);
    }
    if (subscription_bytes_ > p::kMaxSubscriptionTopicBytes) {
      spdlog::error("events socket: distinct subscriptions over {} bytes; dropping every "
                    "subscriber (they reconnect and subscribe again)",
                    p::kMaxSubscriptionTopicBytes);
      RebindEvents();
      on_rebind();
      return;
    }
  }
}

// With keys, a CURVE server: ZAP admits known keys only (§9).
void ServerSockets::Secure(zmq::socket_t& socket) {
  if (options_.keys == nullptr) return;
  socket.set(zmq::sockopt::curve_server, true);
  socket.set(zmq::sockopt::curve_secretkey, options_.keys->server().secret_key);
}

void ServerSockets::ConfigureEvents() {
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
void ServerSockets::RebindEvents() {
  gate_->Detach(events_, "events");
  events_.close();
  events_ = zmq::socket_t(ctx_, zmq::socket_type::xpub);
  ConfigureEvents();
  gate_->Attach(events_, "events");
  subscription_bytes_ = 0;
  metric_event_topics_ = 0;
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

}  // namespace tunehost::host

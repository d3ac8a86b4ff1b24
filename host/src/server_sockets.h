// The server's transport (wire-format.md §1): its four sockets with their
// size limits and queues, the connection gate, sending offers, events and
// replies, and counting the events socket's subscriptions. Loop thread only.
// Private to the host library.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "tunehost/host/connection_gate.h"
#include "tunehost/host/drop_log.h"
#include "tunehost/host/server.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/status.h"

namespace tunehost::host {

// The address a message came from ("" when the transport has none).
std::string PeerOf(const zmq::message_t& m);
// The User-Id ZAP gave the message's connection ("worker:node7"; "" without
// authentication).
std::string UserOf(const zmq::message_t& m);

class ServerSockets {
 public:
  using Clock = std::chrono::steady_clock;
  // A worker's own events topic "worker.<id>." came (true) or went.
  using WorkerTopicFn = std::function<void(const std::string& worker_id, bool subscribed)>;

  // `options` must outlive this.
  explicit ServerSockets(const ServerOptions& options);
  ServerSockets(const ServerSockets&) = delete;
  ServerSockets& operator=(const ServerSockets&) = delete;

  Status Bind();
  const Endpoints& bound() const { return bound_; }

  zmq::socket_t& control() { return control_; }
  zmq::socket_t& results() { return results_; }
  zmq::socket_t& jobs() { return jobs_; }
  zmq::socket_t& events() { return events_; }

  // An offer on the jobs socket (PUSH, a queue of one per worker): false
  // when no worker can take it now; the loop then polls for room.
  bool SendJob(const protocol::NewTrialJob& job);
  bool jobs_blocked() const { return jobs_blocked_; }
  void JobsWritable() { jobs_blocked_ = false; }
  // One message on the events socket under `topic` (§6).
  void SendEvent(const std::string& topic, protocol::Body body);
  // One reply on the control socket to the client `identity` (§4).
  void SendReply(const std::string& identity, bool delimiter, uint64_t request_id,
                 protocol::Body body);

  // Reads every subscription notification there is. When the distinct
  // topics outgrow their bound, every subscriber is dropped (a new socket)
  // and `on_rebind` runs.
  void DrainSubscriptions(const WorkerTopicFn& on_worker_topic,
                          const std::function<void()>& on_rebind);
  // Distinct subscribed topics that event.ME matches.
  size_t metric_event_topics() const { return metric_event_topics_; }

  DropLog& control_drops() { return control_drops_; }
  DropLog& results_drops() { return results_drops_; }
  void FlushDrops(Clock::time_point now);

 private:
  void Secure(zmq::socket_t& socket);
  void ConfigureEvents();
  void RebindEvents();

  const ServerOptions& options_;
  zmq::context_t ctx_;
  zmq::socket_t control_, jobs_, results_, events_;
  // After the context and sockets: stops (and closes its sockets) first.
  std::unique_ptr<ConnectionGate> gate_;
  Endpoints bound_{"", "", "", ""};  // nothing until Bind()
  uint64_t next_id_ = 0;             // of messages the host sends unasked
  bool jobs_blocked_ = false;        // the last job send hit the HWM
  size_t subscription_bytes_ = 0;    // of the distinct topics subscribed on events_
  // Distinct subscribed topics that event.ME matches (a prefix of it): with
  // none, a metric's event is neither encoded nor sent (one per result).
  size_t metric_event_topics_ = 0;
  DropLog control_drops_{"control socket"};
  DropLog results_drops_{"results socket"};
  DropLog events_drops_{"events socket"};
};

}  // namespace tunehost::host

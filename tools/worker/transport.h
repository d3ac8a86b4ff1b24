// The worker's three sockets (wire-format.md §5.3): offers arrive on jobs
// (PULL), kills, acknowledgements and hello requests on events (SUB, this
// worker's topics), and everything the worker says leaves on results (PUSH).
// It frames, numbers and decodes messages; what they mean is the worker's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <zmq.hpp>

#include "tunehost/protocol/messages.h"
#include "worker_options.h"

namespace tunehost::worker {

class Transport {
 public:
  // `options` must outlive the transport.
  explicit Transport(const WorkerOptions& options);

  void Connect();
  // Lingers up to a bound for what is still queued on results (WB, EN).
  void Close();

  // For zmq::poll: the jobs and the events socket.
  zmq::pollitem_t JobsPollItem() { return {jobs_.handle(), 0, ZMQ_POLLIN, 0}; }
  zmq::pollitem_t EventsPollItem() { return {events_.handle(), 0, ZMQ_POLLIN, 0}; }

  // What waits on jobs (a bounded batch): each offer (TR) to `on_offer`;
  // anything else is dropped with a warning.
  void ReceiveJobs(const std::function<void(const protocol::NewTrialJob&)>& on_offer);
  // What waits on events (a bounded batch) for this worker's topics, decoded.
  void ReceiveEvents(const std::function<void(const protocol::Message&)>& on_event);

  // The message encoded with the next message id (the envelope's `id`, wire-format.md §3).
  std::string Encode(protocol::Body body);
  void Send(protocol::Body body) { SendBytes(Encode(std::move(body))); }
  // Never blocks: a full queue drops the message with a warning.
  void SendBytes(const std::string& bytes);

 private:
  const WorkerOptions& options_;
  zmq::context_t context_;
  zmq::socket_t jobs_;
  zmq::socket_t results_;
  zmq::socket_t events_;
  uint64_t next_message_id_ = 1;
};

}  // namespace tunehost::worker

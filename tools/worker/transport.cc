#include "transport.h"

#include <spdlog/spdlog.h>

#include <iterator>
#include <utility>
#include <vector>

#include <zmq_addon.hpp>

#include "tunehost/protocol/codec.h"

namespace tunehost::worker {
namespace {

// How long the results socket may keep unsent messages (WB, EN) at exit.
constexpr int kResultsLingerMs = 2000;
// Far above the offers in flight to one worker; the host never lets many pile up.
constexpr int kResultsSndHwm = 100000;
// Frames beyond this are dropped by ZeroMQ itself (wire-format.md §3.1: 64 × 1 MiB).
constexpr int64_t kMaxFrameBytes = int64_t{64} << 20;
// Messages taken from one socket per poll, so that no socket starves the others.
constexpr int kJobsBatch = 64;
constexpr int kEventsBatch = 1024;

}  // namespace

Transport::Transport(const WorkerOptions& options) : options_(options), context_(1) {}

void Transport::Connect() {
  jobs_ = zmq::socket_t(context_, zmq::socket_type::pull);
  // One buffered offer at most: the host's PUSH round-robins past a busy worker.
  jobs_.set(zmq::sockopt::rcvhwm, 1);
  jobs_.set(zmq::sockopt::linger, 0);
  jobs_.set(zmq::sockopt::maxmsgsize, kMaxFrameBytes);
  tunehost::protocol::ApplyClientKeys(jobs_, options_.keys);
  jobs_.connect(options_.jobs_endpoint);

  results_ = zmq::socket_t(context_, zmq::socket_type::push);
  results_.set(zmq::sockopt::sndhwm, kResultsSndHwm);
  results_.set(zmq::sockopt::linger, kResultsLingerMs);
  tunehost::protocol::ApplyClientKeys(results_, options_.keys);
  results_.connect(options_.results_endpoint);

  events_ = zmq::socket_t(context_, zmq::socket_type::sub);
  events_.set(zmq::sockopt::linger, 0);
  events_.set(zmq::sockopt::maxmsgsize, kMaxFrameBytes);
  events_.set(zmq::sockopt::subscribe, "worker." + options_.id + ".");
  events_.set(zmq::sockopt::subscribe, "worker.*");
  tunehost::protocol::ApplyClientKeys(events_, options_.keys);
  events_.connect(options_.events_endpoint);
}

void Transport::Close() {
  jobs_.close();
  events_.close();
  results_.close();  // lingers up to kResultsLingerMs for WB and EN
}

void Transport::ReceiveJobs(const std::function<void(const protocol::NewTrialJob&)>& on_offer) {
  for (int i = 0; i < kJobsBatch; ++i) {
    zmq::message_t frame;
    if (!jobs_.recv(frame, zmq::recv_flags::dontwait)) break;
    protocol::Message message;
    const Status s = protocol::Decode(frame.to_string_view(), &message);
    if (!s.ok()) {
      spdlog::warn("jobs: dropped an undecodable message ({} bytes): {}", frame.size(),
                   s.ToString());
      continue;
    }
    const auto* job = std::get_if<protocol::NewTrialJob>(&message.body);
    if (job == nullptr) {
      spdlog::warn("jobs: dropped a '{}' message, only TR is expected here", message.type);
      continue;
    }
    on_offer(*job);
  }
}

void Transport::ReceiveEvents(const std::function<void(const protocol::Message&)>& on_event) {
  for (int i = 0; i < kEventsBatch; ++i) {
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(events_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      break;
    }
    if (frames.size() != 2) {
      spdlog::warn("events: dropped a message of {} frame(s), expected topic + envelope",
                   frames.size());
      continue;
    }
    // SUB matches prefixes: "worker.a." also receives what is meant for
    // "worker.a.b.".
    const std::string_view topic = frames[0].to_string_view();
    if (topic != "worker." + options_.id + "." && topic != "worker.*") continue;
    protocol::Message message;
    const Status s = protocol::Decode(frames[1].to_string_view(), &message);
    if (!s.ok()) {
      spdlog::warn("events: dropped an undecodable message on '{}' ({} bytes): {}",
                   frames[0].to_string(), frames[1].size(), s.ToString());
      continue;
    }
    on_event(message);
  }
}

std::string Transport::Encode(protocol::Body body) {
  protocol::Message message;
  message.id = next_message_id_++;
  message.body = std::move(body);
  return protocol::Encode(message);
}

void Transport::SendBytes(const std::string& bytes) {
  try {
    if (!results_.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) {
      spdlog::warn("results: send queue full, a message was dropped");
    }
  } catch (const zmq::error_t& e) {
    spdlog::error("results: send failed: {}", e.what());
  }
}

}  // namespace tunehost::worker

#include "tunehost/host/connection_gate.h"

#include <zmq.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

namespace tunehost::host {

namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";  // RFC 27
constexpr const char* kWakeEndpoint = "inproc://tunehost-gate-wake";
constexpr auto kPollInterval = std::chrono::milliseconds(200);

std::string Text(const zmq::message_t& m) {
  return std::string(static_cast<const char*>(m.data()), m.size());
}

}  // namespace

// One monitored socket, on the gate thread.
struct ConnectionGate::Watched {
  std::string name;
  std::string endpoint;
  zmq::socket_t monitor;
  std::set<int> live;  // fds of accepted connections not disconnected yet

  Watched(zmq::context_t& ctx, std::string n, std::string ep)
      : name(std::move(n)), endpoint(std::move(ep)), monitor(ctx, zmq::socket_type::pair) {
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(endpoint);
  }
};

ConnectionGate::ConnectionGate(zmq::context_t& context, Options options)
    : context_(context), options_(options), zap_(context, zmq::socket_type::rep) {
  zap_.set(zmq::sockopt::linger, 0);
  zap_.bind(kZapEndpoint);
  thread_ = std::thread([this] { Loop(); });
}

ConnectionGate::~ConnectionGate() {
  stop_.store(true);
  {
    zmq::socket_t wake(context_, zmq::socket_type::push);
    wake.set(zmq::sockopt::linger, 0);
    wake.connect(kWakeEndpoint);
    wake.send(zmq::message_t(), zmq::send_flags::dontwait);
  }
  if (thread_.joinable()) thread_.join();
}

void ConnectionGate::Attach(zmq::socket_t& socket, const std::string& name) {
  socket.set(zmq::sockopt::zap_domain, name);
  socket.set(zmq::sockopt::handshake_ivl, static_cast<int>(options_.handshake_interval.count()));
  uint64_t generation = 0;
  std::string endpoint;
  {
    std::lock_guard<std::mutex> lock(mu_);
    endpoint = "inproc://tunehost-gate-monitor-" + std::to_string(next_monitor_++);
    stats_.try_emplace(name);
  }
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0) {
    throw zmq::error_t();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.emplace_back(name, endpoint);
    generation = attached_generation_;
  }
  zmq::socket_t wake(context_, zmq::socket_type::push);
  wake.set(zmq::sockopt::linger, 0);
  wake.connect(kWakeEndpoint);
  wake.send(zmq::message_t(), zmq::send_flags::dontwait);
  // Connections accepted before the gate listens would never be counted.
  std::unique_lock<std::mutex> lock(mu_);
  attached_.wait_for(lock, std::chrono::seconds(10),
                     [&] { return attached_generation_ > generation; });
}

void ConnectionGate::Detach(zmq::socket_t& socket, const std::string& name) {
  zmq_socket_monitor(socket.handle(), nullptr, 0);
  std::lock_guard<std::mutex> lock(mu_);
  detached_.push_back(name);
  stats_[name].live = 0;
}

ConnectionGate::SocketStats ConnectionGate::stats(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stats_.find(name);
  return it == stats_.end() ? SocketStats{} : it->second;
}

void ConnectionGate::AddPending() {
  std::vector<std::pair<std::string, std::string>> pending;
  std::vector<std::string> detached;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
    detached.swap(detached_);
  }
  for (const std::string& name : detached) {
    watched_.erase(std::remove_if(watched_.begin(), watched_.end(),
                                  [&](const auto& w) { return w->name == name; }),
                   watched_.end());
  }
  for (auto& [name, endpoint] : pending) {
    watched_.push_back(std::make_unique<Watched>(context_, name, endpoint));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++attached_generation_;
  }
  attached_.notify_all();
}

void ConnectionGate::Loop() {
  zmq::socket_t wake(context_, zmq::socket_type::pull);
  wake.set(zmq::sockopt::linger, 0);
  wake.bind(kWakeEndpoint);
  while (!stop_.load()) {
    AddPending();
    std::vector<zmq::pollitem_t> items;
    items.push_back({wake.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({zap_.handle(), 0, ZMQ_POLLIN, 0});
    for (const auto& w : watched_) items.push_back({w->monitor.handle(), 0, ZMQ_POLLIN, 0});
    try {
      zmq::poll(items.data(), items.size(), kPollInterval);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      continue;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t m;
      while (wake.recv(m, zmq::recv_flags::dontwait)) {
      }
    }
    // Connection counts first: a connection's ACCEPTED event comes before
    // its handshake asks for admission.
    for (size_t i = 0; i < watched_.size(); ++i) {
      if (items[2 + i].revents & ZMQ_POLLIN) HandleMonitor(*watched_[i]);
    }
    if (items[1].revents & ZMQ_POLLIN) HandleZap();
    refused_log_.Flush(DropLog::Clock::now());
  }
}

void ConnectionGate::HandleMonitor(Watched& w) {
  for (;;) {
    zmq::message_t event, address;
    if (!w.monitor.recv(event, zmq::recv_flags::dontwait)) return;
    if (!event.more() || !w.monitor.recv(address, zmq::recv_flags::dontwait)) continue;
    if (event.size() < 6) continue;
    uint16_t id = 0;
    int32_t value = 0;
    std::memcpy(&id, event.data(), sizeof id);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
    if (id == ZMQ_EVENT_ACCEPTED) {
      w.live.insert(value);
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
      w.live.erase(value);
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
               id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      // A peer that does not speak the socket's mechanism (no key for a
      // host with keys, or a key for one without) or garbage: the monitor
      // knows no peer address, only the socket.
      refused_log_.Drop(w.name, w.name + " socket: a handshake failed (a peer without the "
                                         "host's keys, or not ZeroMQ)",
                        DropLog::Clock::now());
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_[w.name].failed_handshakes;
      continue;
    } else {
      continue;  // HANDSHAKE_FAILED_AUTH: the ZAP refusal, counted there
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_[w.name].live = w.live.size();
  }
}

void ConnectionGate::HandleZap() {
  for (;;) {
    std::vector<zmq::message_t> frames;
    for (;;) {
      zmq::message_t part;
      if (!zap_.recv(part, zmq::recv_flags::dontwait)) break;
      const bool more = part.more();
      frames.push_back(std::move(part));
      if (!more) break;
    }
    if (frames.empty()) return;
    // RFC 27: version, request id, domain, address, identity, mechanism, ...
    std::string request_id = frames.size() > 1 ? Text(frames[1]) : "";
    std::string domain = frames.size() > 2 ? Text(frames[2]) : "";
    std::string address = frames.size() > 3 ? Text(frames[3]) : "";
    std::string mechanism = frames.size() > 5 ? Text(frames[5]) : "";
    std::string client_key = frames.size() > 6 ? Text(frames[6]) : "";
    std::string user_id, refusal;
    uint64_t SocketStats::*counter = &SocketStats::refused;
    // Who: with keys, a known CURVE key in a role this socket takes.
    if (options_.keys != nullptr) {
      const KeyHolder* holder = mechanism == "CURVE" ? options_.keys->Find(client_key) : nullptr;
      if (holder == nullptr) {
        refusal = "unknown key";
        counter = &SocketStats::unknown_keys;
      } else if (!RoleMaySocket(holder->role, domain)) {
        refusal = "the " + std::string(RoleName(holder->role)) + " key '" + holder->name +
                  "' may not use the " + domain + " socket";
        counter = &SocketStats::wrong_role;
      } else {
        user_id = holder->UserId();
      }
    } else if (mechanism != "NULL") {
      refusal = mechanism + " without keys on the host";
    }
    // How many: the socket's connection limit.
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = stats_.find(domain);
      if (it == stats_.end()) {
        refusal = "unknown socket";
      } else {
        if (refusal.empty() && it->second.live > options_.max_connections) {
          refusal = std::to_string(options_.max_connections) + " connections is the limit";
        }
        ++(refusal.empty() ? it->second.admitted : it->second.*counter);
      }
    }
    if (!refusal.empty()) {
      refused_log_.Drop(address, domain + " socket: " + refusal, DropLog::Clock::now());
    }
    const bool allow = refusal.empty();
    const std::string code = allow ? "200" : "400";
    const std::string text = allow ? "OK" : refusal;
    std::vector<std::string> reply = {"1.0", request_id, code, text, user_id, ""};
    for (size_t i = 0; i < reply.size(); ++i) {
      zap_.send(zmq::buffer(reply[i]),
                i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
}

}  // namespace tunehost::host

// Admission of connections to the host's bound sockets (wire-format.md
// §1.1). Every bound socket gets a ZAP domain (its name), so libzmq asks this
// gate, through the ZAP protocol (RFC 27), before it admits a connection;
// the gate counts live connections per socket with socket monitors and
// refuses a connection over the socket's limit. Connections that never
// finish the ZMTP handshake are dropped by libzmq after the handshake
// interval set here. With a key ring it also authenticates (wire-format.md
// §9): only CURVE connections with a known key, in a role the socket takes,
// are admitted, and the connection's User-Id names the key's role and name.
// The gate runs on its own thread, so admission never waits for the host's
// poll loop (nor for a plugin).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "tunehost/host/drop_log.h"
#include "tunehost/host/key_ring.h"

namespace tunehost::host {

class ConnectionGate {
 public:
  struct Options {
    // Live connections one socket admits; more are refused at handshake.
    size_t max_connections = 4096;
    // A connection must finish the ZMTP handshake within this time.
    std::chrono::milliseconds handshake_interval{10000};
    // CURVE keys and roles; null: no authentication (loopback only).
    const KeyRing* keys = nullptr;
  };
  struct SocketStats {
    size_t live = 0;          // connections accepted and not disconnected
    uint64_t admitted = 0;    // handshakes the gate allowed
    uint64_t refused = 0;     // handshakes the gate refused (over the limit)
    uint64_t unknown_keys = 0;  // CURVE handshakes with a key the host does not know
    uint64_t wrong_role = 0;    // known keys in a role this socket does not take
    uint64_t failed_handshakes = 0;  // ZMTP handshakes that failed before ZAP was asked
  };

  // Binds the ZAP handler of `context` and starts the gate's thread. One
  // gate per context.
  ConnectionGate(zmq::context_t& context, Options options);
  ~ConnectionGate();
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Before `socket` binds: gives it the ZAP domain `name` and the handshake
  // interval, and watches its connections. Returns once the gate listens to
  // the socket's monitor, so no connection is missed. Thread: the socket's.
  void Attach(zmq::socket_t& socket, const std::string& name);
  // The socket is about to close: forget its monitor. Thread: the socket's.
  void Detach(zmq::socket_t& socket, const std::string& name);

  SocketStats stats(const std::string& name) const;

 private:
  struct Watched;
  void Loop();
  void HandleZap();
  void HandleMonitor(Watched& watched);
  void AddPending();

  zmq::context_t& context_;
  Options options_;
  zmq::socket_t zap_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  mutable std::mutex mu_;
  std::map<std::string, SocketStats> stats_;   // by socket name
  std::vector<std::pair<std::string, std::string>> pending_;  // (name, monitor endpoint)
  std::vector<std::string> detached_;          // monitor endpoints to drop
  uint64_t attached_generation_ = 0;           // bumped when the thread took `pending_`
  std::condition_variable attached_;
  uint64_t next_monitor_ = 0;

  // Gate thread only.
  std::vector<std::unique_ptr<Watched>> watched_;
  DropLog refused_log_{"connection gate"};
};

}  // namespace tunehost::host

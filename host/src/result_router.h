// The results socket's messages (wire-format.md §5.1): each decoded within
// the results limit, checked against the key its worker first spoke with
// (§9), and handed to the engine; what is refused is dropped and logged
// (rate-limited). Loop thread only. Private to the host library.
#pragma once

#include <string>
#include <string_view>

#include "tunehost/host/engine.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/server.h"
#include "tunehost/status.h"

#include "server_sockets.h"

namespace tunehost::host {

class ResultRouter {
 public:
  // Every reference must outlive this.
  ResultRouter(const ServerOptions& options, ServerSockets& sockets, Engine& engine,
               WorkerKeys& keys)
      : options_(options), sockets_(sockets), engine_(engine), keys_(keys) {}

  // Reads a batch of messages (fairness between the sockets).
  void Drain();
  // Not OK: the message was dropped.
  Status Handle(std::string_view bytes, const std::string& user);

 private:
  const ServerOptions& options_;
  ServerSockets& sockets_;
  Engine& engine_;
  WorkerKeys& keys_;
};

}  // namespace tunehost::host

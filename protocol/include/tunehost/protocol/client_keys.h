// The client side of wire-format.md §9: a peer that connects (tunectl, a
// worker) to a host that authenticates sets its own key pair and the host's
// public key on every socket before connecting.
#pragma once

#include <filesystem>
#include <string>

#include <zmq.hpp>

#include "tunehost/protocol/keys.h"

namespace tunehost::protocol {

struct ClientKeys {
  KeyPair own;             // from the peer's NAME.key_secret
  std::string server_key;  // the host's public key, Z85
  bool enabled() const { return !server_key.empty(); }
};

// Reads `key_file` (a secret certificate, 0600) and `server_key_file` (the
// host's public certificate). Both empty: no authentication. One without the
// other is an error that says which is missing.
inline Status LoadClientKeys(const std::string& key_file, const std::string& server_key_file,
                             ClientKeys* out) {
  *out = ClientKeys{};
  if (key_file.empty() && server_key_file.empty()) return Status::Ok();
  if (key_file.empty() || server_key_file.empty()) {
    return Status::BadField(std::string(key_file.empty() ? "--server-key needs --key (this "
                                                           "peer's .key_secret file)"
                                                         : "--key needs --server-key (the "
                                                           "host's public .key file)"));
  }
  Status st = ReadKeyFile(key_file, /*need_secret=*/true, &out->own);
  if (!st.ok()) return st;
  KeyPair server;
  st = ReadKeyFile(server_key_file, /*need_secret=*/false, &server);
  if (!st.ok()) return st;
  out->server_key = server.public_key;
  return Status::Ok();
}

// Makes `socket` a CURVE client of the host; nothing without keys.
inline void ApplyClientKeys(zmq::socket_t& socket, const ClientKeys& keys) {
  if (!keys.enabled()) return;
  socket.set(zmq::sockopt::curve_serverkey, keys.server_key);
  socket.set(zmq::sockopt::curve_publickey, keys.own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, keys.own.secret_key);
}

}  // namespace tunehost::protocol

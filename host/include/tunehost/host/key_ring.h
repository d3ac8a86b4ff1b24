// Who may connect, and as what (wire-format.md §9): the host's own CURVE key
// pair and the public keys of three roles, read from a keys directory:
//
//   DIR/server.key_secret   the host's key pair (tunectl keygen server --dir DIR)
//   DIR/workers/*.key       jobs and results sockets, events
//   DIR/viewers/*.key       read-only control requests, events
//   DIR/admins/*.key        everything
//
// A key is known by its file name ("workers/node7.key" is worker "node7").
// Read once at start; read-only afterwards, so the ZAP thread and the loop
// share it without locks.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "tunehost/protocol/keys.h"
#include "tunehost/protocol/limits.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

enum class Role { kWorker, kViewer, kAdmin };
std::string_view RoleName(Role role);

struct KeyHolder {
  Role role = Role::kWorker;
  std::string name;  // the key file's stem
  // What ZAP gives ZeroMQ as the connection's User-Id ("worker:node7"),
  // read back from every message's metadata.
  std::string UserId() const { return std::string(RoleName(role)) + ":" + name; }
};
// The role of a User-Id; nullopt for anything else.
std::optional<Role> RoleOfUserId(std::string_view user_id);

// The name of the key `tunehost run` makes for its own local workers (a
// key file of that name in the keys directory is refused).
inline constexpr char kLocalWorkersKeyName[] = "local";

class KeyRing {
 public:
  // Reads DIR as above. Errors name the file: a missing or loose
  // server.key_secret, an unreadable certificate, a key in two roles, a key
  // named like the local workers' one, and any of DIR, its role folders and
  // its keys that is not this user's or that others may write. Other files
  // are ignored (a role directory may also hold secret files).
  static Status Load(const std::filesystem::path& dir, KeyRing* out);

  const protocol::KeyPair& server() const { return server_; }
  // The holder of a public key (32 bytes, as ZAP gives it); null if unknown.
  const KeyHolder* Find(std::string_view key_bytes) const;
  // Authorizes one more key (the host's own local workers), before use.
  Status Add(const std::string& public_key_z85, Role role, const std::string& name);
  size_t count(Role role) const;

 private:
  protocol::KeyPair server_;
  std::map<std::string, KeyHolder> by_key_;  // 32 key bytes -> holder
};

// Worker ids tied to the key that first used them (wire-format.md §9): with
// authentication, a worker's messages are taken only from the key its
// first message came with, so no key can speak for another key's workers
// (and their trials: results of a running attempt come only from the worker
// that runs it, §5.3). Bounded; when full, the ties of ids no longer in use
// are dropped. Loop thread.
class WorkerKeys {
 public:
  // Ids in use are at most the workers a host keeps plus the workers
  // restored trials wait for (each at most kMaxWorkers): twice that leaves
  // every sweep of a full table at least half of it to reuse.
  static constexpr size_t kMaxTies = 4 * protocol::kMaxWorkers;
  // OK when `worker_id` is new (it is tied to `user` now) or tied to `user`.
  // `in_use(id)`: whether the host still knows a worker (or a trial waiting
  // for it) by that id; asked only when the table is full.
  Status Check(const std::string& worker_id, const std::string& user,
               const std::function<bool(const std::string&)>& in_use);
  // Restores a tie a stored trial names (a resumed host).
  void Tie(const std::string& worker_id, const std::string& user);
  // The User-Id a worker speaks with ("" when unknown).
  std::string KeyOf(const std::string& worker_id) const {
    auto it = user_of_.find(worker_id);
    return it == user_of_.end() ? std::string() : it->second;
  }

 private:
  std::map<std::string, std::string> user_of_;  // worker id -> User-Id
};
// The worker_id of a message that has one (nullopt for other messages).
std::optional<std::string> WorkerIdOf(const protocol::Body& body);

// Which sockets a role may connect to: jobs and results take workers and
// admins; control and events take every role (requests are checked one by
// one, RoleMayRequest).
bool RoleMaySocket(Role role, std::string_view socket);
// Whether a role may make a control request: viewers the queries (PI ST LT
// GT JS MT EX LW), admins everything, workers nothing.
bool RoleMayRequest(Role role, const protocol::Body& request);

// Whether every connection to `endpoint` comes from this machine: tcp on
// 127.0.0.0/8 or ::1 (and "localhost", which ZeroMQ cannot bind anyway),
// and ipc and inproc. Anything else needs
// CURVE (or the user's --insecure).
bool IsLoopbackEndpoint(std::string_view endpoint);

}  // namespace tunehost::host

// tunectl's parts: what every command shares — the exit codes, the parsed
// command line, how the host is found (host.json, keys) and called. main.cc
// parses the command line; commands.cc holds one function per control
// request (wire-format.md §4.2); launch_commands.cc starts workers with a
// cluster's engine (launch.h) and writes key pairs.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "launch.h"
#include "tunehost/protocol/client_keys.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::tunectl {

namespace fs = std::filesystem;
namespace p = tunehost::protocol;
using Json = nlohmann::ordered_json;

constexpr int kExitOk = 0;
constexpr int kExitHostError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoHost = 3;
constexpr char kDefaultControl[] = "tcp://127.0.0.1:5650";

// Ends the command: main prints "tunectl: <message>" and exits with `code`.
struct Failure {
  int code;
  std::string message;
};

[[noreturn]] inline void Fail(int code, std::string message) {
  throw Failure{code, std::move(message)};
}

// ---------------------------------------------------------------- options

struct GlobalOptions {
  std::string control;
  std::string experiment;
  std::string workdir;
  int timeout_ms = 5000;
  bool json = false;
  std::string key_file;         // --key, or $TUNEHOST_KEY: this client's .key_secret
  bool key_from_environment = false;  // key_file is $TUNEHOST_KEY's
  std::string server_key_file;  // --server-key, or $TUNEHOST_SERVER_KEY
};

// Where the host is and how to reach it.
struct HostAddress {
  std::string control;
  std::string server_key;  // Z85, from --server-key or host.json; empty: no keys
  // An experiment no host runs: its directory, read from its store instead.
  fs::path stored_dir;
  // Said when nobody answers at `control` (which experiments could be meant).
  std::string hint;
};

fs::path DefaultWorkdir();

// An experiment under the workdir, for `tunectl experiments` and for finding
// the most recent one.
struct ExperimentEntry {
  std::string id;
  fs::path dir;
  bool live = false;             // a host holds it and left a host.json
  fs::file_time_type changed{};  // when its store (or host.json) last changed
};
// The experiments under `workdir` (directories with a store.db), most
// recently changed first.
std::vector<ExperimentEntry> ListExperiments(const fs::path& workdir);

// --control EP; else --experiment ID: its live host (host.json), or its
// store when no host runs it; else the most recent experiment under the
// workdir that a host runs; else the default endpoint. The host's public key
// from --server-key, else from host.json.
HostAddress FindHost(const GlobalOptions& o);

// This client's keys for a host that authenticates (wire-format.md §9).
p::ClientKeys KeysFor(const GlobalOptions& o, const HostAddress& host);

// ---------------------------------------------------------------- the host

// tunectl on a stored experiment no host runs (stored.cc).
struct StoredExperiment;
std::shared_ptr<StoredExperiment> OpenStored(const fs::path& dir);
Json CallStored(StoredExperiment& stored, p::Body body);
std::string StoredDescription(const StoredExperiment& stored);

class Host {
 public:
  Host(std::string endpoint, int timeout_ms, p::ClientKeys keys, std::string hint = {})
      : endpoint_(std::move(endpoint)),
        timeout_ms_(timeout_ms),
        keys_(std::move(keys)),
        hint_(std::move(hint)) {}
  // A stored experiment no host runs: queries are answered from its store.
  explicit Host(std::shared_ptr<StoredExperiment> stored)
      : endpoint_(StoredDescription(*stored)), timeout_ms_(0), stored_(std::move(stored)) {}
  bool stored() const { return stored_ != nullptr; }

  // A socket of this client: with keys, a CURVE client of the host.
  zmq::socket_t Socket(zmq::socket_type type) {
    if (stored_) Fail(kExitHostError, "the experiment is not running: no host to connect to");
    zmq::socket_t socket(ctx_, type);
    socket.set(zmq::sockopt::linger, 0);
    p::ApplyClientKeys(socket, keys_);
    return socket;
  }

  // One request; the ok reply's data as JSON. Error replies and silence end
  // the command (exit 1 and 3).
  Json Call(p::Body body) {
    if (stored_) return CallStored(*stored_, std::move(body));
    zmq::socket_t socket = Socket(zmq::socket_type::dealer);
    try {
      socket.connect(endpoint_);
    } catch (const zmq::error_t& e) {
      Fail(kExitUsage, "cannot use endpoint " + endpoint_ + ": " + e.what());
    }
    const uint64_t id = 1;
    const std::string bytes = p::Encode(id, std::move(body));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
    if (!socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) NoAnswer();
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) NoAnswer();
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, left) == 0) NoAnswer();
      zmq::message_t msg;
      if (!socket.recv(msg, zmq::recv_flags::dontwait)) continue;
      p::Message reply;
      p::DecodeOptions options;
      options.max_message_bytes = p::kMaxReplyBytes;  // LT/MT/EX of large experiments
      tunehost::Status st = p::Decode(msg.to_string_view(), &reply, options);
      if (!st.ok()) Fail(kExitHostError, "unreadable reply from " + endpoint_ + ": " + st.ToString());
      if (reply.id != id) continue;
      if (auto* ok = std::get_if<p::OkReply>(&reply.body)) return Json::parse(p::PackedToJson(ok->data));
      if (auto* err = std::get_if<p::ErrorReply>(&reply.body)) {
        Fail(kExitHostError, err->code + ": " + err->message);
      }
      Fail(kExitHostError, "unexpected reply type " + reply.type);
    }
  }

  zmq::context_t& context() { return ctx_; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  [[noreturn]] void NoAnswer() const {
    Fail(kExitNoHost, "no answer from " + endpoint_ + " within " + std::to_string(timeout_ms_) +
                          " ms (is the host running?" +
                          (keys_.enabled() ? " Does it know this client's key, and is "
                                             "--server-key its key?)"
                                           : " Does it want a key? Then give --key and "
                                             "--server-key.)") +
                          hint_);
  }

  std::string endpoint_;
  int timeout_ms_;
  p::ClientKeys keys_;
  std::string hint_;
  std::shared_ptr<StoredExperiment> stored_;
  zmq::context_t ctx_{1};
};

// ---------------------------------------------------------------- the command line

struct Args {
  GlobalOptions global;
  std::optional<std::string> status_filter;
  uint64_t offset = 0;
  uint64_t limit = 0;
  std::string trial_id;
  std::string output;
  bool csv = false;  // export as CSV
  std::string file;
  std::string params;
  std::optional<uint32_t> concurrency;
  std::optional<uint64_t> max_trials;
  std::optional<std::string> max_duration;
  uint64_t count = 0;
  // launch
  tunehost::tunectl::LaunchSpec launch;
  std::string launch_command, launch_cwd, launch_address, worker_key, script_dir;
  bool dry_run = false;
};

// ---------------------------------------------------------------- commands

// One control request each (commands.cc); 0 or an exit code above.
int Ping(Host& host, const Args& a);
int Experiments(const GlobalOptions& o);
int Status(Host& host, const Args& a);
int Trials(Host& host, const Args& a);
int Trial(Host& host, const Args& a);
int Stats(Host& host, const Args& a);
int Workers(Host& host, const Args& a);
int Metrics(Host& host, const Args& a);
int Export(Host& host, const Args& a);
int Import(Host& host, const Args& a);
int Add(Host& host, const Args& a);
int Update(Host& host, const Args& a);
int SearchSpace(Host& host, const Args& a);
int Kill(Host& host, const Args& a);
int Stop(Host& host, const Args& a);
int Events(Host& host, const Args& a);

// launch_commands.cc
int LaunchSlurm(Host& host, const Args& args);
int LaunchKubernetes(Host& host, const Args& args);
// Writes a new key pair; no host is involved.
int Keygen(const std::string& dir, const std::string& name);

}  // namespace tunehost::tunectl

// The tunehost server: binds the four sockets of DESIGN.md, runs the single
// zmq::poll loop, and wires the trial engine to the plugin strands.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tunehost/host/plugin.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

class KeyRing;

struct Endpoints {
  std::string control = "tcp://127.0.0.1:5650";
  std::string jobs = "tcp://127.0.0.1:5651";
  std::string results = "tcp://127.0.0.1:5652";
  std::string events = "tcp://127.0.0.1:5653";
};

struct ServerOptions {
  Endpoints endpoints;  // "tcp://127.0.0.1:*" picks a free port; see Server::bound()
  size_t max_message_bytes = protocol::kDefaultMaxMessageBytes;
  // Largest message on the results socket; the smaller, the longer its
  // queue (wire-format.md §1.1).
  size_t max_result_bytes = protocol::kDefaultMaxResultBytes;
  std::chrono::milliseconds ack_timeout{2000};
  std::chrono::milliseconds heartbeat_interval{1000};
  int liveness = 3;
  // Exit the loop once the experiment is DONE or ERROR (tunehost run).
  bool exit_when_finished = false;
  // DeduplicateMiddleware: a configuration that already succeeded is answered
  // with its stored result instead of running again.
  bool deduplicate = false;
  // ERROR once this many trials in a row fail (0: never).
  uint32_t max_consecutive_failures = 0;
  // Trials generated ahead of a free slot (EngineOptions::prefetch).
  uint32_t prefetch = 0;
  // Live connections each bound socket admits (wire-format.md §1.1).
  size_t max_connections = 4096;
  // Longest one plugin call may run (the watchdog); an experiment's
  // plugin_timeout_s replaces it.
  std::chrono::milliseconds plugin_call_timeout{600000};
  // tunehost-plugin-runner for `isolation: process`; empty: next to the
  // running program.
  std::filesystem::path plugin_runner;
  // CurveZMQ keys and roles (wire-format.md §9); must outlive the server.
  // Null: no authentication, every peer may do everything (loopback only).
  const KeyRing* keys = nullptr;
};

// Experiment statuses (NNI names).
enum class ExperimentStatus {
  kInitialized,
  kRunning,
  kNoMoreTrial,
  kTunerNoMoreTrial,
  kDone,
  kStopping,
  kStopped,
  kError,
  kViewed,  // a stored experiment opened read-only (tunehost view)
};
std::string_view ToString(ExperimentStatus s);

// A finished trial, for people and for the run summary.
struct TrialSummary {
  std::string trial_id;
  uint64_t sequence_id = 0;
  protocol::TrialStatus status = protocol::TrialStatus::kSucceeded;
  std::string parameters_json;            // the parameters map as JSON
  std::optional<double> final_metric;     // scalar of the FINAL (or last PERIODICAL) result
  std::string final_metric_json;          // the metric as sent, JSON; empty if none
  uint32_t attempts = 1;                  // offers made before it ran to the end
  std::string error;                      // worker's error text for FAILED trials
  double duration_s = 0;
};

struct ExperimentSummary {
  std::string experiment_id;
  ExperimentStatus status = ExperimentStatus::kInitialized;
  std::string error;  // reason for ERROR
  std::vector<TrialSummary> trials;  // terminal trials, in completion order
  uint64_t offers = 0, rejects = 0, reoffers = 0;
  // When the tuner names objectives: the ids of the trials on the Pareto
  // front (pareto_front.h), in the order they joined it.
  std::vector<std::string> pareto_front;
};

class Store;

// Where an experiment stands, for live progress.
struct ProgressInfo {
  ExperimentStatus status = ExperimentStatus::kInitialized;
  std::map<std::string, uint64_t> counts;  // trials by status (WAITING, RUNNING, SUCCEEDED, ...)
  double elapsed_s = 0;                    // run time, including before a resume
  uint32_t concurrency = 1;                // current limits (0 = unlimited budgets)
  uint64_t max_trials = 0;
  double max_duration_s = 0;
};

class Server {
 public:
  // `registry` must outlive the server.
  Server(ServerOptions options, PluginRegistry* registry);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds all sockets. Errors name the endpoint.
  Status Bind();
  // The endpoints actually bound (ports resolved), valid after Bind().
  const Endpoints& bound() const;

  // Configures the experiment as an IN request with an experiment would
  // (creates the plugins, gives the tuner the search space). For `run`.
  // `search_space` is a MessagePack map. Call after Bind, before Run.
  Status Configure(const protocol::ExperimentSpec& spec, const protocol::Packed& search_space);

  // Keeps the experiment in `store` (must outlive the server): trials, their
  // state changes, metrics (committed before they are acknowledged or handed
  // to a plugin), events, search spaces and plugin checkpoints. Call before
  // Configure.
  void UseStore(Store* store);
  // Resume: rebuilds the trials from the store given to UseStore and what the
  // plugins knew (their last checkpoint plus the results that ended after
  // it, or every result through import_data when the tuner keeps no state).
  // Trials stopped with the experiment run again; trials that were running
  // wait `reattach_grace` for their workers to re-announce them. After
  // Configure, before Run.
  Status Restore(std::chrono::milliseconds reattach_grace);
  // View: the trials of `store` read-only (status VIEWED, no plugins, no
  // offers); the control socket answers queries. After Bind, instead of
  // Configure.
  Status View(const protocol::ExperimentSpec& spec, const Store& store);
  // Answers a query of the control API (wire-format.md §4.2) as the control
  // socket would, without sockets: how tunectl reads a stored experiment
  // (after View, without Bind). Requests that change the experiment are
  // refused as on the socket.
  Status AnswerQuery(const protocol::Body& request, protocol::Packed* data);
  // Thread-safe: answers a control API request (wire-format.md §4.2: ST LT
  // GT JS MT EX UX KT) on the loop thread as the control socket would, for
  // a client inside the process (the web UI). `done` runs on the loop thread
  // once the reply may be sent (after the store commit that follows a
  // change); never if the loop is not running: callers wait with a timeout.
  void Ask(protocol::Body request,
           std::function<void(const Status&, const protocol::Packed&)> done);

  // Called on the loop thread whenever a trial reaches its terminal state.
  void OnTrialEnd(std::function<void(const TrialSummary&)> callback);
  // Called on the loop thread about once a second while Run() runs.
  void OnTick(std::function<void()> callback);
  // Valid on the loop thread (in callbacks) and after Run returned.
  ProgressInfo Progress() const;

  // Runs the poll loop until Stop(), a TE request, or (with
  // exit_when_finished) the experiment is finished.
  Status Run();
  // Thread- and signal-safe: asks the loop to stop (experiment -> STOPPED).
  void Stop();

  // Valid after Run returned (or from OnTrialEnd on the loop thread).
  ExperimentSummary Summary() const;

  // A plugin call never returned (the watchdog gave up on it, or a stop did
  // not wait for it). Its plugin can be neither destroyed nor unloaded while
  // the call runs, so the server then leaks itself when destroyed, and a
  // program should end with _exit after its last output.
  bool abandoned_plugin() const;

  // The implementation, private to the host library: named here so that its
  // parts (host/src/server_impl.h) can refer to it.
  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tunehost::host

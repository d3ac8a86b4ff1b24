// The tunehost server: binds the four sockets of DESIGN.md, runs the single
// zmq::poll loop, and wires the trial engine to the plugin strands.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tunehost/host/plugin.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

struct Endpoints {
  std::string control = "tcp://127.0.0.1:5650";
  std::string jobs = "tcp://127.0.0.1:5651";
  std::string results = "tcp://127.0.0.1:5652";
  std::string events = "tcp://127.0.0.1:5653";
};

struct ServerOptions {
  Endpoints endpoints;  // "tcp://127.0.0.1:*" picks a free port; see Server::bound()
  size_t max_message_bytes = protocol::kDefaultMaxMessageBytes;
  std::chrono::milliseconds ack_timeout{2000};
  std::chrono::milliseconds heartbeat_interval{1000};
  int liveness = 3;
  // Exit the loop once the experiment is DONE or ERROR (tunehost run).
  bool exit_when_finished = false;
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

  // Called on the loop thread whenever a trial reaches its terminal state.
  void OnTrialEnd(std::function<void(const TrialSummary&)> callback);

  // Runs the poll loop until Stop(), a TE request, or (with
  // exit_when_finished) the experiment is finished.
  Status Run();
  // Thread- and signal-safe: asks the loop to stop (experiment -> STOPPED).
  void Stop();

  // Valid after Run returned (or from OnTrialEnd on the loop thread).
  ExperimentSummary Summary() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tunehost::host

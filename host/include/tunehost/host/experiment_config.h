// Reads an experiment file (YAML, NNI's camelCase keys) into the values the
// host needs. An NNI config runs unchanged wherever tunehost has the feature;
// the reader refuses or warns about the rest, key by key, so nothing is
// silently dropped. Every error is "<file>:<line>:<col>: <key>: <problem>".
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

// The optional `tunehost:` section; unset values keep the server defaults.
struct TimingOptions {
  std::optional<std::chrono::milliseconds> heartbeat_interval;  // heartbeatIntervalMs
  std::optional<std::chrono::milliseconds> ack_timeout;         // ackTimeoutMs
  std::optional<size_t> max_message_bytes;                      // maxMessageBytes
  std::optional<size_t> max_result_bytes;                       // maxResultBytes
  // deduplicate: a configuration that already succeeded is not run again;
  // its trial ends at once with the stored result (DeduplicateMiddleware).
  std::optional<bool> deduplicate;
  // maxConsecutiveFailures: the experiment stops (ERROR) when this many
  // trials in a row fail; absent: never, as NNI.
  std::optional<uint32_t> max_consecutive_failures;
  // prefetch: trials generated ahead of a free slot (EngineOptions::prefetch).
  std::optional<uint32_t> prefetch;
  // pluginCallTimeoutMs: the longest one plugin call may run (the watchdog).
  std::optional<std::chrono::milliseconds> plugin_call_timeout;
};

// NNI's GPU keys for local trials: trialGpuNumber and the local training
// service's gpuIndices and maxTrialNumberPerGpu.
struct GpuOptions {
  uint32_t per_trial = 0;                  // trialGpuNumber
  std::optional<std::vector<int>> indices;  // gpuIndices; nullopt: every GPU found
  uint32_t max_trials_per_gpu = 1;         // maxTrialNumberPerGpu
};

struct ExperimentConfig {
  std::string name;               // experimentName; empty when absent
  protocol::ExperimentSpec spec;  // id is fresh: 8 chars [a-z0-9], as NNI
  protocol::Packed search_space;  // a MessagePack map
  std::string trial_command;
  std::filesystem::path trial_code_dir;  // absolute
  std::filesystem::path working_dir;     // experimentWorkingDirectory, absolute
  std::filesystem::path source_file;     // the YAML file, absolute
  TimingOptions timing;
  GpuOptions gpus;
  // Keys that were accepted but have no effect here, one sentence each,
  // prefixed "<file>:<line>:<col>: <key>: ". The caller logs them.
  std::vector<std::string> warnings;
};

// Reads `file`. NotFound when it cannot be read; BadField for anything wrong
// inside it.
Status LoadExperimentConfig(const std::filesystem::path& file, ExperimentConfig* out);

// Same, from text; `source_file` names the file in messages and anchors
// relative paths (its directory).
Status ParseExperimentConfig(std::string_view yaml, const std::filesystem::path& source_file,
                             ExperimentConfig* out);

// NNI duration: "30s", "10m", "2h", "1d" (also "1.5h", "90 sec", "2 hours"),
// or a plain number of seconds. Must be positive. False on anything else.
bool ParseDuration(std::string_view text, double* seconds);

// A fresh experiment id: 8 characters from [a-z0-9].
std::string NewExperimentId();

// True for an id usable as a directory name: 1-64 of [A-Za-z0-9_-].
bool ValidExperimentId(std::string_view id);

// Where experiments live when the file names no experimentWorkingDirectory:
// ~/tunehost-experiments.
std::filesystem::path DefaultWorkingDir();

}  // namespace tunehost::host

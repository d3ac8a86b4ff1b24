// tunectl launch: workers started by a cluster's own engine, pointed at a
// running host (DESIGN.md: the host is never a home-made scheduler).
//
//   slurm  an sbatch job array, one tunehost-worker per array task;
//   k8s    an Indexed Job (and a Secret with the workers' keys).
//
// Pure text generation here; launch_commands.cc submits it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tunehost::tunectl {

// What the workers need to know of the host.
struct HostView {
  std::string experiment_id;
  std::string jobs, results, events;  // endpoints as the workers reach them
  std::string trial_command;
  std::string trial_dir;
};

struct LaunchSpec {
  uint32_t workers = 1;          // array tasks / pods
  uint32_t slots = 1;            // trials each worker runs at once
  uint32_t gpus = 0;             // GPUs per worker (Slurm --gres=gpu:N, nvidia.com/gpu)
  std::string worker_bin = "tunehost-worker";
  int64_t max_idle_ms = 600000;  // a worker with nothing to do this long exits
  int64_t heartbeat_ms = 0;      // the host's heartbeat interval (0: the worker's default)
  // Files the workers read: this worker's .key_secret and the host's
  // public .key (both empty without authentication). For Kubernetes, where
  // the files go into a Secret, their contents.
  std::string key_file, server_key_file;
  // Slurm
  std::string partition, time, cpus_per_worker, output_dir;
  std::vector<std::string> sbatch_args;  // passed through as #SBATCH lines
  // Kubernetes
  std::string image, name, ns = "default";
  std::string key_text, server_key_text;
};

// `endpoint` as workers on other machines reach it: a wildcard bind
// (0.0.0.0, *, ::) becomes `address` (default: this machine's host name).
std::string WorkerEndpoint(const std::string& endpoint, const std::string& address);

// A POSIX shell word holding exactly `text`.
std::string ShellQuote(const std::string& text);

// The sbatch script: a job array of spec.workers tunehost-workers.
std::string SlurmScript(const LaunchSpec& spec, const HostView& host);

// A Secret with the keys (when there are keys) and an Indexed Job of
// spec.workers pods, as YAML documents.
std::string KubernetesManifests(const LaunchSpec& spec, const HostView& host);

}  // namespace tunehost::tunectl

#include "launch.h"

#include <unistd.h>

#include <sstream>

#include <yaml-cpp/yaml.h>

namespace tunehost::tunectl {

namespace {

constexpr char kKeyDir[] = "/etc/tunehost/keys";

// The worker's arguments both engines share (wire-format.md §5; §9 for keys).
std::vector<std::string> WorkerArgs(const LaunchSpec& spec, const HostView& host) {
  std::vector<std::string> args = {
      "--jobs",    host.jobs,          "--results", host.results,
      "--events",  host.events,        "--command", host.trial_command,
      "--slots",   std::to_string(spec.slots), "--max-idle-ms", std::to_string(spec.max_idle_ms)};
  // A worker must beat at least as often as the host expects (wire-format.md §5.3).
  if (spec.heartbeat_ms > 0) {
    args.insert(args.end(), {"--heartbeat-ms", std::to_string(spec.heartbeat_ms)});
  }
  return args;
}

}  // namespace

std::string WorkerEndpoint(const std::string& endpoint, const std::string& address) {
  const std::string scheme = "tcp://";
  if (endpoint.rfind(scheme, 0) != 0) return endpoint;
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < scheme.size()) return endpoint;
  const std::string bound = endpoint.substr(scheme.size(), colon - scheme.size());
  const bool wildcard = bound == "0.0.0.0" || bound == "*" || bound == "[::]" || bound == "::";
  if (!wildcard && address.empty()) return endpoint;
  std::string to = address;
  if (to.empty()) {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) == 0) to = name;
  }
  return scheme + to + endpoint.substr(colon);
}

std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string SlurmScript(const LaunchSpec& spec, const HostView& host) {
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# tunehost workers for experiment " << host.experiment_id
    << " (tunectl launch slurm): one tunehost-worker per array task. A worker\n"
    << "# leaves its trial to another when the task is cancelled, and exits after "
    << spec.max_idle_ms / 1000 << " s without work.\n"
    << "#SBATCH --job-name=tunehost-" << host.experiment_id << "\n"
    << "#SBATCH --array=0-" << (spec.workers == 0 ? 0 : spec.workers - 1) << "\n"
    << "#SBATCH --ntasks=1\n";
  if (!spec.output_dir.empty()) s << "#SBATCH --output=" << spec.output_dir << "/worker-%A_%a.log\n";
  if (!spec.partition.empty()) s << "#SBATCH --partition=" << spec.partition << "\n";
  if (!spec.time.empty()) s << "#SBATCH --time=" << spec.time << "\n";
  if (!spec.cpus_per_worker.empty()) s << "#SBATCH --cpus-per-task=" << spec.cpus_per_worker << "\n";
  if (spec.gpus > 0) s << "#SBATCH --gres=gpu:" << spec.gpus << "\n";
  for (const std::string& arg : spec.sbatch_args) s << "#SBATCH " << arg << "\n";
  s << "set -eu\n"
    << "args=(";
  for (const std::string& a : WorkerArgs(spec, host)) s << ShellQuote(a) << " ";
  s << "--id \"slurm-${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}_${SLURM_ARRAY_TASK_ID:-0}\")\n";
  if (!host.trial_dir.empty()) s << "args+=(--cwd " << ShellQuote(host.trial_dir) << ")\n";
  if (!spec.key_file.empty()) {
    s << "args+=(--key " << ShellQuote(spec.key_file) << " --server-key "
      << ShellQuote(spec.server_key_file) << ")\n";
  }
  if (spec.gpus > 0) {
    s << "# The GPUs Slurm gave this task, shared out to its trials.\n"
      << "if [ -n \"${CUDA_VISIBLE_DEVICES:-}\" ]; then args+=(--gpu-indices "
         "\"$CUDA_VISIBLE_DEVICES\"); fi\n";
  }
  s << "exec " << ShellQuote(spec.worker_bin) << " \"${args[@]}\"\n";
  return s.str();
}

std::string KubernetesManifests(const LaunchSpec& spec, const HostView& host) {
  const std::string name = spec.name.empty() ? "tunehost-" + host.experiment_id : spec.name;
  auto labels = [&](YAML::Emitter& e) {
    e << YAML::Key << "labels" << YAML::Value << YAML::BeginMap
      << YAML::Key << "app.kubernetes.io/name" << YAML::Value << "tunehost-worker"
      << YAML::Key << "tunehost/experiment" << YAML::Value << host.experiment_id << YAML::EndMap;
  };
  auto metadata = [&](YAML::Emitter& e, const std::string& n) {
    e << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap << YAML::Key << "name"
      << YAML::Value << n << YAML::Key << "namespace" << YAML::Value << spec.ns;
    labels(e);
    e << YAML::EndMap;
  };
  const bool keys = !spec.key_text.empty();
  YAML::Emitter e;
  if (keys) {
    e << YAML::BeginDoc << YAML::BeginMap << YAML::Key << "apiVersion" << YAML::Value << "v1"
      << YAML::Key << "kind" << YAML::Value << "Secret";
    metadata(e, name + "-keys");
    e << YAML::Key << "type" << YAML::Value << "Opaque" << YAML::Key << "stringData"
      << YAML::Value << YAML::BeginMap << YAML::Key << "worker.key_secret" << YAML::Value
      << YAML::Literal << spec.key_text << YAML::Key << "server.key" << YAML::Value
      << YAML::Literal << spec.server_key_text << YAML::EndMap << YAML::EndMap << YAML::EndDoc;
  }
  std::vector<std::string> args = WorkerArgs(spec, host);
  // Kubernetes expands $(POD_NAME) from the container's environment.
  args.insert(args.end(), {"--id", "$(POD_NAME)"});
  if (keys) {
    args.insert(args.end(), {"--key", std::string(kKeyDir) + "/worker.key_secret",
                             "--server-key", std::string(kKeyDir) + "/server.key"});
  }
  if (spec.gpus > 0) {
    // The device plugin shows a pod its GPUs as 0..N-1.
    std::string indices;
    for (uint32_t g = 0; g < spec.gpus; ++g) indices += (g ? "," : "") + std::to_string(g);
    args.insert(args.end(), {"--gpu-indices", indices});
  }
  e << YAML::BeginDoc << YAML::BeginMap << YAML::Key << "apiVersion" << YAML::Value << "batch/v1"
    << YAML::Key << "kind" << YAML::Value << "Job";
  metadata(e, name);
  e << YAML::Key << "spec" << YAML::Value << YAML::BeginMap
    << YAML::Key << "completionMode" << YAML::Value << "Indexed"
    << YAML::Key << "completions" << YAML::Value << spec.workers
    << YAML::Key << "parallelism" << YAML::Value << spec.workers
    << YAML::Key << "backoffLimit" << YAML::Value << spec.workers * 3
    << YAML::Key << "template" << YAML::Value << YAML::BeginMap
    << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  labels(e);
  e << YAML::EndMap << YAML::Key << "spec" << YAML::Value << YAML::BeginMap
    << YAML::Key << "restartPolicy" << YAML::Value << "OnFailure"
    << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq << YAML::BeginMap
    << YAML::Key << "name" << YAML::Value << "worker"
    << YAML::Key << "image" << YAML::Value << spec.image
    << YAML::Key << "command" << YAML::Value << YAML::BeginSeq << spec.worker_bin << YAML::EndSeq
    << YAML::Key << "args" << YAML::Value << YAML::BeginSeq;
  for (const std::string& a : args) e << YAML::DoubleQuoted << a;
  e << YAML::EndSeq << YAML::Key << "env" << YAML::Value << YAML::BeginSeq << YAML::BeginMap
    << YAML::Key << "name" << YAML::Value << "POD_NAME" << YAML::Key << "valueFrom"
    << YAML::Value << YAML::BeginMap << YAML::Key << "fieldRef" << YAML::Value << YAML::BeginMap
    << YAML::Key << "fieldPath" << YAML::Value << "metadata.name" << YAML::EndMap << YAML::EndMap
    << YAML::EndMap << YAML::EndSeq;
  if (spec.gpus > 0) {
    e << YAML::Key << "resources" << YAML::Value << YAML::BeginMap << YAML::Key << "limits"
      << YAML::Value << YAML::BeginMap << YAML::Key << "nvidia.com/gpu" << YAML::Value
      << spec.gpus << YAML::EndMap << YAML::EndMap;
  }
  if (keys) {
    e << YAML::Key << "volumeMounts" << YAML::Value << YAML::BeginSeq << YAML::BeginMap
      << YAML::Key << "name" << YAML::Value << "keys" << YAML::Key << "mountPath" << YAML::Value
      << kKeyDir << YAML::Key << "readOnly" << YAML::Value << true << YAML::EndMap
      << YAML::EndSeq;
  }
  e << YAML::EndMap << YAML::EndSeq;  // the container, containers
  if (keys) {
    // 0400: the worker refuses a secret key others may read.
    e << YAML::Key << "volumes" << YAML::Value << YAML::BeginSeq << YAML::BeginMap
      << YAML::Key << "name" << YAML::Value << "keys" << YAML::Key << "secret" << YAML::Value
      << YAML::BeginMap << YAML::Key << "secretName" << YAML::Value << name + "-keys"
      << YAML::Key << "defaultMode" << YAML::Value << 0400 << YAML::EndMap << YAML::EndMap
      << YAML::EndSeq;
  }
  e << YAML::EndMap << YAML::EndMap << YAML::EndMap << YAML::EndMap << YAML::EndDoc;
  return std::string(e.c_str()) + "\n";
}

}  // namespace tunehost::tunectl

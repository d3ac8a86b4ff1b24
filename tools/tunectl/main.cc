// tunectl: the command line for a running tunehost host (nnictl's role). Every
// command is one control request (protocol/docs/wire-format.md §4) on a
// DEALER socket; `events` subscribes to the events socket. Tables for people
// by default, `--json` prints the reply data for scripts.
//
// Exit codes: 0 ok; 1 the host answered with an error; 2 bad command line or
// bad input file; 3 no host (no answer within --timeout-ms, or no host.json).
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "tunectl.h"

namespace tunehost::tunectl {
namespace {

// ---------------------------------------------------------------- main

int Run(int argc, char** argv) {
  CLI::App app{"tunectl: control a running tunehost experiment, or read a finished one"};
  app.require_subcommand(1);
  app.fallthrough();  // global options also after the command
  Args a;
  app.add_option("--control", a.global.control,
                 std::string("host control endpoint (default ") + kDefaultControl + ")");
  app.add_option("--experiment", a.global.experiment,
                 "experiment id: the host is found through <workdir>/<id>/host.json");
  app.add_option("--workdir", a.global.workdir,
                 "experiments directory (default ~/tunehost-experiments)");
  app.add_option("--timeout-ms", a.global.timeout_ms, "how long to wait for the host")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--json", a.global.json, "print the reply data as JSON");
  app.add_option("--key", a.global.key_file,
                 "this client's key pair (a .key_secret file) for a host that authenticates "
                 "(default: $TUNEHOST_KEY, used only with hosts that have keys)");
  app.add_option("--server-key", a.global.server_key_file,
                 "the host's public key (a .key file; default: from the experiment's host.json)")
      ->envname("TUNEHOST_SERVER_KEY");

  using Command = int (*)(Host&, const Args&);
  std::vector<std::pair<CLI::App*, Command>> commands;
  auto command = [&](const char* name, const char* help, Command fn) {
    CLI::App* c = app.add_subcommand(name, help);
    commands.emplace_back(c, fn);
    return c;
  };
  command("ping", "ask the host whether it is there (works before an experiment exists)", Ping);
  command("status", "experiment status, limits, trial counts, best trial", Status);
  CLI::App* trials = command("trials", "list trials in sequence order", Trials);
  trials->add_option("--status", a.status_filter, "only trials with this status")
      ->check(CLI::IsMember({"WAITING", "RUNNING", "SUCCEEDED", "FAILED", "USER_CANCELED",
                             "SYS_CANCELED", "EARLY_STOPPED"}));
  trials->add_option("--offset", a.offset, "skip this many matching trials");
  trials->add_option("--limit", a.limit, "show at most this many (0 = all)");
  command("trial", "one trial", Trial)->add_option("ID", a.trial_id, "trial id")->required();
  command("stats", "trial counts by status", Stats);
  command("workers", "the workers the host knows: slots, running trials, key, where they run",
          Workers);
  command("metrics", "metrics of one trial or of all", Metrics)
      ->add_option("ID", a.trial_id, "trial id (default: every trial)");
  CLI::App* export_command =
      command("export", "results of succeeded trials as JSON (import reads it back)", Export);
  export_command->add_option("--output,-o", a.output, "write to FILE instead of stdout");
  export_command->add_flag("--csv", a.csv,
                           "CSV instead: trial_id, a column per parameter, value, a column per "
                           "other key of dict metrics");
  command("import", "give the tuner finished results from a JSON file", Import)
      ->add_option("FILE", a.file, "JSON array of {\"parameters\": {...}, \"value\": metric}")
      ->required();
  command("add", "queue a trial with these parameters", Add)
      ->add_option("PARAMS_JSON", a.params, "a JSON object, or @FILE")
      ->required();
  CLI::App* update = command("update", "change the experiment's limits", Update);
  update->add_option("--concurrency", a.concurrency, "trials at once")->check(CLI::PositiveNumber);
  update->add_option("--max-trials", a.max_trials, "trial budget (0 = unlimited)");
  update->add_option("--max-duration", a.max_duration,
                     "time budget: 30s, 10m, 2h, 1d or seconds (0 = unlimited)");
  command("search-space", "replace the tuner's search space from a JSON file", SearchSpace)
      ->add_option("FILE", a.file, "search space (JSON object)")
      ->required();
  command("kill", "stop one trial (it ends USER_CANCELED)", Kill)
      ->add_option("ID", a.trial_id, "trial id")
      ->required();
  command("stop", "stop the experiment and the host", Stop);
  command("events", "print experiment events as JSON lines", Events)
      ->add_option("--count", a.count, "stop after this many events (0 = until Ctrl-C)");
  CLI::App* launch = app.add_subcommand(
      "launch", "start workers with a cluster's engine, pointed at this host");
  launch->require_subcommand(1);
  auto launch_options = [&](CLI::App* c) {
    c->add_option("--workers", a.launch.workers, "workers to start")
        ->check(CLI::Range(1u, 10000u))
        ->capture_default_str();
    c->add_option("--slots", a.launch.slots, "trials each worker runs at once")
        ->check(CLI::Range(1u, 1024u))
        ->capture_default_str();
    c->add_option("--gpus-per-worker", a.launch.gpus, "GPUs each worker asks for")
        ->check(CLI::Range(0u, 1024u));
    c->add_option("--command", a.launch_command,
                  "trial command (default: the experiment's, from its host.json)");
    c->add_option("--cwd", a.launch_cwd, "trial directory on the workers' machines");
    c->add_option("--host", a.launch_address,
                  "address the workers reach the host at (default: its bound address; this "
                  "machine's name for a wildcard bind)");
    c->add_option("--worker-key", a.worker_key,
                  "the workers' key pair (a .key_secret whose .key is in the host's "
                  "KEYS/workers/)");
    c->add_option("--worker-bin", a.launch.worker_bin, "tunehost-worker on the workers' side")
        ->capture_default_str();
    c->add_option("--max-idle-ms", a.launch.max_idle_ms,
                  "a worker with no trial this long exits")
        ->capture_default_str();
    c->add_option("--heartbeat-ms", a.launch.heartbeat_ms,
                  "the host's worker heartbeat interval (default: from the experiment's "
                  "host.json, else the worker's 1000)")
        ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
    c->add_flag("--dry-run", a.dry_run, "print what would be submitted, submit nothing");
  };
  CLI::App* slurm = launch->add_subcommand("slurm", "an sbatch job array of tunehost-workers");
  launch_options(slurm);
  slurm->add_option("--partition", a.launch.partition, "Slurm partition");
  slurm->add_option("--time", a.launch.time, "Slurm time limit (e.g. 4:00:00)");
  slurm->add_option("--cpus-per-worker", a.launch.cpus_per_worker, "Slurm --cpus-per-task");
  slurm->add_option("--sbatch-arg", a.launch.sbatch_args,
                    "any other sbatch option, as an #SBATCH line (repeatable)");
  slurm->add_option("--script-dir", a.script_dir,
                    "where the script and the workers' logs go (default ./tunehost-slurm)");
  CLI::App* k8s = launch->add_subcommand("k8s", "a Kubernetes Indexed Job of tunehost-workers");
  launch_options(k8s);
  k8s->add_option("--image", a.launch.image, "container image with tunehost-worker and the "
                                             "trial code");
  k8s->add_option("--name", a.launch.name, "Job name (default tunehost-<experiment>)");
  k8s->add_option("--namespace", a.launch.ns, "Kubernetes namespace")->capture_default_str();
  commands.emplace_back(slurm, LaunchSlurm);
  commands.emplace_back(k8s, LaunchKubernetes);
  CLI::App* experiments = app.add_subcommand(
      "experiments", "the experiments under --workdir, newest first: status, trials, name");
  std::string keygen_name, keygen_dir = ".";
  CLI::App* keygen = app.add_subcommand(
      "keygen", "write a CURVE key pair: DIR/NAME.key (public) and DIR/NAME.key_secret (0600)");
  keygen->add_option("NAME", keygen_name, "key name (a plain file name)")->required();
  keygen->add_option("--dir", keygen_dir, "where to write it (created 0700 if missing)")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (keygen->parsed()) return Keygen(keygen_dir, keygen_name);
  if (a.global.key_file.empty()) {
    if (const char* env = std::getenv("TUNEHOST_KEY"); env != nullptr && *env != '\0') {
      a.global.key_file = env;
      a.global.key_from_environment = true;
    }
  }
  try {
    if (experiments->parsed()) return Experiments(a.global);
    const HostAddress address = FindHost(a.global);
    Host host = address.stored_dir.empty()
                    ? Host(address.control, a.global.timeout_ms, KeysFor(a.global, address),
                           address.hint)
                    : Host(OpenStored(address.stored_dir));
    for (const auto& [cmd, fn] : commands) {
      if (cmd->parsed()) return fn(host, a);
    }
    return kExitUsage;
  } catch (const Failure& f) {
    std::cerr << "tunectl: " << f.message << "\n";
    return f.code;
  } catch (const std::exception& e) {
    std::cerr << "tunectl: " << e.what() << "\n";
    return kExitHostError;
  }
}

}  // namespace
}  // namespace tunehost::tunectl

int main(int argc, char** argv) { return tunehost::tunectl::Run(argc, argv); }

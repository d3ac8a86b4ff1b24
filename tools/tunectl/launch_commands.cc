// tunectl launch and keygen: workers started by a cluster's engine (launch.h
// writes what is submitted; this submits it) and CURVE key pairs.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <iterator>

#include "tunectl.h"

namespace tunehost::tunectl {

namespace {

// ---------------------------------------------------------------- launch

// The experiment's host.json, when tunectl found the host through it.
Json HostJson(const GlobalOptions& o) {
  if (o.experiment.empty()) return Json::object();
  const fs::path dir = o.workdir.empty() ? DefaultWorkdir() : fs::path(o.workdir);
  std::ifstream in(dir / o.experiment / "host.json");
  Json j = in ? Json::parse(in, nullptr, false) : Json::object();
  return j.is_object() ? j : Json::object();
}

// Runs `argv` with `input` on its stdin; its stdout in *output. The exit code,
// or -1 when it cannot be started.
int RunTool(const std::vector<std::string>& argv, const std::string& input, std::string* output) {
  int in[2], out[2];
  if (pipe(in) != 0) return -1;
  if (pipe(out) != 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    return -1;
  }
  (void)!write(in[1], input.data(), input.size());
  close(in[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0) output->append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return -1;
  return WEXITSTATUS(status) == 127 ? -1 : WEXITSTATUS(status);
}

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What both engines need: the host as workers reach it, and their keys.
// `key_files`: the workers read the keys from files (Slurm: a shared file
// system), so the host's public key is written to one when only host.json
// has it; otherwise (Kubernetes: a Secret) their text is enough.
tunehost::tunectl::HostView PrepareLaunch(Host& host, Args& a, bool key_files) {
  namespace tl = tunehost::tunectl;
  if (host.stored()) {
    Fail(kExitHostError, "the experiment is not running (" + host.endpoint() +
                             "): `tunehost resume` it, then launch workers for it");
  }
  Json st = host.Call(p::GetStatus{});
  Json info = HostJson(a.global);
  tl::HostView view;
  view.experiment_id = st.value("experiment_id", "");
  const Json endpoints = st.value("endpoints", Json::object());
  view.jobs = tl::WorkerEndpoint(endpoints.value("jobs", ""), a.launch_address);
  view.results = tl::WorkerEndpoint(endpoints.value("results", ""), a.launch_address);
  view.events = tl::WorkerEndpoint(endpoints.value("events", ""), a.launch_address);
  view.trial_command = !a.launch_command.empty() ? a.launch_command
                                                 : info.value("trial_command", "");
  view.trial_dir = !a.launch_cwd.empty() ? a.launch_cwd : info.value("trial_code_directory", "");
  if (a.launch.heartbeat_ms == 0) a.launch.heartbeat_ms = info.value("heartbeat_ms", int64_t{0});
  if (view.trial_command.empty()) {
    Fail(kExitUsage, "the workers need the trial command: give --command (a `tunehost run` "
                     "experiment found with --experiment has it)");
  }
  const std::string server_key = info.value("server_key", "");
  if (!server_key.empty() || !a.global.server_key_file.empty()) {
    if (a.worker_key.empty()) {
      Fail(kExitUsage, "the host authenticates: give the workers' key with --worker-key FILE "
                       "(a .key_secret whose .key is in the host's KEYS/workers/)");
    }
    p::KeyPair worker;
    tunehost::Status s = p::ReadKeyFile(a.worker_key, /*need_secret=*/true, &worker);
    if (!s.ok()) Fail(kExitUsage, s.message());
    a.launch.key_file = fs::absolute(a.worker_key).string();
    a.launch.key_text = ReadWhole(a.worker_key);
    if (!a.global.server_key_file.empty()) {
      a.launch.server_key_file = fs::absolute(a.global.server_key_file).string();
      a.launch.server_key_text = ReadWhole(a.global.server_key_file);
    } else if (!key_files) {
      a.launch.server_key_text = p::PublicCertificate(server_key);
    } else {
      // Only host.json has the host's key: the workers get it as a file.
      const fs::path file = fs::absolute(a.script_dir) / "server.key";
      std::error_code ec;
      fs::create_directories(file.parent_path(), ec);
      fs::remove(file, ec);
      s = p::WritePublicKey(file, server_key);
      if (!s.ok()) Fail(kExitUsage, s.message());
      a.launch.server_key_file = file.string();
      a.launch.server_key_text = ReadWhole(file.string());
    }
  }
  return view;
}

}  // namespace

int LaunchSlurm(Host& host, const Args& args) {
  Args a = args;
  if (a.script_dir.empty()) a.script_dir = "tunehost-slurm";
  const tunehost::tunectl::HostView view = PrepareLaunch(host, a, /*key_files=*/true);
  std::error_code ec;
  const fs::path dir = fs::absolute(a.script_dir);
  fs::create_directories(dir, ec);
  a.launch.output_dir = dir.string();
  const std::string script = tunehost::tunectl::SlurmScript(a.launch, view);
  if (a.dry_run) {
    std::cout << script;
    return kExitOk;
  }
  const fs::path file = dir / ("workers-" + view.experiment_id + "-" +
                               std::to_string(std::time(nullptr)) + ".sbatch");
  std::ofstream(file) << script;
  std::string out;
  const int rc = RunTool({"sbatch", "--parsable", file.string()}, "", &out);
  if (rc != 0) {
    Fail(kExitHostError, rc < 0 ? "cannot run sbatch: is Slurm installed here?"
                                : "sbatch failed (exit " + std::to_string(rc) + "); the script "
                                  "is " + file.string());
  }
  const std::string job = out.substr(0, out.find_first_of(";\n"));
  if (a.global.json) {
    std::cout << Json{{"engine", "slurm"}, {"job", job}, {"workers", a.launch.workers},
                      {"script", file.string()}}.dump() << "\n";
  } else {
    std::printf("submitted Slurm job %s: %u worker(s) for experiment %s (script %s, logs in "
                "%s)\n`tunectl workers` shows them; `scancel %s` stops them (their trials go "
                "to other workers)\n",
                job.c_str(), a.launch.workers, view.experiment_id.c_str(), file.c_str(),
                dir.c_str(), job.c_str());
  }
  return kExitOk;
}

int LaunchKubernetes(Host& host, const Args& args) {
  Args a = args;
  if (a.launch.image.empty()) Fail(kExitUsage, "launch k8s needs --image (one with tunehost-worker and the trial code)");
  const tunehost::tunectl::HostView view = PrepareLaunch(host, a, /*key_files=*/false);
  const std::string manifests = tunehost::tunectl::KubernetesManifests(a.launch, view);
  if (a.dry_run) {
    std::cout << manifests;
    return kExitOk;
  }
  std::string out;
  const int rc = RunTool({"kubectl", "apply", "-f", "-"}, manifests, &out);
  if (rc != 0) {
    Fail(kExitHostError, rc < 0 ? "cannot run kubectl: apply the output of --dry-run where "
                                  "kubectl reaches the cluster"
                                : "kubectl apply failed (exit " + std::to_string(rc) + ")");
  }
  std::cout << out;
  return kExitOk;
}

// Writes a new key pair; no host is involved.
int Keygen(const std::string& dir, const std::string& name) {
  p::KeyPair keys;
  tunehost::Status st = p::GenerateKeyPair(&keys);
  if (st.ok()) st = p::WriteKeyPair(dir, name, keys);
  if (!st.ok()) {
    std::cerr << "tunectl: keygen: " << st.message() << "\n";
    return st.code() == tunehost::Status::Code::kUnavailable ? kExitHostError : kExitUsage;
  }
  const fs::path base = fs::path(dir) / name;
  std::cout << "public key  " << base.string() << ".key  (give it to the host: put it in "
            << "KEYS/workers, KEYS/viewers or KEYS/admins)\n"
            << "secret key  " << base.string() << ".key_secret  (0600; this peer's --key)\n";
  return kExitOk;
}

}  // namespace tunehost::tunectl

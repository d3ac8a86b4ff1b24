// Isolated plugins: the crash policy of isolated_plugin.h over RunnerProcess.
#include "tunehost/host/isolated_plugin.h"

#include <unistd.h>

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "runner_frames.h"
#include "runner_process.h"
#include "tunehost/host/plugin_text.h"

namespace tunehost::host {

namespace fs = std::filesystem;
namespace rf = runner_frames;

fs::path DefaultRunnerPath() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (ec ? fs::current_path(ec) : self.parent_path()) / "tunehost-plugin-runner";
}

namespace {

// Packed call arguments: the bytes and how many values they hold.
struct Args {
  std::string bytes;
  uint32_t count = 0;
  msgpack::sbuffer buffer;
  rf::Packer packer{buffer};

  Args& Bin(std::string_view b) { return Add([&] { rf::Bin(packer, b); }); }
  Args& Str(std::string_view s) { return Add([&] { rf::Str(packer, s); }); }
  Args& Int(int64_t v) { return Add([&] { packer.pack_int64(v); }); }
  Args& Bool(bool v) { return Add([&] { packer.pack(v); }); }
  Args& Double(double v) { return Add([&] { packer.pack_double(v); }); }
  Args& Ints(const std::vector<int64_t>& v) {
    return Add([&] {
      packer.pack_array(static_cast<uint32_t>(v.size()));
      for (int64_t x : v) packer.pack_int64(x);
    });
  }
  std::string Take() const { return std::string(buffer.data(), buffer.size()); }

 private:
  template <class Fn>
  Args& Add(Fn fn) {
    fn();
    ++count;
    return *this;
  }
};

// One journaled call, replayed after a crash.
struct Entry {
  std::string op;
  std::string args;
  uint32_t count = 0;
};

// What tuners and assessors share: the runner, the journal and the policy.
class IsolatedPlugin {
 public:
  IsolatedPlugin(PluginInfo info, std::string class_args, SendTrialFn send_trial,
                 IsolationOptions options)
      : info_(std::move(info)),
        class_args_(std::move(class_args)),
        send_trial_(std::move(send_trial)),
        options_(std::move(options)),
        label_(info_.kind + " " + info_.name) {
    if (options_.runner.empty()) options_.runner = DefaultRunnerPath();
    if (options_.max_attempts_per_call < 1) options_.max_attempts_per_call = 1;
  }

  const PluginInfo& info() const { return info_; }

  // The first runner, with the instance created in it.
  Status Start() {
    std::string reply;
    Status st = StartRunner(&reply);
    if (!st.ok()) runner_.reset();
    return st;
  }

  // One call under the crash policy of isolated_plugin.h. On success the
  // reply frame (results from index 4) is in *reply.
  Status Invoke(const char* op, const Args& args, bool journaled, std::string* reply) {
    const std::string bytes = args.Take();
    std::string last_cause;
    for (int attempt = 1; attempt <= options_.max_attempts_per_call; ++attempt) {
      if (!runner_) {
        Status st = Restart();
        if (!st.ok()) {
          last_cause = st.message();
          continue;
        }
      }
      const auto outcome =
          runner_->Call(op, bytes, args.count, options_.call_timeout, options_.memory_limit_bytes,
                        reply);
      if (outcome == RunnerProcess::Outcome::kReplied) {
        if (journaled) journal_.push_back(Entry{op, bytes, args.count});
        return StatusOfReply(*reply);
      }
      if (outcome == RunnerProcess::Outcome::kTimedOut) {
        runner_.reset();
        const std::string message = fmt::format(
            "{}: {} did not return within {:g} s; its runner was killed and is restarted for "
            "the next call",
            label_, op, static_cast<double>(options_.call_timeout.count()) / 1000);
        Report("plugin_timeout", message);
        return Status::PluginError(message);
      }
      last_cause = runner_->DeathReason();
      runner_.reset();
      const bool retry = attempt < options_.max_attempts_per_call;
      Report("plugin_crashed", label_ + ": its runner " + last_cause + " during " + op +
                                   (retry ? "; restarted from the last checkpoint, the call is "
                                            "tried again"
                                          : "; giving up on this call"));
    }
    return Status::PluginError(label_ + ": " + op + " crashed the plugin runner " +
                               std::to_string(options_.max_attempts_per_call) +
                               " times in a row (last: " + last_cause + ")");
  }

  // The host took a checkpoint: a restart loads it and replays only what
  // came after.
  void Checkpointed(std::string state) {
    restore_point_ = std::move(state);
    restore_space_ = last_space_;
    if (load_works_) {
      journal_.clear();
      journal_base_ = 0;
    } else {
      journal_base_ = journal_.size();  // until a load is seen to work
    }
  }
  // The host loaded a state: it replaces everything before it.
  void Loaded(const std::string& state, bool supported) {
    if (!supported) return;
    load_works_ = true;
    restore_point_ = state;
    restore_space_ = last_space_;
    journal_.clear();
    journal_base_ = 0;
  }
  void SearchSpace(const std::string& space) { last_space_ = space; }

 private:
  Status StatusOfReply(const std::string& frame) {
    rf::Reader r(frame);
    std::string code, message;
    if (!r.String(2, &code)) return Status::PluginError(label_ + ": malformed reply");
    r.String(3, &message);
    return rf::StatusOf(code, CleanPluginText(message));
  }

  void Report(const std::string& code, const std::string& message) {
    spdlog::error("{}", message);
    if (options_.on_event) options_.on_event(code, message);
  }

  // A new runner with a new instance (create only).
  Status StartRunner(std::string* reply) {
    RunnerProcess::Hooks hooks;
    hooks.label = label_;
    hooks.send_trial = send_trial_;
    hooks.replaying = [this] { return replaying_.load(); };
    Status st = RunnerProcess::Start(options_.runner, info_, std::move(hooks), &runner_);
    if (!st.ok()) return Status::PluginError(label_ + ": " + st.message());
    Args create;
    create.Str(info_.id).Bin(class_args_);
    const auto outcome = runner_->Call(rf::kCreate, create.Take(), create.count,
                                       options_.call_timeout, options_.memory_limit_bytes, reply);
    if (outcome == RunnerProcess::Outcome::kReplied) return StatusOfReply(*reply);
    const std::string cause = outcome == RunnerProcess::Outcome::kTimedOut
                                  ? std::string("did not create the plugin in time")
                                  : runner_->DeathReason();
    runner_.reset();
    return Status::PluginError(label_ + ": its runner " + cause + " while creating the plugin");
  }

  // After a crash: a new runner, restored to where the old one was.
  Status Restart() {
    std::string reply;
    Status st = StartRunner(&reply);
    if (!st.ok()) return st;
    replaying_ = true;
    size_t from = 0;
    if (restore_point_) {
      if (restore_space_) Replay(Entry{rf::kUpdateSearchSpace, Args().Bin(*restore_space_).Take(), 1});
      Args load;
      load.Bin(*restore_point_);
      std::string load_reply;
      bool supported = false;
      if (runner_ &&
          runner_->Call(rf::kLoadState, load.Take(), 1, options_.call_timeout,
                        options_.memory_limit_bytes,
                        &load_reply) == RunnerProcess::Outcome::kReplied &&
          StatusOfReply(load_reply).ok() && rf::Reader(load_reply).Bool(4, &supported) &&
          supported) {
        from = journal_base_;
        if (!load_works_) {
          load_works_ = true;
          journal_.erase(journal_.begin(), journal_.begin() + static_cast<long>(journal_base_));
          journal_base_ = 0;
          from = 0;
        }
      } else {
        // The checkpoint cannot be loaded: a fresh instance gets everything.
        runner_.reset();
        st = StartRunner(&reply);
        if (!st.ok()) {
          replaying_ = false;
          return st;
        }
      }
    }
    for (size_t i = from; i < journal_.size() && runner_; ++i) Replay(journal_[i]);
    replaying_ = false;
    if (!runner_) return Status::PluginError(label_ + ": its runner died again while restoring");
    spdlog::info("{}: runner restarted (pid {}), {} call(s) replayed{}", label_, runner_->pid(),
                 journal_.size() - from, restore_point_ ? " after its checkpoint" : "");
    return Status::Ok();
  }

  void Replay(const Entry& e) {
    std::string reply;
    if (runner_->Call(e.op, e.args, e.count, options_.call_timeout, options_.memory_limit_bytes,
                      &reply) != RunnerProcess::Outcome::kReplied) {
      runner_.reset();
    }
  }

  PluginInfo info_;
  std::string class_args_;
  SendTrialFn send_trial_;
  IsolationOptions options_;
  std::string label_;
  std::unique_ptr<RunnerProcess> runner_;
  std::atomic<bool> replaying_{false};

  std::vector<Entry> journal_;          // state-changing calls, in order
  size_t journal_base_ = 0;             // journal_[journal_base_:] came after restore_point_
  std::optional<std::string> restore_point_;  // the last checkpoint the host took
  std::optional<std::string> restore_space_;  // the search space it had then
  std::optional<std::string> last_space_;
  bool load_works_ = false;  // a load_state of this plugin succeeded
};

class IsolatedTuner final : public Tuner {
 public:
  explicit IsolatedTuner(std::unique_ptr<IsolatedPlugin> plugin) : plugin_(std::move(plugin)) {}

  const PluginInfo& info() const override { return plugin_->info(); }

  Status UpdateSearchSpace(std::string_view search_space) override {
    std::string reply;
    Args args;
    args.Bin(search_space);
    Status st = plugin_->Invoke(rf::kUpdateSearchSpace, args, true, &reply);
    if (st.ok()) plugin_->SearchSpace(std::string(search_space));
    return st;
  }

  Status Generate(const std::vector<int64_t>& ids,
                  std::vector<std::pair<int64_t, protocol::Packed>>* out,
                  bool* no_more) override {
    *no_more = false;
    std::string reply;
    Args args;
    args.Ints(ids);
    Status st = plugin_->Invoke(rf::kGenerate, args, true, &reply);
    rf::Reader r(reply);
    const msgpack::object* params = r.At(4);
    if (params != nullptr && params->type == msgpack::type::ARRAY) {
      for (uint32_t i = 0; i < params->via.array.size; ++i) {
        const msgpack::object& pair = params->via.array.ptr[i];
        if (pair.type != msgpack::type::ARRAY || pair.via.array.size != 2) continue;
        const msgpack::object& id = pair.via.array.ptr[0];
        const msgpack::object& bytes = pair.via.array.ptr[1];
        if (bytes.type != msgpack::type::BIN) continue;
        int64_t pid = id.type == msgpack::type::NEGATIVE_INTEGER ? id.via.i64
                                                                  : static_cast<int64_t>(id.via.u64);
        out->emplace_back(pid, protocol::Packed(bytes.via.bin.ptr, bytes.via.bin.size));
      }
    }
    r.Bool(5, no_more);
    return st;
  }

  Status ReceiveTrialResult(int64_t parameter_id, std::string_view parameters,
                            std::string_view value, double scalar, bool customized) override {
    std::string reply;
    Args args;
    args.Int(parameter_id).Bin(parameters).Bin(value).Double(scalar).Bool(customized);
    return plugin_->Invoke(rf::kReceiveTrialResult, args, true, &reply);
  }

  Status TrialEnd(int64_t parameter_id, bool success) override {
    std::string reply;
    Args args;
    args.Int(parameter_id).Bool(success);
    return plugin_->Invoke(rf::kTrialEnd, args, true, &reply);
  }

  Status ImportData(std::string_view records, bool* supported) override {
    std::string reply;
    Args args;
    args.Bin(records);
    Status st = plugin_->Invoke(rf::kImportData, args, true, &reply);
    *supported = false;
    rf::Reader(reply).Bool(4, supported);
    return st;
  }

  Status SaveState(std::string* state, bool* supported) override {
    return SaveStateOf(*plugin_, state, supported);
  }

  Status LoadState(std::string_view state, bool* supported) override {
    return LoadStateOf(*plugin_, state, supported);
  }

  static Status SaveStateOf(IsolatedPlugin& plugin, std::string* state, bool* supported) {
    std::string reply;
    Status st = plugin.Invoke(rf::kSaveState, Args(), false, &reply);
    rf::Reader r(reply);
    *supported = false;
    r.Bool(4, supported);
    state->clear();
    r.String(5, state);
    if (st.ok() && *supported) plugin.Checkpointed(*state);
    return st;
  }

  static Status LoadStateOf(IsolatedPlugin& plugin, std::string_view state, bool* supported) {
    std::string reply;
    Args args;
    args.Bin(state);
    Status st = plugin.Invoke(rf::kLoadState, args, true, &reply);
    *supported = false;
    rf::Reader(reply).Bool(4, supported);
    if (st.ok()) plugin.Loaded(std::string(state), *supported);
    return st;
  }

 private:
  std::unique_ptr<IsolatedPlugin> plugin_;
};

class IsolatedAssessor final : public Assessor {
 public:
  explicit IsolatedAssessor(std::unique_ptr<IsolatedPlugin> plugin) : plugin_(std::move(plugin)) {}

  const PluginInfo& info() const override { return plugin_->info(); }

  Status AssessTrial(const std::string& trial_id, std::string_view history,
                     bool* good) override {
    std::string reply;
    Args args;
    args.Str(trial_id).Bin(history);
    Status st = plugin_->Invoke(rf::kAssessTrial, args, true, &reply);
    *good = true;
    rf::Reader(reply).Bool(4, good);
    return st;
  }

  Status TrialEnd(const std::string& trial_id, bool success) override {
    std::string reply;
    Args args;
    args.Str(trial_id).Bool(success);
    return plugin_->Invoke(rf::kAssessorTrialEnd, args, true, &reply);
  }

  Status SaveState(std::string* state, bool* supported) override {
    return IsolatedTuner::SaveStateOf(*plugin_, state, supported);
  }

  Status LoadState(std::string_view state, bool* supported) override {
    return IsolatedTuner::LoadStateOf(*plugin_, state, supported);
  }

 private:
  std::unique_ptr<IsolatedPlugin> plugin_;
};

}  // namespace

Status CreateIsolatedTuner(const PluginInfo& info, std::string_view class_args,
                           SendTrialFn send_trial, const IsolationOptions& options,
                           std::unique_ptr<Tuner>* out) {
  auto plugin = std::make_unique<IsolatedPlugin>(info, std::string(class_args),
                                                 std::move(send_trial), options);
  Status st = plugin->Start();
  if (!st.ok()) return st;
  *out = std::make_unique<IsolatedTuner>(std::move(plugin));
  return Status::Ok();
}

Status CreateIsolatedAssessor(const PluginInfo& info, std::string_view class_args,
                              const IsolationOptions& options, std::unique_ptr<Assessor>* out) {
  auto plugin = std::make_unique<IsolatedPlugin>(info, std::string(class_args), nullptr, options);
  Status st = plugin->Start();
  if (!st.ok()) return st;
  *out = std::make_unique<IsolatedAssessor>(std::move(plugin));
  return Status::Ok();
}

}  // namespace tunehost::host

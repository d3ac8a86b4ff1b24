#include "plugin_strands.h"

#include <future>
#include <utility>

#include <spdlog/spdlog.h>

namespace tunehost::host {

namespace p = tunehost::protocol;

namespace {

constexpr auto kStuckGrace = std::chrono::milliseconds(200);
constexpr auto kShutdownGrace = std::chrono::seconds(5);

}  // namespace

PluginStrands::PluginStrands(PluginRegistry* registry, const std::atomic<bool>* stop_requested)
    : registry_(registry), stop_requested_(stop_requested) {}

PluginStrands::~PluginStrands() {
  Stop(kShutdownGrace);
  if (stuck_[kTuner]) (void)tuner_.release();
  if (stuck_[kAssessor]) (void)assessor_.release();
}

std::string PluginStrands::Source(Kind kind) const {
  if (kind == kTuner) return "tuner:" + (tuner_ ? tuner_->info().name : spec_.tuner.name);
  return "assessor:" + (assessor_ ? assessor_->info().name
                                  : spec_.assessor ? spec_.assessor->name : std::string());
}

std::chrono::milliseconds PluginStrands::Limit(Kind kind) const {
  const p::PluginSpec* plugin =
      kind == kTuner ? &spec_.tuner : (spec_.assessor ? &*spec_.assessor : nullptr);
  const bool isolated = plugin != nullptr && plugin->isolation == p::PluginIsolation::kProcess;
  return isolated ? call_timeout_ * 2 + std::chrono::seconds(10) : call_timeout_;
}

std::optional<IsolationOptions> PluginStrands::IsolationFor(const p::PluginSpec& plugin,
                                                            const char* kind) const {
  if (plugin.isolation != p::PluginIsolation::kProcess) return std::nullopt;
  IsolationOptions o;
  o.runner = runner_;
  o.call_timeout = call_timeout_;
  o.memory_limit_bytes = static_cast<size_t>(plugin.memory_limit_mb.value_or(0)) << 20;
  const std::string source = std::string(kind) + ":" + plugin.name;
  if (on_event_) {
    o.on_event = [on_event = on_event_, source](const std::string& code,
                                                const std::string& message) {
      on_event(code, message, source);
    };
  }
  return o;
}

Status PluginStrands::Create(const p::ExperimentSpec& spec,
                             std::chrono::milliseconds call_timeout,
                             const std::filesystem::path& runner, SendTrialFn send_trial,
                             EventFn on_event, Kind* failed) {
  *failed = kTuner;
  if (abandoned()) {
    return Status::BadState("a plugin call of an earlier attempt never returned: restart the "
                            "host");
  }
  spec_ = spec;
  call_timeout_ = call_timeout;
  runner_ = runner;
  on_event_ = std::move(on_event);
  tuner_strand_ = std::make_unique<Strand>("tuner " + spec.tuner.name);
  auto tuner = std::make_shared<std::unique_ptr<Tuner>>();
  Status st = Wait(kTuner, "create",
                   [registry = registry_, plugin = spec.tuner, tuner, send_trial,
                    isolation = IsolationFor(spec.tuner, "tuner")] {
                     return registry->CreateTuner(plugin.name, plugin.args, send_trial,
                                                  tuner.get(), isolation ? &*isolation : nullptr);
                   });
  if (st.ok() && spec.assessor) {
    *failed = kAssessor;
    assessor_strand_ = std::make_unique<Strand>("assessor " + spec.assessor->name);
    auto assessor = std::make_shared<std::unique_ptr<Assessor>>();
    st = Wait(kAssessor, "create",
              [registry = registry_, plugin = *spec.assessor, assessor,
               isolation = IsolationFor(*spec.assessor, "assessor")] {
                return registry->CreateAssessor(plugin.name, plugin.args, assessor.get(),
                                                isolation ? &*isolation : nullptr);
              });
    if (st.ok()) assessor_ = std::move(*assessor);
  }
  if (!st.ok()) {
    assessor_.reset();
    if (!abandoned()) {
      tuner_strand_.reset();
      assessor_strand_.reset();
    }
    return st;
  }
  tuner_ = std::move(*tuner);
  return Status::Ok();
}

void PluginStrands::Post(Kind kind, std::function<void()> fn, const char* call) {
  Strand* strand = StrandOf(kind);
  if (strand == nullptr || stuck_[kind]) return;
  strand->Post(std::move(fn), call);
}

Status PluginStrands::Wait(Kind kind, const char* call, std::function<Status()> fn) {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  StrandOf(kind)->Post([done, fn = std::move(fn)] { done->set_value(fn()); }, call);
  const auto deadline = Clock::now() + Limit(kind);
  while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (stop_requested_->load()) {
      stuck_[kind] = true;
      return Status::BadState("stopped while " + Source(kind) + " ran " + call);
    }
    if (Clock::now() >= deadline) {
      stuck_[kind] = true;
      return Status::PluginError(Source(kind) + ": " + call + " did not return within " +
                                 std::to_string(Limit(kind).count() / 1000) + " s");
    }
  }
  return result.get();
}

std::vector<PluginStrands::Overrun> PluginStrands::Overruns(Clock::time_point now) {
  std::vector<Overrun> out;
  for (Kind kind : {kTuner, kAssessor}) {
    Strand* strand = StrandOf(kind);
    if (strand == nullptr) continue;
    std::optional<Strand::Busy> busy = strand->busy();
    if (!busy || now - busy->since < Limit(kind) || reported_[kind] == busy->task + 1) continue;
    reported_[kind] = busy->task + 1;
    stuck_[kind] = true;
    const auto seconds =
        std::chrono::duration_cast<std::chrono::seconds>(now - busy->since).count();
    out.push_back(Overrun{
        kind, Source(kind),
        Source(kind) + ": " + (busy->call.empty() ? std::string("a call") : busy->call) +
            " has not returned after " + std::to_string(seconds) + " s (limit " +
            std::to_string(Limit(kind).count() / 1000) + " s)"});
  }
  return out;
}

void PluginStrands::Stop(std::chrono::milliseconds grace) {
  // The strands run side by side: one deadline for both.
  const auto deadline = Clock::now() + grace;
  for (Kind kind : {kTuner, kAssessor}) {
    Strand* strand = StrandOf(kind);
    if (strand == nullptr) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(Clock::duration::zero(), deadline - Clock::now()));
    if (!strand->Stop(stuck_[kind] ? std::min(left, kStuckGrace) : left)) stuck_[kind] = true;
  }
}

}  // namespace tunehost::host

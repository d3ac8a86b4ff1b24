#include "bracket_tuner.h"

#include <utility>

#include "bracket_state.h"
#include "tunehost/sdk/cpp/class_args.h"

namespace tunehost::plugins::hyperband {
namespace {

constexpr int64_t kStateVersion = 1;

}  // namespace

BracketTuner::BracketTuner(sdk::HostRef host, std::string name, std::string state_format,
                           bool maximize, Geometry geometry, bool serial, uint64_t seed)
    : Tuner(host),
      name_(std::move(name)),
      state_format_(std::move(state_format)),
      maximize_(maximize),
      serial_(serial),
      seed_(seed),
      book_(host, name_, geometry, serial, maximize) {
  rng_.seed(seed_);
}

void BracketTuner::BadState(const std::string& what) const {
  throw sdk::Error(TH_INVALID_ARGUMENT, name_ + ": saved state: " + what);
}

void BracketTuner::UpdateSearchSpace(const msgpack::object& space) {
  sdk::SearchSpace parsed = sdk::SearchSpace::Parse(space);
  for (const sdk::Parameter& p : parsed.params()) {
    if (p.nested) {
      throw sdk::Error(TH_INVALID_ARGUMENT,
                       name_ + ": search space key \"" + p.path +
                           "\": nested choices are not supported (as in NNI's Hyperband and BOHB)");
    }
    if (p.parent < 0 && p.name == kBudgetKey) {
      throw sdk::Error(TH_INVALID_ARGUMENT,
                       name_ + ": search space key \"" + p.path + "\": the name " + kBudgetKey +
                           " is reserved for the budget this tuner adds to every trial");
    }
  }
  // Configurations already generated keep their values (NNI keeps them too).
  space_ = std::make_unique<sdk::SearchSpace>(std::move(parsed));
  OnSpaceChanged();
}

void BracketTuner::RequireSpace() const {
  if (!space_) throw sdk::Error(TH_BAD_STATE, name_ + ": no search space yet");
}

std::optional<SlotRef> BracketTuner::Next() {
  return book_.Next([this](int64_t budget) { return NewConfiguration(budget); });
}

void BracketTuner::ServeCredits() {
  std::deque<int64_t>& credits = book_.credits();
  while (!credits.empty()) {
    std::optional<SlotRef> ref = Next();
    if (!ref) return;
    const int64_t id = credits.front();
    credits.pop_front();
    const th_status st = host().SendTrial(id, book_.Pack(*ref));
    if (st == TH_OK) {
      book_.Issue(*ref, id);
      continue;
    }
    // The configuration goes to the next id.
    book_.PutBack(*ref);
    if (st == TH_NOT_SUPPORTED || st == TH_BAD_STATE) {
      host().Warn(name_ + ": the host takes no more trials later (send_trial status " +
                  std::to_string(static_cast<int>(st)) + "); " +
                  std::to_string(credits.size() + 1) + " waiting ids dropped");
      credits.clear();
      return;
    }
    host().Warn(name_ + ": the host refused parameter id " + std::to_string(id) +
                " (send_trial status " + std::to_string(static_cast<int>(st)) +
                "); id dropped");
  }
}

bool BracketTuner::GenerateMultiple(
    const std::vector<int64_t>& ids,
    const std::function<void(int64_t, const msgpack::sbuffer&)>& emit) {
  RequireSpace();
  ServeCredits();  // older ids first
  std::deque<int64_t>& credits = book_.credits();
  bool all = true;
  for (int64_t id : ids) {
    std::optional<SlotRef> ref;
    if (credits.empty()) ref = Next();
    if (!ref) {
      // Nothing to hand out until a round finishes: keep the id (credit).
      credits.push_back(id);
      all = false;
      continue;
    }
    try {
      emit(id, book_.Pack(*ref));
    } catch (...) {
      book_.PutBack(*ref);
      throw;
    }
    book_.Issue(*ref, id);
  }
  if (!all) {
    host().Debug(name_ + ": waiting for running trials; " + std::to_string(credits.size()) +
                 " ids kept to be served later");
  }
  return all;
}

bool BracketTuner::GenerateParameters(int64_t parameter_id,
                                      msgpack::packer<msgpack::sbuffer>& out) {
  bool emitted = false;
  GenerateMultiple({parameter_id}, [&](int64_t, const msgpack::sbuffer& params) {
    // Raw bytes of one packed map (pack_bin_body only appends).
    out.pack_bin_body(params.data(), static_cast<uint32_t>(params.size()));
    emitted = true;
  });
  return emitted;
}

void BracketTuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                                      const msgpack::object& /*value*/, double scalar,
                                      bool /*customized*/) {
  if (!book_.Issued(parameter_id)) {
    OnForeignResult(parameters, scalar);
    return;
  }
  if (const auto run = book_.Record(parameter_id, scalar)) {
    OnResult(*run->config, run->budget, scalar);
  }
}

void BracketTuner::TrialEnd(int64_t parameter_id, bool success) {
  if (!book_.End(parameter_id, success)) {
    host().Debug(name_ + ": end of parameter id " + std::to_string(parameter_id) +
                 ", not one of this tuner's running trials, ignored");
    return;
  }
  ServeCredits();
}

// A map: format, version, seed, rng, R, eta, the brackets' entries
// (bracket_state.h), then the subclass's entries.
std::string BracketTuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 12 + ExtraEntries(), state_format_, kStateVersion);
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("R"));
  pk.pack(book_.geometry().R());
  pk.pack(std::string("eta"));
  pk.pack(book_.geometry().eta());
  PackProgress(book_.progress(), pk);
  PackExtra(pk);
  return std::string(buffer.data(), buffer.size());
}

void BracketTuner::LoadState(std::string_view state) {
  msgpack::object_handle h = sdk::OpenState(state, name_, state_format_, kStateVersion);
  const msgpack::object& o = h.get();
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, name_);
  Progress progress =
      UnpackProgress(o, book_.geometry(), [this](const std::string& what) { BadState(what); });
  UnpackExtra(o);  // validates before it changes anything
  seed_ = random.seed;
  rng_ = random.rng;
  book_.Restore(std::move(progress));
}

}  // namespace tunehost::plugins::hyperband

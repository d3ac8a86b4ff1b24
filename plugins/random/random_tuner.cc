#include "random_tuner.h"

#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.random";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "random: saved state: " + what);
}

}  // namespace

RandomTuner::RandomTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  // optimize_mode is accepted for NNI configs that set it on every tuner; random ignores it.
  sdk::ClassArgs args("random", class_args, {"seed", "optimize_mode"});
  args.Maximize(true);
  seed_ = args.SeedOrRandom(host);
  rng_.seed(seed_);
}

void RandomTuner::UpdateSearchSpace(const msgpack::object& space) {
  space_ = sdk::SearchSpace::Parse(space);
  exhausted_ = false;
}

bool RandomTuner::EmitIfNew(const sdk::Assignment& a, msgpack::packer<msgpack::sbuffer>& out) {
  if (!seen_.Insert(*space_, a)) return false;
  space_->Pack(a, out);
  return true;
}

bool RandomTuner::GenerateParameters(int64_t /*parameter_id*/,
                                     msgpack::packer<msgpack::sbuffer>& out) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "random: no search space yet");
  if (exhausted_) return false;
  for (int i = 0; i < kMaxRedraws; ++i) {
    if (EmitIfNew(space_->Sample(rng_), out)) return true;
  }
  // Mostly duplicates: a small finite space is nearly or fully tried. Walk it
  // from a random start so the last configurations are still found.
  bool exhausted = false;
  if (std::optional<sdk::Assignment> a = seen_.FindUnseen(*space_, rng_, &exhausted)) {
    return EmitIfNew(*a, out);
  }
  if (exhausted) {
    exhausted_ = true;
    host().Info("random: all " + std::to_string(*space_->CountConfigurations()) +
                " configurations of the search space have been tried");
    return false;
  }
  host().Warn("random: " + std::to_string(kMaxRedraws) +
              " draws in a row were configurations already tried; no trial this time");
  return false;
}

void RandomTuner::ImportData(const msgpack::object& records) {
  size_t skipped = sdk::ForEachImported(
      records, "random",
      [&](const msgpack::object& params, const msgpack::object&, double) {
        seen_.InsertParameters(params);
      });
  if (skipped > 0) {
    host().Warn("random: skipped " + std::to_string(skipped) +
                " imported records without a \"parameters\" map and a numeric \"value\"");
  }
}

std::string RandomTuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 5, kStateFormat, kStateVersion);
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("seen"));
  seen_.Pack(pk);
  return std::string(buffer.data(), buffer.size());
}

void RandomTuner::LoadState(std::string_view state) {
  msgpack::object_handle h = sdk::OpenState(state, "random", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  const msgpack::object* seen = sdk::FindKey(o, "seen");
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, "random");
  sdk::SeenConfigurations keys;
  if (seen == nullptr || !keys.Unpack(*seen)) BadState("no seen list of binary keys");
  seed_ = random.seed;
  rng_ = random.rng;
  seen_ = std::move(keys);
  exhausted_ = false;
}

}  // namespace tunehost::plugins

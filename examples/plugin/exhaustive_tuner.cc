// An example tuner built outside the tunehost tree against the installed SDK:
// it runs every configuration of a finite search space once, in order, then
// answers "no more trials" so the experiment finishes. A space with a
// continuous parameter is refused. This is the whole plugin.
#include <cstdint>
#include <string>
#include <utility>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace {

using tunehost::sdk::Error;
using tunehost::sdk::SearchSpace;

class ExhaustiveTuner : public tunehost::sdk::Tuner {
 public:
  ExhaustiveTuner(tunehost::sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
    if (class_args.type == msgpack::type::MAP && class_args.via.map.size > 0) {
      throw Error(TH_INVALID_ARGUMENT, "exhaustive takes no class arguments");
    }
  }

  void UpdateSearchSpace(const msgpack::object& space) override {
    SearchSpace parsed = SearchSpace::Parse(space);  // throws, naming the bad key
    if (!parsed.CountConfigurations()) {
      throw Error(TH_INVALID_ARGUMENT,
                  "exhaustive needs a finite search space (choice, randint, clipped q-types)");
    }
    space_ = std::move(parsed);
    count_ = *space_.CountConfigurations();
    next_ = 0;
    host().Info("search space has " + std::to_string(count_) + " configurations");
  }

  bool GenerateParameters(int64_t /*parameter_id*/,
                          msgpack::packer<msgpack::sbuffer>& out) override {
    if (next_ >= count_) return false;  // the host then reports NO_MORE_TRIALS
    space_.Pack(space_.ConfigurationAt(next_++), out);
    return true;
  }

  std::string SaveState() override { return std::to_string(next_); }
  void LoadState(std::string_view state) override { next_ = std::stoull(std::string(state)); }

 private:
  SearchSpace space_;
  uint64_t count_ = 0;
  uint64_t next_ = 0;
};

}  // namespace

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<ExhaustiveTuner>(
    {"org.example.exhaustive", "exhaustive", "example author", "1.0.0",
     "every configuration of a finite search space, once"}))

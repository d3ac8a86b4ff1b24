#include "hyperband_tuner.h"

#include <string>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"

namespace tunehost::plugins::hyperband {

HyperbandTuner::Args HyperbandTuner::ReadArgs(sdk::HostRef host,
                                              const msgpack::object& class_args) {
  sdk::ClassArgs args("hyperband", class_args, {"optimize_mode", "R", "eta", "exec_mode", "seed"});
  Args a;
  a.maximize = args.Maximize(true);
  a.R = args.Int("R", 60, 1, kMaxR);
  a.eta = args.Int("eta", 3, 2, kMaxR);
  a.serial = args.Choice("exec_mode", "parallelism", {"parallelism", "serial"}) == "serial";
  a.seed = args.SeedOrRandom(host);
  return a;
}

HyperbandTuner::HyperbandTuner(sdk::HostRef host, const msgpack::object& class_args)
    : HyperbandTuner(host, ReadArgs(host, class_args)) {}

HyperbandTuner::HyperbandTuner(sdk::HostRef host, const Args& args)
    : BracketTuner(host, "hyperband", "org.tunehost.hyperband", args.maximize,
                   Geometry(args.R, args.eta, Geometry::SMax(1, args.R, args.eta)), args.serial,
                   args.seed) {}

std::string HyperbandTuner::NewConfiguration(int64_t /*budget*/) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  space()->Pack(space()->Sample(rng()), pk);
  return std::string(buffer.data(), buffer.size());
}

void HyperbandTuner::ImportData(const msgpack::object& records) {
  size_t usable = 0;
  size_t skipped = sdk::ForEachImported(records, "hyperband",
                                        [&](const msgpack::object&, const msgpack::object&,
                                            double) { ++usable; });
  // As NNI's Hyperband: successive halving has no place for outside results.
  host().Info("hyperband: " + std::to_string(usable + skipped) +
              " imported records ignored (Hyperband does not use imported data, as in NNI)");
}

}  // namespace tunehost::plugins::hyperband

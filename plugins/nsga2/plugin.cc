// The `nsga2` plugin: exports Nsga2Tuner.
#include "nsga2_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::Nsga2Tuner>(
    {"org.tunehost.nsga2", "nsga2", "tunehost", "1.0.0",
     "NSGA-II (Optuna's NSGAIISampler): several named objectives and constraints, Pareto "
     "ranking with crowding distance"}))

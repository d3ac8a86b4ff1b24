// The `cmaes` plugin: exports CmaEsTuner.
#include "cmaes_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::CmaEsTuner>(
    {"org.tunehost.cmaes", "cmaes", "tunehost", "1.0.0",
     "CMA-ES: a multivariate normal search distribution adapted each generation "
     "(Optuna's CmaEsSampler defaults)"}))

// The `gp` plugin: exports GpTuner.
#include "gp_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::GpTuner>(
    {"org.tunehost.gp", "gp", "tunehost", "1.0.0",
     "Gaussian-process Bayesian optimization with NNI GPTuner's arguments (Matern kernel, "
     "ei/ucb/poi)"}))

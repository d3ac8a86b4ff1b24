// The `anneal` plugin: exports AnnealTuner.
#include "anneal_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::AnnealTuner>(
    {"org.tunehost.anneal", "anneal", "tunehost", "1.0.0",
     "Annealing (NNI Anneal = hyperopt anneal): samples ever closer to the best results"}))

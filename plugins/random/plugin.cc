// The `random` plugin: exports RandomTuner.
#include "random_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::RandomTuner>(
    {"org.tunehost.random", "random", "tunehost", "1.0.0",
     "Random search: independent draws from the search space, without repeats"}))

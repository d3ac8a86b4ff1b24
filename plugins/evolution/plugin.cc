// The `evolution` plugin: exports EvolutionTuner.
#include "evolution_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::EvolutionTuner>(
    {"org.tunehost.evolution", "evolution", "tunehost", "1.0.0",
     "Naive evolution (NNI Evolution): tournament of two, mutate one parameter of the winner"}))

// The `grid` plugin: exports GridTuner.
#include "grid_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::GridTuner>(
    {"org.tunehost.grid", "grid", "tunehost", "1.0.0",
     "Grid search: every combination of the categorical parameters, numeric ones refined "
     "on ever finer quantile grids (NNI's GridSearch)"}))

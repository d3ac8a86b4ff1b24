// The `tpe` plugin: exports TpeTuner.
#include "tpe_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::TpeTuner>(
    {"org.tunehost.tpe", "tpe", "tunehost", "1.0.0",
     "Tree-structured Parzen Estimator (NNI's TPE), univariate or multivariate"}))

// The `batch` plugin: exports BatchTuner.
#include "batch_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::BatchTuner>(
    {"org.tunehost.batch", "batch", "tunehost", "1.0.0",
     "Batch: runs the options of the search space's one choice, in order (NNI's BatchTuner)"}))

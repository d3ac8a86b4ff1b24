// The `pbt` plugin: exports PbtTuner.
#include "pbt_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<tunehost::plugins::PbtTuner>(
    {"org.tunehost.pbt", "pbt", "tunehost", "1.0.0",
     "Population-based training (NNI PBTTuner): synchronous steps, the bottom fraction "
     "continues from a top member's checkpoint with perturbed hyperparameters"}))

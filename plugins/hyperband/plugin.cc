// The `hyperband` plugin: exports the Hyperband and BOHB tuners.
#include "bohb_tuner.h"
#include "hyperband_tuner.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(
    tunehost::sdk::TunerClass<tunehost::plugins::hyperband::HyperbandTuner>(
        {"org.tunehost.hyperband", "hyperband", "tunehost", "1.0.0",
         "Hyperband: successive halving brackets over random configurations, "
         "with TRIAL_BUDGET in every parameter map"}),
    tunehost::sdk::TunerClass<tunehost::plugins::hyperband::BohbTuner>(
        {"org.tunehost.bohb", "bohb", "tunehost", "1.0.0",
         "BOHB: Hyperband brackets whose new configurations come from a TPE model "
         "fitted on the largest budget with enough results"}))

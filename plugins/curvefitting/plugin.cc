// The `curvefitting` plugin: exports CurvefittingAssessor.
#include "curvefitting_assessor.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::AssessorClass<tunehost::plugins::CurvefittingAssessor>(
    {"org.tunehost.curvefitting", "curvefitting", "tunehost", "1.0.0",
     "Learning-curve extrapolation (NNI's Curvefitting): stop a trial whose predicted final "
     "value is below threshold x the best completed value"}))

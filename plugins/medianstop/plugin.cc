// The `medianstop` plugin: exports MedianstopAssessor.
#include "medianstop_assessor.h"
#include "tunehost/sdk/cpp/helper.h"

TH_EXPORT_PLUGIN(tunehost::sdk::AssessorClass<tunehost::plugins::MedianstopAssessor>(
    {"org.tunehost.medianstop", "medianstop", "tunehost", "1.0.0",
     "Median stopping rule: stop a trial whose best value is worse than the median of "
     "completed trials' running averages"}))

// Target 4 of the host benchmarks: fleets of one-slot workers on loopback,
// offers per trial and makespan against the ideal (tools/bench/host_bench.cc).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tunehost::bench {

// Runs each fleet size with offers through the jobs socket and addressed,
// `trials_per_worker` trials per worker, and prints a table with verdicts.
void FleetTarget(const std::string& plugins, const std::vector<size_t>& fleets,
                 size_t trials_per_worker);

}  // namespace tunehost::bench

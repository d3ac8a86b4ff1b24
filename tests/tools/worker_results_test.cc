// tunehost-worker's results against the host's results limit
// (wire-format.md §1.1): a result the host would drop unacknowledged is
// skipped by the worker, which would otherwise resend it for ever.
#include "tools/worker_testing.h"

namespace tunehost::protocol {
namespace {

using namespace worker_testing;  // NOLINT: the shared fixture

TEST_F(WorkerTest, AResultOverTheResultsLimitIsSkippedAndTheTrialGoesOn) {
  const std::string script = WriteScript("big.py", R"(import json, os
fd = int(os.environ["TUNEHOST_METRIC_FD"])
def send(value, kind):
    os.write(fd, (json.dumps({"type": kind, "value": value}) + "\n").encode())
send({"default": 0.5, "note": "n" * 4000}, "PERIODICAL")
send(0.25, "PERIODICAL")
send({"default": 0.9, "note": "n" * 4000}, "FINAL")
send(0.75, "FINAL")
)");
  StartWorker(std::string(TH_PYTHON) + " " + script, {"--max-result-bytes", "2048"});
  host_.Offer(MakeJob("b1"));
  ASSERT_TRUE(AwaitStarted("b1"));
  std::vector<ReportMetricData> results;
  std::optional<TrialEnd> end;
  const auto deadline = Clock::now() + kTimeout;
  while (!end && Clock::now() < deadline) {
    auto m = host_.Next(milliseconds{100});
    if (!m) continue;
    if (auto* me = std::get_if<ReportMetricData>(&m->body)) {
      results.push_back(*me);
      Ack(*me);
    } else if (auto* en = std::get_if<TrialEnd>(&m->body)) {
      end = *en;
    }
  }
  ASSERT_TRUE(end) << "no EN";
  EXPECT_EQ(end->status, TrialStatus::kSucceeded);
  // The two small results, numbered as if the large ones had not been
  // written; the FINAL is the small one that came after the large one.
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].sequence, 0u);
  EXPECT_DOUBLE_EQ(results[0].value.scalar, 0.25);
  EXPECT_EQ(results[1].sequence, 1u);
  EXPECT_EQ(results[1].type, MetricType::kFinal);
  EXPECT_DOUBLE_EQ(results[1].value.scalar, 0.75);
}

}  // namespace
}  // namespace tunehost::protocol

// AckBatch: how one loop turn's acknowledgements become MAs (wire-format.md
// §5.2, acknowledgement spans).
#include "tunehost/host/ack_batch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tunehost::host {
namespace {

namespace p = tunehost::protocol;

struct Sent {
  std::string worker;
  p::MetricAck ack;
};

std::vector<Sent> FlushAll(AckBatch& batch) {
  std::vector<Sent> out;
  batch.Flush([&](const std::string& w, p::MetricAck a) { out.push_back({w, std::move(a)}); });
  EXPECT_TRUE(batch.empty());
  return out;
}

p::MetricAck Ack(const std::string& trial, uint32_t attempt, uint64_t seq) {
  return p::MetricAck{trial, attempt, seq};
}

TEST(AckBatchTest, ConsecutiveResultsOfOneAttemptBecomeOneSpan) {
  AckBatch batch;
  for (uint64_t seq = 3; seq < 8; ++seq) batch.Add("w", Ack("t", 0, seq), /*spans=*/true);
  auto sent = FlushAll(batch);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].worker, "w");
  EXPECT_EQ(sent[0].ack.sequence, 3u);
  ASSERT_TRUE(sent[0].ack.span);
  EXPECT_EQ(*sent[0].ack.span, 5u);
  EXPECT_TRUE(sent[0].ack.Covers(7));
  EXPECT_FALSE(sent[0].ack.Covers(8));
  EXPECT_FALSE(sent[0].ack.Covers(2));
}

TEST(AckBatchTest, OneAckPerResultForWorkersWithoutSpans) {
  AckBatch batch;
  for (uint64_t seq = 0; seq < 4; ++seq) batch.Add("old", Ack("t", 0, seq), /*spans=*/false);
  auto sent = FlushAll(batch);
  ASSERT_EQ(sent.size(), 4u);
  for (uint64_t seq = 0; seq < 4; ++seq) {
    EXPECT_EQ(sent[seq].ack.sequence, seq);
    EXPECT_FALSE(sent[seq].ack.span);
  }
}

TEST(AckBatchTest, GapsDuplicatesOtherTrialsAndAttemptsStartNewSpans) {
  AckBatch batch;
  batch.Add("w", Ack("t", 0, 0), true);
  batch.Add("w", Ack("t", 0, 1), true);
  batch.Add("w", Ack("t", 0, 3), true);  // a gap
  batch.Add("w", Ack("t", 0, 3), true);  // a resent result, acknowledged again
  batch.Add("w", Ack("t", 1, 4), true);  // another attempt
  batch.Add("w", Ack("u", 1, 5), true);  // another trial
  batch.Add("w", Ack("u", 1, 4), true);  // going backwards
  auto sent = FlushAll(batch);
  ASSERT_EQ(sent.size(), 6u);
  EXPECT_EQ(sent[0].ack.sequence, 0u);
  EXPECT_EQ(sent[0].ack.acknowledged(), 2u);
  EXPECT_EQ(sent[1].ack.sequence, 3u);
  EXPECT_FALSE(sent[1].ack.span);
  EXPECT_EQ(sent[2].ack.sequence, 3u);
  EXPECT_EQ(sent[3].ack.attempt, 1u);
  EXPECT_EQ(sent[4].ack.trial_id, "u");
  EXPECT_EQ(sent[5].ack.sequence, 4u);
}

TEST(AckBatchTest, WorkersInterleavedKeepTheirOwnSpansInArrivalOrder) {
  AckBatch batch;
  batch.Add("a", Ack("t1", 0, 0), true);
  batch.Add("b", Ack("t2", 0, 0), true);
  batch.Add("a", Ack("t1", 0, 1), true);
  batch.Add("b", Ack("t2", 0, 1), true);
  batch.Add("c", Ack("t3", 0, 0), false);
  auto sent = FlushAll(batch);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].worker, "a");
  EXPECT_EQ(sent[0].ack.acknowledged(), 2u);
  EXPECT_EQ(sent[1].worker, "b");
  EXPECT_EQ(sent[1].ack.acknowledged(), 2u);
  EXPECT_EQ(sent[2].worker, "c");
}

TEST(AckBatchTest, SequencesAtTheTopOfTheRangeDoNotWrap) {
  AckBatch batch;
  const uint64_t top = std::numeric_limits<uint64_t>::max();
  batch.Add("w", Ack("t", 0, top - 1), true);
  batch.Add("w", Ack("t", 0, top), true);
  batch.Add("w", Ack("t", 0, 0), true);  // not top + 1
  auto sent = FlushAll(batch);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].ack.acknowledged(), 2u);
  EXPECT_TRUE(sent[0].ack.Covers(top));
  EXPECT_FALSE(sent[0].ack.Covers(0));
  EXPECT_EQ(sent[1].ack.sequence, 0u);
}

TEST(AckBatchTest, ClearDropsWhatWasNotSent) {
  AckBatch batch;
  batch.Add("w", Ack("t", 0, 0), true);
  batch.Clear();
  EXPECT_TRUE(FlushAll(batch).empty());
  batch.Add("w", Ack("t", 0, 1), true);  // no span left open from before
  auto sent = FlushAll(batch);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].ack.sequence, 1u);
  EXPECT_FALSE(sent[0].ack.span);
}

}  // namespace
}  // namespace tunehost::host

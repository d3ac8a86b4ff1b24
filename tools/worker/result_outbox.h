// The results of the running trials until the host has them (wire-format.md
// §5.2, §5.3 item 5): each metric line of a trial becomes an ME with the
// trial's next sequence number, resent every ack_timeout until an MA covers
// it; acknowledged results can be logged to a file (--ack-log).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "transport.h"
#include "tunehost/protocol/messages.h"
#include "worker_options.h"

namespace tunehost::worker {

class ResultOutbox {
 public:
  using Clock = std::chrono::steady_clock;

  // `options` and `transport` must outlive the outbox. Throws
  // std::runtime_error when the ack log cannot be opened.
  ResultOutbox(const WorkerOptions& options, Transport* transport);
  ~ResultOutbox();
  ResultOutbox(const ResultOutbox&) = delete;
  ResultOutbox& operator=(const ResultOutbox&) = delete;

  // A trial's results start (sequence 0) and end with these.
  void Open(const protocol::NewTrialJob& job);
  void Close(const std::string& trial_id, uint32_t attempt);

  // Lines a trial printed (`overlong`: lines skipped for their length): each
  // good one is sent as an ME and kept until acknowledged.
  void OnMetricLines(const std::string& trial_id, uint32_t attempt,
                     const std::vector<std::string>& lines, size_t overlong);
  void OnAck(const protocol::MetricAck& ack);

  // A trial's results not acknowledged yet; Drop forgets them.
  size_t Unacknowledged(const std::string& trial_id, uint32_t attempt) const;
  size_t Drop(const std::string& trial_id, uint32_t attempt);
  // The sequence of a trial's last PERIODICAL result (-1: none), for HE and WH.
  int64_t LastPeriodical(const std::string& trial_id, uint32_t attempt) const;

  // Resends what waited ack_timeout for its MA.
  void ResendDue(Clock::time_point now);
  // When the next resend is due (max: nothing waits).
  Clock::time_point NextResend() const;
  // When the oldest unacknowledged result was first sent (max: none).
  Clock::time_point OldestUnacknowledged() const;

 private:
  struct PendingMetric {
    std::string bytes;  // the encoded ME, resent verbatim
    protocol::MetricType type = protocol::MetricType::kPeriodical;
    double scalar = 0;
    Clock::time_point first_sent;
    Clock::time_point last_sent;
  };
  // One trial's results.
  struct Stream {
    std::string trial_id;
    uint32_t attempt = 0;
    protocol::ParameterId parameter_id;
    uint64_t next_sequence = 0;
    int64_t last_periodical = -1;
    bool final_seen = false;
    std::map<uint64_t, PendingMetric> pending;  // by sequence, until MA
  };

  Stream* Find(const std::string& trial_id, uint32_t attempt);
  const Stream* Find(const std::string& trial_id, uint32_t attempt) const;
  void LogAck(const Stream& stream, uint64_t sequence, const PendingMetric& metric);

  const WorkerOptions& options_;
  Transport* transport_;
  int ack_log_fd_ = -1;
  std::vector<Stream> streams_;  // in the order the trials started
};

}  // namespace tunehost::worker

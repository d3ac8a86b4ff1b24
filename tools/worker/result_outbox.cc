#include "result_outbox.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "metric_line.h"

namespace tunehost::worker {
namespace {

std::string Shorten(const std::string& s, size_t max = 200) {
  return s.size() <= max ? s : s.substr(0, max) + "...";
}

}  // namespace

ResultOutbox::ResultOutbox(const WorkerOptions& options, Transport* transport)
    : options_(options), transport_(transport) {
  if (!options_.ack_log.empty()) {
    ack_log_fd_ = ::open(options_.ack_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (ack_log_fd_ < 0) {
      throw std::runtime_error("cannot open the ack log " + options_.ack_log + ": " +
                               std::strerror(errno));
    }
  }
}

ResultOutbox::~ResultOutbox() {
  if (ack_log_fd_ >= 0) ::close(ack_log_fd_);
}

void ResultOutbox::Open(const protocol::NewTrialJob& job) {
  Stream stream;
  stream.trial_id = job.trial_id;
  stream.attempt = job.attempt;
  stream.parameter_id = job.parameter_id;
  streams_.push_back(std::move(stream));
}

void ResultOutbox::Close(const std::string& trial_id, uint32_t attempt) {
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [&](const Stream& s) {
                                  return s.trial_id == trial_id && s.attempt == attempt;
                                }),
                 streams_.end());
}

ResultOutbox::Stream* ResultOutbox::Find(const std::string& trial_id, uint32_t attempt) {
  for (Stream& s : streams_) {
    if (s.trial_id == trial_id && s.attempt == attempt) return &s;
  }
  return nullptr;
}

const ResultOutbox::Stream* ResultOutbox::Find(const std::string& trial_id,
                                               uint32_t attempt) const {
  for (const Stream& s : streams_) {
    if (s.trial_id == trial_id && s.attempt == attempt) return &s;
  }
  return nullptr;
}

void ResultOutbox::OnMetricLines(const std::string& trial_id, uint32_t attempt,
                                 const std::vector<std::string>& lines, size_t overlong) {
  Stream* stream = Find(trial_id, attempt);
  if (stream == nullptr) return;
  const std::string name = trial_id + "#" + std::to_string(attempt);
  if (overlong > 0) {
    spdlog::warn("trial {}: skipped {} metric line(s) longer than {} bytes", name, overlong,
                 kMaxMetricLineBytes);
  }
  for (const auto& line : lines) {
    MetricLine metric;
    if (Status s = ParseMetricLine(line, &metric); !s.ok()) {
      spdlog::warn("trial {}: skipped a bad metric line ({}): {}", name, s.message(),
                   Shorten(line));
      continue;
    }
    if (stream->final_seen) {
      spdlog::warn("trial {}: ignored a {} metric after its FINAL", name,
                   protocol::ToString(metric.type));
      continue;
    }
    const uint64_t sequence = stream->next_sequence;
    const double scalar = metric.value.scalar;
    const auto now = Clock::now();
    PendingMetric pending{
        transport_->Encode(protocol::ReportMetricData{trial_id, attempt, stream->parameter_id,
                                                      metric.type, sequence,
                                                      std::move(metric.value), options_.id}),
        metric.type, scalar, now, now};
    if (pending.bytes.size() > options_.max_result_bytes) {
      // The host would drop it unacknowledged and the worker resend it for
      // ever (wire-format.md §1.1): the trial goes on as if the line were bad.
      spdlog::warn("trial {}: skipped a {} result of {} bytes, over the results limit of {} "
                   "bytes (the host's --max-result-bytes / maxResultBytes and this worker's "
                   "--max-result-bytes)",
                   name, protocol::ToString(pending.type), pending.bytes.size(),
                   options_.max_result_bytes);
      continue;
    }
    ++stream->next_sequence;
    if (metric.type == protocol::MetricType::kFinal) {
      stream->final_seen = true;
    } else {
      stream->last_periodical = static_cast<int64_t>(sequence);
    }
    transport_->SendBytes(pending.bytes);
    stream->pending[sequence] = std::move(pending);
  }
}

void ResultOutbox::OnAck(const protocol::MetricAck& ack) {
  // An MA acknowledges `span` consecutive sequences from `sequence` on
  // (one without a span: that sequence alone; wire-format.md §5.2).
  Stream* stream = Find(ack.trial_id, ack.attempt);
  size_t matched = 0;
  if (stream != nullptr) {
    for (auto it = stream->pending.lower_bound(ack.sequence);
         it != stream->pending.end() && ack.Covers(it->first); ++matched) {
      LogAck(*stream, it->first, it->second);
      it = stream->pending.erase(it);
    }
  }
  if (matched == 0) {
    spdlog::debug("MA for {}#{} seq {} (span {}) matched nothing", ack.trial_id, ack.attempt,
                  ack.sequence, ack.acknowledged());
  }
}

// One line per acknowledged result, written with a single write(2) before
// anything else happens, so that a SIGKILL right after leaves it in the file:
//   <trial_id> <attempt> <sequence> <PERIODICAL|FINAL> <scalar> <worker_id> <unix time>
void ResultOutbox::LogAck(const Stream& stream, uint64_t sequence, const PendingMetric& metric) {
  if (ack_log_fd_ < 0) return;
  char scalar[64], when[64];
  std::snprintf(scalar, sizeof scalar, "%.17g", metric.scalar);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  std::snprintf(when, sizeof when, "%lld.%06ld", static_cast<long long>(now.tv_sec),
                now.tv_nsec / 1000);
  const std::string line = stream.trial_id + " " + std::to_string(stream.attempt) + " " +
                           std::to_string(sequence) + " " +
                           std::string(protocol::ToString(metric.type)) + " " + scalar + " " +
                           options_.id + " " + when + "\n";
  if (::write(ack_log_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    spdlog::warn("ack log: {}", std::strerror(errno));
  }
}

size_t ResultOutbox::Unacknowledged(const std::string& trial_id, uint32_t attempt) const {
  const Stream* stream = Find(trial_id, attempt);
  return stream != nullptr ? stream->pending.size() : 0;
}

size_t ResultOutbox::Drop(const std::string& trial_id, uint32_t attempt) {
  Stream* stream = Find(trial_id, attempt);
  if (stream == nullptr) return 0;
  const size_t dropped = stream->pending.size();
  stream->pending.clear();
  return dropped;
}

int64_t ResultOutbox::LastPeriodical(const std::string& trial_id, uint32_t attempt) const {
  const Stream* stream = Find(trial_id, attempt);
  return stream != nullptr ? stream->last_periodical : -1;
}

void ResultOutbox::ResendDue(Clock::time_point now) {
  for (Stream& stream : streams_) {
    for (auto& [seq, p] : stream.pending) {
      if (now - p.last_sent < options_.ack_timeout) continue;
      spdlog::debug("trial {}#{}: resending metric {}", stream.trial_id, stream.attempt, seq);
      transport_->SendBytes(p.bytes);
      p.last_sent = now;
    }
  }
}

ResultOutbox::Clock::time_point ResultOutbox::NextResend() const {
  Clock::time_point next = Clock::time_point::max();
  for (const Stream& stream : streams_) {
    for (const auto& [seq, p] : stream.pending) {
      next = std::min(next, p.last_sent + options_.ack_timeout);
    }
  }
  return next;
}

ResultOutbox::Clock::time_point ResultOutbox::OldestUnacknowledged() const {
  Clock::time_point oldest = Clock::time_point::max();
  for (const Stream& stream : streams_) {
    for (const auto& [seq, p] : stream.pending) oldest = std::min(oldest, p.first_sent);
  }
  return oldest;
}

}  // namespace tunehost::worker

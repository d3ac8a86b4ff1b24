// The offer book: trials waiting for a slot and the offers out, each with
// its lease; where each offer goes (the jobs socket, or addressed to a free
// worker: wire-format.md §5.2, §5.3).
#include <sys/random.h>

#include <algorithm>
#include <random>

#include "engine_parts.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

uint64_t OfferBook::NewLease() {
  // Unpredictable, so a worker that saw other offers cannot guess one it
  // did not get (getrandom: the kernel's CSPRNG; a few hundred ns).
  uint64_t lease = 0;
  while (lease == 0) {
    if (getrandom(&lease, sizeof lease, 0) != static_cast<ssize_t>(sizeof lease)) {
      std::random_device device;  // getrandom fails only when interrupted
      lease = (static_cast<uint64_t>(device()) << 32) ^ device();
    }
  }
  return lease;
}

void OfferBook::Unqueue(const std::string& id) {
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
}

void OfferBook::Close(Trial& t) {
  offered_.erase(t.id);
  if (t.offered_to.empty()) return;
  --addressed_out_;
  workers_.OfferClosed(t.offered_to);
  t.offered_to.clear();
}

std::vector<std::string> OfferBook::Expired(Clock::time_point now) const {
  std::vector<std::string> expired;
  for (const std::string& id : offered_) {
    if (now - table_.at(id).offered_at >= options_.ack_timeout) expired.push_back(id);
  }
  std::sort(expired.begin(), expired.end());
  return expired;
}

void OfferBook::Offer(Clock::time_point now, const EngineFreeSlots& slots, size_t running) {
  size_t capacity = Capacity(slots.all);
  capacity = std::min(capacity, p::kMaxInflightOffers > offered_.size()
                                    ? p::kMaxInflightOffers - offered_.size()
                                    : size_t{0});
  // The jobs socket's round robin is for workers that take no addressed
  // offers: the free slots of the others are offered only by address (one
  // whose subscription is not seen yet waits for it, §5.2).
  const size_t push_offered = offered_.size() - addressed_out_;
  size_t push_capacity = slots.push > push_offered ? slots.push - push_offered : 0;
  while (capacity > 0 && !waiting_.empty() && offered_.size() + running < options_.concurrency) {
    Trial& t = table_.at(waiting_.front());
    t.offered_at = now;
    t.lease = NewLease();
    p::NewTrialJob job = JobFor(options_.experiment_id, t);
    job.lease = t.lease;
    // Addressed to a worker with a free slot when one takes addressed
    // offers; else through the jobs socket's round robin (§5.2).
    WorkerInfo* to = workers_.NextAddressable();
    if (to == nullptr && push_capacity == 0) break;
    if (!(to != nullptr ? sink_->SendJobTo(to->id, job) : sink_->SendJob(job))) {
      if (to != nullptr) workers_.MaybeReady(*to);  // taken from the queue, not offered
      break;
    }
    if (to == nullptr) --push_capacity;
    waiting_.pop_front();
    t.state = TrialState::kOffered;
    ++t.offers;
    offered_.insert(t.id);
    if (to != nullptr) {
      t.offered_to = to->id;
      ++to->offered;
      ++addressed_out_;
      ++stats_.addressed;
    }
    ++stats_.offers;
    --capacity;
  }
}

}  // namespace tunehost::host


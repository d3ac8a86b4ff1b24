// Bounds on everything that arrives from outside (wire-format.md §3.2). A
// decoder refuses a value over its bound with `bad_field` naming the bound,
// before anything is allocated for it; the host applies the host-side bounds
// (workers, offers, subscriptions, connections) where those things are kept.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tunehost::protocol {

// Identifiers: trial, worker, experiment and parameter ids, plugin names,
// message and error codes, the ER source, the LT status.
inline constexpr size_t kMaxIdBytes = 256;
// Free text: a trial end's error, a rejection's or kill's reason, a worker's
// language and version, an error message.
inline constexpr size_t kMaxTextBytes = 64 * 1024;
// Containers nested inside any value (search spaces, parameters, metrics).
inline constexpr size_t kMaxDepth = 32;
// Keys of a parameters map (AD, FD records, TR) and of a search space.
inline constexpr size_t kMaxParameters = 1024;
// GE count: parameter sets asked for in one request.
inline constexpr uint32_t kMaxRequestCount = 1024;
// WH slots, HB free_slots, Resources gpus.
inline constexpr uint32_t kMaxSlots = 1024;
// Items of a WH/HB running list (a worker runs at most kMaxSlots trials).
inline constexpr size_t kMaxRunning = kMaxSlots;
// IN/UX concurrency.
inline constexpr uint32_t kMaxConcurrency = 100000;
// FD records in one request.
inline constexpr size_t kMaxImportRecords = 100000;
// PluginSpec memory_limit_mb (1 TiB) and ExperimentSpec plugin_timeout_s (a day).
inline constexpr uint64_t kMaxMemoryLimitMb = uint64_t{1} << 20;
inline constexpr double kMaxPluginTimeoutS = 86400;

// Host-side bounds.
// Workers one host keeps track of; a WH beyond it is refused (logged).
inline constexpr size_t kMaxWorkers = 10000;
// Offers out at once, over all workers.
inline constexpr size_t kMaxInflightOffers = 4096;
// Parameter ids asked of the tuner in one generate call.
inline constexpr size_t kMaxGenerateBatch = 1024;
// Members of the Pareto front an ST reply lists (pareto_front_size counts all).
inline constexpr size_t kMaxFrontInStatus = 1000;
// Trials generated ahead of a free slot (the tunehost section's prefetch).
inline constexpr int64_t kMaxPrefetch = 1024;
// PERIODICAL results of one attempt: sequences 0 .. kMaxPeriodicalResults-1.
// A result numbered beyond is acknowledged and dropped (the host keeps every
// result of a trial in memory and hands the assessor its whole history).
inline constexpr uint64_t kMaxPeriodicalResults = 1000000;
// Trials clients added (AD) that have not ended yet.
inline constexpr size_t kMaxQueuedCustomTrials = 10000;
// A control reply as a client reads it (§4.1): LT, MT and EX of a large
// experiment are far above the host's request limit (LT of 100 000 trials is
// about 40 MB). Replies come from the host the client chose to ask.
inline constexpr size_t kMaxReplyBytes = size_t{1} << 30;
// Control requests (IN, SS, GE, FD) waiting for the tuner at once.
inline constexpr size_t kMaxQueuedPluginRequests = 64;
// Largest message a subscriber may send to the events socket: a
// subscription flag and topic ("worker.<id>." with an id of kMaxIdBytes).
inline constexpr size_t kMaxSubscriptionBytes = kMaxIdBytes + 16;
// Bytes of the distinct subscription topics the events socket holds at
// once. libzmq keeps topics in a trie of about 32 bytes per character, so
// this bounds it near 32 MiB; 10 000 workers' topics take about 400 KiB.
inline constexpr size_t kMaxSubscriptionTopicBytes = 1 << 20;

}  // namespace tunehost::protocol

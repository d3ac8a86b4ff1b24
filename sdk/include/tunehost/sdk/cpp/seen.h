// tunehost SDK: the set of configurations a tuner has already generated or
// imported, to avoid running one twice (NNI's random, TPE, grid and anneal
// tuners all deduplicate).
//
// Configurations are compared by sdk::CanonicalKey of the map a trial
// receives: key order and 5 vs 5.0 do not matter, q-rounding does (two draws
// that round to the same value are the same configuration).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::sdk {

class SeenConfigurations {
 public:
  // Largest finite space FindUnseen walks.
  static constexpr uint64_t kMaxEnumeration = uint64_t{1} << 20;

  // The canonical key of the map `space` packs for `a`.
  static std::string KeyOf(const SearchSpace& space, const Assignment& a) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> packer(buffer);
    space.Pack(a, packer);
    msgpack::object_handle h = msgpack::unpack(buffer.data(), buffer.size());
    return CanonicalKey(h.get());
  }

  // Records a configuration; false when it was there already.
  bool Insert(const SearchSpace& space, const Assignment& a) { return Insert(KeyOf(space, a)); }
  bool Insert(std::string key) { return keys_.insert(std::move(key)).second; }
  // Records a parameter map as a trial received it (imports, customized trials).
  bool InsertParameters(const msgpack::object& params) { return Insert(CanonicalKey(params)); }
  bool Contains(const SearchSpace& space, const Assignment& a) const {
    return keys_.count(KeyOf(space, a)) != 0;
  }
  size_t size() const { return keys_.size(); }
  void clear() {
    keys_.clear();
    walk_ = Walk{};
  }

  // A configuration not seen yet, found by walking a finite space from a
  // random start; nullopt when every configuration was seen, or when the space
  // is infinite or larger than kMaxEnumeration (then a caller draws again).
  // *exhausted is set when the space is finite, walkable and fully seen.
  //
  // The walk resumes where the previous call stopped: the positions it passed
  // were seen and stay seen (the set only grows), so the calls of a whole
  // experiment cost O(configurations) together, not each. Before it says
  // "exhausted" it checks every configuration once more from scratch, so a
  // stale position (a different space with the same count) can only change
  // which unseen configuration is returned, never hide one.
  std::optional<Assignment> FindUnseen(const SearchSpace& space, std::mt19937_64& rng,
                                       bool* exhausted = nullptr) const {
    if (exhausted != nullptr) *exhausted = false;
    std::optional<uint64_t> count = space.CountConfigurations();
    if (!count || *count > kMaxEnumeration || *count == 0) return std::nullopt;
    if (walk_.space != &space || walk_.count != *count) {
      walk_ = Walk{&space, *count, UniformIndex(rng, *count), 0};
    }
    for (; walk_.passed < *count; ++walk_.passed) {
      Assignment a = space.ConfigurationAt((walk_.start + walk_.passed) % *count);
      if (!Contains(space, a)) return a;  // the caller records it; the next call passes it
    }
    for (uint64_t k = 0; k < *count; ++k) {
      Assignment a = space.ConfigurationAt(k);
      if (!Contains(space, a)) {
        walk_ = Walk{&space, *count, k, 0};
        return a;
      }
    }
    if (exhausted != nullptr) *exhausted = true;
    return std::nullopt;
  }

  // State: the keys as an array of binaries, sorted (so equal sets save
  // equal bytes).
  template <class Stream>
  void Pack(msgpack::packer<Stream>& pk) const {
    std::vector<const std::string*> sorted;
    sorted.reserve(keys_.size());
    for (const std::string& k : keys_) sorted.push_back(&k);
    std::sort(sorted.begin(), sorted.end(),
              [](const std::string* a, const std::string* b) { return *a < *b; });
    pk.pack_array(static_cast<uint32_t>(sorted.size()));
    for (const std::string* k : sorted) {
      pk.pack_bin(static_cast<uint32_t>(k->size()));
      pk.pack_bin_body(k->data(), static_cast<uint32_t>(k->size()));
    }
  }
  // False (and unchanged) when `o` is not such an array.
  bool Unpack(const msgpack::object& o) {
    if (o.type != msgpack::type::ARRAY) return false;
    std::unordered_set<std::string> keys;
    for (uint32_t i = 0; i < o.via.array.size; ++i) {
      const msgpack::object& k = o.via.array.ptr[i];
      if (k.type != msgpack::type::BIN) return false;
      keys.emplace(k.via.bin.ptr, k.via.bin.size);
    }
    keys_ = std::move(keys);
    walk_ = Walk{};
    return true;
  }

 private:
  // Where FindUnseen stopped: positions start, start+1, ... (mod count) of
  // `space`, `passed` of them seen. A cache, not state: never saved.
  struct Walk {
    const SearchSpace* space = nullptr;
    uint64_t count = 0;
    uint64_t start = 0;
    uint64_t passed = 0;
  };

  std::unordered_set<std::string> keys_;
  mutable Walk walk_;
};

}  // namespace tunehost::sdk

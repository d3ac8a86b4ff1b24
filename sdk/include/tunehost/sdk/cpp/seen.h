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
  void clear() { keys_.clear(); }

  // A configuration not seen yet, found by walking a finite space from a
  // random start; nullopt when every configuration was seen, or when the space
  // is infinite or larger than kMaxEnumeration (then a caller draws again).
  // *exhausted is set when the space is finite, walkable and fully seen.
  std::optional<Assignment> FindUnseen(const SearchSpace& space, std::mt19937_64& rng,
                                       bool* exhausted = nullptr) const {
    if (exhausted != nullptr) *exhausted = false;
    std::optional<uint64_t> count = space.CountConfigurations();
    if (!count || *count > kMaxEnumeration || *count == 0) return std::nullopt;
    const uint64_t start = UniformIndex(rng, *count);
    for (uint64_t k = 0; k < *count; ++k) {
      Assignment a = space.ConfigurationAt((start + k) % *count);
      if (!Contains(space, a)) return a;
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
    return true;
  }

 private:
  std::unordered_set<std::string> keys_;
};

}  // namespace tunehost::sdk

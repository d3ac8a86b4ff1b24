// The configurations of a tuner's running trials, by parameter id: whether
// each one's result came, each refit to a new search space (none when it no
// longer fits: its result then teaches nothing), and their saved form in a
// tuner's state, an array of [id, configuration or nil, has_result].
#pragma once

#include <cstdint>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <utility>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::sdk {

class RunningConfigs {
 public:
  struct Run {
    std::optional<Assignment> config;  // none: does not fit a newer search space
    bool has_result = false;
  };
  using Map = std::map<int64_t, Run>;
  using iterator = Map::iterator;
  using const_iterator = Map::const_iterator;

  void Start(int64_t id, Assignment config) { runs_[id] = Run{std::move(config), false}; }
  iterator find(int64_t id) { return runs_.find(id); }
  iterator begin() { return runs_.begin(); }
  iterator end() { return runs_.end(); }
  const_iterator begin() const { return runs_.begin(); }
  const_iterator end() const { return runs_.end(); }
  void erase(iterator it) { runs_.erase(it); }
  size_t erase(int64_t id) { return runs_.erase(id); }
  size_t size() const { return runs_.size(); }
  bool empty() const { return runs_.empty(); }

  // Each configuration as `next` reads it (`old` is the space it was drawn in).
  void Refit(const SearchSpace& next, const SearchSpace& old) {
    for (auto& [id, run] : runs_) {
      if (run.config) run.config = next.Refit(old, *run.config);
    }
  }

  template <class Stream>
  void Pack(msgpack::packer<Stream>& pk) const {
    pk.pack_array(static_cast<uint32_t>(runs_.size()));
    for (const auto& [id, run] : runs_) {
      pk.pack_array(3);
      pk.pack(id);
      if (run.config) {
        PackAssignment(pk, *run.config);
      } else {
        pk.pack_nil();
      }
      pk.pack(run.has_result);
    }
  }

  // The saved form read back in `space`; throws Error(TH_INVALID_ARGUMENT)
  // naming `tuner` when it is not one.
  static RunningConfigs Unpack(const msgpack::object* saved, const SearchSpace& space,
                               const std::string& tuner) {
    auto bad = [&tuner](const std::string& what) {
      return Error(TH_INVALID_ARGUMENT, tuner + ": saved state: " + what);
    };
    if (saved == nullptr || saved->type != msgpack::type::ARRAY) throw bad("no running");
    RunningConfigs out;
    for (uint32_t i = 0; i < saved->via.array.size; ++i) {
      const msgpack::object& e = saved->via.array.ptr[i];
      if (e.type != msgpack::type::ARRAY || e.via.array.size != 3 ||
          !IsInteger(e.via.array.ptr[0]) || e.via.array.ptr[2].type != msgpack::type::BOOLEAN) {
        throw bad("bad running entry");
      }
      Run r;
      if (e.via.array.ptr[1].type != msgpack::type::NIL) {
        r.config = UnpackAssignment(e.via.array.ptr[1], space);
        if (!r.config) throw bad("a running configuration does not fit the search space");
      }
      r.has_result = e.via.array.ptr[2].via.boolean;
      out.runs_.emplace(AsInt64(e.via.array.ptr[0], "running id"), std::move(r));
    }
    return out;
  }

 private:
  Map runs_;
};

}  // namespace tunehost::sdk

// Shared by the built-in tuners' unit tests: making a tuner of a class with
// class_args and a search space, asking it for parameters (one id, n ids, or
// until it has no more trials), reporting results and importing records, and
// driving it through the C ABI as the host does.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "plugin_testing.h"
#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/tuner.h"

namespace tunehost::plugins::testing {

// Gives `tuner` the search space written as JSON text.
inline void Update(sdk::Tuner& tuner, const std::string& space) {
  msgpack::object_handle s = Msgpack(space);
  tuner.UpdateSearchSpace(s.get());
}

// A call of Update, for ExpectError.
inline std::function<void()> Updating(sdk::Tuner& tuner, std::string space) {
  return [&tuner, space = std::move(space)] { Update(tuner, space); };
}

// A tuner of class T made with `class_args`, then given `space`.
template <class T>
std::unique_ptr<T> MakeTunerOf(const RecordingHost& host, const Json& space,
                               const Json& class_args = Json::object()) {
  msgpack::object_handle args = MsgpackOf(class_args);
  auto tuner = std::make_unique<T>(host.ref(), args.get());
  msgpack::object_handle s = MsgpackOf(space);
  tuner->UpdateSearchSpace(s.get());
  return tuner;
}

// The same with JSON text; an empty `space` gives the tuner none.
template <class T>
std::unique_ptr<T> MakeTuner(const RecordingHost& host, const std::string& space,
                             const std::string& class_args = "{}") {
  if (!space.empty()) return MakeTunerOf<T>(host, Json::parse(space), Json::parse(class_args));
  msgpack::object_handle args = Msgpack(class_args);
  return std::make_unique<T>(host.ref(), args.get());
}

// One GenerateParameters call: whether it generated a trial, and the bytes
// it packed.
struct Packed {
  bool generated = false;
  std::string bytes;
};

inline Packed PackParameters(sdk::Tuner& tuner, int64_t id) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  Packed out;
  out.generated = tuner.GenerateParameters(id, pk);
  out.bytes.assign(buffer.data(), buffer.size());
  return out;
}

// The packed parameters, or nullopt when the tuner has no more trials (or
// keeps the id as credit); then nothing may be packed, as
// sdk::Tuner::GenerateParameters says.
inline std::optional<std::string> Generate(sdk::Tuner& tuner, int64_t id = 0) {
  Packed p = PackParameters(tuner, id);
  if (!p.generated) {
    EXPECT_EQ(p.bytes.size(), 0u) << "nothing may be packed when no trial is generated";
    return std::nullopt;
  }
  return std::move(p.bytes);
}

// `n` parameter sets for ids first_id, first_id + 1, ...; each must come.
inline std::vector<std::string> GenerateN(sdk::Tuner& tuner, int n, int64_t first_id = 0) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::optional<std::string> p = Generate(tuner, first_id + i);
    EXPECT_TRUE(p.has_value()) << "generate #" << i << " returned no trial";
    if (!p) break;
    out.push_back(*p);
  }
  return out;
}

// GenerateN as JSON.
inline std::vector<Json> GenerateNJson(sdk::Tuner& tuner, int n, int64_t first_id = 0) {
  std::vector<Json> out;
  for (const std::string& bytes : GenerateN(tuner, n, first_id)) out.push_back(ToJson(bytes));
  return out;
}

// Packed parameter sets for ids 0, 1, ... until the tuner says "no more
// trials" (at most `limit`).
inline std::vector<std::string> GenerateAllBytes(sdk::Tuner& tuner, size_t limit = 100000) {
  std::vector<std::string> out;
  while (out.size() < limit) {
    std::optional<std::string> p = Generate(tuner, static_cast<int64_t>(out.size()));
    if (!p) break;
    out.push_back(*p);
  }
  return out;
}

// GenerateAllBytes as JSON.
inline std::vector<Json> GenerateAll(sdk::Tuner& tuner, size_t limit = 100000) {
  std::vector<Json> out;
  for (const std::string& bytes : GenerateAllBytes(tuner, limit)) out.push_back(ToJson(bytes));
  return out;
}

// What one GenerateMultiple call emitted, in order, and whether it emitted
// for every id.
struct Generated {
  bool all = false;
  std::vector<std::pair<int64_t, std::string>> emitted;
};

inline Generated GenerateMultiple(sdk::Tuner& tuner, const std::vector<int64_t>& ids) {
  Generated g;
  g.all = tuner.GenerateMultiple(ids, [&](int64_t id, const msgpack::sbuffer& params) {
    g.emitted.emplace_back(id, std::string(params.data(), params.size()));
  });
  return g;
}

// The result `metric` of trial `id`, which ran the packed `params`.
inline void ReportResult(sdk::Tuner& tuner, int64_t id, const std::string& params, double metric) {
  msgpack::object_handle p = msgpack::unpack(params.data(), params.size());
  msgpack::object_handle v = MsgpackOf(Json(metric));
  tuner.ReceiveTrialResult(id, p.get(), v.get(), metric, false);
}

// Imports `records`, an array of {"parameters", "value"} maps.
inline void Import(sdk::Tuner& tuner, const Json& records) {
  msgpack::object_handle h = MsgpackOf(records);
  tuner.ImportData(h.get());
}

// ImportData refuses records that are not an array.
inline void ExpectNonArrayImportRefused(sdk::Tuner& tuner) {
  msgpack::object_handle not_array = Msgpack(R"({"parameters": {}})");
  ExpectError([&] { tuner.ImportData(not_array.get()); }, TH_INVALID_ARGUMENT,
              {"import data must be an array"});
}

// Generate, ImportData and LoadState before a search space are refused as a
// bad state.
inline void ExpectCallsBeforeASearchSpaceRefused(sdk::Tuner& tuner) {
  ExpectError([&] { Generate(tuner, 0); }, TH_BAD_STATE, {"no search space"});
  ExpectError([&] { Import(tuner, Json::array()); }, TH_BAD_STATE, {"no search space"});
  ExpectError([&] { tuner.LoadState("x"); }, TH_BAD_STATE, {"search space first"});
}

// A deterministic metric of any parameter map: the sum of its numbers (and
// of its strings' lengths).
inline double MetricOf(const Json& j) {
  if (j.is_number()) return j.get<double>();
  double sum = 0;
  if (j.is_object() || j.is_array()) {
    for (const auto& item : j) sum += MetricOf(item);
  }
  if (j.is_string()) sum += static_cast<double>(j.get<std::string>().size());
  return sum;
}

// Runs `trials` trials in batches (all of a batch generated, then all
// reported and ended), minimizing `f` over the parameter map (reported
// negated when the tuner maximizes); the best value of f.
inline double Minimize(sdk::Tuner& tuner, const std::function<double(const Json&)>& f, int trials,
                       int batch, bool maximize = false) {
  double best = std::numeric_limits<double>::infinity();
  int64_t id = 0;
  for (int done = 0; done < trials; done += batch) {
    std::vector<std::string> params = GenerateN(tuner, batch, id);
    for (int i = 0; i < batch; ++i) {
      const double v = f(ToJson(params[static_cast<size_t>(i)]));
      best = std::min(best, v);
      ReportResult(tuner, id + i, params[static_cast<size_t>(i)], maximize ? -v : v);
      tuner.TrialEnd(id + i, true);
    }
    id += batch;
  }
  return best;
}

// Compares two sequences of records that hold packed parameter maps, byte
// for byte, printing the first difference through `readable` rather than as
// raw bytes.
inline void ExpectSameSequence(const std::vector<std::string>& a, const std::vector<std::string>& b,
                               const std::function<std::string(const std::string&)>& readable) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      ADD_FAILURE() << "first difference at #" << i << ": " << readable(a[i]) << " vs "
                    << readable(b[i]);
      return;
    }
  }
}

// A tuner behind the C ABI, called as the host calls it: errors are written
// to message(), parameters go to a sink that records ids and bytes. Owns the
// handle and destroys it.
class AbiTuner {
 public:
  explicit AbiTuner(const th_tuner_t* tuner) : tuner_(tuner) {}
  AbiTuner(const AbiTuner&) = delete;
  AbiTuner& operator=(const AbiTuner&) = delete;
  ~AbiTuner() { tuner_->destroy(tuner_); }

  // A tuner of class T made with `class_args` and wrapped as plugins wrap
  // their tuners (sdk::detail::TunerHandle).
  template <class T>
  static std::unique_ptr<AbiTuner> Of(const RecordingHost& host, const std::string& class_args) {
    msgpack::object_handle args = Msgpack(class_args);
    return std::make_unique<AbiTuner>(
        sdk::detail::TunerHandle::Create(std::make_unique<T>(host.ref(), args.get())));
  }

  th_status UpdateSearchSpace(const std::string& space) {
    std::string bytes = PackText(space);
    return tuner_->update_search_space(
        tuner_, th_bytes_t{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, &err_);
  }

  // Asks for parameters for `ids`; what is emitted is added to emitted_ids()
  // and emitted_params().
  th_status Generate(const std::vector<int64_t>& ids) {
    return tuner_->generate(tuner_, ids.data(), static_cast<uint32_t>(ids.size()), &sink_, &err_);
  }

  th_status TrialEnd(int64_t id, bool success) {
    return tuner_->trial_end(tuner_, id, success, &err_);
  }

  const char* message() const { return message_; }
  const std::vector<int64_t>& emitted_ids() const { return emitted_ids_; }
  const std::vector<std::string>& emitted_params() const { return emitted_params_; }
  void clear_emitted() {
    emitted_ids_.clear();
    emitted_params_.clear();
  }

 private:
  static th_status Emit(const th_param_sink_t* self, int64_t id, const uint8_t* params,
                        size_t size) {
    auto* me = static_cast<AbiTuner*>(self->sink_data);
    me->emitted_ids_.push_back(id);
    me->emitted_params_.emplace_back(reinterpret_cast<const char*>(params), size);
    return TH_OK;
  }

  const th_tuner_t* tuner_;
  char message_[256] = {};
  th_error_t err_{message_, sizeof(message_)};
  th_param_sink_t sink_{this, &Emit};
  std::vector<int64_t> emitted_ids_;
  std::vector<std::string> emitted_params_;
};

}  // namespace tunehost::plugins::testing

#include "curvefitting_assessor.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <locale>
#include <sstream>
#include <utility>

#include "curve_model.h"
#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kPlugin = "curvefitting";
constexpr const char* kStateFormat = "org.tunehost.curvefitting";
constexpr int64_t kStateVersion = 1;
constexpr int64_t kMaxArg = 9999;  // NNI's classArgs validator bound

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, std::string(kPlugin) + ": saved state: " + what);
}

std::string Text(double x) {
  std::ostringstream s;
  s.imbue(std::locale::classic());
  s.precision(6);
  s << x;
  return s.str();
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

template <class Map, class PackValue>
void PackMap(msgpack::packer<msgpack::sbuffer>& pk, const Map& map, PackValue pack_value) {
  pk.pack_map(static_cast<uint32_t>(map.size()));
  for (const auto& [id, value] : map) {
    pk.pack(id);
    pack_value(value);
  }
}

const msgpack::object& StateMap(const msgpack::object& state, const char* name) {
  const msgpack::object* o = sdk::FindKey(state, name);
  if (o == nullptr || o->type != msgpack::type::MAP) BadState(std::string("no ") + name + " map");
  return *o;
}

}  // namespace

CurvefittingAssessor::CurvefittingAssessor(sdk::HostRef host, const msgpack::object& class_args)
    : Assessor(host) {
  sdk::ClassArgs args(kPlugin, class_args,
                      {"epoch_num", "start_step", "threshold", "gap", "optimize_mode", "seed"});
  if (!args.Maximize(/*default_maximize=*/true)) {
    throw args.Bad("optimize_mode",
                   "\"minimize\" is not supported: curve fitting (as in NNI) only judges metrics "
                   "to maximize, such as accuracy; report the negated metric or use "
                   "optimize_mode \"maximize\"");
  }
  epoch_num_ = args.Int("epoch_num", 20, 1, kMaxArg);
  start_step_ = args.Int("start_step", 6, 0, kMaxArg);
  threshold_ = args.Number("threshold", 0.95, 0.0, static_cast<double>(kMaxArg));
  gap_ = args.Int("gap", 1, 1, kMaxArg);
  rng_.seed(args.SeedOrRandom(host));
  if (start_step_ <= 0) {
    host.Warn("curvefitting: a positive start_step is recommended (curves of one or two "
              "values extrapolate poorly)");
  }
}

bool CurvefittingAssessor::AssessTrial(const std::string& trial_id,
                                       const msgpack::object& history) {
  if (history.type != msgpack::type::ARRAY) {
    throw sdk::Error(TH_INVALID_ARGUMENT, std::string(kPlugin) +
                                              ": history must be an array, got " +
                                              sdk::TypeName(history));
  }
  std::vector<double> values;
  values.reserve(history.via.array.size);
  for (uint32_t i = 0; i < history.via.array.size; ++i) {
    values.push_back(sdk::MetricScalar(history.via.array.ptr[i],
                                       "curvefitting: history[" + std::to_string(i) + "]"));
  }
  // Recorded on every call, as NNI does, so that trial_end finds it.
  histories_[trial_id] = values;

  const auto step = static_cast<int64_t>(values.size());
  if (!has_best_ || step < start_step_ || step == 0) return true;
  for (double v : values) {
    if (!std::isfinite(v)) {
      // A curve with NaN or inf cannot be fitted: keep going, as with no fit.
      host().Info("curvefitting: trial " + trial_id + " at step " + std::to_string(step) +
                  ": the history has a non-finite value; Good");
      return true;
    }
  }
  auto judged = last_judgment_.find(trial_id);
  if (judged != last_judgment_.end() && step - judged->second < gap_) return true;
  last_judgment_[trial_id] = step;
  return Judge(trial_id, values);
}

bool CurvefittingAssessor::Judge(const std::string& trial_id, const std::vector<double>& values) {
  curvefitting::Prediction prediction;
  try {
    prediction = curvefitting::PredictCurve(values, epoch_num_, rng_);
  } catch (const std::exception& e) {
    host().Warn("curvefitting: prediction failed for trial " + trial_id + " (" + e.what() +
                "); keeping the trial");
    return true;
  }
  ++predictions_;
  const std::string where = "curvefitting: trial " + trial_id + " at step " +
                            std::to_string(values.size()) + ": ";
  if (!prediction.has_value) {
    host().Info(where + "only " + std::to_string(prediction.kept.size()) +
                " curves fit, waiting for more values");
    return true;
  }
  if (!std::isfinite(prediction.value)) {
    host().Warn(where + "non-finite prediction; keeping the trial");
    return true;
  }
  const double standard = best_ * threshold_;
  const bool good = prediction.value > standard;
  host().Info(where + "predicted " + Text(prediction.value) + " at epoch " +
              std::to_string(epoch_num_) + " from " + Join(prediction.kept) + "; needs > " +
              Text(standard) + ": " + (good ? "Good" : "Bad"));
  return good;
}

void CurvefittingAssessor::TrialEnd(const std::string& trial_id, bool success) {
  auto it = histories_.find(trial_id);
  if (success) {
    if (it == histories_.end() || it->second.empty()) {
      host().Debug("curvefitting: trial " + trial_id +
                   " succeeded without an assessed history; best unchanged");
    } else {
      const double final_value = it->second.back();
      if (!std::isfinite(final_value)) {
        // A NaN or infinite best would make every later judgement Bad (or
        // Good): such a result does not set the bar.
        host().Warn("curvefitting: trial " + trial_id +
                    " ended with a non-finite value; best unchanged");
      } else {
        best_ = has_best_ ? std::max(best_, final_value) : final_value;
        has_best_ = true;
        ++completed_;
      }
    }
  }
  if (it != histories_.end()) histories_.erase(it);
  last_judgment_.erase(trial_id);
}

std::string CurvefittingAssessor::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 8, kStateFormat, kStateVersion);
  pk.pack(std::string("histories"));
  PackMap(pk, histories_, [&pk](const std::vector<double>& values) {
    pk.pack_array(static_cast<uint32_t>(values.size()));
    for (double v : values) sdk::PackFloat64(pk, v);
  });
  pk.pack(std::string("last_judgment"));
  PackMap(pk, last_judgment_, [&pk](int64_t n) { pk.pack(n); });
  pk.pack(std::string("best"));
  if (has_best_) {
    sdk::PackFloat64(pk, best_);
  } else {
    pk.pack_nil();
  }
  pk.pack(std::string("completed"));
  pk.pack(completed_);
  pk.pack(std::string("predictions"));
  pk.pack(predictions_);
  pk.pack(std::string("rng"));
  pk.pack(sdk::RngToString(rng_));
  return std::string(buffer.data(), buffer.size());
}

void CurvefittingAssessor::LoadState(std::string_view state) {
  msgpack::object_handle h = sdk::OpenState(state, kPlugin, kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  // Everything is read into locals first: a bad state changes nothing.
  std::map<std::string, std::vector<double>> histories;
  const msgpack::object& hist = StateMap(o, "histories");
  for (uint32_t i = 0; i < hist.via.map.size; ++i) {
    const msgpack::object_kv& kv = hist.via.map.ptr[i];
    if (!sdk::IsString(kv.key) || kv.val.type != msgpack::type::ARRAY) {
      BadState("bad entry in histories");
    }
    std::vector<double>& values = histories[std::string(sdk::StringView(kv.key))];
    for (uint32_t j = 0; j < kv.val.via.array.size; ++j) {
      if (!sdk::IsNumber(kv.val.via.array.ptr[j])) BadState("non-numeric value in histories");
      values.push_back(sdk::AsDouble(kv.val.via.array.ptr[j], "histories"));
    }
  }
  std::map<std::string, int64_t> last_judgment;
  const msgpack::object& judged = StateMap(o, "last_judgment");
  for (uint32_t i = 0; i < judged.via.map.size; ++i) {
    const msgpack::object_kv& kv = judged.via.map.ptr[i];
    if (!sdk::IsString(kv.key) || !sdk::IsInteger(kv.val)) BadState("bad entry in last_judgment");
    last_judgment[std::string(sdk::StringView(kv.key))] = sdk::AsInt64(kv.val, "last_judgment");
  }
  const msgpack::object* best = sdk::FindKey(o, "best");
  if (best == nullptr || (best->type != msgpack::type::NIL && !sdk::IsNumber(*best))) {
    BadState("\"best\" must be a number or nil");
  }
  const msgpack::object* completed = sdk::FindKey(o, "completed");
  const msgpack::object* predictions = sdk::FindKey(o, "predictions");
  if (completed == nullptr || !sdk::IsInteger(*completed) || predictions == nullptr ||
      !sdk::IsInteger(*predictions)) {
    BadState("\"completed\" and \"predictions\" must be integers");
  }
  const msgpack::object* rng_text = sdk::FindKey(o, "rng");
  std::mt19937_64 rng;
  if (rng_text == nullptr || !sdk::IsString(*rng_text) ||
      !sdk::RngFromString(sdk::StringView(*rng_text), &rng)) {
    BadState("bad \"rng\"");
  }

  histories_ = std::move(histories);
  last_judgment_ = std::move(last_judgment);
  has_best_ = best->type != msgpack::type::NIL;
  best_ = has_best_ ? sdk::AsDouble(*best, "best") : 0.0;
  completed_ = sdk::AsInt64(*completed, "completed");
  predictions_ = sdk::AsInt64(*predictions, "predictions");
  rng_ = rng;
}

}  // namespace tunehost::plugins

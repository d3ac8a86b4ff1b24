#include "medianstop_assessor.h"

#include <algorithm>
#include <utility>

#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.medianstop";
constexpr int64_t kStateVersion = 1;
constexpr int64_t kMaxStartStep = 9999;  // NNI's classArgs validator bound

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "medianstop: saved state: " + what);
}

void PackHistories(msgpack::packer<msgpack::sbuffer>& pk,
                   const std::map<std::string, std::vector<double>>& histories) {
  pk.pack_map(static_cast<uint32_t>(histories.size()));
  for (const auto& [id, values] : histories) {
    pk.pack(id);
    pk.pack_array(static_cast<uint32_t>(values.size()));
    for (double v : values) pk.pack_double(v);
  }
}

std::map<std::string, std::vector<double>> UnpackHistories(const msgpack::object* o,
                                                           const char* name) {
  if (o == nullptr || o->type != msgpack::type::MAP) BadState(std::string("no ") + name + " map");
  std::map<std::string, std::vector<double>> out;
  for (uint32_t i = 0; i < o->via.map.size; ++i) {
    const msgpack::object_kv& kv = o->via.map.ptr[i];
    if (!sdk::IsString(kv.key) || kv.val.type != msgpack::type::ARRAY) {
      BadState(std::string("bad entry in ") + name);
    }
    std::vector<double>& values = out[std::string(sdk::StringView(kv.key))];
    for (uint32_t j = 0; j < kv.val.via.array.size; ++j) {
      const msgpack::object& v = kv.val.via.array.ptr[j];
      if (!sdk::IsNumber(v)) BadState(std::string("non-numeric value in ") + name);
      values.push_back(sdk::AsDouble(v, name));
    }
  }
  return out;
}

}  // namespace

MedianstopAssessor::MedianstopAssessor(sdk::HostRef host, const msgpack::object& class_args)
    : Assessor(host) {
  if (class_args.type != msgpack::type::MAP) {
    throw sdk::Error(TH_INVALID_ARGUMENT, "medianstop: class_args must be a map");
  }
  for (uint32_t i = 0; i < class_args.via.map.size; ++i) {
    const msgpack::object_kv& kv = class_args.via.map.ptr[i];
    if (!sdk::IsString(kv.key)) {
      throw sdk::Error(TH_INVALID_ARGUMENT, "medianstop: class_args keys must be strings");
    }
    const std::string key(sdk::StringView(kv.key));
    if (key == "optimize_mode") {
      if (sdk::IsString(kv.val) && sdk::StringView(kv.val) == "maximize") {
        maximize_ = true;
      } else if (sdk::IsString(kv.val) && sdk::StringView(kv.val) == "minimize") {
        maximize_ = false;
      } else {
        throw sdk::Error(TH_INVALID_ARGUMENT,
                         "medianstop: class_args \"optimize_mode\" must be \"maximize\" or "
                         "\"minimize\"");
      }
    } else if (key == "start_step") {
      if (!sdk::IsInteger(kv.val) || kv.val.type == msgpack::type::NEGATIVE_INTEGER ||
          kv.val.via.u64 > static_cast<uint64_t>(kMaxStartStep)) {
        throw sdk::Error(TH_INVALID_ARGUMENT,
                         "medianstop: class_args \"start_step\" must be an integer in [0, 9999]");
      }
      start_step_ = static_cast<int64_t>(kv.val.via.u64);
    } else {
      throw sdk::Error(TH_INVALID_ARGUMENT, "medianstop: unknown class_args \"" + key +
                                                "\" (accepted: optimize_mode, start_step)");
    }
  }
}

bool MedianstopAssessor::AssessTrial(const std::string& trial_id,
                                     const msgpack::object& history) {
  if (history.type != msgpack::type::ARRAY) {
    throw sdk::Error(TH_INVALID_ARGUMENT,
                     std::string("medianstop: history must be an array, got ") +
                         sdk::TypeName(history));
  }
  const size_t step = history.via.array.size;
  if (static_cast<int64_t>(step) < start_step_) return true;
  // NNI's max() raises on an empty history and kills its dispatcher; there
  // is nothing to judge yet, so keep the trial.
  if (step == 0) return true;

  std::vector<double> values;
  values.reserve(step);
  for (size_t i = 0; i < step; ++i) {
    values.push_back(sdk::MetricScalar(history.via.array.ptr[i],
                                       "medianstop: history[" + std::to_string(i) + "]"));
  }
  // NNI keeps what it has and appends only the new tail.
  std::vector<double>& running = running_[trial_id];
  if (running.size() < values.size()) {
    running.insert(running.end(), values.begin() + static_cast<std::ptrdiff_t>(running.size()),
                   values.end());
  }

  const double best = maximize_ ? *std::max_element(values.begin(), values.end())
                                : *std::min_element(values.begin(), values.end());
  std::vector<double> averages;
  for (const auto& [id, avg] : completed_avg_) {
    if (avg.size() >= step) averages.push_back(avg[step - 1]);
  }
  if (averages.empty()) return true;
  std::sort(averages.begin(), averages.end());
  const size_t n = averages.size();
  if (maximize_) return !(best < averages[(n - 1) / 2]);
  return !(best > averages[n / 2]);
}

void MedianstopAssessor::TrialEnd(const std::string& trial_id, bool success) {
  auto it = running_.find(trial_id);
  if (it == running_.end()) {
    // Normal for a trial that never reached start_step.
    host().Debug("medianstop: trial_end for " + trial_id + ", which has no recorded history");
    return;
  }
  if (success) {
    std::vector<double> avg;
    avg.reserve(it->second.size());
    double sum = 0;
    for (size_t i = 0; i < it->second.size(); ++i) {
      sum += it->second[i];
      avg.push_back(sum / static_cast<double>(i + 1));
    }
    completed_avg_[trial_id] = std::move(avg);
  }
  running_.erase(it);
}

std::string MedianstopAssessor::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 4, kStateFormat, kStateVersion);
  pk.pack(std::string("running"));
  PackHistories(pk, running_);
  pk.pack(std::string("completed"));
  PackHistories(pk, completed_avg_);
  return std::string(buffer.data(), buffer.size());
}

void MedianstopAssessor::LoadState(std::string_view state) {
  msgpack::object_handle h = sdk::OpenState(state, "medianstop", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  auto running = UnpackHistories(sdk::FindKey(o, "running"), "running");
  auto completed = UnpackHistories(sdk::FindKey(o, "completed"), "completed");
  running_ = std::move(running);
  completed_avg_ = std::move(completed);
}

}  // namespace tunehost::plugins

// Shared by the built-in assessors' unit tests: making an assessor of a class
// with class_args, and histories handed over as the host hands them (arrays
// of float64 values, as metrics are sent).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "plugin_testing.h"
#include "tunehost/sdk/cpp/helper.h"

namespace tunehost::plugins::testing {

// An assessor of class T made with the JSON text `class_args`.
template <class T>
std::unique_ptr<T> MakeAssessor(const RecordingHost& host, const std::string& class_args) {
  msgpack::object_handle args = Msgpack(class_args);
  return std::make_unique<T>(host.ref(), args.get());
}

// A history as the host sends it: float64 values, as metrics are.
inline msgpack::object_handle History(const std::vector<double>& values) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(static_cast<uint32_t>(values.size()));
  for (double v : values) pk.pack_double(v);
  return msgpack::unpack(buffer.data(), buffer.size());
}

// true = Good (keep running), false = Bad (stop).
inline bool Assess(sdk::Assessor& a, const std::string& trial, const std::vector<double>& values) {
  msgpack::object_handle h = History(values);
  return a.AssessTrial(trial, h.get());
}

// A trial that reported `values` (assessed once with all of them) and ended.
inline void Finish(sdk::Assessor& a, const std::string& trial, const std::vector<double>& values,
                   bool success = true) {
  Assess(a, trial, values);
  a.TrialEnd(trial, success);
}

// AssessTrial refuses a history holding a value that is not a number, and
// one that is not an array.
inline void ExpectMalformedHistoriesRefused(sdk::Assessor& a) {
  msgpack::object_handle text = MsgpackOf(Json::parse(R"([1.0, "abc"])"));
  ExpectError([&] { a.AssessTrial("T", text.get()); }, TH_INVALID_ARGUMENT, {"history[1]"});
  msgpack::object_handle map = MsgpackOf(Json::parse(R"({"default": 1})"));
  ExpectError([&] { a.AssessTrial("T", map.get()); }, TH_INVALID_ARGUMENT,
              {"history must be an array"});
}

}  // namespace tunehost::plugins::testing

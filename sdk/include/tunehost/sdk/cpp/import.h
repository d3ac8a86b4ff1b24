// tunehost SDK: reading NNI import data (ImportData / FD) in a tuner.
//
// Import data is an array of records {"parameters": map, "value": metric};
// NNI spells the first key "parameter", which is accepted too. The metric is
// a number or a map with a numeric "default" (sdk::MetricScalar).
#pragma once

#include <cstddef>
#include <string>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::sdk {

// Calls fn(parameters, value, scalar) for every usable record, in order, and
// returns how many records were skipped (no parameter map, or no numeric
// metric). `records` must be an array: otherwise Error(TH_INVALID_ARGUMENT)
// naming `plugin`.
template <class Fn>
size_t ForEachImported(const msgpack::object& records, const std::string& plugin, Fn&& fn) {
  if (records.type != msgpack::type::ARRAY) {
    throw Error(TH_INVALID_ARGUMENT,
                plugin + ": import data must be an array, got " + TypeName(records));
  }
  size_t skipped = 0;
  for (uint32_t i = 0; i < records.via.array.size; ++i) {
    const msgpack::object& record = records.via.array.ptr[i];
    const msgpack::object* params = FindKey(record, "parameters");
    if (params == nullptr) params = FindKey(record, "parameter");
    const msgpack::object* value = FindKey(record, "value");
    if (params == nullptr || params->type != msgpack::type::MAP || value == nullptr) {
      ++skipped;
      continue;
    }
    double scalar = 0;
    try {
      scalar = MetricScalar(*value, "value");
    } catch (const Error&) {
      ++skipped;
      continue;
    }
    fn(*params, *value, scalar);
  }
  return skipped;
}

}  // namespace tunehost::sdk

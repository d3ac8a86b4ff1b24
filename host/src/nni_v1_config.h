// NNI's older (v1) experiment config format, converted to the v2 keys the
// reader takes, with the mapping NNI's own converter applies
// (nni/experiment/config/convert.py, `to_v2`), so v1 files run unchanged.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>

#include "tunehost/status.h"
#include "yaml_values.h"

namespace tunehost::host::config_yaml {

// Whether the map `root` is a v1 config: it has a key only v1 has
// (trainingServicePlatform, authorName, maxTrialNum, searchSpacePath,
// trial, ...).
bool IsNniV1(const YAML::Node& root);

// The v2 map for the v1 map `v1`. Values are the v1 nodes themselves, so
// errors the v2 reader finds in them still point into the file. Keys NNI's
// converter drops are dropped with a warning; keys it refuses, and keys of
// training services other than local, are errors (all of them, one per
// line). One warning says the file was converted.
Status ConvertNniV1(const Context& ctx, const YAML::Node& v1, YAML::Node* v2);

// The v1 key that the v2 key `key` ("maxTrialNumber", "trainingService.gpuIndices",
// "tuner.name", ...) was read from ("maxTrialNum", "localConfig.gpuIndices",
// "tuner.builtinTunerName"); `key` itself when both formats spell it alike.
// A Context::KeyName, so problems in a v1 file name the keys the file has.
std::string V1KeyName(std::string_view key);

}  // namespace tunehost::host::config_yaml

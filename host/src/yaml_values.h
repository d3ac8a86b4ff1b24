// Reading YAML for the experiment config (experiment_config.cc): errors with
// file:line:column, YAML 1.2 core-schema scalars, and any YAML value as
// MessagePack (search spaces, classArgs).
#pragma once

#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tunehost/protocol/codec.h"
#include "tunehost/status.h"

namespace tunehost::host::config_yaml {

// "file:line:column", or "file" without a position.
std::string Where(const std::string& file, const YAML::Mark& mark);

// Errors and warnings for one file, with positions from yaml-cpp marks.
// `key_name`, when given, turns the key a message is about into the one the
// file has (a v1 file's keys for the v2 keys they were read as).
class Context {
 public:
  using KeyName = std::string (*)(std::string_view key);

  Context(std::string file, YAML::Mark fallback, std::vector<std::string>* warnings,
          KeyName key_name = nullptr)
      : file_(std::move(file)), fallback_(fallback), warnings_(warnings), key_name_(key_name) {}

  Status Error(const YAML::Node& at, std::string_view key, std::string_view problem) const {
    return Status::BadField(Prefix(at, key) + std::string(problem));
  }
  void Warn(const YAML::Node& at, std::string_view key, std::string_view problem) const {
    if (warnings_ != nullptr) warnings_->push_back(Prefix(at, key) + std::string(problem));
  }
  const std::string& file() const { return file_; }

 private:
  std::string Prefix(const YAML::Node& at, std::string_view key) const {
    YAML::Mark mark = at.IsDefined() ? at.Mark() : fallback_;
    if (mark.is_null()) mark = fallback_;
    return Where(file_, mark) + ": " + (key_name_ ? key_name_(key) : std::string(key)) + ": ";
  }

  std::string file_;
  YAML::Mark fallback_;
  std::vector<std::string>* warnings_;
  KeyName key_name_;
};

// YAML 1.2 core-schema floats, including .inf and .nan.
bool ParseYamlFloat(std::string_view s, double* out);

// Any YAML value as one MessagePack value (scalars typed by the core schema).
Status ToPacked(const Context& ctx, const YAML::Node& n, const std::string& key,
                protocol::Packed* out);
bool IsPackedMap(const protocol::Packed& p);

// Both problems of a config, one per line, so a user fixes a file in one go.
inline Status Combine(Status first, const Status& next) {
  if (next.ok()) return first;
  if (first.ok()) return next;
  return Status::BadField(first.message() + "\n" + next.message());
}

// Calls `fn(key, full_key, key_node, value)` for each of a map's entries,
// refusing non-string and duplicate keys; every entry is visited, and every
// problem is in the result.
template <typename Fn>
Status ForEachEntry(const Context& ctx, const YAML::Node& map, const std::string& prefix, Fn fn) {
  std::set<std::string> seen;
  Status problems;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) {
      problems = Combine(std::move(problems), ctx.Error(it->first, prefix, "keys must be strings"));
      continue;
    }
    const std::string& k = it->first.Scalar();
    std::string full = prefix.empty() ? k : prefix + "." + k;
    if (!seen.insert(k).second) {
      problems = Combine(std::move(problems), ctx.Error(it->first, full, "duplicate key"));
      continue;
    }
    if (it->second.IsNull()) continue;  // null = absent, as in NNI
    // A key the v1 conversion wrote has no position: point at its value.
    const YAML::Node at = it->first.Mark().is_null() ? it->second : it->first;
    problems = Combine(std::move(problems), fn(k, full, at, it->second));
  }
  return problems;
}

// A scalar of one type, else an error naming `key` at the node's position.
Status GetString(const Context& ctx, const YAML::Node& n, const std::string& key,
                 std::string* out);
Status GetInt(const Context& ctx, const YAML::Node& n, const std::string& key, int64_t min,
              int64_t max, int64_t* out);
Status GetBool(const Context& ctx, const YAML::Node& n, const std::string& key, bool* out);
Status GetDuration(const Context& ctx, const YAML::Node& n, const std::string& key,
                   double* seconds);

// The YAML document in `text`; `label` names it in errors.
Status ParseYaml(std::string_view text, const std::string& label, YAML::Node* out);

}  // namespace tunehost::host::config_yaml

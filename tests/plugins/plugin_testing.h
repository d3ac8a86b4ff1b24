// Shared by the built-in plugins' unit tests: a th_host_t that records what
// the plugin logs, JSON -> MessagePack as the host hands values over, and the
// check of a refusal (status and message). tuner_testing.h and
// assessor_testing.h add what only tuners or assessors need. A test file puts
// its tests in namespace tunehost::plugins::testing, where all of these are
// found without using-declarations.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/host.h"

namespace tunehost::plugins::testing {

using Json = nlohmann::ordered_json;  // keeps key order, as the host does

// A host that records what the plugin logs. Not movable: host_.host_data
// points back to it.
class RecordingHost {
 public:
  RecordingHost() {
    host_.struct_size = sizeof(th_host_t);
    host_.abi_version = th_version_t TH_VERSION_INIT;
    host_.host_data = this;
    host_.name = "tunehost";
    host_.version = "test";
    host_.log = &Log;
    host_.send_trial = &SendTrial;
    host_.get_extension = nullptr;
  }
  RecordingHost(const RecordingHost&) = delete;
  RecordingHost& operator=(const RecordingHost&) = delete;

  sdk::HostRef ref() const { return sdk::HostRef(&host_); }

  bool Logged(th_log_level_t level, const std::string& part) const {
    for (const auto& [l, m] : logs_) {
      if (l == level && m.find(part) != std::string::npos) return true;
    }
    return false;
  }
  const std::vector<std::pair<th_log_level_t, std::string>>& logs() const { return logs_; }

  // Parameters a tuner sent later through host->send_trial (the credit
  // pattern), in order: (id, MessagePack map bytes). send_trial answers
  // send_trial_status (TH_OK unless a test sets another).
  const std::vector<std::pair<int64_t, std::string>>& sent() const { return sent_; }
  void clear_sent() { sent_.clear(); }
  th_status send_trial_status = TH_OK;

 private:
  static void Log(const th_host_t* self, th_log_level_t level, const char* message) {
    static_cast<RecordingHost*>(self->host_data)->logs_.emplace_back(level, message);
  }

  static th_status SendTrial(const th_host_t* self, int64_t id, const uint8_t* params,
                             size_t size) {
    auto* me = static_cast<RecordingHost*>(self->host_data);
    if (me->send_trial_status == TH_OK) {
      me->sent_.emplace_back(id, std::string(reinterpret_cast<const char*>(params), size));
    }
    return me->send_trial_status;
  }

  th_host_t host_{};
  std::vector<std::pair<int64_t, std::string>> sent_;
  std::vector<std::pair<th_log_level_t, std::string>> logs_;
};

inline msgpack::object_handle MsgpackOf(const Json& j) {
  std::vector<uint8_t> bytes = Json::to_msgpack(j);
  return msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// JSON text as the host hands it over (class_args, a search space, records).
inline msgpack::object_handle Msgpack(const std::string& text) {
  return MsgpackOf(Json::parse(text));
}

// The MessagePack bytes of `j`, e.g. a saved state written by hand.
inline std::string Pack(const Json& j) {
  std::vector<uint8_t> bytes = Json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

// The MessagePack bytes of JSON text.
inline std::string PackText(const std::string& text) { return Pack(Json::parse(text)); }

// The JSON of MessagePack bytes (packed parameters, a saved state).
inline Json ToJson(const std::string& bytes) { return Json::from_msgpack(bytes); }

// Runs `fn`, which must throw sdk::Error with `status` and a message holding
// every string of `parts`.
inline void ExpectError(const std::function<void()>& fn, th_status status,
                        const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning " << parts.front();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message \"" << e.what() << "\" lacks " << part;
    }
  }
}

// A call that constructs a T (a tuner or an assessor class) with the JSON text
// `class_args`, for ExpectError.
template <class T>
std::function<void()> Constructing(const RecordingHost& host, std::string class_args) {
  return [&host, class_args = std::move(class_args)] {
    msgpack::object_handle h = Msgpack(class_args);
    T plugin(host.ref(), h.get());
  };
}

}  // namespace tunehost::plugins::testing

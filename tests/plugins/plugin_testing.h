// Shared by the built-in plugins' unit tests: a th_host_t that records what
// the plugin logs, and JSON -> MessagePack as the host hands values over.
#pragma once

#include <cstdint>
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

}  // namespace tunehost::plugins::testing

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
    host_.send_trial = nullptr;
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

 private:
  static void Log(const th_host_t* self, th_log_level_t level, const char* message) {
    static_cast<RecordingHost*>(self->host_data)->logs_.emplace_back(level, message);
  }

  th_host_t host_{};
  std::vector<std::pair<th_log_level_t, std::string>> logs_;
};

inline msgpack::object_handle MsgpackOf(const Json& j) {
  std::vector<uint8_t> bytes = Json::to_msgpack(j);
  return msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace tunehost::plugins::testing

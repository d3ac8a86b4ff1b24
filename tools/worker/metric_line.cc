#include "metric_line.h"

#include <nlohmann/json.hpp>

#include "tunehost/protocol/codec.h"

namespace tunehost::worker {

Status ParseMetricLine(std::string_view line, MetricLine* out) {
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::BadFrame("not valid JSON");
  if (!j.is_object()) return Status::BadFrame("not a JSON object");

  out->type = protocol::MetricType::kPeriodical;
  if (auto it = j.find("type"); it != j.end() && !it->is_null()) {
    if (!it->is_string() ||
        !protocol::ParseMetricType(it->get_ref<const std::string&>(), &out->type)) {
      return Status::BadField("\"type\" must be \"PERIODICAL\" or \"FINAL\"");
    }
  }
  auto value = j.find("value");
  if (value == j.end()) return Status::MissingField("\"value\" is missing");
  // Checked here as well as by ParseMetric so the log names the JSON problem.
  const bool number = value->is_number();
  const bool map_with_default =
      value->is_object() && value->contains("default") && (*value)["default"].is_number();
  if (!number && !map_with_default) {
    return Status::BadField("\"value\" must be a number or a map with a numeric \"default\"");
  }
  protocol::Packed packed;
  if (Status s = protocol::JsonToPacked(value->dump(), &packed); !s.ok()) return s;
  return protocol::ParseMetric(packed, &out->value);
}

void LineSplitter::Feed(std::string_view data, std::vector<std::string>* lines, size_t* overlong) {
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    const std::string_view chunk = data.substr(0, nl);
    if (!discarding_) {
      if (buffer_.size() + chunk.size() > max_bytes_) {
        discarding_ = true;
        buffer_.clear();
        ++*overlong;
      } else {
        buffer_.append(chunk);
      }
    }
    if (nl == std::string_view::npos) return;
    if (!discarding_) {
      if (!buffer_.empty() && buffer_.back() == '\r') buffer_.pop_back();
      if (buffer_.find_first_not_of(" \t") != std::string::npos) lines->push_back(buffer_);
    }
    buffer_.clear();
    discarding_ = false;
    data.remove_prefix(nl + 1);
  }
}

void LineSplitter::Finish(std::vector<std::string>* lines, size_t* overlong) {
  Feed("\n", lines, overlong);
}

}  // namespace tunehost::worker

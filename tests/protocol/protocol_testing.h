// Shared by the protocol tests: the checked-in vectors (protocol/vectors/*.json),
// hex helpers, and a default body of every message type.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "tunehost/protocol/messages.h"

namespace tunehost::protocol::testing {

inline nlohmann::json LoadVectorFile(const std::string& name) {
  const std::string path = std::string(TH_VECTORS_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

inline std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

inline std::string ToHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

template <size_t... I>
Body DefaultBody(size_t index, std::index_sequence<I...>) {
  Body b;
  ((index == I ? static_cast<void>(b = std::variant_alternative_t<I, Body>{}) : void()), ...);
  return b;
}

// A default-constructed body of the index-th alternative (one per type code).
inline Body DefaultBody(size_t index) {
  return DefaultBody(index, std::make_index_sequence<std::variant_size_v<Body>>{});
}

}  // namespace tunehost::protocol::testing

// tunehost::Status: the result of an operation that can fail on bad input or a
// misbehaving peer (decode, routing, plugin calls). Cheap when OK. Exceptions
// are kept for setup and fatal socket errors only.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace tunehost {

class Status {
 public:
  // Codes map 1:1 onto the wire error codes of protocol/docs/wire-format.md §4.1.
  enum class Code {
    kOk = 0,
    kBadFrame,
    kUnsupportedVersion,
    kUnknownType,
    kMissingField,
    kBadField,
    kTooLarge,
    kNotFound,
    kBadState,
    kPluginError,
    kUnavailable,
    kForbidden,
    kInternal,
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status BadFrame(std::string m) { return Status(Code::kBadFrame, std::move(m)); }
  static Status UnsupportedVersion(std::string m) {
    return Status(Code::kUnsupportedVersion, std::move(m));
  }
  static Status UnknownType(std::string m) { return Status(Code::kUnknownType, std::move(m)); }
  static Status MissingField(std::string m) { return Status(Code::kMissingField, std::move(m)); }
  static Status BadField(std::string m) { return Status(Code::kBadField, std::move(m)); }
  static Status TooLarge(std::string m) { return Status(Code::kTooLarge, std::move(m)); }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status BadState(std::string m) { return Status(Code::kBadState, std::move(m)); }
  static Status PluginError(std::string m) { return Status(Code::kPluginError, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
  static Status Forbidden(std::string m) { return Status(Code::kForbidden, std::move(m)); }
  static Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
  // A status with a code read back (e.g. from another process).
  static Status FromCode(Code code, std::string m) {
    return code == Code::kOk ? Status() : Status(code, std::move(m));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // The wire name of the code ("bad_field", ...), "ok" for success.
  std::string_view CodeName() const { return CodeName(code_); }
  static std::string_view CodeName(Code code) {
    switch (code) {
      case Code::kOk: return "ok";
      case Code::kBadFrame: return "bad_frame";
      case Code::kUnsupportedVersion: return "unsupported_version";
      case Code::kUnknownType: return "unknown_type";
      case Code::kMissingField: return "missing_field";
      case Code::kBadField: return "bad_field";
      case Code::kTooLarge: return "too_large";
      case Code::kNotFound: return "not_found";
      case Code::kBadState: return "bad_state";
      case Code::kPluginError: return "plugin_error";
      case Code::kUnavailable: return "unavailable";
      case Code::kForbidden: return "forbidden";
      case Code::kInternal: return "internal";
    }
    return "internal";
  }
  // Inverse of CodeName; unknown names map to kInternal.
  static Code CodeFromName(std::string_view name) {
    for (int c = 0; c <= static_cast<int>(Code::kInternal); ++c) {
      if (CodeName(static_cast<Code>(c)) == name) return static_cast<Code>(c);
    }
    return Code::kInternal;
  }

  std::string ToString() const {
    if (ok()) return "ok";
    return std::string(CodeName()) + ": " + message_;
  }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace tunehost

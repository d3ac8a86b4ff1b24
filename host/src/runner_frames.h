// The frames a host and a plugin runner exchange over a FrameChannel: each
// one MessagePack array whose first element names it. Private to the host.
//
//   host -> runner   ["call", seq, op, args...]        one plugin call
//                    ["sent", req, code, message]       answer to "send_trial"
//   runner -> host   ["reply", seq, code, message, results...]
//                    ["send_trial", req, id, params]    the tuner's send_trial
//                    ["log", level, text]               a log line (any thread)
//
// `code` is a Status code name ("ok", "plugin_error", ...). Byte values
// (search spaces, parameters, states) travel as MessagePack bin. The ops and
// their arguments and results are listed in runner_ops below.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/status.h"

namespace tunehost::host::runner_frames {

using Packer = msgpack::packer<msgpack::sbuffer>;

// Op names, shared by both ends.
inline constexpr const char* kCreate = "create";                  // kind, id, class_args -> info
inline constexpr const char* kUpdateSearchSpace = "update_search_space";  // space
inline constexpr const char* kGenerate = "generate";              // [ids] -> [[id, params]], no_more
inline constexpr const char* kReceiveTrialResult = "receive_trial_result";
                                                     // id, params, value, scalar, customized
inline constexpr const char* kTrialEnd = "trial_end";             // id, success
inline constexpr const char* kImportData = "import_data";         // records -> supported
inline constexpr const char* kSaveState = "save_state";           // -> supported, state
inline constexpr const char* kLoadState = "load_state";           // state -> supported
inline constexpr const char* kAssessTrial = "assess_trial";       // trial_id, history -> good
inline constexpr const char* kAssessorTrialEnd = "assessor_trial_end";  // trial_id, success
inline constexpr const char* kDestroy = "destroy";                // the runner then exits

// Writes a string or bin element.
inline void Str(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}
inline void Bin(Packer& pk, std::string_view b) {
  pk.pack_bin(static_cast<uint32_t>(b.size()));
  pk.pack_bin_body(b.data(), static_cast<uint32_t>(b.size()));
}

// Reading: a frame is an array of elements; accessors check types and say
// what was wrong instead of throwing.
class Reader {
 public:
  // Parses `bytes`; ok() is false when they are not one array.
  explicit Reader(const std::string& bytes) {
    try {
      handle_ = msgpack::unpack(bytes.data(), bytes.size());
      ok_ = handle_.get().type == msgpack::type::ARRAY;
    } catch (...) {
      ok_ = false;
    }
  }
  bool ok() const { return ok_; }
  size_t size() const { return ok_ ? handle_.get().via.array.size : 0; }
  const msgpack::object* At(size_t i) const {
    return i < size() ? &handle_.get().via.array.ptr[i] : nullptr;
  }
  bool String(size_t i, std::string* out) const {
    const msgpack::object* o = At(i);
    if (o == nullptr || (o->type != msgpack::type::STR && o->type != msgpack::type::BIN)) {
      return false;
    }
    if (o->type == msgpack::type::STR) {
      out->assign(o->via.str.ptr, o->via.str.size);
    } else {
      out->assign(o->via.bin.ptr, o->via.bin.size);
    }
    return true;
  }
  bool Int(size_t i, int64_t* out) const {
    const msgpack::object* o = At(i);
    if (o == nullptr) return false;
    if (o->type == msgpack::type::POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
      *out = static_cast<int64_t>(o->via.u64);
    } else if (o->type == msgpack::type::NEGATIVE_INTEGER) {
      *out = o->via.i64;
    } else {
      return false;
    }
    return true;
  }
  bool Bool(size_t i, bool* out) const {
    const msgpack::object* o = At(i);
    if (o == nullptr || o->type != msgpack::type::BOOLEAN) return false;
    *out = o->via.boolean;
    return true;
  }
  bool Double(size_t i, double* out) const {
    const msgpack::object* o = At(i);
    if (o == nullptr) return false;
    if (o->type == msgpack::type::FLOAT32 || o->type == msgpack::type::FLOAT64) {
      *out = o->via.f64;
      return true;
    }
    int64_t v = 0;
    if (!Int(i, &v)) return false;
    *out = static_cast<double>(v);
    return true;
  }

 private:
  msgpack::object_handle handle_;
  bool ok_ = false;
};

// The Status a reply or answer carries.
inline Status StatusOf(const std::string& code, std::string message) {
  return Status::FromCode(Status::CodeFromName(code), std::move(message));
}

}  // namespace tunehost::host::runner_frames

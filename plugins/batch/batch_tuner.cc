#include "batch_tuner.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.batch";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "batch: saved state: " + what);
}

[[noreturn]] void BadSpace(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "batch: " + what);
}

std::string KeyText(const msgpack::object& key) {
  return sdk::IsString(key) ? "\"" + std::string(sdk::StringView(key)) + "\""
                            : std::string("a key of type ") + sdk::TypeName(key);
}

// The options of the one choice of a batch search space; throws naming the
// key and what is wrong.
const msgpack::object_array& ChoiceOptions(const msgpack::object& space, std::string* key) {
  const char* kWant = "the search space must have exactly one key, a choice whose options are "
                      "the configurations to run";
  if (space.type != msgpack::type::MAP) {
    BadSpace(std::string(kWant) + "; got " + sdk::TypeName(space));
  }
  const msgpack::object_map& map = space.via.map;
  if (map.size != 1) {
    std::string keys;
    for (uint32_t i = 0; i < map.size; ++i) keys += (i == 0 ? "" : ", ") + KeyText(map.ptr[i].key);
    BadSpace(std::string(kWant) + "; got " + std::to_string(map.size) + " keys" +
             (keys.empty() ? "" : ": " + keys));
  }
  const msgpack::object& k = map.ptr[0].key;
  if (!sdk::IsString(k)) BadSpace(std::string(kWant) + "; got " + KeyText(k));
  *key = std::string(sdk::StringView(k));
  const std::string where = "search space key \"" + *key + "\": ";
  const msgpack::object& spec = map.ptr[0].val;
  const msgpack::object* type = sdk::FindKey(spec, "_type");
  const msgpack::object* value = sdk::FindKey(spec, "_value");
  if (type == nullptr || value == nullptr) {
    BadSpace(where + "expected a map with \"_type\" and \"_value\"");
  }
  if (!sdk::IsString(*type) || sdk::StringView(*type) != "choice") {
    BadSpace(where + "_type " +
             (sdk::IsString(*type) ? "\"" + std::string(sdk::StringView(*type)) + "\""
                                   : std::string("of type ") + sdk::TypeName(*type)) +
             " is not supported: batch takes one choice whose options are the configurations");
  }
  if (value->type != msgpack::type::ARRAY) {
    BadSpace(where + "_value must be a list, got " + sdk::TypeName(*value));
  }
  if (value->via.array.size == 0) BadSpace(where + "choice needs at least one option");
  return value->via.array;
}

}  // namespace

BatchTuner::BatchTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  // optimize_mode is accepted for NNI configs that set it on every tuner; a
  // batch does not look at results.
  sdk::ClassArgs args("batch", class_args, {"optimize_mode"});
  args.Maximize(true);
}

void BatchTuner::UpdateSearchSpace(const msgpack::object& space) {
  std::string key;
  const msgpack::object_array& options = ChoiceOptions(space, &key);
  std::string space_key = sdk::CanonicalKey(space);
  if (space_key_ && *space_key_ == space_key) return;  // same list: go on where we are

  std::vector<Configuration> configurations;
  for (uint32_t i = 0; i < options.size; ++i) {
    Configuration c;
    c.option = sdk::OwnedObject(options.ptr[i]);
    c.wrapped = options.ptr[i].type != msgpack::type::MAP;
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    if (c.wrapped) {
      pk.pack_map(1);
      pk.pack(key);
    }
    sdk::PackObject(pk, options.ptr[i]);
    msgpack::object_handle h = msgpack::unpack(buffer.data(), buffer.size());
    c.key = sdk::CanonicalKey(h.get());
    configurations.push_back(std::move(c));
  }

  size_t next = 0;
  if (pending_space_key_ && *pending_space_key_ == space_key) {
    next = std::min(pending_next_, configurations.size());
  }
  pending_space_key_.reset();
  space_key_ = std::move(space_key);
  key_ = std::move(key);
  configurations_ = std::move(configurations);
  next_ = next;
  done_logged_ = false;
}

bool BatchTuner::GenerateParameters(int64_t /*parameter_id*/,
                                    msgpack::packer<msgpack::sbuffer>& out) {
  if (!space_key_) throw sdk::Error(TH_BAD_STATE, "batch: no search space yet");
  while (next_ < configurations_.size()) {
    const Configuration& c = configurations_[next_++];
    if (!seen_.Insert(c.key)) continue;  // imported, or listed before
    if (c.wrapped) {
      out.pack_map(1);
      out.pack(key_);
    }
    sdk::PackObject(out, c.option.get());
    return true;
  }
  if (!done_logged_) {
    done_logged_ = true;
    host().Info("batch: all " + std::to_string(configurations_.size()) +
                " options of the search space have been tried");
  }
  return false;
}

void BatchTuner::ImportData(const msgpack::object& records) {
  size_t skipped = sdk::ForEachImported(
      records, "batch", [&](const msgpack::object& params, const msgpack::object&, double) {
        seen_.InsertParameters(params);
      });
  if (skipped > 0) {
    host().Warn("batch: skipped " + std::to_string(skipped) +
                " imported records without a \"parameters\" map and a numeric \"value\"");
  }
}

std::string BatchTuner::SaveState() {
  // Before a search space, a loaded state is still pending: save it as it is.
  const std::optional<std::string>& key = space_key_ ? space_key_ : pending_space_key_;
  const size_t next = space_key_ ? next_ : pending_next_;
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 5, kStateFormat, kStateVersion);
  pk.pack(std::string("space"));
  if (key) {
    pk.pack_bin(static_cast<uint32_t>(key->size()));
    pk.pack_bin_body(key->data(), static_cast<uint32_t>(key->size()));
  } else {
    pk.pack_nil();
  }
  pk.pack(std::string("next"));
  pk.pack(static_cast<uint64_t>(next));
  pk.pack(std::string("seen"));
  seen_.Pack(pk);
  return std::string(buffer.data(), buffer.size());
}

void BatchTuner::LoadState(std::string_view state) {
  msgpack::object_handle h = sdk::OpenState(state, "batch", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  const msgpack::object* space = sdk::FindKey(o, "space");
  const msgpack::object* next = sdk::FindKey(o, "next");
  const msgpack::object* seen = sdk::FindKey(o, "seen");
  std::optional<std::string> key;
  if (space == nullptr) BadState("no space key");
  if (space->type == msgpack::type::BIN) {
    key.emplace(space->via.bin.ptr, space->via.bin.size);
  } else if (space->type != msgpack::type::NIL) {
    BadState("space key is neither binary nor nil");
  }
  if (next == nullptr || next->type != msgpack::type::POSITIVE_INTEGER ||
      next->via.u64 > std::numeric_limits<uint32_t>::max()) {
    BadState("no index of the next option");
  }
  const size_t position = static_cast<size_t>(next->via.u64);
  sdk::SeenConfigurations keys;
  if (seen == nullptr || !keys.Unpack(*seen)) BadState("no seen list of binary keys");

  if (!space_key_) {
    pending_space_key_ = std::move(key);  // applied by the search space it was saved with
    pending_next_ = position;
  } else if (key && *key == *space_key_) {
    if (position > configurations_.size()) BadState("next option beyond the search space");
    next_ = position;
  } else {
    // Saved for another search space: the tried configurations still count.
    host().Warn("batch: saved state belongs to another search space; starting at its first "
                "option, skipping the configurations already tried");
    next_ = 0;
  }
  seen_ = std::move(keys);
  done_logged_ = false;
}

}  // namespace tunehost::plugins

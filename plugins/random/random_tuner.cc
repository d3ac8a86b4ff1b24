#include "random_tuner.h"

#include <algorithm>
#include <locale>
#include <sstream>
#include <vector>

#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.random";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "random: saved state: " + what);
}

}  // namespace

RandomTuner::RandomTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  std::optional<uint64_t> seed;
  if (class_args.type != msgpack::type::MAP) {
    throw sdk::Error(TH_INVALID_ARGUMENT, "random: class_args must be a map");
  }
  for (uint32_t i = 0; i < class_args.via.map.size; ++i) {
    const msgpack::object_kv& kv = class_args.via.map.ptr[i];
    if (!sdk::IsString(kv.key)) {
      throw sdk::Error(TH_INVALID_ARGUMENT, "random: class_args keys must be strings");
    }
    const std::string key(sdk::StringView(kv.key));
    if (key == "seed") {
      if (kv.val.type == msgpack::type::NIL) continue;
      if (kv.val.type != msgpack::type::POSITIVE_INTEGER) {
        throw sdk::Error(TH_INVALID_ARGUMENT,
                         std::string("random: class_args \"seed\" must be a non-negative integer, "
                                     "got ") + sdk::TypeName(kv.val));
      }
      seed = kv.val.via.u64;
    } else if (key == "optimize_mode") {
      // Accepted for NNI configs that set it on every tuner; random ignores it.
      if (!sdk::IsString(kv.val) ||
          (sdk::StringView(kv.val) != "maximize" && sdk::StringView(kv.val) != "minimize")) {
        throw sdk::Error(TH_INVALID_ARGUMENT,
                         "random: class_args \"optimize_mode\" must be \"maximize\" or "
                         "\"minimize\"");
      }
    } else {
      throw sdk::Error(TH_INVALID_ARGUMENT, "random: unknown class_args \"" + key +
                                                "\" (accepted: seed, optimize_mode)");
    }
  }
  if (seed) {
    seed_ = *seed;
  } else {
    std::random_device device;
    seed_ = (static_cast<uint64_t>(device()) << 32) ^ device();
    host.Info("random: seed " + std::to_string(seed_) + " (set class_args seed to reproduce)");
  }
  rng_.seed(seed_);
}

void RandomTuner::UpdateSearchSpace(const msgpack::object& space) {
  space_ = sdk::SearchSpace::Parse(space);
  exhausted_ = false;
}

bool RandomTuner::EmitIfNew(const sdk::Assignment& a, msgpack::packer<msgpack::sbuffer>& out) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  space_->Pack(a, packer);
  msgpack::object_handle h = msgpack::unpack(buffer.data(), buffer.size());
  if (!seen_.insert(sdk::CanonicalKey(h.get())).second) return false;
  // Packed again rather than copied from `h`: msgpack-cxx would repack an
  // integral float as an integer (see sdk::PackFloat64).
  space_->Pack(a, out);
  return true;
}

bool RandomTuner::GenerateParameters(int64_t /*parameter_id*/,
                                     msgpack::packer<msgpack::sbuffer>& out) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "random: no search space yet");
  if (exhausted_) return false;
  for (int i = 0; i < kMaxRedraws; ++i) {
    if (EmitIfNew(space_->Sample(rng_), out)) return true;
  }
  // Mostly duplicates: a small finite space is nearly or fully tried. Walk it
  // from a random start so the last configurations are still found.
  std::optional<uint64_t> count = space_->CountConfigurations();
  if (count && *count <= kMaxEnumeration) {
    const uint64_t start = sdk::UniformIndex(rng_, *count);
    for (uint64_t k = 0; k < *count; ++k) {
      if (EmitIfNew(space_->ConfigurationAt((start + k) % *count), out)) return true;
    }
    exhausted_ = true;
    host().Info("random: all " + std::to_string(*count) +
                " configurations of the search space have been tried");
    return false;
  }
  host().Warn("random: " + std::to_string(kMaxRedraws) +
              " draws in a row were configurations already tried; no trial this time");
  return false;
}

void RandomTuner::ImportData(const msgpack::object& records) {
  if (records.type != msgpack::type::ARRAY) {
    throw sdk::Error(TH_INVALID_ARGUMENT,
                     std::string("random: import data must be an array, got ") +
                         sdk::TypeName(records));
  }
  size_t skipped = 0;
  for (uint32_t i = 0; i < records.via.array.size; ++i) {
    const msgpack::object& record = records.via.array.ptr[i];
    // "parameters" is tunehost's ImportRecord; "parameter" is NNI's spelling.
    const msgpack::object* params = sdk::FindKey(record, "parameters");
    if (params == nullptr) params = sdk::FindKey(record, "parameter");
    if (params == nullptr || params->type != msgpack::type::MAP) {
      ++skipped;
      continue;
    }
    seen_.insert(sdk::CanonicalKey(*params));
  }
  if (skipped > 0) {
    host().Warn("random: skipped " + std::to_string(skipped) +
                " imported records without a \"parameters\" map");
  }
}

std::string RandomTuner::SaveState() {
  std::ostringstream rng_text;
  rng_text.imbue(std::locale::classic());
  rng_text << rng_;
  std::vector<const std::string*> keys;
  keys.reserve(seen_.size());
  for (const std::string& k : seen_) keys.push_back(&k);
  std::sort(keys.begin(), keys.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });

  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 5, kStateFormat, kStateVersion);
  pk.pack(std::string("seed"));
  pk.pack(seed_);
  pk.pack(std::string("rng"));
  pk.pack(rng_text.str());
  pk.pack(std::string("seen"));
  pk.pack_array(static_cast<uint32_t>(keys.size()));
  for (const std::string* k : keys) {
    pk.pack_bin(static_cast<uint32_t>(k->size()));
    pk.pack_bin_body(k->data(), static_cast<uint32_t>(k->size()));
  }
  return std::string(buffer.data(), buffer.size());
}

void RandomTuner::LoadState(std::string_view state) {
  msgpack::object_handle h = sdk::OpenState(state, "random", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  const msgpack::object* seed = sdk::FindKey(o, "seed");
  const msgpack::object* rng_text = sdk::FindKey(o, "rng");
  const msgpack::object* seen = sdk::FindKey(o, "seen");
  if (seed == nullptr || seed->type != msgpack::type::POSITIVE_INTEGER) BadState("no seed");
  if (rng_text == nullptr || !sdk::IsString(*rng_text)) BadState("no rng");
  if (seen == nullptr || seen->type != msgpack::type::ARRAY) BadState("no seen list");

  std::mt19937_64 rng;
  std::istringstream in(std::string(sdk::StringView(*rng_text)));
  in.imbue(std::locale::classic());
  in >> rng;
  if (in.fail()) BadState("bad rng");
  std::unordered_set<std::string> keys;
  for (uint32_t i = 0; i < seen->via.array.size; ++i) {
    const msgpack::object& k = seen->via.array.ptr[i];
    if (k.type != msgpack::type::BIN) BadState("seen list holds a non-binary entry");
    keys.emplace(k.via.bin.ptr, k.via.bin.size);
  }
  seed_ = seed->via.u64;
  rng_ = rng;
  seen_ = std::move(keys);
  exhausted_ = false;
}

}  // namespace tunehost::plugins

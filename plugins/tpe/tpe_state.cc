#include "tpe_state.h"

#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/helper.h"

namespace tunehost::plugins::tpe {
namespace {

constexpr const char* kStateFormat = "org.tunehost.tpe";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "tpe: saved state: " + what);
}

const msgpack::object& Require(const msgpack::object& o, const char* key) {
  const msgpack::object* v = sdk::FindKey(o, key);
  if (v == nullptr) BadState(std::string("no \"") + key + "\"");
  return *v;
}

// A multi-objective result entry of a saved state: [params, values, violation].
sdk::Candidate UnpackScore(const msgpack::object& r, size_t objectives) {
  if (r.type != msgpack::type::ARRAY || r.via.array.size != 3 ||
      r.via.array.ptr[1].type != msgpack::type::ARRAY ||
      r.via.array.ptr[1].via.array.size != objectives || !sdk::IsNumber(r.via.array.ptr[2])) {
    BadState("bad multi-objective result entry");
  }
  sdk::Candidate c;
  for (uint32_t k = 0; k < objectives; ++k) {
    const msgpack::object& v = r.via.array.ptr[1].via.array.ptr[k];
    if (!sdk::IsNumber(v)) BadState("bad multi-objective result entry");
    c.values.push_back(sdk::AsDouble(v, "value"));
  }
  c.violation = sdk::AsDouble(r.via.array.ptr[2], "violation");
  return c;
}

// Multi-objective observations of a saved state: [[configuration, result index], ...].
std::vector<std::pair<sdk::Assignment, size_t>> UnpackObserved(const msgpack::object& o,
                                                               const sdk::SearchSpace& space) {
  if (o.type != msgpack::type::ARRAY) BadState("bad observations");
  std::vector<std::pair<sdk::Assignment, size_t>> out;
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    const msgpack::object& e = o.via.array.ptr[i];
    std::optional<sdk::Assignment> x;
    if (e.type == msgpack::type::ARRAY && e.via.array.size == 2 &&
        e.via.array.ptr[1].type == msgpack::type::POSITIVE_INTEGER) {
      x = sdk::UnpackAssignment(e.via.array.ptr[0], space);
    }
    if (!x) BadState("bad observation");
    out.emplace_back(std::move(*x), static_cast<size_t>(e.via.array.ptr[1].via.u64));
  }
  return out;
}

}  // namespace

std::string StateCodec::Save(const TunerState& s) const {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 10, kStateFormat, kStateVersion);
  pk.pack(std::string("objectives"));  // multi-objective: what the scores mean
  if (multi_) {
    multi_->PackSignature(pk);
  } else {
    pk.pack_nil();
  }
  sdk::PackSavedRandom(pk, s.seed, s.rng);
  pk.pack(std::string("observations"));
  if (multi_) {  // [[configuration, index into results], ...]
    pk.pack_array(static_cast<uint32_t>(s.observed.size()));
    for (const auto& [x, k] : s.observed) {
      pk.pack_array(2);
      sdk::PackAssignment(pk, x);
      pk.pack(static_cast<uint64_t>(k));
    }
  } else if (s.model) {
    s.model->Pack(pk);
  } else {
    pk.pack_array(0);
  }
  pk.pack(std::string("running"));
  pk.pack_array(static_cast<uint32_t>(s.running.size()));
  for (const auto& [id, x] : s.running) {
    pk.pack_array(2);
    pk.pack(id);
    sdk::PackAssignment(pk, x);
  }
  pk.pack(std::string("results"));
  pk.pack_array(static_cast<uint32_t>(s.results.size()));
  for (size_t i = 0; i < s.results.size(); ++i) {  // [params, loss] or [params, values, violation]
    pk.pack_array(multi_ ? 3 : 2);
    sdk::PackObject(pk, s.results[i].first.get());
    if (!multi_) {
      sdk::PackFloat64(pk, s.results[i].second);
      continue;
    }
    pk.pack_array(static_cast<uint32_t>(s.scores[i].values.size()));
    for (double v : s.scores[i].values) sdk::PackFloat64(pk, v);
    sdk::PackFloat64(pk, s.scores[i].violation);
  }
  pk.pack(std::string("seen"));
  s.seen.Pack(pk);
  pk.pack(std::string("exhausted"));
  pk.pack(s.exhausted);
  return std::string(buffer.data(), buffer.size());
}

void StateCodec::Load(std::string_view state, TunerState& s) const {
  msgpack::object_handle h = sdk::OpenState(state, "tpe", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, "tpe");
  const msgpack::object& running = Require(o, "running");
  const msgpack::object& results = Require(o, "results");
  const msgpack::object& exhausted = Require(o, "exhausted");
  const msgpack::object* objectives = sdk::FindKey(o, "objectives");
  if (multi_ ? !multi_->SameSignature(objectives)
             : objectives != nullptr && objectives->type != msgpack::type::NIL) {
    BadState("saved with other objectives or constraints than this tuner's class_args");
  }
  auto model = std::make_unique<Model>(space_, options_);
  std::vector<std::pair<sdk::Assignment, size_t>> observed;
  if (multi_) {
    observed = UnpackObserved(Require(o, "observations"), *space_);
  } else {
    model->Unpack(Require(o, "observations"));
  }
  sdk::SeenConfigurations seen;
  if (!seen.Unpack(Require(o, "seen"))) BadState("bad seen list");
  if (running.type != msgpack::type::ARRAY || results.type != msgpack::type::ARRAY ||
      exhausted.type != msgpack::type::BOOLEAN) {
    BadState("bad running, results or exhausted");
  }
  std::map<int64_t, sdk::Assignment> run;
  for (uint32_t i = 0; i < running.via.array.size; ++i) {
    const msgpack::object& r = running.via.array.ptr[i];
    std::optional<sdk::Assignment> x;
    if (r.type == msgpack::type::ARRAY && r.via.array.size == 2 &&
        sdk::IsInteger(r.via.array.ptr[0])) {
      x = sdk::UnpackAssignment(r.via.array.ptr[1], *space_);
    }
    if (!x) BadState("bad running entry");
    run[sdk::AsInt64(r.via.array.ptr[0], "tpe: saved state: running id")] = std::move(*x);
  }
  // The results: the carried-over history (the tuner rebuilds the liar's
  // statistics from them).
  std::vector<std::pair<sdk::OwnedObject, double>> res;
  std::vector<sdk::Candidate> scores;
  for (const auto& [x, k] : observed) {
    if (k >= results.via.array.size) BadState("an observation names no result");
  }
  for (uint32_t i = 0; i < results.via.array.size; ++i) {
    const msgpack::object& r = results.via.array.ptr[i];
    if (multi_) {
      scores.push_back(UnpackScore(r, multi_->objectives().size()));
      res.emplace_back(sdk::OwnedObject(r.via.array.ptr[0]), 0.0);
      continue;
    }
    if (r.type != msgpack::type::ARRAY || r.via.array.size != 2 ||
        !sdk::IsNumber(r.via.array.ptr[1])) {
      BadState("bad result entry");
    }
    const double loss = sdk::AsDouble(r.via.array.ptr[1], "loss");
    res.emplace_back(sdk::OwnedObject(r.via.array.ptr[0]), loss);
  }
  s.seed = random.seed;
  s.rng = random.rng;
  s.model = std::move(model);
  s.running = std::move(run);
  s.results = std::move(res);
  s.scores = std::move(scores);
  s.observed = std::move(observed);
  s.seen = std::move(seen);
  s.exhausted = exhausted.via.boolean;
}

}  // namespace tunehost::plugins::tpe

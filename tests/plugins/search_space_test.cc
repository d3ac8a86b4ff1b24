// Tests of sdk/include/tunehost/sdk/cpp/search_space.h: NNI's search space
// types, their sampling formulas, nested choices, validation messages.
#include "tunehost/sdk/cpp/search_space.h"

#include <gtest/gtest.h>

#include <optional>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugin_testing.h"
#include "tunehost/sdk/cpp/seen.h"
#include "tunehost/sdk/cpp/unit_cube.h"

namespace tunehost::sdk {
namespace {

using nlohmann::json;

// Search spaces are written as JSON in the tests and handed over as
// MessagePack, as the host does, keeping the user's key order.
using plugins::testing::Msgpack;

SearchSpace ParseJson(const std::string& text) {
  msgpack::object_handle h = Msgpack(text);
  return SearchSpace::Parse(h.get());
}

json PackToJson(const SearchSpace& space, const Assignment& a) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  space.Pack(a, pk);
  return json::from_msgpack(buffer.data(), buffer.data() + buffer.size());
}

std::vector<json> Draw(const SearchSpace& space, int n, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<json> out;
  for (int i = 0; i < n; ++i) out.push_back(PackToJson(space, space.Sample(rng)));
  return out;
}

bool IsMultiple(double x, double q) {
  double k = x / q;
  return std::fabs(k - std::round(k)) < 1e-9;
}

const char* kAllTypes = R"({
  "c": {"_type": "choice", "_value": ["relu", 3, 0.5, true]},
  "ri": {"_type": "randint", "_value": [-2, 3]},
  "u": {"_type": "uniform", "_value": [-1.5, 2.5]},
  "qu": {"_type": "quniform", "_value": [1, 9, 2]},
  "lu": {"_type": "loguniform", "_value": [0.001, 10]},
  "qlu": {"_type": "qloguniform", "_value": [1, 1000, 10]},
  "n": {"_type": "normal", "_value": [5, 2]},
  "qn": {"_type": "qnormal", "_value": [0, 4, 3]},
  "ln": {"_type": "lognormal", "_value": [0, 1]},
  "qln": {"_type": "qlognormal", "_value": [1, 0.5, 0.25]}
})";

TEST(SearchSpaceTest, ARepeatedKeyIsRefusedNamingIt) {
  // JSON keeps one of two equal keys; MessagePack keeps both, and a trial's
  // parameters could not be read back (found by tools/fuzz, search_space).
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_map(2);
  for (int i = 0; i < 2; ++i) {
    pk.pack(std::string("batch_size"));
    pk.pack_map(2);
    pk.pack(std::string("_type"));
    pk.pack(std::string("choice"));
    pk.pack(std::string("_value"));
    pk.pack_array(1);
    pk.pack(i);
  }
  msgpack::object_handle h = msgpack::unpack(b.data(), b.size());
  try {
    SearchSpace::Parse(h.get());
    FAIL() << "a repeated key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"batch_size\": appears twice"), std::string::npos)
        << e.what();
  }
}

TEST(SearchSpaceTest, EveryTypeGivesTheRightTypeAndRange) {
  SearchSpace space = ParseJson(kAllTypes);
  ASSERT_EQ(space.params().size(), 10u);
  const json options = json::parse(R"(["relu", 3, 0.5, true])");
  for (const json& p : Draw(space, 5000)) {
    ASSERT_EQ(p.size(), 10u) << p;
    EXPECT_NE(std::find(options.begin(), options.end(), p["c"]), options.end()) << p["c"];

    ASSERT_TRUE(p["ri"].is_number_integer()) << p["ri"];
    EXPECT_GE(p["ri"].get<int64_t>(), -2);
    EXPECT_LT(p["ri"].get<int64_t>(), 3);

    for (const char* key : {"u", "qu", "lu", "qlu", "n", "qn", "ln", "qln"}) {
      ASSERT_TRUE(p[key].is_number_float()) << key << " = " << p[key];
    }
    double u = p["u"];
    EXPECT_GE(u, -1.5);
    EXPECT_LE(u, 2.5);
    double qu = p["qu"];
    EXPECT_GE(qu, 1);
    EXPECT_LE(qu, 9);
    // clip(round(x/2)*2, 1, 9): even numbers, or the bounds when clipped.
    EXPECT_TRUE(IsMultiple(qu, 2) || qu == 1 || qu == 9) << qu;
    double lu = p["lu"];
    EXPECT_GE(lu, 0.001);
    EXPECT_LE(lu, 10);
    double qlu = p["qlu"];
    EXPECT_GE(qlu, 1);
    EXPECT_LE(qlu, 1000);
    EXPECT_TRUE(IsMultiple(qlu, 10) || qlu == 1) << qlu;
    EXPECT_TRUE(std::isfinite(p["n"].get<double>()));
    EXPECT_TRUE(IsMultiple(p["qn"], 3)) << p["qn"];
    EXPECT_GT(p["ln"].get<double>(), 0);
    double qln = p["qln"];
    EXPECT_GE(qln, 0);  // round(exp(x)/q)*q: no clip, so 0 is possible
    EXPECT_TRUE(IsMultiple(qln, 0.25)) << qln;
  }
}

std::set<double> DistinctValues(const std::string& type_and_value, int n) {
  SearchSpace space = ParseJson(R"({"x": )" + type_and_value + "}");
  std::set<double> seen;
  for (const json& p : Draw(space, n)) seen.insert(p["x"].get<double>());
  return seen;
}

TEST(SearchSpaceTest, QuniformRoundsToMultiplesAndClips) {
  EXPECT_EQ(DistinctValues(R"({"_type": "quniform", "_value": [0, 10, 2.5]})", 3000),
            (std::set<double>{0, 2.5, 5, 7.5, 10}));
  // round(2.3/5)*5 = 0, clipped to the lower bound 2.
  EXPECT_EQ(DistinctValues(R"({"_type": "quniform", "_value": [2, 10, 5]})", 3000),
            (std::set<double>{2, 5, 10}));
}

TEST(SearchSpaceTest, QuniformEndpointsHaveHalfWeight) {
  // [0, 10, 2.5]: 0 and 10 each take a half-width bucket (1/8 of the draws).
  SearchSpace space = ParseJson(R"({"x": {"_type": "quniform", "_value": [0, 10, 2.5]}})");
  std::map<double, int> counts;
  const int n = 40000;
  for (const json& p : Draw(space, n, 3)) ++counts[p["x"].get<double>()];
  EXPECT_NEAR(counts[0] / double(n), 0.125, 0.01);
  EXPECT_NEAR(counts[10] / double(n), 0.125, 0.01);
  EXPECT_NEAR(counts[5] / double(n), 0.25, 0.015);
}

TEST(SearchSpaceTest, QloguniformClipsToBounds) {
  // round(x/10)*10 for x in [1, 12): 0 (clipped to 1) or 10.
  EXPECT_EQ(DistinctValues(R"({"_type": "qloguniform", "_value": [1, 12, 10]})", 2000),
            (std::set<double>{1, 10}));
}

TEST(SearchSpaceTest, RoundingIsHalfToEvenLikePython) {
  SearchSpace space = ParseJson(R"({"x": {"_type": "quniform", "_value": [0, 10, 1]}})");
  const Parameter& p = space.params()[0];
  EXPECT_EQ(UserValue(p, 2.5), 2.0);
  EXPECT_EQ(UserValue(p, 3.5), 4.0);
  EXPECT_EQ(UserValue(p, 3.49), 3.0);
}

TEST(SearchSpaceTest, RandintUpperIsExclusive) {
  SearchSpace space = ParseJson(R"({"x": {"_type": "randint", "_value": [-1, 2]}})");
  std::set<int64_t> seen;
  for (const json& p : Draw(space, 2000)) {
    ASSERT_TRUE(p["x"].is_number_integer());
    seen.insert(p["x"].get<int64_t>());
  }
  EXPECT_EQ(seen, (std::set<int64_t>{-1, 0, 1}));
  EXPECT_EQ(space.params()[0].size, 3);
  EXPECT_EQ(space.CountConfigurations(), std::optional<uint64_t>(3));
}

TEST(SearchSpaceTest, LoguniformIsUniformInLogSpace) {
  SearchSpace space = ParseJson(R"({"x": {"_type": "loguniform", "_value": [0.0001, 0.1]}})");
  const Parameter& p = space.params()[0];
  EXPECT_TRUE(p.log);
  EXPECT_DOUBLE_EQ(p.low, std::log(0.0001));
  EXPECT_DOUBLE_EQ(p.high, std::log(0.1));
  int decade[3] = {0, 0, 0};
  const int n = 30000;
  for (const json& v : Draw(space, n, 5)) {
    double x = v["x"];
    ASSERT_GE(x, 0.0001);
    ASSERT_LE(x, 0.1);
    int d = static_cast<int>(std::floor(std::log10(x) + 4));
    ++decade[std::min(d, 2)];
  }
  for (int d : decade) EXPECT_NEAR(d / double(n), 1.0 / 3, 0.015);
}

TEST(SearchSpaceTest, LoguniformStaysInsideItsBoundsAtTheEdges) {
  SearchSpace space = ParseJson(R"({"x": {"_type": "loguniform", "_value": [0.001, 0.3]}})");
  const Parameter& p = space.params()[0];
  EXPECT_GE(UserValue(p, p.low), 0.001);
  EXPECT_LE(UserValue(p, p.high), 0.3);
}

void ExpectMeanAndSd(const std::vector<double>& xs, double mean, double sd) {
  double sum = 0;
  for (double x : xs) sum += x;
  double m = sum / xs.size();
  double ss = 0;
  for (double x : xs) ss += (x - m) * (x - m);
  double s = std::sqrt(ss / (xs.size() - 1));
  EXPECT_NEAR(m, mean, 0.05 * sd + 0.02);
  EXPECT_NEAR(s, sd, 0.03 * sd);
}

TEST(SearchSpaceTest, NormalTypesHaveTheirMeanAndSd) {
  SearchSpace space = ParseJson(R"({
    "n": {"_type": "normal", "_value": [10, 2]},
    "ln": {"_type": "lognormal", "_value": [-1, 0.5]},
    "qn": {"_type": "qnormal", "_value": [-3, 5, 0.5]}
  })");
  std::vector<double> n, log_ln, qn;
  bool negative_qn = false;
  for (const json& p : Draw(space, 20000, 11)) {
    n.push_back(p["n"]);
    ASSERT_GT(p["ln"].get<double>(), 0);
    log_ln.push_back(std::log(p["ln"].get<double>()));
    qn.push_back(p["qn"]);
    negative_qn = negative_qn || p["qn"].get<double>() < 0;
  }
  ExpectMeanAndSd(n, 10, 2);
  ExpectMeanAndSd(log_ln, -1, 0.5);
  ExpectMeanAndSd(qn, -3, 5.0);  // rounding to 0.5 barely changes the moments
  EXPECT_TRUE(negative_qn);      // qnormal is not clipped
}

const char* kNested = R"({
  "optimizer": {"_type": "choice", "_value": [
    {"_name": "sgd", "lr": {"_type": "uniform", "_value": [0.01, 0.1]},
                     "momentum": {"_type": "choice", "_value": [0.0, 0.9]}},
    {"_name": "adam", "lr": {"_type": "loguniform", "_value": [0.0001, 0.01]},
                      "schedule": {"_type": "choice", "_value": [
                        {"_name": "constant"},
                        {"_name": "step", "gamma": {"_type": "uniform", "_value": [0.1, 0.9]}}]}},
    {"_name": "none"}
  ]},
  "batch": {"_type": "choice", "_value": [16, 32]}
})";

TEST(SearchSpaceTest, NestedChoiceGivesNameAndOnlyTheChosenSubSpace) {
  SearchSpace space = ParseJson(kNested);
  std::set<std::string> names, schedules;
  for (const json& p : Draw(space, 2000)) {
    ASSERT_EQ(p.size(), 2u) << p;
    ASSERT_TRUE(p["batch"] == 16 || p["batch"] == 32) << p;
    const json& o = p["optimizer"];
    ASSERT_TRUE(o.is_object()) << p;
    const std::string name = o["_name"];
    names.insert(name);
    if (name == "sgd") {
      EXPECT_EQ(o.size(), 3u) << o;
      EXPECT_GE(o["lr"].get<double>(), 0.01);
      EXPECT_LE(o["lr"].get<double>(), 0.1);
      EXPECT_TRUE(o["momentum"] == 0.0 || o["momentum"] == 0.9) << o;
    } else if (name == "adam") {
      EXPECT_EQ(o.size(), 3u) << o;
      EXPECT_LE(o["lr"].get<double>(), 0.01);
      const json& s = o["schedule"];
      schedules.insert(s["_name"].get<std::string>());
      if (s["_name"] == "step") {
        EXPECT_EQ(s.size(), 2u) << s;
        EXPECT_TRUE(s["gamma"].is_number_float());
      } else {
        EXPECT_EQ(s, json::parse(R"({"_name": "constant"})"));
      }
    } else {
      EXPECT_EQ(o, json::parse(R"({"_name": "none"})"));
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"sgd", "adam", "none"}));
  EXPECT_EQ(schedules, (std::set<std::string>{"constant", "step"}));
}

TEST(SearchSpaceTest, FlattenedParametersDescribeTheSpace) {
  SearchSpace space = ParseJson(kNested);
  const std::vector<Parameter>& ps = space.params();
  std::vector<std::string> paths;
  for (const Parameter& p : ps) paths.push_back(p.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"optimizer", "optimizer/lr", "optimizer/momentum",
                                             "optimizer/lr", "optimizer/schedule",
                                             "optimizer/schedule/gamma", "batch"}));
  const Parameter& opt = ps[0];
  EXPECT_EQ(opt.type, ParamType::kChoice);
  EXPECT_TRUE(opt.categorical);
  EXPECT_TRUE(opt.nested);
  EXPECT_EQ(opt.size, 3);
  EXPECT_EQ(opt.parent, -1);
  EXPECT_EQ(ps[1].type, ParamType::kUniform);
  EXPECT_EQ(ps[1].parent, 0);
  EXPECT_EQ(ps[1].parent_option, 0);
  EXPECT_DOUBLE_EQ(ps[1].low, 0.01);
  EXPECT_DOUBLE_EQ(ps[1].high, 0.1);
  EXPECT_EQ(ps[3].type, ParamType::kLoguniform);
  EXPECT_EQ(ps[3].parent_option, 1);
  EXPECT_EQ(ps[5].parent, 4);
  EXPECT_EQ(ps[5].parent_option, 1);
  EXPECT_EQ(ps[6].parent, -1);
  EXPECT_EQ(ps[6].size, 2);
  // A uniform parameter makes the space infinite.
  EXPECT_FALSE(space.CountConfigurations().has_value());

  SearchSpace q = ParseJson(R"({"x": {"_type": "qloguniform", "_value": [1, 100, 5]}})");
  EXPECT_DOUBLE_EQ(q.params()[0].q, 5);
  EXPECT_TRUE(q.params()[0].clip);
  EXPECT_DOUBLE_EQ(q.params()[0].clip_low, 1);
  EXPECT_DOUBLE_EQ(q.params()[0].clip_high, 100);
}

TEST(SearchSpaceTest, SampleOneParameterAndPackAnAssignment) {
  SearchSpace space = ParseJson(kNested);
  const std::vector<Parameter>& ps = space.params();
  // Pick adam / step by hand, as a model-based tuner would.
  Assignment a(ps.size());
  a[0] = 1;
  a[3] = std::log(0.001);
  a[4] = 1;
  std::mt19937_64 rng(9);
  a[5] = SampleParameter(ps[5], rng);
  ASSERT_GE(*a[5], 0.1);
  ASSERT_LT(*a[5], 0.9);
  a[6] = 1;
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(space.IsActive(i, a), a[i].has_value()) << ps[i].path;
  }
  json p = PackToJson(space, a);
  EXPECT_EQ(p["batch"], 32);
  EXPECT_EQ(p["optimizer"]["_name"], "adam");
  EXPECT_NEAR(p["optimizer"]["lr"].get<double>(), 0.001, 1e-15);
  EXPECT_EQ(p["optimizer"]["schedule"]["_name"], "step");
  EXPECT_DOUBLE_EQ(p["optimizer"]["schedule"]["gamma"].get<double>(), *a[5]);

  // The internal format of what a trial got is the assignment again.
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  space.Pack(a, pk);
  msgpack::object_handle h = msgpack::unpack(buffer.data(), buffer.size());
  Assignment back = space.FromParameters(h.get());
  ASSERT_EQ(back.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(back[i].has_value(), a[i].has_value()) << ps[i].path;
    if (a[i]) {
      EXPECT_NEAR(*back[i], *a[i], 1e-12) << ps[i].path;
    }
  }
}

TEST(SearchSpaceTest, SameSeedSameDraws) {
  SearchSpace space = ParseJson(kAllTypes);
  EXPECT_EQ(Draw(space, 50, 77), Draw(space, 50, 77));
  EXPECT_NE(Draw(space, 50, 77), Draw(space, 50, 78));
}

TEST(SearchSpaceTest, FiniteSpaceCanBeEnumerated) {
  SearchSpace space = ParseJson(R"({
    "opt": {"_type": "choice", "_value": [
      {"_name": "a", "k": {"_type": "randint", "_value": [0, 3]}},
      {"_name": "b"}]},
    "q": {"_type": "quniform", "_value": [2, 10, 5]},
    "c": {"_type": "choice", "_value": ["x", "y"]}
  })");
  // (3 + 1) options * 3 q-values * 2 choices.
  ASSERT_EQ(space.CountConfigurations(), std::optional<uint64_t>(24));
  std::set<std::string> all;
  for (uint64_t i = 0; i < 24; ++i) all.insert(PackToJson(space, space.ConfigurationAt(i)).dump());
  EXPECT_EQ(all.size(), 24u);
  std::set<std::string> drawn;
  for (const json& p : Draw(space, 2000)) drawn.insert(p.dump());
  EXPECT_EQ(drawn, all);
}

// SeenConfigurations::FindUnseen, called as the tuners do (record what it
// returns): every configuration not seen yet comes out exactly once, then
// "exhausted"; configurations recorded meanwhile by other means are skipped.
TEST(SearchSpaceTest, FindUnseenReturnsEachUnseenConfigurationOnceThenExhausted) {
  SearchSpace space = ParseJson(R"({
    "c": {"_type": "choice", "_value": ["x", "y", "z", "w"]},
    "k": {"_type": "randint", "_value": [0, 50]}})");
  ASSERT_EQ(space.CountConfigurations(), std::optional<uint64_t>(200));
  SeenConfigurations seen;
  std::mt19937_64 rng(5);
  std::set<std::string> unseen;
  for (uint64_t i = 0; i < 200; ++i) {
    const Assignment a = space.ConfigurationAt(i);
    if (i % 7 == 3 || i % 11 == 0) {
      unseen.insert(SeenConfigurations::KeyOf(space, a));
    } else {
      ASSERT_TRUE(seen.Insert(space, a));
    }
  }
  std::set<std::string> found, recorded_elsewhere;
  for (int call = 0;; ++call) {
    ASSERT_LT(call, 1000);
    bool exhausted = true;
    std::optional<Assignment> a = seen.FindUnseen(space, rng, &exhausted);
    if (!a) {
      EXPECT_TRUE(exhausted);
      break;
    }
    EXPECT_FALSE(exhausted);
    const std::string key = SeenConfigurations::KeyOf(space, *a);
    EXPECT_TRUE(found.insert(key).second) << "returned twice: " << key;
    EXPECT_TRUE(unseen.count(key)) << "was seen already: " << key;
    ASSERT_TRUE(seen.Insert(space, *a));
    if (call == 3) {  // something else records two of the rest
      for (const std::string& k : unseen) {
        if (recorded_elsewhere.size() < 2 && !found.count(k)) {
          recorded_elsewhere.insert(k);
          ASSERT_TRUE(seen.Insert(k));
        }
      }
    }
  }
  EXPECT_EQ(found.size() + recorded_elsewhere.size(), unseen.size());
  for (const std::string& k : recorded_elsewhere) EXPECT_FALSE(found.count(k)) << k;
  EXPECT_EQ(seen.size(), 200u);
  bool exhausted = false;
  EXPECT_FALSE(seen.FindUnseen(space, rng, &exhausted));
  EXPECT_TRUE(exhausted) << "an exhausted space stays exhausted";
}

// The walk position is a cache keyed by the space's address and size; a
// different space at the same address with the same size must still have
// its unseen configuration found, not be reported exhausted.
TEST(SearchSpaceTest, FindUnseenSurvivesAStaleWalk) {
  std::optional<SearchSpace> space;
  space.emplace(ParseJson(R"({"k": {"_type": "randint", "_value": [0, 10]}})"));
  SeenConfigurations seen;
  std::mt19937_64 rng(1);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(seen.Insert(*space, space->ConfigurationAt(i)));
  bool exhausted = false;
  ASSERT_FALSE(seen.FindUnseen(*space, rng, &exhausted));  // walks every position
  ASSERT_TRUE(exhausted);
  space.emplace(ParseJson(R"({"k": {"_type": "randint", "_value": [100, 110]}})"));
  ASSERT_EQ(space->CountConfigurations(), std::optional<uint64_t>(10));
  // Everything of the new space but its first configuration is seen.
  for (uint64_t i = 1; i < 10; ++i) ASSERT_TRUE(seen.Insert(*space, space->ConfigurationAt(i)));
  std::optional<Assignment> b = seen.FindUnseen(*space, rng, &exhausted);
  ASSERT_TRUE(b);
  EXPECT_FALSE(exhausted);
  EXPECT_EQ(SeenConfigurations::KeyOf(*space, *b),
            SeenConfigurations::KeyOf(*space, space->ConfigurationAt(0)));
}

struct BadSpace {
  const char* space;
  std::vector<std::string> message_parts;
};

TEST(SearchSpaceTest, EveryValidationErrorNamesTheKey) {
  const std::vector<BadSpace> cases = {
      {R"({"a": 1})", {R"("a")", "expected a map"}},
      {R"({"a": {"_value": [1, 2]}})", {R"("a")", "_type"}},
      {R"({"a": {"_type": "uniform"}})", {R"("a")", "_value"}},
      {R"({"a": {"_type": 3, "_value": [1, 2]}})", {R"("a")", "_type"}},
      {R"({"a": {"_type": "gaussian", "_value": [1, 2]}})", {R"("a")", "gaussian"}},
      {R"({"a": {"_type": "uniform", "_value": 3}})", {R"("a")", "list"}},
      {R"({"a": {"_type": "choice", "_value": []}})", {R"("a")", "choice"}},
      {R"({"a": {"_type": "uniform", "_value": [0, 1, 2]}})", {R"("a")", "uniform needs 2"}},
      {R"({"a": {"_type": "quniform", "_value": [0, 1]}})", {R"("a")", "quniform needs 3"}},
      {R"({"a": {"_type": "randint", "_value": [0, 1.5]}})", {R"("a")", "integer"}},
      {R"({"a": {"_type": "randint", "_value": [3, 3]}})", {R"("a")", "lower < upper"}},
      {R"({"a": {"_type": "uniform", "_value": [1, 1]}})", {R"("a")", "low < high"}},
      {R"({"a": {"_type": "qloguniform", "_value": [5, 1, 1]}})", {R"("a")", "low < high"}},
      {R"({"a": {"_type": "uniform", "_value": ["0", 1]}})", {R"("a")", "numeric"}},
      {R"({"a": {"_type": "loguniform", "_value": [0, 1]}})", {R"("a")", "low > 0"}},
      {R"({"a": {"_type": "qloguniform", "_value": [-1, 1, 0.1]}})", {R"("a")", "low > 0"}},
      {R"({"a": {"_type": "normal", "_value": [0, 0]}})", {R"("a")", "sigma > 0"}},
      {R"({"a": {"_type": "qlognormal", "_value": [0, -1, 1]}})", {R"("a")", "sigma > 0"}},
      {R"({"a": {"_type": "quniform", "_value": [0, 1, 0]}})", {R"("a")", "q > 0"}},
      {R"({"a": {"_type": "choice", "_value": [{"_name": "x"}, 3]}})", {R"("a")", "nested"}},
      {R"({"optimizer": {"_type": "choice", "_value": [
           {"_name": "sgd", "lr": {"_type": "uniform", "_value": [0.1, 0.2]}},
           {"_name": "adam", "lr": {"_type": "loguniform", "_value": [0, 0.1]}}]}})",
       {R"(search space key "optimizer/lr")", R"(option "adam")", "loguniform needs low > 0"}},
      {R"({"o": {"_type": "choice", "_value": [{"_name": "x", "deep": {"_type": "choice",
           "_value": [{"_name": "y", "z": {"_type": "uniform", "_value": [2, 1]}}]}}]}})",
       {R"("o/deep/z")", "low < high"}},
      {R"([1, 2])", {"search space", "map"}},
  };
  for (const BadSpace& c : cases) {
    try {
      ParseJson(c.space);
      ADD_FAILURE() << "accepted: " << c.space;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), TH_INVALID_ARGUMENT);
      for (const std::string& part : c.message_parts) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
            << "message \"" << e.what() << "\" lacks \"" << part << "\" for " << c.space;
      }
    }
  }
}

TEST(SearchSpaceTest, ChoiceOptionsMayBeAnyValue) {
  // NNI only warns about non-scalar options; trials get them verbatim.
  SearchSpace space =
      ParseJson(R"({"layers": {"_type": "choice", "_value": [[64, 64], [128], null]}})");
  std::set<std::string> seen;
  for (const json& p : Draw(space, 300)) seen.insert(p["layers"].dump());
  EXPECT_EQ(seen, (std::set<std::string>{"[64,64]", "[128]", "null"}));
}

// unit_cube.h: the coordinates gp and cmaes model a space in.
TEST(SearchSpaceTest, UnitCoordinatesMapEachTypeAndComeBack) {
  SearchSpace s = ParseJson(R"({"c": {"_type": "choice", "_value": ["a", "b", "c", "d"]},
                                "u": {"_type": "uniform", "_value": [2, 6]},
                                "l": {"_type": "loguniform", "_value": [0.001, 1]},
                                "n": {"_type": "normal", "_value": [10, 2]}})");
  const auto& c = s.params()[0];
  const auto& u = s.params()[1];
  const auto& l = s.params()[2];
  const auto& n = s.params()[3];
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(ToUnit(c, i), (i + 0.5) / 4);
    EXPECT_EQ(FromUnit(c, ToUnit(c, i)), i);
  }
  EXPECT_EQ(FromUnit(c, 1.0), 3) << "the top edge is the last index";
  EXPECT_EQ(FromUnit(c, -5), 0);
  EXPECT_DOUBLE_EQ(ToUnit(u, 3), 0.25);
  EXPECT_DOUBLE_EQ(FromUnit(u, 0.25), 3);
  EXPECT_DOUBLE_EQ(ToUnit(u, 99), 1) << "uniform types are clipped to the box";
  EXPECT_DOUBLE_EQ(FromUnit(u, 7), 6);
  EXPECT_NEAR(ToUnit(l, std::log(0.001) + 0.5 * (std::log(1.0) - std::log(0.001))), 0.5, 1e-12)
      << "log types are linear in log space";
  EXPECT_DOUBLE_EQ(ToUnit(n, 10), 0.5);
  EXPECT_DOUBLE_EQ(ToUnit(n, 16), 1.0) << "mu + 3 sigma";
  EXPECT_DOUBLE_EQ(ToUnit(n, 22), 1.5) << "normal types are not clipped";
  EXPECT_DOUBLE_EQ(FromUnit(n, 1.5), 22);
}

TEST(SearchSpaceTest, EmptySpaceGivesAnEmptyMap) {
  SearchSpace space = ParseJson("{}");
  EXPECT_TRUE(space.empty());
  EXPECT_EQ(Draw(space, 1)[0], json::object());
  EXPECT_EQ(space.CountConfigurations(), std::optional<uint64_t>(1));
}

}  // namespace
}  // namespace tunehost::sdk

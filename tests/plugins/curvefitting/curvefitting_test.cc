// Tests of plugins/curvefitting/: the curve families, the Levenberg-Marquardt
// fit, and the assessor's rules (NNI's CurvefittingAssessor, see
// /work/shared/reference/nni-semantics.md section 6 and the header of
// curvefitting_assessor.h for the documented differences).
//
// Expected formula values are worked out by hand (shown next to each) from
// NNI's curvefunctions.py, not from the plugin's code.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "curvefitting/curve_model.h"
#include "curvefitting/curvefitting_assessor.h"
#include "plugins/assessor_testing.h"
#include "plugins/plugin_testing.h"
#include "tunehost/sdk/host.h"

namespace tunehost::plugins::testing {
namespace {

using curvefitting::Families;
using curvefitting::FindFamily;
using curvefitting::FitLeastSquares;
using curvefitting::Params;

// --- helpers ---

// The first `n` values of a curve y(x), x = 1..n.
std::vector<double> Curve(int n, const std::function<double(double)>& y) {
  std::vector<double> v;
  for (int x = 1; x <= n; ++x) v.push_back(y(x));
  return v;
}

// A curve that is still rising (the brief's example), scaled: 0.9 * (1 - 0.8 x^-0.5).
// Values: x=1 0.18, x=4 0.54, x=20 0.739.
double Rising(double x) { return 0.9 * (1.0 - 0.8 / std::sqrt(x)); }
// A curve stuck at 0.1.
double Flat(double /*x*/) { return 0.1; }

double Formula(const std::string& name, double x, Params p) {
  const curvefitting::Family* f = FindFamily(name);
  EXPECT_NE(f, nullptr) << name;
  return f == nullptr ? NAN : f->formula(x, p);
}

// --- curve families ---

TEST(CurvefittingFamiliesTest, FormulasAtKnownParameters) {
  // vap: exp(a + b/x + c ln x); a=0.5, b=-2, c=0.5, x=4: exp(0.5 - 0.5 + 0.5 ln 4) = 2.
  EXPECT_NEAR(Formula("vap", 4, {0.5, -2, 0.5, 0}), 2.0, 1e-12);
  // pow3: c - a x^-alpha; c=1, a=0.8, alpha=0.5: 1 - 0.8 / 2 = 0.6.
  EXPECT_NEAR(Formula("pow3", 4, {1, 0.8, 0.5, 0}), 0.6, 1e-12);
  // linear: a x + b; 0.5 * 4 + 0.25 = 2.25.
  EXPECT_NEAR(Formula("linear", 4, {0.5, 0.25, 0, 0}), 2.25, 1e-12);
  // logx_linear: a ln x + b; 2 ln 4 + 1 = 3.772588722239781.
  EXPECT_NEAR(Formula("logx_linear", 4, {2, 1, 0, 0}), 3.772588722239781, 1e-12);
  // dr_hill_zero_background: theta x^eta / (kappa^eta + x^eta);
  // theta=0.9, eta=2, kappa=2: 0.9 * 16 / (4 + 16) = 0.72.
  EXPECT_NEAR(Formula("dr_hill_zero_background", 4, {0.9, 2, 2, 0}), 0.72, 1e-12);
  // log_power: a / (1 + (x / e^b)^c); a=0.8, b=ln 2, c=2: 0.8 / (1 + 2^2) = 0.16.
  EXPECT_NEAR(Formula("log_power", 4, {0.8, std::log(2.0), 2, 0}), 0.16, 1e-12);
  // pow4: c - (a x + b)^-alpha; alpha=0.5, a=2, b=1, c=1: 1 - 9^-0.5 = 2/3.
  EXPECT_NEAR(Formula("pow4", 4, {0.5, 2, 1, 1}), 2.0 / 3.0, 1e-12);
  // mmf: alpha - (alpha - beta) / (1 + (kappa x)^delta);
  // 0.9 - 0.8 / (1 + (0.5 * 4)^2) = 0.74.
  EXPECT_NEAR(Formula("mmf", 4, {0.9, 0.1, 0.5, 2}), 0.74, 1e-12);
  // exp4: c - exp(-a x^alpha + b); c=0.9, a=0.5, b=0, alpha=0.5: 0.9 - e^-1.
  EXPECT_NEAR(Formula("exp4", 4, {0.9, 0.5, 0, 0.5}), 0.5321205588285577, 1e-12);
  // ilog2: c - a / ln x; c=1, a=0.5: 1 - 0.5 / ln 4.
  EXPECT_NEAR(Formula("ilog2", 4, {1, 0.5, 0, 0}), 0.6393262397777592, 1e-12);
  // weibull: alpha - (alpha - beta) exp(-(kappa x)^delta); 0.9 - 0.8 e^-4.
  EXPECT_NEAR(Formula("weibull", 4, {0.9, 0.1, 0.5, 2}), 0.8853474888890127, 1e-12);
  // janoschek: a - (a - beta) exp(-k x^delta); a=0.9, beta=0.1, k=0.25, delta=1: 0.9 - 0.8 e^-1.
  EXPECT_NEAR(Formula("janoschek", 4, {0.9, 0.1, 0.25, 1}), 0.6056964470628461, 1e-12);
  // ilog2 is infinite at the first epoch (log 1 = 0), as in NNI.
  EXPECT_FALSE(std::isfinite(Formula("ilog2", 1, {0.78, 0.43, 0, 0})));
}

TEST(CurvefittingFamiliesTest, NniOrderAndInitialParameters) {
  struct Expected {
    const char* name;
    int num_params;
    Params initial;
  };
  // curvefunctions.py: curve_combination_models, model_para_num, model_para.
  const Expected expected[] = {
      {"vap", 3, {-0.622028, -0.470050, 0.042322, 0}},
      {"pow3", 3, {0.84, 0.52, 0.01, 0}},
      {"linear", 2, {1.0, 0, 0, 0}},
      {"logx_linear", 2, {0.378106, 0.046506, 0, 0}},
      {"dr_hill_zero_background", 3, {0.772320, 0.586449, 2.460843, 0}},
      {"log_power", 3, {0.77, 2.98, -0.51, 0}},
      {"pow4", 4, {0.1, 200, 0, 0.8}},
      {"mmf", 4, {0.7, 0.1, 0.01, 5}},
      {"exp4", 4, {0.7, 0.8, -0.8, 0.3}},
      {"ilog2", 2, {0.78, 0.43, 0, 0}},
      {"weibull", 4, {0.7, 0.1, 0.01, 1}},
      {"janoschek", 4, {0.73, 0.07, 0.355, 0.46}},
  };
  ASSERT_EQ(Families().size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_STREQ(Families()[i].name, expected[i].name);
    EXPECT_EQ(Families()[i].num_params, expected[i].num_params) << expected[i].name;
    for (int j = 0; j < expected[i].num_params; ++j) {
      EXPECT_EQ(Families()[i].initial[j], expected[i].initial[j]) << expected[i].name << " " << j;
    }
  }
  EXPECT_EQ(FindFamily("nope"), nullptr);
}

// --- Levenberg-Marquardt ---

std::vector<double> Xs(int n) {
  std::vector<double> xs;
  for (int x = 1; x <= n; ++x) xs.push_back(x);
  return xs;
}

TEST(CurvefittingFitTest, RecoversPow3Parameters) {
  const curvefitting::Family& pow3 = *FindFamily("pow3");
  const Params truth{0.9, 0.7, 0.6, 0};
  std::vector<double> ys;
  for (double x : Xs(20)) ys.push_back(0.9 - 0.7 * std::pow(x, -0.6));
  // From NNI's initial parameters and from scipy's default start (ones).
  for (const Params& start : {pow3.initial, Params{1, 1, 1, 0}}) {
    curvefitting::FitResult fit = FitLeastSquares(pow3, Xs(20), ys, start, 800);
    ASSERT_TRUE(fit.ok);
    EXPECT_LT(fit.cost, 1e-20);
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(fit.params[j], truth[j], 1e-6) << j;
    EXPECT_LE(fit.evaluations, 800 + 4);  // the cap, plus at most one Jacobian's overshoot
  }
}

TEST(CurvefittingFitTest, RecoversVapParameters) {
  const curvefitting::Family& vap = *FindFamily("vap");
  const Params truth{-0.3, -1.2, 0.05, 0};
  std::vector<double> ys;
  for (double x : Xs(15)) ys.push_back(std::exp(-0.3 - 1.2 / x + 0.05 * std::log(x)));
  curvefitting::FitResult fit = FitLeastSquares(vap, Xs(15), ys, vap.initial, 800);
  ASSERT_TRUE(fit.ok);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(fit.params[j], truth[j], 1e-6) << j;
}

TEST(CurvefittingFitTest, NoisyDataGivesTheLeastSquaresLine) {
  // linear on (1, 1), (2, 3), (3, 2): slope 0.5, intercept 1 (normal equations by hand).
  const curvefitting::Family& linear = *FindFamily("linear");
  curvefitting::FitResult fit = FitLeastSquares(linear, Xs(3), {1, 3, 2}, linear.initial, 600);
  ASSERT_TRUE(fit.ok);
  EXPECT_NEAR(fit.params[0], 0.5, 1e-7);
  EXPECT_NEAR(fit.params[1], 1.0, 1e-7);
  EXPECT_NEAR(fit.cost, 1.5, 1e-9);  // residuals -0.5, 1, -0.5
}

TEST(CurvefittingFitTest, EvaluationCapAndUndefinedStart) {
  const curvefitting::Family& mmf = *FindFamily("mmf");
  std::vector<double> ys = Curve(20, Rising);
  curvefitting::FitResult fit = FitLeastSquares(mmf, Xs(20), ys, Params{1, 1, 1, 1}, 7);
  EXPECT_LE(fit.evaluations, 7 + 5);  // one Jacobian (m + 1 with a backward retry) may overshoot
  // ilog2 is infinite at x = 1: no finite starting point, not ok.
  const curvefitting::Family& ilog2 = *FindFamily("ilog2");
  EXPECT_FALSE(FitLeastSquares(ilog2, Xs(10), Curve(10, Rising), ilog2.initial, 600).ok);
  // MINPACK's default cap, lowered for long histories.
  EXPECT_EQ(curvefitting::MaxEvaluations(4, 20), 1000);
  EXPECT_EQ(curvefitting::MaxEvaluations(2, 20), 600);
  EXPECT_EQ(curvefitting::MaxEvaluations(4, 1000), 100);
  EXPECT_EQ(curvefitting::MaxEvaluations(4, 1000000), 50);
}

TEST(CurvefittingModelTest, PredictsLevelledCurvesAndWaitsOnSteepOnes) {
  std::mt19937_64 rng(1);
  // Stuck at 0.1: every family fits exactly and predicts 0.1.
  curvefitting::Prediction flat = curvefitting::PredictCurve(Curve(10, Flat), 20, rng);
  ASSERT_TRUE(flat.has_value);
  EXPECT_NEAR(flat.value, 0.1, 1e-3);
  EXPECT_GE(flat.kept.size(), 4u);
  // The rising curve observed up to the target epoch: predicted near its
  // value there, 0.9 * (1 - 0.8 / sqrt(20)) = 0.739.
  curvefitting::Prediction up = curvefitting::PredictCurve(Curve(20, Rising), 20, rng);
  ASSERT_TRUE(up.has_value);
  EXPECT_NEAR(up.value, 0.739, 0.01);
  // Still steep at 6 of 20 epochs: the families disagree, no prediction.
  EXPECT_FALSE(curvefitting::PredictCurve(Curve(6, Rising), 20, rng).has_value);
  // Nothing fits a history with a NaN in it.
  std::vector<double> broken = Curve(10, Flat);
  broken[3] = NAN;
  curvefitting::Prediction none = curvefitting::PredictCurve(broken, 20, rng);
  EXPECT_FALSE(none.has_value);
  EXPECT_TRUE(none.kept.empty());
}

// --- the assessor ---

TEST(CurvefittingAssessorTest, DefaultsAreNnis) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, "{}");
  EXPECT_EQ(a->epoch_num(), 20);
  EXPECT_EQ(a->start_step(), 6);
  EXPECT_EQ(a->threshold(), 0.95);
  EXPECT_EQ(a->gap(), 1);
  EXPECT_FALSE(a->has_best());
  // Without a seed the one drawn is logged so the run can be repeated.
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "curvefitting: seed "));
  auto b = MakeAssessor<CurvefittingAssessor>(
      host, R"({"epoch_num": 50, "start_step": 0, "threshold": 0.5, "gap": 3,
                          "optimize_mode": "maximize", "seed": 7})");
  EXPECT_EQ(b->epoch_num(), 50);
  EXPECT_EQ(b->start_step(), 0);
  EXPECT_EQ(b->threshold(), 0.5);
  EXPECT_EQ(b->gap(), 3);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "positive start_step"));
}

TEST(CurvefittingAssessorTest, GoodWithoutPredictingBeforeAnySuccess) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 1})");
  // A trial stuck at 0.1 for 20 epochs: nothing to compare with yet.
  for (int s = 1; s <= 20; ++s) EXPECT_TRUE(Assess(*a, "T", Curve(s, Flat))) << s;
  // A failed trial does not set the best either.
  Finish(*a, "failed", Curve(20, [](double) { return 0.9; }), /*success=*/false);
  EXPECT_FALSE(a->has_best());
  EXPECT_TRUE(Assess(*a, "T", Curve(20, Flat)));
  EXPECT_EQ(a->predictions(), 0);
}

TEST(CurvefittingAssessorTest, GoodWithoutPredictingBeforeStartStep) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 1, "start_step": 8})");
  Finish(*a, "best", Curve(20, [](double) { return 0.9; }));
  ASSERT_TRUE(a->has_best());
  for (int s = 1; s < 8; ++s) EXPECT_TRUE(Assess(*a, "T", Curve(s, Flat))) << s;
  EXPECT_EQ(a->predictions(), 0);
  // S == start_step is judged.
  EXPECT_FALSE(Assess(*a, "T", Curve(8, Flat)));
  EXPECT_EQ(a->predictions(), 1);
}

TEST(CurvefittingAssessorTest, FlatLowCurveIsBad) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 3})");
  Finish(*a, "best", Curve(20, [](double) { return 0.9; }));
  EXPECT_EQ(a->best(), 0.9);
  // Predicted ~0.1 at epoch 20, below 0.95 * 0.9 = 0.855.
  EXPECT_FALSE(Assess(*a, "low", Curve(6, Flat)));
  EXPECT_FALSE(Assess(*a, "low", Curve(10, Flat)));
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "trial low at step 10: predicted 0.1 at epoch 20"));
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "needs > 0.855: Bad"));
  // A flat curve that wiggles a little is judged the same way once the
  // families agree on it.
  auto wiggle = [](double x) { return 0.1 + 0.004 * std::sin(3 * x); };
  EXPECT_FALSE(Assess(*a, "wiggle", Curve(12, wiggle)));
}

TEST(CurvefittingAssessorTest, RisingCurveIsGoodWhenTheBestIsSimilar) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 3})");
  // Best completed 0.75: the standard is 0.7125. The rising curve reaches
  // 0.739 at epoch 20 and is Good at every step (while steep, because the
  // families disagree and NNI waits; at the end, because of the prediction).
  Finish(*a, "best", Curve(20, [](double) { return 0.75; }));
  for (int s = 1; s <= 20; ++s) EXPECT_TRUE(Assess(*a, "up", Curve(s, Rising))) << s;
  EXPECT_GE(a->predictions(), 15);  // judged at every step from 6 on
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "trial up at step 20: predicted 0.7"));
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "needs > 0.7125: Good"));
  // The same curve when the best completed trial reached 0.9 (standard
  // 0.855) is stopped once it has levelled off enough to be predicted.
  Finish(*a, "better", Curve(20, [](double) { return 0.9; }));
  EXPECT_FALSE(Assess(*a, "up2", Curve(20, Rising)));
}

TEST(CurvefittingAssessorTest, GapRule) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 1, "gap": 3})");
  Finish(*a, "best", Curve(20, [](double) { return 0.9; }));
  EXPECT_FALSE(Assess(*a, "T", Curve(6, Flat)));  // judged at 6
  EXPECT_EQ(a->predictions(), 1);
  EXPECT_TRUE(Assess(*a, "T", Curve(7, Flat)));  // 1 new value < gap
  EXPECT_TRUE(Assess(*a, "T", Curve(8, Flat)));  // 2 < gap
  EXPECT_EQ(a->predictions(), 1);
  EXPECT_FALSE(Assess(*a, "T", Curve(9, Flat)));  // 3 new values: judged again
  EXPECT_EQ(a->predictions(), 2);
  EXPECT_TRUE(Assess(*a, "T", Curve(11, Flat)));  // 2 since 9
  // The counter is per trial: another trial is judged at its first chance.
  EXPECT_FALSE(Assess(*a, "U", Curve(7, Flat)));
  EXPECT_EQ(a->predictions(), 3);
  // A trial's counter goes with it when it ends.
  a->TrialEnd("T", false);
  EXPECT_FALSE(Assess(*a, "T", Curve(12, Flat)));
}

TEST(CurvefittingAssessorTest, TrialEndUsesThatTrialsOwnFinalValue) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 1})");
  // A is assessed with a history ending at 0.9, then B ending at 0.2. NNI
  // would take the last assessed history (B's 0.2) when A ends.
  Assess(*a, "A", {0.5, 0.95, 0.9});
  Assess(*a, "B", {0.1, 0.2});
  a->TrialEnd("A", true);
  ASSERT_TRUE(a->has_best());
  EXPECT_EQ(a->best(), 0.9);  // the final value, not the maximum 0.95
  EXPECT_EQ(a->completed_count(), 1);
  // So a curve stuck at 0.5 is Bad (0.5 < 0.855); with NNI's 0.2 it would be Good.
  EXPECT_FALSE(Assess(*a, "C", Curve(10, [](double) { return 0.5; })));
  // A lower final value does not lower the best; a higher one raises it.
  a->TrialEnd("B", true);
  EXPECT_EQ(a->best(), 0.9);
  Finish(*a, "D", {0.97});
  EXPECT_EQ(a->best(), 0.97);
  EXPECT_EQ(a->completed_count(), 3);
  // A trial that succeeds without any assessed history changes nothing.
  a->TrialEnd("never-assessed", true);
  EXPECT_EQ(a->best(), 0.97);
  EXPECT_EQ(a->completed_count(), 3);
  EXPECT_TRUE(host.Logged(TH_LOG_DEBUG, "never-assessed"));
}

TEST(CurvefittingAssessorTest, UnpredictableHistoriesAreGood) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 1, "start_step": 0})");
  Finish(*a, "best", Curve(20, [](double) { return 0.9; }));
  EXPECT_TRUE(Assess(*a, "empty", {}));
  std::vector<double> broken = Curve(10, Flat);
  broken[2] = NAN;
  EXPECT_TRUE(Assess(*a, "nan", broken));
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "trial nan at step 10: the history has a non-finite"));
}

// A trial whose last value is NaN or infinite does not become the bar every
// later trial is judged against.
TEST(CurvefittingAssessorTest, NonFiniteFinalValueDoesNotSetTheBest) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 1, "start_step": 0})");
  std::vector<double> curve = Curve(20, [](double) { return 0.9; });
  curve.back() = NAN;
  Finish(*a, "nan", curve);
  curve.back() = INFINITY;
  Finish(*a, "inf", curve);
  EXPECT_EQ(a->completed_count(), 0);
  Finish(*a, "real", Curve(20, [](double) { return 0.9; }));
  EXPECT_EQ(a->best(), 0.9);
  EXPECT_EQ(a->completed_count(), 1);
}

TEST(CurvefittingAssessorTest, MetricMapsUseTheirDefaultValue) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 1})");
  Finish(*a, "best", Curve(20, [](double) { return 0.9; }));
  Json h = Json::array();
  for (int i = 0; i < 8; ++i) h.push_back({{"default", 0.1}, {"loss", 3}});
  msgpack::object_handle low = MsgpackOf(h);
  EXPECT_FALSE(a->AssessTrial("low", low.get()));
  ExpectMalformedHistoriesRefused(*a);
}

TEST(CurvefittingAssessorTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) {
    return Constructing<CurvefittingAssessor>(host, args);
  };
  ExpectError(construct(R"({"epoch_num": 0})"), TH_INVALID_ARGUMENT, {"\"epoch_num\""});
  ExpectError(construct(R"({"epoch_num": 10000})"), TH_INVALID_ARGUMENT, {"\"epoch_num\""});
  ExpectError(construct(R"({"epoch_num": 20.5})"), TH_INVALID_ARGUMENT, {"\"epoch_num\""});
  ExpectError(construct(R"({"start_step": -1})"), TH_INVALID_ARGUMENT, {"\"start_step\""});
  ExpectError(construct(R"({"start_step": "6"})"), TH_INVALID_ARGUMENT, {"\"start_step\""});
  ExpectError(construct(R"({"threshold": -0.1})"), TH_INVALID_ARGUMENT, {"\"threshold\""});
  ExpectError(construct(R"({"threshold": "high"})"), TH_INVALID_ARGUMENT, {"\"threshold\""});
  ExpectError(construct(R"({"gap": 0})"), TH_INVALID_ARGUMENT, {"\"gap\""});
  ExpectError(construct(R"({"seed": -1})"), TH_INVALID_ARGUMENT, {"\"seed\""});
  ExpectError(construct(R"({"optimize_mode": "sideways"})"), TH_INVALID_ARGUMENT,
              {"\"optimize_mode\""});
  ExpectError(construct(R"({"epochs": 20})"), TH_INVALID_ARGUMENT,
              {"unknown class_args \"epochs\"", "epoch_num"});
  ExpectError(construct("[]"), TH_INVALID_ARGUMENT, {"class_args must be a map"});
}

TEST(CurvefittingAssessorTest, MinimizeIsRefused) {
  RecordingHost host;
  ExpectError([&] { MakeAssessor<CurvefittingAssessor>(host, R"({"optimize_mode": "minimize"})"); },
              TH_INVALID_ARGUMENT,
              {"curvefitting", "\"optimize_mode\"", "\"minimize\" is not supported", "maximize"});
}

// Drives an assessor through a fixed script; returns every verdict.
std::vector<bool> Script(CurvefittingAssessor& a) {
  std::vector<bool> verdicts;
  auto wiggle = [](double x) { return 0.3 + 0.01 * std::sin(2 * x); };
  auto level = [](double x) { return 0.8 - 0.7 * std::exp(-0.3 * x); };
  for (int s = 1; s <= 20; ++s) {
    verdicts.push_back(Assess(a, "P", Curve(s, level)));
    verdicts.push_back(Assess(a, "Q", Curve(s, Rising)));
    verdicts.push_back(Assess(a, "R", Curve(s, wiggle)));
    if (s == 12) a.TrialEnd("R", false);
  }
  return verdicts;
}

TEST(CurvefittingAssessorTest, SameSeedSameDecisionsAndPredictions) {
  RecordingHost host_a;
  RecordingHost host_b;
  auto a = MakeAssessor<CurvefittingAssessor>(host_a, R"({"seed": 42, "gap": 2})");
  auto b = MakeAssessor<CurvefittingAssessor>(host_b, R"({"seed": 42, "gap": 2})");
  Finish(*a, "best", Curve(20, [](double) { return 0.78; }));
  Finish(*b, "best", Curve(20, [](double) { return 0.78; }));
  EXPECT_EQ(Script(*a), Script(*b));
  EXPECT_GT(a->predictions(), 10);
  // The logs carry every predicted value: identical, line for line.
  EXPECT_EQ(host_a.logs(), host_b.logs());
  EXPECT_EQ(a->SaveState(), b->SaveState());
  // The comparison can tell: another seed moves the MCMC weights, and with
  // them the logged predictions (in the 4th-5th digit).
  RecordingHost host_c;
  auto c = MakeAssessor<CurvefittingAssessor>(host_c, R"({"seed": 43, "gap": 2})");
  Finish(*c, "best", Curve(20, [](double) { return 0.78; }));
  Script(*c);
  EXPECT_NE(host_a.logs(), host_c.logs());
}

TEST(CurvefittingAssessorTest, SavedStateContinuesExactly) {
  RecordingHost host_a;
  auto a = MakeAssessor<CurvefittingAssessor>(host_a, R"({"seed": 9, "gap": 2})");
  Finish(*a, "best", Curve(20, [](double) { return 0.78; }));
  // Running trials with histories and gap counters in flight.
  Assess(*a, "P", Curve(7, Flat));
  Assess(*a, "Q", Curve(10, Rising));
  const std::string state = a->SaveState();

  RecordingHost host_b;
  auto b = MakeAssessor<CurvefittingAssessor>(
      host_b, R"({"seed": 1234, "gap": 2})");  // its own seed is replaced
  b->LoadState(state);
  EXPECT_TRUE(b->has_best());
  EXPECT_EQ(b->best(), 0.78);
  EXPECT_EQ(b->completed_count(), 1);
  EXPECT_EQ(b->predictions(), a->predictions());
  // P was judged at 7: at 8 the gap (2) is not reached, in both.
  EXPECT_TRUE(Assess(*b, "P", Curve(8, Flat)));
  EXPECT_TRUE(Assess(*a, "P", Curve(8, Flat)));
  EXPECT_EQ(b->predictions(), a->predictions());
  // Q's history came along: when it ends, its final value counts.
  a->TrialEnd("Q", true);
  b->TrialEnd("Q", true);
  EXPECT_EQ(b->best(), a->best());
  EXPECT_EQ(Script(*a), Script(*b));
  EXPECT_EQ(a->SaveState(), b->SaveState());
  // The predicted values logged after the load are the same (the rng came along).
  std::vector<std::string> after_a;
  std::vector<std::string> after_b;
  for (const auto& [level, m] : host_a.logs()) {
    if (m.find("predicted") != std::string::npos) after_a.push_back(m);
  }
  for (const auto& [level, m] : host_b.logs()) {
    if (m.find("predicted") != std::string::npos) after_b.push_back(m);
  }
  ASSERT_GE(after_a.size(), after_b.size());
  after_a.erase(after_a.begin(), after_a.end() - static_cast<std::ptrdiff_t>(after_b.size()));
  EXPECT_FALSE(after_b.empty());
  EXPECT_EQ(after_a, after_b);
}

TEST(CurvefittingAssessorTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto a = MakeAssessor<CurvefittingAssessor>(host, R"({"seed": 1})");
  Finish(*a, "best", Curve(20, [](double) { return 0.9; }));
  ExpectError([&] { a->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  const std::string other = PackText(R"({"format": "org.tunehost.medianstop", "version": 1})");
  ExpectError([&] { a->LoadState(other); }, TH_INVALID_ARGUMENT,
              {"not a state of format org.tunehost.curvefitting"});
  const std::string bad_rng =
      PackText(R"({"format": "org.tunehost.curvefitting", "version": 1, "histories": {},
                   "last_judgment": {}, "best": null, "completed": 0, "predictions": 0,
                   "rng": "not a state"})");
  ExpectError([&] { a->LoadState(bad_rng); }, TH_INVALID_ARGUMENT, {"saved state", "rng"});
  const std::string bad_history = PackText(
      R"({"format": "org.tunehost.curvefitting", "version": 1, "histories": {"A": [1, "x"]},
          "last_judgment": {}, "best": null, "completed": 0, "predictions": 0, "rng": ""})");
  ExpectError([&] { a->LoadState(bad_history); }, TH_INVALID_ARGUMENT,
              {"saved state", "histories"});
  EXPECT_TRUE(a->has_best());
  EXPECT_EQ(a->best(), 0.9);
  EXPECT_FALSE(Assess(*a, "low", Curve(10, Flat)));
}

}  // namespace
}  // namespace tunehost::plugins::testing

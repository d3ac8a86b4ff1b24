// NNI's built-in tuners that tunehost does not ship (nni-semantics.md §6):
// a config that names one is refused with the closest built-in, not only
// with "no tuner plugin named …".
#include "tunehost/host/nni_builtins.h"

#include <algorithm>
#include <cctype>

namespace tunehost::host {
namespace {

struct Missing {
  std::string_view names[2];  // NNI's registry name and its short form
  std::string_view advice;
};

constexpr Missing kMissing[] = {
    {{"smac", ""},
     "NNI's SMAC (random-forest Bayesian optimization) is not shipped with tunehost; the closest "
     "built-in is tpe (model-based, the same spaces; name: TPE)"},
    {{"metistuner", "metis"},
     "NNI's MetisTuner (Gaussian process with re-sampling of outliers) is not shipped with "
     "tunehost; the closest built-in is gp (a Gaussian process, no re-sampling; name: "
     "GPTuner)"},
    {{"dngotuner", "dngo"},
     "NNI's DNGOTuner (a neural network's features under Bayesian linear regression) is not "
     "shipped with tunehost; the closest built-in is gp (Bayesian optimization with a "
     "Gaussian process; name: GPTuner)"},
    {{"tpe_legacy", ""},
     "NNI's TPE_legacy (hyperopt's TPE) is not shipped with tunehost; its own tpe follows NNI's "
     "TPE and takes the same spaces (name: TPE; its arguments are tpe_args, not hyperopt's)"},
    {{"regularizedevolutiontuner", "regularizedevolution"},
     "NNI's RegularizedEvolutionTuner is not shipped with tunehost; the closest built-in is "
     "evolution (tournament selection, the worse individual dropped; name: Evolution)"},
    {{"networkmorphism", ""},
     "NNI's NetworkMorphism is a neural-architecture search tuner, not shipped with tunehost; "
     "for hyperparameters use tpe (name: TPE)"},
    {{"ppotuner", "ppo"},
     "NNI's PPOTuner is a neural-architecture search tuner, not shipped with tunehost; for "
     "hyperparameters use tpe (name: TPE)"},
};

}  // namespace

std::optional<std::string> MissingNniBuiltin(std::string_view kind, std::string_view name) {
  if (kind != "tuner") return std::nullopt;
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const Missing& m : kMissing) {
    for (std::string_view n : m.names) {
      if (!n.empty() && lower == n) return std::string(m.advice);
    }
  }
  return std::nullopt;
}

}  // namespace tunehost::host

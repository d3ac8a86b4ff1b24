// The `grid` tuner (org.tunehost.grid): NNI's GridSearch tuner (NNI >= 2.6,
// nni/algorithms/hpo/gridsearch_tuner.py).
//
// Categorical parameters (choice, randint) are enumerated completely, nested
// choices included: a sub-space's parameters exist only under their option.
// Numeric parameters are refined progressively on the quantiles of their
// distribution, in epochs: epoch 1 tries the quantile 1/2, epoch 2 adds 1/4
// and 3/4, epoch 3 the odd eighths, and so on. A quantile u becomes a value
// through the inverse CDF: low + (high - low) * u for the uniform types (in log
// space for the log types), mu + sigma * PhiInverse(u) for the normal types,
// then NNI's q-rounding and clipping (sdk::UserValue). Each epoch emits only
// the configurations that use at least one value new in that epoch, combined
// with every value of the other parameters; the last parameter varies
// fastest, as in NNI. Configurations already generated or imported are
// skipped (sdk::SeenConfigurations). A finite space ends with "no more
// trials", for good (until a different search space arrives); a space with a
// uniform, loguniform, normal or lognormal parameter keeps being refined.
//
// Deviations from NNI:
//   - q-types reach every value, their bounds included. NNI adds a midpoint
//     only when its value differs from both ends of its interval, where the
//     quantiles 0 and 1 count as ends although they are never tried, and it
//     stops at the first epoch that adds nothing although later epochs could
//     add values. So NNI never produces the lowest and highest value of a
//     q-type: quniform [0, 10, 2.5] gives 5, 2.5, 7.5; quniform [2, 3, 1]
//     gives only 2, while the worked example at the top of NNI's file says
//     2, 3; quniform [2, 10, 5] gives only 5. Here a midpoint is added when
//     its value is not yet in the grid, and an interval is kept while it can
//     still hold a value not yet in the grid (a q-value strictly inside it,
//     or an end at quantile 0 or 1 whose value is missing); epochs that add
//     nothing are skipped. For choice, randint and the continuous types this
//     is exactly NNI's rule; a finite q-type is now enumerated completely
//     (those three give 5, 2.5, 7.5, 0, 10; 2, 3; 5, 10, 2), but for a value
//     whose only quantile is exactly 0 or 1 (3.75 in quniform [0, 3.75, 2.5]),
//     which no grid point reaches. qnormal and qlognormal keep extending their
//     tails until doubles run out of quantiles (NNI stopped at the first
//     epoch without a new value).
//   - The inverse normal CDF is Acklam's rational approximation refined by
//     one Halley step with std::erfc (error ~1e-15), not scipy's erfinv:
//     normal values can differ from NNI's in the last bits.
//   - Import records without a numeric "value" are skipped
//     (sdk::ForEachImported); NNI's grid marks any record's parameters as
//     tried. Configurations are compared by sdk::CanonicalKey (5 equals 5.0),
//     NNI compares JSON text.
//   - An update with the same search space keeps the enumeration where it is
//     (NNI restarts it, skipping what was tried, which emits the same
//     sequence, only slower).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"
#include "tunehost/sdk/cpp/seen.h"

namespace tunehost::plugins {

// The standard normal quantile function Phi^-1(p): -inf at 0, +inf at 1,
// NaN outside [0, 1]. Acklam's algorithm (relative error 1.15e-9) refined by
// one Halley step on std::erfc, which brings it to about 1e-15 where the
// step is finite (it is skipped in the far tails, p < ~1e-300).
double InverseNormalCdf(double p);

class GridTuner : public sdk::Tuner {
 public:
  // Largest grid (sum over parameters of their values) a saved state may ask
  // for; a real run needs millions of trials to get there.
  static constexpr size_t kMaxRestoredGridPoints = size_t{1} << 20;

  // class_args: `optimize_mode` ("maximize" or "minimize", ignored). Anything
  // else is refused with Error(TH_INVALID_ARGUMENT) naming the argument.
  GridTuner(sdk::HostRef host, const msgpack::object& class_args);

  void UpdateSearchSpace(const msgpack::object& space) override;
  bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) override;
  void ImportData(const msgpack::object& records) override;
  std::string SaveState() override;
  void LoadState(std::string_view state) override;

  // How many times the grid has been refined (0 in epoch 1).
  int64_t refinements() const { return grid_.refinements; }
  bool exhausted() const { return grid_.done; }
  size_t seen_count() const { return seen_.size(); }

 private:
  // The enumeration, per parameter (index in SearchSpace::params()).
  struct Grid {
    // Categorical: option indices 0..size-1. Numeric: quantiles in (0, 1), in
    // the order they were added.
    std::vector<std::vector<double>> points;
    // Numeric: the values of `points` (sdk::UserValue), to tell new ones.
    std::vector<std::set<double>> values;
    // Numeric: intervals between neighbouring quantiles (or 0 and 1) that can
    // still hold a value not in the grid; each is split in the next epoch.
    std::vector<std::vector<std::pair<double, double>>> divisions;
    // points[i].size() before the current epoch: a vector whose every index is
    // below its bar was generated in an earlier epoch.
    std::vector<size_t> bar;
    // The current index into points[i] per parameter; nullopt at the start
    // of an epoch.
    std::optional<std::vector<size_t>> vector;
    int64_t refinements = 0;
    bool done = false;
  };

  // Where a saved state was, kept until the search space it belongs to is set.
  struct Pending {
    std::string space_key;
    int64_t refinements = 0;
    std::optional<std::vector<size_t>> vector;
    bool done = false;
  };

  Grid InitialGrid() const;
  // Splits every division once; repeats while nothing new was added but some
  // division remains. False when nothing can be added any more.
  bool Refine(Grid& g) const;
  // One split of every division; true when some value was added.
  bool RefineOnce(Grid& g) const;
  bool MayHoldNewValue(size_t i, const Grid& g, double l, double r) const;
  double Quantile(size_t i, double u) const;  // internal-format value
  double Value(size_t i, double u) const;     // what a trial sees
  sdk::Assignment Current(const Grid& g) const;
  void NextVector(Grid& g) const;
  // The next configuration of the enumeration, or nullopt when it is over.
  std::optional<sdk::Assignment> Suggest();
  // The grid of `p` for the current space; throws on an inconsistent state.
  Grid Restore(const Pending& p) const;
  void LogGridSize(const Grid& g, const char* what) const;

  std::optional<sdk::SearchSpace> space_;
  std::string space_key_;  // sdk::CanonicalKey of the search space
  Grid grid_;
  // Every configuration generated or imported.
  sdk::SeenConfigurations seen_;
  std::optional<Pending> pending_;
};

}  // namespace tunehost::plugins

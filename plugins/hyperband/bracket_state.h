// The brackets' part of the hyperband and bohb saved state, after the
// header, the random generator, R and eta (BracketTuner::SaveState):
//   next_s, iteration, next_bracket, credits [id...],
//   queue [[bracket, round, slot]...],
//   brackets [[number, iteration, s, [config bin...],
//              [[[config, id, result|nil, ended]...]...]]...]
#pragma once

#include <functional>
#include <string>

#include <msgpack.hpp>

#include "bracket_book.h"

namespace tunehost::plugins::hyperband {

// Reports a bad saved state; never returns (throws).
using OnBadState = std::function<void(const std::string& what)>;

// Packs the six entries (key, value) above.
void PackProgress(const Progress& progress, msgpack::packer<msgpack::sbuffer>& pk);

// Reads and checks them from a state map saved for `geometry` (R and eta
// must match it): every queued slot exists and is not handed out, every
// slot not handed out is queued, only a bracket's last round is unfinished,
// no parameter id runs twice.
Progress UnpackProgress(const msgpack::object& state, const Geometry& geometry,
                        const OnBadState& bad);

}  // namespace tunehost::plugins::hyperband

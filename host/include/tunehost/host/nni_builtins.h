// NNI's built-in algorithms that tunehost does not ship, and what to use
// instead (nni-semantics.md §6).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tunehost::host {

// For a tuner name (any case, NNI's long or short spelling) that is one of
// NNI's built-ins without a tunehost plugin: a sentence naming the closest
// built-in and what it lacks. nullopt for any other name, and for every
// assessor (NNI's two, Medianstop and Curvefitting, are shipped).
std::optional<std::string> MissingNniBuiltin(std::string_view kind, std::string_view name);

}  // namespace tunehost::host
